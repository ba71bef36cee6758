import Foundation
import Synchronization
import Testing

/// Runs a test body on threads of the test run's own, not on Swift concurrency's cooperative
/// pool. Give it to every suite (or free test) whose tests block their thread: run a loop,
/// wait for a child process, a semaphore or a blocking read.
///
/// Why: Swift Testing starts every test at once as a task on the cooperative pool, which has
/// one thread per core (two here). A synchronous test holds its pool thread until it returns,
/// so with blocking tests queued, an async test's every resumption (a continuation resumed by
/// the event loop, a `Task.sleep` ending) waits behind all of them: on a loaded 2-core machine
/// tens of seconds, and its `eventually { … }` deadline expired while the awaited task sat
/// runnable in the queue, the library long done. With the blocking bodies here, the pool is
/// left to tasks that suspend instead of blocking, and the blocking tests still run as many at
/// a time as there are cores, as they did on the pool.
public struct OwnThreads: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        testCase == nil ? nil : self
    }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        try await withTaskExecutorPreference(BlockingTestExecutor.shared) { try await function() }
    }
}

extension Trait where Self == OwnThreads {
    /// The test's body runs on the test run's own threads, off the cooperative pool (see
    /// `OwnThreads`): for tests that block their thread.
    public static var ownThreads: OwnThreads { OwnThreads() }
}

/// A task executor with a fixed set of threads (one per core, at least two), serving jobs in
/// the order they come.
public final class BlockingTestExecutor: TaskExecutor, @unchecked Sendable {
    public static let shared = BlockingTestExecutor(threads: max(2, ProcessInfo.processInfo.activeProcessorCount))

    /// The threads' ids, to tell whether code runs on one of them.
    private let threadIDs = Mutex<[pthread_t]>([])
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var head = 0

    init(threads: Int) {
        for _ in 0..<threads {
            Thread { [self] in serve() }.start()
        }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// True on one of this executor's threads.
    public var isCurrentThreadOwn: Bool {
        let me = pthread_self()
        return threadIDs.withLock { $0.contains(me) }
    }

    private func serve() {
        threadIDs.withLock { $0.append(pthread_self()) }
        while true {
            condition.lock()
            while head == jobs.count { condition.wait() }
            let job = jobs[head]
            head += 1
            if head == jobs.count {
                jobs.removeAll(keepingCapacity: true)
                head = 0
            }
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}
