import Synchronization

/// Runs a synchronous `Stage` (inflate, zstd) on worker threads, so the loop's thread only
/// copies bytes in and out while the stage works: reading, decoding, checking and writing
/// overlap on different cores, as `pigz -d` overlaps its reading, inflating, checking and
/// writing.
///
/// Between the loop and the stage sit two rings of bytes. The loop copies input into the input
/// ring and output out of the output ring; a chain of calls on the `WorkerPool` runs the stage
/// from one ring to the other for as long as there is input and room, without going back to the
/// loop between calls (one chain at a time, so the stage's calls stay in order). The loop is
/// called back (`wake`) when there is news for it: output, room for input, the end, an error.
///
/// A stage that can leave the CRC-32 checks of its output to its runner
/// (`OutputCheckDeferring`: gzip members) can have them computed by a second chain on another
/// worker, over the output ring, while the stage goes on (`checksOnWorkers`). Output is handed
/// on before it is checked (as `gzip -d` writes a member before its trailer is read), but the
/// stage reports `finished` only once every check has passed, and a mismatch fails the stage:
/// a destination that is committed on success (a file renamed into place) never holds
/// unverified output. That pays only where the check has a core of its own: on two cores, the
/// loop's thread and the inflating worker already use both, and a third busy thread slows the
/// inflating one more than the check it takes off it (measured in Benchmarks/RESULTS.md), so
/// by default the checks leave the stage only when the pool has three threads or more.
///
/// Memory: the two rings (`heldLimit`), whatever the input's size. Without a loop, the stage
/// runs inline on the caller's thread and checks its own output.
public final class OffloadedStage: AsynchronousStage {
    /// The stage run on the workers.
    public let inner: any Stage
    public var name: String { inner.name }

    private let pool: WorkerPool
    private let core: OffloadCore
    private var loop: EventLoop?
    private var wake: (() -> Void)?
    private var finishing = false
    private var cancelled = false

    /// Whether output checks leave the stage for a worker of their own: nil decides by the
    /// pool (three threads or more).
    private let checksOnWorkers: Bool?

    /// Runs `inner` on `pool` with an input ring of `2 × inputBytes` and an output ring of
    /// `2 × outputBytes`. `checksOnWorkers`: whether a stage that can defer its CRC-32 checks
    /// (`OutputCheckDeferring`) leaves them to a worker of their own (when the pool has a second
    /// thread); nil (the default) does so when the pool has three threads or more.
    public init(
        _ inner: any Stage, pool: WorkerPool = .shared, inputBytes: Int = 512 * 1024, outputBytes: Int = 2048 * 1024,
        checksOnWorkers: Bool? = nil
    ) {
        precondition(inputBytes > 0 && outputBytes > 0, "OffloadedStage buffer sizes must be positive")
        self.inner = inner
        self.pool = pool
        self.checksOnWorkers = checksOnWorkers
        core = OffloadCore(inner, inputBytes: 2 * inputBytes, outputBytes: 2 * outputBytes)
    }

    /// Whether the CRC-32 checks of the output run on a worker of their own (decided when the
    /// stage is attached to a loop).
    public var checksOutputOnWorkers: Bool { core.verifying }

    public func attach(to loop: EventLoop, wake: @escaping () -> Void) {
        self.loop = loop
        self.wake = wake
        let weak = UncheckedBox(WeakOffloadedStage(self))
        core.notify = { loop.execute { weak.value.stage?.news() } }
        if pool.threadCount > 1 && checksOnWorkers ?? (pool.threadCount >= 3),
            let deferring = inner as? any OutputCheckDeferring
        {
            deferring.deferOutputChecks()
            core.verifying = true
        }
    }

    public var heldBytes: Int { core.heldBytes }

    public var heldLimit: Int { core.input.count + core.output.count }

    public func cancel() {
        cancelled = true
        core.shared.withLock { $0.cancelled = true }
    }

