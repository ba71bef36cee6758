import CCrypto
import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// An incremental SHA-256 digest, wrapping libcrypto's EVP interface (`EVP_DigestInit_ex`,
/// `EVP_DigestUpdate`, `EVP_DigestFinal_ex` with `EVP_sha256()`). Used by one thread at a
/// time (a `DigestWorker` hands it from the loop to a worker and back).
public final class SHA256Digest: @unchecked Sendable {
    /// The size of a digest in bytes.
    public static let byteCount = 32

    private let context: OpaquePointer

    /// A digest of no bytes yet.
    public init() {
        guard let context = EVP_MD_CTX_new() else { preconditionFailure("EVP_MD_CTX_new: out of memory") }
        self.context = context
        let rc = EVP_DigestInit_ex(context, EVP_sha256(), nil)
        precondition(rc == 1, "EVP_DigestInit_ex(sha256) failed")
    }

    deinit { EVP_MD_CTX_free(context) }

    /// Adds `bytes` to the digest.
    public func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        let rc = EVP_DigestUpdate(context, base, bytes.count)
        precondition(rc == 1, "EVP_DigestUpdate failed")
    }

    /// Adds `bytes` to the digest.
    public func update<Bytes: Collection<UInt8>>(_ bytes: Bytes) {
        let array = Array(bytes)
        array.withUnsafeBytes { update($0) }
    }

    /// The 32-byte digest of everything added. The digest cannot be updated afterwards.
    public func finalize() -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Self.byteCount)
        var length: UInt32 = 0
        let rc = out.withUnsafeMutableBufferPointer { EVP_DigestFinal_ex(context, $0.baseAddress, &length) }
        precondition(rc == 1 && length == UInt32(Self.byteCount), "EVP_DigestFinal_ex failed")
        return out
    }

    /// The SHA-256 of `bytes`.
    public static func hash<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> [UInt8] {
        let digest = SHA256Digest()
        digest.update(bytes)
        return digest.finalize()
    }

    /// HMAC-SHA256 (RFC 2104) of `message` under `key`: the resume tokens' and SPAKE2's key
    /// confirmation (RFC 4231's vectors are in the tests).
    public static func authenticationCode(key: [UInt8], message: [UInt8]) -> [UInt8] {
        let block = 64
        var padded = key.count > block ? hash(key) : key
        padded += [UInt8](repeating: 0, count: block - padded.count)
        let inner = hash(padded.map { $0 ^ 0x36 } + message)
        return hash(padded.map { $0 ^ 0x5C } + inner)
    }

    /// Lower-case hexadecimal.
    public static func hex<Bytes: Collection<UInt8>>(_ digest: Bytes) -> String {
        Hex.encode(Array(digest))
    }
}
