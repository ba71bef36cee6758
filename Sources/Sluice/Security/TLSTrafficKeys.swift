import CCrypto
import CSluiceEngines

/// The TLS 1.3 cipher suites sluice's record layer protects records with (RFC 8446 §B.4).
enum TLSSuite: Int32, Sendable {
    case aes128GCM = 0x1301
    case aes256GCM = 0x1302
    case chacha20Poly1305 = 0x1303

    var keyLength: Int { self == .aes128GCM ? 16 : 32 }
    /// The length of the suite's hash (and of its traffic secrets).
    var hashLength: Int { self == .aes256GCM ? 48 : 32 }
}

/// Whose AES-GCM seals and opens TLS records: sluice's own (`sluice_gcm`: VAES and VPCLMULQDQ
/// on 256-bit vectors, sixteen blocks a step, enciphered and hashed in one pass), where the CPU
/// has those instructions and it is the faster of the two there, else OpenSSL's EVP.
/// `SLUICE_AES_GCM` in the environment chooses: `openssl`, or `vaes` (where the CPU runs it).
/// ChaCha20-Poly1305 is always OpenSSL's.
package enum AESGCMEngine: String, Sendable, CaseIterable {
    case vector = "vaes"
    case openssl

    /// Whether this CPU runs the engine.
    package var isSupported: Bool { self == .openssl || sluice_gcm_available() != 0 }

    /// The engine new connections use, chosen once, at first use.
    package static let current: AESGCMEngine = choose(
        setting: environmentValue("SLUICE_AES_GCM"), supported: AESGCMEngine.vector.isSupported, measure: faster)

    /// The engine for `SLUICE_AES_GCM`'s value (any case; an unknown one is ignored): when it
    /// names none this CPU runs, what `measure` finds faster if sluice's own is `supported`.
    package static func choose(setting: String?, supported: Bool, measure: () -> AESGCMEngine) -> AESGCMEngine {
        switch setting?.lowercased() {
        case AESGCMEngine.openssl.rawValue?: return .openssl
        case AESGCMEngine.vector.rawValue? where supported: return .vector
        default: return supported ? measure() : .openssl
        }
    }

    /// Which of the two seals 16 KiB records faster on this machine: the best of three
    /// alternating batches of four records each (384 KiB in all, about 0.1 ms here). A newer
    /// OpenSSL on a CPU with 512-bit vectors may beat sluice's 256-bit code.
    package static func faster() -> AESGCMEngine {
        let secret = [UInt8](repeating: 7, count: TLSSuite.aes128GCM.hashLength)
        let keys = [AESGCMEngine.vector, .openssl].compactMap { engine in
            secret.withUnsafeBytes { TLSTrafficKeys(suite: .aes128GCM, secret: $0, encrypts: true, engine: engine) }
        }
        guard keys.count == 2, keys[0].engine == .vector else { return .openssl }
        let count = TLSRecordLayer.maxPlaintext
        let plaintext = UnsafeMutablePointer<UInt8>.allocate(capacity: count)
        let record = UnsafeMutablePointer<UInt8>.allocate(capacity: count + TLSRecordLayer.overhead)
        defer {
            plaintext.deallocate()
            record.deallocate()
        }
        plaintext.initialize(repeating: 0x5a, count: count)
        var best: [UInt64] = [.max, .max]
        for _ in 0..<3 {
            for (index, key) in keys.enumerated() {
                let start = monotonicNanoseconds()
                for _ in 0..<4 {
                    guard let nonce = key.nextNonce(),
                        key.seal(plaintext, count: count, type: 23, into: record, nonce: nonce) > 0
                    else { return .openssl }
                }
                best[index] = min(best[index], monotonicNanoseconds() - start)
            }
        }
        return best[0] <= best[1] ? .vector : .openssl
    }

    /// How `sluice --version` names it.
    package var summary: String {
        switch self {
        case .vector: return "sluice's own (VAES, VPCLMULQDQ)"
        case .openssl: return "OpenSSL's"
        }
    }
}

/// One direction's keys after the handshake (RFC 8446 §7.3): the traffic secret (kept for a
/// KeyUpdate), the AEAD context holding the key, the IV, and the sequence number of the next
/// record. Secrets, IV and key schedules are cleansed when replaced or freed.
final class TLSTrafficKeys {
    let suite: TLSSuite
    let encrypts: Bool
    let engine: AESGCMEngine
    /// The traffic secret (48 bytes of room), then the IV (12), then the next nonce (12).
    private let material: UnsafeMutablePointer<UInt8>
    private var context: Context

