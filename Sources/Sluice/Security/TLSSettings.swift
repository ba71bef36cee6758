/// How a socket stream pair is secured, as NSStream's `socketSecurityLevel` property.
public enum StreamSocketSecurityLevel: Hashable, Sendable {
    /// Plain TCP.
    case none
    /// TLS 1.3 only (no older version is negotiated, no tickets, no 0-RTT).
    case negotiatedSSL
}

/// Which end of the TLS handshake a stream pair plays.
public enum TLSRole: Hashable, Sendable {
    case client
    case server
}

/// The SHA-256 digest of a peer's SubjectPublicKeyInfo (DER): what
/// `openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | sha256sum` prints.
/// Written `sha256:HEX`.
public struct TLSPin: Hashable, Sendable, CustomStringConvertible {
    public let digest: [UInt8]

    public init?(digest: [UInt8]) {
        guard digest.count == 32 else { return nil }
        self.digest = digest
    }

    /// Parses `sha256:HEX` (64 hex digits, either case). Nil when malformed.
    public init?(parsing text: String) {
        guard text.lowercased().hasPrefix("sha256:"), let bytes = Hex.decode(text.dropFirst(7)), bytes.count == 32
        else { return nil }
        digest = bytes
    }

    public var description: String { "sha256:" + Hex.encode(digest) }
}

/// A pre-shared key for TLS 1.3 (`psk_dhe_ke`: an ephemeral key exchange is still made, for
/// forward secrecy). Derive one with `PreSharedKey.derive(from:)`.
public struct PreSharedKey: Hashable, Sendable {
    /// 32 bytes, used as the external PSK with SHA-256 (TLS_AES_128_GCM_SHA256).
    public let key: [UInt8]
    /// Sent in clear in the ClientHello: never secret.
    public let identity: String

    public init?(key: [UInt8], identity: String = "sluice") {
        guard key.count == 32, !identity.isEmpty, identity.utf8.count <= 64 else { return nil }
        self.key = key
        self.identity = identity
    }
}

/// The settings of a TLS stream pair, set before `open()`, as NSStream's SSL settings
/// dictionary: who we are, how the peer is checked.
public struct TLSSettings: Sendable {
    public var role: TLSRole
    /// A PEM file with our certificate chain (it may hold the private key too).
    public var certificateFile: String?
    /// A PEM file with our private key, when `certificateFile` does not hold it.
    public var keyFile: String?
    /// A server without a certificate file makes a throwaway key pair and self-signed
    /// certificate (its pin is `TLSContext.localPin`).
    public var generatesThrowawayCertificate = true
    /// Trusted CA certificates (PEM); nil uses the system store.
    public var caFile: String?
    /// Check the peer's certificate chain (a client: against `caFile` or the system store,
    /// and `peerName`). A server checks a client certificate only when given `caFile` or `pin`.
    public var verifiesPeer = true
    /// The name the peer's certificate must carry (a DNS name or an IP address); a client
    /// also sends it as SNI when it is a DNS name.
    public var peerName: String?
    /// Accept exactly the peer whose public key hashes to this, instead of a CA chain.
    public var pin: TLSPin?
    /// Authenticate both sides with this key instead of certificates.
    public var preSharedKey: PreSharedKey?
    /// The limit for the handshake, from the socket's connection on.
    public var handshakeTimeout: Duration = .seconds(30)
    /// Whose AES-GCM seals and opens the records (for tests and comparisons); nil: the one
    /// chosen for the process (`AESGCMEngine.current`).
    package var aesGCM: AESGCMEngine?

    public init(role: TLSRole) {
        self.role = role
    }
}

/// Hexadecimal text, for pins and key files.
enum Hex {
    static func encode(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Nil unless `text` is an even number of hex digits.
    static func decode<S: StringProtocol>(_ text: S) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = value(utf8[index]), let low = value(utf8[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        return out
    }

    private static func value(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
