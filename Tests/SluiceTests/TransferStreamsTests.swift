import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// True when `path` holds exactly `expected` (an expectation on megabytes that does not print
/// them when it fails).
func sameBytes(_ path: String, _ expected: [UInt8]?) -> Bool {
    guard let expected, let actual = readFile(path) else { return false }
    return actual == expected
}

/// `send --streams`: one transfer over several connections, through a relay that caps each
/// connection, as a shaped link does. Real sockets on 127.0.0.1, real files; the tests wait
/// for the transfer's end, never for a time.
@Suite("Transfer: parallel streams", .ownThreads)
struct TransferStreamsTests {
    /// Bytes a second each relayed connection may carry toward the receiver.
    static let cap = 4 << 20

    /// Random bytes from a fixed seed.
    static func content(_ count: Int, seed: UInt64) -> [UInt8] {
        var random = SeededRandom(state: seed)
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) }
    }

    /// Sends `paths` over `streams` connections to `port` on the harness's loop, and runs it
    /// until the sender is done and every session it opened has ended.
    static func send(
        _ paths: [String], streams: Int, port: UInt16, harness: TransferHarness,
        options: TransferSendOptions = TransferSendOptions(), limit: Duration = .seconds(60)
    ) throws -> (TransferSummary, ParallelTransferSender) {
        let sender = try ParallelTransferSender(paths: paths, streams: streams, options: options)
        let box = SummaryBox()
        sender.start(connect: { Socket.connect(host: "127.0.0.1", port: port) }, on: harness.loop) {
            box.summary = $0
        }
        runLoop(harness.loop, for: limit) { box.summary != nil && harness.receiver.activeSessions == 0 }
        return (try #require(box.summary, "the transfer did not finish in time"), sender)
    }

    @Test("--streams 4 through a relay capping each connection: every connection carries a range, files identical")
    func fourStreams() throws {
        try withTemporaryDirectory { root in
            let src = root + "/src"
            let dst = root + "/dst"
            for directory in [src + "/tree/sub", dst] {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            }
            try writeFile(src + "/tree/big.bin", Self.content(4 << 20, seed: 1), mtime: (1_700_000_000, 5))
            try writeFile(src + "/tree/sub/small", Self.content(10_000, seed: 2), mode: 0o600)
            try writeFile(src + "/tree/sub/mid", Self.content(300_000, seed: 3))
            chmod(src + "/tree/sub", 0o750)
            for directory in [src + "/tree/sub", src + "/tree"] {
                let times = [timespec(tv_sec: 1_600_000_000, tv_nsec: 7), timespec(tv_sec: 1_600_000_000, tv_nsec: 7)]
                utimensat(AT_FDCWD, directory, times, 0)
            }
            let harness = try TransferHarness(directory: dst)
            let relay = try CappedRelay(to: harness.port, bytesPerSecond: Self.cap, on: harness.loop)
            let (summary, sender) = try Self.send([src + "/tree"], streams: 4, port: relay.port, harness: harness)
            #expect(summary.error == nil && summary.succeeded, "\(summary.results)")
            #expect(sender.streamsUsed == 4)
            // Directories too get their modes and mtimes, after every file below them.
            #expect(treeDifferences(src + "/tree", dst + "/tree") == [])
            // Four connections, each carried at least its 1 MiB range of big.bin.
            #expect(relay.bytesPerConnection.count == 4)
            #expect(relay.bytesPerConnection.allSatisfy { $0 >= 1 << 20 }, "\(relay.bytesPerConnection)")
            #expect(harness.reports.count == 4)
            #expect(Set(harness.reports.compactMap(\.streamIndex)) == [0, 1, 2, 3])
            #expect(!fileExists(dst + "/tree/.big.bin.sluice-part"))
        }
    }

    @Test("Cutting one connection fails only its ranges; sending again resumes them, range by range")
    func cutConnectionResumes() throws {
        try withTemporaryDirectory { root in
            let src = root + "/src"
            let dst = root + "/dst"
            for directory in [src, dst] {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            }
            let size = 4 << 20
            let bytes = Self.content(size, seed: 7)
            try writeFile(src + "/big.bin", bytes, mtime: (1_700_000_000, 0))
            let harness = try TransferHarness(directory: dst)
            let relay = try CappedRelay(to: harness.port, bytesPerSecond: Self.cap, on: harness.loop)
            // Connection 2 carries bytes 2 MiB ..< 3 MiB: cut it a quarter of the way in.
            relay.cutAfter = (index: 2, bytes: 256 << 10)
            let (first, _) = try Self.send([src + "/big.bin"], streams: 4, port: relay.port, harness: harness)
            #expect(first.error != nil)
            #expect(first.results.first?.outcome.isStored == false)
            #expect(!fileExists(dst + "/big.bin"), "a file with a range missing reached its final name")
            #expect(fileExists(dst + "/.big.bin.sluice-part"), "the ranges received were not kept")
            // Only the cut connection's session failed; the three other ranges were stored in
            // place.
            let failed = harness.reports.filter { $0.error != nil }
            #expect(failed.count == 1, "\(harness.reports.map { ($0.streamIndex, $0.error) })")
            let cut = try #require(failed.first?.streamIndex)
            let partial = try #require(readFile(dst + "/.big.bin.sluice-part"))
            for k in 0..<4 where k != cut {
                let slice = (k << 20)..<((k + 1) << 20)
                let intact = partial.count >= slice.upperBound && partial[slice] == bytes[slice]
                #expect(intact, "range \(k)")
            }

            let (second, _) = try Self.send([src + "/big.bin"], streams: 4, port: harness.port, harness: harness)
            #expect(second.error == nil && second.succeeded, "\(second.results)")
            #expect(sameBytes(dst + "/big.bin", bytes))
            // Only range 2's missing part went again.
            #expect(second.resumedBytes >= 3 << 20, "resumed \(second.resumedBytes)")
            #expect(second.bytes <= 1 << 20, "sent \(second.bytes)")
            // The receiver's line for the file counts what every range held.
            let stored = harness.allResults.last { $0.path == "big.bin" && !$0.rangeOnly }
            #expect(
                stored?.outcome == .stored && (stored?.resumedBytes ?? 0) >= 3 << 20, "\(String(describing: stored))")
            #expect(!fileExists(dst + "/.big.bin.sluice-part"))
        }
    }

    @Test("A receiver without the streams capability gets the whole transfer over one connection")
    func olderReceiverGetsOneStream() throws {
        try withTemporaryDirectory { root in
            let src = root + "/src"
            let dst = root + "/dst"
            for directory in [src + "/d", dst] {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            }
            try writeFile(src + "/d/big", Self.content(2 << 20, seed: 9))
            try writeFile(src + "/d/small", Self.content(1000, seed: 10))
            let harness = try TransferHarness(
                directory: dst, options: TransferReceiveOptions(idleTimeout: .seconds(20), streams: false))
            let relay = try CappedRelay(to: harness.port, bytesPerSecond: 64 << 20, on: harness.loop)
            let (summary, sender) = try Self.send([src + "/d"], streams: 4, port: relay.port, harness: harness)
            #expect(summary.succeeded, "\(summary.results)")
            #expect(sender.streamsUsed == 1)
            #expect(sender.warnings.contains { $0.contains("does not offer parallel streams") })
            #expect(relay.bytesPerConnection.count == 1)
            #expect(treeDifferences(src + "/d", dst + "/d", compareDirectoryTimes: false) == [])
        }
    }

    @Test("More connections than --max-sessions: refused as busy, nothing stored, nothing left behind")
    func moreConnectionsThanSessions() throws {
        try withTemporaryDirectory { root in
            let src = root + "/src"
            let dst = root + "/dst"
            for directory in [src, dst] {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            }
            try writeFile(src + "/big.bin", Self.content(2 << 20, seed: 11))
            let harness = try TransferHarness(
                directory: dst, options: TransferReceiveOptions(idleTimeout: .seconds(20), maxSessions: 2))
            let (summary, _) = try Self.send([src + "/big.bin"], streams: 4, port: harness.port, harness: harness)
            let error = try #require(summary.error)
            #expect(error.code == .unavailable, "\(error)")
            #expect(error.description.contains("busy"), "\(error)")
            #expect(treePaths(dst) == [])
            // The receiver serves the next sender as before.
            let (again, _) = try Self.send([src + "/big.bin"], streams: 2, port: harness.port, harness: harness)
            #expect(again.succeeded, "\(again.results)")
            #expect(sameBytes(dst + "/big.bin", readFile(src + "/big.bin")))
        }
    }

    /// Starts a one-connection send of `path` to `port` on the harness's loop.
    static func startPlain(_ path: String, port: UInt16, harness: TransferHarness) throws -> (
        TransferSender, SummaryBox
    ) {
        let sender = try TransferSender(paths: [path])
        let box = SummaryBox()
        let (input, output) = Socket.connect(host: "127.0.0.1", port: port)
        sender.start(input: input, output: output, on: harness.loop) { box.summary = $0 }
        return (sender, box)
    }

    @Test("A connection beyond --max-sessions fails only its ranges; the transfer already served goes on")
    func connectionBeyondTheLimit() throws {
        try withTemporaryDirectory { try beyondTheLimit($0) }
    }

    /// The body of `connectionBeyondTheLimit` (a function of its own: Swift 6.3's region
    /// analysis crashes on it as a closure).
    private func beyondTheLimit(_ root: String) throws {
        let src = root + "/src"
        let dst = root + "/dst"
        for directory in [src, dst] {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        let other = Self.content(2 << 20, seed: 31)
        try writeFile(src + "/other.bin", other)
        try writeFile(src + "/b.bin", Self.content(3 << 20, seed: 32))
        let harness = try TransferHarness(
            directory: dst, options: TransferReceiveOptions(idleTimeout: .seconds(20), maxSessions: 3))
        // Another transfer, slowed by a relay, holds one of the three sessions throughout.
        let relay = try CappedRelay(to: harness.port, bytesPerSecond: 1 << 20, on: harness.loop)
        let (plainSender, plainBox) = try Self.startPlain(src + "/other.bin", port: relay.port, harness: harness)
        #expect(runLoop(harness.loop, for: .seconds(20)) { harness.receiver.activeSessions == 1 })
        let (summary, _) = try Self.send([src + "/b.bin"], streams: 3, port: harness.port, harness: harness)
        let error = try #require(summary.error)
        #expect(error.code == .unavailable, "\(error)")
        #expect(error.description.contains("busy"), "\(error)")
        #expect(!fileExists(dst + "/b.bin"))
        runLoop(harness.loop, for: .seconds(30)) { plainBox.summary != nil && harness.receiver.activeSessions == 0 }
        #expect(plainSender.paths.count == 1)
        let plainSummary = try #require(plainBox.summary)
        #expect(plainSummary.succeeded, "\(plainSummary.results)")
        #expect(sameBytes(dst + "/other.bin", other))
    }

    // MARK: Hostile peers

    static let id = [UInt8](repeating: 0x42, count: Wire.transferIDBytes)

    static func join(index: Int, count: Int, id: [UInt8] = id) -> [UInt8] {
        MessageWriter.join(TransferJoin(id: id, index: index, count: count))
    }

    static func range(_ path: String, start: UInt64, length: UInt64, size: UInt64) -> [UInt8] {
        let header = EntryHeader(
            flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.resumable, size: size, mode: 0o644, mtimeSeconds: 0,
            mtimeNanoseconds: 0, path: Array(path.utf8))
        return MessageWriter.range(RangeHeader(range: ByteRange(start: start, length: length), entry: header))
    }

    static func rangeEnd(_ bytes: [UInt8]) -> [UInt8] {
        MessageWriter.rangeEnd(
            length: UInt64(bytes.count), digest: SHA256Digest.hash(bytes), fileDigest: SHA256Digest.hash([]))
    }

    func exchange(_ harness: TransferHarness, _ payload: [UInt8]) throws -> [(UInt8, String)] {
        let sessionsBefore = harness.reports.count
        let client = SocketExchange(Socket.connect(host: "127.0.0.1", port: harness.port), payload: payload)
        client.start(on: harness.loop)
        runLoop(harness.loop, for: .seconds(10)) { client.done && harness.reports.count > sessionsBefore }
        #expect(client.done)
        return RawWire.messages(client.received).map { ($0.0, PeerText.sanitized($0.1)) }
    }

    @Test("receive --once: the connections of its one transfer are admitted, and no other connection")
    func onceAdmitsOneTransfer() throws {
        try withTemporaryDirectory { root in
            let src = root + "/src"
            let dst = root + "/dst"
            for directory in [src, dst] {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            }
            let bytes = Self.content(4 << 20, seed: 21)
            try writeFile(src + "/big.bin", bytes)
            let harness = try TransferHarness(directory: dst)
            // The first session (id 1) is the one transfer served, as `receive --once` does.
            harness.receiver.onlyTransferOfSession = 1
            let relay = try CappedRelay(to: harness.port, bytesPerSecond: 2 << 20, on: harness.loop)
            let sender = try ParallelTransferSender(paths: [src + "/big.bin"], streams: 4)
            let box = SummaryBox()
            var joined = 0
            sender.onStreamJoined = { _ in joined += 1 }
            sender.start(connect: { Socket.connect(host: "127.0.0.1", port: relay.port) }, on: harness.loop) {
                box.summary = $0
            }
            #expect(runLoop(harness.loop, for: .seconds(30)) { joined == 4 || box.summary != nil })
            #expect(box.summary == nil, "the transfer ended before a stranger could try")
            // A stranger with a file, and one joining another transfer, are both refused.
            let stranger = try exchange(harness, RawWire.hello() + RawWire.file("x", size: 1) + RawWire.bye)
            #expect(stranger.last?.1 == "this receiver serves one transfer (--once); connection refused")
            let otherID = [UInt8](repeating: 9, count: Wire.transferIDBytes)
            let joiner = try exchange(
                harness, RawWire.hello(["sha256", "streams"]) + Self.join(index: 0, count: 2, id: otherID))
            #expect(joiner.last?.1 == "this receiver serves one transfer (--once); connection refused")
            runLoop(harness.loop, for: .seconds(60)) { box.summary != nil && harness.receiver.activeSessions == 0 }
            let summary = try #require(box.summary)
            #expect(summary.succeeded, "\(summary.results)")
            #expect(sameBytes(dst + "/big.bin", bytes))
            #expect(!fileExists(dst + "/x"))
        }
    }

    @Test("A transfer holds at most 64 unfinished ranged files open; one more is refused as busy")
    func openFilesAreBounded() throws {
        try withTemporaryDirectory { root in
            let harness = try TransferHarness(directory: root)
            var payload = RawWire.hello(["sha256", "streams"]) + Self.join(index: 0, count: 2)
            for index in 0...TransferGroup.maxOpenFiles {
                // The first byte of a two-byte file: the file stays unfinished, its descriptor open.
                payload += Self.range("f\(index)", start: 0, length: 1, size: 2)
                payload += RawWire.data([UInt8(index & 0xFF)]) + Self.rangeEnd([UInt8(index & 0xFF)])
            }
            payload += RawWire.bye
            let replies = try exchange(harness, payload)
            let answers = replies.filter {
                [Wire.MessageType.stored.rawValue, Wire.MessageType.refused.rawValue].contains($0.0)
            }
            #expect(answers.count == TransferGroup.maxOpenFiles + 1, "\(replies.count) replies")
            #expect(answers.dropLast().allSatisfy { $0.0 == Wire.MessageType.stored.rawValue })
            #expect(answers.last?.0 == Wire.MessageType.refused.rawValue)
            #expect(answers.last?.1.contains("busy: 64 files of this transfer") == true, "\(answers.last?.1 ?? "")")
            #expect(!fileExists(root + "/f0") && !fileExists(root + "/.f64.sluice-part"))
        }
    }

    @Test("A transfer id no session knows is refused; so is a JOIN to a receiver without streams")
    func unknownTransferID() throws {
        try withTemporaryDirectory { root in
            let harness = try TransferHarness(directory: root)
            let streams = RawWire.hello(["sha256", "streams"])
            let replies = try exchange(harness, streams + Self.join(index: 1, count: 2) + RawWire.bye)
            #expect(replies.last?.0 == Wire.MessageType.error.rawValue)
            #expect(replies.last?.1 == "JOIN: unknown transfer id")
            #expect(harness.reports.last?.error?.description.contains("unknown transfer id") == true)

            let plain = try TransferHarness(
                directory: root, options: TransferReceiveOptions(idleTimeout: .seconds(20), streams: false))
            let refused = try exchange(plain, streams + Self.join(index: 0, count: 2) + RawWire.bye)
            #expect(refused.last?.1 == "JOIN: this receiver does not offer streams")
            #expect(treePaths(root) == [])
        }
    }

    @Test("Ranges outside the size, overlapping or overrunning are refused; nothing is written outside the ranges")
    func hostileRanges() throws {
        try withTemporaryDirectory { base in
            let root = base + "/dst"
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
            let harness = try TransferHarness(directory: root)
            let data = Self.content(100, seed: 3)
            var payload = RawWire.hello(["sha256", "resume", "streams"]) + Self.join(index: 0, count: 2)
            payload += Self.range("x", start: 90, length: 20, size: 100)  // outside the size
            payload += Self.range("x", start: 0, length: 0, size: 100)  // empty
            payload += Self.range("x", start: UInt64.max - 5, length: 10, size: 100)  // wraps around
            payload += Self.range("x", start: 0, length: 60, size: 100)  // in
            payload += RawWire.data(Array(data[0..<60])) + Self.rangeEnd(Array(data[0..<60]))
            payload += Self.range("x", start: 50, length: 50, size: 100)  // overlaps [0, 60)
            payload += Self.range("x", start: 60, length: 40, size: 101)  // another version of x
            payload += Self.range("x", start: 60, length: 20, size: 100)  // in, then overruns
            payload += RawWire.data(Array(data[60..<90])) + Self.rangeEnd(Array(data[60..<90]))
            payload += RawWire.bye
            let replies = try exchange(harness, payload)
            let answers = replies.filter {
                [Wire.MessageType.stored.rawValue, Wire.MessageType.refused.rawValue, Wire.MessageType.failed.rawValue]
                    .contains($0.0)
            }
            #expect(answers.count == 7, "\(replies)")
            let refusals = answers.filter { $0.0 == Wire.MessageType.refused.rawValue }.map(\.1)
            #expect(refusals.count == 5, "\(refusals)")
            // The code byte (invalid range, 6) shown escaped, then the reason.
            #expect(refusals.allSatisfy { $0.hasPrefix("\\u{06}") }, "\(refusals)")
            #expect(refusals.contains { $0.contains("outside the announced size") })
            #expect(refusals.contains { $0.contains("overlapping ranges") })
            #expect(refusals.contains { $0.contains("another version") })
            #expect(answers[3].0 == Wire.MessageType.stored.rawValue)
            #expect(answers.last?.0 == Wire.MessageType.failed.rawValue)
            #expect(answers.last?.1.contains("more data than announced") == true)
            // Never at the final name; the partial holds the verified range and no byte past
            // the ranges admitted ([0, 60) and [60, 80)).
            #expect(!fileExists(root + "/x"))
            let partial = try #require(readFile(root + "/.x.sluice-part"))
            #expect(partial.count >= 60 && partial.count <= 80, "\(partial.count) bytes")
            #expect(partial.prefix(60) == data[0..<60])

            // Another transfer is untouched: a plain send stores its own file after.
            try writeFile(base + "/other", Self.content(5000, seed: 4))
            let summary = try harness.send(paths: [base + "/other"])
            #expect(summary.succeeded)
            #expect(sameBytes(root + "/other", readFile(base + "/other")))
        }
    }
}

