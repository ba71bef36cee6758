import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

/// A deterministic generator for the property tests (SplitMix64).
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// What a decoder made of some bytes: control frames, DATA payloads joined per frame, or
/// the violation that stopped it.
enum Decoded: Equatable {
    case magic
    case frame(Frame)
    case data([UInt8])
    /// The end of a BATCH.
    case batchEnd
    case violation(String)
}

/// Decodes `bytes` handed over in pieces cut at `cuts`, as a session does: each piece appended
/// to what is left of the previous ones. Every step is checked against what the decoder was
/// shown (`reportsOnlyWhatItWasShown`); a step that fails the check is recorded as an issue
/// and ends the decoding there.
func decode(_ bytes: [UInt8], cuts: [Int], direction: FrameDirection = .toReceiver) -> [Decoded] {
    var decoder = FrameDecoder(direction: direction)
    var out: [Decoded] = []
    var pending: [UInt8] = []
    var dataFrame: [UInt8] = []
    var start = 0
    for end in cuts + [bytes.count] where end >= start {
        pending += bytes[start..<end]
        start = end
        var stop = false
        while !stop {
            let step = pending.withUnsafeBytes { shown in
                let step = decoder.next(shown)
                return reportsOnlyWhatItWasShown(step, shown) ? step : nil
            }
            guard let step else { return out }
            switch step {
            case .needMore:
                stop = true
            case .violation(let reason):
                out.append(.violation(reason))
                return out
            case .item(let item, let consumed):
                switch item {
                case .magic: out.append(.magic)
                case .batchEnd: out.append(.batchEnd)
                case .frame(let frame): out.append(.frame(frame))
                case .data(let piece, let ends):
                    dataFrame += piece
                    if ends {
                        out.append(.data(dataFrame))
                        dataFrame = []
                    }
                }
                pending.removeFirst(consumed)
            }
        }
    }
    return out
}

/// Whether `step` keeps to the bytes the decoder was `shown`; records an issue when not. An
/// item uses at least one byte (only the end of a BATCH takes none) and at most those shown;
/// the magic uses its eight bytes and a message at least its header; a DATA piece is not
/// empty and is the last bytes of what its item used, in place (not a copy, not beyond).
func reportsOnlyWhatItWasShown(_ step: FrameDecoder.Step, _ shown: UnsafeRawBufferPointer) -> Bool {
    guard case .item(let item, let consumed) = step else { return true }
    let fits: Bool
    switch item {
    case .batchEnd: fits = consumed == 0
    case .magic: fits = consumed == Wire.magic.count && consumed <= shown.count
    case .frame: fits = consumed >= Wire.frameHeaderSize && consumed <= shown.count
    case .data(let piece, _):
        fits =
            !piece.isEmpty && consumed <= shown.count && piece.count <= consumed
            && piece.baseAddress == shown.baseAddress.map { $0 + consumed - piece.count }
    }
    if !fits { Issue.record("an item used \(consumed) of the \(shown.count) bytes shown: \(item)") }
    return fits
}

func dataFrame(_ payload: [UInt8]) -> [UInt8] {
    var out: [UInt8] = [Wire.MessageType.data.rawValue]
    withUnsafeBytes(of: UInt32(payload.count).bigEndian) { out += $0 }
    return out + payload
}

func fileHeader(_ path: String, size: UInt64, flags: UInt8 = Wire.FileFlags.sizeKnown) -> EntryHeader {
    EntryHeader(
        flags: flags, size: size, mode: 0o644, mtimeSeconds: 1_700_000_000, mtimeNanoseconds: 5, path: Array(path.utf8))
}

/// A receiver machine with `settings` that has had the magic and a sender's HELLO (SHA-256).
func receiverAfterHello(_ settings: ReceiverMachine.Settings) -> ReceiverMachine {
    var machine = ReceiverMachine(settings: settings)
    _ = machine.received(.magic)
    _ = machine.received(.frame(.hello(version: 1, capabilities: ["sha256"])))
    return machine
}

func dirHeader(_ path: String) -> EntryHeader {
    EntryHeader(mode: 0o755, mtimeSeconds: 1_700_000_000, mtimeNanoseconds: 0, path: Array(path.utf8))
}

/// A sample session from a sender: every message type it may send.
let sampleSession: (bytes: [UInt8], items: [Decoded]) = {
    let hello = Frame.hello(version: 1, capabilities: ["sha256", "deflate", "resume"])
    let payload = randomBytes(3000)
    let frames: [Decoded] = [
        .magic, .frame(hello), .frame(.directory(dirHeader("d"))), .frame(.file(fileHeader("d/a", size: 3001))),
        .data(payload), .data([7]), .frame(.end(size: 3001, digest: Array(repeating: 9, count: 32))),
        .frame(.held(digest: Array(repeating: 8, count: 32))),
        .frame(.file(fileHeader("b", size: 0, flags: 0))), .frame(.abort(reason: "gone")), .frame(.bye),
        .frame(.error(reason: "bye now")),
    ]
    var bytes: [UInt8] = []
    for item in frames {
        switch item {
        case .magic: bytes += Wire.magic
        case .frame(let frame): bytes += frame.encoded
        case .data(let payload): bytes += dataFrame(payload)
        case .batchEnd, .violation: break
        }
    }
    return (bytes, frames)
}()

@Suite("Transfer protocol: the frame decoder", .ownThreads)
struct FrameDecoderTests {
    @Test("A session split at every byte boundary decodes to the same messages")
    func everySplit() {
        let (bytes, expected) = sampleSession
        #expect(decode(bytes, cuts: []) == expected)
        for cut in 0...bytes.count {
            #expect(decode(bytes, cuts: [cut]) == expected, "cut at \(cut)")
        }
        #expect(decode(bytes, cuts: Array(0...bytes.count)) == expected, "byte at a time")
    }

    @Test("Every message type round-trips through encode and decode, in its direction only")
    func roundTrips() {
        let toReceiver: [Frame] = [
            .hello(version: 1, capabilities: ["sha256"]), .file(fileHeader("x/y", size: 10)),
            .directory(dirHeader("x")), .end(size: 1, digest: Array(repeating: 1, count: 32)),
            .abort(reason: "r"), .bye, .error(reason: "e"), .held(digest: Array(repeating: 3, count: 32)),
        ]
        let toSender: [Frame] = [
            .hello(version: 1, capabilities: ["sha256", "resume"]), .accept(offset: 77), .stored,
            .refused(code: .exists, reason: "exists"), .failed(code: .data, reason: "SHA-256 mismatch"), .bye,
            .error(reason: "e"),
        ]
        for frame in toReceiver {
            #expect(decode(Wire.magic + frame.encoded, cuts: []) == [.magic, .frame(frame)])
        }
        for frame in toSender {
            #expect(decode(Wire.magic + frame.encoded, cuts: [], direction: .toSender) == [.magic, .frame(frame)])
        }
        for frame in [Frame.accept(offset: 1), .stored, .refused(code: .busy, reason: "b")] {
            let decoded = decode(Wire.magic + frame.encoded, cuts: [])
            #expect(decoded.count == 2)
            #expect(decoded.last.map { if case .violation = $0 { true } else { false } } == true, "\(frame)")
        }
        // HELD only from a sender, and of exactly 32 bytes.
        for (bytes, direction) in [
            (Frame.held(digest: Array(repeating: 3, count: 32)).encoded, FrameDirection.toSender),
            (MessageWriter.message(.held) { $0.raw([UInt8](repeating: 3, count: 16)) }, .toReceiver),
        ] {
            let decoded = decode(Wire.magic + bytes, cuts: [], direction: direction)
            #expect(decoded.count == 2)
            #expect(decoded.last.map { if case .violation = $0 { true } else { false } } == true, "\(direction)")
        }
        let data = decode(Wire.magic + dataFrame([1, 2]), cuts: [], direction: .toSender)
        #expect(data.last.map { if case .violation = $0 { true } else { false } } == true)
    }

