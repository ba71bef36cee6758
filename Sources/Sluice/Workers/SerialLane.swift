import Synchronization

/// Jobs that run one after another on a `WorkerPool`'s threads, in the order they were
/// submitted, each completion then running on a loop in the same order: a session's disk work
/// that must stay in order (a file written before the batch that renames it), without a thread
/// of its own and without waiting for the loop between jobs; or a sender's reads of a file,
/// chunk after chunk, each into its own buffer.
///
/// A lane holds at most one job in the pool's queue (the next runs as one ends, on the same
/// worker for up to `jobsPerTurn` jobs, then through the queue again):
/// its callers bound the jobs they queue on it, and a caller that may flood the pool checks
/// `WorkerPool.hasRoom` first.
package final class SerialLane: Sendable {
    private let pool: WorkerPool
    private let state = Mutex(State())

    private struct State: ~Copyable {
        var waiting: [@Sendable () -> Void] = []
        var running = false
    }

    package init(pool: WorkerPool) {
        self.pool = pool
    }

    /// The pool the lane's jobs run on.
    package var workers: WorkerPool { pool }

    /// Jobs submitted and not yet finished (the one running included).
    var pending: Int {
        state.withLock { $0.waiting.count + ($0.running ? 1 : 0) }
    }

    /// Runs `work` on a worker once every job submitted before it has run, then `completion`
    /// with its result on `loop`'s thread. Call on the loop's thread.
    package func submit<T: Sendable>(
        _ work: @escaping @Sendable () -> T, completingOn loop: EventLoop, _ completion: @escaping (T) -> Void
    ) {
        loop.preconditionInLoop("SerialLane.submit")
        loop.retainSource()
        let box = UncheckedBox(completion)
        let job: @Sendable () -> Void = {
            let value = work()
            loop.execute {
                loop.releaseSource()
                box.value(value)
            }
        }
        let start = state.withLock { state -> Bool in
            guard !state.running else {
                state.waiting.append(job)
                return false
            }
            state.running = true
            return true
        }
        if start { run(job) }
    }

    /// Jobs a worker runs back to back for one lane before it hands the lane's next job to
    /// the pool's queue (behind other lanes' work). Running the waiting jobs of a busy lane on
    /// the thread already running them, without a trip through the queue (its lock, and often a
    /// wake-up of another worker) for each, is most of the saving for a stream of small files.
    static let jobsPerTurn = 32

    private func run(_ job: @escaping @Sendable () -> Void) {
        pool.submit { [self] in
            var current = job
            for turn in 1...Self.jobsPerTurn {
                current()
                let next = state.withLock { state -> (@Sendable () -> Void)? in
                    guard !state.waiting.isEmpty else {
                        state.running = false
                        return nil
                    }
                    return state.waiting.removeFirst()
                }
                guard let next else { return }
                if turn == Self.jobsPerTurn {
                    run(next)
                    return
                }
                current = next
            }
        }
    }
}
