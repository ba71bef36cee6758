import CCrypto

/// The shared, immutable part of TLS connections made with one set of `TLSSettings`
/// (OpenSSL's `SSL_CTX`): protocol limits, our certificate and key, the trust store, the
/// pre-shared key. A listener makes one and uses it for every connection.
///
/// Throws `.invalidArgument` for a certificate, key or CA file that cannot be loaded.
public final class TLSContext: @unchecked Sendable {
    public let settings: TLSSettings
    /// The pin of our own certificate (for a throwaway certificate: what to tell the peer).
    public private(set) var localPin: TLSPin?

    let context: OpaquePointer
    private var psk: UnsafeMutablePointer<sluice_psk>?

    public init(_ settings: TLSSettings) throws(SluiceError) {
        self.settings = settings
        let method = settings.role == .client ? TLS_client_method() : TLS_server_method()
        guard let context = SSL_CTX_new(method) else {
            throw TLSContext.failure("SSL_CTX_new", subject: nil)
        }
        self.context = context
        guard sluice_ctx_tls13_only(context) == 1 else { throw TLSContext.failure("TLS 1.3 only", subject: nil) }
        // The traffic secrets for sluice's own record layer (`TLSEngine`, `TLSRecordLayer`).
        sluice_ctx_set_keylog(context)
        try loadIdentity()
        if let key = settings.preSharedKey {
            let psk = UnsafeMutablePointer<sluice_psk>.allocate(capacity: 1)
            psk.initialize(to: sluice_psk())
            withUnsafeMutableBytes(of: &psk.pointee.key) { $0.copyBytes(from: key.key) }
            let identity = Array(key.identity.utf8)
            withUnsafeMutableBytes(of: &psk.pointee.identity) { $0.copyBytes(from: identity) }
            psk.pointee.identity_length = identity.count
            self.psk = psk
            sluice_ctx_set_psk(context, psk)
            // The PSK is bound to SHA-256: offer only the suites that use it, or a server
            // preferring TLS_AES_256_GCM_SHA384 would skip the PSK and look for a certificate.
            guard SSL_CTX_set_ciphersuites(context, "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256") == 1 else {
                throw TLSContext.failure("TLS cipher suites", subject: nil)
            }
        } else {
            try preferAES128()
        }
        if settings.usesChainVerification {
            if let caFile = settings.caFile {
                guard SSL_CTX_load_verify_locations(context, caFile, nil) == 1 else {
                    throw TLSContext.failure("load CA file", path: caFile)
                }
            } else if SSL_CTX_set_default_verify_paths(context) != 1 {
                throw TLSContext.failure("load the system CA store", subject: nil)
            }
        }
    }

    deinit {
        SSL_CTX_free(context)
        if let psk {
            // The key must not linger in freed memory.
            withUnsafeMutableBytes(of: &psk.pointee) { OPENSSL_cleanse($0.baseAddress, $0.count) }
            psk.deallocate()
        }
    }

    /// With certificates, AES-128-GCM first, as with a key: TLS 1.3's mandatory suite, 128-bit
    /// security like the P-256 and X25519 key exchanges, and about a third faster than
    /// AES-256-GCM where AES has its own instructions (10 rounds of the cipher against 14;
    /// `openssl speed -evp`: 3.8 against 2.8 GB/s per core on an AMD EPYC). The other two
    /// suites stay for peers that do not offer it. A server picks by its own order (so that a
    /// client preferring AES-256 gets AES-128 too), except that a client preferring
    /// ChaCha20-Poly1305 (no AES instructions) keeps it.
    private func preferAES128() throws(SluiceError) {
        let suites = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
        guard SSL_CTX_set_ciphersuites(context, suites) == 1 else {
            throw TLSContext.failure("TLS cipher suites", subject: nil)
        }
        if settings.role == .server {
            _ = SSL_CTX_set_options(context, Self.serverPreference | Self.prioritizeChaCha)
        }
    }

    /// `SSL_OP_CIPHER_SERVER_PREFERENCE` and `SSL_OP_PRIORITIZE_CHACHA` (`SSL_OP_BIT(22)` and
    /// `SSL_OP_BIT(21)` in OpenSSL 3's ssl.h: macros Swift does not import).
    static let serverPreference: UInt64 = 1 << 22
    static let prioritizeChaCha: UInt64 = 1 << 21

    private func loadIdentity() throws(SluiceError) {
        if let file = settings.certificateFile {
            guard SSL_CTX_use_certificate_chain_file(context, file) == 1 else {
                throw TLSContext.failure("load certificate", path: file)
            }
            let keyFile = settings.keyFile ?? file
            guard SSL_CTX_use_PrivateKey_file(context, keyFile, SSL_FILETYPE_PEM) == 1 else {
                throw TLSContext.failure("load private key", path: keyFile)
            }
            guard SSL_CTX_check_private_key(context) == 1 else {
                throw TLSContext.failure("match private key", path: keyFile)
            }
        } else if settings.role == .server && settings.preSharedKey == nil && settings.generatesThrowawayCertificate {
            var key: OpaquePointer?
            var certificate: OpaquePointer?
            guard sluice_make_self_signed(&key, &certificate) == 1, let key, let certificate else {
                throw TLSContext.failure("make a throwaway certificate", subject: nil)
            }
            defer {
                EVP_PKEY_free(key)
                X509_free(certificate)
            }
            guard SSL_CTX_use_certificate(context, certificate) == 1, SSL_CTX_use_PrivateKey(context, key) == 1 else {
                throw TLSContext.failure("use the throwaway certificate", subject: nil)
            }
        }
        if let certificate = SSL_CTX_get0_certificate(context) {
            localPin = TLSContext.pin(of: certificate)
        }
    }

    /// The pin of a certificate (an `X509 *`).
    static func pin(of certificate: OpaquePointer) -> TLSPin? {
        var digest = [UInt8](repeating: 0, count: 32)
        guard sluice_spki_sha256(certificate, &digest) == 1 else { return nil }
        return TLSPin(digest: digest)
    }

    /// An error for a failed OpenSSL call, with OpenSSL's reason.
    static func failure(_ operation: String, subject: String?) -> SluiceError {
        SluiceError(.invalidArgument, operation: operation, subject: subject, detail: openSSLReason())
    }

    /// The same about a file: its path is quoted in the message.
    static func failure(_ operation: String, path: String) -> SluiceError {
        SluiceError(.invalidArgument, operation: operation, path: path, detail: openSSLReason())
    }

    /// The reason text of the first error on OpenSSL's queue (which is cleared).
    static func openSSLReason(_ code: UInt = 0) -> String {
        let error = code != 0 ? code : sluice_first_error()
        guard error != 0, let text = ERR_reason_error_string(error) else { return "OpenSSL error" }
        return String(cString: text)
    }
}

extension TLSSettings {
    /// Whether certificates are checked against CAs (rather than a pin, a PSK, or not at all).
    var usesChainVerification: Bool {
        guard verifiesPeer, pin == nil, preSharedKey == nil else { return false }
        return role == .client || caFile != nil
    }
}
