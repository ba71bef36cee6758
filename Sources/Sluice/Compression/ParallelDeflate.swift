import CSluiceEngines
import CZlib
import FoundationEssentials

/// A compression stage that deflates blocks of its input at once on a pool of worker threads,
/// as pigz does, and writes one gzip member, zlib stream or raw deflate stream.
///
/// The input is cut into blocks of `blockSize` bytes. Each block is deflated raw on a worker
/// and ended on a byte boundary with a sync flush; only the last block is final. The engines:
///
/// - zlib's `deflate` and ISA-L's `isal_deflate` prime each block with the previous 32 KiB of
///   input as its dictionary (`deflateSetDictionary`). ISA-L's blocks are 128 KiB by default,
///   as pigz's; zlib's are 1 MiB, where less of each block's work is re-hashing its dictionary:
///   3–4% fewer instructions than in 128 KiB blocks, for output 0.04% larger
///   (Benchmarks/RESULTS.md). ISA-L's output grows by 0.6% in 1 MiB blocks, so it keeps pigz's.
/// - libdeflate has no dictionary and no sync flush: each block (1 MiB by default, where its
///   output on the corpus of Benchmarks/RESULTS.md is smaller than zlib's primed 128 KiB
///   blocks at every level) is compressed on its own, then made continuable: its last deflate
///   block's final bit is cleared (found by walking the blocks with zlib's `inflate`, as zlib's
///   `gzjoin` example does) and an empty stored block ends it on a byte boundary, which is
///   what a sync flush writes.
///
/// The engine for a level, unless one is asked for (`defaultEngine(level:)`): ISA-L where its
/// output is not larger than zlib's by more than 2% (level 1), libdeflate for levels 1–9
/// (smaller than zlib's at the same level, 1.4 to 2.2 times as fast), zlib otherwise.
///
/// The CRC-32 (gzip) or Adler-32 (zlib) of each block is computed by its worker (with ISA-L's
/// or libdeflate's code for their blocks, zlib's for zlib's) and the values are combined in
/// order (`crc32_combine`, `adler32_combine`). Blocks are written in order. The output depends
/// on the level, the block size and the engine, never on the number of threads.
///
/// At most `2 × threads` blocks are out at once (input and compressed output), so the stage
/// holds at most `heldLimit` bytes whatever the input's size. Attached to a loop, the blocks
/// run on the `WorkerPool` and their results come back to the loop's thread; without a loop
/// each block is deflated inline on the caller's thread, with the same output.
public final class ParallelDeflate: AsynchronousStage {
    /// The container written.
    public let format: CompressionFormat
    /// The compression level, 0 (store) to 9 (smallest).
    public let level: Int
    /// The most blocks compressed at once.
    public let threads: Int
    /// The bytes of input per block.
    public let blockSize: Int
    /// The engine that deflates the blocks: zlib, ISA-L or libdeflate.
    public let engine: CompressionEngine

    /// The stage's name in messages and statistics: the format (`gzip`, `zlib`, `deflate`).
    public var name: String { format.rawValue }

