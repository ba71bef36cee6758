import Foundation
import Synchronization
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// A raw TCP client on a non-blocking descriptor that writes `chunk` again and again, on the
/// loop's timers, and never reads: how far it gets shows whether the receiver stops reading.
final class NeverReadingClient {
    let fd: Int32
    private(set) var written = 0
    private(set) var blockedSince: ContinuousClock.Instant?
    private var timer: LoopTimer?

    init(port: UInt16, first: [UInt8], chunk: [UInt8], loop: EventLoop) throws {
        fd = connectLoopback(port: port)
        try #require(fd >= 0)
        _ = fcntl(fd, F_SETFL, O_NONBLOCK)
        var pending = first
        timer = loop.schedule(after: .milliseconds(1), repeating: .milliseconds(1)) { [unowned self] in
            while true {
                if pending.isEmpty { pending = chunk }
                let n = pending.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if n > 0 {
                    written += n
                    pending.removeFirst(n)
                    blockedSince = nil
                } else {
                    if blockedSince == nil { blockedSince = .now }
                    return
                }
            }
        }
    }

    func stop() {
        timer?.cancel()
        close(fd)
    }
}

@Suite("Transfer under load: peers that never read, many sessions, a slow disk", .ownThreads)
struct TransferLoadTests {
    @Test("A peer that floods refused headers and never reads is held by TCP; another sender goes on")
    func neverReadingPeer() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let harness = try TransferHarness(directory: dst)
            let flood = (0..<1000).flatMap { _ in RawWire.file(bytes: Array("../x".utf8), size: 5) }
            let client = try NeverReadingClient(
                port: harness.port, first: RawWire.hello(), chunk: flood, loop: harness.loop)
            defer { client.stop() }
            // The flood is blocked for good: the receiver stopped reading once its answers could
            // not be queued, so the kernel's buffers filled.
            #expect(
                runLoop(harness.loop, for: .seconds(30)) {
                    client.blockedSince.map { $0.duration(to: .now) > .milliseconds(300) } ?? false
                })
            #expect(client.written < 64 << 20, "wrote \(client.written) bytes: the receiver kept reading")
            let source = root + "/good"
            try writeFile(source, randomBytes(3 << 20))
            let summary = try harness.send(paths: [source])
            #expect(summary.succeeded, "\(summary.results)")
            #expect(readFile(dst + "/good") == readFile(source))
            #expect(harness.receiver.activeSessions == 1, "the flooding session is still held, not crashed")
            #expect(treePaths(dst) == ["good"])
        }
    }

    @Test("256 senders at once on one loop: every file stored")
    func manySessions() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            let src = root + "/src"
            for path in [dst, src] {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            }
            let harness = try TransferHarness(
                directory: dst,
                options: TransferReceiveOptions(fsync: false, idleTimeout: .seconds(60), maxSessions: 256))
            var boxes: [SummaryBox] = []
            var senders: [TransferSender] = []
            for i in 0..<256 {
                let path = src + "/f\(i)"
                try writeFile(path, randomBytes(1000 + i * 37, seed: UInt64(i)))
                let (sender, box) = try harness.startSender([.path(path)])
                senders.append(sender)
                boxes.append(box)
            }
            #expect(runLoop(harness.loop, for: .seconds(120)) { boxes.allSatisfy { $0.summary != nil } })
            #expect(boxes.allSatisfy { $0.summary?.succeeded == true })
            for i in 0..<256 { #expect(readFile(dst + "/f\(i)") == readFile(src + "/f\(i)")) }
            _ = senders
        }
    }

    @Test("A slow disk holds up only its own session: another completes, an idle one is timed out")
    func slowDisk() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            let src = root + "/src"
            for path in [dst, src] {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            }
            let harness = try TransferHarness(
                directory: dst, options: TransferReceiveOptions(fsync: true, idleTimeout: .milliseconds(500)))
            let release = DispatchSemaphore(value: 0)
            let stalled = Atomic<Bool>(false)
            harness.receiver.store.beforeFsync = { relative in
                guard relative == "slow" else { return }
                stalled.store(true, ordering: .sequentiallyConsistent)
                // The slow disk: this flush takes until the test has seen what it wants (10 s at
                // most), so the test does not depend on how fast a loaded machine is.
                _ = release.wait(timeout: .now() + .seconds(10))
            }
            try writeFile(src + "/slow", randomBytes(100_000))
            try writeFile(src + "/fast", randomBytes(200_000, seed: 7))
            let (slowSender, slow) = try harness.startSender([.path(src + "/slow")])
            #expect(runLoop(harness.loop, for: .seconds(20)) { stalled.load(ordering: .sequentiallyConsistent) })
            // While the slow session's flush is stuck: a silent connection is dropped by its idle
            // timer, and another sender's file is stored.
            let idle = try NeverReadingClient(port: harness.port, first: [], chunk: [], loop: harness.loop)
            defer { idle.stop() }
            let (fastSender, fast) = try harness.startSender([.path(src + "/fast")])
            #expect(
                runLoop(harness.loop, for: .seconds(20)) {
                    fast.summary != nil && harness.reports.contains { $0.error?.code == .timedOut }
                })
            #expect(fast.summary?.succeeded == true)
            #expect(slow.summary == nil, "the slow session is still waiting for its disk")
            release.signal()
            #expect(runLoop(harness.loop, for: .seconds(20)) { slow.summary != nil })
            #expect(slow.summary?.succeeded == true, "\(harness.reports.map { String(describing: $0.error) })")
            #expect(readFile(dst + "/slow") == readFile(src + "/slow"))
            _ = (slowSender, fastSender)
        }
    }

    @Test("A disk call stalled in one session (its file's open, or a small file's) holds up only that session")
    func stalledOpenHoldsUpOnlyItsSession() throws {
        for size in [3000, 300_000] {
            try withTemporaryDirectory { root in
                let dst = root + "/dst"
                let src = root + "/src"
                for path in [dst, src] {
                    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
                }
                let harness = try TransferHarness(
                    directory: dst, options: TransferReceiveOptions(fsync: false, idleTimeout: .seconds(30)))
                let release = DispatchSemaphore(value: 0)
                let stalled = Atomic<Bool>(false)
                // The stalled disk: this session's open takes until the test has seen the other
                // session finish (20 s at most), so nothing depends on how fast the machine is.
                harness.receiver.store.afterOpen = { relative, _ in
                    guard relative == "stuck" else { return }
                    stalled.store(true, ordering: .sequentiallyConsistent)
                    _ = release.wait(timeout: .now() + .seconds(20))
                }
                try writeFile(src + "/stuck", randomBytes(size, seed: 5))
                for i in 0..<20 { try writeFile(src + "/other\(i)", randomBytes(i == 0 ? 400_000 : 2000 + i, seed: 9)) }
                let (stuckSender, stuck) = try harness.startSender([.path(src + "/stuck")])
                #expect(runLoop(harness.loop, for: .seconds(20)) { stalled.load(ordering: .sequentiallyConsistent) })
                let others = (0..<20).map { TransferSource.path(src + "/other\($0)") }
                let (otherSender, other) = try harness.startSender(others)
                #expect(runLoop(harness.loop, for: .seconds(20)) { other.summary != nil })
                #expect(other.summary?.succeeded == true, "\(other.summary?.results ?? [])")
                #expect(stuck.summary == nil, "the stalled session is still waiting for its disk")
                release.signal()
                #expect(runLoop(harness.loop, for: .seconds(20)) { stuck.summary != nil })
                #expect(stuck.summary?.succeeded == true)
                #expect(readFile(dst + "/stuck") == readFile(src + "/stuck"))
                _ = (stuckSender, otherSender)
            }
        }
    }

    @Test("With other files being received, writes go to workers: files stored; a failing disk fails only its file")
    func writesOnWorkers() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            let src = root + "/src"
            for path in [dst, src] {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            }
            let harness = try TransferHarness(directory: dst)
            // "bad" lands on a device that is always full: every write to it fails.
            harness.receiver.store.afterOpen = { relative, fd in
                guard relative == "bad" else { return }
                let full = open("/dev/full", O_WRONLY)
                _ = dup2(full, fd)
                close(full)
            }
            // A session that has started a file and sends nothing more: from now on another
            // session's file is not the only one being received.
            let holder = try NeverReadingClient(
                port: harness.port, first: RawWire.hello() + RawWire.file("held", size: 5), chunk: [],
                loop: harness.loop)
            defer { holder.stop() }
            #expect(runLoop(harness.loop, for: .seconds(20)) { harness.receiver.filesReceiving == 1 })
            for (name, size) in [("good", 5 << 20), ("small", 1), ("empty", 0)] {
                try writeFile(src + "/" + name, randomBytes(size, seed: UInt64(size)))
            }
            let summary = try harness.send(paths: [src + "/good", src + "/small", src + "/empty"])
            #expect(summary.succeeded, "\(summary.results)")
            #expect(harness.receiver.piecesLent > 0, "the writes were made on the loop")
            for name in ["good", "small", "empty"] { #expect(readFile(dst + "/" + name) == readFile(src + "/" + name)) }
            try writeFile(src + "/bad", randomBytes(3 << 20, seed: 3))
            try writeFile(src + "/after", randomBytes(2 << 20, seed: 4))
            let failed = try harness.send(paths: [src + "/bad", src + "/after"])
            #expect(!failed.succeeded)
            #expect(
                failed.results.first { $0.path == "bad" }?.outcome.description.contains("No space left on device")
                    == true,
                "\(failed.results)")
            #expect(failed.results.first { $0.path == "after" }?.outcome == .stored, "\(failed.results)")
            #expect(readFile(dst + "/after") == readFile(src + "/after"))
            #expect(!fileExists(dst + "/bad"))
            // Compressed, its decompressed bytes go to the worker in copies: the same failure.
            let compressed = try harness.send(paths: [src + "/bad"], options: TransferSendOptions(compress: true))
            #expect(
                compressed.results.first?.outcome.description.contains("No space left on device") == true,
                "\(compressed.results)")
            #expect(!fileExists(dst + "/bad"))
            // Its temporary goes once the writes queued for it are done, on a worker: maybe just
            // after the sender heard of the failure.
            let removed = runLoop(harness.loop, for: .seconds(20)) { !treePaths(dst).contains { $0.contains("bad") } }
            #expect(removed, "the failed file's temporary stays: \(treePaths(dst))")
            #expect(harness.receiver.activeSessions == 1, "the holding session goes on")
            #expect(
                treePaths(dst).filter { !$0.hasPrefix(".") } == ["after", "empty", "good", "small"], "\(treePaths(dst))"
            )
        }
    }

    @Test("Many files at once share 4 MiB of inbound buffers; one file alone reads into 1 MiB again")
    func inboundBuffersShareABudget() throws {
        try withTemporaryDirectory { root in
            let harness = try TransferHarness(directory: root)
            let mib = 1 << 20
            // A raw session that starts a file and sends its bytes when told, in small pieces.
            let first = connectLoopback(port: harness.port)
            try #require(first >= 0)
            defer { close(first) }
            func sendFirst(_ bytes: [UInt8]) {
                let n = bytes.withUnsafeBytes { Glibc.send(first, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                #expect(n == bytes.count)
            }
            let start = RawWire.hello() + RawWire.file("first", size: 8 << 20)
            sendFirst(start + RawWire.data([UInt8](repeating: 1, count: 100)))
            #expect(runLoop(harness.loop, for: .seconds(20)) { harness.receiver.inboundCapacities == [mib] })
            // Eight more start files: each buffer is sized when its file starts, by how many are
            // arriving then.
            var holders: [NeverReadingClient] = []
            defer { holders.forEach { $0.stop() } }
            for i in 2...9 {
                holders.append(
                    try NeverReadingClient(
                        port: harness.port, first: RawWire.hello() + RawWire.file("h\(i)", size: 1 << 20), chunk: [],
                        loop: harness.loop))
                #expect(runLoop(harness.loop, for: .seconds(20)) { harness.receiver.filesReceiving == i })
            }
            let kib = 1 << 10
            let shared = [mib, mib, mib, mib, 512 * kib, 512 * kib, 512 * kib, 512 * kib, 256 * kib]
            #expect(harness.receiver.inboundCapacities == shared)
            // The first session's next read comes into its share of the nine.
            sendFirst(RawWire.data([UInt8](repeating: 2, count: 100)))
            #expect(
                runLoop(harness.loop, for: .seconds(20)) {
                    harness.receiver.inboundCapacities.first == 256 * kib
                }, "\(harness.receiver.inboundCapacities)")
            // The others go; once it is alone, its next read is into 1 MiB again.
            holders.forEach { $0.stop() }
            holders = []
            #expect(runLoop(harness.loop, for: .seconds(20)) { harness.receiver.filesReceiving == 1 })
            sendFirst(RawWire.data([UInt8](repeating: 3, count: 100)))
            #expect(
                runLoop(harness.loop, for: .seconds(20)) { harness.receiver.inboundCapacities == [mib] },
                "\(harness.receiver.inboundCapacities)")
        }
    }

    @Test("Beyond --max-sessions a sender is told busy; it is served once a session ends")
    func maxSessions() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let harness = try TransferHarness(
                directory: dst, options: TransferReceiveOptions(idleTimeout: .seconds(20), maxSessions: 1))
            let source = root + "/f"
            try writeFile(source, randomBytes(10_000))
            let holder = try NeverReadingClient(
                port: harness.port, first: RawWire.hello(), chunk: [], loop: harness.loop)
            #expect(runLoop(harness.loop, for: .seconds(10)) { harness.receiver.activeSessions == 1 })
            let (busySender, busy) = try harness.startSender([.path(source)])
            defer { _ = busySender }
            #expect(runLoop(harness.loop, for: .seconds(10)) { busy.summary != nil })
            let error = try #require(busy.summary?.error)
            #expect(error.code == .unavailable && error.description.contains("busy"), "\(error)")
            #expect(harness.receiver.connectionsRefused == 1)
            #expect(treePaths(dst).isEmpty)
            holder.stop()
            #expect(runLoop(harness.loop, for: .seconds(10)) { harness.receiver.activeSessions == 0 })
            let summary = try harness.send(paths: [source])
            #expect(summary.succeeded)
        }
    }

    @Test("Connections that have not said HELLO hold no slot, wait apart, and the oldest make room")
    func waitingConnections() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let harness = try TransferHarness(
                directory: dst, options: TransferReceiveOptions(idleTimeout: .seconds(20), maxSessions: 1))
            harness.receiver.maxPendingPerAddress = 3
            harness.receiver.admissionGrace = .zero
            var silent: [NeverReadingClient] = []
            defer { for client in silent { client.stop() } }
            for _ in 0..<5 {
                silent.append(try NeverReadingClient(port: harness.port, first: [], chunk: [], loop: harness.loop))
            }
            // Five came from one address: the two oldest made room for the newer ones.
            #expect(runLoop(harness.loop, for: .seconds(10)) { harness.receiver.pendingDropped == 2 })
            #expect(harness.receiver.pendingConnections == 3)
            #expect(harness.receiver.activeSessions == 0)
            // The one slot is free for a sender.
            let source = root + "/f"
            try writeFile(source, randomBytes(10_000))
            let summary = try harness.send(paths: [source])
            #expect(summary.succeeded, "\(summary.results)")
            #expect(readFile(dst + "/f") == readFile(source))
        }
    }

    @Test("A connection that does not say HELLO within the deadline is dropped")
    func admissionDeadline() throws {
        try withTemporaryDirectory { root in
            let harness = try TransferHarness(
                directory: root, options: TransferReceiveOptions(idleTimeout: .milliseconds(300)))
            let silent = try NeverReadingClient(port: harness.port, first: [], chunk: [], loop: harness.loop)
            defer { silent.stop() }
            #expect(runLoop(harness.loop, for: .seconds(10)) { harness.reports.count == 1 })
            #expect(harness.reports.first?.error?.code == .timedOut, "\(harness.reports)")
            #expect(harness.receiver.pendingConnections == 0)
        }
    }
}
