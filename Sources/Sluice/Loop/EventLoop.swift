import CSluiceLinux
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Something watched by the selector: told which readiness the kernel reported.
protocol FDHandler: AnyObject {
    func fdReady(_ readiness: Readiness)
}

/// An `FDHandler` that calls a closure: what `EventLoop.watch(fd:interest:ready:)` registers.
private final class ClosureFDHandler: FDHandler {
    private let ready: (Readiness) -> Void
    init(_ ready: @escaping (Readiness) -> Void) { self.ready = ready }
    func fdReady(_ readiness: Readiness) { ready(readiness) }
}

/// Something served from the loop's ready queue: streams that epoll cannot watch (regular
/// files, memory, bound pairs) and anything with events to deliver.
protocol ReadyClient: AnyObject {
    /// Set by the loop while the client sits in the ready queue, so it is queued once.
    var isQueued: Bool { get set }
    func serviceReady()
}

/// A handle on a timer scheduled with `EventLoop.schedule(after:repeating:_:)`.
public final class LoopTimer {
    fileprivate var deadline: UInt64
    fileprivate let interval: UInt64?
    /// Dropped once the timer is cancelled or has fired for good: what it captured (a
    /// connection, say) is not held while the timer waits in the heap.
    fileprivate var body: (() -> Void)?
    fileprivate var cancelled = false
    fileprivate weak var loop: EventLoop?
    /// When it is due (the loop's monotonic clock, in nanoseconds): for tests of the order.
    var dueAt: UInt64 { deadline }

    fileprivate init(deadline: UInt64, interval: UInt64?, body: @escaping () -> Void) {
        self.deadline = deadline
        self.interval = interval
        self.body = body
    }

    /// Stops the timer; it will not fire again. Safe to call more than once.
    public func cancel() {
        guard !cancelled else { return }
        cancelled = true
        body = nil
        loop?.timerCancelled()
    }

    public var isCancelled: Bool { cancelled }
}

/// The run loop: delivers stream events, fires timers, and runs work handed over from other
/// threads. One thread runs it (the one that calls `run`); everything scheduled on it is used
/// on that thread. `execute(_:)` and `stop()` may be called from any thread.
///
/// Descriptors epoll can watch (pipes, ttys, sockets, eventfds) are watched level-triggered
/// with interest only while a stream wants an event; descriptors it cannot (regular files) and
/// in-process streams are served from a ready queue, one event per stream per turn of the loop.
public final class EventLoop: @unchecked Sendable {
    private let selector: any Selector
    private var handlers: [FDHandler?] = []
    private var interests: [Interest] = []
    /// Per descriptor number, the generation of its latest registration (0: none yet).
    private var generations: [UInt32] = []
    private var watchedCount = 0

    /// The ready queue and the batch being served, at a stable address (no dynamic
    /// exclusivity checks on the hot path).
    private struct Queues {
        var ready: [any ReadyClient] = []
        var serving: [any ReadyClient] = []
    }
    private let queues: UnsafeMutablePointer<Queues> = {
        let pointer = UnsafeMutablePointer<Queues>.allocate(capacity: 1)
        pointer.initialize(to: Queues())
        return pointer
    }()

    private var timers: [LoopTimer] = []  // binary min-heap on deadline
    private var liveTimers = 0

    private let wakeFD: Int32
    private let tasks = Mutex<[@Sendable () -> Void]>([])
    private let hasTasks = Atomic<Bool>(false)
    private let stopRequested = Atomic<Bool>(false)
    private let sleeping = Atomic<Bool>(false)

    /// Streams and other sources that keep `run()` running while scheduled.
    private var activeSources = 0
    private var turns: UInt64 = 0
    /// Turns of `run`'s loop, all told: a waiting loop takes one per wake-up, a spinning one
    /// thousands (for tests; read on the loop's thread).
    private(set) var iterations: UInt64 = 0
    /// The thread running `run` now (its `pthread_self`), 0 when none: what
    /// `preconditionInLoop` compares with.
    private let runner = Atomic<UInt>(0)