    public func process(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws(SluiceError)
        -> StageProgress
    {
        var consumed = 0
        var produced = 0
        while true {
            produced += try drain(into: UnsafeMutableRawBufferPointer(rebasing: output[produced...]))
            consumed += fill(from: UnsafeRawBufferPointer(rebasing: input[consumed...]))
            startWork()
            guard core.somethingNew(wantsOutput: produced < output.count, wantsRoom: consumed < input.count) else {
                break
            }
        }
        return StageProgress(consumed: consumed, produced: produced)
    }

    public func finish(into output: UnsafeMutableRawBufferPointer) throws(SluiceError) -> StageProgress {
        if !finishing {
            finishing = true
            core.shared.withLock { $0.ended = true }
        }
        var produced = 0
        while true {
            produced += try drain(into: UnsafeMutableRawBufferPointer(rebasing: output[produced...]))
            startWork()
            if core.isDone { return StageProgress(consumed: 0, produced: produced, finished: true) }
            if let failure = core.failure { throw failure }
            guard core.somethingNew(wantsOutput: produced < output.count, wantsRoom: false) else { break }
        }
        return StageProgress(consumed: 0, produced: produced)
    }

    // MARK: The loop's side

    /// Copies output from the ring into `output`.
    private func drain(into output: UnsafeMutableRawBufferPointer) throws(SluiceError) -> Int {
        let (from, available, failure) = core.shared.withLock { s in
            (s.outDrained, s.outWritten - s.outDrained, s.failure)
        }
        if let failure { throw failure }
        let n = min(available, output.count)
        guard n > 0 else { return 0 }
        OffloadCore.copy(out: core.output, from: from, count: n, into: output)
        core.shared.withLock { $0.outDrained += n }
        return n
    }

    /// Copies as much of `input` as the ring has room for.
    private func fill(from input: UnsafeRawBufferPointer) -> Int {
        guard !input.isEmpty else { return 0 }
        let (at, free) = core.shared.withLock { s in (s.inWritten, core.input.count - (s.inWritten - s.inRead)) }
        let n = min(free, input.count)
        guard n > 0 else { return 0 }
        OffloadCore.copy(in: UnsafeRawBufferPointer(rebasing: input[..<n]), into: core.input, at: at)
        core.shared.withLock { $0.inWritten += n }
        return n
    }

    /// Starts the stage's chain and the check chain where they have work and are not running.
    private func startWork() {
        guard !cancelled else { return }
        guard loop != nil else {
            // Inline: one chain on this thread, its output checked by the stage itself.
            if core.claimStage() { _ = core.runStage(until: nil) }
            return
        }
        let core = core
        if core.claimStage() { run { core.runStage(until: $0) } }
        if core.claimChecks() { run { core.runChecks(until: $0) } }
    }

    /// Runs a chain on the pool in slices of `OffloadCore.slice`: a chain that has more to do
    /// when its slice is over goes to the back of the pool's queue, so that other work there
    /// (disk calls, hashing, other stages) never waits long behind a stream that keeps coming.
    /// The loop hears when the chain has stopped; until then it keeps the loop's `run()` going.
    private func run(_ chain: @escaping @Sendable (UInt64) -> Bool) {
        guard let loop else { return }
        loop.retainSource()
        let weak = UncheckedBox(WeakOffloadedStage(self))
        Self.slice(pool, chain) {
            loop.execute {
                loop.releaseSource()
                weak.value.stage?.news()
            }
        }
    }

    private static func slice(
        _ pool: WorkerPool, _ chain: @escaping @Sendable (UInt64) -> Bool, then done: @escaping @Sendable () -> Void
    ) {
        pool.submit {
            if chain(monotonicNanoseconds() + OffloadCore.slice) {
                slice(pool, chain, then: done)
            } else {
                done()
            }
        }
    }

    /// On the loop: a chain has news (or ended): step again.
    fileprivate func news() {
        guard !cancelled else { return }
        wake?()
    }
}

private final class WeakOffloadedStage {
    weak var stage: OffloadedStage?
    init(_ stage: OffloadedStage) { self.stage = stage }
}

/// What an `OffloadedStage` shares with its chains: the stage, the two rings and their
/// cursors. The cursors count bytes since the start (a ring position is a cursor modulo the
/// ring's size) and are read and moved under `shared`; the bytes between them are touched by
/// one side at a time — the loop writes input at `inWritten` and reads output from
/// `outDrained`, the stage's chain reads input from `inRead` and writes output at
/// `outWritten`, the check chain reads output from `outChecked` — so they are copied without
/// the lock.
final class OffloadCore: @unchecked Sendable {
    let inner: any Stage
    private let deferring: (any OutputCheckDeferring)?
    let input: UnsafeMutableRawBufferPointer
    let output: UnsafeMutableRawBufferPointer
    /// CRC-32 checks are the check chain's (set before the first chain starts).
    var verifying = false
    /// Posts news to the loop (set before the first chain starts).
    var notify: (@Sendable () -> Void)?
    /// The check chain's running CRC-32 of the current member (only that chain touches it).
    private var crc: UInt32 = 0