@Suite("Transfer protocol: parallel streams in the machines", .ownThreads)
struct StreamsMachineTests {
    static let join = TransferJoin(id: Array(repeating: 1, count: Wire.transferIDBytes), index: 0, count: 2)

    static func rangeHeader(_ path: String, _ start: UInt64, _ length: UInt64, size: UInt64) -> RangeHeader {
        RangeHeader(
            range: ByteRange(start: start, length: length),
            entry: EntryHeader(
                flags: Wire.FileFlags.sizeKnown, size: size, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0,
                path: Array(path.utf8)))
    }

    @Test("The new messages round-trip in their direction only, and malformed ones are refused")
    func framesRoundTrip() {
        let toReceiver: [Frame] = [
            .join(Self.join), .range(Self.rangeHeader("a/b", 7, 9, size: 100)),
            .rangeEnd(length: 9, digest: Array(repeating: 2, count: 32), fileDigest: Array(repeating: 3, count: 32)),
        ]
        for frame in toReceiver {
            #expect(decode(Wire.magic + frame.encoded, cuts: []) == [.magic, .frame(frame)])
            let wrong = decode(Wire.magic + frame.encoded, cuts: [], direction: .toSender)
            #expect(wrong.last.map { if case .violation = $0 { true } else { false } } == true)
        }
        #expect(decode(Wire.magic + Frame.joined.encoded, cuts: [], direction: .toSender) == [.magic, .frame(.joined)])
        // A count of 1, an index at the count, a count over 64: malformed.
        for (index, count) in [(0, 1), (2, 2), (0, 65)] {
            var bytes = MessageWriter.join(TransferJoin(id: Self.join.id, index: 0, count: 2))
            bytes[bytes.count - 4] = UInt8(index >> 8)
            bytes[bytes.count - 3] = UInt8(index & 0xFF)
            bytes[bytes.count - 2] = UInt8(count >> 8)
            bytes[bytes.count - 1] = UInt8(count & 0xFF)
            #expect(decode(Wire.magic + bytes, cuts: []).last == .violation("malformed JOIN message"))
        }
    }