    @Test("Lengths are checked before anything is held: an oversized header is refused at once")
    func limits() {
        // A FILE claiming 4 GiB: refused from its 5 header bytes, nothing waits for the rest.
        let huge: [UInt8] = Wire.magic + [Wire.MessageType.file.rawValue, 0xFF, 0xFF, 0xFF, 0xFF]
        #expect(decode(huge, cuts: []).last == .violation("FILE message of 4294967295 bytes exceeds its limit of 8192"))
        let bigData: [UInt8] = Wire.magic + [Wire.MessageType.data.rawValue, 0x00, 0x40, 0x00, 0x01]
        #expect(decode(bigData, cuts: []).last.map { if case .violation = $0 { true } else { false } } == true)
        #expect(decode(Wire.magic + [0x42, 0, 0, 0, 0], cuts: []).last == .violation("unknown message type 0x42"))
        #expect(decode(Wire.magic + dataFrame([]), cuts: []).last == .violation("empty DATA message"))
        #expect(decode(Array("HTTP/1.1 200 OK\r\n".utf8), cuts: []) == [.violation("wrong magic: not a sluice sender")])
        // Malformed payloads: a FILE whose path length runs past its payload.
        var file = Frame.file(fileHeader("abc", size: 1)).encoded
        file[file.count - 4] = 0xFF
        #expect(decode(Wire.magic + file, cuts: []).last == .violation("malformed FILE message"))
    }

    @Test(
        "Random bytes, cut anywhere, never crash the decoder; it never reports more than it was shown, and where they are cut changes nothing"
    )
    func randomBytesDecode() {
        var random = SeededRandom(state: 42)
        var seen = (frames: 0, data: 0, violations: 0)
        for round in 0..<4000 {
            // Half the rounds as they come; half shaped as messages (a type, a length that fits,
            // a payload of random bytes), so that random payloads reach the parsers of every
            // message type rather than stopping at an impossible length.
            var bytes = Wire.magic
            if round.isMultiple(of: 2) {
                let count = Int.random(in: 0..<200, using: &random)
                bytes += (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) }
                if count > 0, Bool.random(using: &random) { bytes[8] = UInt8.random(in: 0x10...0x15, using: &random) }
            } else {
                for _ in 0..<Int.random(in: 1...4, using: &random) {
                    let length = Int.random(in: 0..<64, using: &random)
                    bytes.append(UInt8.random(in: 0x10...0x1F, using: &random))
                    withUnsafeBytes(of: UInt32(length).bigEndian) { bytes += $0 }
                    bytes += (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
                }
            }
            let cuts = (0..<3).map { _ in Int.random(in: 0...bytes.count, using: &random) }.sorted()
            // `decode` checks every step against the bytes shown at that step.
            let whole = decode(bytes, cuts: [])
            let cut = decode(bytes, cuts: cuts)
            #expect(cut == whole, "\(bytes) cut at \(cuts)")
            for item in whole {
                switch item {
                case .frame: seen.frames += 1
                case .data: seen.data += 1
                case .violation: seen.violations += 1
                case .magic, .batchEnd: break
                }
            }
        }
        // Not vacuous: the rounds reached decoded messages, DATA and violations.
        #expect(seen.frames > 100 && seen.data > 100 && seen.violations > 100, "\(seen)")
    }
}

/// Drives a `ReceiverMachine` as its session does, with a store that lives in memory: it
/// records every path the machine asks to create, and answers each action at once.
struct MachineDriver {
    var machine = ReceiverMachine(settings: .init(overwrite: false, maxSize: 1 << 20, resume: true))
    var random = SeededRandom(state: 1)
    /// Paths the store was asked to create, as components.
    var created: [[String]] = []
    var answersSent = 0
    var reports = 0
    /// Files staged and not yet committed.
    var staged = 0
    var ended: SessionEnd?
    /// Makes the store's outcomes random (failures included) rather than always successful.
    var chaotic = false

    mutating func feed(_ item: Decoded) {
        switch item {
        case .magic: run(machine.received(.magic))
        case .batchEnd: run(machine.received(.batchEnd))
        case .frame(let frame): run(machine.received(.frame(frame)))
        case .data(let bytes):
            bytes.withUnsafeBytes { piece in
                let actions = machine.received(.data(piece, endsFrame: true))
                if actions == [.deliverData] {
                    let (write, more) = machine.decoded(piece.count)
                    _ = write
                    run(more)
                } else {
                    run(actions)
                }
            }
        case .violation(let reason): run(machine.violated(reason))
        }
    }

    /// Checks a path the machine hands to the store, as `check` checks a request's.
    mutating func checkComponents(_ components: [String]) {
        let relative = components.joined(separator: "/")
        check(
            EntryRequest(
                components: components, relative: relative,
                header: EntryHeader(mode: 0, mtimeSeconds: 0, mtimeNanoseconds: 0, path: Array(relative.utf8))))
    }

