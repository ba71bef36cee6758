import Sluice

/// A control message of the transfer protocol, decoded and checked (every length within its
/// limit, every field in range). DATA is not a `Frame`: its payload is handed over in pieces
/// as it arrives (`FrameDecoder.Item.data`), so a 4 MiB frame never needs 4 MiB of buffer.
enum Frame: Equatable, Sendable {
    case hello(version: UInt16, capabilities: Set<String>)
    case file(EntryHeader)
    case directory(EntryHeader)
    case end(size: UInt64, digest: [UInt8])
    case abort(reason: String)
    case bye
    case join(TransferJoin)
    case range(RangeHeader)
    case rangeEnd(length: UInt64, digest: [UInt8], fileDigest: [UInt8])
    /// The SHA-256 of the bytes the receiver held of a resumed file or range (`held-sha256`).
    case held(digest: [UInt8])
    /// A symbolic or hard link (`links`).
    case link(LinkHeader)
    /// The next `length` bytes of the file being sent are zeros, not sent (`holes`).
    case hole(length: UInt64)
    /// An extended attribute of the entry announced next (`xattrs`).
    case xattr(ExtendedAttribute)
    /// The owner of the entry announced next (`owners`).
    case owner(EntryOwner)
    /// What the receiver has at a path (`sync`).
    case check(CheckHeader)
    /// Remove what is under a directory that the session did not CHECK (`--delete`).
    case prune(path: [UInt8], dryRun: Bool)
    /// A path PRUNE removed (or, on a dry run, would remove).
    case gone(path: [UInt8])
    /// `watch`: rename `from` to `to` within the receiver's directory (a file, a link, or a
    /// directory with what it holds), answered as an entry.
    case move(from: [UInt8], to: [UInt8])
    /// `watch` with `delete`: remove `path` (a directory with what it holds), each path
    /// removed reported with GONE, then answered as an entry.
    case remove(path: [UInt8])
    /// Signatures of the receiver's copy of a file sent as a delta.
    case signatures(SignatureBatch)
    /// Blocks `index ..< index + count` of the receiver's copy, in a delta.
    case copy(index: UInt64, count: UInt32)
    /// The resume token of the resumable FILE or RANGE announced next (`resume-token`).
    case token([UInt8])
    /// A device, FIFO or socket (`specials`).
    case special(SpecialHeader)
    /// The start of a BATCH (`batch`): the next `length` bytes are FILE, DATA, END and ABORT
    /// messages of small files, stored together; the decoder says where it ends
    /// (`FrameDecoder.Item.batchEnd`).
    case batch(length: Int)
    case joined
    /// The go-ahead for a file's data from `offset`; `vouched` (`resume-token`): the bytes held
    /// were written under the file's TOKEN, so no HELD follows.
    case accept(offset: UInt64, vouched: Bool = false)
    case stored
    case refused(code: Wire.RefusalCode, reason: String)
    case failed(code: Wire.FailureCode, reason: String)
    /// The answer to a CHECK (`sync`).
    case have(HaveAnswer)
    case error(reason: String)

    var type: Wire.MessageType {
        switch self {
        case .hello: return .hello
        case .file: return .file
        case .directory: return .directory
        case .end: return .end
        case .abort: return .abort
        case .bye: return .bye
        case .join: return .join
        case .range: return .range
        case .rangeEnd: return .rangeEnd
        case .held: return .held
        case .link: return .link
        case .hole: return .hole
        case .xattr: return .xattr
        case .owner: return .owner
        case .check: return .check
        case .have: return .have
        case .prune: return .prune
        case .gone: return .gone
        case .move: return .move
        case .remove: return .remove
        case .signatures: return .signatures
        case .copy: return .copy
        case .token: return .token
        case .special: return .special
        case .batch: return .batch
        case .joined: return .joined
        case .accept: return .accept
        case .stored: return .stored
        case .refused: return .refused
        case .failed: return .failed
        case .error: return .error
        }
    }