    /// 128 KiB, as pigz: the block size of ISA-L, whose blocks are primed with the previous
    /// 32 KiB (its output grows by 0.6% in blocks of 1 MiB), and the smallest allowed.
    public static let smallBlockSize = 128 * 1024
    /// 1 MiB: the block size of zlib, whose blocks are primed with the previous 32 KiB (1/32 of
    /// a block's input to hash again, against 1/4 at 128 KiB), and of libdeflate, whose blocks
    /// start with no dictionary; the largest allowed.
    public static let largeBlockSize = 1024 * 1024
    /// The block size used with `engine` when none is given: `smallBlockSize` for ISA-L,
    /// `largeBlockSize` for zlib and libdeflate.
    public static func defaultBlockSize(engine: CompressionEngine) -> Int {
        engine == .isal ? smallBlockSize : largeBlockSize
    }
    @available(*, deprecated, message: "the default depends on the engine: use defaultBlockSize(engine:)")
    public static var defaultBlockSize: Int { smallBlockSize }
    @available(*, deprecated, renamed: "largeBlockSize")
    public static var libdeflateBlockSize: Int { largeBlockSize }
    /// The block sizes allowed: 128 KiB to 1 MiB.
    public static let blockSizes = smallBlockSize...largeBlockSize
    /// The sluice levels ISA-L serves, and the ISA-L level used for each: those whose output on
    /// a corpus of real files (a tar of source, binaries and documents) is within 2% of zlib's
    /// at the same level, measured in Benchmarks/RESULTS.md.
    public static let isalLevels: [Int: Int] = [1: 2]
    /// The sluice levels libdeflate serves, at the same level of its own: at each, its output
    /// on that corpus is smaller than zlib's (Benchmarks/RESULTS.md).
    public static let libdeflateLevels = 1...9
    /// The engine used for `level` when none is asked for: ISA-L where available and allowed
    /// for that level, then libdeflate, zlib otherwise.
    public static func defaultEngine(level: Int) -> CompressionEngine {
        if isalLevels[level] != nil && CompressionEngine.isal.isAvailable { return .isal }
        if libdeflateLevels.contains(level) && CompressionEngine.libdeflate.isAvailable { return .libdeflate }
        return .zlib
    }

    static let window = 32 * 1024

    private let pool: WorkerPool
    private let contexts: DeflateContexts
    private let maxJobs: Int
    private var loop: EventLoop?
    private var wake: (() -> Void)?

    private var header: [UInt8]
    private var headerSent = 0
    private var trailer: [UInt8] = []
    private var trailerSent = 0
    /// The block being filled.
    private var current: DeflateJob?
    /// The last 32 KiB of input before `current`.
    private let dictionary: UnsafeMutableRawBufferPointer
    private var dictionaryCount = 0
    /// Blocks submitted, in order, until their output was taken.
    private var jobs: [DeflateJob] = []
    private var spare: [DeflateJob] = []
    private var check: UInt32
    private var totalIn: UInt64 = 0
    private var lastSubmitted = false
    private var done = false

    /// A stage for `format` at `level` (0–9) deflating on `threads` workers (default: one per
    /// core), in blocks of `blockSize` bytes (default: `defaultBlockSize(engine:)`), with
    /// `engine` (default: `defaultEngine(level:)`).
    ///
    /// Throws `.invalidArgument` for a level, thread count or block size out of range, and
    /// `.unavailable` for an engine this build or machine lacks.
    public init(
        format: CompressionFormat = .gzip, level: Int = 6, threads: Int? = nil,
        blockSize: Int? = nil, engine: CompressionEngine? = nil
    ) throws(SluiceError) {
        guard Deflate.levels.contains(level) else {
            throw SluiceError(
                .invalidArgument, operation: "deflate", subject: format.rawValue,
                detail: "compression level \(level) is out of range 0...9")
        }
        let engine = engine ?? Self.defaultEngine(level: level)
        let blockSize = blockSize ?? Self.defaultBlockSize(engine: engine)
        guard Self.blockSizes.contains(blockSize) else {
            throw SluiceError(
                .invalidArgument, operation: "deflate", subject: format.rawValue,
                detail: "block size \(blockSize) is out of range 128 KiB...1 MiB")
        }
        let threads = threads ?? WorkerPool.shared.threadCount
        guard WorkerPool.threadCounts.contains(threads) else {
            throw SluiceError(
                .invalidArgument, operation: "deflate", subject: format.rawValue,
                detail: "thread count \(threads) is out of range \(WorkerPool.threadCounts)")
        }
        switch engine {
        case .zlib:
            break
        case .libdeflate:
            if let reason = engine.unavailableReason {
                throw SluiceError(.unavailable, operation: "deflate", subject: format.rawValue, detail: reason)
            }
            guard Self.libdeflateLevels.contains(level) else {
                throw SluiceError(
                    .invalidArgument, operation: "deflate", subject: format.rawValue,
                    detail: "libdeflate does not serve level \(level)")
            }
        case .isal:
            if let reason = engine.unavailableReason {
                throw SluiceError(.unavailable, operation: "deflate", subject: format.rawValue, detail: reason)
            }
            guard Self.isalLevels[level] != nil else {
                throw SluiceError(
                    .invalidArgument, operation: "deflate", subject: format.rawValue,
                    detail: "ISA-L does not serve level \(level)")
            }
        case .zstd:
            throw SluiceError(
                .invalidArgument, operation: "deflate", subject: format.rawValue, detail: "zstd does not write deflate")
        }
        self.format = format
        self.level = level
        self.threads = threads
        self.blockSize = blockSize
        self.engine = engine
        pool = WorkerPool.pool(threads: threads)
        maxJobs = max(2, 2 * threads)
        contexts = DeflateContexts(engine: engine, level: engine == .isal ? Self.isalLevels[level]! : level)
        dictionary = .allocate(byteCount: Self.window, alignment: 64)
        header = Self.header(format, level: level)
        check = format == .gzip ? 0 : 1
    }

