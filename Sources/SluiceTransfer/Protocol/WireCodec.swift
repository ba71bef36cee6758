import Sluice

/// Builds messages into a byte array.
struct MessageWriter {
    private(set) var bytes: [UInt8] = []

    mutating func u8(_ v: UInt8) { bytes.append(v) }
    mutating func u16(_ v: UInt16) { withUnsafeBytes(of: v.bigEndian) { bytes.append(contentsOf: $0) } }
    mutating func u32(_ v: UInt32) { withUnsafeBytes(of: v.bigEndian) { bytes.append(contentsOf: $0) } }
    mutating func u64(_ v: UInt64) { withUnsafeBytes(of: v.bigEndian) { bytes.append(contentsOf: $0) } }
    mutating func raw<Bytes: Collection<UInt8>>(_ v: Bytes) { bytes.append(contentsOf: v) }

    /// A whole message: header and payload, in one array (the header written once the
    /// payload's length is known: no array for the payload, nor a third for the two joined,
    /// and room for a file's FILE or END without growing).
    static func message(_ type: Wire.MessageType, _ build: (inout MessageWriter) -> Void = { _ in }) -> [UInt8] {
        var writer = MessageWriter()
        writer.bytes.reserveCapacity(Self.usualSize)
        writer.bytes.append(contentsOf: repeatElement(0, count: Wire.frameHeaderSize))
        build(&writer)
        let length = writer.bytes.count - Wire.frameHeaderSize
        precondition(length <= type.maxPayload, "\(type) payload exceeds its limit")
        writer.bytes.withUnsafeMutableBytes { Wire.putFrameHeader(type, length: length, into: $0) }
        return writer.bytes
    }

    /// The room a message is built in at first: a FILE with a path of a hundred-odd bytes, an
    /// END with a SHA-256 digest.
    static let usualSize = 192

    static func hello(capabilities: [String]) -> [UInt8] {
        message(.hello) { w in
            w.u16(Wire.version)
            w.u8(UInt8(capabilities.count))
            for capability in capabilities {
                let utf8 = Array(capability.utf8)
                w.u8(UInt8(utf8.count))
                w.raw(utf8)
            }
        }
    }

    static func entry(_ type: Wire.MessageType, _ header: EntryHeader) -> [UInt8] {
        message(type) { w in
            if type == .file {
                w.u8(header.flags)
                w.u64(header.size)
            }
            w.u32(header.mode)
            w.u64(UInt64(bitPattern: header.mtimeSeconds))
            w.u32(header.mtimeNanoseconds)
            w.u16(UInt16(header.path.count))
            w.raw(header.path)
        }
    }

    static func join(_ join: TransferJoin) -> [UInt8] {
        message(.join) { w in
            w.raw(join.id)
            w.u16(UInt16(join.index))
            w.u16(UInt16(join.count))
            if let group = join.group {
                w.u32(UInt32(group.task))
                w.u32(UInt32(group.tasks))
                w.u8(UInt8(group.name.count))
                w.raw(group.name)
            }
        }
    }

    static func range(_ header: RangeHeader) -> [UInt8] {
        let entry = MessageWriter.entry(.file, header.entry).dropFirst(Wire.frameHeaderSize)
        return message(.range) { w in
            w.u64(header.range.start)
            w.u64(header.range.length)
            w.raw(entry)
        }
    }

    static func rangeEnd(length: UInt64, digest: [UInt8], fileDigest: [UInt8]) -> [UInt8] {
        message(.rangeEnd) { w in
            w.u64(length)
            w.raw(digest)
            w.raw(fileDigest)
        }
    }

    static func end(size: UInt64, digest: [UInt8]) -> [UInt8] {
        message(.end) { w in
            w.u64(size)
            w.raw(digest)
        }
    }

    static func accept(offset: UInt64, vouched: Bool = false) -> [UInt8] {
        message(.accept) { w in
            w.u64(offset)
            if vouched { w.u8(Wire.acceptVouched) }
        }
    }

    static func link(_ link: LinkHeader) -> [UInt8] {
        message(.link) { w in
            w.u8(link.kind.rawValue | (link.replace ? Wire.linkReplaceBit : 0))
            w.u64(UInt64(bitPattern: link.mtimeSeconds))
            w.u32(link.mtimeNanoseconds)
            w.u16(UInt16(link.path.count))
            w.raw(link.path)
            w.u16(UInt16(link.target.count))
            w.raw(link.target)
        }
    }

