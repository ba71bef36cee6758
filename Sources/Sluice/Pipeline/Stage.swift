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
