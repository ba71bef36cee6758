import Foundation
import Synchronization
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// BATCH (`batch`): small files many to a frame, decoded as they come, stored together, each
/// answered in its turn; and what a lying or stalling sender gets.
@Suite("Small files batched", .ownThreads)
struct BatchTests {
    // MARK: Wire

    /// A small eager file's FILE, DATA and END, as a BATCH holds them.
    static func wholeFile(_ path: String, _ bytes: [UInt8], digest: [UInt8]? = nil, flags: UInt8? = nil) -> [UInt8] {
        let flags = flags ?? Wire.FileFlags.sizeKnown | Wire.FileFlags.eager
        return RawWire.file(path, size: UInt64(bytes.count), flags: flags) + (bytes.isEmpty ? [] : RawWire.data(bytes))
            + MessageWriter.end(size: UInt64(bytes.count), digest: digest ?? SHA256Digest.hash(bytes))
    }

    static func batch(_ messages: [UInt8]) -> [UInt8] {
        Frame.batch(length: messages.count).encoded + messages
    }

    static let capabilities = ["sha256", "eager", "eager-resume", "batch"]

    @Test("A BATCH decodes into its files' messages, then its end, whatever pieces it arrives in")
    func decodes() {
        let a = randomBytes(3000, seed: 1)
        let inner = Self.wholeFile("a", a) + Self.wholeFile("b", [])
        let bytes = RawWire.hello(Self.capabilities) + Self.batch(inner) + RawWire.bye
        let expected: [Decoded] = [
            .magic, .frame(.hello(version: 1, capabilities: Set(Self.capabilities))),
            .frame(.batch(length: inner.count)),
            .frame(
                .file(
                    EntryHeader(
                        flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.eager, size: 3000, mode: 0o644,
                        mtimeSeconds: 0, mtimeNanoseconds: 0, path: Array("a".utf8)))),
            .data(a), .frame(.end(size: 3000, digest: SHA256Digest.hash(a))),
            .frame(
                .file(
                    EntryHeader(
                        flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.eager, size: 0, mode: 0o644, mtimeSeconds: 0,
                        mtimeNanoseconds: 0, path: Array("b".utf8)))),
            .frame(.end(size: 0, digest: SHA256Digest.hash([]))), .batchEnd, .frame(.bye),
        ]
        for cuts in [[], [1, 7, 60, 61, 62, 700, 3100], Array(stride(from: 1, to: bytes.count, by: 13))] {
            #expect(decode(bytes, cuts: cuts) == expected, "\(cuts)")
        }
    }

    @Test("What a BATCH may not hold, or a message that crosses its end, breaks the protocol")
    func violations() {
        let file = Self.wholeFile("a", [1, 2, 3])
        let cases: [([UInt8], String)] = [
            (
                Self.batch(
                    MessageWriter.entry(
                        .directory,
                        EntryHeader(mode: 0o755, mtimeSeconds: 0, mtimeNanoseconds: 0, path: Array("d".utf8)))),
                "DIR inside"
            ),
            (Self.batch(Self.batch(file)), "BATCH inside"),
            (Self.batch(RawWire.bye), "BYE inside"),
            (Frame.batch(length: file.count - 1).encoded + file, "crosses the end"),
            (Frame.batch(length: 0).encoded, "empty BATCH"),
        ]
        for (bytes, reason) in cases {
            let decoded = decode(Wire.magic + bytes, cuts: [])
            guard case .violation(let said)? = decoded.last else {
                Issue.record("\(reason): decoded \(decoded)")
                continue
            }
            #expect(said.contains(reason), "\(said)")
        }
        // A receiver never sends one.
        let back = decode(Wire.magic + Self.batch(MessageWriter.message(.stored)), cuts: [], direction: .toSender)
        #expect(back.last.map { if case .violation = $0 { true } else { false } } == true)
    }

