/// A decompression stage for every format sluice reads: zstd (`ZstdDecompress`) or gzip, zlib
/// and raw deflate (`Inflate`), chosen by `format` or, for `auto`, from the first four bytes:
/// a zstd frame (`28 b5 2f fd`) or skippable frame (`5? 2a 4d 18`) is zstd, anything else goes
/// to `Inflate`'s own detection. The same `InflateLimit` guards every format. gzip's CRC-32
/// checks can be left to the runner (`OutputCheckDeferring`, passed on to `Inflate`); zstd
/// checks its frames' checksums itself.
public final class Decompressor: OutputCheckDeferring {
    public let format: DecompressionFormat
    public let limit: InflateLimit
    /// The stage doing the work, once the format is known.
    public private(set) var inner: (any Stage)?

    public var name: String { inner?.name ?? "inflate" }

    private var prefix: [UInt8] = []
    private var prefixFed = 0
    private var defersChecks = false

    public init(format: DecompressionFormat = .auto, limit: InflateLimit = .default) throws(SluiceError) {
        self.format = format
        self.limit = limit
        switch format {
        case .auto: break
        case .zstd: inner = try ZstdDecompress(limit: limit)
        case .gzip, .zlib, .deflate: inner = try Inflate(format: format, limit: limit)
        }
    }

    /// The detected format: `zstd` for zstd input, `Inflate`'s otherwise (nil until known).
    public var detectedFormat: String? {
        switch inner {
        case is ZstdDecompress: return "zstd"
        case let inflate as Inflate: return inflate.detectedFormat?.rawValue
        default: return nil
        }
    }

    public func process(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws(SluiceError)
        -> StageProgress
    {
        var consumed = 0
        if inner == nil {
            consumed = min(4 - prefix.count, input.count)
            prefix += input[..<consumed]
            guard prefix.count == 4 else { return StageProgress(consumed: consumed, produced: 0) }
            try choose()
        }
        let produced = try feedPrefix(into: output)
        guard prefixFed == prefix.count, let inner else {
            return StageProgress(consumed: consumed, produced: produced)
        }
        let p = try inner.process(
            UnsafeRawBufferPointer(rebasing: input[consumed...]),
            into: UnsafeMutableRawBufferPointer(rebasing: output[produced...]))
        return StageProgress(consumed: consumed + p.consumed, produced: produced + p.produced, finished: p.finished)
    }

    public func finish(into output: UnsafeMutableRawBufferPointer) throws(SluiceError) -> StageProgress {
        if inner == nil {
            if prefix.isEmpty && format == .auto { return StageProgress(consumed: 0, produced: 0, finished: true) }
            try choose()
        }
        let produced = try feedPrefix(into: output)
        guard prefixFed == prefix.count, let inner else { return StageProgress(consumed: 0, produced: produced) }
        let p = try inner.finish(into: UnsafeMutableRawBufferPointer(rebasing: output[produced...]))
        return StageProgress(consumed: 0, produced: produced + p.produced, finished: p.finished)
    }

    private func choose() throws(SluiceError) {
        let zstdMagic: [UInt8] = [0x28, 0xb5, 0x2f, 0xfd]
        let skippable = prefix.count == 4 && prefix[0] & 0xf0 == 0x50 && prefix[1...] == [0x2a, 0x4d, 0x18]
        if prefix == zstdMagic || skippable {
            inner = try ZstdDecompress(limit: limit)
        } else {
            let inflate = try Inflate(format: .auto, limit: limit)
            if defersChecks { inflate.deferOutputChecks() }
            inner = inflate
        }
    }

    public func deferOutputChecks() {
        defersChecks = true
        (inner as? Inflate)?.deferOutputChecks()
    }

    public func takeOutputChecks() -> [OutputCheck] {
        (inner as? Inflate)?.takeOutputChecks() ?? []
    }

    public var outputNeedsChecks: Bool { (inner as? Inflate)?.outputNeedsChecks ?? false }

    /// Feeds the bytes read for detection to the chosen stage.
    private func feedPrefix(into output: UnsafeMutableRawBufferPointer) throws(SluiceError) -> Int {
        guard let inner, prefixFed < prefix.count else { return 0 }
        var produced = 0
        while prefixFed < prefix.count {
            let p = try prefix[prefixFed...].withUnsafeBytes { bytes in
                Result { () throws(SluiceError) in
                    try inner.process(bytes, into: UnsafeMutableRawBufferPointer(rebasing: output[produced...]))
                }
            }.get()
            prefixFed += p.consumed
            produced += p.produced
            if p.consumed == 0 && p.produced == 0 { break }
        }
        return produced
    }
}
