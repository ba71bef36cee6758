import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// A receiver played by hand on a blocking socket: it offers `eager` and `eager-resume`, reads
/// what the sender sends and answers nothing until every file's END is in; then it answers
/// every entry (directories included) STORED.
private final class SilentReceiver: Sendable {
    struct Seen: Sendable {
        var files: [EntryHeader] = []
        var ends = 0
        var byeAfterAnswers = false
        var failure: String?
    }

    let port: UInt16
    private let listener: Int32
    let seen = Mutex(Seen())

    init(expectedFiles: Int) throws {
        (listener, port) = try listenOnLoopback()
        Thread.detachNewThread { [self] in serve(expectedFiles: expectedFiles) }
    }

    deinit { close(listener) }

    private func serve(expectedFiles: Int) {
        let fd = accept(listener, nil, nil)
        guard fd >= 0 else { return }
        defer { close(fd) }
        func send(_ bytes: [UInt8]) { _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } }
        let capabilities: Set<String> = ["sha256", "resume", "eager", "eager-resume"]
        send(Wire.magic + Frame.hello(version: 1, capabilities: capabilities).encoded)
        var decoder = FrameDecoder(direction: .toReceiver)
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        var answered = false
        var directories = 0
        while true {
            var progressed = true
            while progressed {
                progressed = false
                let step = pending.withUnsafeBytes { decoder.next($0) }
                switch step {
                case .needMore:
                    break
                case .violation(let reason):
                    seen.withLock { $0.failure = "violation: \(reason)" }
                    return
                case .item(let item, let consumed):
                    pending.removeFirst(consumed)
                    progressed = true
                    guard case .frame(let frame) = item else { continue }
                    switch frame {
                    case .directory:
                        directories += 1
                    case .file(let header):
                        seen.withLock { $0.files.append(header) }
                    case .end:
                        let ends = seen.withLock { state -> Int in
                            state.ends += 1
                            return state.ends
                        }
                        if ends == expectedFiles && !answered {
                            // Every file is in, and not one answer has been sent: now all of them.
                            answered = true
                            send((0..<(directories + expectedFiles)).flatMap { _ in Frame.stored.encoded })
                        }
                    case .bye:
                        seen.withLock { $0.byeAfterAnswers = answered }
                        send(Frame.bye.encoded)
                        return
                    default:
                        break
                    }
                }
            }
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { return }
            pending += buffer[0..<n]
        }
    }
}

@Suite("Sending a tree without a round trip per file", .ownThreads)
struct PipelinedSendTests {
    @Test("Every file's header, data and END reach a receiver that answers nothing; large ones eager and resumable")
    func noFileWaitsForAnAnswer() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
            // Three small files and three over the eager limit.
            let sizes = [1000, 200_000, 5, 70_000, Int(Wire.eagerLimit), 1 << 20]
            for (i, size) in sizes.enumerated() { try writeFile(src + "/f\(i)", randomBytes(size, seed: UInt64(i))) }
            let receiver = try SilentReceiver(expectedFiles: sizes.count)
            let loop = try EventLoop()
            let sender = try TransferSender(paths: [src])
            let (input, output) = Socket.connect(host: "127.0.0.1", port: receiver.port)
            let box = SummaryBox()
            sender.start(input: input, output: output, on: loop) { box.summary = $0 }
            #expect(runLoop(loop, for: .seconds(30)) { box.summary != nil })
            let summary = try #require(box.summary)
            #expect(summary.succeeded, "\(summary.results)")
            #expect(summary.files == sizes.count)
            let seen = receiver.seen.withLock { $0 }
            #expect(seen.failure == nil, "\(seen.failure ?? "")")
            #expect(seen.ends == sizes.count)
            #expect(seen.byeAfterAnswers, "goodbye came before the answers the sender waits for")
            #expect(seen.files.count == sizes.count)
            for header in seen.files {
                let large = header.size > Wire.eagerLimit
                #expect(header.eager, "\(String(decoding: header.path, as: UTF8.self)) waited for ACCEPT")
                #expect(header.resumable == large, "\(String(decoding: header.path, as: UTF8.self))")
            }
        }
    }

    @Test("With the default flush a file takes its name only after its batch is on disk, and is answered after that")
    func aNameWaitsForTheFlush() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            let src = root + "/src"
            for path in [dst, src] {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            }
            try writeFile(src + "/small", randomBytes(3000, seed: 1))
            // Larger than a file sent whole: it is opened under its temporary name.
            try writeFile(src + "/large", randomBytes(Int(Wire.wholeLimit) + 300_000, seed: 2))
            let harness = try TransferHarness(directory: dst)
            let release = DispatchSemaphore(value: 0)
            let flushing = Atomic<Int>(0)
            harness.receiver.store.beforeFsync = { _ in
                // The flush of the batch waits until the test has looked (10 s at most).
                if flushing.add(1, ordering: .sequentiallyConsistent).newValue == 1 {
                    _ = release.wait(timeout: .now() + .seconds(10))
                }
            }
            let (sender, box) = try harness.startSender([.path(src + "/small"), .path(src + "/large")])
            #expect(runLoop(harness.loop, for: .seconds(20)) { flushing.load(ordering: .sequentiallyConsistent) > 0 })
            // Verified, set aside, not yet flushed: no final name, no answer. The large file
            // waits under its temporary name; the small one, written whole, has no name at all
            // (created unnamed, it is named once its batch is on disk).
            #expect(!fileExists(dst + "/small") && !fileExists(dst + "/large"))
            #expect(!fileExists(dst + "/.small.sluice-part") && fileExists(dst + "/.large.sluice-part"))
            #expect(box.summary == nil)
            release.signal()
            #expect(runLoop(harness.loop, for: .seconds(20)) { box.summary != nil })
            #expect(box.summary?.succeeded == true, "\(box.summary?.results ?? [])")
            #expect(readFile(dst + "/small") == readFile(src + "/small"))
            #expect(readFile(dst + "/large") == readFile(src + "/large"))
            #expect(treePaths(dst) == ["large", "small"])
            // The resume mark of a partial never stays on a stored file.
            for name in ["small", "large"] {
                #expect(fileExists(dst + "/" + name) && !Destination.hasResumeMark(dst + "/" + name), "\(name)")
            }
            _ = sender
        }
    }
}
