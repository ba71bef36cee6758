import CSluiceEngines
import CZlib

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A pipeline stage that decompresses gzip, zlib or raw deflate, wrapping zlib's `inflate`.
///
/// - `auto` detects the container from the first two bytes (which may arrive one call apart):
///   `1f 8b` is gzip; a valid RFC 1950 header (method 8, window ≤ 32 KiB, header check a
///   multiple of 31) is zlib; anything else is raw deflate. zlib never starts a raw stream
///   with such bytes, so only foreign raw streams could be mistaken.
/// - gzip input may hold several concatenated members (`cat a.gz b.gz`), decoded as one
///   stream (`inflateReset` between members). Zero bytes after the last member (tape or
///   block padding) are ignored, as `gzip -d` does; any other byte after a member is
///   `.corruptData` ("trailing garbage after gzip member").
/// - zlib and raw deflate input ends with the stream: `process` reports `finished` then, and
///   any byte after it is `.corruptData`.
/// - CRC-32 and size (gzip) or Adler-32 (zlib) are checked; a mismatch or a bad encoding is
///   `.corruptData` with zlib's message. A runner can take the gzip CRC-32 checks over
///   (`OutputCheckDeferring`) to compute them on another core: the stage then reports each
///   member's expected CRC-32 instead, and checks everything else itself.
/// - `finish` before the end of the stream is `.truncatedData`, including empty input for a
///   fixed format. Empty input with `auto` is an empty stream and decodes to nothing.
/// - The engine is ISA-L's `isal_inflate` where available (about twice zlib's speed; it parses
///   the gzip header, and the stage reads the trailer), zlib's `inflate` otherwise. Both follow
///   the rules above; ISA-L reads a few bytes past a stream's end, which are given back and
///   decoded as what follows it (the trailer, the next member, padding or garbage).
public final class Inflate: OutputCheckDeferring {
    /// The container expected, or `auto`.
    public let format: DecompressionFormat
    /// The bomb guard.
    public let limit: InflateLimit
    /// Compressed bytes consumed so far.
    public private(set) var totalIn = 0
    /// Decompressed bytes produced so far.
    public private(set) var totalOut = 0
    /// The container being decoded: the fixed format, or the detected one (nil until `auto`
    /// has seen enough bytes).
    public private(set) var detectedFormat: CompressionFormat?

    /// The stage's name in messages and statistics.
    public var name: String { "inflate" }
    /// The engine decoding: ISA-L or zlib.
    public let engine: CompressionEngine

    private enum State {
        /// `auto`: no format yet; `prefix` holds the first byte when it alone did not decide.
        case detecting
        /// Inside a stream; `prefix` holds header bytes to feed zlib before the input.
        case inflating
        /// gzip with ISA-L: the member's deflate data ended; its trailer (CRC-32 and size, 8
        /// bytes) is read into `trailer`.
        case trailer
        /// gzip: a member ended; another member, zero padding or the end may follow.
        /// `prefix` holds `1f` when the next member's magic has begun.
        case betweenMembers
        /// gzip: zero padding after the last member.
        case padding
        /// zlib or raw deflate: the stream ended.
        case ended
        /// An error was thrown; every later call throws it again.
        case failed(SluiceError)
    }

    private let stream: UnsafeMutablePointer<z_stream>
    /// ISA-L's inflate state, when ISA-L is the engine.
    private let isal: UnsafeMutableRawPointer?
    /// ISA-L decodes the current stream (not raw deflate, which zlib decodes whatever the engine).
    private var isalDecodes = false
    /// With ISA-L, at the start of a gzip member or zlib stream: the header bit ISA-L does not
    /// check as zlib does, and how many header bytes ISA-L was given so far (nil once checked).
    private var headerCheck: HeaderCheck?
    /// zlib's `data_type` after its last call: 128 between blocks, plus the bits it holds.
    private var lastDataType: Int32 = 0
    /// Bytes ISA-L read past a stream's end that came from earlier input: decoded before the
    /// next input.
    private var carry: [UInt8] = []
    private var state: State

