import Foundation
import Synchronization
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// A sender played by hand over a real loopback connection, on a thread of its own: its script
/// sends raw messages and reads the receiver's as they come, so that it sends a file's data only
/// after ACCEPT, as a sender does. Once the script is done it half-closes and reads what is left
/// up to the end of the connection.
final class PlayedSender: @unchecked Sendable {
    /// What the receiver sent, in order, and whether the connection has ended.
    private let seen = Mutex<(frames: [Frame], done: Bool)>(([], false))
    private let fd: Int32
    /// Touched only by the script's thread.
    private var decoder = FrameDecoder(direction: .toSender)
    private var pending: [UInt8] = []

    /// Connects to 127.0.0.1:`port` and runs `script` on a thread of its own.
    init(port: UInt16, script: @escaping @Sendable (PlayedSender) -> Void) throws {
        fd = connectLoopback(port: port)
        guard fd >= 0 else {
            throw SluiceError(.system(Errno.current), operation: "connect", subject: "127.0.0.1:\(port)")
        }
        // A receiver that never answers fails the test; it does not hold the thread for ever.
        var limit = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        Thread.detachNewThread { [self] in
            script(self)
            shutdown(fd, Int32(SHUT_WR))
            while next() != nil {}
            seen.withLock { $0.done = true }
        }
    }

    deinit { close(fd) }

    var frames: [Frame] { seen.withLock { $0.frames } }
    var done: Bool { seen.withLock { $0.done } }

    /// Writes all of `bytes` (nothing more once the receiver has closed).
    func send(_ bytes: [UInt8]) {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL))
            }
            guard n > 0 else { return }
            sent += n
        }
    }

    /// The receiver's next message after its HELLO; nil once the connection ends or breaks the
    /// protocol.
    func next() -> Frame? {
        while true {
            switch pending.withUnsafeBytes({ decoder.next($0) }) {
            case .item(let item, let consumed):
                pending.removeFirst(consumed)
                // Its HELLO is not kept: what the tests look at are its answers.
                guard case .frame(let frame) = item, frame.type != .hello else { continue }
                seen.withLock { $0.frames.append(frame) }
                return frame
            case .needMore:
                guard readMore(fd, into: &pending) else { return nil }
            case .violation:
                return nil
            }
        }
    }

    /// The receiver's next ACCEPT, answer to an entry, JOINED, BYE or ERROR (past SIGS and HAVE).
    func answer() -> Frame? {
        while let frame = next() {
            switch frame {
            case .signatures, .have, .gone: continue
            default: return frame
            }
        }
        return nil
    }
}

/// Item 2 of issue 48: no number a sender sends traps the receiver. Each case is a sender played
/// by hand over a real connection to a real receiver storing into a real directory; after each,
/// a normal transfer in a new session is stored, so the process and its loop are still serving.
@Suite("Numbers from a trusted sender", .ownThreads)
struct TrustedSenderNumberTests {
    static let sizeKnown = Wire.FileFlags.sizeKnown
    static let sparse = Wire.FileFlags.sparse
    static let eager = Wire.FileFlags.eager
    static let edge = UInt64(1) << 63

    /// A receiver into `root/dst` that lets senders sync (CHECK, deltas), with `overwrite` (a
    /// delta replaces the file it is made from).
    static func receiver(_ root: String, overwrite: Bool = false) throws -> TransferHarness {
        try FileManager.default.createDirectory(atPath: root + "/dst", withIntermediateDirectories: true)
        var options = TransferReceiveOptions(overwrite: overwrite, idleTimeout: .seconds(20))
        options.sync = true
        return try TransferHarness(directory: root + "/dst", options: options)
    }

