import CCrypto
import CSluiceEngines
import TestThreads
import Testing

@testable import Sluice

/// sluice's own AES-GCM (`sluice_gcm`, VAES and VPCLMULQDQ) against OpenSSL's on the same keys,
/// nonces, additional data and plaintexts: the same ciphertext and tag to the byte, its own
/// records opened (in place too), and every altered byte refused. Runs where the CPU has the
/// instructions (elsewhere nothing uses the code).
@Suite(.enabled(if: AESGCMEngine.vector.isSupported, "this CPU lacks VAES or VPCLMULQDQ"), .ownThreads)
struct AESGCMTests {
    /// A deterministic stream of bytes for keys, nonces and data.
    struct Bytes {
        var state: UInt64
        mutating func next(_ count: Int) -> [UInt8] {
            (0..<count).map { _ in
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                return UInt8(truncatingIfNeeded: state >> 33)
            }
        }
        mutating func below(_ bound: Int) -> Int { Int(next(4).reduce(0) { $0 << 8 | UInt32($1) } % UInt32(bound)) }
    }

    /// OpenSSL's AES-GCM of `plaintext` (ciphertext, then the 16-byte tag).
    static func openssl(key: [UInt8], nonce: [UInt8], aad: [UInt8], plaintext: [UInt8]) throws -> [UInt8] {
        let context = try #require(EVP_CIPHER_CTX_new())
        defer { EVP_CIPHER_CTX_free(context) }
        let cipher = key.count == 16 ? EVP_aes_128_gcm() : EVP_aes_256_gcm()
        #expect(EVP_EncryptInit_ex(context, cipher, nil, key, nonce) == 1)
        var n: Int32 = 0
        if !aad.isEmpty { #expect(EVP_EncryptUpdate(context, nil, &n, aad, Int32(aad.count)) == 1) }
        var out = [UInt8](repeating: 0, count: plaintext.count + 16)
        if !plaintext.isEmpty { #expect(EVP_EncryptUpdate(context, &out, &n, plaintext, Int32(plaintext.count)) == 1) }
        var tail = [UInt8](repeating: 0, count: 16)
        #expect(EVP_EncryptFinal_ex(context, &tail, &n) == 1)
        out.withUnsafeMutableBufferPointer { buffer in
            _ = EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, 16, buffer.baseAddress! + plaintext.count)
        }
        return out
    }

    /// Ours: `plaintext` but its last byte, then that byte as the trailer; with a canary after.
    static func own(key: OpaquePointer, nonce: [UInt8], aad: [UInt8], plaintext: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0xA5, count: plaintext.count + 16 + 1)
        let sealed = plaintext.withUnsafeBufferPointer { p in
            sluice_gcm_seal(key, nonce, aad, aad.count, p.baseAddress!, p.count - 1, p[p.count - 1], &out)
        }
        #expect(sealed == 1)
        #expect(out.last == 0xA5, "a byte written past the tag")
        return Array(out.dropLast())
    }

