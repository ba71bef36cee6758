import Foundation
import Synchronization
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// The sender's disk work (opening files, reading them) runs on workers: a source whose open
/// blocks holds up its own transfer only, never the others on the same loop.
@Suite("Sender disk work", .ownThreads)
struct SenderDiskWorkTests {
    /// A file listed, then replaced by a FIFO: the sender's `open` of it blocks until a writer
    /// appears (a real stall, as of a hung network file system). Meanwhile another transfer
    /// served by the same loop runs to its end, and the loop's timers fire; only then does the
    /// writer appear (or after 10 s, so that a sender that blocks its loop fails the test
    /// rather than hanging it), and the stalled file is refused as no longer a regular file.
    @Test("A source whose open blocks does not hold up another transfer on the same loop")
    func blockedOpenDoesNotStallTheLoop() throws {
        try withTemporaryDirectory { root in
            let src = root + "/src"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src + "/tree", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let stalled = src + "/stalled"
            try writeFile(stalled, Array("listed as a file".utf8))
            let big = randomBytes(3_000_000, seed: 38)
            try writeFile(src + "/tree/big", big)
            for index in 0..<20 { try writeFile(src + "/tree/small\(index)", randomBytes(1000 + index, seed: 7)) }
            let harness = try TransferHarness(directory: dst)
            let loop = harness.loop

            // Listed as a regular file, then a FIFO by the time the sender opens it.
            let (stalledSender, stalledBox) = try harness.startSender([.path(stalled)])
            #expect(unlink(stalled) == 0)
            #expect(mkfifo(stalled, 0o600) == 0)

            let writerAppeared = Atomic<Bool>(false)
            let otherDone = DispatchSemaphore(value: 0)
            let writer = Atomic<Int32>(-1)
            let writerDone = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                _ = otherDone.wait(timeout: .now() + 10)
                writerAppeared.store(true, ordering: .sequentiallyConsistent)
                // Non-blocking: fails (ENXIO) until the sender is in its open of the FIFO.
                let deadline = ContinuousClock.now.advanced(by: .seconds(30))
                while ContinuousClock.now < deadline {
                    let fd = open(stalled, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
                    if fd >= 0 {
                        writer.store(fd, ordering: .sequentiallyConsistent)
                        break
                    }
                    usleep(10_000)
                }
                writerDone.signal()
            }
            defer {
                otherDone.signal()
                writerDone.wait()
                let fd = writer.load(ordering: .sequentiallyConsistent)
                if fd >= 0 { close(fd) }
            }

            // The stalled sender has said HELLO and asked for its file to be opened.
            let opening = runLoop(loop, for: .seconds(20)) {
                if case .opening = stalledSender.machine.state { return true }
                return stalledBox.summary != nil
            }
            #expect(opening, "the stalled sender never reached its file")
            #expect(stalledBox.summary == nil)

            // Meanwhile: a transfer of a tree, and a timer, on the same loop.
            var timerFiredDuringStall = false
            _ = loop.schedule(after: .milliseconds(20)) {
                timerFiredDuringStall = !writerAppeared.load(ordering: .sequentiallyConsistent)
            }
            var doneDuringStall = false
            let (otherSender, otherBox) = try harness.startSender([.path(src + "/tree")])
            let otherFinished = runLoop(loop, for: .seconds(30)) {
                if otherBox.summary != nil && !doneDuringStall {
                    doneDuringStall = !writerAppeared.load(ordering: .sequentiallyConsistent)
                    otherDone.signal()
                }
                return otherBox.summary != nil
            }
            _ = otherSender
            #expect(otherFinished)
            #expect(doneDuringStall, "the other transfer finished only once the FIFO's writer appeared")
            #expect(timerFiredDuringStall, "the loop's timer fired only once the FIFO's writer appeared")
            let other = try #require(otherBox.summary)
            #expect(other.error == nil)
            #expect(other.files == 21)
            #expect(readFile(dst + "/tree/big") == big)
            #expect(readFile(dst + "/tree/small19") == randomBytes(1019, seed: 7))

            // The writer appears: the open returns, and the FIFO is refused.
            #expect(runLoop(loop, for: .seconds(30)) { stalledBox.summary != nil })
            let summary = try #require(stalledBox.summary)
            #expect(summary.files == 0)
            guard case .failed(let reason, _) = summary.results.first?.outcome else {
                Issue.record("the FIFO was not refused: \(summary.results)")
                return
            }
            #expect(reason.contains("not a regular file"), "\(reason)")
            _ = stalledSender
        }
    }
}