    /// Runs `script` as a sender to `harness`'s receiver, and the receiver's loop until the
    /// connection has ended on both sides; returns what the receiver sent and its session's report.
    static func play(_ harness: TransferHarness, _ script: @escaping @Sendable (PlayedSender) -> Void) throws
        -> ([Frame], TransferSessionReport)
    {
        let before = harness.reports.count
        let peer = try PlayedSender(port: harness.port, script: script)
        let ended = runLoop(harness.loop, for: .seconds(30)) { peer.done && harness.reports.count > before }
        try #require(ended, "the played session did not end")
        return (peer.frames, try #require(harness.reports.last))
    }

    /// A normal sender's file is stored by the same receiver, in a session of its own.
    static func servesNext(_ harness: TransferHarness, _ root: String, _ name: String) throws {
        let content = randomBytes(5000, seed: UInt64(name.utf8.count))
        try writeFile(root + "/" + name, content)
        let summary = try harness.send(paths: [root + "/" + name])
        #expect(summary.succeeded, "\(summary.results)")
        #expect(readFile(harness.directory + "/" + name) == content)
    }

    static func file(_ path: String, size: UInt64, flags: UInt8) -> [UInt8] {
        Frame.file(
            EntryHeader(
                flags: flags, size: size, mode: 0o644, mtimeSeconds: 1, mtimeNanoseconds: 0, path: Array(path.utf8))
        ).encoded
    }

    /// END for `size` bytes with the SHA-256 of `hashed` (data and holes as sent).
    static func end(_ size: UInt64, _ hashed: [UInt8]) -> [UInt8] {
        Frame.end(size: size, digest: SHA256Digest.hash(hashed)).encoded
    }

    static func isTooLarge(_ frame: Frame?) -> Bool {
        guard case .refused(.tooLarge, let reason)? = frame else { return false }
        return reason.hasPrefix("too large")
    }

    @Test("A sparse FILE of 2^64-1 bytes, a HOLE of 2^63 and a byte of DATA: refused as too large; it serves on")
    func sparseFileAtTheEdge() throws {
        try withTemporaryDirectory { root in
            let harness = try Self.receiver(root)
            for eagerly in [false, true] {
                let flags = Self.sizeKnown | Self.sparse | (eagerly ? Self.eager : 0)
                let (frames, report) = try Self.play(harness) { peer in
                    peer.send(RawWire.hello(["sha256"]) + Self.file("huge.img", size: .max, flags: flags))
                    let rest =
                        Frame.hole(length: Self.edge).encoded + RawWire.data([7])
                        + Self.end(Self.edge + 1, Wire.holeDigestInput(Self.edge) + [7])
                    // Eager, the data follows at once; else only after ACCEPT.
                    if eagerly {
                        peer.send(rest)
                    } else if case .accept? = peer.answer() {
                        peer.send(rest)
                    }
                    peer.send(RawWire.bye)
                }
                #expect(Self.isTooLarge(frames.first), "eager \(eagerly): \(frames)")
                #expect(frames.last == .bye, "eager \(eagerly): \(frames)")
                #expect(report.error == nil, "\(String(describing: report.error))")
                #expect(!fileExists(root + "/dst/huge.img") && !fileExists(root + "/dst/.huge.img.sluice-part"))
                try Self.servesNext(harness, root, "after-sparse-\(eagerly)")
            }
        }
    }

    @Test("FILE sizes of 2^63-1, 2^63 and 2^64-1: past 2^63-1 refused as too large, at it the file's own failure")
    func fileSizesAtTheEdges() throws {
        try withTemporaryDirectory { root in
            let harness = try Self.receiver(root)
            for (index, size) in [Self.edge, UInt64.max].enumerated() {
                for flags in [Self.sizeKnown, Self.sizeKnown | Self.sparse, Self.sizeKnown | Self.eager] {
                    let (frames, report) = try Self.play(harness) { peer in
                        peer.send(RawWire.hello(["sha256"]) + Self.file("big-\(index)", size: size, flags: flags))
                        if flags & Self.eager != 0 { peer.send(RawWire.data([1, 2, 3]) + Self.end(3, [1, 2, 3])) }
                        peer.send(RawWire.bye)
                    }
                    #expect(Self.isTooLarge(frames.first), "\(size) flags \(flags): \(frames)")
                    #expect(report.error == nil && frames.last == .bye, "\(size) flags \(flags): \(frames)")
                }
                try Self.servesNext(harness, root, "after-size-\(index)")
            }
            // 2^63-1 bytes fit an offset: taken, then failed as the disk cannot hold it (or, on a
            // file system that can, written at the very edge and stored).
            let last = Self.edge - 1
            let (full, fullReport) = try Self.play(harness) { peer in
                peer.send(RawWire.hello(["sha256"]) + Self.file("full", size: last, flags: Self.sizeKnown))
                peer.send(RawWire.bye)
            }
            guard case .failed(.io, let reason)? = full.first else {
                Issue.record("2^63-1 bytes reserved: \(full)")
                return
            }
            #expect(reason.contains("No space left on device"), "\(reason)")
            #expect(fullReport.error == nil)
            let (sparse, sparseReport) = try Self.play(harness) { peer in
                peer.send(
                    RawWire.hello(["sha256"]) + Self.file("edge.img", size: last, flags: Self.sizeKnown | Self.sparse))
                guard case .accept? = peer.answer() else { return }
                peer.send(
                    Frame.hole(length: last - 1).encoded + RawWire.data([9])
                        + Self.end(last, Wire.holeDigestInput(last - 1) + [9]))
                _ = peer.answer()
                peer.send(RawWire.bye)
            }
            #expect(sparse.first == .accept(offset: 0), "\(sparse)")
            switch sparse.dropFirst().first {
            case .failed(.io, let reason)?: #expect(reason.contains("File too large"), "\(reason)")
            case .stored?: #expect(FileInfo(root + "/dst/edge.img")?.size == Int(last))
            default: Issue.record("the last byte an offset holds: \(sparse)")
            }
            #expect(sparseReport.error == nil)
            try Self.servesNext(harness, root, "after-edge")
        }
    }

    @Test("CHECK sizes of 2^63-1, 2^63 and 2^64-1 are compared, not converted: HAVE says what differs")
    func checkSizesAtTheEdges() throws {
        try withTemporaryDirectory { root in
            let harness = try Self.receiver(root)
            try writeFile(root + "/dst/present", randomBytes(10))
            let sizes = [Self.edge - 1, Self.edge, UInt64.max]
            let (frames, report) = try Self.play(harness) { peer in
                peer.send(RawWire.hello(["sha256"]))
                for size in sizes {
                    for path in ["present", "absent"] {
                        for digest in [false, true] {
                            let check = CheckHeader(
                                kind: .file, flags: digest ? Wire.CheckFlags.digest : 0, size: size, mode: 0o644,
                                mtimeSeconds: 1, mtimeNanoseconds: 0, path: Array(path.utf8),
                                digest: digest ? Array(repeating: 3, count: 32) : [])
                            peer.send(Frame.check(check).encoded)
                        }
                    }
                    let device = CheckHeader(
                        kind: .special, size: size, mode: Wire.SpecialType.characterDevice.rawValue | 0o600,
                        mtimeSeconds: 1, mtimeNanoseconds: 0, path: Array("present".utf8))
                    peer.send(Frame.check(device).encoded)
                }
                peer.send(RawWire.bye)
            }
            #expect(report.error == nil)
            let haves = frames.compactMap { frame -> HaveAnswer? in
                if case .have(let have) = frame { return have }
                return nil
            }
            // Per size: the file that is there (its mtime and mode differ too), compared by
            // digest, the path with nothing, twice, and the file as a device.
            try #require(haves.count == 3 * 5, "\(frames)")
            for (index, have) in haves.enumerated() {
                let bit = index % 5 == 4 ? Wire.HaveDifference.kind : Wire.HaveDifference.size
                if (2...3).contains(index % 5) {
                    #expect(have == HaveAnswer(status: .absent), "\(index): \(have)")
                } else {
                    #expect(have.status == .differs && have.differences & bit != 0, "\(index): \(have)")
                }
            }
            #expect(frames.last == .bye)
            try Self.servesNext(harness, root, "after-check")
        }
    }

    @Test("RANGEs from 2^63, from 2^64-1 and past it: refused as too large or outside; one at the edge is written")
    func rangesAtTheEdges() throws {
        try withTemporaryDirectory { root in
            let harness = try Self.receiver(root)
            let join = TransferJoin(id: Array(repeating: 0x42, count: Wire.transferIDBytes), index: 0, count: 2)
            // (file, size, start, length) and whether the answer is too large (else invalid range).
            let refused: [(String, UInt64, UInt64, UInt64, Bool)] = [
                ("a", .max, Self.edge, 1, true),
                ("b", .max, .max, 1, false),
                ("c", .max, Self.edge, Self.edge + 5, false),
                ("d", Self.edge, Self.edge - 1, 1, true),
                ("e", Self.edge - 1, Self.edge - 1, 1, false),
            ]
            let last = Self.edge - 1
            let (frames, report) = try Self.play(harness) { peer in
                peer.send(RawWire.hello(["sha256"]) + Frame.join(join).encoded)
                guard peer.answer() == .joined else { return }
                for (path, size, start, length, _) in refused {
                    let header = EntryHeader(
                        flags: Self.sizeKnown, size: size, mode: 0o644, mtimeSeconds: 1, mtimeNanoseconds: 0,
                        path: Array(path.utf8))
                    peer.send(
                        Frame.range(RangeHeader(range: ByteRange(start: start, length: length), entry: header)).encoded)
                    // Refused at its header: the range's data never goes.
                    guard case .accept? = peer.answer() else { continue }
                    peer.send(RawWire.data([9]))
                }
                // The last byte an offset holds: accepted, and written or failed by the disk.
                let header = EntryHeader(
                    flags: Self.sizeKnown, size: last, mode: 0o644, mtimeSeconds: 1, mtimeNanoseconds: 0,
                    path: Array("edge".utf8))
                peer.send(Frame.range(RangeHeader(range: ByteRange(start: last - 1, length: 1), entry: header)).encoded)
                if case .accept? = peer.answer() {
                    let digest = SHA256Digest.hash([9])
                    peer.send(
                        RawWire.data([9]) + Frame.rangeEnd(length: 1, digest: digest, fileDigest: digest).encoded)
                    _ = peer.answer()
                }
                peer.send(RawWire.bye)
            }
            #expect(report.error == nil, "\(String(describing: report.error)) \(frames)")
            let answers = Array(frames.dropFirst())
            try #require(answers.count == refused.count + 3, "\(frames)")
            for (index, (path, _, _, _, tooLarge)) in refused.enumerated() {
                if tooLarge {
                    #expect(Self.isTooLarge(answers[index]), "\(path): \(answers[index])")
                } else if case .refused(.invalidRange, _) = answers[index] {
                } else {
                    Issue.record("\(path): \(answers[index])")
                }
            }
            #expect(answers[refused.count] == .accept(offset: 0), "\(answers)")
            switch answers[refused.count + 1] {
            case .failed(.io, let reason): #expect(reason.contains("File too large"), "\(reason)")
            case .stored: break
            default: Issue.record("the range at the edge: \(answers)")
            }
            #expect(answers.last == .bye)
            try Self.servesNext(harness, root, "after-ranges")
        }
    }

    @Test("A HOLE whose end passes the size, or 2^64: the file fails, the session goes on")
    func holesPastTheSize() throws {
        try withTemporaryDirectory { root in
            let harness = try Self.receiver(root)
            // Held whole in memory (eager, small), and written to disk (2 MiB, after ACCEPT).
            let cases: [(String, UInt64, Bool, UInt64)] = [
                ("small-a", 100, true, Self.edge), ("small-b", 100, true, .max),
                ("disk-a", 2 << 20, false, Self.edge), ("disk-b", 2 << 20, false, .max - 5),
            ]
            for (path, size, eagerly, hole) in cases {
                let flags = Self.sizeKnown | Self.sparse | (eagerly ? Self.eager : 0)
                let (frames, report) = try Self.play(harness) { peer in
                    peer.send(RawWire.hello(["sha256"]) + Self.file(path, size: size, flags: flags))
                    let rest =
                        RawWire.data(Array(repeating: 1, count: 10)) + Frame.hole(length: hole).encoded
                        + Self.end(size, [])
                    if eagerly {
                        peer.send(rest)
                    } else if case .accept? = peer.answer() {
                        peer.send(rest)
                    }
                    peer.send(RawWire.bye)
                }
                let answer = frames.first { if case .accept = $0 { false } else { true } }
                #expect(answer == .failed(code: .data, reason: "more data than announced (\(size) bytes)"), "\(frames)")
                #expect(report.error == nil && frames.last == .bye, "\(path): \(frames)")
                #expect(!fileExists(root + "/dst/" + path))
            }
            // A hole to the file's last byte an offset holds, then one more byte of hole.
            let last = Self.edge - 1
            let (frames, _) = try Self.play(harness) { peer in
                peer.send(
                    RawWire.hello(["sha256"]) + Self.file("edge", size: last, flags: Self.sizeKnown | Self.sparse))
                guard case .accept? = peer.answer() else { return }
                peer.send(Frame.hole(length: last).encoded + Frame.hole(length: 1).encoded + Self.end(last, []))
                peer.send(RawWire.bye)
            }
            #expect(
                frames.dropFirst().first == .failed(code: .data, reason: "more data than announced (\(last) bytes)"))
            try Self.servesNext(harness, root, "after-holes")
        }
    }

