import Foundation
import Synchronization
import TestThreads
import Testing

@testable import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// An `FDHandler` that counts what it is told and can react.
private final class ReadinessProbe: FDHandler {
    var calls = 0
    var onReady: (() -> Void)?
    func fdReady(_ readiness: Readiness) {
        calls += 1
        onReady?()
    }
}

/// A pipe; the caller closes both ends.
private func makePipe() throws -> (read: Int32, write: Int32) {
    var fds: [Int32] = [0, 0]
    guard pipe(&fds) == 0 else { throw POSIXError(.EMFILE) }
    return (fds[0], fds[1])
}

/// What `/proc/self/fd/FD` points at now (nil when the descriptor is not open).
private func descriptorTarget(_ fd: Int32) -> String? {
    try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)")
}

@Suite(.ownThreads) struct EventLoopTests {
    @Test func aDeadlineJustPassedReturnsAtOnce() throws {
        // Less than a second in the past: a duration of 0 s and negative attoseconds, which
        // crashed the conversion (seen in a loaded run, where a test's deadline had just passed).
        let loop = try EventLoop()
        let timer = loop.schedule(after: .seconds(60)) {}
        #expect(loop.run(until: .now - .milliseconds(500)))
        #expect(loop.run(for: .milliseconds(-300)))
        timer.cancel()
        #expect(Duration.milliseconds(-500).nanoseconds == 0)
        #expect(Duration.seconds(-2).nanoseconds == 0)
        #expect(Duration.milliseconds(1500).nanoseconds == 1_500_000_000)
        #expect(Duration.seconds(Int64.max).nanoseconds == .max)
    }

    /// Timers cancelled long before their deadlines (a connection's idle, handshake and
    /// admission timers when it ends at once) are dropped with what their closures hold, not
    /// kept until the deadline; the others still fire in order. (Seen through the tls fuzz
    /// target: every connection it made left its cancelled timers in the heap, and a session
    /// that ended gracefully stayed alive for 5 s through its cancelled closing timer.)
    @Test func cancelledTimersAreReleasedBeforeTheirDeadlines() throws {
        final class Captured {}
        let loop = try EventLoop()
        // At once, what its closure holds.
        weak var single: Captured?
        do {
            let captured = Captured()
            single = captured
            loop.schedule(after: .seconds(300)) { _ = captured }.cancel()
        }
        #expect(single == nil)
        // Fired, likewise.
        weak var fired: Captured?
        do {
            let captured = Captured()
            fired = captured
            loop.schedule(after: .milliseconds(1)) { _ = captured }
        }
        loop.run()
        #expect(fired == nil)
        // Swept from the heap, once most of it is cancelled.
        weak var first: Captured?
        for i in 0..<1000 {
            let captured = Captured()
            if i == 0 { first = captured }
            loop.schedule(after: .seconds(300)) { _ = captured }.cancel()
        }
        #expect(first == nil)
        #expect(loop.timersHeld < 64)

        // Fired in the order of their deadlines (not of their delays: on a loaded machine the
        // clock moves while the 200 are scheduled).
        var order: [Int] = []
        var timers: [LoopTimer] = []
        for i in 0..<200 {
            let due = 1 + i * 37 % 50
            timers.append(loop.schedule(after: .milliseconds(due)) { order.append(i) })
        }
        for (i, timer) in timers.enumerated() where i % 3 != 2 { timer.cancel() }
        #expect(loop.timersHeld < 200)
        loop.run()
        #expect(order.count == 66)
        #expect(Set(order) == Set((0..<200).filter { $0 % 3 == 2 }))
        let deadlines = order.map { timers[$0].dueAt }
        #expect(deadlines == deadlines.sorted())
    }

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
        // A timer that never fires keeps the loop asleep in epoll_wait; only the eventfd can
        // wake it.
        let keepAlive = loop.schedule(after: .seconds(3600)) {}
        let box = UncheckedBox(keepAlive)
        let thread = Thread {
            for _ in 0..<100 { loop.execute { counter.add(1, ordering: .relaxed) } }
            // Let the loop run them all and go back to sleep before the last one.
            waitUntil { counter.load(ordering: .relaxed) == 100 }
            loop.execute {
                box.value.cancel()
                loop.stop()
            }
        }
        thread.start()
        // The event: the loop returns because the last execute stopped it, not because its
        // deadline (only a bound on a failure) passed.
        let timedOut = loop.run(for: .seconds(60))
        #expect(!timedOut, "the loop was not woken")
        #expect(counter.load(ordering: .relaxed) == 100)
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