    struct Shared {
        var inWritten = 0
        var inRead = 0
        var outWritten = 0
        var outDrained = 0
        var outChecked = 0
        /// Checks reported by the stage and not yet made, in output order.
        var checks: [OutputCheck] = []
        /// A chain runs the stage / the checks.
        var running = false
        var checking = false
        /// The loop has written all the input.
        var ended = false
        var innerFinished = false
        var failure: SluiceError?
        var cancelled = false
        /// The loop has looked and found nothing new: tell it of the next news.
        var wantsNews = false
    }
    let shared = Mutex(Shared())

    /// How long a chain runs before it lets the pool's other work go first: 4 ms.
    static let slice: UInt64 = 4_000_000
    /// The most output one call makes (2 MiB: a few milliseconds of inflate), so that a slice
    /// ends near its time.
    static let callOutput = 2 << 20

    init(_ inner: any Stage, inputBytes: Int, outputBytes: Int) {
        self.inner = inner
        deferring = inner as? any OutputCheckDeferring
        input = .allocate(byteCount: inputBytes, alignment: 64)
        output = .allocate(byteCount: outputBytes, alignment: 64)
    }

    deinit {
        input.deallocate()
        output.deallocate()
    }

    /// Input and output in the rings: the loop's bytes not yet decoded, and output not yet
    /// taken (or, when checking, not yet checked).
    var heldBytes: Int {
        shared.withLock { s in (s.inWritten - s.inRead) + (s.outWritten - released(s)) }
    }

    /// Output before this cursor may be overwritten.
    private func released(_ s: Shared) -> Int { verifying ? min(s.outDrained, s.outChecked) : s.outDrained }

    /// The stage has finished, its output is all taken and (when checking) checked, with no
    /// failure.
    var isDone: Bool {
        shared.withLock { s in
            s.failure == nil && s.innerFinished && !s.running && s.outDrained == s.outWritten
                && (!verifying || (s.outChecked == s.outWritten && s.checks.isEmpty && !s.checking))
        }
    }

    /// The stage's error, or a check's.
    var failure: SluiceError? { shared.withLock { $0.failure } }

    /// True when the loop should look again now (there is output for it, room for input, or an
    /// error); otherwise records that it wants the next news and returns false. Under one lock,
    /// so no news is missed between the look and the wish.
    func somethingNew(wantsOutput: Bool, wantsRoom: Bool) -> Bool {
        shared.withLock { s in
            if s.failure != nil && wantsOutput { return true }
            if wantsOutput && s.outWritten > s.outDrained { return true }
            if wantsRoom && s.inWritten - s.inRead < input.count { return true }
            s.wantsNews = true
            return false
        }
    }

    /// Marks the stage's chain running when it has work and is not: the caller then runs it.
    func claimStage() -> Bool {
        shared.withLock { s in
            guard !s.running, !s.innerFinished, s.failure == nil, !s.cancelled else { return false }
            guard s.inWritten > s.inRead || s.ended, s.outWritten - released(s) < output.count else { return false }
            s.running = true
            return true
        }
    }

    /// Marks the check chain running when it has work and is not: the caller then runs it.
    func claimChecks() -> Bool {
        guard verifying else { return false }
        return shared.withLock { s in
            guard !s.checking, s.failure == nil, !s.cancelled else { return false }
            guard s.outChecked < s.outWritten || !s.checks.isEmpty else { return false }
            s.checking = true
            return true
        }
    }

    /// Takes the news wish: true when the loop wants to hear of this.
    private func takeWish(_ s: inout Shared) -> Bool {
        defer { s.wantsNews = false }
        return s.wantsNews
    }

    // MARK: The stage's chain

    private struct Call {
        var input: UnsafeRawBufferPointer?
        var output: UnsafeMutableRawBufferPointer
    }

    /// Runs the stage from the input ring into the output ring, call after call, until there
    /// is no input (and the input has not ended), no room, an error, or the stage finished.
    /// Returns true when it stopped at `deadline` with work left (still `running`: the caller
    /// runs it again), false when it stopped (no longer `running`).
    func runStage(until deadline: UInt64?) -> Bool {
        while let call = nextCall() {
            var progress = StageProgress(consumed: 0, produced: 0)
            var failure: SluiceError?
            do {
                if let input = call.input {
                    progress = try inner.process(input, into: call.output)
                } else {
                    progress = try inner.finish(into: call.output)
                }
            } catch {
                failure = error
            }
            let checks = verifying ? deferring?.takeOutputChecks() ?? [] : []
            let needsChecks = verifying && deferring?.outputNeedsChecks == true
            let finishing = call.input == nil
            let (tell, stop) = shared.withLock { s -> (Bool, Bool) in
                s.inRead += progress.consumed
                s.outWritten += progress.produced
                s.checks += checks
                // Output no check covers (zlib, zstd) needs no CRC-32: it counts as checked.
                if !needsChecks && s.checks.isEmpty && s.outChecked == s.outWritten - progress.produced {
                    s.outChecked = s.outWritten
                }
                if failure == nil && progress.consumed == 0 && progress.produced == 0
                    && !(finishing && progress.finished)
                {
                    failure = SluiceError(.invalidArgument, operation: inner.name, detail: "stage made no progress")
                }
                if let failure {
                    s.failure = failure
                    s.running = false
                    return (takeWish(&s), true)
                }
                if finishing && progress.finished {
                    s.innerFinished = true
                    s.running = false
                    return (takeWish(&s), true)
                }
                return (takeWish(&s), false)
            }
            if tell { notify?() }
            if stop { return false }
            if let deadline, monotonicNanoseconds() >= deadline { return true }
        }
        return false
    }

