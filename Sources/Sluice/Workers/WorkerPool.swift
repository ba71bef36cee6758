import FoundationEssentials

/// A fixed set of worker threads for work that must not run on an event loop's thread:
/// compression of blocks, hashing, and disk calls that can block (`fsync`, `fchmod`,
/// `futimens`, `renameat2`, `mkdirat`, reading back a resumed file's prefix).
///
/// Jobs run in the order submitted on whichever worker is free (so two jobs may run at once:
/// a caller that needs order submits the next only after the previous completed, or uses
/// ordered results). The pool bounds the threads; its callers bound the work they hand it,
/// each keeping a fixed number of jobs outstanding and pausing its own input (backpressure)
/// while they run — never waiting for them on the loop's thread.
///
/// ```swift
/// WorkerPool.shared.submit({ fsync(fd) }, completingOn: loop) { rc in
///     // back on the loop's thread
/// }
/// ```
public final class WorkerPool: @unchecked Sendable {
    /// One worker per core, started on first use and kept for the life of the process.
    public static let shared = WorkerPool(threads: ProcessInfo.processInfo.activeProcessorCount)

    /// The number of worker threads.
    public let threadCount: Int

    /// The thread counts a caller may ask for (`--threads`).
    public static let threadCounts = 1...256

    nonisolated(unsafe) private static var pools: [Int: WorkerPool] = [:]
    private static let poolsLock = ConditionLock()

    /// A pool of `threads` workers kept for the life of the process: `shared` when the count
    /// is the number of cores, otherwise one pool per count asked for. For stages that must use
    /// exactly `threads` threads (`--threads N`).
    public static func pool(threads: Int) -> WorkerPool {
        if threads == shared.threadCount { return shared }
        poolsLock.lock()
        defer { poolsLock.unlock() }
        if let pool = pools[threads] { return pool }
        let pool = WorkerPool(threads: threads)
        pools[threads] = pool
        return pool
    }

    private let condition = ConditionLock()
    /// Guarded by `condition`. A job's slot is emptied as a worker takes it, so that what a
    /// finished job captured (a session, its buffers) is not kept while the pool waits.
    private var jobs: [(@Sendable () -> Void)?] = []
    private var head = 0
    private var started = 0
    private var idle = 0
    private var running = 0
    private var shuttingDown = false

    /// A pool of `threads` workers (at least one), started as work arrives.
    public init(threads: Int) {
        threadCount = max(1, threads)
    }

    /// Jobs queued or running now.
    public var outstandingJobs: Int {
        condition.lock()
        defer { condition.unlock() }
        return jobs.count - head + running
    }

    /// Runs `job` on a worker thread.
    public func submit(_ job: @escaping @Sendable () -> Void) {
        condition.lock()
        precondition(!shuttingDown, "WorkerPool: submit after shutdown")
        jobs.append(job)
        if idle > 0 {
            condition.signal()
        } else if started < threadCount {
            started += 1
            startThread(name: "sluice.worker") { [self] in work() }
        }
        condition.unlock()
    }

    /// Runs `work` on a worker thread, then `completion` with its result on `loop`'s thread
    /// (through `execute`). Call on the loop's thread: `completion` may capture what belongs
    /// to the loop, since it runs there and nowhere else. Until then the job keeps the loop's
    /// `run()` from returning, as a scheduled stream does.
    public func submit<T: Sendable>(
        _ work: @escaping @Sendable () -> T, completingOn loop: EventLoop, _ completion: @escaping (T) -> Void
    ) {
        loop.retainSource()
        let box = UncheckedBox(completion)
        submit {
            let value = work()
            loop.execute {
                loop.releaseSource()
                box.value(value)
            }
        }
    }

    /// Lets the queued jobs finish, then stops the threads. For pools other than `shared`.
    public func shutdown() {
        condition.lock()
        shuttingDown = true
        condition.broadcast()
        while started > 0 { condition.wait() }
        condition.unlock()
    }

    private func work() {
        condition.lock()
        while true {
            if head < jobs.count {
                let job = jobs[head]
                jobs[head] = nil
                head += 1
                if head == jobs.count {
                    jobs.removeAll(keepingCapacity: true)
                    head = 0
                } else if head > 64 && head * 2 > jobs.count {
                    jobs.removeFirst(head)
                    head = 0
                }
                running += 1
                condition.unlock()
                job?()
                condition.lock()
                running -= 1
                continue
            }
            if shuttingDown { break }
            idle += 1
            condition.wait()
            idle -= 1
        }
        started -= 1
        condition.broadcast()
        condition.unlock()
    }
}