    @Test("Delta COPYs at the edges: a count of 2^32-1 is cut at the basis, one past the size fails the file")
    func deltaCopiesAtTheEdges() throws {
        try withTemporaryDirectory { root in
            let harness = try Self.receiver(root, overwrite: true)
            // The basis: 3000 bytes, blocks of 700 (four, and one of 200).
            let old = randomBytes(3000, seed: 5)
            try writeFile(root + "/dst/db", old)
            let delta = Self.sizeKnown | Wire.FileFlags.replace | Wire.FileFlags.delta
            /// A delta of `size` bytes against the basis: `body` after ACCEPT, then BYE.
            func deltaSession(size: UInt64, _ body: [UInt8]) throws -> ([Frame], TransferSessionReport) {
                try Self.play(harness) { peer in
                    peer.send(RawWire.hello(["sha256"]) + Self.file("db", size: size, flags: delta))
                    guard case .accept? = peer.answer() else { return }
                    peer.send(body)
                    _ = peer.answer()
                    peer.send(RawWire.bye)
                }
            }
            // Every block from the first, as many as a count holds: the whole basis, stored.
            let (whole, wholeReport) = try deltaSession(
                size: 3000, Frame.copy(index: 0, count: .max).encoded + Self.end(3000, old))
            #expect(whole.contains(.stored) && wholeReport.error == nil, "\(whole)")
            #expect(readFile(root + "/dst/db") == old)
            // More than the file announced: that file fails, the session goes on.
            let (over, overReport) = try deltaSession(
                size: 100, Frame.copy(index: 0, count: .max).encoded + Self.end(100, []))
            #expect(over.contains(.failed(code: .data, reason: "more data than announced (100 bytes)")), "\(over)")
            #expect(overReport.error == nil && over.last == .bye)
            try Self.servesNext(harness, root, "after-copy")
            // A block past the basis (its offset past 2^63, or past 2^64 by far): a violation
            // (sluice-protocol(7)), which ends this session only.
            for index in [UInt64(5), Self.edge / 700 + 1, .max] {
                let (frames, report) = try deltaSession(size: 3000, Frame.copy(index: index, count: 1).encoded)
                #expect(report.error?.code == .protocolViolation, "\(index): \(frames)")
                #expect(readFile(root + "/dst/db") == old)
                try Self.servesNext(harness, root, "after-copy-\(index)")
            }
            // A delta announced past 2^63-1 bytes is refused before any signature.
            let (huge, _) = try Self.play(harness) { peer in
                peer.send(RawWire.hello(["sha256"]) + Self.file("db", size: Self.edge, flags: delta) + RawWire.bye)
            }
            #expect(Self.isTooLarge(huge.first), "\(huge)")
            try Self.servesNext(harness, root, "after-delta")
        }
    }