    @Test("The machine: BATCH only where offered, only after nothing, only files sent whole in it")
    func machine() {
        func run(batch: Bool = true, _ frames: [FrameDecoder.Item]) -> [ReceiverAction] {
            var machine = ReceiverMachine(settings: .init(batch: batch))
            _ = machine.received(.magic)
            _ = machine.received(.frame(.hello(version: 1, capabilities: ["sha256"])))
            var actions: [ReceiverAction] = []
            for item in frames { actions = machine.received(item) }
            return actions
        }
        func violation(_ actions: [ReceiverAction]) -> String? {
            for case .end(.violation(let reason)) in actions { return reason }
            return nil
        }
        #expect(ReceiverMachine(settings: .init()).capabilities.contains(Wire.Capability.batch))
        #expect(!ReceiverMachine(settings: .init(batch: false)).capabilities.contains(Wire.Capability.batch))
        #expect(!ReceiverMachine(settings: .init(eager: false)).capabilities.contains(Wire.Capability.batch))
        #expect(violation(run(batch: false, [.frame(.batch(length: 10))]))?.contains("does not offer batch") == true)
        #expect(
            violation(
                run([.frame(.xattr(ExtendedAttribute(name: "user.a", value: [1]))), .frame(.batch(length: 10))]))?
                .contains("before a BATCH") == true)
        let eager = Wire.FileFlags.sizeKnown | Wire.FileFlags.eager
        for (flags, size) in [
            (eager | Wire.FileFlags.compressed, UInt64(10)), (eager | Wire.FileFlags.sparse, 10),
            (eager | Wire.FileFlags.linked, 10), (Wire.FileFlags.sizeKnown, 10), (eager, Wire.wholeLimit + 1),
        ] {
            let header = EntryHeader(
                flags: flags, size: size, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0, path: Array("f".utf8))
            #expect(
                violation(run([.frame(.batch(length: 100)), .frame(.file(header))]))?.contains("FILE in a BATCH")
                    == true, "flags \(flags), size \(size)")
        }
        // A file sent whole may replace one (sync).
        let replacing = EntryHeader(
            flags: eager | Wire.FileFlags.replace, size: 10, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0,
            path: Array("f".utf8))
        #expect(violation(run([.frame(.batch(length: 100)), .frame(.file(replacing))])) == nil)
        #expect(run([.frame(.batch(length: 100)), .batchEnd]) == [.storeBatch])
    }

    @Test("The answers' queue keeps its order through compactions, and compares by what it holds")
    func answerQueue() {
        var queue = FIFO<Int>()
        var model: [Int] = []
        var next = 0
        for round in 0..<50 {
            for _ in 0..<(round % 7 + 3) {
                queue.append(next)
                model.append(next)
                next += 1
            }
            for _ in 0..<(round % 5 + 1) {
                #expect(queue.removeFirst() == (model.isEmpty ? nil : model.removeFirst()))
            }
            #expect(queue.count == model.count && queue.first == model.first)
        }
        var other = FIFO<Int>()
        for value in model { other.append(value) }
        #expect(queue == other)
        while queue.removeFirst() != nil {}
        #expect(queue.isEmpty && queue == FIFO<Int>())
    }

    @Test("A file received whole is checked as the sender hashed it: its holes as holes, not as zeros")
    func wholeFileDigestWithHoles() {
        let (head, tail) = (randomBytes(700, seed: 11), randomBytes(300, seed: 12))
        for algorithm in TransferDigest.allCases where algorithm.isAvailable {
            let sender = FileDigest(algorithm)
            head.withUnsafeBytes { sender.update($0) }
            Wire.holeDigestInput(4096).withUnsafeBytes { sender.update($0) }
            tail.withUnsafeBytes { sender.update($0) }
            let expected = sender.finalize()
            let request = EntryRequest(
                components: ["f"], relative: "f",
                header: EntryHeader(mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0, path: Array("f".utf8)))
            let bytes = head + [UInt8](repeating: 0, count: 4096) + tail
            let hole = ReceivedWhole.Hole(at: head.count, length: 4096)
            let whole = ReceivedWhole(
                request: request, range: 0..<bytes.count, lent: nil, holes: [hole], expected: expected)
            let unholed = ReceivedWhole(
                request: request, range: 0..<bytes.count, lent: nil, holes: [], expected: expected)
            bytes.withUnsafeBytes { all in
                #expect(whole.matches(algorithm, whole.bytes(in: all)))
                #expect(!unholed.matches(algorithm, unholed.bytes(in: all)))
            }
            // As a job gets it: its range of the buffer its files share, the holes where they lie
            // in the file, whatever came before it in the buffer.
            let shared = randomBytes(333, seed: 13) + bytes + randomBytes(77, seed: 14)
            let placed = ReceivedWhole(
                request: request, range: 333..<333 + bytes.count, lent: nil, holes: [hole], expected: expected)
            let misplaced = ReceivedWhole(
                request: request, range: 332..<332 + bytes.count, lent: nil, holes: [hole], expected: expected)
            shared.withUnsafeBytes { all in
                #expect(placed.matches(algorithm, placed.bytes(in: all)))
                #expect(!misplaced.matches(algorithm, misplaced.bytes(in: all)))
            }
        }
    }

    /// A file "f"'s request, for the tests of the buffer small files share.
    static let requestF = EntryRequest(
        components: ["f"], relative: "f",
        header: EntryHeader(mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0, path: Array("f".utf8)))

    @Test("Small files received whole share one buffer: handed over up to a file still arriving, which keeps its bytes")
    func wholeFilesShareABuffer() {
        let request = Self.requestF
        let buffer = WholeBytes()
        let (a, b, c) = (randomBytes(100, seed: 21), randomBytes(50, seed: 22), randomBytes(70, seed: 23))
        let first = WholeFile(request, into: buffer, batched: true)
        a.withUnsafeBytes { first.append($0) }
        #expect(first.start == 0 && first.count == 100)
        let second = WholeFile(request, into: buffer, batched: true)
        b.withUnsafeBytes { second.append($0) }
        second.appendHole(10)
        #expect(second.start == 100 && second.count == 60 && second.holes.first?.at == 50)
        // A third, dropped before its end, leaves nothing behind.
        let dropped = WholeFile(request, into: buffer, batched: true)
        c.withUnsafeBytes { dropped.append($0) }
        buffer.truncate(to: dropped.start)
        #expect(buffer.count == 160)
        // A fourth still arriving when the first two are handed over.
        let arriving = WholeFile(request, into: buffer, batched: true)
        c[..<30].withUnsafeBytes { arriving.append($0) }
        let taken = buffer.take(upTo: arriving.start)
        arriving.moved(by: 160)
        #expect(taken == a + b + [UInt8](repeating: 0, count: 10))
        #expect(arriving.start == 0 && arriving.count == 30)
        c[30...].withUnsafeBytes { arriving.append($0) }
        #expect(buffer.bytes == c)
    }

    @Test("A BATCH's few bytes go as a copy and its buffer stays; a large hand-over comes back for the next")
    func wholeBuffersAreUsedAgain() {
        let request = Self.requestF
        let buffer = WholeBytes()
        let (a, b) = (randomBytes(5000, seed: 24), randomBytes(3000, seed: 25))
        // All of it handed over (the case where an array of the slice would share the buffer),
        // then part of it with a file still arriving.
        let first = WholeFile(request, into: buffer, batched: true)
        a.withUnsafeBytes { first.append($0) }
        #expect(buffer.take(upTo: buffer.count) == a)
        let second = WholeFile(request, into: buffer, batched: true)
        b.withUnsafeBytes { second.append($0) }
        let arriving = WholeFile(request, into: buffer, batched: true)
        a.withUnsafeBytes { arriving.append($0) }
        #expect(buffer.take(upTo: arriving.start) == b)
        #expect(buffer.bytes == a)
        #expect(buffer.made == 1)
        // A large hand-over takes the buffer; given back once stored, the next BATCH takes it.
        let large = randomBytes(WholeBytes.copiedHandOver + 1, seed: 26)
        large.withUnsafeBytes { arriving.append($0) }
        let taken = buffer.take(upTo: buffer.count)
        #expect(taken == a + large)
        buffer.recycle(taken)
        let next = WholeFile(request, into: buffer, batched: true)
        b.withUnsafeBytes { next.append($0) }
        #expect(buffer.bytes == b)
        #expect(buffer.made == 1)
    }

    // MARK: A receiver

    /// `body` with a receiver storing into a fresh directory, without fsync and with it.
    static func withReceiver(_ body: (_ root: String, _ harness: TransferHarness, _ fsync: Bool) throws -> Void) throws
    {
        for fsync in [false, true] {
            try withTemporaryDirectory { root in
                let harness = try TransferHarness(
                    directory: root, options: TransferReceiveOptions(fsync: fsync, idleTimeout: .seconds(20)))
                try body(root, harness, fsync)
            }
        }
    }

    @Test("Each file of a BATCH is answered in its turn: two stored, one there already, one altered")
    func answersInOrder() throws {
        try Self.withReceiver { root, harness, fsync in
            try writeFile(root + "/there", [9, 9])
            let (a, b, c, d) = (
                randomBytes(5000, seed: 2), randomBytes(100, seed: 3), randomBytes(7000, seed: 4),
                randomBytes(65536, seed: 5)
            )
            let inner =
                Self.wholeFile("a", a) + Self.wholeFile("d", d) + Self.wholeFile("there", b)
                + Self.wholeFile("c", c, digest: SHA256Digest.hash(a))
            let client = try harness.exchange(
                RawWire.hello(Self.capabilities) + Self.batch(inner) + Self.wholeFile("e", b) + RawWire.bye
            )
            let answers = RawWire.messages(client.received).map(\.0).filter {
                $0 != Wire.MessageType.hello.rawValue
            }
            let (stored, refused, failed, bye) = (
                Wire.MessageType.stored.rawValue, Wire.MessageType.refused.rawValue,
                Wire.MessageType.failed.rawValue, Wire.MessageType.bye.rawValue
            )
            #expect(answers == [stored, stored, refused, failed, stored, bye], "fsync \(fsync)")
            #expect(readFile(root + "/a") == a)
            #expect(readFile(root + "/there") == [9, 9])
            #expect(!fileExists(root + "/c"))
            #expect(readFile(root + "/d") == d)
            #expect(readFile(root + "/e") == b)
            #expect(harness.reports.last?.error == nil)
            #expect(try FileManager.default.contentsOfDirectory(atPath: root).sorted() == ["a", "d", "e", "there"])
        }
    }

    @Test("BATCHes' files lent from the inbound buffer, not copied, are each stored whole while the buffer is reused")
    func lentFilesStoredWhole() throws {
        try Self.withReceiver { root, harness, fsync in
            // 600 files of 1 byte to 24 KiB in BATCHes of about 400 KiB: 7 MB, many times the
            // inbound buffer (1 MiB at most), so that files lent from it pin it while it reads on.
            var files: [(String, [UInt8])] = []
            var payload = RawWire.hello(Self.capabilities)
            var inner: [UInt8] = []
            for index in 0..<600 {
                let bytes = randomBytes(1 + (index * 7919) % (24 << 10), seed: UInt64(100 + index))
                files.append(("f\(index)", bytes))
                inner += Self.wholeFile("f\(index)", bytes)
                if inner.count >= 400 << 10 || index == 599 {
                    payload += Self.batch(inner)
                    inner = []
                }
            }
            let before = harness.receiver.piecesLent
            let client = try harness.exchange(payload + RawWire.bye)
            let answers = RawWire.messages(client.received).map(\.0).filter {
                $0 != Wire.MessageType.hello.rawValue
            }
            #expect(
                answers == Array(repeating: Wire.MessageType.stored.rawValue, count: 600) + [
                    Wire.MessageType.bye.rawValue
                ])
            for (name, bytes) in files where readFile(root + "/" + name) != bytes {
                Issue.record("\(name): not stored whole (fsync \(fsync))")
            }
            #expect(harness.reports.last?.error == nil)
            // Most files came in one piece and were lent (those cut by a read are copied).
            #expect(harness.receiver.piecesLent - before >= 300, "\(harness.receiver.piecesLent - before) lent")
        }
    }

    @Test("A BATCH that lies about its length ends the session; its cut file is nowhere")
    func lyingLength() throws {
        try withTemporaryDirectory { root in
            let harness = try TransferHarness(directory: root)
            let a = randomBytes(4000, seed: 6)
            let b = randomBytes(4000, seed: 7)
            let inner = Self.wholeFile("a", a) + Self.wholeFile("b", b)
            // The BATCH ends in the middle of b's DATA.
            let client = try harness.exchange(
                RawWire.hello(Self.capabilities) + Frame.batch(length: inner.count - 100).encoded + inner + RawWire.bye)
            let report = try #require(harness.reports.last)
            #expect(report.error?.description.contains("crosses the end of its BATCH") == true, "\(report)")
            #expect(RawWire.messages(client.received).last?.0 == Wire.MessageType.error.rawValue)
            #expect(!fileExists(root + "/b"))
            // a was verified before the lie: stored all the same, as any file verified before an end.
            let stored = try FileManager.default.contentsOfDirectory(atPath: root)
            #expect(stored == [] || stored == ["a"], "\(stored)")
            if stored == ["a"] { #expect(readFile(root + "/a") == a) }
        }
    }

    @Test("A sender that stalls in the middle of a BATCH is timed out; nothing lands at the cut file's name")
    func stallInside() throws {
        try withTemporaryDirectory { root in
            let harness = try TransferHarness(
                directory: root, options: TransferReceiveOptions(idleTimeout: .milliseconds(300)))
            let a = randomBytes(4000, seed: 8)
            let inner = Self.wholeFile("a", a) + Self.wholeFile("b", a)
            let payload = RawWire.hello(Self.capabilities) + Self.batch(inner)
            // Everything but the last 50 bytes (the middle of b's END), and the connection kept open.
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            try #require(fd >= 0)
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = harness.port.bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            try #require(connected == 0)
            let part = Array(payload.dropLast(50))
            #expect(part.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == part.count)
            runLoop(harness.loop, for: .seconds(10)) { !harness.reports.isEmpty }
            let report = try #require(harness.reports.last)
            #expect(report.error?.code == .timedOut, "\(String(describing: report.error))")
            #expect(!fileExists(root + "/b"))
        }
    }

    // MARK: A sender

    /// A receiver played by hand: offers `batch` (or not), and notes for every FILE whether it
    /// came inside a BATCH; answers each entry STORED as its END (or DIR) arrives.
    private final class NotingReceiver: Sendable {
        struct Seen: Sendable {
            /// By path: whether its FILE came inside a BATCH.
            var inBatch: [String: Bool] = [:]
            var batches = 0
            var failure: String?
        }

        let seen = Mutex(Seen())
        private let listening: (fd: Int32, port: UInt16)
        var port: UInt16 { listening.port }

        init(offersBatch: Bool) throws {
            listening = try listenOnLoopback()
            let listener = listening.fd
            Thread.detachNewThread { [self] in
                let fd = accept(listener, nil, nil)
                guard fd >= 0 else { return }
                play(fd, offersBatch: offersBatch)
                close(fd)
            }
        }

        deinit { close(listening.fd) }

        private func play(_ fd: Int32, offersBatch: Bool) {
            func send(_ bytes: [UInt8]) { _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } }
            var capabilities: Set<String> = ["sha256", "eager", "eager-resume"]
            if offersBatch { capabilities.insert("batch") }
            send(Wire.magic + Frame.hello(version: 1, capabilities: capabilities).encoded)
            var decoder = FrameDecoder(direction: .toReceiver)
            var pending: [UInt8] = []
            while true {
                var progressed = true
                while progressed {
                    progressed = false
                    let step = pending.withUnsafeBytes { decoder.next($0) }
                    guard case .item(let item, let consumed) = step else {
                        if case .violation(let reason) = step { seen.withLock { $0.failure = reason } }
                        if case .violation = step { return }
                        break
                    }
                    pending.removeFirst(consumed)
                    progressed = true
                    guard case .frame(let frame) = item else { continue }
                    switch frame {
                    case .batch:
                        seen.withLock { $0.batches += 1 }
                    case .file(let header):
                        let inside = decoder.batchRemaining != nil
                        seen.withLock { $0.inBatch[String(decoding: header.path, as: UTF8.self)] = inside }
                        if !header.eager { send(Frame.accept(offset: 0).encoded) }
                    case .directory, .end:
                        send(Frame.stored.encoded)
                    case .bye:
                        send(Frame.bye.encoded)
                        return
                    default:
                        break
                    }
                }
                guard readMore(fd, into: &pending) else { return }
            }
        }
    }

    @Test("The sender puts small files in BATCHes, and nothing else; to a receiver without batch, none")
    func senderBatchesSmallFilesOnly() throws {
        try withTemporaryDirectory { root in
            let source = root + "/tree"
            try FileManager.default.createDirectory(atPath: source + "/d", withIntermediateDirectories: true)
            for i in 0..<40 { try writeFile(source + "/d/s\(i)", randomBytes(100 + i * 500, seed: UInt64(i))) }
            try writeFile(source + "/big", randomBytes(Int(Wire.wholeLimit) + 1, seed: 99))
            try writeFile(source + "/limit", randomBytes(Int(Wire.wholeLimit), seed: 98))
            for offers in [true, false] {
                let receiver = try NotingReceiver(offersBatch: offers)
                let loop = try EventLoop()
                let sender = try TransferSender(sources: [.path(source)], options: TransferSendOptions())
                let (input, output) = Socket.connect(host: "127.0.0.1", port: receiver.port)
                let box = SummaryBox()
                sender.start(input: input, output: output, on: loop) { box.summary = $0 }
                runLoop(loop, for: .seconds(20)) { box.summary != nil }
                let summary = try #require(box.summary)
                #expect(summary.error == nil, "\(String(describing: summary.error))")
                let seen = receiver.seen.withLock { $0 }
                #expect(seen.failure == nil)
                #expect(seen.inBatch.count == 42)
                if offers {
                    #expect(seen.inBatch["tree/big"] == false)
                    let small = seen.inBatch.filter { $0.key != "tree/big" }
                    #expect(small.values.allSatisfy { $0 }, "\(seen.inBatch)")
                    // Files listed in steps go out as they are ready: a few BATCHes, not one a file.
                    #expect(seen.batches >= 1 && seen.batches <= 20, "\(seen.batches)")
                } else {
                    #expect(seen.batches == 0)
                    #expect(seen.inBatch.values.allSatisfy { !$0 })
                }
            }
        }
    }

    @Test("A tree with small files, large ones, links and attributes arrives whole, batched or not")
    func treeEndToEnd() throws {
        try withTemporaryDirectory { root in
            let source = root + "/src"
            for d in 0..<6 {
                try FileManager.default.createDirectory(atPath: source + "/d\(d)/e", withIntermediateDirectories: true)
                for f in 0..<30 {
                    let size = (d * 30 + f) * 397 % 70_000
                    try writeFile(source + "/d\(d)/e/f\(f)", randomBytes(size, seed: UInt64(d * 100 + f)))
                }
                try writeFile(source + "/d\(d)/large", randomBytes(300_000 + d, seed: UInt64(d)))
            }
            #expect(symlink("../d1/e/f3", source + "/d0/link") == 0)
            try writeFile(source + "/d2/tagged", [1, 2, 3])
            let tagged = SourceMetadata.setXattr(source + "/d2/tagged", "user.note", Array("hi".utf8))
            for (index, (batches, offersBatch)) in [(true, true), (false, true), (true, false)].enumerated() {
                let dst = root + "/dst\(index)"
                try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
                var receiving = TransferReceiveOptions(fsync: index == 0, idleTimeout: .seconds(20))
                receiving.offersBatch = offersBatch
                let harness = try TransferHarness(directory: dst, options: receiving)
                var options = TransferSendOptions()
                options.xattrs = true
                let sender = try TransferSender(sources: [.path(source)], options: options)
                sender.batches = batches
                let (input, output) = Socket.connect(host: "127.0.0.1", port: harness.port)
                let box = SummaryBox()
                sender.start(input: input, output: output, on: harness.loop) { box.summary = $0 }
                runLoop(harness.loop, for: .seconds(30)) { box.summary != nil && !harness.reports.isEmpty }
                let summary = try #require(box.summary)
                #expect(summary.error == nil)
                #expect(summary.results.allSatisfy { $0.outcome == .stored }, "\(index)")
                #expect(treeDifferences(source, dst + "/src").isEmpty, "\(treeDifferences(source, dst + "/src"))")
                if tagged {
                    let kept = SourceMetadata.xattrs(dst + "/src/d2/tagged", warn: { _ in }).first {
                        $0.name == "user.note"
                    }
                    #expect(kept?.value == Array("hi".utf8))
                }
            }
        }
    }
}