    mutating func run(_ actions: [ReceiverAction]) {
        var queue = actions
        while !queue.isEmpty {
            let action = queue.removeFirst()
            switch action {
            case .send(let frame):
                switch frame {
                case .stored, .refused, .failed: answersSent += 1
                case .hello, .file, .directory, .end, .abort, .bye, .accept, .error, .join, .range, .rangeEnd, .joined,
                    .held, .link, .hole, .xattr, .owner, .check, .have, .prune, .gone, .signatures, .copy, .token,
                    .special, .batch, .move, .remove:
                    break
                }
            case .makeDirectory(let request):
                check(request)
                queue += machine.handle(.directoryMade(chaotic && coin() ? .failed(.io, "disk") : nil))
            case .makeLink(let request, let link):
                check(request)
                if link.kind == .hard {
                    // Only a file of this session flagged linked: a checked relative path.
                    let target = String(decoding: link.target, as: UTF8.self)
                    #expect(machine.linkTargets.contains(target))
                }
                queue += machine.handle(.linkMade(chaotic && coin() ? .refused(.exists, "exists") : nil))
            case .makeSpecial(let request, _):
                check(request)
                queue += machine.handle(.specialMade(chaotic && coin() ? .refused(.exists, "exists") : nil))
            case .deliverHole, .deliverCopy:
                break
            case .prune(let components, _):
                check(
                    EntryRequest(
                        components: components, relative: components.joined(separator: "/"),
                        header: EntryHeader(
                            mode: 0, mtimeSeconds: 0, mtimeNanoseconds: 0,
                            path: Array(components.joined(separator: "/").utf8))))
                queue += machine.handle(.pruned(gone: [], nil))
            case .move(let from, let to, _):
                // Both paths checked as the PRUNE's below is.
                for components in [from, to] { checkComponents(components) }
                queue += machine.handle(.pruned(gone: [], nil))
            case .remove(let components):
                checkComponents(components)
                queue += machine.handle(.pruned(gone: [], nil))
            case .checkEntry(let components, _, _):
                // Answered by the session in order (HAVE); nothing the machine waits for.
                if let components {
                    check(
                        EntryRequest(
                            components: components, relative: components.joined(separator: "/"),
                            header: EntryHeader(
                                mode: 0, mtimeSeconds: 0, mtimeNanoseconds: 0,
                                path: Array(components.joined(separator: "/").utf8))))
                }
            case .openFile(let request) where request.header.delta:
                check(request)
                queue += machine.handle(.deltaOpened(chaotic && coin() ? .success(nil) : .success(1 << 20)))
            case .openFile(let request):
                check(request)
                let header = request.header
                let offset: UInt64 = chaotic && header.sizeKnown && coin() ? header.size / 2 : 0
                queue += machine.handle(
                    .fileOpened(chaotic && coin() ? .failure(.refused(.exists, "exists")) : .success(offset)))
            case .deliverData:
                break
            case .finishData:
                queue += machine.handle(chaotic && coin() ? .dataFailed(.failed(.data, "corrupt")) : .dataFinished)
            case .commitFile:
                if coin() {
                    // Set aside for a batch: answered when the batch is committed.
                    staged += 1
                    queue += machine.handle(.staged)
                    if coin() { queue += commitStaged() }
                } else {
                    queue += machine.handle(.committed(chaotic && coin() ? .failed(.data, "SHA-256 mismatch") : nil))
                }
            case .commitStaged, .storeBatch:
                queue += commitStaged()
            case .joinTransfer:
                queue += machine.handle(.transferJoined(chaotic && coin() ? "JOIN: unknown transfer id" : nil))
            case .openRange(let request, _):
                check(request)
                queue += machine.handle(
                    .fileOpened(chaotic && coin() ? .failure(.refused(.invalidRange, "overlapping")) : .success(0)))
            case .commitRange:
                let bad = chaotic && coin()
                queue += machine.handle(
                    .rangeCommitted(bad ? .failed(.data, "SHA-256 mismatch") : nil, fileStored: !bad && coin()))
            case .dropFile:
                break
            case .report:
                reports += 1
            case .settleDirectories:
                queue += commitStaged()
                queue += machine.handle(.directoriesSettled)
            case .end(let how):
                #expect(ended == nil, "the session ended twice")
                ended = how
            }
        }
    }

    mutating func coin() -> Bool { Bool.random(using: &random) }

    /// The staged files' outcomes, in order.
    mutating func commitStaged() -> [ReceiverAction] {
        var actions: [ReceiverAction] = []
        while staged > 0 {
            staged -= 1
            actions += machine.handle(.stagedCommitted(chaotic && coin() ? .failed(.io, "rename") : nil))
        }
        return actions
    }

    /// Nothing the store is asked for may lead outside its directory.
    mutating func check(_ request: EntryRequest) {
        created.append(request.components)
        #expect(!request.components.isEmpty)
        for part in request.components {
            #expect(!part.isEmpty && part != "." && part != ".." && !part.contains("/") && !part.contains("\0"))
        }
    }
}

@Suite("Transfer protocol: the receiver machine", .ownThreads)
struct ReceiverMachineTests {
    /// Scripts that bring a fresh machine into each of its states.
    static let states: [(String, [Decoded], [ReceiverOutcome])] = [
        ("awaitingMagic", [], []),
        ("awaitingHello", [.magic], []),
        ("idle", [.magic, .frame(.hello(version: 1, capabilities: ["sha256"]))], []),
        (
            "receiving",
            [.magic, .frame(.hello(version: 1, capabilities: ["sha256"])), .frame(.file(fileHeader("f", size: 4)))], []
        ),
        (
            "discarding",
            [
                .magic, .frame(.hello(version: 1, capabilities: ["sha256"])), .frame(.file(fileHeader("f", size: 1))),
                .data([1, 2]),
            ], []
        ),
        (
            "discarding an eager file refused at its header",
            [
                .magic, .frame(.hello(version: 1, capabilities: ["sha256"])),
                .frame(.file(fileHeader("..", size: 2, flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.eager))),
            ], []
        ),
        ("ended", [.magic, .frame(.error(reason: "x"))], []),
    ]

    static let messages: [Decoded] = [
        .magic, .data([1]), .frame(.hello(version: 1, capabilities: ["sha256"])),
        .frame(.file(fileHeader("g", size: 1))),
        .frame(.file(fileHeader("e", size: 1, flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.eager))),
        .frame(.directory(dirHeader("d"))), .frame(.end(size: 0, digest: Array(repeating: 0, count: 32))),
        .frame(.abort(reason: "a")), .frame(.bye), .frame(.error(reason: "e")), .frame(.accept(offset: 0)),
        .frame(.stored),
        .frame(.refused(code: .exists, reason: "r")), .frame(.failed(code: .io, reason: "f")),
        .frame(.held(digest: Array(repeating: 0, count: 32))),
    ]

    @Test("Every message in every state: a transition or a violation that ends the session, never a crash")
    func everyMessageInEveryState() {
        for (name, script, _) in Self.states {
            for message in Self.messages {
                var driver = MachineDriver()
                for item in script { driver.feed(item) }
                let before = driver.machine.state
                #expect(driver.machine.acceptsMessages || driver.machine.hasEnded, "\(name)")
                driver.feed(message)
                #expect(driver.answersSent == driver.reports, "\(name) + \(message): an answer without a report")
                #expect(driver.machine.entriesAnswered <= driver.machine.entriesAnnounced)
                if case .ended = before {
                    #expect(driver.machine.state == before, "an ended session stays ended")
                }
                if case .ended(.violation) = driver.machine.state {
                    #expect(driver.ended != nil)
                }
            }
        }
    }

    @Test("The legal path: a directory, a file in pieces, goodbye — each entry answered once")
    func legalSession() {
        var driver = MachineDriver()
        let items: [Decoded] = [
            .magic, .frame(.hello(version: 1, capabilities: ["sha256", "resume"])), .frame(.directory(dirHeader("d"))),
            .frame(.file(fileHeader("d/f", size: 3))), .data([1]), .data([2, 3]),
            .frame(.end(size: 3, digest: Array(repeating: 0, count: 32))), .frame(.bye),
        ]
        for item in items { driver.feed(item) }
        #expect(driver.ended == .goodbye)
        #expect(driver.machine.entriesAnnounced == 2 && driver.machine.entriesAnswered == 2)
        #expect(driver.created == [["d"], ["d", "f"]])
    }

