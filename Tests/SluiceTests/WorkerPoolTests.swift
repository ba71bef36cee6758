import Foundation
import Synchronization
import TestThreads
import Testing

@testable import Sluice

@Suite("WorkerPool", .ownThreads)
struct WorkerPoolTests {
    @Test("Every job runs, on at most threadCount threads at once")
    func everyJobRuns() {
        let pool = WorkerPool(threads: 3)
        let done = Atomic<Int>(0)
        let concurrent = Atomic<Int>(0)
        let peak = Atomic<Int>(0)
        let finished = DispatchSemaphore(value: 0)
        for _ in 0..<2000 {
            pool.submit {
                let now = concurrent.add(1, ordering: .sequentiallyConsistent).newValue
                var seen = peak.load(ordering: .relaxed)
                while now > seen {
                    let (exchanged, original) = peak.compareExchange(
                        expected: seen, desired: now, ordering: .relaxed)
                    if exchanged { break }
                    seen = original
                }
                concurrent.subtract(1, ordering: .sequentiallyConsistent)
                if done.add(1, ordering: .sequentiallyConsistent).newValue == 2000 { finished.signal() }
            }
        }
        finished.wait()
        #expect(done.load(ordering: .relaxed) == 2000)
        #expect(peak.load(ordering: .relaxed) <= 3)
        pool.shutdown()
        #expect(pool.outstandingJobs == 0)
    }

    /// The queue kept each job it had handed out until 64 had gone by: while the pool then
    /// waited, what the last jobs captured stayed alive (a receiver's closed sessions, with
    /// their buffers and TLS engines). Seen through the tls fuzz target's leak check.
    @Test("A finished job lets go of what it captured while the pool waits")
    func finishedJobReleasesItsCaptures() {
        final class Captured: Sendable {}
        let pool = WorkerPool(threads: 1)
        weak var held: Captured?
        let ran = DispatchSemaphore(value: 0)
        for _ in 0..<3 {
            let captured = Captured()
            held = captured
            pool.submit {
                _ = captured
                ran.signal()
            }
            ran.wait()
        }
        #expect(waitUntil { held == nil })
        pool.shutdown()
    }

    @Test("A job's result comes back on the loop's thread, and the loop never waits for it")
    func completesOnLoop() throws {
        let pool = WorkerPool(threads: 1)
        let loop = try EventLoop()
        let release = DispatchSemaphore(value: 0)
        var results: [Int] = []
        var timerFired = false
        // The first job blocks until the loop's timer has fired: a loop that waited for the
        // worker would never fire it.
        pool.submit(
            { () -> Int in
                release.wait()
                return 1
            }, completingOn: loop
        ) { results.append($0) }
        pool.submit({ 2 }, completingOn: loop) { value in
            results.append(value)
            loop.stop()
        }
        _ = loop.schedule(after: .milliseconds(1)) {
            timerFired = true
            release.signal()
        }
        let timedOut = loop.run(for: .seconds(30))
        #expect(!timedOut)
        #expect(timerFired)
        #expect(results == [1, 2])
        pool.shutdown()
    }

    /// A full queue refuses `trySubmit` (backpressure) instead of growing; `whenRoom` calls
    /// the submitter back on its loop once the queue has drained to half.
    @Test("A full queue refuses trySubmit, and whenRoom calls back on the loop once it drains")
    func fullQueueIsBackpressure() throws {
        let pool = WorkerPool(threads: 1, capacity: 4)
        let loop = try EventLoop()
        let release = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        // The worker holds the first job; the queue then takes `capacity` more.
        #expect(
            pool.trySubmit {
                started.signal()
                release.wait()
            })
        started.wait()
        let ran = Atomic<Int>(0)
        for _ in 0..<4 { #expect(pool.trySubmit { ran.add(1, ordering: .relaxed) }) }
        #expect(!pool.hasRoom)
        #expect(!pool.trySubmit {})
        var refusedCompletion = false
        #expect(!pool.trySubmit({ 1 }, completingOn: loop) { _ in refusedCompletion = true })
        var resubmitted: Int?
        pool.whenRoom(on: loop) {
            #expect(pool.hasRoom)
            #expect(pool.trySubmit({ 7 }, completingOn: loop) { resubmitted = $0 })
        }
        release.signal()
        #expect(runLoop(loop, for: .seconds(30)) { resubmitted != nil })
        #expect(resubmitted == 7)
        #expect(!refusedCompletion)
        #expect(waitUntil { ran.load(ordering: .relaxed) == 4 })
        pool.shutdown()
    }

    /// `startThread` runs its body on a thread of its own, named as asked (the kernel keeps 15
    /// bytes: what `ps` and `perf` show); `ConditionLock` hands what it found to the thread
    /// waiting for it, however the two are scheduled.
    @Test("startThread names its thread; ConditionLock hands a value over")
    func startThreadAndConditionLock() {
        final class Handoff: @unchecked Sendable {
            let lock = ConditionLock()
            var name: String?
        }
        for _ in 0..<50 {
            let handoff = Handoff()
            startThread(name: "sluice.test-thread-name") {
                let comm = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "unreadable"
                handoff.lock.withLock { handoff.name = comm }
                handoff.lock.broadcast()
            }
            handoff.lock.lock()
            while handoff.name == nil { handoff.lock.wait() }
            let name = handoff.name
            handoff.lock.unlock()
            #expect(name == "sluice.test-thr\n")
        }
    }

    /// The engine list in `SLUICE_ENGINES` may have spaces around its names.
    @Test("Spaces and tabs around a name are trimmed")
    func trimmingSpaces() {
        #expect(Substring(" zstd\t").trimmingSpaces() == "zstd")
        #expect(Substring("isal").trimmingSpaces() == "isal")
        #expect(Substring(" \t ").trimmingSpaces() == "")
        #expect(Substring("").trimmingSpaces() == "")
        #expect(Substring(" lib deflate ").trimmingSpaces() == "lib deflate")
    }
}
