import CCrypto

/// The TLS 1.3 cipher suites sluice's record layer protects records with (RFC 8446 §B.4).
enum TLSSuite: Int32, Sendable {
    case aes128GCM = 0x1301
    case aes256GCM = 0x1302
    case chacha20Poly1305 = 0x1303

    var keyLength: Int { self == .aes128GCM ? 16 : 32 }
    /// The length of the suite's hash (and of its traffic secrets).
    var hashLength: Int { self == .aes256GCM ? 48 : 32 }
}

/// One direction's keys after the handshake (RFC 8446 §7.3): the traffic secret (kept for a
/// KeyUpdate), the AEAD context holding the key, the IV, and the sequence number of the next
/// record. Secrets and IV are cleansed when replaced or freed.
final class TLSTrafficKeys {
    let suite: TLSSuite
    let encrypts: Bool
    /// The traffic secret (48 bytes of room), then the IV (12), then the next nonce (12).
    private let material: UnsafeMutablePointer<UInt8>
    private var context: OpaquePointer
    /// The sequence number of the next record (RFC 8446 §5.3): never reused.
    private(set) var sequence: UInt64 = 0

    private static let materialSize = 48 + 12 + 12

    /// Keys from `secret` (the suite's hash length), or nil when OpenSSL fails.
    init?(suite: TLSSuite, secret: UnsafeRawBufferPointer, encrypts: Bool) {
        guard secret.count == suite.hashLength, let base = secret.baseAddress else { return nil }
        self.suite = suite
        self.encrypts = encrypts
        material = .allocate(capacity: Self.materialSize)
        material.initialize(repeating: 0, count: Self.materialSize)
        UnsafeMutableRawPointer(material).copyMemory(from: base, byteCount: secret.count)
        guard let context = Self.derive(suite: suite, material: material, encrypts: encrypts) else {
            OPENSSL_cleanse(material, Self.materialSize)
            material.deallocate()
            return nil
        }
        self.context = context
    }

    deinit {
        EVP_CIPHER_CTX_free(context)
        OPENSSL_cleanse(material, Self.materialSize)
        material.deallocate()
    }

    /// The key and IV of the secret in `material` (the IV stored after it): a cipher context.
    private static func derive(suite: TLSSuite, material: UnsafeMutablePointer<UInt8>, encrypts: Bool)
        -> OpaquePointer?
    {
        var key = [UInt8](repeating: 0, count: 32)
        defer { key.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) } }
        let id = suite.rawValue
        guard sluice_hkdf_expand_label(id, material, suite.hashLength, "key", &key, suite.keyLength) == 1,
            sluice_hkdf_expand_label(id, material, suite.hashLength, "iv", material + 48, 12) == 1
        else { return nil }
        return sluice_aead_new(id, key, encrypts ? 1 : 0)
    }

    /// The nonce of the next record (the IV XOR the sequence number, RFC 8446 §5.3), and the
    /// sequence number moved on; nil once 2^64 - 1 records went with these keys.
    func nextNonce() -> UnsafePointer<UInt8>? {
        guard sequence < UInt64.max else { return nil }
        let nonce = material + 60
        nonce.update(from: material + 48, count: 12)
        for i in 0..<8 { nonce[11 - i] ^= UInt8(truncatingIfNeeded: sequence >> (8 * UInt64(i))) }
        sequence += 1
        return UnsafePointer(nonce)
    }

    /// The cipher context (`EVP_CIPHER_CTX *`) for the record the last nonce is for.
    var cipher: OpaquePointer { context }

    /// The next generation of keys (KeyUpdate, RFC 8446 §4.6.3, §7.2): the secret becomes
    /// HKDF-Expand-Label(secret, "traffic upd", "", Hash.length), the sequence number 0.
    func update() -> Bool {
        let length = suite.hashLength
        var next = [UInt8](repeating: 0, count: 48)
        defer { next.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) } }
        guard sluice_hkdf_expand_label(suite.rawValue, material, length, "traffic upd", &next, length) == 1 else {
            return false
        }
        material.update(from: next, count: length)
        guard let fresh = Self.derive(suite: suite, material: material, encrypts: encrypts) else { return false }
        EVP_CIPHER_CTX_free(context)
        context = fresh
        sequence = 0
        return true
    }
}