    @Test("A partial file's name is refused as any component (FILE, DIR or RANGE); names only like it are not")
    func partialNamesRefused() {
        let reserved = [
            ".x.sluice-part", "d/.x.sluice-part", "..sluice-part", ".sluice-part.0123abcd", ".sluice-part.",
            ".x.sluice-part/f", "d/.sluice-part.link-1f/e/f",
        ]
        for path in reserved {
            for kind in ["file", "dir", "range"] {
                var machine = receiverAfterHello(.init(streams: true))
                if kind == "range" {
                    _ = machine.received(
                        .frame(.join(TransferJoin(id: Array(repeating: 7, count: 16), index: 0, count: 2))))
                    _ = machine.handle(.transferJoined(nil))
                }
                let frame: Frame =
                    switch kind {
                    case "file": .file(fileHeader(path, size: 10))
                    case "dir": .directory(dirHeader(path))
                    default:
                        .range(RangeHeader(range: ByteRange(start: 0, length: 5), entry: fileHeader(path, size: 10)))
                    }
                let actions = machine.received(.frame(frame))
                guard case .send(.refused(let code, let reason))? = actions.first else {
                    Issue.record("\(kind) \(path): \(actions)")
                    continue
                }
                #expect(code == .invalidPath)
                #expect(reason == "invalid path: the name of a partial file (.NAME.sluice-part) is reserved")
                #expect(machine.state == .idle)
            }
        }
        for path in ["x.sluice-part", ".sluice-part", "x.sluice-part/f", ".x.sluice-parts/f", "sluice-part.x"] {
            var machine = receiverAfterHello(.init())
            let actions = machine.received(.frame(.file(fileHeader(path, size: 10))))
            #expect(actions.first.map { if case .openFile = $0 { true } else { false } } == true, "\(path): \(actions)")
        }
    }

    @Test("Sizes are enforced as bytes arrive: past the announced size or the limit, the file fails at once")
    func sizesEnforced() {
        var fresh = MachineDriver()
        for item: Decoded in [
            .magic, .frame(.hello(version: 1, capabilities: ["sha256"])), .frame(.file(fileHeader("f", size: 2))),
        ] {
            fresh.feed(item)
        }
        let (write, actions) = fresh.machine.decoded(3)
        #expect(!write)
        #expect(actions.contains(.send(.failed(code: .data, reason: "more data than announced (2 bytes)"))))
        #expect(fresh.machine.state == .discarding)
        // An unknown size is held to the receiver's limit.
        var unknown = MachineDriver()
        for item: Decoded in [
            .magic, .frame(.hello(version: 1, capabilities: ["sha256"])),
            .frame(.file(fileHeader("s", size: 0, flags: 0))),
        ] {
            unknown.feed(item)
        }
        #expect(unknown.machine.decoded(1 << 20).write)
        let (over, refusal) = unknown.machine.decoded(1)
        #expect(!over)
        #expect(refusal.contains(.send(.refused(code: .tooLarge, reason: "too large: more than 1048576 bytes"))))
    }

    @Test("A seeded random session of 100,000 frames: no crash, nothing outside, every entry answered once")
    func randomSessions() {
        var random = SeededRandom(state: 0x5EED)
        let paths = [
            "a", "d/b", "d/e/f", "..", "../x", "a/../b", "/etc/passwd", "", "a//b", "./a", "a/.",
            String(repeating: "n", count: 300),
            "\u{0}x", "ok/é", "d",
        ]
        var frames = 0
        var sessions = 0
        while frames < 100_000 {
            sessions += 1
            var driver = MachineDriver()
            driver.chaotic = true
            driver.random = SeededRandom(state: UInt64(sessions))
            var items: [Decoded] = [.magic, .frame(.hello(version: 1, capabilities: ["sha256", "resume"]))]
            for _ in 0..<Int.random(in: 1...60, using: &random) {
                let path = Array(paths[Int.random(in: 0..<paths.count, using: &random)].utf8)
                switch Int.random(in: 0..<12, using: &random) {
                case 0:
                    items.append(
                        .frame(.directory(EntryHeader(mode: 0o755, mtimeSeconds: 0, mtimeNanoseconds: 0, path: path))))
                case 1...4:
                    let size = UInt64.random(in: 0...40, using: &random)
                    // Resumable, or eager (its data at once), or now and then both (a violation).
                    let flags: UInt8 =
                        switch Int.random(in: 0..<9, using: &random) {
                        case 0...3: Wire.FileFlags.resumable
                        case 4...7: Wire.FileFlags.eager
                        default: Wire.FileFlags.resumable | Wire.FileFlags.eager
                        }
                    items.append(
                        .frame(
                            .file(
                                EntryHeader(
                                    flags: Wire.FileFlags.sizeKnown | flags, size: size, mode: 0o644,
                                    mtimeSeconds: 0, mtimeNanoseconds: 0, path: path))))
                    var sent: UInt64 = 0
                    while sent < size, Int.random(in: 0..<10, using: &random) > 0 {
                        let n = UInt64.random(in: 1...max(1, size - sent + 2), using: &random)
                        items.append(.data(randomBytes(Int(n), seed: UInt64(frames))))
                        sent += n
                    }
                    items.append(
                        .frame(
                            Bool.random(using: &random)
                                ? .end(size: sent, digest: Array(repeating: 1, count: 32)) : .abort(reason: "x")))
                case 5: items.append(.data(randomBytes(5)))
                case 6: items.append(.frame(.end(size: 3, digest: Array(repeating: 1, count: 32))))
                case 7: items.append(.frame(.abort(reason: "no")))
                case 8: items.append(.frame(.hello(version: 2, capabilities: ["sha256"])))
                case 9: items.append(.frame(.error(reason: "peer error")))
                default:
                    items.append(
                        .frame(
                            .file(
                                EntryHeader(
                                    flags: 0, size: 0, mode: 0, mtimeSeconds: 0, mtimeNanoseconds: 0, path: path))))
                }
            }
            if Bool.random(using: &random) { items.append(.frame(.bye)) }
            for item in items {
                guard !driver.machine.hasEnded else { break }
                #expect(driver.machine.acceptsMessages, "the fake store answers at once: the machine waits for nothing")
                driver.feed(item)
                frames += 1
                #expect(driver.answersSent == driver.reports)
                #expect(driver.machine.entriesAnswered <= driver.machine.entriesAnnounced)
            }
            if !driver.machine.hasEnded { driver.run(driver.machine.handle(.peerClosed)) }
            #expect(driver.ended != nil, "every session ends")
            if driver.ended == .goodbye {
                #expect(driver.machine.entriesAnswered == driver.machine.entriesAnnounced, "every entry answered once")
            }
        }
        #expect(sessions > 100)
    }
}

