import CSluiceEngines
import CZlib

/// A tap that computes a CRC-32 or Adler-32 of the bytes passing it, with zlib's `crc32` and
/// `adler32`, incrementally and without copying.
public final class Checksum: Tap {
    /// The checksum algorithm.
    public enum Kind: String, Sendable, CaseIterable {
        /// CRC-32 (ISO 3309, as in gzip, zip, PNG): zlib's `crc32`.
        case crc32
        /// Adler-32 (RFC 1950, as in zlib streams): zlib's `adler32`.
        case adler32
    }

    /// The algorithm.
    public let kind: Kind
    /// The checksum of the bytes observed so far (final once `finish()` was called).
    public private(set) var value: UInt32
    /// Bytes observed so far.
    public private(set) var count = 0
    /// Whether `finish()` was called.
    public private(set) var isFinished = false

    /// A checksum of nothing yet: 0 for CRC-32, 1 for Adler-32.
    public init(_ kind: Kind) {
        self.kind = kind
        value = Self.initialValue(kind)
    }

    /// Adds `bytes` to the checksum.
    public func observe(_ bytes: UnsafeRawBufferPointer) {
        value = Self.update(kind, value, bytes)
        count += bytes.count
    }

    /// Marks the value final.
    public func finish() {
        isFinished = true
    }

    /// Starts over, as if nothing had been observed.
    public func reset() {
        value = Self.initialValue(kind)
        count = 0
        isFinished = false
    }

    /// The checksum of `bytes`.
    public static func compute(_ kind: Kind, over bytes: UnsafeRawBufferPointer) -> UInt32 {
        update(kind, initialValue(kind), bytes)
    }

    /// The checksum of `bytes`.
    public static func compute(_ kind: Kind, over bytes: [UInt8]) -> UInt32 {
        bytes.withUnsafeBytes { compute(kind, over: $0) }
    }

    private static func initialValue(_ kind: Kind) -> UInt32 {
        switch kind {
        case .crc32: return UInt32(truncatingIfNeeded: CZlib.crc32(0, nil, 0))
        case .adler32: return UInt32(truncatingIfNeeded: CZlib.adler32(0, nil, 0))
        }
    }

    /// Continues `value` over `bytes`, in pieces of at most `maxPiece` bytes (what zlib's
    /// 32-bit length holds; smaller in tests).
    static func update(_ kind: Kind, _ value: UInt32, _ bytes: UnsafeRawBufferPointer, maxPiece: Int = Int(UInt32.max))
        -> UInt32
    {
        precondition(maxPiece > 0 && maxPiece <= Int(UInt32.max), "Checksum piece size out of range")
        guard let base = bytes.baseAddress?.assumingMemoryBound(to: Bytef.self) else { return value }
        var running = uLong(value)
        var offset = 0
        while offset < bytes.count {
            let length = UInt32(min(bytes.count - offset, maxPiece))
            switch kind {
            case .crc32: running = CZlib.crc32(running, base + offset, length)
            case .adler32: running = CZlib.adler32(running, base + offset, length)
            }
            offset += Int(length)
        }
        return UInt32(truncatingIfNeeded: running)
    }
}

/// gzip's CRC-32 with the fastest code at hand: ISA-L's `crc32_gzip_refl` (carry-less
/// multiplication, several times zlib's speed) where ISA-L is available, zlib's `crc32`
/// otherwise. The values are the same; `Checksum` stays on zlib.
enum CRC32 {
    /// Whether ISA-L computes it (decided once).
    static let usesISAL = CompressionEngine.isal.isAvailable

    /// Continues `crc` over `bytes`.
    static func update(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard usesISAL, let base = bytes.baseAddress else { return Checksum.update(.crc32, crc, bytes) }
        return sluice_isal_crc32(crc, base.assumingMemoryBound(to: UInt8.self), UInt64(bytes.count))
    }
}