    /// gzip CRC-32 checks are reported through `takeOutputChecks` instead of made here.
    private var defersChecks = false
    private var outputChecks: [OutputCheck] = []
    /// The current gzip member's output so far (its size, as the trailer gives it) and, when
    /// ISA-L decodes and the stage checks it, its CRC-32.
    private var memberOut = 0
    private var memberCRC: UInt32 = 0
    /// A gzip trailer, little-endian: as read (`trailerCount` bytes so far), or with zlib the
    /// last 8 bytes it consumed.
    private var trailer: UInt64 = 0
    private var trailerCount = 0
    /// zlib and deferred checks: the member's header is not read yet (zlib stops after it,
    /// `Z_BLOCK`, and stops computing the CRC-32 then: `inflateValidate`).
    private var zlibHeaderPending = false
    /// Up to two bytes consumed from the input before zlib could be given them.
    private let prefix: UnsafeMutablePointer<UInt8>
    private var prefixStart = 0
    private var prefixEnd = 0

    /// Creates a decompressor with `inflateInit2` (32 KiB window; for `auto`, the window bits
    /// are set with `inflateReset2` once the format is known).
    /// `engine` nil: ISA-L where available, zlib otherwise; raw deflate (`.deflate`) is always
    /// decoded by zlib.
    public init(format: DecompressionFormat = .auto, limit: InflateLimit = .default, engine: CompressionEngine? = nil)
        throws(SluiceError)
    {
        guard format != .zstd else {
            throw SluiceError(
                .invalidArgument, operation: "inflate", subject: "zstd", detail: "zstd is decoded by Decompressor")
        }
        // Raw deflate carries no checksum to catch what ISA-L lets through (it decodes a block
        // whose distance codes do not form a valid code, which zlib refuses: a fuzz finding,
        // Fuzz/Regressions/inflate/isal-invalid-distances-set), so zlib always decodes it, named
        // or detected. gzip and zlib streams end in a CRC-32 or Adler-32 that such output fails.
        let engine = format == .deflate ? .zlib : engine ?? (CompressionEngine.isal.isAvailable ? .isal : .zlib)
        switch engine {
        case .zlib:
            isal = nil
        case .isal:
            if let reason = engine.unavailableReason {
                throw SluiceError(.unavailable, operation: "inflate", subject: format.rawValue, detail: reason)
            }
            guard let context = sluice_isal_inflate_create() else {
                throw SluiceError(.system(Errno(rawValue: ENOMEM)), operation: "inflate", subject: format.rawValue)
            }
            isal = context
        case .zstd, .libdeflate:
            throw SluiceError(
                .invalidArgument, operation: "inflate", subject: format.rawValue,
                detail: "\(engine) does not decode streams of deflate")
        }
        self.engine = engine
        let stream = allocateZStream()
        let rc = sluice_inflateInit2(stream, (format.fixed ?? .zlib).windowBits)
        guard rc == Z_OK else {
            releaseZStream(stream)
            throw zInitError(rc, operation: "inflate", subject: format.rawValue)
        }
        self.stream = stream
        self.format = format
        self.limit = limit
        detectedFormat = format.fixed
        state = format.fixed == nil ? .detecting : .inflating
        prefix = .allocate(capacity: 2)
        if let fixed = format.fixed { resetISAL(fixed) }
        if format.fixed == .gzip { startMember() }
    }

    deinit {
        inflateEnd(stream)
        releaseZStream(stream)
        prefix.deallocate()
        if let isal { sluice_isal_inflate_free(isal) }
    }

    /// Points ISA-L at a new stream of `format` (raw deflate, found by detection too, goes to
    /// zlib: see `init`).
    private func resetISAL(_ format: CompressionFormat) {
        isalDecodes = isal != nil && format != .deflate
        guard let isal else { return }
        switch format {
        case .gzip: headerCheck = .gzip
        case .zlib: headerCheck = .zlib
        case .deflate: headerCheck = nil
        }
        let container: Int32
        switch format {
        case .gzip: container = SLUICE_ISAL_GZIP_BODY  // the header by ISA-L, the trailer here
        case .zlib: container = 3  // ISAL_ZLIB
        case .deflate: container = 0  // ISAL_DEFLATE
        }
        sluice_isal_inflate_reset(isal, container)
    }

