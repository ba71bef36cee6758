/// What one call of a stage did.
public struct StageProgress: Hashable, Sendable {
    /// Input bytes consumed.
    public var consumed: Int
    /// Output bytes produced.
    public var produced: Int
    /// From `finish(into:)`: all output has been produced; for a decoder, also set by
    /// `process` when the encoded stream ended (the stage accepts no more input).
    public var finished: Bool

    public init(consumed: Int, produced: Int, finished: Bool = false) {
        self.consumed = consumed
        self.produced = produced
        self.finished = finished
    }
}

/// A transform between two of a pipeline's chunk queues (compression, decompression).
///
/// The shape is zlib's: the pipeline offers input and an output buffer of at most one chunk,
/// so however much a stage expands its input, the bytes it holds for the pipeline are bounded
/// by the chunk size. A call must make progress (consume or produce something) whenever it is
/// offered both non-empty input and non-empty output space, unless it has finished.
public protocol Stage: AnyObject {
    /// For messages and statistics: `gzip`, `inflate`, …
    var name: String { get }

    /// Transforms bytes from `input` into `output`.
    func process(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws(SluiceError)
        -> StageProgress

    /// Called after the last input, repeatedly until it reports `finished`: writes what the
    /// stage still holds (trailers, buffered output) and checks that the input was complete.
    func finish(into output: UnsafeMutableRawBufferPointer) throws(SluiceError) -> StageProgress
}

/// An observer of the bytes passing a point of a pipeline, without copying them
/// (checksums, meters).
public protocol Tap: AnyObject {
    func observe(_ bytes: UnsafeRawBufferPointer)
    /// The stream ended; values are final.
    func finish()
}

/// A stage whose work runs on worker threads (`WorkerPool`), so the loop's thread only moves
/// bytes. Its calls still come from one thread (the loop's), and it keeps the shape of `Stage`,
/// with one difference: a call may make no progress while the stage's workers are busy (its
/// bounded number of jobs is out, or the output next in order is not done). It then calls the
/// `wake` handler given to `attach(to:wake:)` on the loop's thread once it can move again.
///
/// Not attached to a loop (polling use, or a caller on a plain thread), it does its work inline
/// on the calling thread, with the same output.
public protocol AsynchronousStage: Stage {
    /// Hands the stage the loop its work completes on, and what to call there when it can make
    /// progress after a call that made none. Call once, before the first byte.
    func attach(to loop: EventLoop, wake: @escaping () -> Void)
    /// Bytes the stage holds now (input waiting for its block to fill, jobs out, finished
    /// output not yet taken): part of a pipeline's bytes in flight.
    var heldBytes: Int { get }
    /// The most bytes the stage ever holds: fixed by its block size and job count, never by
    /// the input's size.
    var heldLimit: Int { get }
    /// Drops every job's result (the pipeline failed or was cancelled): jobs already running
    /// finish on their workers, and their results are freed there.
    func cancel()
}

/// A check of a stage's output that the stage can leave to whoever runs it: the CRC-32 that a
/// gzip member's trailer gives for the member's data.
public struct OutputCheck: Hashable, Sendable {
    /// Where the checked bytes end, counted in bytes of the stage's output from its first byte.
    /// They begin where the previous check's bytes ended (or at the first byte).
    public var end: Int
    /// The CRC-32 (zlib's `crc32`) the bytes must have.
    public var crc32: UInt32
    /// What to report when they do not.
    public var mismatch: SluiceError

    public init(end: Int, crc32: UInt32, mismatch: SluiceError) {
        self.end = end
        self.crc32 = crc32
        self.mismatch = mismatch
    }
}

/// A stage that can leave the CRC-32 checks of its output to whoever runs it, so that they run
/// on another core while it goes on (`pigz -d` checks on a thread of its own). `OffloadedStage`
/// does so when its pool has a thread to spare.
public protocol OutputCheckDeferring: Stage {
    /// From now on the stage does not compute the CRC-32 of its output: it reports each one
    /// through `takeOutputChecks()`, and a mismatch is the runner's to report. Everything else
    /// (headers, sizes, the structure of the data) the stage still checks. Call before the
    /// first byte.
    func deferOutputChecks()
    /// The checks found since the last call, in output order. A check is reported no later than
    /// the call that produces the first byte after its `end`.
    func takeOutputChecks() -> [OutputCheck]
    /// Whether the output so far is covered by such checks (gzip, with its checks deferred): the
    /// runner must compute its CRC-32. False for output that is checked otherwise (zlib's
    /// Adler-32, zstd's checksums) or not at all (raw deflate).
    var outputNeedsChecks: Bool { get }
}