    /// The whole message: type, length, payload.
    var encoded: [UInt8] {
        switch self {
        case .hello(_, let capabilities): return MessageWriter.hello(capabilities: capabilities.sorted())
        case .file(let header): return MessageWriter.entry(.file, header)
        case .directory(let header): return MessageWriter.entry(.directory, header)
        case .end(let size, let digest): return MessageWriter.end(size: size, digest: digest)
        case .abort(let reason): return MessageWriter.text(.abort, reason)
        case .bye: return MessageWriter.message(.bye)
        case .join(let join): return MessageWriter.join(join)
        case .range(let header): return MessageWriter.range(header)
        case .rangeEnd(let length, let digest, let fileDigest):
            return MessageWriter.rangeEnd(length: length, digest: digest, fileDigest: fileDigest)
        case .held(let digest): return MessageWriter.message(.held) { $0.raw(digest) }
        case .link(let link): return MessageWriter.link(link)
        case .hole(let length): return MessageWriter.message(.hole) { $0.u64(length) }
        case .xattr(let attribute): return MessageWriter.xattr(attribute)
        case .owner(let owner): return MessageWriter.owner(owner)
        case .check(let check): return MessageWriter.check(check)
        case .prune(let path, let dryRun):
            return MessageWriter.message(.prune) { w in
                w.u8(dryRun ? Wire.PruneFlags.dryRun : 0)
                w.u16(UInt16(path.count))
                w.raw(path)
            }
        case .gone(let path): return MessageWriter.message(.gone) { $0.raw(path) }
        case .remove(let path): return MessageWriter.message(.remove) { $0.raw(path) }
        case .move(let from, let to):
            return MessageWriter.message(.move) { w in
                w.u16(UInt16(from.count))
                w.raw(from)
                w.u16(UInt16(to.count))
                w.raw(to)
            }
        case .signatures(let batch):
            return MessageWriter.message(.signatures) { w in
                w.u32(UInt32(batch.blockSize))
                w.u64(batch.size)
                w.u64(batch.first)
                for signature in batch.signatures {
                    w.u32(signature.weak)
                    w.u64(signature.strong)
                }
            }
        case .copy(let index, let count):
            return MessageWriter.message(.copy) { w in
                w.u64(index)
                w.u32(count)
            }
        case .token(let token):
            return MessageWriter.message(.token) { $0.raw(token) }
        case .special(let special): return MessageWriter.special(special)
        case .batch(let length):
            // The header alone: the messages it holds follow as they are.
            var header = [UInt8](repeating: 0, count: Wire.frameHeaderSize)
            header.withUnsafeMutableBytes { Wire.putFrameHeader(.batch, length: length, into: $0) }
            return header
        case .have(let have):
            return MessageWriter.message(.have) { w in
                w.u8(have.status.rawValue)
                w.u8(UInt8(truncatingIfNeeded: have.differences))
                if have.differences > 0xFF { w.u8(UInt8(truncatingIfNeeded: have.differences >> 8)) }
            }
        case .joined: return MessageWriter.message(.joined)
        case .accept(let offset, let vouched): return MessageWriter.accept(offset: offset, vouched: vouched)
        case .stored: return MessageWriter.message(.stored)
        case .refused(let code, let reason): return MessageWriter.answer(.refused, code: code.rawValue, reason: reason)
        case .failed(let code, let reason): return MessageWriter.answer(.failed, code: code.rawValue, reason: reason)
        case .error(let reason): return MessageWriter.text(.error, reason)
        }
    }

    /// The largest encoded answer a receiver sends for one message (REFUSED/FAILED with the
    /// longest reason): a connection keeps this much outbound room before it parses a message.
    static let largestAnswer = Wire.frameHeaderSize + Wire.MessageType.refused.maxPayload
}

/// Who sent the bytes a decoder reads: each side accepts only the message types its peer may
/// send.
enum FrameDirection: Sendable {
    /// Sender → receiver: HELLO, FILE, DIR, DATA, END, ABORT, BYE, JOIN, RANGE, RANGE-END,
    /// HELD, LINK, HOLE, XATTR, OWNER, CHECK, PRUNE, COPY, TOKEN, SPECIAL, BATCH, MOVE, REMOVE,
    /// ERROR.
    case toReceiver
    /// Receiver → sender: HELLO, ACCEPT, STORED, REFUSED, FAILED, JOINED, HAVE, GONE, SIGS, BYE,
    /// ERROR.
    case toSender