    static func special(_ special: SpecialHeader) -> [UInt8] {
        message(.special) { w in
            w.u8(special.replace ? Wire.specialReplaceBit : 0)
            w.u32(special.mode)
            w.u64(UInt64(bitPattern: special.mtimeSeconds))
            w.u32(special.mtimeNanoseconds)
            w.u32(special.major)
            w.u32(special.minor)
            w.u16(UInt16(special.path.count))
            w.raw(special.path)
        }
    }

    static func check(_ check: CheckHeader) -> [UInt8] {
        message(.check) { w in
            w.u8(check.kind.rawValue)
            w.u8(check.flags)
            w.u64(check.size)
            w.u32(check.mode)
            w.u64(UInt64(bitPattern: check.mtimeSeconds))
            w.u32(check.mtimeNanoseconds)
            w.u16(UInt16(check.path.count))
            w.raw(check.path)
            w.u16(UInt16(check.target.count))
            w.raw(check.target)
            if check.comparesContents {
                w.u8(UInt8(check.digest.count))
                w.raw(check.digest)
            }
        }
    }

    static func xattr(_ attribute: ExtendedAttribute) -> [UInt8] {
        let name = Array(attribute.name.utf8)
        return message(.xattr) { w in
            w.u8(UInt8(name.count))
            w.raw(name)
            w.raw(attribute.value)
        }
    }

    static func owner(_ owner: EntryOwner) -> [UInt8] {
        message(.owner) { w in
            w.u32(owner.uid)
            w.u32(owner.gid)
            for name in [owner.user, owner.group] {
                let utf8 = Array(name.utf8)
                w.u8(UInt8(utf8.count))
                w.raw(utf8)
            }
        }
    }

    static func answer(_ type: Wire.MessageType, code: UInt8, reason: String) -> [UInt8] {
        message(type) { w in
            w.u8(code)
            w.raw(Wire.clip(reason))
        }
    }

    static func text(_ type: Wire.MessageType, _ reason: String) -> [UInt8] {
        message(type) { $0.raw(Wire.clip(reason)) }
    }
}

extension Wire {
    /// `reason` as UTF-8, cut to `maxReasonBytes` at a character boundary.
    static func clip(_ reason: String) -> [UInt8] {
        var out: [UInt8] = []
        for scalar in reason.unicodeScalars {
            let utf8 = Array(String(scalar).utf8)
            if out.count + utf8.count > maxReasonBytes { break }
            out.append(contentsOf: utf8)
        }
        return out
    }
}

/// Reads the fields of one message payload, checking every length against what is left.
struct MessageReader {
    private let bytes: UnsafeRawBufferPointer
    private var index = 0

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    var remaining: Int { bytes.count - index }
    var atEnd: Bool { index == bytes.count }

    mutating func u8() -> UInt8? {
        guard remaining >= 1 else { return nil }
        defer { index += 1 }
        return bytes[index]
    }

    mutating func u16() -> UInt16? { integer(UInt16.self) }
    mutating func u32() -> UInt32? { integer(UInt32.self) }
    mutating func u64() -> UInt64? { integer(UInt64.self) }

    private mutating func integer<T: FixedWidthInteger>(_: T.Type) -> T? {
        let size = MemoryLayout<T>.size
        guard remaining >= size else { return nil }
        var value: T = 0
        for i in 0..<size { value = value << 8 | T(bytes[index + i]) }
        index += size
        return value
    }

    mutating func raw(_ count: Int) -> [UInt8]? {
        guard count >= 0, remaining >= count else { return nil }
        defer { index += count }
        return Array(bytes[index..<index + count])
    }

    mutating func rest() -> [UInt8] { raw(remaining) ?? [] }

    /// A HELLO payload: the version and the capabilities, or nil if malformed.
    static func hello(_ payload: UnsafeRawBufferPointer) -> (version: UInt16, capabilities: Set<String>)? {
        var r = MessageReader(payload)
        guard let version = r.u16(), let count = r.u8(), Int(count) <= Wire.maxCapabilities else { return nil }
        var capabilities = Set<String>()
        for _ in 0..<count {
            guard let length = r.u8(), length >= 1, Int(length) <= Wire.maxCapabilityBytes,
                let name = r.raw(Int(length))
            else { return nil }
            capabilities.insert(String(decoding: name, as: UTF8.self))
        }
        guard r.atEnd else { return nil }
        return (version, capabilities)
    }