@Suite("Transfer protocol: the sender machine and waiting states", .ownThreads)
struct SenderMachineTests {
    @Test("While an action is in progress the receiver takes no messages (its session stops reading)")
    func waitingStatesHoldInput() {
        var machine = ReceiverMachine(settings: .init())
        _ = machine.received(.magic)
        _ = machine.received(.frame(.hello(version: 1, capabilities: ["sha256"])))
        #expect(
            machine.received(.frame(.directory(dirHeader("d")))).first.map {
                if case .makeDirectory = $0 { true } else { false }
            } == true)
        #expect(!machine.acceptsMessages)
        _ = machine.handle(.directoryMade(nil))
        #expect(machine.acceptsMessages)
        _ = machine.received(.frame(.file(fileHeader("f", size: 0))))
        #expect(!machine.acceptsMessages)
        _ = machine.handle(.fileOpened(.success(0)))
        #expect(machine.received(.frame(.end(size: 0, digest: Array(repeating: 0, count: 32)))) == [.finishData])
        #expect(!machine.acceptsMessages)
        #expect(machine.handle(.dataFinished) == [.commitFile(digest: Array(repeating: 0, count: 32))])
        #expect(!machine.acceptsMessages)
        let stored = machine.handle(.committed(nil))
        #expect(stored.first == .send(.stored))
        #expect(machine.received(.frame(.bye)) == [.settleDirectories])
        #expect(!machine.acceptsMessages)
        #expect(machine.handle(.directoriesSettled) == [.send(.bye), .end(.goodbye)])
    }

    static let entries = [
        SenderMachine.Entry(
            relative: "d", isDirectory: true, seekable: false, mode: 0o755, mtimeSeconds: 0, mtimeNanoseconds: 0),
        SenderMachine.Entry(
            relative: "d/f", isDirectory: false, seekable: true, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0),
    ]

    @Test("A whole send: directory, file with a resumed offset, goodbye")
    func legalSend() {
        var machine = SenderMachine(
            entries: Self.entries, settings: .init(compress: false, resume: true, digests: [.sha256]))
        #expect(
            machine.start() == [
                .send(
                    .hello(
                        version: 1,
                        capabilities: [
                            "sha256", "deflate", "resume", "held-sha256", "links", "holes", "xattrs", "owners",
                            "specials",
                        ]))
            ])
        #expect(machine.received(.magic).isEmpty)
        #expect(machine.received(.frame(.hello(version: 1, capabilities: ["sha256", "resume"]))).isEmpty)
        #expect(machine.proceed().first.map { if case .send(.directory) = $0 { true } else { false } } == true)
        #expect(machine.proceed() == [.openEntry(1)])
        let info = OpenedEntry(size: 10, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0)
        let announced = machine.handle(.entryOpened(1, .success(info)))
        guard case .send(.file(let header)) = announced.first else {
            Issue.record("no FILE: \(announced)")
            return
        }
        #expect(header.resumable && header.sizeKnown && header.size == 10)
        #expect(machine.received(.frame(.accept(offset: 11))).last == .end(.violation("ACCEPT offset 11 out of range")))
        var again = SenderMachine(entries: Self.entries, settings: .init(compress: false, resume: true))
        _ = again.received(.magic)
        _ = again.received(.frame(.hello(version: 1, capabilities: ["sha256", "resume"])))
        _ = again.proceed()
        _ = again.proceed()
        _ = again.handle(.entryOpened(1, .success(info)))
        #expect(
            again.received(.frame(.accept(offset: 4))) == [
                .startData(index: 1, offset: 4, compressed: false, range: nil)
            ])
        #expect(again.received(.frame(.stored)) == [.settle(0, .stored)])
        #expect(again.received(.frame(.stored)).last == .end(.violation("STORED before the end of the file")))
    }

    @Test("With held-sha256 on both sides, a resumed file's END follows HELD; without, or not resumed, END alone")
    func heldBeforeEnd() {
        let info = OpenedEntry(size: 10, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0)
        let digest = [UInt8](repeating: 1, count: 32)
        let held = [UInt8](repeating: 2, count: 32)
        for (offers, offset) in [(true, UInt64(4)), (false, 4), (true, 0)] {
            var machine = SenderMachine(entries: Self.entries, settings: .init(resume: true, digests: [.sha256]))
            _ = machine.received(.magic)
            let capabilities: Set<String> = offers ? ["sha256", "resume", "held-sha256"] : ["sha256", "resume"]
            _ = machine.received(.frame(.hello(version: 1, capabilities: capabilities)))
            #expect(machine.checksHeld == offers)
            _ = machine.proceed()
            _ = machine.proceed()
            _ = machine.handle(.entryOpened(1, .success(info)))
            _ = machine.received(.frame(.accept(offset: offset)))
            let ended = machine.handle(.dataEnded(size: 10, digest: digest, held: offers && offset > 0 ? held : nil))
            let expected: [SenderAction] =
                offers && offset > 0
                ? [.stopData(1), .send(.held(digest: held)), .send(.end(size: 10, digest: digest))]
                : [.stopData(1), .send(.end(size: 10, digest: digest))]
            #expect(ended == expected, "offers \(offers), offset \(offset)")
        }
    }

    @Test("The receiver wants HELD before a resumed file's END when both offer held-sha256, and only then")
    func receiverHeld() {
        let digest = [UInt8](repeating: 1, count: 32)
        let held = [UInt8](repeating: 2, count: 32)
        func resumed(peer: Set<String>, offset: UInt64 = 4) -> ReceiverMachine {
            var machine = ReceiverMachine(settings: .init(resume: true))
            _ = machine.received(.magic)
            _ = machine.received(.frame(.hello(version: 1, capabilities: peer)))
            _ = machine.received(.frame(.file(fileHeader("f", size: 6, flags: Wire.FileFlags.sizeKnown | 4))))
            _ = machine.handle(.fileOpened(.success(offset)))
            return machine
        }
        let both: Set<String> = ["xxh128", "sha256", "resume", "held-sha256"]
        var machine = resumed(peer: both)
        #expect(machine.capabilities.contains("held-sha256"))
        #expect(machine.checksHeld && machine.continuesHeld)
        #expect(machine.received(.frame(.held(digest: held))).isEmpty)
        #expect(
            machine.received(.frame(.held(digest: held))).last
                == .end(.violation("HELD for a file with no held bytes, or twice")))

        // END's digest is the agreed one's size: XXH3-128's 16 bytes where this build has it,
        // SHA-256's 32 (`SLUICE_ENGINES=zlib`).
        machine = resumed(peer: both)
        let endDigest = Array(digest[0..<machine.digest.byteCount])
        _ = [UInt8](repeating: 0, count: 2).withUnsafeBytes { machine.received(.data($0, endsFrame: true)) }
        _ = machine.decoded(2)
        #expect(
            machine.received(.frame(.end(size: 6, digest: endDigest))).last
                == .end(.violation("END without HELD for a resumed file")))

        machine = resumed(peer: both)
        _ = machine.received(.frame(.held(digest: held)))
        _ = [UInt8](repeating: 0, count: 2).withUnsafeBytes { machine.received(.data($0, endsFrame: true)) }
        _ = machine.decoded(2)
        #expect(machine.received(.frame(.end(size: 6, digest: endDigest))) == [.finishData])
        #expect(machine.handle(.dataFinished) == [.commitFile(digest: endDigest, held: held)])

        // Not resumed: HELD is out of place.
        machine = resumed(peer: both, offset: 0)
        #expect(
            machine.received(.frame(.held(digest: held))).last
                == .end(.violation("HELD for a file with no held bytes, or twice")))

        // A sender without held-sha256 that agreed XXH3-128: held bytes are not continued; with
        // SHA-256 agreed they are, checked by END's digest, and no HELD is wanted.
        machine = resumed(peer: ["xxh128", "sha256", "resume"])
        #expect(!machine.checksHeld && !machine.continuesHeld == TransferDigest.xxh128.isAvailable)
        machine = resumed(peer: ["sha256", "resume"])
        #expect(!machine.checksHeld && machine.continuesHeld)
        _ = [UInt8](repeating: 0, count: 2).withUnsafeBytes { machine.received(.data($0, endsFrame: true)) }
        _ = machine.decoded(2)
        #expect(machine.received(.frame(.end(size: 6, digest: digest))) == [.finishData])
    }

    @Test("Every receiver message in every sender state: a transition or a violation, never a crash")
    func everyMessage() {
        let messages: [FrameDecoder.Item] = [
            .magic, .frame(.hello(version: 1, capabilities: ["sha256"])), .frame(.accept(offset: 0)), .frame(.stored),
            .frame(.refused(code: .exists, reason: "x")), .frame(.failed(code: .data, reason: "y")), .frame(.bye),
            .frame(.error(reason: "z")), .frame(.file(fileHeader("f", size: 1))), .frame(.end(size: 0, digest: [])),
            .frame(.held(digest: Array(repeating: 0, count: 32))),
        ]
        let info = OpenedEntry(size: 1, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0)
        let scripts: [(inout SenderMachine) -> Void] = [
            { _ in },
            { _ = $0.received(.magic) },
            { m in
                _ = m.received(.magic); _ = m.received(.frame(.hello(version: 1, capabilities: ["sha256"])))
            },
            { m in
                _ = m.received(.magic); _ = m.received(.frame(.hello(version: 1, capabilities: ["sha256"])))
                _ = m.proceed(); _ = m.proceed(); _ = m.handle(.entryOpened(1, .success(info)))
            },
            { m in
                _ = m.received(.magic); _ = m.received(.frame(.hello(version: 1, capabilities: ["sha256"])))
                _ = m.proceed(); _ = m.proceed(); _ = m.handle(.entryOpened(1, .success(info)))
                _ = m.received(.frame(.accept(offset: 0)))
            },
            { m in
                _ = m.received(.magic); _ = m.received(.frame(.hello(version: 1, capabilities: ["sha256"])))
                _ = m.proceed(); _ = m.proceed(); _ = m.handle(.entryOpened(1, .failure(LocalFailure("gone"))));
                _ = m.proceed()
            },
        ]
        for script in scripts {
            for message in messages {
                var machine = SenderMachine(entries: Self.entries, settings: .init())
                script(&machine)
                let actions = machine.received(message)
                let settles = actions.filter { if case .settle = $0 { true } else { false } }.count
                #expect(settles <= 1)
                if case .ended(.violation) = machine.state {
                    #expect(actions.contains { if case .send(.error) = $0 { true } else { false } })
                }
            }
        }
    }
}