    /// The execute/sleep handshake: producers hand over a million tasks in small batches and
    /// wait for each batch to run, so the loop drains its queue and goes to sleep in
    /// `epoll_wait` between them, over and over. A lost wake-up stalls a producer; its
    /// deadline turns that into a failure instead of a hang.
    @Test func aMillionCrossThreadTasksAllRunWithoutAStall() throws {
        let loop = try EventLoop()
        let producers = 4
        let perProducer = 250_000
        let batch = 100
        let ran = Counter()
        let stalled = Atomic<Bool>(false)
        let finished = Counter()
        loop.retainSource()  // nothing else to serve: between batches the loop sleeps
        for _ in 0..<producers {
            let mine = Counter()
            Thread.detachNewThread {
                for i in 1...perProducer {
                    loop.execute {
                        mine.value.add(1, ordering: .relaxed)
                        ran.value.add(1, ordering: .relaxed)
                    }
                    guard i % batch == 0 else { continue }
                    let deadline = ContinuousClock.now.advanced(by: .seconds(60))
                    while mine.value.load(ordering: .relaxed) < i {
                        if stalled.load(ordering: .relaxed) { return }
                        if ContinuousClock.now > deadline {
                            stalled.store(true, ordering: .relaxed)
                            loop.stop()
                            return
                        }
                        sched_yield()
                    }
                }
                if finished.value.add(1, ordering: .relaxed).newValue == producers {
                    // The last task lets `run()` return: nothing is left once it has run.
                    let box = UncheckedBox(loop)
                    loop.execute { box.value.releaseSource() }
                }
            }
        }
        let timedOut = loop.run(for: .seconds(300))
        let stall = stalled.load(ordering: .relaxed)
        #expect(!timedOut)
        #expect(!stall)
        #expect(ran.value.load(ordering: .relaxed) == producers * perProducer)
    }

    @Test func stopBeforeRunEndsTheNextRunOnce() throws {
        let loop = try EventLoop()
        var fired = false
        loop.schedule(after: .milliseconds(10)) { fired = true }
        loop.stop()
        #expect(!loop.run(for: .seconds(60)))  // returns at once: not timed out,
        #expect(!fired)  // and the timer has not fired
        loop.run()  // the request was spent: this one serves the timer, then has nothing left
        #expect(fired)

        // From another thread, before the run starts.
        let stopped = Counter()
        let thread = Thread {
            loop.stop()
            stopped.value.store(1, ordering: .relaxed)
        }
        thread.start()
        #expect(waitUntil { stopped.value.load(ordering: .relaxed) == 1 })
        let timer = loop.schedule(after: .seconds(60)) {}
        #expect(!loop.run(for: .seconds(30)))
        #expect(!timer.isCancelled)
        timer.cancel()
    }

    @Test func aStopThatEndedARunDoesNotEndTheNext() throws {
        let loop = try EventLoop()
        loop.schedule(after: .milliseconds(1)) { loop.stop() }
        let keepAlive = loop.schedule(after: .seconds(60)) {}
        #expect(!loop.run(for: .seconds(30)))
        var ticks = 0
        var repeating: LoopTimer?
        repeating = loop.schedule(after: .milliseconds(1), repeating: .milliseconds(1)) {
            ticks += 1
            if ticks == 3 { repeating?.cancel() }
        }
        keepAlive.cancel()
        loop.run()
        #expect(ticks == 3)
    }