    deinit {
        dictionary.deallocate()
    }

    // MARK: AsynchronousStage

    public func attach(to loop: EventLoop, wake: @escaping () -> Void) {
        self.loop = loop
        self.wake = wake
    }

    public var heldBytes: Int {
        var bytes = (current?.dataCount ?? 0) + header.count - headerSent + trailer.count - trailerSent
        for job in jobs { bytes += job.done ? job.outputCount - job.taken : job.dataCount }
        return bytes
    }

    public var heldLimit: Int {
        maxJobs * DeflateJob.outputCapacity(blockSize: blockSize) + blockSize + header.count + 8
    }

    public func cancel() {
        done = true
        for job in jobs { job.cancelled = true }
        jobs.removeAll()
        spare.removeAll()
        current = nil
    }

    // MARK: Stage

    /// Takes input into the block being filled, hands each full block to a worker, and writes
    /// the compressed blocks that are done, in order.
    public func process(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws(SluiceError)
        -> StageProgress
    {
        precondition(!lastSubmitted, "ParallelDeflate.process called after finish")
        var produced = try drain(into: output)
        var consumed = 0
        while consumed < input.count {
            if current == nil {
                guard jobs.count < maxJobs else { break }
                current = startBlock()
            }
            let job = current!
            let n = min(input.count - consumed, blockSize - job.dataCount)
            job.append(UnsafeRawBufferPointer(rebasing: input[consumed..<consumed + n]))
            consumed += n
            if job.dataCount == blockSize {
                current = nil
                submit(job, last: false)
            }
        }
        produced += try drain(into: UnsafeMutableRawBufferPointer(rebasing: output[produced...]))
        return StageProgress(consumed: consumed, produced: produced)
    }

    /// Submits the last block (final, possibly empty), then writes the blocks and the trailer.
    public func finish(into output: UnsafeMutableRawBufferPointer) throws(SluiceError) -> StageProgress {
        guard !done else { return StageProgress(consumed: 0, produced: 0, finished: true) }
        var produced = try drain(into: output)
        if !lastSubmitted && (current != nil || jobs.count < maxJobs) {
            let job = current ?? startBlock()
            current = nil
            lastSubmitted = true
            submit(job, last: true)
            produced += try drain(into: UnsafeMutableRawBufferPointer(rebasing: output[produced...]))
        }
        return StageProgress(consumed: 0, produced: produced, finished: done)
    }

    /// Ends the block being filled now, as every block but the last ends: with a sync flush,
    /// on a byte boundary. Once the output is taken (`heldBytes` 0), it decodes to every byte
    /// of input taken so far: a delta's literal bytes before a COPY. A block cut short costs a
    /// little compression; the next is primed as ever, with the last 32 KiB of input.
    package func flush() {
        guard !lastSubmitted, let job = current, job.dataCount > 0 else { return }
        current = nil
        submit(job, last: false)
    }

    // MARK: Blocks

    private func startBlock() -> DeflateJob {
        let job = spare.popLast() ?? DeflateJob(blockSize: blockSize)
        job.reset(dictionary: UnsafeRawBufferPointer(rebasing: dictionary[..<dictionaryCount]))
        return job
    }

    private func submit(_ job: DeflateJob, last: Bool) {
        job.last = last
        if !last && engine != .libdeflate {
            // The next block's dictionary: the last 32 KiB of input, of this block alone unless
            // it was cut short (`flush`).
            let data = job.data
            let kept = min(dictionaryCount, Self.window - min(data.count, Self.window))
            if kept > 0, let base = dictionary.baseAddress {
                base.copyMemory(from: base + (dictionaryCount - kept), byteCount: kept)
            }
            UnsafeMutableRawBufferPointer(rebasing: dictionary[kept...]).copyMemory(
                from: UnsafeRawBufferPointer(rebasing: data[(data.count - min(data.count, Self.window))...]))
            dictionaryCount = kept + min(data.count, Self.window)
        }
        jobs.append(job)
        let contexts = contexts
        let kind: Checksum.Kind? = format == .gzip ? .crc32 : format == .zlib ? .adler32 : nil
        guard let loop else {
            job.run(contexts, kind)
            job.done = true
            return
        }
        let box = UncheckedBox(job)
        pool.submit({ box.value.run(contexts, kind) }, completingOn: loop) { [weak self] _ in
            job.done = true
            guard let self, !job.cancelled else { return }
            self.wake?()
        }
    }

    /// Writes the header, the finished blocks in order, and (after the last) the trailer.
    private func drain(into output: UnsafeMutableRawBufferPointer) throws(SluiceError) -> Int {
        var produced = 0
        if headerSent < header.count {
            produced += copyOut(header, from: &headerSent, into: output)
        }
        while produced < output.count, headerSent == header.count, let job = jobs.first, job.done {
            if let failure = job.failure {
                throw SluiceError(.invalidArgument, operation: "deflate", subject: format.rawValue, detail: failure)
            }
            let n = min(output.count - produced, job.outputCount - job.taken)
            UnsafeMutableRawBufferPointer(rebasing: output[produced..<produced + n]).copyMemory(
                from: UnsafeRawBufferPointer(rebasing: job.output[job.taken..<job.taken + n]))
            job.taken += n
            produced += n
            guard job.taken == job.outputCount else { break }
            combine(job)
            jobs.removeFirst()
            if job.last {
                trailer = Self.trailer(format, check: check, totalIn: totalIn)
            } else {
                spare.append(job)
            }
        }
        if lastSubmitted && jobs.isEmpty && headerSent == header.count {
            produced += copyOut(
                trailer, from: &trailerSent, into: UnsafeMutableRawBufferPointer(rebasing: output[produced...]))
            if trailerSent == trailer.count {
                done = true
                spare.removeAll()
            }
        }
        return produced
    }

    private func copyOut(_ bytes: [UInt8], from sent: inout Int, into output: UnsafeMutableRawBufferPointer) -> Int {
        let n = min(output.count, bytes.count - sent)
        bytes.withUnsafeBytes {
            UnsafeMutableRawBufferPointer(rebasing: output[..<n]).copyMemory(
                from: UnsafeRawBufferPointer(rebasing: $0[sent..<sent + n]))
        }
        sent += n
        return n
    }

    private func combine(_ job: DeflateJob) {
        let length = off_t(job.dataCount)
        switch format {
        case .gzip: check = UInt32(truncatingIfNeeded: crc32_combine(uLong(check), uLong(job.check), length))
        case .zlib: check = UInt32(truncatingIfNeeded: adler32_combine(uLong(check), uLong(job.check), length))
        case .deflate: break
        }
        totalIn &+= UInt64(job.dataCount)
    }

    // MARK: Container

    /// What zlib writes for the same settings: gzip with no name and mtime 0, OS Unix; zlib
    /// with its level flags.
    static func header(_ format: CompressionFormat, level: Int) -> [UInt8] {
        switch format {
        case .gzip:
            let xfl: UInt8 = level == 9 ? 2 : level < 2 ? 4 : 0
            return [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, xfl, 3]
        case .zlib:
            let flags: UInt16 = level < 2 ? 0 : level < 6 ? 1 : level == 6 ? 2 : 3
            var header: UInt16 = 0x7800 | flags << 6
            header += 31 - header % 31
            return [UInt8(header >> 8), UInt8(header & 0xff)]
        case .deflate:
            return []
        }
    }

    static func trailer(_ format: CompressionFormat, check: UInt32, totalIn: UInt64) -> [UInt8] {
        switch format {
        case .gzip:
            let size = UInt32(truncatingIfNeeded: totalIn)
            return (0..<4).map { UInt8(truncatingIfNeeded: check >> (8 * $0)) }
                + (0..<4).map { UInt8(truncatingIfNeeded: size >> (8 * $0)) }
        case .zlib:
            return (0..<4).map { UInt8(truncatingIfNeeded: check >> (24 - 8 * $0)) }
        case .deflate:
            return []
        }
    }
}

/// One block of a `ParallelDeflate`: its dictionary and input, and the compressed output its
/// worker wrote. Reused from block to block; a worker and the loop's thread take turns on it
/// (submit, then the completion on the loop), never at once.
final class DeflateJob: @unchecked Sendable {
    /// The dictionary (up to 32 KiB), then the block's input.
    let input: UnsafeMutableRawBufferPointer
    let output: UnsafeMutableRawBufferPointer
    var dictionaryCount = 0
    var dataCount = 0
    var last = false
    var outputCount = 0
    var taken = 0
    var check: UInt32 = 0
    var done = false
    var cancelled = false
    var failure: String?