    /// Creates a loop with the platform's selector (epoll on Linux).
    public init() throws {
        ProcessSetup.ensure()
        selector = try EpollSelector()
        wakeFD = try syscallValue("eventfd") { eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) }
        try selector.register(fd: wakeFD, interest: .read, token: Self.token(fd: wakeFD, generation: 0))
    }

    /// What the selector reports back for a registration: its descriptor and generation.
    private static func token(fd: Int32, generation: UInt32) -> UInt64 {
        UInt64(generation) << 32 | UInt64(UInt32(bitPattern: fd))
    }

    deinit {
        closeDescriptor(wakeFD)
        selector.close()
        queues.deinitialize(count: 1)
        queues.deallocate()
    }

    // MARK: Running

    /// Runs until `stop()` is called or nothing is left to serve: no scheduled open stream,
    /// watched descriptor, pending timer or queued task.
    public func run() {
        runLoop(deadline: nil)
    }

    /// Runs until `deadline`, `stop()`, or nothing is left to serve.
    /// Returns true if it returned because the deadline passed.
    @discardableResult
    public func run(until deadline: ContinuousClock.Instant) -> Bool {
        // The loop keeps time on CLOCK_MONOTONIC: carry the deadline over as time remaining.
        runLoop(deadline: monotonicNanoseconds() + ContinuousClock.now.duration(to: deadline).nanoseconds)
    }

    /// Runs for at most `duration`. Returns true if the time ran out.
    @discardableResult
    public func run(for duration: Duration) -> Bool {
        run(until: ContinuousClock.now.advanced(by: duration))
    }

    /// Traps, in a debug build, when called on a thread other than the one running the loop
    /// (while one runs): for what is bound to the loop — its timers and descriptors, and the
    /// streams scheduled on it — which another thread reaches only through `execute`. A release
    /// build checks nothing.
    public func preconditionInLoop(
        _ what: @autoclosure () -> String = "this", file: StaticString = #fileID, line: UInt = #line
    ) {
        #if DEBUG
            let thread = runner.load(ordering: .relaxed)
            precondition(
                thread == 0 || thread == UInt(pthread_self()),
                "\(what()) used off the thread running its event loop (hand it over with execute)", file: file,
                line: line)
        #endif
    }

    /// Asks `run` to return after the current turn. Any thread.
    ///
    /// Each call ends exactly one `run`: the one in progress, or, when none is running, the
    /// next one, which then returns at once. The request is spent when that `run` returns,
    /// whatever made it return, so a later `run` is not affected.
    public func stop() {
        stopRequested.store(true, ordering: .sequentiallyConsistent)
        wake()
    }

    /// Runs `body` on the loop's thread at its next turn. Any thread.
    public func execute(_ body: @escaping @Sendable () -> Void) {
        tasks.withLock { $0.append(body) }
        // The loop publishes `sleeping` and then reads `hasTasks`; this publishes `hasTasks` and
        // then reads `sleeping`. Only sequentially consistent ordering on both sides keeps the
        // two loads from both seeing the old values (a store-load reordering), which would
        // leave the loop in `epoll_wait` with this task queued and nobody waking it.
        hasTasks.store(true, ordering: .sequentiallyConsistent)
        if sleeping.load(ordering: .sequentiallyConsistent) { wake() }
    }

    private func wake() {
        var one: UInt64 = 1
        _ = Glibc.write(wakeFD, &one, 8)
    }

    @discardableResult
    private func runLoop(deadline: UInt64?) -> Bool {
        let outer = runner.exchange(UInt(pthread_self()), ordering: .sequentiallyConsistent)
        defer { runner.store(outer, ordering: .sequentiallyConsistent) }
        // A `stop()` made before this `run` is honoured (not cleared here); the one that ends a
        // run is spent as it returns.
        defer { stopRequested.store(false, ordering: .sequentiallyConsistent) }
        while !stopRequested.load(ordering: .sequentiallyConsistent) {
            iterations &+= 1
            if hasTasks.load(ordering: .acquiring) { runTasks() }
            // The clock is read only when something depends on it.
            var now: UInt64 = 0
            if liveTimers > 0 || deadline != nil {
                now = monotonicNanoseconds()
                if liveTimers > 0 { fireTimers(now: now) }
                if let deadline, now >= deadline { return true }
            }

            if !queues.pointee.ready.isEmpty {
                turns &+= 1
                // Descriptors still get a look between ready-queue turns.
                if watchedCount > 0 && turns & 15 == 0 { poll(timeout: 0) }
                serveReadyQueue()
                continue
            }
            if activeSources == 0 && liveTimers == 0 && !hasTasks.load(ordering: .acquiring) {
                return false
            }
            var timeout: UInt64? = nil
            if let next = nextTimerDeadline() {
                now = monotonicNanoseconds()
                timeout = next > now ? next - now : 0
            }
            if let deadline {
                now = monotonicNanoseconds()
                let left = deadline > now ? deadline - now : 0
                timeout = min(timeout ?? left, left)
            }
            // The other half of `execute`'s handshake: publish `sleeping`, then look for tasks.
            sleeping.store(true, ordering: .sequentiallyConsistent)
            if hasTasks.load(ordering: .sequentiallyConsistent)
                || stopRequested.load(ordering: .sequentiallyConsistent)
            {
                timeout = 0
            }
            poll(timeout: timeout)
            sleeping.store(false, ordering: .sequentiallyConsistent)
        }
        return false
    }

    private func poll(timeout: UInt64?) {
        do {
            try selector.wait(timeoutNanoseconds: timeout) { token, readiness in
                let fd = Int32(bitPattern: UInt32(truncatingIfNeeded: token))
                if fd == wakeFD {
                    var value: UInt64 = 0
                    _ = Glibc.read(wakeFD, &value, 8)
                    return
                }
                // A handler earlier in this batch may have ended the registration this report
                // belongs to and registered the same number again: the generation tells.
                let index = Int(fd)
                if index < handlers.count, generations[index] == UInt32(truncatingIfNeeded: token >> 32),
                    let handler = handlers[index]
                {
                    handler.fdReady(readiness)
                }
            }
        } catch {
            preconditionFailure("epoll_wait failed: \(error)")
        }
    }

    private func serveReadyQueue() {
        swap(&queues.pointee.ready, &queues.pointee.serving)
        for client in queues.pointee.serving {
            client.isQueued = false
            client.serviceReady()
        }
        queues.pointee.serving.removeAll(keepingCapacity: true)
    }

    private func runTasks() {
        // Cleared before the queue is taken: a task queued after the take sets it again.
        hasTasks.store(false, ordering: .sequentiallyConsistent)
        let batch = tasks.withLock { pending -> [@Sendable () -> Void] in
            let taken = pending
            pending.removeAll()
            return taken
        }
        for task in batch { task() }
    }

    // MARK: Ready queue

    /// Queues `client` to be served at the next turn (once, however often it is asked).
    func enqueue(_ client: any ReadyClient) {
        guard !client.isQueued else { return }
        client.isQueued = true
        queues.pointee.ready.append(client)
    }

    /// Counts a source that keeps `run()` alive (a scheduled open stream, a listener).
    package func retainSource() { activeSources += 1 }
    package func releaseSource() {
        precondition(activeSources > 0, "EventLoop source count underflow")
        activeSources -= 1
    }

    // MARK: Descriptors

    /// Starts watching `fd` with `interest`; throws EPERM for descriptors epoll cannot watch.
    func watch(fd: Int32, interest: Interest, handler: FDHandler) throws(SluiceError) {
        preconditionInLoop("EventLoop.\(#function)")
        let index = Int(fd)
        if index >= handlers.count {
            let n = max(index + 1, handlers.count * 2, 64)
            handlers.append(contentsOf: repeatElement(nil, count: n - handlers.count))
            interests.append(contentsOf: repeatElement([], count: n - interests.count))
            generations.append(contentsOf: repeatElement(0, count: n - generations.count))
        }
        precondition(handlers[index] == nil, "fd \(fd) is already watched (internal invariant: one owner per fd)")
        // Generation 0 is never used, so a fresh slot cannot match a report.
        let generation = generations[index] == UInt32.max ? 1 : generations[index] + 1
        try selector.register(fd: fd, interest: interest, token: Self.token(fd: fd, generation: generation))
        generations[index] = generation
        handlers[index] = handler
        interests[index] = interest
        watchedCount += 1
    }

    /// Starts watching `fd` with `interest` for a layer above the core (the relay, which moves
    /// raw descriptors): `ready` is called on the loop with each readiness the selector reports,
    /// until `unwatch(fd:)`. Throws EPERM for descriptors epoll cannot watch.
    package func watch(fd: Int32, interest: Interest, ready: @escaping (Readiness) -> Void) throws(SluiceError) {
        try watch(fd: fd, interest: interest, handler: ClosureFDHandler(ready))
    }

    /// Changes what `fd` is watched for; a no-op when unchanged.
    package func setInterest(fd: Int32, _ interest: Interest) {
        let index = Int(fd)
        guard index < handlers.count, handlers[index] != nil, interests[index] != interest else { return }
        do {
            try selector.reregister(
                fd: fd, interest: interest, token: Self.token(fd: fd, generation: generations[index]))
            interests[index] = interest
        } catch {
            preconditionFailure("epoll_ctl MOD fd \(fd): \(error)")
        }
    }

    func interest(fd: Int32) -> Interest {
        let index = Int(fd)
        return index < interests.count ? interests[index] : []
    }

    /// Stops watching `fd`. Call before closing it.
    package func unwatch(fd: Int32) {
        preconditionInLoop("EventLoop.\(#function)")
        let index = Int(fd)
        guard index < handlers.count, handlers[index] != nil else { return }
        selector.deregister(fd: fd)
        handlers[index] = nil
        interests[index] = []
        watchedCount -= 1
    }

    // MARK: Timers

    /// Calls `body` on the loop after `delay`, and then every `repeating` if given.
    /// Times are on the monotonic clock. Call on the loop's thread.
    @discardableResult
    public func schedule(after delay: Duration, repeating: Duration? = nil, _ body: @escaping () -> Void) -> LoopTimer {
        preconditionInLoop("EventLoop.\(#function)")
        let timer = LoopTimer(
            deadline: monotonicNanoseconds() + delay.nanoseconds,
            interval: repeating.map { max(1, $0.nanoseconds) },
            body: body
        )
        timer.loop = self
        liveTimers += 1
        pushTimer(timer)
        return timer
    }

    fileprivate func timerCancelled() {
        liveTimers -= 1
        // A cancelled timer waits in the heap until it reaches the top, holding its closure and
        // what that captures. Connections that end long before their timeouts (a port scan, a
        // failed handshake: idle, handshake and admission timers of seconds or minutes) would
        // pile them up for that long; once most of the heap is cancelled, it is swept.
        if timers.count >= 64 && timers.count > 2 * liveTimers { sweepCancelledTimers() }
    }

    /// Drops the cancelled timers from the heap and restores its order (in linear time: the
    /// sweep runs once the heap has doubled past the live timers, so each cancel costs O(1)
    /// amortised).
    private func sweepCancelledTimers() {
        timers.removeAll { $0.cancelled }
        for i in stride(from: timers.count / 2 - 1, through: 0, by: -1) { siftDown(i) }
    }

    /// Timers in the heap, cancelled ones included (for tests).
    var timersHeld: Int { timers.count }

    private func nextTimerDeadline() -> UInt64? {
        while let first = timers.first, first.cancelled { _ = popTimer() }
        return timers.first?.deadline
    }

    private func fireTimers(now: UInt64) {
        while let first = timers.first, first.cancelled || first.deadline <= now {
            let timer = popTimer()
            if timer.cancelled { continue }
            let body = timer.body
            if let interval = timer.interval {
                timer.deadline = max(timer.deadline + interval, now)
                pushTimer(timer)
            } else {
                timer.cancelled = true
                timer.body = nil
                liveTimers -= 1
            }
            body?()
        }
    }

    private func pushTimer(_ timer: LoopTimer) {
        timers.append(timer)
        var i = timers.count - 1
        while i > 0 {
            let parent = (i - 1) / 2
            if timers[parent].deadline <= timers[i].deadline { break }
            timers.swapAt(parent, i)
            i = parent
        }
    }

    private func popTimer() -> LoopTimer {
        let top = timers[0]
        let last = timers.removeLast()
        if !timers.isEmpty {
            timers[0] = last
            siftDown(0)
        }
        return top
    }

    private func siftDown(_ start: Int) {
        var i = start
        while true {
            let l = 2 * i + 1
            let r = l + 1
            var smallest = i
            if l < timers.count && timers[l].deadline < timers[smallest].deadline { smallest = l }
            if r < timers.count && timers[r].deadline < timers[smallest].deadline { smallest = r }
            if smallest == i { break }
            timers.swapAt(i, smallest)
            i = smallest
        }
    }
}

extension Duration {
    /// The duration in whole nanoseconds, clamped at zero (and at `UInt64.max`).
    ///
    /// A negative duration under a second has seconds 0 and negative attoseconds (the two
    /// components share the sign): `run(until:)` with a deadline that passed less than a
    /// second ago gets one, and converting its attoseconds trapped.
    package var nanoseconds: UInt64 {
        let (s, atto) = components
        if s < 0 || atto < 0 { return 0 }
        let (whole, overflow) = UInt64(s).multipliedReportingOverflow(by: 1_000_000_000)
        let (total, carry) = whole.addingReportingOverflow(UInt64(atto / 1_000_000_000))
        return overflow || carry ? .max : total
    }
}
