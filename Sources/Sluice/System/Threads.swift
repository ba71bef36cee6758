import CSluiceLinux

#if canImport(Glibc)
    import Glibc
#endif

/// A mutex and its condition variable (POSIX threads'), for the few places where threads wait
/// for each other: the worker pool's queue, a bound pair's blocking face, a custom stream's
/// polling mode. It does what Foundation's `NSCondition` does; the library keeps to
/// FoundationEssentials so that a program using it does not load full Foundation (and ICU),
/// which cost each `sluice` process 2–8 ms of CPU at start (Benchmarks/RESULTS.md).
///
/// The pthread calls fail only on misuse (an unlocked mutex unlocked, a mutex destroyed while
/// held): the preconditions guard that internal invariant, nothing a peer or a file controls.
final class ConditionLock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        let madeMutex = pthread_mutex_init(mutex, nil)
        let madeCondition = pthread_cond_init(condition, nil)
        precondition(madeMutex == 0 && madeCondition == 0, "pthread_mutex_init/pthread_cond_init failed")
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func lock() {
        let rc = pthread_mutex_lock(mutex)
        precondition(rc == 0, "pthread_mutex_lock failed (\(rc)): a lock used after its end")
    }

    func unlock() {
        let rc = pthread_mutex_unlock(mutex)
        precondition(rc == 0, "pthread_mutex_unlock failed (\(rc)): unlocked by a thread not holding it")
    }

    /// Holding the lock: releases it, sleeps until `signal()` or `broadcast()` (or a spurious
    /// wake-up: callers wait in a loop on their condition), and takes it again.
    func wait() {
        let rc = pthread_cond_wait(condition, mutex)
        precondition(rc == 0, "pthread_cond_wait failed (\(rc)): waited without holding the lock")
    }

    /// Wakes one waiter.
    func signal() { pthread_cond_signal(condition) }

    /// Wakes every waiter.
    func broadcast() { pthread_cond_broadcast(condition) }

    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }
}

/// Starts a detached thread named `name` (at most 15 bytes reach the kernel: `ps`, `top` and
/// `perf` show it) that runs `body` and ends. Foundation's `Thread` did this before (see
/// `ConditionLock` for why the library no longer uses it). A failure to create the thread
/// (the process's thread limit) stops the process: the pool and the shared loop cannot go on
/// without it, and nothing from outside decides how many are made.
func startThread(name: String, _ body: @escaping @Sendable () -> Void) {
    final class Start {
        let name: String
        let body: @Sendable () -> Void
        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }
    let start = Unmanaged.passRetained(Start(name: name, body: body)).toOpaque()
    var thread = pthread_t()
    let rc = pthread_create(
        &thread, nil,
        { argument in
            guard let argument else { return nil }
            let start = Unmanaged<Start>.fromOpaque(argument).takeRetainedValue()
            start.name.withCString { sluice_set_thread_name($0) }  // the kernel keeps 15 bytes
            start.body()
            return nil
        }, start)
    guard rc == 0 else {
        Unmanaged<Start>.fromOpaque(start).release()
        fatalError("pthread_create failed (\(rc)): no thread for \(name)")
    }
    pthread_detach(thread)
}