    func allows(_ type: Wire.MessageType) -> Bool {
        switch (self, type) {
        case (_, .hello), (_, .bye), (_, .error): return true
        case (.toReceiver, .file), (.toReceiver, .directory), (.toReceiver, .data), (.toReceiver, .end),
            (.toReceiver, .abort), (.toReceiver, .join), (.toReceiver, .range), (.toReceiver, .rangeEnd),
            (.toReceiver, .held), (.toReceiver, .link), (.toReceiver, .hole), (.toReceiver, .xattr),
            (.toReceiver, .owner), (.toReceiver, .check), (.toReceiver, .prune), (.toReceiver, .copy),
            (.toReceiver, .token), (.toReceiver, .special), (.toReceiver, .batch), (.toReceiver, .move),
            (.toReceiver, .remove):
            return true
        case (.toReceiver, .accept), (.toReceiver, .stored), (.toReceiver, .refused), (.toReceiver, .failed),
            (.toReceiver, .joined), (.toReceiver, .have), (.toReceiver, .gone), (.toReceiver, .signatures):
            return false
        case (.toSender, .accept), (.toSender, .stored), (.toSender, .refused), (.toSender, .failed),
            (.toSender, .joined), (.toSender, .have), (.toSender, .gone), (.toSender, .signatures):
            return true
        case (.toSender, .file), (.toSender, .directory), (.toSender, .data), (.toSender, .end),
            (.toSender, .abort), (.toSender, .join), (.toSender, .range), (.toSender, .rangeEnd),
            (.toSender, .held), (.toSender, .link), (.toSender, .hole), (.toSender, .xattr), (.toSender, .owner),
            (.toSender, .check), (.toSender, .prune), (.toSender, .copy), (.toSender, .token),
            (.toSender, .special), (.toSender, .batch), (.toSender, .move), (.toSender, .remove):
            return false
        }
    }
}

/// The one decoder of the transfer protocol, used by both ends: the magic, then messages, from
/// whatever pieces the bytes arrive in. Pure: it reads the bytes it is shown and says how many
/// it used; it never allocates for a length before checking it against its type's limit.
///
/// ```swift
/// var decoder = FrameDecoder(direction: .toReceiver)
/// while true {
///     switch decoder.next(buffer.readable) {
///     case .item(let item, let used): buffer.consume(used); handle(item)
///     case .needMore: return
///     case .violation(let reason): fail(reason)
///     }
/// }
/// ```
struct FrameDecoder: Sendable {
    enum Item: Equatable {
        /// The magic was seen in full.
        case magic
        case frame(Frame)
        /// A piece of a DATA payload (never empty); `endsFrame` on its last piece.
        case data(UnsafeRawBufferPointer, endsFrame: Bool)
        /// The last message of the BATCH that `.frame(.batch)` began was taken (no bytes).
        case batchEnd

        static func == (a: Item, b: Item) -> Bool {
            switch (a, b) {
            case (.magic, .magic): return true
            case (.frame(let x), .frame(let y)): return x == y
            case (.data(let x, let e1), .data(let y, let e2)): return e1 == e2 && x.elementsEqual(y)
            case (.batchEnd, .batchEnd): return true
            case (.magic, _), (.frame, _), (.data, _), (.batchEnd, _): return false
            }
        }
    }

    enum Step: Equatable {
        /// An item, and how many bytes of the input it used.
        case item(Item, consumed: Int)
        /// Nothing complete yet (and nothing used): call again with more bytes.
        case needMore
        /// The bytes break the protocol: the reason, for the log and an ERROR message.
        case violation(String)
    }

    let direction: FrameDirection
    private var magicSeen = false
    /// Bytes of the current DATA payload still to come.
    private(set) var dataRemaining = 0
    /// Bytes of the open BATCH's payload still to come; nil outside a BATCH.
    private(set) var batchRemaining: Int?
    private var failed = false

    init(direction: FrameDirection) {
        self.direction = direction
    }

    /// True between the pieces of a DATA payload.
    var inData: Bool { dataRemaining > 0 }

