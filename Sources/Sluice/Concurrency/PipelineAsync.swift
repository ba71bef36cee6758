import FoundationEssentials
import Synchronization

extension Pipeline {
    /// Runs the pipeline on the shared loop (`EventLoop.shared`: no thread per call) and
    /// returns its result once both ends are done.
    ///
    /// A failed copy is not thrown: it is in the result's `error`, with the statistics up to
    /// the failure. What is thrown: `CancellationError` when the task is cancelled (the
    /// pipeline is stopped and both streams closed, as by `cancel()`), and the error of a
    /// shared loop that could not be created. The streams must not be scheduled on another loop.
    public func run() async throws -> PipelineResult {
        let loop = try EventLoop.shared
        let box = UncheckedBox(self)
        // Cancellation may come before the loop has started the pipeline: both flags are read
        // and written on the loop's thread, in the order the two `execute` calls were made.
        let cancelled = Atomic<Bool>(false)
        let started = Atomic<Bool>(false)
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<PipelineResult, Never>) in
                loop.execute {
                    box.value.start(on: loop) { continuation.resume(returning: $0) }
                    started.store(true, ordering: .relaxed)
                    if cancelled.load(ordering: .relaxed) { box.value.cancel() }
                }
            }
        } onCancel: {
            cancelled.store(true, ordering: .relaxed)
            loop.execute { if started.load(ordering: .relaxed) { box.value.cancel() } }
        }
        if cancelled.load(ordering: .relaxed), result.error?.underlying.code == .cancelled {
            throw CancellationError()
        }
        return result
    }
}
