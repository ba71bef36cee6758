import CZlib

/// A pipeline stage that compresses: gzip, zlib or raw deflate, wrapping zlib's `deflate`.
///
/// `process` feeds input with `Z_NO_FLUSH`, so zlib may hold input back until it has a block's
/// worth; `finish` calls `deflate(Z_FINISH)` until `Z_STREAM_END`, writing the last block and
/// the trailer. Any output space of one byte or more makes progress: what does not fit stays
/// in zlib's pending buffer for the next call.
public final class Deflate: Stage {
    /// The container written.
    public let format: CompressionFormat
    /// The zlib compression level, 0 (store) to 9 (smallest).
    public let level: Int
    /// Uncompressed bytes consumed so far.
    public private(set) var totalIn = 0
    /// Compressed bytes produced so far.
    public private(set) var totalOut = 0

    /// The stage's name in messages and statistics: the format (`gzip`, `zlib`, `deflate`).
    public var name: String { format.rawValue }

    private let stream: UnsafeMutablePointer<z_stream>
    private var finishing = false
    private var finished = false

    /// The levels zlib accepts.
    public static let levels: ClosedRange<Int> = 0...9

    /// Creates a compressor with `deflateInit2` (32 KiB window, memLevel 8, default strategy).
    ///
    /// Throws `.invalidArgument` if `level` is outside 0...9.
    public init(format: CompressionFormat = .gzip, level: Int = 6) throws(SluiceError) {
        guard Self.levels.contains(level) else {
            throw SluiceError(
                .invalidArgument, operation: "deflate", subject: format.rawValue,
                detail: "compression level \(level) is out of range 0...9")
        }
        let stream = allocateZStream()
        let rc = sluice_deflateInit2(stream, Int32(level), Z_DEFLATED, format.windowBits, 8, Z_DEFAULT_STRATEGY)
        guard rc == Z_OK else {
            releaseZStream(stream)
            throw zInitError(rc, operation: "deflate", subject: format.rawValue)
        }
        self.stream = stream
        self.format = format
        self.level = level
    }

    deinit {
        deflateEnd(stream)
        releaseZStream(stream)
    }

    /// Compresses as much of `input` as zlib takes (`deflate(Z_NO_FLUSH)`); output appears as
    /// zlib completes blocks. Must not be called after `finish(into:)`.
    public func process(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws(SluiceError)
        -> StageProgress
    {
        precondition(!finishing, "Deflate.process called after finish")
        guard !input.isEmpty, !output.isEmpty else { return StageProgress(consumed: 0, produced: 0) }
        let (consumed, produced, _) = run(input, output, flush: Z_NO_FLUSH)
        return StageProgress(consumed: consumed, produced: produced)
    }

    /// Writes the rest of the compressed stream and its trailer (`deflate(Z_FINISH)`); call
    /// until it reports `finished`.
    public func finish(into output: UnsafeMutableRawBufferPointer) throws(SluiceError) -> StageProgress {
        finishing = true
        guard !finished else { return StageProgress(consumed: 0, produced: 0, finished: true) }
        guard !output.isEmpty else { return StageProgress(consumed: 0, produced: 0) }
        let (_, produced, rc) = run(UnsafeRawBufferPointer(start: nil, count: 0), output, flush: Z_FINISH)
        finished = rc == Z_STREAM_END
        return StageProgress(consumed: 0, produced: produced, finished: finished)
    }

    /// Starts a new stream with the same settings (`deflateReset`), e.g. for the next file.
    public func reset() {
        let rc = deflateReset(stream)
        precondition(rc == Z_OK, "deflateReset returned \(rc)")
        finishing = false
        finished = false
        totalIn = 0
        totalOut = 0
    }

    /// One `deflate` call over the buffers; the stream's pointers are cleared afterwards so zlib
    /// never holds on to memory it does not own.
    private func run(_ input: UnsafeRawBufferPointer, _ output: UnsafeMutableRawBufferPointer, flush: Int32) -> (
        consumed: Int, produced: Int, rc: Int32
    ) {
        let (consumed, produced, rc) = zCall(stream, input, output) { deflate($0, flush) }
        // Z_BUF_ERROR only says "no progress possible", which the counts already tell.
        precondition(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR, "deflate returned \(rc)")
        totalIn += consumed
        totalOut += produced
        return (consumed, produced, rc)
    }
}
