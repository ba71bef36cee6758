import CSluiceEngines

#if canImport(Glibc)
    import Glibc
#endif

/// A compression stage that writes zstd frames (RFC 8878) with libzstd's streaming API
/// (`ZSTD_compressStream2`), loaded at run time: see `CompressionEngine.zstd`.
///
/// zstd's own worker threads compress (`ZSTD_c_nbWorkers`, at least one, so the output is the
/// same for any thread count); each frame carries a content checksum.
public final class ZstdCompress: Stage {
    /// The zstd level, 1 (fastest) to 19.
    public let level: Int
    /// zstd's worker threads.
    public let threads: Int
    public var name: String { "zstd" }

    /// The levels offered.
    public static let levels: ClosedRange<Int> = 1...19
    public static let defaultLevel = 3

    private let context: UnsafeMutableRawPointer
    private var finished = false

    /// A compressor at `level` with `threads` zstd workers (default: one per core); `longWindow`
    /// enables long-distance matching (`--long`). Throws `.unavailable` where this build or
    /// machine has no zstd, `.invalidArgument` for a level out of range.
    public init(level: Int = ZstdCompress.defaultLevel, threads: Int? = nil, longWindow: Bool = false)
        throws(SluiceError)
    {
        if let reason = CompressionEngine.zstd.unavailableReason {
            throw SluiceError(.unavailable, operation: "compress", subject: "zstd", detail: reason)
        }
        guard Self.levels.contains(level) else {
            throw SluiceError(
                .invalidArgument, operation: "compress", subject: "zstd",
                detail: "compression level \(level) is out of range 1...19")
        }
        let threads = threads ?? WorkerPool.shared.threadCount
        guard WorkerPool.threadCounts.contains(threads) else {
            throw SluiceError(
                .invalidArgument, operation: "compress", subject: "zstd",
                detail: "thread count \(threads) is out of range \(WorkerPool.threadCounts)")
        }
        guard let context = sluice_zstd_cctx_create(Int32(level), Int32(threads), longWindow ? 1 : 0) else {
            throw SluiceError(
                .system(Errno(rawValue: ENOMEM)), operation: "compress", subject: "zstd",
                detail: "ZSTD_createCCtx failed")
        }
        self.context = context
        self.level = level
        self.threads = threads
    }

    deinit {
        sluice_zstd_cctx_free(context)
    }

    public func process(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws(SluiceError)
        -> StageProgress
    {
        let (consumed, produced, _) = try call(input, output, end: false)
        return StageProgress(consumed: consumed, produced: produced)
    }

    public func finish(into output: UnsafeMutableRawBufferPointer) throws(SluiceError) -> StageProgress {
        guard !finished else { return StageProgress(consumed: 0, produced: 0, finished: true) }
        let (_, produced, remaining) = try call(UnsafeRawBufferPointer(start: nil, count: 0), output, end: true)
        finished = remaining == 0
        return StageProgress(consumed: 0, produced: produced, finished: finished)
    }

    private func call(_ input: UnsafeRawBufferPointer, _ output: UnsafeMutableRawBufferPointer, end: Bool)
        throws(SluiceError) -> (Int, Int, Int)
    {
        var inPos = 0
        var outPos = 0
        let rc = sluice_zstd_compress(
            context, input.baseAddress, input.count, &inPos, output.baseAddress, output.count, &outPos, end ? 1 : 0)
        if sluice_zstd_is_error(rc) != 0 {
            throw SluiceError(
                .invalidArgument, operation: "compress", subject: "zstd",
                detail: String(cString: sluice_zstd_error_name(rc)))
        }
        return (inPos, outPos, rc)
    }
}

/// A decompression stage for zstd frames with libzstd's streaming API
/// (`ZSTD_decompressStream`): any number of concatenated frames, skippable frames skipped,
/// content checksums checked. The window is bounded (`ZSTD_d_windowLogMax`, 2^27 bytes by
/// default, as `zstd -d`), and `InflateLimit` guards against bombs as for the deflate formats.
public final class ZstdDecompress: Stage {
    public let limit: InflateLimit
    public var name: String { "zstd" }
    /// Compressed bytes consumed and decompressed bytes produced so far.
    public private(set) var totalIn = 0
    public private(set) var totalOut = 0

    /// The largest window accepted: 128 MiB, zstd's default limit (what `--long` writes).
    public static let defaultWindowLogMax = 27

