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
}
