import FoundationEssentials

/// A fixed set of worker threads for work that must not run on an event loop's thread:
/// compression of blocks, hashing, and disk calls that can block (`fsync`, `fchmod`,
/// `futimens`, `renameat2`, `mkdirat`, reading back a resumed file's prefix).
///
/// Jobs run in the order submitted on whichever worker is free (so two jobs may run at once:
/// a caller that needs order submits the next only after the previous completed, uses ordered
/// results, or a `SerialLane`). The pool bounds the threads and its queue: `trySubmit` refuses
/// a job while `capacity` jobs wait, and `whenRoom` calls the refused submitter back on its
/// loop once the queue has drained to half — backpressure, never a wait on the loop's thread
/// nor a queue that grows with the work. `submit` always queues: for a job that must run
/// (closing or removing what a session leaves) or a caller that keeps at most a fixed few
/// jobs queued (a lane, a digest worker's drain, a session's next step), each pausing its own
/// input while they run.
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
    /// Guarded by `condition`: what `whenRoom` runs on a loop once the queue has room.
    private var roomWaiters: [(EventLoop, UncheckedBox<() -> Void>)] = []

    /// The jobs the queue holds (not yet taken by a worker) before `trySubmit` refuses more.
    public let capacity: Int

    /// The default `capacity`: far more than the callers' fixed outstanding jobs add up to
    /// for a few hundred sessions, and a few hundred KiB of closures at most.
    public static let defaultCapacity = 4096

    /// A pool of `threads` workers (at least one), started as work arrives, whose queue holds
    /// `capacity` jobs (at least one) for `trySubmit`.
    public init(threads: Int, capacity: Int = WorkerPool.defaultCapacity) {
        threadCount = max(1, threads)
        self.capacity = max(1, capacity)
    }

    /// Jobs queued or running now.
    public var outstandingJobs: Int {
        condition.lock()
        defer { condition.unlock() }
        return jobs.count - head + running
    }

    /// Whether `trySubmit` would queue a job now.
    public var hasRoom: Bool {
        condition.lock()
        defer { condition.unlock() }
        return jobs.count - head < capacity
    }

    /// Runs `job` on a worker thread: queued whatever the queue holds (see the type's notes
    /// for who may).
    public func submit(_ job: @escaping @Sendable () -> Void) {
        condition.lock()
        enqueue(job)
        condition.unlock()
    }

    /// Runs `job` on a worker thread if the queue has room; false (and nothing queued) when it
    /// holds `capacity` jobs: the caller keeps its job and asks `whenRoom`.
    public func trySubmit(_ job: @escaping @Sendable () -> Void) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard jobs.count - head < capacity else { return false }
        enqueue(job)
        return true
    }

    /// Runs `action` on `loop`'s thread (through `execute`) once the queue has drained to half
    /// its capacity, or soon if it has room now. Call on the loop's thread; meanwhile the
    /// waiting keeps the loop's `run()` from returning.
    public func whenRoom(on loop: EventLoop, _ action: @escaping () -> Void) {
        loop.preconditionInLoop("WorkerPool.whenRoom")
        loop.retainSource()
        let box = UncheckedBox(action)
        condition.lock()
        let now = jobs.count - head <= capacity / 2
        if !now { roomWaiters.append((loop, box)) }
        condition.unlock()
        if now { Self.callBack(loop, box) }
    }

    private static func callBack(_ loop: EventLoop, _ box: UncheckedBox<() -> Void>) {
        loop.execute {
            loop.releaseSource()
            box.value()
        }
    }

    /// Guarded by `condition`.
    private func enqueue(_ job: @escaping @Sendable () -> Void) {
        precondition(!shuttingDown, "WorkerPool: submit after shutdown")
        jobs.append(job)
        if idle > 0 {
            condition.signal()
        } else if started < threadCount {
            started += 1
            startThread(name: "sluice.worker") { [self] in work() }
        }
    }

    /// Runs `work` on a worker thread, then `completion` with its result on `loop`'s thread
    /// (through `execute`). Call on the loop's thread: `completion` may capture what belongs
    /// to the loop, since it runs there and nowhere else. Until then the job keeps the loop's
    /// `run()` from returning, as a scheduled stream does.
    public func submit<T: Sendable>(
        _ work: @escaping @Sendable () -> T, completingOn loop: EventLoop, _ completion: @escaping (T) -> Void
    ) {
        submit(Self.job(work, completingOn: loop, completion))
    }

    /// `submit(_:completingOn:_:)` if the queue has room; false (nothing queued, `completion`
    /// never runs) when it is full: the caller keeps its work and asks `whenRoom`.
    public func trySubmit<T: Sendable>(
        _ work: @escaping @Sendable () -> T, completingOn loop: EventLoop, _ completion: @escaping (T) -> Void
    ) -> Bool {
        guard hasRoom else { return false }
        return trySubmit(Self.job(work, completingOn: loop, completion)) ? true : Self.undo(loop)
    }

    /// A refused job's hold on its loop, let go.
    private static func undo(_ loop: EventLoop) -> Bool {
        loop.releaseSource()
        return false
    }

    private static func job<T: Sendable>(
        _ work: @escaping @Sendable () -> T, completingOn loop: EventLoop, _ completion: @escaping (T) -> Void
    ) -> @Sendable () -> Void {
        loop.preconditionInLoop("WorkerPool.submit(_:completingOn:)")
        loop.retainSource()
        let box = UncheckedBox(completion)
        return {
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
                let waiters = roomWaiters.isEmpty || jobs.count - head > capacity / 2 ? [] : roomWaiters
                if !waiters.isEmpty { roomWaiters.removeAll() }
                condition.unlock()
                for (loop, action) in waiters { Self.callBack(loop, action) }
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
