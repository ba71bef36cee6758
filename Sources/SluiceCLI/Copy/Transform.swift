import Sluice

/// `-z, --compress[=FORMAT][:LEVEL]`: the container and the zlib level (0–9, default 6).
struct CompressionSpec: Hashable, Sendable, CustomStringConvertible {
    /// The containers a compression stage writes (the library's `CompressionFormat`).
    enum Format: String, Hashable, Sendable, CaseIterable {
        case gzip, zlib, deflate
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
        }
        if parts.count == 2 {
            let levelText = parts[1]
            guard levelText.count == 1, let level = Int(levelText), Self.levels.contains(level) else {
                throw UsageError("\(spelling): level '\(levelText)' is not a number from 0 to 9")
            }
            self.level = level
        }
    }

    init(format: Format = .gzip, level: Int = defaultLevel) {
        self.format = format
        self.level = level
    }

    var description: String { "\(format.rawValue):\(level)" }
}

/// `-d, --decompress[=FORMAT]`: the container expected, or `auto` (the default) to detect it.
struct DecompressionSpec: Hashable, Sendable, CustomStringConvertible {
    /// The containers a decompression stage reads (the library's `DecompressionFormat`).
    enum Format: String, Hashable, Sendable, CaseIterable {
        case auto, gzip, zlib, deflate
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

    /// The stages of the pipeline for `transform`: none, a compressor or a decompressor.
    /// Throws 69 (EX_UNAVAILABLE) while the zlib stages are not built in.
    static func stages(for transform: Transform?) throws(CLIError) -> [any Stage] {
        switch transform {
        case nil:
            return []
        case .compress(let spec):
            let format = CompressionFormat(rawValue: spec.format.rawValue)!
            do {
                return [try Deflate(format: format, level: spec.level)]
            } catch {
                throw CLIError(error, during: .copying(.stage(index: 0, name: format.rawValue)))
            }
        case .decompress(let spec):
            let format = DecompressionFormat(rawValue: spec.format.rawValue)!
            do {
                return [try Inflate(format: format)]
            } catch {
                throw CLIError(error, during: .copying(.stage(index: 0, name: "inflate")))
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
