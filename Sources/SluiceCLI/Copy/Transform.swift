import Sluice

/// `-z, --compress[=FORMAT][:LEVEL]`: the container and the level (gzip, zlib, deflate: 0–9,
/// default 6; zstd: 1–19, default 3).
struct CompressionSpec: Hashable, Sendable, CustomStringConvertible {
    /// The containers a compression stage writes.
    enum Format: String, Hashable, Sendable, CaseIterable {
        case gzip, zlib, deflate, zstd

        /// The levels the format takes.
        var levels: ClosedRange<Int> { self == .zstd ? ZstdCompress.levels : Deflate.levels }
        var defaultLevel: Int { self == .zstd ? ZstdCompress.defaultLevel : 6 }
    }

    static let levels = 0...9
    static let defaultLevel = 6

    var format: Format = .gzip
    var level: Int = defaultLevel

    /// Parses the attached value of `--compress`: nothing, `FORMAT`, `:LEVEL` or `FORMAT:LEVEL`.
    init(parsing value: String?, spelling: String = "--compress") throws(UsageError) {
        guard let value, !value.isEmpty else { return }
        let parts = value.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        let formatText = String(parts[0])
        if !formatText.isEmpty {
            guard let format = Format(rawValue: formatText) else {
                throw UsageError(
                    "\(spelling): unknown format '\(formatText)' (one of \(Format.allCases.map(\.rawValue).joined(separator: ", ")))"
                )
            }
            self.format = format
            self.level = format.defaultLevel
        }
        if parts.count == 2 {
            let levelText = parts[1]
            let range = format.levels
            guard levelText.count <= 2, levelText.allSatisfy(\.isASCII), let level = Int(levelText),
                range.contains(level)
            else {
                throw UsageError(
                    "\(spelling): level '\(levelText)' is not a number from \(range.lowerBound) to \(range.upperBound) for \(format.rawValue)"
                )
            }
            self.level = level
        }
    }

    init(format: Format = .gzip, level: Int? = nil) {
        self.format = format
        self.level = level ?? format.defaultLevel
    }

    /// Whether `word` reads as a value of `--compress` or `--decompress` (`gzip:1`, `zstd`,
    /// `auto`): written as a separate word after `-z`/`-d`, it became an operand.
    static func looksLikeValue(_ word: String) -> Bool {
        let parts = word.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard Format(rawValue: String(parts[0])) != nil || (parts.count == 1 && parts[0] == "auto") else {
            return false
        }
        return parts.count == 1 || (!parts[1].isEmpty && parts[1].allSatisfy { $0.isASCII && $0.isNumber })
    }

    var description: String { "\(format.rawValue):\(level)" }
}

/// `-d, --decompress[=FORMAT]`: the container expected, or `auto` (the default) to detect it.
struct DecompressionSpec: Hashable, Sendable, CustomStringConvertible {
    /// The containers a decompression stage reads (the library's `DecompressionFormat`).
    enum Format: String, Hashable, Sendable, CaseIterable {
        case auto, gzip, zlib, deflate, zstd
    }

    var format: Format = .auto

    init(parsing value: String?, spelling: String = "--decompress") throws(UsageError) {
        guard let value, !value.isEmpty else { return }
        guard let format = Format(rawValue: value) else {
            throw UsageError(
                "\(spelling): unknown format '\(value)' (one of \(Format.allCases.map(\.rawValue).joined(separator: ", ")))"
            )
        }
        self.format = format
    }

    init(format: Format = .auto) { self.format = format }

    var description: String { format.rawValue }
}

/// What happens to the bytes between source and destination.
enum Transform: Hashable, Sendable {
    case compress(CompressionSpec)
    case decompress(DecompressionSpec)

    /// The stages of the pipeline for `transform`: none, a compressor or a decompressor, each
    /// on `threads` worker threads (default: one per core; decompressing gzip on three or more,
    /// one of them checks the CRC-32s while another inflates). Throws 69 (EX_UNAVAILABLE) for
    /// zstd where this build or machine lacks it.
    static func stages(for transform: Transform?, threads: Int? = nil) throws(CLIError) -> [any Stage] {
        switch transform {
        case nil:
            return []
        case .compress(let spec):
            do {
                switch spec.format {
                case .zstd:
                    let stage = try ZstdCompress(level: spec.level, threads: threads)
                    return [OffloadedStage(stage)]
                case .gzip, .zlib, .deflate:
                    let format = CompressionFormat(rawValue: spec.format.rawValue)!
                    return [try ParallelDeflate(format: format, level: spec.level, threads: threads)]
                }
            } catch {
                throw CLIError(error, during: .copying(.stage(index: 0, name: spec.format.rawValue)))
            }
        case .decompress(let spec):
            let format = DecompressionFormat(rawValue: spec.format.rawValue)!
            do {
                let pool = threads.map { WorkerPool.pool(threads: $0) } ?? .shared
                return [OffloadedStage(try Decompressor(format: format), pool: pool)]
            } catch {
                throw CLIError(error, during: .copying(.stage(index: 0, name: spec.format.rawValue)))
            }
        }
    }

    /// True when the source carries the raw bytes (compressing); false when it carries the
    /// compressed ones (decompressing). For progress and the ratio.
    var sourceIsRaw: Bool {
        switch self {
        case .compress: return true
        case .decompress: return false
        }
    }
}
