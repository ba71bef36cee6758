import Foundation
import Synchronization
import Testing

@testable import Sluice

@Suite struct EventLoopTests {
    @Test func oneShotAndRepeatingTimersFireInOrder() throws {
        let loop = try EventLoop()
        var fired: [String] = []
        var ticks = 0
        loop.schedule(after: .milliseconds(30)) { fired.append("late") }
        loop.schedule(after: .milliseconds(10)) { fired.append("early") }
        var repeating: LoopTimer?
        repeating = loop.schedule(after: .milliseconds(5), repeating: .milliseconds(5)) {
            ticks += 1
            if ticks == 4 { repeating?.cancel() }
        }
        let start = ContinuousClock.now
        loop.run()  // returns when no timer is left
        #expect(fired == ["early", "late"])
        #expect(ticks == 4)
        #expect(ContinuousClock.now - start >= .milliseconds(30))
    }

    @Test func cancelledTimerNeverFires() throws {
        let loop = try EventLoop()
        var fired = false
        let timer = loop.schedule(after: .milliseconds(10)) { fired = true }
        timer.cancel()
        timer.cancel()
        loop.run()
        #expect(!fired)
    }

    @Test func executeFromAnotherThreadWakesTheLoop() throws {
        let loop = try EventLoop()
        let counter = Atomic<Int>(0)
        // A long timer keeps the loop asleep in epoll_wait; only the eventfd can wake it.
        let keepAlive = loop.schedule(after: .seconds(30)) {}
        let box = UncheckedBox(keepAlive)
        let thread = Thread {
            for _ in 0..<100 { loop.execute { counter.add(1, ordering: .relaxed) } }
            Thread.sleep(forTimeInterval: 0.05)
            loop.execute {
                box.value.cancel()
                loop.stop()
            }
        }
        let start = ContinuousClock.now
        thread.start()
        loop.run()
        #expect(counter.load(ordering: .relaxed) == 100)
        #expect(ContinuousClock.now - start < .seconds(10))
    }

    @Test func runUntilDeadlineReturnsTrueWhenTimeRunsOut() throws {
        let loop = try EventLoop()
        let timer = loop.schedule(after: .seconds(60)) {}
        #expect(loop.run(for: .milliseconds(20)))
        timer.cancel()
        #expect(!loop.run(for: .seconds(5)))  // nothing left: returns at once, not timed out
    }

    @Test func stopFromADelegateReturnsFromRun() throws {
        let loop = try EventLoop()
        let stream = ReadStream.memory([UInt8](repeating: 1, count: 10_000))
        var reads = 0
        stream.eventHandler = { s, e in
            guard e == .hasBytesAvailable else { return }
            var b = [UInt8](repeating: 0, count: 10)
            _ = b.withUnsafeMutableBytes { (s as! ReadStream).read(into: $0) }
            reads += 1
            if reads == 3 { loop.stop() }
        }
        stream.schedule(on: loop)
        stream.open()
        loop.run()
        #expect(reads == 3)
        stream.close()
    }

    @Test func removedStreamGetsNoMoreEvents() throws {
        let loop = try EventLoop()
        let stream = ReadStream.memory([1, 2, 3])
        let recorder = EventRecorder()
        stream.delegate = recorder
        stream.schedule(on: loop)
        stream.open()
        stream.remove(from: loop)
        #expect(!loop.run(for: .milliseconds(50)))
        #expect(recorder.events.isEmpty)
        // Still usable by polling.
        #expect(try stream.readToEnd() == Data([1, 2, 3]))
    }
}
