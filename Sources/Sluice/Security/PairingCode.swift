import CCrypto

/// A one-time pairing code: 130 random bits written as 26 Crockford base-32 characters, and two
/// more of checksum, in seven groups of four (`7KQ2-M4ZP-…`). A person can read it out; a
/// mistyped character is reported as a typo (the checksum catches all but 1 in 1024 typos)
/// rather than as a failed handshake. The code is the secret: it carries its own entropy
/// (≥ 128 bits), so a PSK derived from it resists offline guessing (RFC 9257).
public struct PairingCode: Hashable, Sendable, CustomStringConvertible {
    /// The 26 payload characters, normalized (upper case, from `alphabet`).
    public let payload: String

    /// Crockford's base 32: digits and letters without I, L, O, U.
    static let alphabet = Array("0123456789ABCDEFGHJKMNPQRSTVWXYZ".utf8)
    static let payloadLength = 26
    static let checksumLength = 2

    /// Why a written code was rejected.
    public enum ParseError: Error, Hashable, Sendable, CustomStringConvertible {
        case wrongLength(Int)
        case badCharacter(Character)
        case checksumMismatch

        public var description: String {
            switch self {
            case .wrongLength(let n):
                return "a code has \(payloadLength + checksumLength) characters (dashes aside), not \(n)"
            case .badCharacter(let c): return "'\(c)' is not a code character (0-9 and A-Z without I, L, O, U)"
            case .checksumMismatch: return "the checksum does not match: a typo in the code?"
            }
        }
    }

    /// A new code from OpenSSL's CSPRNG (`RAND_bytes`); nil if it has no entropy to give.
    public static func generate() -> PairingCode? {
        var random = [UInt8](repeating: 0, count: payloadLength)
        guard RAND_bytes(&random, Int32(random.count)) == 1 else { return nil }
        let characters = random.map { alphabet[Int($0 & 31)] }
        return PairingCode(payload: String(decoding: characters, as: UTF8.self))
    }

    private init(payload: String) { self.payload = payload }

    /// Parses a code as a person may type it: any case, with or without dashes and spaces,
    /// `I`/`L` read as 1 and `O` as 0. A pure function of its input.
    public static func parse(_ text: String) -> Result<PairingCode, ParseError> {
        var values: [UInt8] = []
        for character in text {
            if character == "-" || character == " " { continue }
            guard let ascii = character.asciiValue else { return .failure(.badCharacter(character)) }
            var c = ascii
            if c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z") { c -= 32 }
            switch c {
            case UInt8(ascii: "I"), UInt8(ascii: "L"): c = UInt8(ascii: "1")
            case UInt8(ascii: "O"): c = UInt8(ascii: "0")
            default: break
            }
            guard alphabet.contains(c) else { return .failure(.badCharacter(character)) }
            values.append(c)
        }
        guard values.count == payloadLength + checksumLength else { return .failure(.wrongLength(values.count)) }
        let payload = Array(values[..<payloadLength])
        guard Array(values[payloadLength...]) == checksum(payload) else { return .failure(.checksumMismatch) }
        return .success(PairingCode(payload: String(decoding: payload, as: UTF8.self)))
    }

    /// Ten bits of SHA-256 over the payload characters, as two characters.
    static func checksum(_ payload: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 32
        let ok = payload.withUnsafeBytes { EVP_Digest($0.baseAddress, $0.count, &digest, &length, EVP_sha256(), nil) }
        precondition(ok == 1, "EVP_Digest(sha256) failed (internal invariant: no input can fail it)")
        return [alphabet[Int(digest[0] >> 3)], alphabet[Int(digest[1] >> 3)]]
    }

    /// The code as written: seven groups of four, with dashes.
    public var description: String {
        let all = Array(payload.utf8) + Self.checksum(Array(payload.utf8))
        var out: [UInt8] = []
        for (index, c) in all.enumerated() {
            if index > 0 && index % 4 == 0 { out.append(UInt8(ascii: "-")) }
            out.append(c)
        }
        return String(decoding: out, as: UTF8.self)
    }
}

extension PreSharedKey {
    /// The HKDF salt: fixed, so both sides derive the same key from the same secret.
    static let salt = Array("sluice psk v1".utf8)

    /// The TLS 1.3 external PSK for a pairing code: HKDF-SHA256 over its normalized payload,
    /// label `sluice tls13 psk from code`.
    public static func derive(from code: PairingCode) -> PreSharedKey {
        derive(secret: Array(code.payload.utf8), label: "sluice tls13 psk from code")
    }

    /// The TLS 1.3 external PSK for a key file's 32 bytes: HKDF-SHA256, label
    /// `sluice tls13 psk from key`.
    public static func derive(from key: KeyFile) -> PreSharedKey {
        derive(secret: key.bytes, label: "sluice tls13 psk from key")
    }

    static func derive(secret: [UInt8], label: String) -> PreSharedKey {
        var out = [UInt8](repeating: 0, count: 32)
        let info = Array(label.utf8)
        let ok = sluice_hkdf_sha256(secret, secret.count, salt, salt.count, info, info.count, &out, out.count)
        precondition(ok == 1, "HKDF-SHA256 failed (internal invariant: fixed sizes)")
        return PreSharedKey(key: out)!
    }
}
