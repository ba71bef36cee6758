import CZlib

/// The container a `Deflate` stage writes: chosen with `--compress=gzip|zlib|deflate`.
///
/// Parse one from the command line with `CompressionFormat(rawValue:)`.
public enum CompressionFormat: String, Sendable, CaseIterable {
    /// RFC 1952: a gzip member (header, deflate data, CRC-32 and size trailer), what `gzip` and
    /// `pigz` read and write.
    case gzip
    /// RFC 1950: a two-byte header, deflate data and an Adler-32 trailer.
    case zlib
    /// RFC 1951: raw deflate data, no header and no checksum.
    case deflate

    /// The `windowBits` argument of `deflateInit2`/`inflateInit2` that selects this container
    /// with a 32 KiB window.
    var windowBits: Int32 {
        switch self {
        case .gzip: return MAX_WBITS + 16
        case .zlib: return MAX_WBITS
        case .deflate: return -MAX_WBITS
        }
    }
}

/// The container an `Inflate` stage expects: chosen with `--decompress=auto|gzip|zlib|deflate`.
///
/// Parse one from the command line with `DecompressionFormat(rawValue:)`.
public enum DecompressionFormat: String, Sendable, CaseIterable {
    /// Detect the container from the first bytes: zstd (a frame's or a skippable frame's magic
    /// number, with `Decompressor`), gzip (`1f 8b`), zlib (a valid RFC 1950 header), otherwise
    /// raw deflate.
    case auto
    /// RFC 1952 gzip, one member or several concatenated ones (`cat a.gz b.gz`).
    case gzip
    /// RFC 1950 zlib.
    case zlib
    /// RFC 1951 raw deflate.
    case deflate
    /// RFC 8878 zstd frames (optional engine: `CompressionEngine.zstd`).
    case zstd

    /// The format that decodes what a `Deflate` stage of `format` writes.
    public init(_ format: CompressionFormat) {
        switch format {
        case .gzip: self = .gzip
        case .zlib: self = .zlib
        case .deflate: self = .deflate
        }
    }

    /// The fixed deflate container, or nil for `auto` (and `zstd`, which `Inflate` refuses).
    var fixed: CompressionFormat? {
        switch self {
        case .auto: return nil
        case .gzip: return .gzip
        case .zlib: return .zlib
        case .deflate: return .deflate
        case .zstd: return nil
        }
    }
}