    private let context: UnsafeMutableRawPointer
    /// zstd's hint from the last call: 0 when a frame has ended and been flushed.
    private var lastHint = 0
    private var failure: SluiceError?
    /// The first bytes of the frame being decoded (its header), and `totalOut` when it began:
    /// at its end, what it decoded is checked against the content size its header declares.
    /// libzstd checks that when it decodes a frame at once into a large enough buffer, but not
    /// always when it streams one through a smaller buffer: the verdict must not depend on it.
    private var frameHeader: [UInt8] = []
    private var frameStartOut = 0
    private static let frameHeaderMax = 18
    /// The stream's structure, followed over what libzstd consumed (see `ZstdFrameWalker`).
    private var walker = ZstdFrameWalker()

    public init(limit: InflateLimit = .default, windowLogMax: Int = ZstdDecompress.defaultWindowLogMax)
        throws(SluiceError)
    {
        if let reason = CompressionEngine.zstd.unavailableReason {
            throw SluiceError(.unavailable, operation: "decompress", subject: "zstd", detail: reason)
        }
        guard let context = sluice_zstd_dctx_create(Int32(windowLogMax)) else {
            throw SluiceError(
                .system(Errno(rawValue: ENOMEM)), operation: "decompress", subject: "zstd",
                detail: "ZSTD_createDCtx failed")
        }
        self.context = context
        self.limit = limit
    }

    deinit {
        sluice_zstd_dctx_free(context)
    }

    public func process(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws(SluiceError)
        -> StageProgress
    {
        let (consumed, produced) = try call(input, output)
        return StageProgress(consumed: consumed, produced: produced)
    }

    /// Flushes what zstd holds; `.truncatedData` if the input ended inside a frame.
    public func finish(into output: UnsafeMutableRawBufferPointer) throws(SluiceError) -> StageProgress {
        if let failure { throw failure }
        guard lastHint != 0 else { return StageProgress(consumed: 0, produced: 0, finished: true) }
        let (_, produced) = try call(UnsafeRawBufferPointer(start: nil, count: 0), output)
        if lastHint == 0 { return StageProgress(consumed: 0, produced: produced, finished: true) }
        guard produced > 0 else {
            failure = SluiceError(
                .truncatedData, operation: "decompress", subject: "zstd",
                detail: "input ended inside a frame at offset \(totalIn)")
            throw failure!
        }
        return StageProgress(consumed: 0, produced: produced)
    }

    private func call(_ input: UnsafeRawBufferPointer, _ output: UnsafeMutableRawBufferPointer) throws(SluiceError)
        -> (Int, Int)
    {
        if let failure { throw failure }
        var room = output.count
        if let max = limit.maxOutputBytes, max - totalOut < room { room = max - totalOut + 1 }
        var inPos = 0
        var outPos = 0
        let rc = sluice_zstd_decompress(
            context, input.baseAddress, input.count, &inPos, output.baseAddress, room, &outPos)
        if frameHeader.count < Self.frameHeaderMax, inPos > 0, let base = input.baseAddress {
            let n = min(inPos, Self.frameHeaderMax - frameHeader.count)
            frameHeader.append(contentsOf: UnsafeRawBufferPointer(start: base, count: n))
        }
        if inPos > 0, let base = input.baseAddress {
            walker.walk(UnsafeRawBufferPointer(start: base, count: inPos))
        }
        totalIn += inPos
        totalOut += outPos
        if let problem = walker.problem {
            failure = SluiceError(.corruptData, operation: "decompress", subject: "zstd", detail: problem)
            throw failure!
        }
        if sluice_zstd_is_error(rc) != 0 {
            failure = SluiceError(
                .corruptData, operation: "decompress", subject: "zstd",
                detail: "\(String(cString: sluice_zstd_error_name(rc))) near offset \(totalIn)")
            throw failure!
        }
        lastHint = rc
        if rc == 0 && !frameHeader.isEmpty {
            // A frame ended (a call never goes past the end of one).
            var declared: UInt64 = 0
            let decoded = UInt64(totalOut - frameStartOut)
            let known = frameHeader.withUnsafeBytes {
                sluice_zstd_frame_content_size($0.baseAddress, $0.count, &declared) != 0
            }
            frameHeader.removeAll(keepingCapacity: true)
            frameStartOut = totalOut
            if known && declared != decoded {
                failure = SluiceError(
                    .corruptData, operation: "decompress", subject: "zstd",
                    detail: "a frame declares \(declared) bytes and holds \(decoded), near offset \(totalIn)")
                throw failure!
            }
        }
        do {
            try limit.check(totalIn: totalIn, totalOut: totalOut, operation: "decompress", subject: "zstd")
        } catch {
            failure = error
            throw error
        }
        return (inPos, outPos)
    }
}