    /// Room for any block's deflated form (stored blocks, the sync flush marker) with margin.
    static func outputCapacity(blockSize: Int) -> Int { blockSize + blockSize / 8 + 4096 }

    init(blockSize: Int) {
        input = .allocate(byteCount: ParallelDeflate.window + blockSize, alignment: 64)
        output = .allocate(byteCount: Self.outputCapacity(blockSize: blockSize), alignment: 64)
    }

    deinit {
        input.deallocate()
        output.deallocate()
    }

    var dictionaryBytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: input[..<dictionaryCount]) }
    var data: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: input[dictionaryCount..<dictionaryCount + dataCount])
    }

    func reset(dictionary: UnsafeRawBufferPointer) {
        UnsafeMutableRawBufferPointer(rebasing: input[..<dictionary.count]).copyMemory(from: dictionary)
        dictionaryCount = dictionary.count
        dataCount = 0
        last = false
        outputCount = 0
        taken = 0
        done = false
        failure = nil
    }

    func append(_ bytes: UnsafeRawBufferPointer) {
        let at = dictionaryCount + dataCount
        UnsafeMutableRawBufferPointer(rebasing: input[at..<at + bytes.count]).copyMemory(from: bytes)
        dataCount += bytes.count
    }

    /// On a worker: deflates the block and computes its checksum.
    func run(_ contexts: DeflateContexts, _ kind: Checksum.Kind?) {
        switch kind {
        case .crc32?:
            // ISA-L's CRC-32 is several times zlib's, but zlib's deflate runs slower on the
            // thread after it (≈ 4% more CPU at level 6 on the corpus of Benchmarks/RESULTS.md,
            // AMD EPYC with AVX-512): a zlib block keeps to zlib's CRC.
            let bytes = data.baseAddress?.assumingMemoryBound(to: UInt8.self)
            switch contexts.engine {
            case .isal: check = CRC32.update(0, data)
            case .libdeflate: check = sluice_libdeflate_crc32(0, bytes, data.count)
            case .zlib, .zstd: check = Checksum.update(.crc32, 0, data)
            }
        case .adler32?:
            let bytes = data.baseAddress?.assumingMemoryBound(to: UInt8.self)
            check =
                contexts.engine == .libdeflate
                ? sluice_libdeflate_adler32(1, bytes, data.count) : Checksum.compute(.adler32, over: data)
        case nil: break
        }
        let context = contexts.take()
        defer { contexts.give(context) }
        switch context {
        case .zlib(let stream):
            var rc = deflateReset(stream)
            if rc == Z_OK && dictionaryCount > 0 {
                rc = deflateSetDictionary(
                    stream, dictionaryBytes.baseAddress!.assumingMemoryBound(to: Bytef.self), uInt(dictionaryCount))
            }
            guard rc == Z_OK else {
                failure = "zlib could not start a block (\(rc))"
                return
            }
            let (consumed, produced, end) = zCall(stream, data, output) { deflate($0, last ? Z_FINISH : Z_SYNC_FLUSH) }
            guard consumed == dataCount, last ? end == Z_STREAM_END : end == Z_OK, produced < output.count else {
                failure = "zlib could not deflate a block (\(end))"
                return
            }
            outputCount = produced
        case .isal(let deflater):
            let n = sluice_isal_deflate_block(
                deflater, dictionaryBytes.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt32(dictionaryCount),
                data.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt32(dataCount), last ? 1 : 0,
                output.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt32(output.count))
            guard n >= 0 else {
                failure = "ISA-L could not deflate a block (\(n))"
                return
            }
            outputCount = n
        case .libdeflate(let deflater):
            let n = sluice_libdeflate_deflate_block(
                deflater, data.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt32(dataCount), last ? 1 : 0,
                output.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt32(output.count))
            guard n >= 0 else {
                failure = "libdeflate could not deflate a block (\(n))"
                return
            }
            outputCount = n
        }
    }
}