    /// A JOIN payload: exactly the id, an index below the count, a count of 2 to
    /// `Wire.maxStreams`; or (`groups`) the same with a count of 1 to `Wire.maxStreams`, then a
    /// task below the tasks, the tasks (1 to `Wire.maxGroupTasks`) and the group's name (1 to
    /// `Wire.maxGroupNameBytes` bytes, no control character), and nothing after it.
    static func join(_ payload: UnsafeRawBufferPointer) -> TransferJoin? {
        var r = MessageReader(payload)
        guard let id = r.raw(Wire.transferIDBytes), let index = r.u16(), let count = r.u16(), index < count,
            Int(count) <= Wire.maxStreams
        else { return nil }
        guard !r.atEnd else {
            guard count >= 2 else { return nil }
            return TransferJoin(id: id, index: Int(index), count: Int(count))
        }
        guard let task = r.u32(), let tasks = r.u32(), task < tasks, Int(tasks) <= Wire.maxGroupTasks,
            let length = r.u8(), length >= 1, Int(length) <= Wire.maxGroupNameBytes, let name = r.raw(Int(length)),
            r.atEnd, name.allSatisfy({ $0 >= 0x20 && $0 != 0x7F })
        else { return nil }
        return TransferJoin(
            id: id, index: Int(index), count: Int(count),
            group: TaskGroupJoin(task: Int(task), tasks: Int(tasks), name: name))
    }

    /// A RANGE payload: start and length, then a FILE payload. The range itself is checked
    /// against the size by the receiver machine (a refusal, not a malformed message).
    static func range(_ payload: UnsafeRawBufferPointer) -> RangeHeader? {
        var r = MessageReader(payload)
        guard payload.count >= 16, let start = r.u64(), let length = r.u64(),
            let entry = MessageReader.entry(.file, UnsafeRawBufferPointer(rebasing: payload[16...]))
        else { return nil }
        return RangeHeader(range: ByteRange(start: start, length: length), entry: entry)
    }

    /// A LINK payload, or nil if malformed: an unknown kind, nanoseconds out of range, an empty
    /// or over-long path or target, or a NUL in the target. The paths themselves are checked by
    /// the receiver machine (a refusal, not a malformed message).
    static func link(_ payload: UnsafeRawBufferPointer) -> LinkHeader? {
        var r = MessageReader(payload)
        guard let kindByte = r.u8(), let kind = Wire.LinkKind(rawValue: kindByte & ~Wire.linkReplaceBit),
            let seconds = r.u64(),
            let nanoseconds = r.u32(), nanoseconds < 1_000_000_000, let pathLength = r.u16(),
            Int(pathLength) <= Wire.maxPathBytes, let path = r.raw(Int(pathLength)), let targetLength = r.u16(),
            targetLength > 0, Int(targetLength) <= Wire.maxPathBytes, let target = r.raw(Int(targetLength)),
            r.atEnd, !target.contains(0)
        else { return nil }
        return LinkHeader(
            kind: kind, mtimeSeconds: Int64(bitPattern: seconds), mtimeNanoseconds: nanoseconds, path: path,
            target: target, replace: kindByte & Wire.linkReplaceBit != 0)
    }

    /// A SPECIAL payload, or nil if malformed: an unknown flag, a type that is not a device,
    /// FIFO or socket (a file or directory goes as FILE or DIR), mode bits past `0o7777`,
    /// nanoseconds out of range, device numbers for a FIFO or socket, an over-long path. The
    /// path itself is checked by the receiver machine (a refusal, not a malformed message).
    static func special(_ payload: UnsafeRawBufferPointer) -> SpecialHeader? {
        var r = MessageReader(payload)
        guard let flags = r.u8(), flags & ~Wire.specialReplaceBit == 0, let mode = r.u32(),
            let type = Wire.SpecialType(mode: mode), mode & ~(Wire.SpecialType.mask | 0o7777) == 0,
            let seconds = r.u64(), let nanoseconds = r.u32(), nanoseconds < 1_000_000_000, let major = r.u32(),
            let minor = r.u32(), type.isDevice || (major == 0 && minor == 0), let pathLength = r.u16(),
            Int(pathLength) <= Wire.maxPathBytes, let path = r.raw(Int(pathLength)), r.atEnd
        else { return nil }
        return SpecialHeader(
            mode: mode, mtimeSeconds: Int64(bitPattern: seconds), mtimeNanoseconds: nanoseconds, major: major,
            minor: minor, path: path, replace: flags & Wire.specialReplaceBit != 0)
    }