    /// Opens `record` (ciphertext and tag): the plaintext, or nil when refused.
    static func open(key: OpaquePointer, nonce: [UInt8], aad: [UInt8], record: [UInt8]) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: record.count - 16)
        var last: UInt8 = 0
        let ok = record.withUnsafeBufferPointer { r in
            sluice_gcm_open(key, nonce, aad, aad.count, r.baseAddress!, r.count - 16, &out, &last)
        }
        guard ok == 1 else { return nil }
        out[out.count - 1] = last
        return out
    }

    /// Every length from 1 to 700 bytes (across the sixteen- and eight-block steps and the tail),
    /// then lengths around each 128-byte boundary of a full record (where a sixteen-block step
    /// ends, or an eight-block one follows it) and a few long ones, with both key sizes and
    /// additional data of 0 to 40 bytes: the same bytes as OpenSSL's, and opened back.
    @Test func matchesOpenSSL() throws {
        var bytes = Bytes(state: 52)
        var lengths = Array(1...700)
        for step in stride(from: 128, through: 16640, by: 128) { lengths += [step - 1, step, step + 1] }
        lengths += [16384, 16385, 16401, 65536 + 17, 300_001]
        for (index, length) in lengths.enumerated() {
            let keyBytes = bytes.next(index % 2 == 0 ? 16 : 32)
            let nonce = bytes.next(12)
            let aad = bytes.next(index % 3 == 0 ? 5 : bytes.below(41))
            let plaintext = bytes.next(length)
            let key = try #require(sluice_gcm_new(keyBytes, keyBytes.count))
            defer { sluice_gcm_free(key) }
            let theirs = try Self.openssl(key: keyBytes, nonce: nonce, aad: aad, plaintext: plaintext)
            let ours = Self.own(key: key, nonce: nonce, aad: aad, plaintext: plaintext)
            try #require(ours == theirs, "length \(length), key \(keyBytes.count * 8) bits, aad \(aad.count)")
            try #require(Self.open(key: key, nonce: nonce, aad: aad, record: ours) == plaintext, "length \(length)")
        }
    }

    /// A record opened where it lies (the record layer's in-place case).
    @Test func opensInPlace() throws {
        var bytes = Bytes(state: 7)
        let keyBytes = bytes.next(16)
        let key = try #require(sluice_gcm_new(keyBytes, 16))
        defer { sluice_gcm_free(key) }
        for length in [1, 2, 129, 257, 385, 16385] {
            let nonce = bytes.next(12)
            let plaintext = bytes.next(length)
            var record = Self.own(key: key, nonce: nonce, aad: [1, 2, 3, 4, 5], plaintext: plaintext)
            var last: UInt8 = 0
            let ok = record.withUnsafeMutableBufferPointer { r in
                sluice_gcm_open(key, nonce, [1, 2, 3, 4, 5], 5, r.baseAddress!, length, r.baseAddress!, &last)
            }
            #expect(ok == 1)
            #expect(Array(record[..<(length - 1)]) == Array(plaintext.dropLast()) && last == plaintext.last)
        }
    }

    /// Any bit flipped anywhere (ciphertext, tag), another nonce, other additional data, or a
    /// record cut short: refused.
    @Test func refusesWhatWasAltered() throws {
        var bytes = Bytes(state: 11)
        for keyLength in [16, 32] {
            let keyBytes = bytes.next(keyLength)
            let key = try #require(sluice_gcm_new(keyBytes, keyLength))
            defer { sluice_gcm_free(key) }
            let nonce = bytes.next(12)
            let aad = bytes.next(5)
            let plaintext = bytes.next(300)
            let record = Self.own(key: key, nonce: nonce, aad: aad, plaintext: plaintext)
            #expect(Self.open(key: key, nonce: nonce, aad: aad, record: record) == plaintext)
            for position in record.indices {
                var altered = record
                altered[position] ^= UInt8(1 << (position % 8))
                let refused = Self.open(key: key, nonce: nonce, aad: aad, record: altered) == nil
                #expect(refused, "byte \(position) altered, and the record was opened")
            }
            var otherNonce = nonce
            otherNonce[11] ^= 1
            #expect(Self.open(key: key, nonce: otherNonce, aad: aad, record: record) == nil)
            #expect(Self.open(key: key, nonce: nonce, aad: aad + [0], record: record) == nil)
            #expect(Self.open(key: key, nonce: nonce, aad: aad, record: Array(record.dropFirst())) == nil)
        }
    }

    /// Key lengths other than AES-128's and AES-256's are refused, and so is an empty record.
    @Test func refusesWhatIsNotAESGCM() throws {
        #expect(sluice_gcm_new([UInt8](repeating: 1, count: 24), 24) == nil)
        #expect(sluice_gcm_new([UInt8](repeating: 1, count: 15), 15) == nil)
        let key = try #require(sluice_gcm_new([UInt8](repeating: 1, count: 16), 16))
        defer { sluice_gcm_free(key) }
        var last: UInt8 = 0
        let record = [UInt8](repeating: 0, count: 16)
        var out = [UInt8](repeating: 0, count: 1)
        #expect(sluice_gcm_open(key, [UInt8](repeating: 0, count: 12), nil, 0, record, 0, &out, &last) == 0)
    }

    /// Record layers with one engine at each end: 1 MB each way through sealed records read
    /// back the same, with AES-128 and AES-256, whichever end has which.
    @Test(arguments: [TLSSuite.aes128GCM, .aes256GCM])
    func recordLayersAcrossEngines(suite: TLSSuite) throws {
        let data = randomBytes(1_000_000, seed: 9)
        for engines in [(AESGCMEngine.vector, AESGCMEngine.openssl), (.openssl, .vector)] {
            let (peer, us) = TLSRecordLayerTests.layers(suite: suite, engines: (engines.0, engines.1))
            #expect(peer.engine == engines.0 && us.engine == engines.1)
            var received: [UInt8] = []
            var sent = 0
            var buffer = [UInt8](repeating: 0, count: 40000)
            while received.count < data.count {
                if case .done(let n) = data.withUnsafeBytes({ peer.write(from: .init(rebasing: $0[sent...])) }) {
                    sent += n
                }
                let out = peer.readable()
                let space = us.input.space()
                let n = min(out.count, space.count)
                if n > 0, let target = space.baseAddress, let source = out.baseAddress {
                    target.copyMemory(from: source, byteCount: n)
                    us.input.commit(n)
                    peer.output.consume(n)
                }
                let before = received.count
                while case .done(let count) = buffer.withUnsafeMutableBytes({ us.read(into: $0) }), count > 0 {
                    received += buffer[..<count]
                }
                guard n > 0 || received.count > before else {
                    Issue.record("stalled after \(received.count) of \(data.count) bytes")
                    break
                }
            }
            #expect(digest(received) == digest(data))
        }
    }
}

/// How `SLUICE_AES_GCM` and the CPU choose the engine (whatever this CPU has).
@Suite(.ownThreads) struct AESGCMEngineChoiceTests {
    /// `openssl` (any case) always wins; `vaes` where the CPU runs it; otherwise, and for an
    /// unknown value, the measurement decides where sluice's own can run, and OpenSSL's
    /// elsewhere without measuring.
    @Test func theSettingThenTheMeasurement() {
        let unmeasured: () -> AESGCMEngine = {
            Issue.record("measured where the choice was made")
            return .vector
        }
        #expect(AESGCMEngine.choose(setting: "openssl", supported: true, measure: unmeasured) == .openssl)
        #expect(AESGCMEngine.choose(setting: "OpenSSL", supported: true, measure: unmeasured) == .openssl)
        #expect(AESGCMEngine.choose(setting: "vaes", supported: true, measure: unmeasured) == .vector)
        #expect(AESGCMEngine.choose(setting: "VAES", supported: false, measure: unmeasured) == .openssl)
        #expect(AESGCMEngine.choose(setting: nil, supported: false, measure: unmeasured) == .openssl)
        #expect(AESGCMEngine.choose(setting: nil, supported: true, measure: { .openssl }) == .openssl)
        #expect(AESGCMEngine.choose(setting: nil, supported: true, measure: { .vector }) == .vector)
        #expect(AESGCMEngine.choose(setting: "chacha", supported: true, measure: { .vector }) == .vector)
    }

    /// The measurement names an engine this CPU runs, and the engine in use is one.
    @Test func theMeasurementNamesAnEngineThisCPURuns() {
        #expect(AESGCMEngine.faster().isSupported)
        #expect(AESGCMEngine.current.isSupported)
    }
}