    /// Decodes the next item from the front of `bytes`.
    mutating func next(_ bytes: UnsafeRawBufferPointer) -> Step {
        guard !failed else { return .violation("the stream already broke the protocol") }
        if !magicSeen {
            let n = min(bytes.count, Wire.magic.count)
            for i in 0..<n where bytes[i] != Wire.magic[i] {
                return fail(
                    direction == .toReceiver ? "wrong magic: not a sluice sender" : "wrong magic: not a sluice receiver"
                )
            }
            guard n == Wire.magic.count else { return .needMore }
            magicSeen = true
            return .item(.magic, consumed: n)
        }
        if dataRemaining > 0 {
            guard !bytes.isEmpty else { return .needMore }
            let n = min(bytes.count, dataRemaining)
            dataRemaining -= n
            batchRemaining? -= n
            return .item(
                .data(UnsafeRawBufferPointer(rebasing: bytes[0..<n]), endsFrame: dataRemaining == 0), consumed: n)
        }
        if batchRemaining == 0 {
            batchRemaining = nil
            return .item(.batchEnd, consumed: 0)
        }
        guard bytes.count >= Wire.frameHeaderSize else { return .needMore }
        let typeByte = bytes[0]
        let length = Int(bytes[1]) << 24 | Int(bytes[2]) << 16 | Int(bytes[3]) << 8 | Int(bytes[4])
        guard let type = Wire.MessageType(rawValue: typeByte) else {
            return fail("unknown message type 0x\(String(typeByte, radix: 16))")
        }
        guard direction.allows(type) else { return fail("\(type.name) is not a message this side accepts") }
        guard length <= type.maxPayload else {
            return fail("\(type.name) message of \(length) bytes exceeds its limit of \(type.maxPayload)")
        }
        if let left = batchRemaining {
            guard Wire.batchHolds(type) else { return fail("\(type.name) inside a BATCH") }
            guard Wire.frameHeaderSize + length <= left else {
                return fail("\(type.name) crosses the end of its BATCH")
            }
        }
        if type == .batch {
            guard length > 0 else { return fail("empty BATCH message") }
            batchRemaining = length
            return .item(.frame(.batch(length: length)), consumed: Wire.frameHeaderSize)
        }
        if type == .data {
            guard length > 0 else { return fail("empty DATA message") }
            // The header is taken with the first byte of its payload, so every DATA item
            // carries bytes.
            let n = min(bytes.count - Wire.frameHeaderSize, length)
            guard n > 0 else { return .needMore }
            dataRemaining = length - n
            batchRemaining? -= Wire.frameHeaderSize + n
            let piece = UnsafeRawBufferPointer(rebasing: bytes[Wire.frameHeaderSize..<Wire.frameHeaderSize + n])
            return .item(.data(piece, endsFrame: dataRemaining == 0), consumed: Wire.frameHeaderSize + n)
        }
        guard bytes.count >= Wire.frameHeaderSize + length else { return .needMore }
        let payload = UnsafeRawBufferPointer(rebasing: bytes[Wire.frameHeaderSize..<Wire.frameHeaderSize + length])
        guard let frame = Self.decode(type, payload) else { return fail("malformed \(type.name) message") }
        batchRemaining? -= Wire.frameHeaderSize + length
        return .item(.frame(frame), consumed: Wire.frameHeaderSize + length)
    }

    /// Gives back the last `count` bytes of the DATA piece just returned: the caller could not
    /// take them yet and will show them again.
    mutating func unread(_ count: Int) {
        guard count > 0 else { return }
        dataRemaining += count
        batchRemaining? += count
    }

    private mutating func fail(_ reason: String) -> Step {
        failed = true
        return .violation(reason)
    }

