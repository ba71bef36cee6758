import CSluiceEngines
import FoundationEssentials
import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The digest a transfer checks every file and range with, agreed in HELLO: XXH3-128 where both
/// ends have libxxhash (0.8 or later), SHA-256 otherwise.
///
/// The digest guards against what TLS cannot see — a disk, a memory or a program that changed
/// bytes on the way in or out — and lets a resumed file be checked whole. It is not what keeps a
/// network attacker out: over TLS every byte is authenticated already, and on an `--insecure`
/// link an attacker who can change the data can change a digest sent beside it, whichever it
/// is. So the faster one wins where both ends have it, as rsync (3.2) chose XXH3-128 for its
/// whole-file checks; SHA-256 (libcrypto) stays the one every sluice speaks.
public enum TransferDigest: String, Sendable, CaseIterable, CustomStringConvertible {
    case sha256
    case xxh128

    /// Its name in messages and `--stats`.
    public var description: String {
        switch self {
        case .sha256: return "SHA-256"
        case .xxh128: return "XXH3-128"
        }
    }

    /// The size of a digest in bytes.
    public var byteCount: Int {
        switch self {
        case .sha256: return 32
        case .xxh128: return 16
        }
    }

    /// The capability that offers it in HELLO.
    var capability: String {
        switch self {
        case .sha256: return Wire.Capability.sha256
        case .xxh128: return Wire.Capability.xxh128
        }
    }

    /// Whether this process can compute it: SHA-256 always; XXH3-128 when libxxhash loads and
    /// `SLUICE_ENGINES`, when set, lists `xxhash`.
    public var isAvailable: Bool {
        switch self {
        case .sha256: return true
        case .xxh128: return Self.xxhashAllowed && sluice_xxh_load() != 0
        }
    }

    /// The library's version, when it is not libcrypto's SHA-256 and is available.
    public var libraryVersion: String? {
        guard self == .xxh128, isAvailable else { return nil }
        return String(cString: sluice_xxh_version())
    }

    /// The digests this process offers, the preferred first.
    public static var offered: [TransferDigest] { [.xxh128, .sha256].filter(\.isAvailable) }

    /// The first of `offered` that the peer's capabilities include; nil when none is.
    static func agreed(offered: [TransferDigest], peer capabilities: Set<String>) -> TransferDigest? {
        offered.first { capabilities.contains($0.capability) }
    }

    private static let xxhashAllowed: Bool = {
        environmentList("SLUICE_ENGINES")?.contains("xxhash") ?? true
    }()
}

/// An incremental digest of either kind. Used by one thread at a time (a `DigestWorker` hands it
/// from the loop to a worker and back).
public final class FileDigest: @unchecked Sendable {
    public let algorithm: TransferDigest
    private let sha256: SHA256Digest?
    private let xxh128: UnsafeMutableRawPointer?

    /// A digest of no bytes yet. `algorithm` is available (an internal invariant: only a digest
    /// this process offered can have been agreed).
    public init(_ algorithm: TransferDigest) {
        self.algorithm = algorithm
        switch algorithm {
        case .sha256:
            sha256 = SHA256Digest()
            xxh128 = nil
        case .xxh128:
            guard let state = sluice_xxh128_create() else {
                preconditionFailure("XXH3-128 asked for without libxxhash, or out of memory")
            }
            sha256 = nil
            xxh128 = state
        }
    }

    deinit { sluice_xxh128_free(xxh128) }

    /// Adds `bytes` to the digest.
    public func update(_ bytes: UnsafeRawBufferPointer) {
        if let sha256 {
            sha256.update(bytes)
        } else if let xxh128, let base = bytes.baseAddress {
            sluice_xxh128_update(xxh128, base, bytes.count)
        }
    }

    /// Adds `bytes` to the digest.
    public func update<Bytes: Collection<UInt8>>(_ bytes: Bytes) {
        Array(bytes).withUnsafeBytes { update($0) }
    }

    /// The digest of everything added (`algorithm.byteCount` bytes).
    public func finalize() -> [UInt8] {
        if let sha256 { return sha256.finalize() }
        var out = [UInt8](repeating: 0, count: 16)
        if let xxh128 { out.withUnsafeMutableBufferPointer { sluice_xxh128_digest(xxh128, $0.baseAddress) } }
        return out
    }

    /// The digest of `bytes`.
    public static func hash<Bytes: Collection<UInt8>>(_ algorithm: TransferDigest, _ bytes: Bytes) -> [UInt8] {
        let digest = FileDigest(algorithm)
        digest.update(bytes)
        return digest.finalize()
    }
}

extension FileDigest {
    /// Adds the bytes `start ..< end` of the file `fd` (up to its end when `end` is nil), read
    /// with `pread` (`retryingOnInterrupt`) through a buffer of `bufferSize` bytes; the
    /// descriptor's file offset is not used. With `sparseSize` (the file's size, and an `end`),
    /// what the file system says is a hole is hashed as the zeros it reads as, not read
    /// (`Delta.readSparse`). False when a read fails, or the file ends before `end`: the digest
    /// then holds part of them.
    ///
    /// The one way a file is hashed from disk: the sender's and the receiver's `--checksum`, the
    /// bytes held from an interrupted transfer (`DigestWorker.hashRange`, `HeldCheck`), a ranged
    /// file read back whole, a parallel sender's whole-file digest, a delta's held prefix.
    func update(
        readingFrom fd: Int32, from start: UInt64 = 0, to end: UInt64?, sparseSize: UInt64? = nil,
        bufferSize: Int = 1 << 20
    ) -> Bool {
        if let end, end <= start { return true }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, bufferSize), alignment: 64)
        defer { buffer.deallocate() }
        var position = start
        while end.map({ position < $0 }) ?? true {
            let want = Int(min(UInt64(buffer.count), (end ?? .max) - position))
            let piece = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want])
            var count = want
            if let size = sparseSize, end != nil {
                guard Delta.readSparse(fd, into: piece, at: position, size: size) else { return false }
            } else {
                guard let at = fileOffset(position), let base = piece.baseAddress else { return false }
                count = retryingOnInterrupt { pread(fd, base, want, at) }
                if count == 0 && end == nil { return true }
                guard count > 0 else { return false }
            }
            update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            position += UInt64(count)
        }
        return true
    }

    /// The `algorithm` digest of the bytes `start ..< end` of the file `fd` (up to its end when
    /// `end` is nil), as `update(readingFrom:)` reads them; nil when they cannot be read.
    static func hash(_ algorithm: TransferDigest, of fd: Int32, from start: UInt64 = 0, to end: UInt64?)
        -> [UInt8]?
    {
        let digest = FileDigest(algorithm)
        return digest.update(readingFrom: fd, from: start, to: end) ? digest.finalize() : nil
    }
}
