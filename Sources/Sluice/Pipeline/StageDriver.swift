/// Runs one `Stage` for a component that owns its buffers: the pipeline (`copy`), and the
/// transfer sessions (`send`, `receive`), so both drive compression the same way.
///
/// The component offers input bytes and output space with `step(input:output:)` — `input` nil
/// once its input has ended — and gets the bytes consumed and produced, always in order. A
/// stage that runs on workers (`AsynchronousStage`) may make no progress on a call
/// (`isWaitingForWorkers`); the driver then calls the `wake` handler given to
/// `attach(to:wake:)` on the loop's thread when it can move again, and the component steps
/// again. The driver checks that a synchronous stage makes progress, and counts the stage's
/// bytes and its waiting time (`noteStarved`, `noteBlocked`) for the statistics.
///
/// Memory: the component's own buffers, plus at most `heldLimit` bytes inside the stage.
///
/// ```swift
/// let driver = StageDriver(try ParallelDeflate(format: .gzip, level: 1))
/// driver.attach(to: loop) { /* on the loop: step again */ }
/// let progress = try driver.step(input: bytes, output: space)   // input: nil at the end
/// ```
package final class StageDriver {
    /// The stage driven.
    package let stage: any Stage
    private let asynchronous: (any AsynchronousStage)?
    /// Bytes and waiting time so far.
    private(set) var statistics: StageStatistics
    /// The stage reported its last output.
    private(set) var isFinished = false
    /// The last step made no progress because the stage's workers are busy: `wake` follows.
    package private(set) var isWaitingForWorkers = false
    private var inputWaitSince: UInt64?
    private var outputWaitSince: UInt64?

    package init(_ stage: any Stage) {
        self.stage = stage
        asynchronous = stage as? any AsynchronousStage
        statistics = StageStatistics(
            name: stage.name, bytesIn: 0, bytesOut: 0, inputWaitSeconds: 0, outputWaitSeconds: 0)
    }

    /// For a stage that runs on workers: where they complete, and what to call there when the
    /// stage can move again. Without it such a stage works inline on the caller's thread.
    package func attach(to loop: EventLoop, wake: @escaping () -> Void) {
        asynchronous?.attach(to: loop, wake: wake)
    }

    /// Bytes inside the stage now, and the most it ever holds (0 for a synchronous stage,
    /// which holds only what zlib keeps).
    package var heldBytes: Int { asynchronous?.heldBytes ?? 0 }
    var heldLimit: Int { asynchronous?.heldLimit ?? 0 }

    /// Offers `input` (nil: the input has ended) and `output` space. Returns what the stage
    /// consumed and produced; `finished` once it produced its last byte.
    package func step(input: UnsafeRawBufferPointer?, output: UnsafeMutableRawBufferPointer) throws(SluiceError)
        -> StageProgress
    {
        guard !isFinished else { return StageProgress(consumed: 0, produced: 0, finished: true) }
        noteMoving()
        let progress: StageProgress
        if let input {
            progress = try stage.process(input, into: output)
        } else {
            progress = try stage.finish(into: output)
        }
        statistics.bytesIn += UInt64(progress.consumed)
        statistics.bytesOut += UInt64(progress.produced)
        if input == nil && progress.finished { isFinished = true }
        isWaitingForWorkers = false
        if progress.consumed == 0 && progress.produced == 0 && !progress.finished {
            if asynchronous != nil {
                isWaitingForWorkers = true
            } else if !output.isEmpty && (input.map { !$0.isEmpty } ?? true) {
                throw SluiceError(.invalidArgument, operation: stage.name, detail: "stage made no progress")
            }
        }
        return progress
    }

    /// The stage has output space but no input: the time until the next step is input wait.
    func noteStarved() {
        endWait(&outputWaitSince, \.outputWaitSeconds)
        if inputWaitSince == nil { inputWaitSince = monotonicNanoseconds() }
    }

    /// The stage has input but no output space: the time until the next step is output wait.
    func noteBlocked() {
        endWait(&inputWaitSince, \.inputWaitSeconds)
        if outputWaitSince == nil { outputWaitSince = monotonicNanoseconds() }
    }

    /// Ends any wait being timed (the stage is moving, or the run is over).
    func noteMoving() {
        endWait(&inputWaitSince, \.inputWaitSeconds)
        endWait(&outputWaitSince, \.outputWaitSeconds)
    }

    private func endWait(_ since: inout UInt64?, _ total: WritableKeyPath<StageStatistics, Double>) {
        guard let start = since else { return }
        statistics[keyPath: total] += Double(monotonicNanoseconds() - start) / 1e9
        since = nil
    }

    /// The run is over (failed or cancelled): stops the stage's jobs' results.
    package func cancel() {
        noteMoving()
        asynchronous?.cancel()
    }
}