@Suite("Transfer protocol: small files sent eagerly", .ownThreads)
struct EagerFileTests {
    static let eager = Wire.FileFlags.sizeKnown | Wire.FileFlags.eager
    static let digest = [UInt8](repeating: 0, count: 32)

    func receiver(eager: Bool = true) -> ReceiverMachine { receiverAfterHello(.init(eager: eager)) }

    @Test("The receiver offers eager, opens an eager file without sending ACCEPT, and stores it")
    func receiverStoresEagerFile() {
        var machine = receiver()
        #expect(machine.capabilities.contains(Wire.Capability.eager))
        let header = fileHeader("f", size: 3, flags: Self.eager)
        let opened = machine.received(.frame(.file(header)))
        guard case .openFile(let request)? = opened.first else {
            Issue.record("no openFile: \(opened)")
            return
        }
        #expect(request.header.eager)
        #expect(machine.handle(.fileOpened(.success(0))).isEmpty, "no ACCEPT for an eager file")
        #expect(machine.isReceivingFile)
        let piece: [UInt8] = [1, 2, 3]
        piece.withUnsafeBytes { #expect(machine.received(.data($0, endsFrame: true)) == [.deliverData]) }
        #expect(machine.decoded(3).write)
        #expect(machine.received(.frame(.end(size: 3, digest: Self.digest))) == [.finishData])
        #expect(machine.handle(.dataFinished) == [.commitFile(digest: Self.digest)])
        #expect(machine.handle(.committed(nil)).first == .send(.stored))
        #expect(machine.entriesAnswered == 1 && machine.state == .idle)
    }

    @Test("An eager file refused at its header or by the store has its data skipped up to END, once answered")
    func refusedEagerFileSkipsData() {
        for refusal in ["header", "store", "too large"] {
            var machine = receiver()
            if refusal == "too large" { machine.settings.maxSize = 2 }
            let path = refusal == "header" ? "../x" : "x"
            var actions = machine.received(.frame(.file(fileHeader(path, size: 3, flags: Self.eager))))
            if refusal == "store" {
                #expect(actions.first.map { if case .openFile = $0 { true } else { false } } == true)
                actions = machine.handle(.fileOpened(.failure(.refused(.exists, "exists"))))
            }
            #expect(
                actions.contains { if case .send(.refused) = $0 { true } else { false } }, "\(refusal): \(actions)")
            #expect(machine.state == .discarding, "\(refusal)")
            let piece: [UInt8] = [1, 2, 3]
            piece.withUnsafeBytes { #expect(machine.received(.data($0, endsFrame: true)).isEmpty) }
            #expect(machine.received(.frame(.end(size: 3, digest: Self.digest))).isEmpty)
            #expect(machine.state == .idle && machine.entriesAnswered == 1, "\(refusal): answered once")
            // The next entry is served as usual.
            let next = machine.received(.frame(.file(fileHeader("y", size: 1, flags: Self.eager))))
            #expect(next.first.map { if case .openFile = $0 { true } else { false } } == true, "\(refusal)")
        }
    }

    @Test(
        "Eager to a receiver that does not offer it, eager and resumable without a size, or a RANGE flagged eager: violations"
    )
    func eagerViolations() {
        var old = receiver(eager: false)
        #expect(!old.capabilities.contains(Wire.Capability.eager))
        #expect(
            old.received(.frame(.file(fileHeader("f", size: 1, flags: Self.eager)))).last
                == .end(.violation("FILE flagged eager: this receiver does not offer eager")))
        var sizeless = receiver()
        #expect(
            sizeless.received(
                .frame(.file(fileHeader("f", size: 0, flags: Wire.FileFlags.eager | Wire.FileFlags.resumable)))
            )
            .last == .end(.violation("FILE flagged eager and resumable without a size")))
        var joined = ReceiverMachine(settings: .init(streams: true))
        _ = joined.received(.magic)
        _ = joined.received(.frame(.hello(version: 1, capabilities: ["sha256", "streams"])))
        let join = TransferJoin(id: Array(repeating: 1, count: Wire.transferIDBytes), index: 0, count: 2)
        _ = joined.received(.frame(.join(join)))
        _ = joined.handle(.transferJoined(nil))
        let range = RangeHeader(
            range: ByteRange(start: 0, length: 1), entry: fileHeader("f", size: 2, flags: Self.eager))
        #expect(
            joined.received(.frame(.range(range))).last
                == .end(.violation("RANGE flagged eager (a range waits for ACCEPT)")))
    }

    static let entries = [
        SenderMachine.Entry(
            relative: "small", isDirectory: false, seekable: true, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0),
        SenderMachine.Entry(
            relative: "large", isDirectory: false, seekable: true, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0),
    ]

    func sender(receiverOffers capabilities: Set<String>, eager: Bool = true) -> SenderMachine {
        var machine = SenderMachine(entries: Self.entries, settings: .init(eager: eager))
        _ = machine.received(.magic)
        _ = machine.received(.frame(.hello(version: 1, capabilities: capabilities)))
        return machine
    }

    @Test("The sender sends a file of at most 64 KiB eagerly, not resumable, and a larger one after ACCEPT")
    func senderSendsSmallFilesEagerly() {
        var machine = sender(receiverOffers: ["sha256", "resume", "eager"])
        #expect(machine.proceed() == [.openEntry(0)])
        let small = OpenedEntry(size: Wire.eagerLimit, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0)
        let announced = machine.handle(.entryOpened(0, .success(small)))
        guard case .send(.file(let header))? = announced.first else {
            Issue.record("no FILE: \(announced)")
            return
        }
        #expect(header.eager && !header.resumable)
        #expect(announced.dropFirst().first == .startData(index: 0, offset: 0, compressed: false, range: nil))
        #expect(machine.sendingIndex == 0)
        #expect(
            machine.handle(.dataEnded(size: Wire.eagerLimit, digest: Self.digest)).last
                == .send(
                    .end(
                        size: Wire.eagerLimit, digest: Self.digest)))
        // The next entry goes out before the first is answered.
        #expect(machine.proceed() == [.openEntry(1)])
        let large = OpenedEntry(size: Wire.eagerLimit + 1, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0)
        let waits = machine.handle(.entryOpened(1, .success(large)))
        guard case .send(.file(let second))? = waits.first, waits.count == 1 else {
            Issue.record("the large file does not wait for ACCEPT: \(waits)")
            return
        }
        #expect(!second.eager && second.resumable)
        #expect(machine.received(.frame(.stored)) == [.settle(0, .stored)])
        #expect(
            machine.received(.frame(.accept(offset: 0))) == [
                .startData(index: 1, offset: 0, compressed: false, range: nil)
            ])
    }

    @Test("No eager sending to a receiver without it, or when turned off; an ACCEPT for an eager file is a violation")
    func senderFallsBack() {
        let small = OpenedEntry(size: 5, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0)
        for (capabilities, eager) in [(Set(["sha256", "resume"]), true), (["sha256", "resume", "eager"], false)] {
            var machine = sender(receiverOffers: capabilities, eager: eager)
            _ = machine.proceed()
            let announced = machine.handle(.entryOpened(0, .success(small)))
            guard case .send(.file(let header))? = announced.first, announced.count == 1 else {
                Issue.record("\(capabilities) \(eager): \(announced)")
                continue
            }
            #expect(!header.eager && header.resumable)
        }
        var machine = sender(receiverOffers: ["sha256", "eager"])
        _ = machine.proceed()
        _ = machine.handle(.entryOpened(0, .success(small)))
        #expect(machine.received(.frame(.accept(offset: 0))).last == .end(.violation("unexpected ACCEPT")))
    }

    static let eagerResume = Set(["sha256", "resume", "eager", "eager-resume"])
    static let large = OpenedEntry(size: 1 << 20, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0)

    @Test(
        "To a receiver offering eager-resume a large file goes eager and resumable; held in part, it is announced again"
    )
    func senderAnnouncesAgainWhatIsHeld() {
        var machine = sender(receiverOffers: Self.eagerResume)
        #expect(machine.proceed() == [.openEntry(0)])
        let announced = machine.handle(.entryOpened(0, .success(Self.large)))
        guard case .send(.file(let header))? = announced.first else {
            Issue.record("no FILE: \(announced)")
            return
        }
        #expect(header.eager && header.resumable)
        #expect(announced.last == .startData(index: 0, offset: 0, compressed: false, range: nil))
        // The receiver holds 4096 bytes: the data stops, ABORT ends what it skips, and the file
        // is announced again, not eager, then resumed from there.
        #expect(
            machine.received(.frame(.accept(offset: 4096))) == [
                .stopData(0), .send(.abort(reason: "the receiver holds part of the file: announced again")),
            ])
        #expect(machine.announcedAgain == [0])
        #expect(machine.proceed() == [.openEntry(0)])
        let again = machine.handle(.entryOpened(0, .success(Self.large)))
        guard case .send(.file(let second))? = again.first, again.count == 1 else {
            Issue.record("announced again eagerly: \(again)")
            return
        }
        #expect(!second.eager && second.resumable)
        #expect(
            machine.received(.frame(.accept(offset: 4096))) == [
                .startData(index: 0, offset: 4096, compressed: false, range: nil)
            ])
        #expect(
            machine.handle(.dataEnded(size: 1 << 20, digest: Self.digest)).last
                == .send(.end(size: 1 << 20, digest: Self.digest)))
        #expect(machine.received(.frame(.stored)) == [.settle(0, .stored)])
        #expect(machine.proceed() == [.openEntry(1)])
    }

    @Test("Goodbye waits while a file sent eager and resumable is unanswered; an ACCEPT past its size is a violation")
    func senderHoldsGoodbye() {
        var machine = SenderMachine(entries: [Self.entries[1]], settings: .init())
        _ = machine.received(.magic)
        _ = machine.received(.frame(.hello(version: 1, capabilities: Self.eagerResume)))
        _ = machine.proceed()
        _ = machine.handle(.entryOpened(0, .success(Self.large)))
        _ = machine.handle(.dataEnded(size: 1 << 20, digest: Self.digest))
        #expect(!machine.canProceed && machine.proceed().isEmpty, "no goodbye yet: the file may be asked for again")
        var lying = machine
        #expect(
            lying.received(.frame(.accept(offset: (1 << 20) + 1))).last
                == .end(.violation("ACCEPT offset \((1 << 20) + 1) out of range for a file sent eagerly")))
        #expect(machine.received(.frame(.stored)) == [.settle(0, .stored)])
        #expect(machine.proceed() == [.send(.bye)])
    }

    @Test("The receiver answers an eager file it holds part of with ACCEPT, keeps the partial, skips the data")
    func receiverAsksForWhatItLacks() {
        var machine = receiver()
        #expect(machine.capabilities.isSuperset(of: ["eager", "eager-resume"]))
        let flags = Self.eager | Wire.FileFlags.resumable
        _ = machine.received(.frame(.file(fileHeader("big", size: 1 << 20, flags: flags))))
        #expect(machine.handle(.fileOpened(.success(4096))) == [.dropFile(keep: true), .send(.accept(offset: 4096))])
        #expect(machine.state == .discarding)
        // ACCEPT answers this announcement, with no report: the next one is answered as any other
        // (Fuzz/Regressions/receiver/eager-resumable-held-partial).
        #expect(machine.entriesAnnounced == 1 && machine.entriesAnswered == 1)
        let piece: [UInt8] = [1, 2, 3]
        piece.withUnsafeBytes { #expect(machine.received(.data($0, endsFrame: true)).isEmpty) }
        #expect(machine.received(.frame(.abort(reason: "announced again"))).isEmpty)
        #expect(machine.state == .idle)
        // Announced again, not eager: resumed as any resumable file.
        _ = machine.received(
            .frame(.file(fileHeader("big", size: 1 << 20, flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.resumable))))
        #expect(machine.handle(.fileOpened(.success(4096))) == [.send(.accept(offset: 4096))])
        #expect(machine.isReceivingFile)
        // Held nothing: an eager resumable file is simply received.
        var fresh = receiver()
        _ = fresh.received(.frame(.file(fileHeader("big", size: 1 << 20, flags: flags))))
        #expect(fresh.handle(.fileOpened(.success(0))).isEmpty)
        #expect(fresh.isReceivingFile)
    }

    @Test(
        "Answers behind a staged file wait for its commit and go out in order; an ACCEPT behind it asks for the commit")
    func stagedAnswersKeepTheirOrder() {
        var machine = receiver()
        func store(_ path: String) {
            _ = machine.received(.frame(.file(fileHeader(path, size: 1, flags: Self.eager))))
            _ = machine.handle(.fileOpened(.success(0)))
            [UInt8]([7]).withUnsafeBytes { _ = machine.received(.data($0, endsFrame: true)) }
            _ = machine.decoded(1)
            _ = machine.received(.frame(.end(size: 1, digest: Self.digest)))
            _ = machine.handle(.dataFinished)
        }
        store("a")
        #expect(machine.handle(.staged).isEmpty, "set aside: no answer yet")
        #expect(machine.acceptsMessages, "the next entry is received meanwhile")
        // Refused at its header: its answer waits behind a's.
        #expect(machine.received(.frame(.file(fileHeader("../x", size: 1)))).isEmpty)
        // A file that waits for ACCEPT: the staged file is committed now.
        _ = machine.received(.frame(.file(fileHeader("c", size: 10))))
        #expect(machine.handle(.fileOpened(.success(0))) == [.commitStaged])
        let answers = machine.handle(.stagedCommitted(nil)).compactMap { action -> Frame? in
            if case .send(let frame) = action { return frame }
            return nil
        }
        guard answers.count == 3 else {
            Issue.record("answers: \(answers)")
            return
        }
        #expect(answers[0] == .stored)
        if case .refused = answers[1] {} else { Issue.record("second answer: \(answers[1])") }
        #expect(answers[2] == .accept(offset: 0))
        #expect(machine.queuedAnswers.isEmpty && machine.entriesAnswered == 2)
    }
}

