import CCrypto
import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// SPAKE2 (RFC 9382), the suite P256-SHA256-HKDF-SHA256-HMAC-SHA256, on libcrypto's elliptic
/// curves: two parties who share a short code derive a strong key, and neither an eavesdropper
/// nor an active attacker learns anything that lets them test guesses offline — each guess
/// costs one run of the protocol with a party who holds the code.
///
/// A sends its share pA = x·P + w·M, B sends pB = y·P + w·N; each computes K (x·(pB − w·N), or
/// y·(pA − w·M)), the transcript TT of both identities, both shares, K and w, and from
/// SHA-256(TT) the shared key Ke and the confirmation keys; each then sends an HMAC of TT and
/// checks the other's. A wrong code gives different keys, and the confirmation says so.
///
/// Every received share is decoded with `EC_POINT_oct2point` (which refuses a point off the
/// curve) and refused when it is the identity, as is a K at the identity. Each scalar
/// multiplication is a call with a single scalar and a single point, so OpenSSL takes its
/// constant-time path (a call with two scalars takes the variable-time wNAF one).
///
/// ```swift
/// let w = SPAKE2.passwordScalar(code: Array("4-purple-sausages".utf8), salt: Array("nameplate 4".utf8))!
/// let a = try SPAKE2(role: .a, password: w, identityA: Array("sender".utf8), identityB: Array("receiver".utf8))
/// // send a.share, receive the peer's share
/// let exchange = try a.finish(peerShare: peerShare)
/// // send exchange.confirmation, receive the peer's confirmation
/// guard exchange.confirms(peerConfirmation) else { /* wrong code, or a guess */ }
/// let key = exchange.key
/// ```
public final class SPAKE2 {
    /// Which side of the exchange: the RFC's A (who sends pA) or B.
    public enum Role: Sendable {
        case a, b
    }

    /// Why an exchange cannot go on.
    public enum Failure: Error, Equatable, Sendable {
        /// The peer's share is not a point of P-256 other than the identity (or K came out as
        /// the identity): a peer that does not follow the protocol.
        case invalidShare
        /// The password scalar or a secret scalar given is not 32 bytes.
        case invalidScalar
        /// libcrypto failed (out of memory).
        case cryptoFailure
    }

    /// What a finished exchange gives: the key (the RFC's Ke, 16 bytes), the confirmation to
    /// send, and the check of the peer's.
    public struct Exchange: Sendable {
        /// The shared key, Ke: the first half of SHA-256(TT). Use it only once the peer's
        /// confirmation checked (`confirms`).
        public let key: [UInt8]
        /// This side's key confirmation: HMAC-SHA256 of TT under its confirmation key.
        public let confirmation: [UInt8]
        /// The transcript, TT (kept for the tests' vectors).
        package let transcript: [UInt8]
        private let expected: [UInt8]

        fileprivate init(key: [UInt8], confirmation: [UInt8], expected: [UInt8], transcript: [UInt8]) {
            self.key = key
            self.confirmation = confirmation
            self.expected = expected
            self.transcript = transcript
        }

        /// True when `peerConfirmation` is the peer's HMAC of the same transcript: both hold the
        /// same code. Compared in constant time.
        public func confirms(_ peerConfirmation: [UInt8]) -> Bool {
            guard peerConfirmation.count == expected.count else { return false }
            return peerConfirmation.withUnsafeBytes { a in
                expected.withUnsafeBytes { b in CRYPTO_memcmp(a.baseAddress, b.baseAddress, a.count) == 0 }
            }
        }
    }

    /// Bytes of a share: an uncompressed SEC1 point of P-256.
    public static let shareBytes = 65
    /// Bytes of a confirmation: an HMAC-SHA256.
    public static let confirmationBytes = 32
    /// Bytes of a scalar (the password's w, a secret x or y): P-256's order is 256 bits.
    public static let scalarBytes = 32

    /// The RFC's M and N for P-256, compressed (generated from the seeds "1.2.840.10045.3.1.7
    /// point generation seed (M)" and "(N)"; nobody knows their discrete logarithms).
    static let pointM: [UInt8] = Hex.decode("02886e2f97ace46e55ba9dd7242579f2993b64e16ef3dcab95afd497333d8fa12f") ?? []
    static let pointN: [UInt8] = Hex.decode("03d8bbd6c639c62937b04d997f38c3770719c629d7014d49a24b4f98baa1292b49") ?? []

    /// This side's share, pA or pB: send it to the peer.
    public private(set) var share: [UInt8] = []
    private let role: Role
    private let identityA: [UInt8]
    private let identityB: [UInt8]
    private let additionalData: [UInt8]
    private let passwordBytes: [UInt8]
    private let group: OpaquePointer
    private let order: OpaquePointer
    private let context: OpaquePointer
    private let password: OpaquePointer
    private let secret: OpaquePointer

