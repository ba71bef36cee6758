/// Runs a synchronous `Stage` (inflate, zstd) on a worker thread, so the loop's thread only
/// copies bytes in and out while the stage works: reading, decoding and writing overlap on
/// different cores, as `pigz -d` overlaps its reading, inflating and writing.
///
/// The stage is driven by one job at a time (it has one state, so its calls stay in order):
/// the loop fills an inbox while a job runs; the next job takes the inbox and whatever input
/// the last one left, and writes into a free output buffer while the loop hands the previous
/// one downstream. Memory: the inbox, the job's input and two output buffers (`heldLimit`).
/// Without a loop, each job runs inline on the caller's thread.
public final class OffloadedStage: AsynchronousStage {
    /// The stage run on the worker.
    public let inner: any Stage
    public var name: String { inner.name }

    private let pool: WorkerPool
    private var loop: EventLoop?
    private var wake: (() -> Void)?
    private let inbox: UnsafeMutableRawBufferPointer
    private var inboxCount = 0
    private let job: OffloadJob
    private var running = false
    private var finishing = false
    /// The last job made no progress: the next needs new input.
    private var stalled = false
    private var innerFinished = false
    private var ready: [OffloadOutput] = []
    private var free: [OffloadOutput]
    private var failure: SluiceError?
    private var cancelled = false

    /// Runs `inner` on `pool` with an inbox of `inputBytes` and output buffers of `outputBytes`.
    public init(
        _ inner: any Stage, pool: WorkerPool = .shared, inputBytes: Int = 256 * 1024, outputBytes: Int = 512 * 1024
    ) {
        precondition(inputBytes > 0 && outputBytes > 0, "OffloadedStage buffer sizes must be positive")
        self.inner = inner
        self.pool = pool
        inbox = .allocate(byteCount: inputBytes, alignment: 64)
        job = OffloadJob(inner, inputBytes: 2 * inputBytes)
        free = [OffloadOutput(capacity: outputBytes), OffloadOutput(capacity: outputBytes)]
    }

    deinit {
        inbox.deallocate()
    }

    public func attach(to loop: EventLoop, wake: @escaping () -> Void) {
        self.loop = loop
        self.wake = wake
    }

    public var heldBytes: Int {
        inboxCount + job.pending + ready.reduce(0) { $0 + $1.count - $1.taken }
    }

    public var heldLimit: Int { inbox.count + job.work.count + 2 * (free.first ?? ready.first)!.buffer.count }

    public func cancel() {
        cancelled = true
        ready.removeAll()
    }

    public func process(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws(SluiceError)
        -> StageProgress
    {
        var produced = try drain(into: output)
        let consumed = min(input.count, inbox.count - inboxCount)
        if consumed > 0 {
            UnsafeMutableRawBufferPointer(rebasing: inbox[inboxCount..<inboxCount + consumed]).copyMemory(
                from: UnsafeRawBufferPointer(rebasing: input[..<consumed]))
            inboxCount += consumed
            stalled = false
        }
        startJob()
        produced += try drain(into: UnsafeMutableRawBufferPointer(rebasing: output[produced...]))
        return StageProgress(consumed: consumed, produced: produced)
    }

    public func finish(into output: UnsafeMutableRawBufferPointer) throws(SluiceError) -> StageProgress {
        if !finishing {
            finishing = true
            stalled = false
        }
        var produced = try drain(into: output)
        startJob()
        produced += try drain(into: UnsafeMutableRawBufferPointer(rebasing: output[produced...]))
        let done = innerFinished && !running && ready.isEmpty
        return StageProgress(consumed: 0, produced: produced, finished: done)
    }

    private func drain(into output: UnsafeMutableRawBufferPointer) throws(SluiceError) -> Int {
        if let failure { throw failure }
        var produced = 0
        while produced < output.count, let first = ready.first {
            let n = min(output.count - produced, first.count - first.taken)
            UnsafeMutableRawBufferPointer(rebasing: output[produced..<produced + n]).copyMemory(
                from: UnsafeRawBufferPointer(rebasing: first.buffer[first.taken..<first.taken + n]))
            first.taken += n
            produced += n
            if first.taken == first.count {
                ready.removeFirst()
                free.append(first)
                startJob()
            }
        }
        return produced
    }

    /// Starts the next job when none runs, an output buffer is free and there is work.
    private func startJob() {
        guard !running, !innerFinished, !stalled, !cancelled, failure == nil, let out = free.last else { return }
        let moved = job.take(UnsafeRawBufferPointer(rebasing: inbox[..<inboxCount]))
        if moved > 0 {
            inbox.baseAddress!.copyMemory(from: inbox.baseAddress! + moved, byteCount: inboxCount - moved)
            inboxCount -= moved
        }
        let last = finishing && inboxCount == 0
        guard job.pending > 0 || last else { return }
        free.removeLast()
        running = true
        job.start(output: out, finishing: last)
        guard let loop else {
            job.run()
            complete(out)
            return
        }
        let box = UncheckedBox(job)
        pool.submit({ box.value.run() }, completingOn: loop) { [weak self] _ in
            guard let self, !self.cancelled else { return }
            self.complete(out)
            self.wake?()
        }
    }

    private func complete(_ out: OffloadOutput) {
        running = false
        if let error = job.error {
            failure = error
            return
        }
        innerFinished = job.innerFinished
        stalled = !job.madeProgress
        if out.count > 0 {
            ready.append(out)
        } else {
            free.append(out)
        }
        startJob()
    }
}

/// An output buffer of an `OffloadedStage`: written by a job, then read by the loop.
final class OffloadOutput: @unchecked Sendable {
    let buffer: UnsafeMutableRawBufferPointer
    var count = 0
    var taken = 0