    /// A control message's payload, or nil when malformed.
    static func decode(_ type: Wire.MessageType, _ payload: UnsafeRawBufferPointer) -> Frame? {
        var reader = MessageReader(payload)
        switch type {
        case .hello:
            guard let (version, capabilities) = MessageReader.hello(payload) else { return nil }
            return .hello(version: version, capabilities: capabilities)
        case .file:
            return MessageReader.entry(.file, payload).map(Frame.file)
        case .directory:
            return MessageReader.entry(.directory, payload).map(Frame.directory)
        case .end:
            // The digest is the agreed one's size: the machine checks which.
            guard TransferDigest.allCases.contains(where: { payload.count == 8 + $0.byteCount }),
                let size = reader.u64()
            else { return nil }
            return .end(size: size, digest: reader.rest())
        case .abort:
            return .abort(reason: PeerText.sanitized(reader.rest()))
        case .bye:
            return .bye
        case .join:
            return MessageReader.join(payload).map(Frame.join)
        case .range:
            return MessageReader.range(payload).map(Frame.range)
        case .rangeEnd:
            guard let algorithm = TransferDigest.allCases.first(where: { payload.count == 8 + 2 * $0.byteCount }),
                let length = reader.u64(), let digest = reader.raw(algorithm.byteCount)
            else { return nil }
            return .rangeEnd(length: length, digest: digest, fileDigest: reader.rest())
        case .held:
            guard payload.count == SHA256Digest.byteCount else { return nil }
            return .held(digest: reader.rest())
        case .link:
            return MessageReader.link(payload).map(Frame.link)
        case .hole:
            guard payload.count == 8, let length = reader.u64(), length > 0 else { return nil }
            return .hole(length: length)
        case .xattr:
            return MessageReader.xattr(payload).map(Frame.xattr)
        case .owner:
            return MessageReader.owner(payload).map(Frame.owner)
        case .check:
            return MessageReader.check(payload).map(Frame.check)
        case .prune:
            guard let flags = reader.u8(), flags & ~Wire.PruneFlags.dryRun == 0, let length = reader.u16(),
                Int(length) <= Wire.maxPathBytes, let path = reader.raw(Int(length)), reader.atEnd
            else { return nil }
            return .prune(path: path, dryRun: flags & Wire.PruneFlags.dryRun != 0)
        case .gone:
            return .gone(path: reader.rest())
        case .remove:
            return .remove(path: reader.rest())
        case .move:
            guard let fromLength = reader.u16(), Int(fromLength) <= Wire.maxPathBytes,
                let from = reader.raw(Int(fromLength)), let toLength = reader.u16(), Int(toLength) <= Wire.maxPathBytes,
                let to = reader.raw(Int(toLength)), reader.atEnd
            else { return nil }
            return .move(from: from, to: to)
        case .signatures:
            guard let blockSize = reader.u32(), (Delta.minimumBlock...Delta.maximumBlock).contains(Int(blockSize)),
                let size = reader.u64(), let first = reader.u64(), reader.remaining % Delta.signatureBytes == 0
            else { return nil }
            var signatures: [Delta.Signature] = []
            while !reader.atEnd, let weak = reader.u32(), let strong = reader.u64() {
                signatures.append(Delta.Signature(weak: weak, strong: strong))
            }
            return .signatures(
                SignatureBatch(blockSize: Int(blockSize), size: size, first: first, signatures: signatures))
        case .copy:
            guard payload.count == 12, let index = reader.u64(), let count = reader.u32(), count > 0 else { return nil }
            return .copy(index: index, count: count)
        case .token:
            guard payload.count == Wire.resumeTokenBytes else { return nil }
            return .token(reader.rest())
        case .special:
            return MessageReader.special(payload).map(Frame.special)
        case .have:
            // A third byte (`sync-attributes`) only when it has a bit set; which bits the
            // sender takes is its machine's to say.
            guard payload.count == 2 || payload.count == 3, let byte = reader.u8(),
                let status = Wire.HaveStatus(rawValue: byte), let low = reader.u8()
            else { return nil }
            let high = reader.u8() ?? 0
            guard payload.count == 2 || high != 0, high < 2 else { return nil }
            return .have(HaveAnswer(status: status, differences: UInt16(high) << 8 | UInt16(low)))
        case .joined:
            return .joined
        case .accept:
            // A flags byte only to say the held bytes are vouched for (`resume-token`).
            guard payload.count == 8 || payload.count == 9, let offset = reader.u64() else { return nil }
            if payload.count == 9 {
                guard reader.u8() == Wire.acceptVouched else { return nil }
                return .accept(offset: offset, vouched: true)
            }
            return .accept(offset: offset)
        case .stored:
            return .stored
        case .refused:
            guard let byte = reader.u8() else { return nil }
            return .refused(code: Wire.RefusalCode(rawValue: byte) ?? .other, reason: PeerText.sanitized(reader.rest()))
        case .failed:
            guard let byte = reader.u8() else { return nil }
            return .failed(code: Wire.FailureCode(rawValue: byte) ?? .io, reason: PeerText.sanitized(reader.rest()))
        case .error:
            return .error(reason: PeerText.sanitized(reader.rest()))
        case .data, .batch:
            return nil
        }
    }
}