    /// Starts an exchange: a secret scalar from OpenSSL's CSPRNG (`secretScalar` only for the
    /// RFC's test vectors), and this side's share. `password` is w, 32 bytes big-endian below
    /// the group's order (`passwordScalar(code:salt:)` makes it from a code).
    public init(
        role: Role, password: [UInt8], identityA: [UInt8], identityB: [UInt8], additionalData: [UInt8] = [],
        secretScalar: [UInt8]? = nil
    ) throws(Failure) {
        guard password.count == Self.scalarBytes, secretScalar.map({ $0.count == Self.scalarBytes }) ?? true else {
            throw .invalidScalar
        }
        guard let group = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1) else { throw .cryptoFailure }
        guard let context = BN_CTX_new(), let order = BN_new(), let w = BN_secure_new(), let x = BN_secure_new()
        else {
            EC_GROUP_free(group)
            throw .cryptoFailure
        }
        (self.role, self.identityA, self.identityB, self.additionalData) = (role, identityA, identityB, additionalData)
        (self.group, self.context, self.order, self.password, self.secret) = (group, context, order, w, x)
        passwordBytes = password
        guard EC_GROUP_get_order(group, order, context) == 1, BN_bin2bn(password, Int32(password.count), w) != nil
        else { throw .cryptoFailure }
        guard BN_cmp(w, order) < 0 else { throw .invalidScalar }
        if let secretScalar {
            guard BN_bin2bn(secretScalar, Int32(secretScalar.count), x) != nil else { throw .cryptoFailure }
            guard BN_cmp(x, order) < 0 else { throw .invalidScalar }
        } else {
            // x in [1, order): BN_priv_rand_range gives [0, order); 0 is redrawn.
            repeat {
                guard BN_priv_rand_range(x, order) == 1 else { throw .cryptoFailure }
            } while BN_is_zero(x) == 1
        }
        // pA = x·P + w·M (pB = y·P + w·N): two single-scalar multiplications, then a sum.
        let blind = role == .a ? Self.pointM : Self.pointN
        guard let generatorPart = multiply(generatorBy: x), let blinding = try decode(blind),
            let blindPart = multiply(blinding, by: w), let sum = EC_POINT_new(group)
        else { throw .cryptoFailure }
        defer { [generatorPart, blinding, blindPart, sum].forEach { EC_POINT_free($0) } }
        guard EC_POINT_add(group, sum, generatorPart, blindPart, context) == 1, let encoded = encode(sum) else {
            throw .cryptoFailure
        }
        share = encoded
    }

    deinit {
        BN_clear_free(secret)
        BN_clear_free(password)
        BN_free(order)
        BN_CTX_free(context)
        EC_GROUP_free(group)
    }

    /// Takes the peer's share and derives the key and both confirmations. Throws
    /// `invalidShare` for a share that is not a point of the curve other than the identity.
    public func finish(peerShare: [UInt8]) throws(Failure) -> Exchange {
        guard peerShare.count == Self.shareBytes, peerShare.first == 4 else { throw .invalidShare }
        guard let peer = try decode(peerShare) else { throw .invalidShare }
        defer { EC_POINT_free(peer) }
        guard EC_POINT_is_at_infinity(group, peer) == 0 else { throw .invalidShare }
        // K = x·(pB − w·N) for A, y·(pA − w·M) for B.
        let unblind = role == .a ? Self.pointN : Self.pointM
        guard let blinding = try decode(unblind), let blindPart = multiply(blinding, by: password),
            let difference = EC_POINT_new(group)
        else { throw .cryptoFailure }
        defer { [blinding, blindPart, difference].forEach { EC_POINT_free($0) } }
        guard EC_POINT_invert(group, blindPart, context) == 1,
            EC_POINT_add(group, difference, peer, blindPart, context) == 1,
            let k = multiply(difference, by: secret)
        else { throw .cryptoFailure }
        defer { EC_POINT_free(k) }
        guard EC_POINT_is_at_infinity(group, k) == 0 else { throw .invalidShare }
        guard let kBytes = encode(k) else { throw .cryptoFailure }

        let (pA, pB) = role == .a ? (share, peerShare) : (peerShare, share)
        var transcript: [UInt8] = []
        for field in [identityA, identityB, pA, pB, kBytes, passwordBytes] {
            withUnsafeBytes(of: UInt64(field.count).littleEndian) { transcript += $0 }
            transcript += field
        }
        let hashed = SHA256Digest.hash(transcript)
        let (ke, ka) = (Array(hashed[0..<16]), Array(hashed[16..<32]))
        var confirmationKeys = [UInt8](repeating: 0, count: 32)
        let info = Array("ConfirmationKeys".utf8) + additionalData
        let salt: [UInt8] = [0]  // a valid pointer; its length is 0: HKDF's salt is empty
        guard sluice_hkdf_sha256(ka, ka.count, salt, 0, info, info.count, &confirmationKeys, 32) == 1 else {
            throw .cryptoFailure
        }
        let macA = SHA256Digest.authenticationCode(key: Array(confirmationKeys[0..<16]), message: transcript)
        let macB = SHA256Digest.authenticationCode(key: Array(confirmationKeys[16..<32]), message: transcript)
        let (mine, theirs) = role == .a ? (macA, macB) : (macB, macA)
        return Exchange(key: ke, confirmation: mine, expected: theirs, transcript: transcript)
    }

    /// scrypt's cost for one lane of `passwordScalar`: N = 2^13, r = 8, p = 1 (8 MiB).
    static let scryptLogN = 13

    /// w from a code: two scrypt lanes (each N = 2^13, r = 8, p = 1: 8 MiB), salted with `salt`
    /// and the lane's number, worked out at the same time on two threads where there are two
    /// cores; HKDF-SHA256 of both to 48 bytes, reduced modulo the group's order (the RFC's
    /// MHF(pw) mod p; 128 bits beyond the order's make the reduction's bias negligible). The
    /// work per guess is that of one N = 2^14 scrypt (about 40 ms of a core here); the wait is
    /// half of it on two cores (about 20 ms). Nil when libcrypto fails (out of memory).
    ///
    /// The stretching is defence in depth: SPAKE2 gives an eavesdropper or an active attacker
    /// nothing to test guesses against offline, so each guess costs a run of the protocol
    /// (and a burnt nameplate) however cheap w is to compute.
    public static func passwordScalar(code: [UInt8], salt: [UInt8]) -> [UInt8]? {
        let lanes = Mutex<[[UInt8]?]>([nil, nil])
        DispatchQueue.concurrentPerform(iterations: 2) { lane in
            var out = [UInt8](repeating: 0, count: 32)
            let laneSalt = salt + [0, UInt8(lane)]
            let ok = code.withUnsafeBufferPointer { codeBytes in
                codeBytes.withMemoryRebound(to: CChar.self) { codeChars in
                    EVP_PBE_scrypt(
                        codeChars.baseAddress, code.count, laneSalt, laneSalt.count, 1 << scryptLogN, 8, 1, 32 << 20,
                        &out, out.count)
                }
            }
            lanes.withLock { $0[lane] = ok == 1 ? out : nil }
        }
        let results = lanes.withLock { $0 }
        guard let first = results[0], let second = results[1] else { return nil }
        let lanesBytes = first + second
        let info = Array("sluice code scalar v2".utf8)
        var stretched = [UInt8](repeating: 0, count: 48)
        let ok = sluice_hkdf_sha256(lanesBytes, lanesBytes.count, salt, salt.count, info, info.count, &stretched, 48)
        guard ok == 1, let group = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1) else { return nil }
        defer { EC_GROUP_free(group) }
        guard let context = BN_CTX_new(), let order = BN_new(), let raw = BN_secure_new(), let w = BN_secure_new()
        else { return nil }
        defer {
            BN_CTX_free(context)
            BN_free(order)
            BN_clear_free(raw)
            BN_clear_free(w)
        }
        var out = [UInt8](repeating: 0, count: scalarBytes)
        guard EC_GROUP_get_order(group, order, context) == 1, BN_bin2bn(stretched, 48, raw) != nil,
            BN_nnmod(w, raw, order, context) == 1, BN_bn2binpad(w, &out, Int32(scalarBytes)) == Int32(scalarBytes)
        else { return nil }
        return out
    }

    /// `scalar`·P, with P the group's generator.
    private func multiply(generatorBy scalar: OpaquePointer) -> OpaquePointer? {
        guard let out = EC_POINT_new(group) else { return nil }
        guard EC_POINT_mul(group, out, scalar, nil, nil, context) == 1 else {
            EC_POINT_free(out)
            return nil
        }
        return out
    }

    /// `scalar`·`point`.
    private func multiply(_ point: OpaquePointer, by scalar: OpaquePointer) -> OpaquePointer? {
        guard let out = EC_POINT_new(group) else { return nil }
        guard EC_POINT_mul(group, out, nil, point, scalar, context) == 1 else {
            EC_POINT_free(out)
            return nil
        }
        return out
    }

    /// A point from its SEC1 encoding; nil when it is not on the curve (or not an encoding).
    private func decode(_ bytes: [UInt8]) throws(Failure) -> OpaquePointer? {
        guard let point = EC_POINT_new(group) else { throw .cryptoFailure }
        guard EC_POINT_oct2point(group, point, bytes, bytes.count, context) == 1 else {
            EC_POINT_free(point)
            return nil
        }
        return point
    }

    /// The uncompressed SEC1 encoding of `point` (65 bytes).
    private func encode(_ point: OpaquePointer) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: Self.shareBytes)
        let n = EC_POINT_point2oct(group, point, POINT_CONVERSION_UNCOMPRESSED, &out, out.count, context)
        return n == Self.shareBytes ? out : nil
    }
}