    init(capacity: Int) {
        buffer = .allocate(byteCount: capacity, alignment: 64)
    }

    deinit {
        buffer.deallocate()
    }
}

/// The job of an `OffloadedStage`: the stage's input not yet consumed, and one run of the
/// stage over it on a worker. The worker and the loop's thread take turns (submit, then the
/// completion on the loop), never at once.
final class OffloadJob: @unchecked Sendable {
    let inner: any Stage
    let work: UnsafeMutableRawBufferPointer
    private var start = 0
    private var end = 0
    private var output: OffloadOutput?
    private var finishing = false
    private(set) var innerFinished = false
    private(set) var madeProgress = false
    private(set) var error: SluiceError?

    init(_ inner: any Stage, inputBytes: Int) {
        self.inner = inner
        work = .allocate(byteCount: inputBytes, alignment: 64)
    }

    deinit {
        work.deallocate()
    }

    /// Input bytes the stage has not consumed yet.
    var pending: Int { end - start }

    /// Moves the leftover input to the front and appends as much of `bytes` as fits.
    func take(_ bytes: UnsafeRawBufferPointer) -> Int {
        if start > 0 {
            work.baseAddress!.copyMemory(from: work.baseAddress! + start, byteCount: end - start)
            end -= start
            start = 0
        }
        let n = min(bytes.count, work.count - end)
        if n > 0 {
            UnsafeMutableRawBufferPointer(rebasing: work[end..<end + n]).copyMemory(
                from: UnsafeRawBufferPointer(rebasing: bytes[..<n]))
            end += n
        }
        return n
    }

    func start(output: OffloadOutput, finishing: Bool) {
        self.output = output
        self.finishing = finishing
    }

    /// On a worker: runs the stage over the input until it is consumed (and, when finishing,
    /// the stage has finished) or the output buffer is full.
    func run() {
        guard let output else { return }
        var produced = 0
        madeProgress = false
        do {
            while produced < output.buffer.count {
                let space = UnsafeMutableRawBufferPointer(rebasing: output.buffer[produced...])
                if start < end {
                    let p = try inner.process(UnsafeRawBufferPointer(rebasing: work[start..<end]), into: space)
                    start += p.consumed
                    produced += p.produced
                    if p.consumed == 0 && p.produced == 0 { break }
                } else if finishing {
                    let p = try inner.finish(into: space)
                    produced += p.produced
                    if p.finished {
                        innerFinished = true
                        madeProgress = true
                        break
                    }
                    if p.produced == 0 { break }
                } else {
                    break
                }
                madeProgress = true
            }
        } catch {
            self.error = error
        }
        output.count = produced
        output.taken = 0
        self.output = nil
    }
}