@Suite("Transfer protocol: the inbound buffer", .ownThreads)
struct InboundBufferTests {
    @Test("A full buffer compacts for a read only when that moves no more than it frees, or holds a partial message")
    func compactsOnlyWhenItPays() {
        let buffer = ByteBuffer(capacity: 100)
        buffer.produced(100)
        buffer.consume(10)
        // 90 bytes to parse, 10 to gain: not now.
        let ok1 = buffer.reserveForRead(partial: 8)
        #expect(!ok1)
        #expect(buffer.readIndex == 10 && buffer.tailSpace == 0)
        buffer.consume(40)
        // 50 to move, 50 gained.
        let ok2 = buffer.reserveForRead(partial: 8)
        #expect(ok2)
        #expect(buffer.readIndex == 0 && buffer.readableBytes == 50 && buffer.tailSpace == 50)
        // What may be a message waiting for its rest is always made room for.
        buffer.produced(50)
        buffer.consume(95)
        let ok3 = buffer.reserveForRead(partial: 8)
        #expect(ok3)
        #expect(buffer.readableBytes == 5 && buffer.tailSpace == 95)
        let partial = ByteBuffer(capacity: 100)
        partial.produced(100)
        partial.consume(2)
        let ok4 = partial.reserveForRead(partial: 99)
        #expect(ok4)
        #expect(partial.readIndex == 0 && partial.tailSpace == 2)
    }