    /// A CHECK payload, or nil if malformed: an unknown kind or flag, nanoseconds out of range,
    /// an over-long path or target, a target for anything but a link, or none for a link, a
    /// special whose mode is not a device's, FIFO's or socket's.
    static func check(_ payload: UnsafeRawBufferPointer) -> CheckHeader? {
        var r = MessageReader(payload)
        guard let kindByte = r.u8(), let kind = Wire.CheckKind(rawValue: kindByte), let flags = r.u8(),
            flags & ~Wire.CheckFlags.all == 0, let size = r.u64(), let mode = r.u32(),
            let seconds = r.u64(), let nanoseconds = r.u32(), nanoseconds < 1_000_000_000, let pathLength = r.u16(),
            Int(pathLength) <= Wire.maxPathBytes, let path = r.raw(Int(pathLength)), let targetLength = r.u16(),
            Int(targetLength) <= Wire.maxPathBytes, let target = r.raw(Int(targetLength)),
            (kind == .symbolicLink) == !target.isEmpty, !target.contains(0),
            kind != .special || Wire.SpecialType(mode: mode) != nil
        else { return nil }
        var digest: [UInt8] = []
        if flags & Wire.CheckFlags.digest != 0 {
            // A digest is of a file's contents; its length is the agreed digest's (the machine
            // checks which).
            guard kind == .file, let length = r.u8(),
                TransferDigest.allCases.contains(where: { $0.byteCount == Int(length) }),
                let bytes = r.raw(Int(length))
            else { return nil }
            digest = bytes
        }
        guard r.atEnd else { return nil }
        return CheckHeader(
            kind: kind, flags: flags, size: size, mode: mode, mtimeSeconds: Int64(bitPattern: seconds),
            mtimeNanoseconds: nanoseconds, path: path, target: target, digest: digest)
    }

    /// An XATTR payload: a name of 1 to 255 bytes of UTF-8 without NUL, and the value (the
    /// rest). Which names are taken is the receiver machine's rule.
    static func xattr(_ payload: UnsafeRawBufferPointer) -> ExtendedAttribute? {
        var r = MessageReader(payload)
        guard let length = r.u8(), length > 0, let name = r.raw(Int(length)), !name.contains(0),
            let text = String(validating: name, as: UTF8.self), r.remaining <= Wire.maxXattrValueBytes
        else { return nil }
        return ExtendedAttribute(name: text, value: r.rest())
    }

    /// An OWNER payload: ids, then user and group names (UTF-8 without NUL, possibly empty).
    static func owner(_ payload: UnsafeRawBufferPointer) -> EntryOwner? {
        var r = MessageReader(payload)
        guard let uid = r.u32(), let gid = r.u32() else { return nil }
        var names: [String] = []
        for _ in 0..<2 {
            guard let length = r.u8(), Int(length) <= Wire.maxOwnerNameBytes, let bytes = r.raw(Int(length)),
                !bytes.contains(0), let text = String(validating: bytes, as: UTF8.self)
            else { return nil }
            names.append(text)
        }
        guard r.atEnd else { return nil }
        return EntryOwner(uid: uid, gid: gid, user: names[0], group: names[1])
    }

    /// A FILE or DIR payload, or nil if malformed (lengths that do not add up, a path longer
    /// than `Wire.maxPathBytes`, unknown flags, nanoseconds out of range).
    static func entry(_ type: Wire.MessageType, _ payload: UnsafeRawBufferPointer) -> EntryHeader? {
        var r = MessageReader(payload)
        var flags: UInt8 = 0
        var size: UInt64 = 0
        if type == .file {
            guard let f = r.u8(), f & ~Wire.FileFlags.all == 0, let s = r.u64() else { return nil }
            flags = f
            size = s
            if flags & Wire.FileFlags.sizeKnown == 0 && size != 0 { return nil }
        }
        guard let mode = r.u32(), let seconds = r.u64(), let nanoseconds = r.u32(), nanoseconds < 1_000_000_000,
            let length = r.u16(), Int(length) <= Wire.maxPathBytes, let path = r.raw(Int(length)), r.atEnd
        else { return nil }
        return EntryHeader(
            flags: flags, size: size, mode: mode, mtimeSeconds: Int64(bitPattern: seconds),
            mtimeNanoseconds: nanoseconds, path: path)
    }
}

extension Wire {
    /// Lays out a frame's header — its type, then its payload's length as a big-endian
    /// `UInt32` — in the first `frameHeaderSize` bytes of `buffer`: the one place it is, for
    /// messages built whole (`MessageWriter.message`) and for frames written in place
    /// (`ByteBuffer.commitFrame`).
    static func putFrameHeader(_ type: MessageType, length: Int, into buffer: UnsafeMutableRawBufferPointer) {
        buffer[0] = type.rawValue
        withUnsafeBytes(of: UInt32(truncatingIfNeeded: length).bigEndian) { bytes in
            for (offset, byte) in bytes.enumerated() { buffer[1 + offset] = byte }
        }
    }
}