    /// The key, scheduled by the engine that seals and opens with it.
    private enum Context {
        /// An `EVP_CIPHER_CTX *`.
        case openssl(OpaquePointer)
        /// A `sluice_gcm *`.
        case vector(OpaquePointer)

        func free() {
            switch self {
            case .openssl(let context): EVP_CIPHER_CTX_free(context)
            case .vector(let key): sluice_gcm_free(key)
            }
        }
    }
    /// The sequence number of the next record (RFC 8446 §5.3): never reused.
    private(set) var sequence: UInt64 = 0

    private static let materialSize = 48 + 12 + 12

    /// Keys from `secret` (the suite's hash length), or nil when OpenSSL fails. `engine` is
    /// the AES-GCM to use where the suite is AES-GCM and the CPU runs it (else OpenSSL's).
    init?(suite: TLSSuite, secret: UnsafeRawBufferPointer, encrypts: Bool, engine: AESGCMEngine = .current) {
        guard secret.count == suite.hashLength, let base = secret.baseAddress else { return nil }
        self.suite = suite
        self.encrypts = encrypts
        self.engine = suite != .chacha20Poly1305 && engine.isSupported ? engine : .openssl
        material = .allocate(capacity: Self.materialSize)
        material.initialize(repeating: 0, count: Self.materialSize)
        UnsafeMutableRawPointer(material).copyMemory(from: base, byteCount: secret.count)
        guard let context = Self.derive(suite: suite, material: material, encrypts: encrypts, engine: self.engine)
        else {
            OPENSSL_cleanse(material, Self.materialSize)
            material.deallocate()
            return nil
        }
        self.context = context
    }

    deinit {
        context.free()
        OPENSSL_cleanse(material, Self.materialSize)
        material.deallocate()
    }

    /// The key and IV of the secret in `material` (the IV stored after it): a cipher context.
    private static func derive(
        suite: TLSSuite, material: UnsafeMutablePointer<UInt8>, encrypts: Bool, engine: AESGCMEngine
    ) -> Context? {
        var key = [UInt8](repeating: 0, count: 32)
        defer { key.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) } }
        let id = suite.rawValue
        guard sluice_hkdf_expand_label(id, material, suite.hashLength, "key", &key, suite.keyLength) == 1,
            sluice_hkdf_expand_label(id, material, suite.hashLength, "iv", material + 48, 12) == 1
        else { return nil }
        if engine == .vector {
            return sluice_gcm_new(key, suite.keyLength).map(Context.vector)
        }
        return sluice_aead_new(id, key, encrypts ? 1 : 0).map(Context.openssl)
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

    /// Seals one record at `record` with `nonce`: the header, `count` bytes of `plaintext`
    /// enciphered, then the inner content type `type` and the tag. The record's length, or 0.
    func seal(
        _ plaintext: UnsafePointer<UInt8>, count: Int, type: UInt8, into record: UnsafeMutablePointer<UInt8>,
        nonce: UnsafePointer<UInt8>
    ) -> Int {
        switch context {
        case .openssl(let context):
            return sluice_aead_seal(context, nonce, record, plaintext, count, type)
        case .vector(let key):
            let body = sluice_record_header(record, count)
            return sluice_gcm_seal(key, nonce, record, 5, plaintext, count, type, record + 5) == 1 ? 5 + body : 0
        }
    }

    /// Opens the record whose 5-byte header is at `header` and whose `length` bytes of body
    /// (the tag last) are at `ciphertext`, with `nonce`: all of the inner plaintext but its last
    /// byte to `out` (which may be `ciphertext`), the last byte to `last`. True when the tag
    /// checks out; when it does not, what was written to `out` is to be discarded.
    func open(
        header: UnsafePointer<UInt8>, ciphertext: UnsafePointer<UInt8>, length: Int,
        into out: UnsafeMutablePointer<UInt8>,
        last: UnsafeMutablePointer<UInt8>, nonce: UnsafePointer<UInt8>
    ) -> Bool {
        switch context {
        case .openssl(let context):
            return sluice_aead_open(context, nonce, header, ciphertext, length, out, last) == 1
        case .vector(let key):
            return length >= 17 && sluice_gcm_open(key, nonce, header, 5, ciphertext, length - 16, out, last) == 1
        }
    }

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
        guard let fresh = Self.derive(suite: suite, material: material, encrypts: encrypts, engine: engine) else {
            return false
        }
        context.free()
        context = fresh
        sequence = 0
        return true
    }
}