/// The deflate contexts of one `ParallelDeflate`'s workers (a `z_stream`, an ISA-L stream or a
/// libdeflate compressor each), made as needed and reused: never more than the blocks out at
/// once.
final class DeflateContexts: @unchecked Sendable {
    enum Context {
        case zlib(UnsafeMutablePointer<z_stream>)
        case isal(UnsafeMutableRawPointer)
        case libdeflate(UnsafeMutableRawPointer)
    }

    let engine: CompressionEngine
    private let level: Int
    private let lock = ConditionLock()
    private var free: [Context] = []

    init(engine: CompressionEngine, level: Int) {
        self.engine = engine
        self.level = level
    }

    deinit {
        for context in free {
            switch context {
            case .zlib(let stream):
                deflateEnd(stream)
                releaseZStream(stream)
            case .isal(let deflater):
                sluice_isal_deflate_free(deflater)
            case .libdeflate(let deflater):
                sluice_libdeflate_deflate_free(deflater)
            }
        }
    }

    func take() -> Context {
        lock.lock()
        let reused = free.popLast()
        lock.unlock()
        if let reused { return reused }
        switch engine {
        case .isal:
            guard let deflater = sluice_isal_deflate_create(Int32(level)) else {
                preconditionFailure("ISA-L deflater for level \(level): the engine was checked available")
            }
            return .isal(deflater)
        case .libdeflate:
            guard let deflater = sluice_libdeflate_deflate_create(Int32(level)) else {
                preconditionFailure("libdeflate compressor for level \(level): the engine was checked available")
            }
            return .libdeflate(deflater)
        case .zlib, .zstd:
            let stream = allocateZStream()
            let rc = sluice_deflateInit2(stream, Int32(level), Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY)
            precondition(rc == Z_OK, "deflateInit2 returned \(rc) for valid settings (out of memory)")
            return .zlib(stream)
        }
    }

    func give(_ context: Context) {
        lock.lock()
        free.append(context)
        lock.unlock()
    }
}