    /// Two descriptors ready in one epoll batch; the handler served first stops watching the
    /// other, puts a new (never readable) pipe under the same number with `dup2`, and watches
    /// it. The other's report, still in the batch, must not reach the newcomer.
    @Test func aStaleEventDoesNotReachANewRegistrationOfTheSameNumber() throws {
        let loop = try EventLoop()
        let first = try makePipe()
        let second = try makePipe()
        let spare = try makePipe()
        defer {
            for fd in [first.read, first.write, second.read, second.write, spare.write] { close(fd) }
        }
        var one: UInt8 = 1
        #expect(write(first.write, &one, 1) == 1)
        #expect(write(second.write, &one, 1) == 1)
        let probes = (ReadinessProbe(), ReadinessProbe())
        let newcomer = ReadinessProbe()
        var replaced: Int32?
        func replace(_ victim: Int32, _ me: Int32) {
            guard replaced == nil else { return }
            replaced = victim
            loop.unwatch(fd: victim)
            #expect(dup2(spare.read, victim) == victim)  // closes the victim's pipe end
            close(spare.read)
            #expect(throws: Never.self) { try loop.watch(fd: victim, interest: .read, handler: newcomer) }
            loop.unwatch(fd: me)
            loop.stop()
        }
        probes.0.onReady = { replace(second.read, first.read) }
        probes.1.onReady = { replace(first.read, second.read) }
        try loop.watch(fd: first.read, interest: .read, handler: probes.0)
        try loop.watch(fd: second.read, interest: .read, handler: probes.1)
        loop.retainSource()
        #expect(!loop.run(for: .seconds(30)))
        loop.releaseSource()
        #expect(replaced != nil)
        #expect(probes.0.calls + probes.1.calls == 1)
        #expect(newcomer.calls == 0)
        if let replaced { loop.unwatch(fd: replaced) }
    }

    /// A scheduled, open, kernel-watched stream dropped without `close()`: its descriptor is
    /// closed (the pipe's writer sees EPIPE) and `run()` returns.
    @Test func aDroppedPipeStreamClosesItsDescriptorAndLetsRunReturn() throws {
        let loop = try EventLoop()
        let (readEnd, writeEnd) = try makePipe()
        defer { close(writeEnd) }
        do {
            let stream = ReadStream.descriptor(readEnd, closeWhenDone: true)
            stream.schedule(on: loop)
            stream.open()
            var opened = false
            stream.eventHandler = { _, event in if event == .openCompleted { opened = true } }
            #expect(runLoop(loop, for: .seconds(30)) { opened })  // now watched by epoll
        }
        #expect(!loop.run(for: .seconds(30)))  // nothing keeps it running
        // Without a SIGPIPE, which would end the test process when no other test has set it
        // to be ignored (a run of this suite alone).
        #expect([UInt8(1)].withUnsafeBytes { writeSuppressingSIGPIPE(writeEnd, $0) } == -1)
        #expect(errno == EPIPE)
    }

    @Test func aDroppedFileStreamClosesItsDescriptor() throws {
        try withTemporaryDirectory { dir in
            let path = dir + "/dropped"
            try Data([1, 2, 3]).write(to: URL(fileURLWithPath: path))
            let loop = try EventLoop()
            var fd: Int32 = -1
            do {
                let stream = ReadStream.file(atPath: path)
                stream.schedule(on: loop)
                stream.open()
                fd = try #require(stream.property(forKey: .fileDescriptor) as? Int32)
                #expect(descriptorTarget(fd) == path)
                #expect(fcntl(fd, F_GETFD) != -1)
            }
            // The loop's ready queue may still hold it: it lets go at the next turn, and then
            // has nothing left to serve.
            #expect(!loop.run(for: .seconds(30)))
            // Closed, or (other tests run in parallel) reused for something else.
            #expect(descriptorTarget(fd) != path)
        }
    }

    @Test func aDroppedSocketStreamPairShutsTheConnection() throws {
        let loop = try EventLoop()
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        do {
            let (input, output) = Socket.connect(host: "127.0.0.1", port: listener.port)
            var opened = 0
            for stream in [input, output] as [ByteStream] {
                stream.eventHandler = { _, event in if event == .openCompleted { opened += 1 } }
                stream.schedule(on: loop)
                stream.open()
            }
            #expect(runLoop(loop, for: .seconds(30)) { opened == 2 })
        }
        let (peerInput, peerOutput, _) = try listener.accept(timeout: .seconds(30))
        defer {
            peerInput.close()
            peerOutput.close()
        }
        peerInput.open()
        guard waitUntil(.seconds(30), { peerInput.hasBytesAvailable }) else {
            Issue.record("the peer saw neither bytes nor the end")  // rather than hang in read
            return
        }
        var buffer = [UInt8](repeating: 0, count: 16)
        #expect(buffer.withUnsafeMutableBytes { peerInput.read(into: $0) } == 0)  // end of stream
        #expect(!loop.run(for: .seconds(30)))
    }
}