    /// The next call's input (nil: call `finish`) and output space, or nil when the chain
    /// stops (then no longer `running`).
    private func nextCall() -> Call? {
        let plan = shared.withLock { s -> (inAt: Int, inCount: Int, outAt: Int, outCount: Int)? in
            guard !s.cancelled, s.failure == nil, !s.innerFinished else {
                s.running = false
                return nil
            }
            let free = output.count - (s.outWritten - released(s))
            let outAt = s.outWritten % output.count
            let pending = s.inWritten - s.inRead
            guard free > 0, pending > 0 || s.ended else {
                s.running = false
                return nil
            }
            let inAt = s.inRead % input.count
            let room = min(free, output.count - outAt, Self.callOutput)
            return (inAt, min(pending, input.count - inAt), outAt, room)
        }
        guard let plan else { return nil }
        let out = UnsafeMutableRawBufferPointer(rebasing: output[plan.outAt..<plan.outAt + plan.outCount])
        guard plan.inCount > 0 else { return Call(input: nil, output: out) }
        return Call(input: UnsafeRawBufferPointer(rebasing: input[plan.inAt..<plan.inAt + plan.inCount]), output: out)
    }

    // MARK: The check chain

    /// Computes the CRC-32 of the output, member by member, and compares it with the stage's
    /// checks, until every byte written so far is checked or one fails (false: no longer
    /// `checking`), or until `deadline` (true: the caller runs it again).
    func runChecks(until deadline: UInt64?) -> Bool {
        while true {
            let plan = shared.withLock { s -> (at: Int, count: Int)? in
                while let check = s.checks.first, check.end <= s.outChecked {
                    s.checks.removeFirst()
                    if check.end < s.outChecked || crc != check.crc32 {
                        s.failure = s.failure ?? check.mismatch
                    }
                    crc = 0
                }
                guard s.failure == nil, !s.cancelled, s.outChecked < s.outWritten else {
                    s.checking = false
                    return nil
                }
                let at = s.outChecked % output.count
                var count = min(s.outWritten - s.outChecked, output.count - at, Self.callOutput)
                if let check = s.checks.first { count = min(count, check.end - s.outChecked) }
                return (at, count)
            }
            guard let plan else { return false }
            crc = CRC32.update(crc, UnsafeRawBufferPointer(rebasing: output[plan.at..<plan.at + plan.count]))
            let tell = shared.withLock { s -> Bool in
                s.outChecked += plan.count
                return takeWish(&s)
            }
            if tell { notify?() }
            if let deadline, monotonicNanoseconds() >= deadline { return true }
        }
    }

    // MARK: Copies

    /// Copies `count` bytes of the ring `out` from cursor `from` into `output`.
    static func copy(
        out: UnsafeMutableRawBufferPointer, from: Int, count: Int, into output: UnsafeMutableRawBufferPointer
    ) {
        let at = from % out.count
        let first = min(count, out.count - at)
        output.baseAddress!.copyMemory(from: out.baseAddress! + at, byteCount: first)
        if count > first {
            (output.baseAddress! + first).copyMemory(from: out.baseAddress!, byteCount: count - first)
        }
    }

    /// Copies `bytes` into the ring `ring` at cursor `at`.
    static func copy(in bytes: UnsafeRawBufferPointer, into ring: UnsafeMutableRawBufferPointer, at: Int) {
        let position = at % ring.count
        let first = min(bytes.count, ring.count - position)
        (ring.baseAddress! + position).copyMemory(from: bytes.baseAddress!, byteCount: first)
        if bytes.count > first {
            ring.baseAddress!.copyMemory(from: bytes.baseAddress! + first, byteCount: bytes.count - first)
        }
    }
}