    // MARK: Reserved names (item 9)

    @Test("A partial file's name is reserved as any component of a path, not only the last")
    func reservedNamesInEveryComponent() {
        let reserved = [
            ".f.sluice-part", "d/.f.sluice-part", ".f.sluice-part/g", "a/.sluice-part.link-1f/b",
            "a/b/.sluice-part.x/c",
            ".sluice-part.0123/x/y",
        ]
        for path in reserved {
            guard case .failure(let refusal) = PathCheck.receivable(Array(path.utf8)) else {
                Issue.record("\(path) taken")
                continue
            }
            #expect(refusal.reason == "the name of a partial file (.NAME.sluice-part) is reserved")
            // Only what the receiver creates is held to it: the plain check of a path says nothing.
            #expect((try? PathCheck.components(Array(path.utf8)).get()) != nil, "\(path)")
        }
        for path in ["f.sluice-part/g", ".sluice-part/g", "a/.f.sluice-parts/b", "sluice-part.x/y", "a/.sluice-partx"] {
            #expect((try? PathCheck.receivable(Array(path.utf8)).get()) != nil, "\(path) refused")
        }
    }

    @Test("A reserved directory component is refused in LINK (and a hard link's target), SPECIAL, CHECK and PRUNE")
    func reservedNamesInEveryMessage() {
        let path = Array("d/.f.sluice-part/x".utf8)
        let refusedAsInvalid = { (actions: [ReceiverAction]) -> Bool in
            guard case .send(.refused(.invalidPath, _))? = actions.first else { return false }
            return true
        }
        var machine = receiverAfterHello(.init())
        let link = LinkHeader(kind: .symbolic, mtimeSeconds: 0, mtimeNanoseconds: 0, path: path, target: [0x61])
        #expect(refusedAsInvalid(machine.received(.frame(.link(link)))))
        let hard = LinkHeader(
            kind: .hard, mtimeSeconds: 0, mtimeNanoseconds: 0, path: Array("h".utf8), target: path)
        #expect(refusedAsInvalid(machine.received(.frame(.link(hard)))))
        let special = SpecialHeader(
            mode: Wire.SpecialType.fifo.rawValue | 0o600, mtimeSeconds: 0, mtimeNanoseconds: 0, path: path)
        #expect(refusedAsInvalid(machine.received(.frame(.special(special)))))
        let check = CheckHeader(kind: .file, size: 1, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0, path: path)
        #expect(machine.received(.frame(.check(check))) == [.checkEntry(nil, check)])
        var pruning = ReceiverMachine(settings: .init())
        _ = pruning.received(.magic)
        _ = pruning.received(.frame(.hello(version: 1, capabilities: ["sha256", "delete"])))
        #expect(refusedAsInvalid(pruning.received(.frame(.prune(path: path, dryRun: false)))))
    }
}