    /// A gzip member starts: its size, CRC-32 and trailer start over; with zlib and deferred
    /// checks, zlib checks the header's CRC-16 and stops after the header.
    private func startMember() {
        memberOut = 0
        memberCRC = 0
        trailer = 0
        trailerCount = 0
        zlibHeaderPending = false
        if defersChecks && !isalDecodes && detectedFormat == .gzip {
            _ = inflateValidate(stream, 1)
            zlibHeaderPending = true
        }
    }

    // MARK: - Deferred checks

    /// Leaves the gzip CRC-32 checks to the caller (see `OutputCheckDeferring`). Call before the
    /// first byte.
    public func deferOutputChecks() {
        defersChecks = true
        if detectedFormat == .gzip { startMember() }
    }

    public func takeOutputChecks() -> [OutputCheck] {
        defer { outputChecks.removeAll() }
        return outputChecks
    }

    public var outputNeedsChecks: Bool { defersChecks && detectedFormat == .gzip }

    /// Decompresses as much of `input` as fits in `output` (`inflate(Z_NO_FLUSH)`).
    ///
    /// Reports `finished` when a zlib or raw deflate stream has ended (gzip never: another
    /// member may follow). Throws `.corruptData` for bad data or trailing garbage and
    /// `.limitExceeded` when a limit is exceeded.
    public func process(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws(SluiceError)
        -> StageProgress
    {
        if case .failed(let error) = state { throw error }
        do {
            return try step(input, output)
        } catch {
            state = .failed(error)
            throw error
        }
    }

    /// Writes decompressed bytes zlib still holds, then checks that the stream was complete:
    /// throws `.truncatedData` if it was not.
    public func finish(into output: UnsafeMutableRawBufferPointer) throws(SluiceError) -> StageProgress {
        if case .failed(let error) = state { throw error }
        do {
            return try drain(output)
        } catch {
            state = .failed(error)
            throw error
        }
    }

    /// Raw deflate, between calls of `process`: writes what zlib still holds of the input taken
    /// (a match at most once that is used up: 258 bytes) and says whether, with room to spare in
    /// `output`, the stream then stands where a sync flush leaves it (between blocks, on a byte
    /// boundary) or ended: every byte of the input taken is out. A delta's COPY needs it.
    package func flushPending(into output: UnsafeMutableRawBufferPointer) throws(SluiceError) -> (
        produced: Int, settled: Bool
    ) {
        if case .failed(let error) = state { throw error }
        if case .ended = state { return (0, true) }
        guard case .inflating = state, !isalDecodes, carry.isEmpty, prefixStart == prefixEnd else { return (0, false) }
        // Between blocks zlib holds nothing back (and a call would move past the mark).
        if totalIn == 0 || lastDataType & (128 | 63) == 128 { return (0, true) }
        do {
            let r = try inflateStep(UnsafeRawBufferPointer(start: nil, count: 0), output)
            if r.ended { try endOfStream() }
            return (r.produced, r.ended || (r.produced < output.count && lastDataType & (128 | 63) == 128))
        } catch {
            state = .failed(error)
            throw error
        }
    }

    /// Starts over for a new stream with the same settings (`inflateReset2`).
    public func reset() {
        let rc = inflateReset2(stream, (format.fixed ?? .zlib).windowBits)
        precondition(rc == Z_OK, "inflateReset2 returned \(rc)")
        detectedFormat = format.fixed
        state = format.fixed == nil ? .detecting : .inflating
        prefixStart = 0
        prefixEnd = 0
        totalIn = 0
        totalOut = 0
        carry = []
        outputChecks = []
        if let fixed = format.fixed { resetISAL(fixed) }
        if format.fixed == .gzip { startMember() }
    }

    // MARK: - Steps

    /// Decodes the carried bytes first, then `input`; bytes carried while decoding `input` (ISA-L
    /// read them ahead in an earlier call) come before the rest of it.
    private func step(_ input: UnsafeRawBufferPointer, _ output: UnsafeMutableRawBufferPointer) throws(SluiceError)
        -> StageProgress
    {
        var consumed = 0
        var produced = 0
        while true {
            while !carry.isEmpty {
                let held = carry
                carry = []
                let p = try held.withUnsafeBytes { bytes in
                    Result { () throws(SluiceError) in
                        try stepInput(bytes, UnsafeMutableRawBufferPointer(rebasing: output[produced...]))
                    }
                }.get()
                produced += p.produced
                carry += held[p.consumed...]
                if p.consumed == 0 && p.produced == 0 { return StageProgress(consumed: consumed, produced: produced) }
            }
            let p = try stepInput(
                UnsafeRawBufferPointer(rebasing: input[consumed...]),
                UnsafeMutableRawBufferPointer(rebasing: output[produced...]))
            consumed += p.consumed
            produced += p.produced
            if carry.isEmpty { return StageProgress(consumed: consumed, produced: produced, finished: p.finished) }
        }
    }

    private func stepInput(_ input: UnsafeRawBufferPointer, _ output: UnsafeMutableRawBufferPointer)
        throws(SluiceError) -> StageProgress
    {
        var consumed = 0
        var produced = 0
        while true {
            switch state {
            case .detecting:
                guard consumed < input.count else { return StageProgress(consumed: consumed, produced: produced) }
                let byte = input[consumed]
                if prefixEnd == 0 {
                    if Self.mayStartHeader(byte) {
                        prefix[0] = byte
                        prefixStart = 0
                        prefixEnd = 1
                        consumed += 1
                    } else {
                        begin(.deflate)
                    }
                } else {
                    begin(Self.detect(prefix[0], byte))
                }

            case .inflating:
                // The header bytes held back while detecting the format go first, then the input.
                let fromPrefix = prefixStart < prefixEnd
                guard produced < output.count, fromPrefix || consumed < input.count else {
                    return StageProgress(consumed: consumed, produced: produced)
                }
                let r = try inflateStep(
                    fromPrefix
                        ? UnsafeRawBufferPointer(start: prefix + prefixStart, count: prefixEnd - prefixStart)
                        : UnsafeRawBufferPointer(rebasing: input[consumed...]),
                    UnsafeMutableRawBufferPointer(rebasing: output[produced...]))
                if fromPrefix { prefixStart += r.consumed } else { consumed += r.consumed }
                produced += r.produced
                if r.ended {
                    try endOfStream()
                    // Bytes ISA-L gave back from earlier input come first: `step` feeds them.
                    if !carry.isEmpty { return StageProgress(consumed: consumed, produced: produced) }
                } else if r.consumed == 0 && r.produced == 0 {
                    return StageProgress(consumed: consumed, produced: produced)
                }

            case .betweenMembers:
                guard consumed < input.count else { return StageProgress(consumed: consumed, produced: produced) }
                let byte = input[consumed]
                if prefixEnd == 0 {
                    switch byte {
                    case 0x1f:
                        prefix[0] = byte
                        prefixStart = 0
                        prefixEnd = 1
                        consumed += 1
                    case 0:
                        state = .padding
                    default:
                        throw trailingGarbage()
                    }
                } else {
                    guard byte == 0x8b else { throw trailingGarbage() }
                    let rc = inflateReset(stream)
                    precondition(rc == Z_OK, "inflateReset returned \(rc)")
                    resetISAL(.gzip)
                    startMember()
                    state = .inflating
                }

            case .trailer:
                guard consumed < input.count else { return StageProgress(consumed: consumed, produced: produced) }
                while trailerCount < 8 && consumed < input.count {
                    trailer |= UInt64(input[consumed]) << (8 * trailerCount)
                    trailerCount += 1
                    consumed += 1
                    totalIn += 1
                }
                if trailerCount == 8 {
                    try endMember(
                        crc: UInt32(truncatingIfNeeded: trailer), size: UInt32(truncatingIfNeeded: trailer >> 32))
                }

            case .padding:
                while consumed < input.count {
                    guard input[consumed] == 0 else { throw trailingGarbage() }
                    consumed += 1
                    totalIn += 1
                }
                return StageProgress(consumed: consumed, produced: produced)

            case .ended:
                guard consumed == input.count else { throw trailingGarbage() }
                return StageProgress(consumed: consumed, produced: produced, finished: true)

            case .failed(let error):
                throw error
            }
        }
    }

    private func drain(_ output: UnsafeMutableRawBufferPointer) throws(SluiceError) -> StageProgress {
        if !carry.isEmpty {
            let p = try step(UnsafeRawBufferPointer(start: nil, count: 0), output)
            if !carry.isEmpty || p.produced > 0 { return StageProgress(consumed: 0, produced: p.produced) }
        }
        switch state {
        case .detecting:
            guard prefixEnd == 0 else { throw truncated("input ended inside the header") }
            return StageProgress(consumed: 0, produced: 0, finished: true)
        case .inflating:
            guard prefixStart == prefixEnd else { throw truncated("input ended inside the header") }
            guard !output.isEmpty else { return StageProgress(consumed: 0, produced: 0) }
            let r = try inflateStep(UnsafeRawBufferPointer(start: nil, count: 0), output)
            if r.ended {
                try endOfStream()
                // What ISA-L read past the end comes next (the trailer, another member, padding
                // or trailing garbage), decoded or refused like any input.
                let rest = try drain(UnsafeMutableRawBufferPointer(rebasing: output[r.produced...]))
                return StageProgress(consumed: 0, produced: r.produced + rest.produced, finished: rest.finished)
            }
            guard r.produced > 0 else {
                throw truncated("input ended before the end of the \(detectedFormat?.rawValue ?? "compressed") stream")
            }
            return StageProgress(consumed: 0, produced: r.produced)
        case .trailer:
            throw truncated("input ended before the end of the gzip stream")
        case .betweenMembers:
            guard prefixEnd == 0 else { throw truncated("input ended inside a gzip member header") }
            return StageProgress(consumed: 0, produced: 0, finished: true)
        case .padding, .ended:
            return StageProgress(consumed: 0, produced: 0, finished: true)
        case .failed(let error):
            throw error
        }
    }

    /// The format is known: point zlib at it. Any prefix bytes are fed before the input.
    private func begin(_ format: CompressionFormat) {
        let rc = inflateReset2(stream, format.windowBits)
        precondition(rc == Z_OK, "inflateReset2 returned \(rc)")
        resetISAL(format)
        detectedFormat = format
        state = .inflating
        if format == .gzip { startMember() }
    }

    /// The deflate data ended: zlib or raw deflate is done; a gzip member's trailer follows
    /// (ISA-L) or was read by zlib.
    private func endOfStream() throws(SluiceError) {
        prefixStart = 0
        prefixEnd = 0
        guard detectedFormat == .gzip else {
            state = .ended
            return
        }
        if isalDecodes {
            state = .trailer
        } else if defersChecks {
            // zlib read the trailer without checking it: it is the last 8 bytes it consumed.
            try endMember(crc: UInt32(truncatingIfNeeded: trailer), size: UInt32(truncatingIfNeeded: trailer >> 32))
        } else {
            state = .betweenMembers
        }
    }

    /// Checks a gzip member's trailer: its size here, its CRC-32 here or by the caller.
    private func endMember(crc: UInt32, size: UInt32) throws(SluiceError) {
        if !defersChecks && crc != memberCRC { throw corrupt("incorrect data check") }
        guard size == UInt32(truncatingIfNeeded: memberOut) else { throw corrupt("incorrect length check") }
        if defersChecks {
            outputChecks.append(OutputCheck(end: totalOut, crc32: crc, mismatch: corrupt("incorrect data check")))
        }
        state = .betweenMembers
    }

    /// One `inflate` call. Output space is cut to one byte past `maxOutputBytes`, so a bomb is
    /// caught as soon as it crosses the limit; the stream's pointers are cleared afterwards.
    private func inflateStep(_ input: UnsafeRawBufferPointer, _ output: UnsafeMutableRawBufferPointer)
        throws(SluiceError) -> (consumed: Int, produced: Int, ended: Bool)
    {
        var room = output.count
        if let max = limit.maxOutputBytes, max - totalOut < room { room = max - totalOut + 1 }
        let space = UnsafeMutableRawBufferPointer(rebasing: output[..<room])
        if isalDecodes, let isal { return try isalStep(isal, input, space) }
        let flush = zlibHeaderPending ? Z_BLOCK : Z_NO_FLUSH
        let (consumed, produced, rc) = zCall(stream, input, space) { inflate($0, flush) }
        lastDataType = stream.pointee.data_type
        totalIn += consumed
        totalOut += produced
        if defersChecks && detectedFormat == .gzip {
            memberOut += produced
            // The last 8 bytes consumed: the trailer, once zlib reports the end.
            for byte in input[(consumed - min(consumed, 8))..<consumed] {
                trailer = trailer >> 8 | UInt64(byte) << 56
            }
            if zlibHeaderPending && stream.pointee.data_type & 128 != 0 {
                // Past the header (its CRC-16 checked): no CRC-32 of the data from here on.
                zlibHeaderPending = false
                _ = inflateValidate(stream, 0)
            }
        }

        let ended: Bool
        switch rc {
        case Z_OK, Z_BUF_ERROR:
            ended = false
        case Z_STREAM_END:
            ended = true
        case Z_DATA_ERROR:
            throw corrupt(zMessage(stream, fallback: "invalid compressed data"))
        case Z_NEED_DICT:
            throw corrupt("zlib stream needs a preset dictionary")
        case Z_MEM_ERROR:
            throw SluiceError(.system(Errno(rawValue: ENOMEM)), operation: "inflate", subject: subject)
        default:
            preconditionFailure("inflate returned \(rc)")
        }
        try checkLimits()
        return (consumed, produced, ended)
    }

    /// One `isal_inflate` call. Bytes it read past the stream's end are given back: from this
    /// call's input by consuming fewer, from earlier input through `carry`.
    private func isalStep(
        _ isal: UnsafeMutableRawPointer, _ input: UnsafeRawBufferPointer, _ output: UnsafeMutableRawBufferPointer
    ) throws(SluiceError) -> (consumed: Int, produced: Int, ended: Bool) {
        if let check = headerCheck, check.index - check.seen < input.count {
            headerCheck = nil
            guard input[check.index - check.seen] & check.mask == 0 else { throw corrupt(check.reason) }
        }
        var used: UInt32 = 0
        var made: UInt32 = 0
        var ended: Int32 = 0
        var unread: UInt32 = 0
        var unreadBytes: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) = (0, 0, 0, 0, 0, 0, 0, 0)
        let rc = withUnsafeMutableBytes(of: &unreadBytes) { ahead in
            sluice_isal_inflate(
                isal, input.baseAddress?.assumingMemoryBound(to: UInt8.self), zLength(input.count), &used,
                output.baseAddress?.assumingMemoryBound(to: UInt8.self), zLength(output.count), &made, &ended, &unread,
                ahead.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        // On some errors ISA-L rewinds its input past the start of this call's bytes (into
        // what it buffered from the last call), and `in_len - avail_in` wraps around.
        var consumed = min(Int(used), input.count)
        let produced = Int(made)
        headerCheck?.seen += consumed
        if unread > 0 {
            let fromEarlier = max(0, Int(unread) - consumed)
            if fromEarlier > 0 {
                withUnsafeBytes(of: unreadBytes) { carry = Array($0[..<fromEarlier]) + carry }
                totalIn -= fromEarlier  // counted when they were consumed; counted again when decoded
            }
            consumed -= Int(unread) - fromEarlier
        }
        totalIn += consumed
        totalOut += produced
        if detectedFormat == .gzip {
            memberOut += produced
            if !defersChecks, produced > 0 {
                memberCRC = sluice_isal_crc32(
                    memberCRC, output.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(produced))
            }
        }
        switch rc {
        case 0, 1, 2:  // ISAL_DECOMP_OK, ISAL_END_INPUT, ISAL_OUT_OVERFLOW
            break
        case 6:  // ISAL_NEED_DICT
            throw corrupt("zlib stream needs a preset dictionary")
        case -4:
            throw corrupt("invalid \(subject) header at offset \(totalIn)")
        case -5:
            throw corrupt("unknown compression method at offset \(totalIn)")
        case -6:
            throw corrupt(detectedFormat == .gzip ? "header crc mismatch" : "incorrect data check")
        default:
            throw corrupt("invalid compressed data near offset \(totalIn) (ISA-L \(rc))")
        }
        try checkLimits()
        return (consumed, produced, ended != 0)
    }
}