    func joinedReceiver(streams: Bool = true, mustJoin: Bool = false) -> ReceiverMachine {
        receiverAfterHello(.init(overwrite: false, maxSize: nil, resume: true, streams: streams, mustJoin: mustJoin))
    }

    @Test("Receiver: JOIN, a range in, RANGE-END, answered STORED for the range (not yet the file)")
    func receiverRange() {
        var machine = joinedReceiver()
        #expect(machine.capabilities.contains("streams"))
        #expect(machine.received(.frame(.join(Self.join))) == [.joinTransfer(Self.join)])
        #expect(!machine.acceptsMessages)
        #expect(machine.handle(.transferJoined(nil)) == [.send(.joined)])
        let header = Self.rangeHeader("f", 10, 4, size: 20)
        let actions = machine.received(.frame(.range(header)))
        guard case .openRange(let request, let range) = actions.first else {
            Issue.record("\(actions)")
            return
        }
        #expect(range == header.range && request.relative == "f")
        #expect(machine.handle(.fileOpened(.success(1))) == [.send(.accept(offset: 1))])
        #expect(machine.decoded(3).write)
        let (over, failed) = machine.decoded(1)
        #expect(!over)
        #expect(failed.contains(.send(.failed(code: .data, reason: "more data than announced (4 bytes)"))))

        var second = joinedReceiver()
        _ = second.received(.frame(.join(Self.join)))
        _ = second.handle(.transferJoined(nil))
        _ = second.received(.frame(.range(header)))
        _ = second.handle(.fileOpened(.success(0)))
        #expect(second.decoded(4).write)
        let digest = [UInt8](repeating: 9, count: 32)
        // END is for whole files: a violation inside a range.
        var wrongEnd = second
        #expect(
            wrongEnd.received(.frame(.end(size: 4, digest: digest))).last
                == .end(.violation("END for a range (RANGE-END expected)")))
        #expect(second.received(.frame(.rangeEnd(length: 4, digest: digest, fileDigest: digest))) == [.finishData])
        #expect(second.handle(.dataFinished) == [.commitRange(digest: digest, fileDigest: digest)])
        let answered = second.handle(.rangeCommitted(nil, fileStored: false))
        #expect(answered.first == .send(.stored))
        guard case .report(let result) = answered.last else {
            Issue.record("\(answered)")
            return
        }
        #expect(result.rangeOnly && result.outcome == .stored)
        #expect(second.received(.frame(.bye)) == [.settleDirectories])
    }

    @Test("Receiver: ranges out of the size, before JOIN, without the capability, or a stranger under --once")
    func receiverRefusals() {
        var machine = joinedReceiver()
        _ = machine.received(.frame(.join(Self.join)))
        _ = machine.handle(.transferJoined(nil))
        for header in [
            Self.rangeHeader("f", 90, 20, size: 100), Self.rangeHeader("f", 0, 0, size: 100),
            Self.rangeHeader("f", .max, 2, size: 100),
        ] {
            let actions = machine.received(.frame(.range(header)))
            guard case .send(.refused(let code, _)) = actions.first else {
                Issue.record("\(header.range): \(actions)")
                continue
            }
            #expect(code == .invalidRange)
        }
        var unjoined = joinedReceiver()
        #expect(
            unjoined.received(.frame(.range(Self.rangeHeader("f", 0, 1, size: 1)))).last
                == .end(.violation("RANGE outside a transfer of several connections")))
        var plain = joinedReceiver(streams: false)
        #expect(!plain.capabilities.contains("streams"))
        #expect(
            plain.received(.frame(.join(Self.join))).last
                == .end(.violation("JOIN: this receiver does not offer streams")))
        var refusedJoin = joinedReceiver()
        _ = refusedJoin.received(.frame(.join(Self.join)))
        #expect(
            refusedJoin.handle(.transferJoined("JOIN: unknown transfer id")).last
                == .end(.violation("JOIN: unknown transfer id")))
        var once = joinedReceiver(mustJoin: true)
        let stranger = once.received(.frame(.file(fileHeader("f", size: 1))))
        #expect(stranger.last == .end(.violation("this receiver serves one transfer (--once); connection refused")))
        var late = joinedReceiver()
        _ = late.received(.frame(.directory(dirHeader("d"))))
        _ = late.handle(.directoryMade(nil))
        #expect(late.received(.frame(.join(Self.join))).last == .end(.violation("JOIN after the transfer began")))
    }

    static let entries = [
        SenderMachine.Entry(
            relative: "d", isDirectory: true, seekable: false, mode: 0o755, mtimeSeconds: 0, mtimeNanoseconds: 0),
        SenderMachine.Entry(
            relative: "d/big", isDirectory: false, seekable: true, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0),
    ]

    @Test("Sender: JOIN after HELLO, RANGE for its range, RANGE-END; a receiver without streams gets the fallback")
    func senderJoinsAndSendsRanges() {
        let range = ByteRange(start: 0, length: 512 << 10)
        let work: [SenderMachine.Work] = [.entry(0), .range(1, range, fileSize: 1 << 20)]
        var machine = SenderMachine(
            entries: Self.entries, settings: .init(), work: work, join: Self.join, fallback: [.entry(0), .entry(1)])
        _ = machine.received(.magic)
        #expect(
            machine.received(.frame(.hello(version: 1, capabilities: ["sha256", "resume", "streams"])))
                == [.send(.join(Self.join))])
        #expect(!machine.canProceed)
        #expect(machine.received(.frame(.joined)) == [.joined])
        _ = machine.proceed()
        #expect(machine.proceed() == [.openEntry(1)])
        let info = OpenedEntry(size: 1 << 20, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0)
        let announced = machine.handle(.entryOpened(1, .success(info)))
        guard case .send(.range(let header)) = announced.first else {
            Issue.record("\(announced)")
            return
        }
        #expect(header.range == range && header.entry.size == 1 << 20 && header.entry.resumable)
        var beyond = machine
        #expect(
            beyond.received(.frame(.accept(offset: range.length + 1))).last
                == .end(.violation("ACCEPT offset \(range.length + 1) out of the range")))
        #expect(
            machine.received(.frame(.accept(offset: 5))) == [
                .startData(index: 1, offset: 5, compressed: false, range: range)
            ])
        let digest = [UInt8](repeating: 4, count: 32)
        #expect(
            machine.handle(.rangeEnded(length: range.length, digest: digest, fileDigest: digest)) == [
                .stopData(1), .send(.rangeEnd(length: range.length, digest: digest, fileDigest: digest)),
            ])

        var fallback = SenderMachine(
            entries: Self.entries, settings: .init(), work: work, join: Self.join, fallback: [.entry(0), .entry(1)])
        _ = fallback.received(.magic)
        #expect(fallback.received(.frame(.hello(version: 1, capabilities: ["sha256"]))) == [.streamsDeclined])
        _ = fallback.proceed()
        #expect(fallback.proceed() == [.openEntry(1)])
        guard case .send(.file) = fallback.handle(.entryOpened(1, .success(info))).first else {
            Issue.record("the fallback did not send the file whole")
            return
        }
        var secondary = SenderMachine(
            entries: Self.entries, settings: .init(), work: work,
            join: TransferJoin(id: Self.join.id, index: 1, count: 2))
        _ = secondary.received(.magic)
        #expect(
            secondary.received(.frame(.hello(version: 1, capabilities: ["sha256"]))).last
                == .end(.violation("the receiver does not offer streams")))
        // A file that changed size since it was planned is not sent in ranges of the old size.
        var changed = SenderMachine(entries: Self.entries, settings: .init(), work: work, join: nil)
        _ = changed.received(.magic)
        _ = changed.received(.frame(.hello(version: 1, capabilities: ["sha256", "streams"])))
        _ = changed.proceed()
        _ = changed.proceed()
        let smaller = OpenedEntry(size: 10, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0)
        guard case .settle(1, .failed) = changed.handle(.entryOpened(1, .success(smaller))).first else {
            Issue.record("a changed file was sent in stale ranges")
            return
        }
    }

    /// Fuzz/Regressions/sender/goodbye-after-own-work and receiver/range-stored-before-file:
    /// the harnesses expected every entry settled at a connection's goodbye, and a range's
    /// STORED to mean a stored file. A connection of several settles only its own work.
    @Test("A connection of several says goodbye once its own work is answered")
    func goodbyeAfterOwnWork() {
        let work: [SenderMachine.Work] = [.range(1, ByteRange(start: 512 << 10, length: 512 << 10), fileSize: 1 << 20)]
        var machine = SenderMachine(
            entries: Self.entries, settings: .init(), work: work,
            join: TransferJoin(id: Self.join.id, index: 1, count: 2))
        _ = machine.received(.magic)
        _ = machine.received(.frame(.hello(version: 1, capabilities: ["sha256", "streams"])))
        _ = machine.received(.frame(.joined))
        _ = machine.proceed()
        let info = OpenedEntry(size: 1 << 20, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0)
        _ = machine.handle(.entryOpened(1, .success(info)))
        _ = machine.received(.frame(.accept(offset: 0)))
        let digest = [UInt8](repeating: 1, count: 32)
        _ = machine.handle(.rangeEnded(length: 512 << 10, digest: digest, fileDigest: digest))
        #expect(machine.received(.frame(.stored)) == [.settle(1, .stored)])
        #expect(machine.workDone && machine.proceed() == [.send(.bye)])
        #expect(machine.received(.frame(.bye)) == [.end(.goodbye)])
        #expect(machine.settled == [false, true])
    }

    @Test("The plan: directories first on connection 0, ranges tile each large file, small files balanced")
    func plan() {
        var entries = [
            SenderMachine.Entry(
                relative: "d", isDirectory: true, seekable: false, mode: 0o755, mtimeSeconds: 0, mtimeNanoseconds: 0)
        ]
        var sizes: [UInt64?] = [nil]
        for (index, size) in [UInt64(10 << 20), 1000, 3 << 20, 5, 600 << 10, 0].enumerated() {
            entries.append(
                SenderMachine.Entry(
                    relative: "d/\(index)", isDirectory: false, seekable: true, mode: 0o644, mtimeSeconds: 0,
                    mtimeNanoseconds: 0))
            sizes.append(size)
        }
        entries.append(
            SenderMachine.Entry(
                relative: "stdin", isDirectory: false, seekable: false, mode: 0o644, mtimeSeconds: 0,
                mtimeNanoseconds: 0))
        sizes.append(nil)
        let plan = StreamPlan.plan(entries: entries, sizes: sizes, streams: 4)
        #expect(plan == StreamPlan.plan(entries: entries, sizes: sizes, streams: 4), "the plan is deterministic")
        #expect(plan.count == 4)
        #expect(plan[0].first == .entry(0))
        #expect(plan[0].last == .entry(entries.count - 1))
        // Every entry but the directory and the stream is planned once whole or fully in ranges.
        for index in 1..<entries.count - 1 {
            let ranges = plan.joined().compactMap { work -> ByteRange? in
                if case .range(index, let range, _) = work { return range } else { return nil }
            }
            let whole = plan.joined().filter { $0 == .entry(index) }.count
            if ranges.isEmpty {
                #expect(whole == 1, "entry \(index)")
            } else {
                #expect(whole == 0)
                let sorted = ranges.sorted { $0.start < $1.start }
                #expect(sorted.first?.start == 0 && sorted.last?.end == sizes[index])
                for (a, b) in zip(sorted, sorted.dropFirst()) { #expect(a.end == b.start) }
            }
        }
        #expect(StreamPlan.ranges(of: 10 << 20, streams: 4).count == 4)
        #expect(StreamPlan.ranges(of: 600 << 10, streams: 4).count == 2)
        #expect(StreamPlan.ranges(of: 500 << 10, streams: 4).count == 1)
        // Each connection has at most one range of a file.
        for work in plan {
            let files = work.compactMap { if case .range(let index, _, _) = $0 { index } else { nil } }
            #expect(Set(files).count == files.count)
        }
    }

    @Test("The transfer's files: overlaps and other versions refused, coverage completes, range lists parsed warily")
    func sharedFiles() {
        let header = EntryHeader(
            flags: Wire.FileFlags.sizeKnown, size: 100, mode: 0o644, mtimeSeconds: 1, mtimeNanoseconds: 0,
            path: Array("f".utf8))
        let file = SharedFile(relative: "f", header: header)
        #expect(file.admit(ByteRange(start: 0, length: 50), of: header) == nil)
        #expect(file.admit(ByteRange(start: 49, length: 2), of: header) != nil)
        var other = header
        other.mtimeSeconds = 2
        #expect(file.admit(ByteRange(start: 50, length: 50), of: other) != nil)
        #expect(file.admit(ByteRange(start: 50, length: 50), of: header) == nil)
        #expect(!file.verify(ByteRange(start: 0, length: 50)))
        #expect(file.verify(ByteRange(start: 50, length: 50)))

        let group = TransferGroup(id: [1], count: 3)
        #expect(group.admit(TransferJoin(id: [1], index: 0, count: 3), session: 1) == nil)
        #expect(group.admit(TransferJoin(id: [1], index: 0, count: 3), session: 2) != nil)
        #expect(group.admit(TransferJoin(id: [1], index: 1, count: 4), session: 2) != nil)
        #expect(group.admit(TransferJoin(id: [1], index: 1, count: 3), session: 2) == nil)

        let parsed = ReceiverStore.parseRanges(
            Array("0+50=50,50+50=20,40+20=5,90+20=1,x+1=1,60+10=11,,99999999999999999999+1=1".utf8), size: 100)
        #expect(
            parsed == [ByteRange(start: 0, length: 50): 50, ByteRange(start: 50, length: 50): 20],
            "\(parsed)")
    }
}