    @Test("It changes size, up or down, only with nothing lent and room for what it holds; the bytes move with it")
    func resizesOnlyWhenSafe() {
        let buffer = ByteBuffer(capacity: 100)
        _ = buffer.append((0..<60).map { UInt8($0) })
        buffer.consume(20)
        buffer.resize(to: 50)
        #expect(buffer.capacity == 50 && buffer.readIndex == 0 && Array(buffer.readable) == (20..<60).map { UInt8($0) })
        buffer.resize(to: 30)
        #expect(buffer.capacity == 50, "40 unconsumed bytes do not fit in 30")
        buffer.consume(10)
        let loan = buffer.lend(UnsafeRawBufferPointer(rebasing: buffer.readable[0..<5]))
        buffer.resize(to: 200)
        #expect(buffer.capacity == 50, "lent bytes are not moved")
        #expect(Array(loan.bytes) == (30..<35).map { UInt8($0) })
        loan.giveBack()
        loan.giveBack()  // once is what counts
        buffer.resize(to: 200)
        #expect(buffer.capacity == 200 && Array(buffer.readable) == (30..<60).map { UInt8($0) })
        #expect(buffer.tailSpace == 170)
    }

    @Test("A session receiving a file reads into 1 MiB while four or fewer arrive, less as more do, never below 64 KiB")
    func sharesOfTheBudget() {
        let shares = [1, 2, 4, 5, 8, 9, 16, 17, 32, 64, 65, 1000].map { ReceiverSession.fileInbound(receiving: $0) }
        let kib = shares.map { $0 >> 10 }
        #expect(kib == [1024, 1024, 1024, 512, 512, 256, 256, 128, 128, 64, 64, 64])
    }
}
