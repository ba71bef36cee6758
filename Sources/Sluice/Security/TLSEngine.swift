import CCrypto

#if canImport(Glibc)
    import Glibc
#endif

/// One TLS connection's state machine, with no I/O of its own: ciphertext from the network
/// goes in through `inputSpace`/`commitInput`, ciphertext for the network comes out through
/// `output`/`consumeOutput`, and the calls return what they need next. The socket driver
/// (`TLSConnection`) and the tests move the bytes.
///
/// OpenSSL (an `SSL` on a BIO pair) runs the handshake, fed one whole record at a time from the
/// engine's own input buffer, so that it never holds a byte of what follows. Once the handshake
/// is done, the application data goes through sluice's own record layer (`TLSRecordLayer`,
/// keyed with the traffic secrets OpenSSL's keylog callback reported): records sealed from the
/// caller's buffer straight into the output, opened straight into the caller's buffer, with
/// none of the copies through the BIO pair and OpenSSL's record buffers. When that cannot be
/// (an unknown suite, no secrets, OpenSSL holding unread bytes), OpenSSL's record layer carries
/// on as before.
final class TLSEngine {
    /// What a call did, or what it needs before it can go on.
    enum Step: Equatable {
        /// Done: for reads and writes, the count of plaintext bytes.
        case done(Int)
        /// Needs ciphertext from the peer.
        case wantInput
        /// Needs the ciphertext it made to be sent first (the output buffer is full).
        case wantOutput
        /// The peer sent close_notify: the clean end of its data.
        case closed
        case failed(SluiceError)
    }

    /// The size of each direction's ciphertext buffer (the BIO pair's).
    static let bufferSize = 256 * 1024

    let context: TLSContext
    private let ssl: OpaquePointer
    /// Our end of the BIO pair: the network side.
    private let network: OpaquePointer
    private(set) var handshakeDone = false
    private(set) var inputEnded = false
    /// Whether any ciphertext came from the peer.
    private(set) var heardFromPeer = false
    /// What the peer was called, for messages.
    let name: String
    /// Ciphertext from the network, until OpenSSL's record layer takes over (the fallback).
    private let input = TLSInputBuffer(capacity: bufferSize)
    /// Sluice's own record layer, once the handshake is done (nil: OpenSSL's, or handshaking).
    private(set) var records: TLSRecordLayer?
    /// OpenSSL's record layer carries the data after the handshake: ciphertext goes straight
    /// into the BIO pair.
    private(set) var openSSLRecords = false
    /// The BIO pair was told the network's end.
    private var bioInputEnded = false

    init(context: TLSContext, name: String) throws(SluiceError) {
        self.context = context
        self.name = name
        guard let ssl = SSL_new(context.context) else { throw TLSContext.failure("SSL_new", subject: name) }
        var inside: OpaquePointer?
        var outside: OpaquePointer?
        guard BIO_new_bio_pair(&inside, Self.bufferSize, &outside, Self.bufferSize) == 1, let inside, let outside
        else {
            SSL_free(ssl)
            throw TLSContext.failure("BIO_new_bio_pair", subject: name)
        }
        SSL_set_bio(ssl, inside, inside)
        self.ssl = ssl
        network = outside
        // Where the keylog callback leaves the traffic secrets (none: OpenSSL's record layer).
        _ = sluice_secrets_attach(ssl)
        let settings = context.settings
        if settings.role == .client {
            SSL_set_connect_state(ssl)
        } else {
            SSL_set_accept_state(ssl)
        }
        try configureVerification(settings)
    }

    deinit {
        sluice_secrets_detach(ssl)
        SSL_free(ssl)
        BIO_free(network)
    }

    private func configureVerification(_ settings: TLSSettings) throws(SluiceError) {
        if settings.preSharedKey != nil {
            // The key is the only proof either way: a server that answers with a certificate
            // (ignoring the client's pre_shared_key) is refused as soon as it shows it, and
            // `checkPreSharedKeyUsed` makes sure of it once the handshake is done.
            if settings.role == .client { sluice_ssl_refuse_certificates(ssl) }
            return
        }
        if settings.role == .client, let peerName = settings.peerName, !Self.isIPAddress(peerName) {
            _ = sluice_set_sni(ssl, peerName)
        }
        if settings.usesChainVerification {
            let flags = SSL_VERIFY_PEER | (settings.role == .server ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0)
            SSL_set_verify(ssl, flags, nil)
            if let peerName = settings.peerName {
                let ok: Int32
                if Self.isIPAddress(peerName) {
                    ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), peerName)
                } else {
                    ok = SSL_set1_host(ssl, peerName)
                }
                guard ok == 1 else {
                    throw SluiceError(.invalidArgument, operation: "TLS peer name", subject: peerName)
                }
            }
        } else if settings.pin != nil {
            sluice_ssl_verify_for_pin(ssl, 1)
        } else {
            SSL_set_verify(ssl, SSL_VERIFY_NONE, nil)
        }
    }

    static func isIPAddress(_ text: String) -> Bool {
        var storage = in6_addr()
        return inet_pton(AF_INET, text, &storage) == 1 || inet_pton(AF_INET6, text, &storage) == 1
    }

    // MARK: Ciphertext in and out

    /// Where ciphertext from the network can be written (empty when the buffer is full).
    func inputSpace() -> UnsafeMutableRawBufferPointer {
        guard openSSLRecords else { return input.space() }
        var pointer: UnsafeMutablePointer<CChar>?
        let n = BIO_nwrite0(network, &pointer)
        guard n > 0, let pointer else { return UnsafeMutableRawBufferPointer(start: nil, count: 0) }
        return UnsafeMutableRawBufferPointer(start: pointer, count: Int(n))
    }

    /// Records that `count` bytes were written into `inputSpace()`.
    func commitInput(_ count: Int) {
        if count > 0 { heardFromPeer = true }
        guard openSSLRecords else { return input.commit(count) }
        var pointer: UnsafeMutablePointer<CChar>?
        let n = BIO_nwrite(network, &pointer, Int32(count))
        precondition(Int(n) == count, "TLS input commit of \(count) bytes, BIO took \(n) (internal invariant)")
    }

    /// Copies `bytes` in as ciphertext from the network; returns how many fitted.
    func feed(_ bytes: UnsafeRawBufferPointer) -> Int {
        var offset = 0
        while offset < bytes.count {
            let space = inputSpace()
            if space.isEmpty { break }
            let n = min(space.count, bytes.count - offset)
            space.baseAddress!.copyMemory(from: bytes.baseAddress! + offset, byteCount: n)
            commitInput(n)
            offset += n
        }
        return offset
    }

    /// The network's end: once the buffered input is read, the peer's data has ended.
    func endInput() {
        guard !inputEnded else { return }
        inputEnded = true
        input.ended = true
        if openSSLRecords { endBIOInput() }
    }

    private func endBIOInput() {
        guard !bioInputEnded else { return }
        bioInputEnded = true
        sluice_bio_shutdown_wr(network)
    }

    /// Ciphertext ready for the network (a contiguous part of it; empty when none).
    func output() -> UnsafeRawBufferPointer { records?.readable() ?? bioOutput() }

    /// Records that `count` bytes of `output()` were sent.
    func consumeOutput(_ count: Int) {
        if let records { return records.output.consume(count) }
        consumeBIOOutput(count)
    }

    /// What OpenSSL wrote into the BIO pair (a contiguous part of it).
    private func bioOutput() -> UnsafeRawBufferPointer {
        var pointer: UnsafeMutablePointer<CChar>?
        let n = BIO_nread0(network, &pointer)
        guard n > 0, let pointer else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: pointer, count: Int(n))
    }

    private func consumeBIOOutput(_ count: Int) {
        var pointer: UnsafeMutablePointer<CChar>?
        let n = BIO_nread(network, &pointer, Int32(count))
        precondition(Int(n) == count, "TLS output consume of \(count) bytes, BIO gave \(n) (internal invariant)")
    }

    /// Bytes of ciphertext waiting to be sent.
    var outputPending: Int { records?.pending ?? Int(BIO_ctrl_pending(network)) }

    // MARK: TLS operations

    /// Advances the handshake.
    func handshake() -> Step {
        if handshakeDone { return .done(0) }
        while true {
            ERR_clear_error()
            let rc = SSL_do_handshake(ssl)
            if rc == 1 {
                if let failure = checkPin() ?? checkPreSharedKeyUsed() { return .failed(failure) }
                handshakeDone = true
                takeOverRecords()
                return .done(0)
            }
            if SSL_get_error(ssl, rc) == SSL_ERROR_WANT_READ && feedHandshakeRecord() { continue }
            return step(after: rc, handshaking: true)
        }
    }

    /// Hands OpenSSL, which needs input for its handshake, the next whole record from the
    /// input buffer (never more: what follows the handshake stays ours). Bytes that cannot
    /// start a TLS 1.3 record (plaintext, another protocol) go at once, for OpenSSL to refuse;
    /// at the network's end, whatever is left goes, and the end. False when it must wait.
    private func feedHandshakeRecord() -> Bool {
        var count = input.completeRecord ?? 0
        if count == 0, let length = input.headerLength {
            let type = input.byte(0)
            let malformed = !(20...23).contains(type) || input.byte(1) != 3 || length > TLSRecordLayer.maxBody
            if malformed { count = input.count }
        }
        let last = count == 0 && input.ended && !bioInputEnded
        if last { count = input.count }
        if count > 0 {
            let written = BIO_write(network, input.storage + input.start, Int32(count))
            guard written > 0 else { return false }
            input.start += Int(written)
        }
        // The end after the last bytes (not before: a write after it is a broken pipe).
        if last { endBIOInput() }
        return count > 0 || last
    }

    /// The handshake is done: the application data goes through sluice's own record layer
    /// with the traffic secrets OpenSSL reported, after whatever handshake bytes OpenSSL left
    /// to send; or, when OpenSSL holds bytes it read, the suite is not one the record layer
    /// knows, or no secrets came, through OpenSSL's record layer as before.
    private func takeOverRecords() {
        defer { sluice_secrets_detach(ssl) }
        let role = context.settings.role
        let secretsPointer = SSL_get_ex_data(ssl, 0)?.assumingMemoryBound(to: sluice_secrets.self)
        if SSL_has_pending(ssl) == 0, BIO_ctrl_wpending(network) == 0, BIO_ctrl_pending(network) <= Self.bufferSize,
            let suite = TLSSuite(rawValue: sluice_ssl_suite(ssl)), let secrets = secretsPointer,
            secrets.pointee.client_length == suite.hashLength, secrets.pointee.server_length == suite.hashLength
        {
            let output = TLSOutputBuffer(capacity: Self.bufferSize)
            // The secrets are read where they lie (no copy of them is left to cleanse).
            let raw = UnsafeRawPointer(secrets)
            let client = UnsafeRawBufferPointer(
                start: raw + MemoryLayout<sluice_secrets>.offset(of: \.client)!, count: suite.hashLength)
            let server = UnsafeRawBufferPointer(
                start: raw + MemoryLayout<sluice_secrets>.offset(of: \.server)!, count: suite.hashLength)
            let layer = TLSRecordLayer(
                suite: suite, sendSecret: role == .client ? client : server,
                receiveSecret: role == .client ? server : client, input: input, output: output, name: name,
                engine: context.settings.aesGCM ?? .current)
            if let layer {
                // OpenSSL's last handshake bytes (the client's Finished) go before our records
                // (they fit: the output is as large as the BIO pair's buffer, and empty).
                while true {
                    let pending = bioOutput()
                    guard !pending.isEmpty, output.append(pending) else { break }
                    consumeBIOOutput(pending.count)
                }
                records = layer
                return
            }
        }
        openSSLRecords = true
        if input.count > 0 {
            let written = BIO_write(network, input.storage + input.start, Int32(input.count))
            input.start += max(0, Int(written))
        }
        if input.ended { endBIOInput() }
    }

    /// Decrypts into `buffer`.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> Step {
        if let records { return records.read(into: buffer) }
        guard buffer.count > 0 else { return .done(0) }
        ERR_clear_error()
        var n = 0
        let rc = SSL_read_ex(ssl, buffer.baseAddress, buffer.count, &n)
        if rc == 1 { return .done(n) }
        return step(after: rc, handshaking: false)
    }

    /// Encrypts from `buffer` (a part of it when the output buffer fills).
    func write(from buffer: UnsafeRawBufferPointer) -> Step {
        if let records { return records.write(from: buffer) }
        guard buffer.count > 0 else { return .done(0) }
        ERR_clear_error()
        var n = 0
        let rc = SSL_write_ex(ssl, buffer.baseAddress, buffer.count, &n)
        if rc == 1 { return .done(n) }
        return step(after: rc, handshaking: false)
    }

    /// Queues close_notify: the end of our data (the peer can still send).
    func shutdown() {
        if let records { return records.shutdown() }
        ERR_clear_error()
        _ = SSL_shutdown(ssl)
        ERR_clear_error()
    }

    /// Bytes a read may return without the socket: decrypted and not yet read, or whole
    /// records waiting unprocessed (in the engine's input buffer, or in OpenSSL's), or
    /// ciphertext handed to the BIO pair that OpenSSL has not read yet (a read that stopped
    /// because the caller's buffer was full leaves any of these, and the socket may have
    /// nothing more to say: a readiness that only looked at decrypted bytes stalled the
    /// stream there).
    var plaintextPending: Bool {
        if let records { return records.plaintextPending }
        return SSL_has_pending(ssl) == 1 || BIO_ctrl_wpending(network) > 0
    }

    /// The protocol version negotiated (`TLSv1.3`), once the handshake is done.
    var protocolName: String? {
        guard handshakeDone, let text = SSL_get_version(ssl) else { return nil }
        return String(cString: text)
    }

    /// The cipher suite negotiated (`TLS_AES_128_GCM_SHA256`), once the handshake is done.
    var cipherName: String? {
        guard handshakeDone, let cipher = SSL_get_current_cipher(ssl), let text = SSL_CIPHER_get_name(cipher) else {
            return nil
        }
        return String(cString: text)
    }

    /// The pin of the peer's certificate, if it sent one.
    var peerPin: TLSPin? {
        guard let certificate = SSL_get0_peer_certificate(ssl) else { return nil }
        return TLSContext.pin(of: certificate)
    }

    private func checkPin() -> SluiceError? {
        guard let pin = context.settings.pin, context.settings.preSharedKey == nil else { return nil }
        guard let actual = peerPin else {
            return SluiceError(
                .authenticationFailed, operation: "TLS handshake", subject: name, detail: "no certificate")
        }
        let same = actual.digest.withUnsafeBytes { a in
            pin.digest.withUnsafeBytes { b in CRYPTO_memcmp(a.baseAddress, b.baseAddress, 32) == 0 }
        }
        guard same else {
            return SluiceError(
                .authenticationFailed, operation: "TLS handshake", subject: name,
                detail: "public key pin mismatch (the peer's is \(actual))")
        }
        return nil
    }

    /// With a pre-shared key, a finished handshake must have used it (OpenSSL marks an external
    /// PSK's handshake as a resumed session) and shown no certificate: otherwise the peer
    /// authenticated with something other than the key, or not at all.
    private func checkPreSharedKeyUsed() -> SluiceError? {
        guard context.settings.preSharedKey != nil else { return nil }
        if SSL_session_reused(ssl) == 1 && SSL_get0_peer_certificate(ssl) == nil { return nil }
        return SluiceError(
            .authenticationFailed, operation: "TLS handshake", subject: name,
            detail: "the peer did not use the pre-shared key")
    }

    /// Maps `SSL_get_error` onto a step, with a reason a person can read for failures.
    private func step(after rc: Int32, handshaking: Bool) -> Step {
        let code = SSL_get_error(ssl, rc)
        switch code {
        case SSL_ERROR_WANT_READ: return .wantInput
        case SSL_ERROR_WANT_WRITE: return .wantOutput
        case SSL_ERROR_ZERO_RETURN: return .closed
        default: return .failed(failure(handshaking: handshaking))
        }
    }

    private func failure(handshaking: Bool) -> SluiceError {
        let error = sluice_first_error()
        let reason = sluice_error_reason(error)
        let operation = handshaking ? "TLS handshake" : "TLS"
        let verify = SSL_get_verify_result(ssl)
        let usesKey = context.settings.preSharedKey != nil
        if handshaking && usesKey && verify == X509_V_ERR_APPLICATION_VERIFICATION {
            return SluiceError(
                .authenticationFailed, operation: operation, subject: name,
                detail: "the peer showed a certificate instead of using the pre-shared key")
        }
        // With a pre-shared key no certificate is checked, and the verify result is the PSK
        // session's placeholder (OpenSSL's "unspecified"), not a verdict on anything.
        if handshaking && !usesKey && verify != X509_V_OK, let text = X509_verify_cert_error_string(verify) {
            return SluiceError(
                .authenticationFailed, operation: operation, subject: name,
                detail: "certificate not trusted: \(String(cString: text))")
        }
        // A server refusing our PSK's binder answers illegal_parameter (OpenSSL) or
        // handshake_failure: with a PSK, that is the key being wrong.
        let pskRefused =
            handshaking && usesKey
            && [SSL_R_SSLV3_ALERT_ILLEGAL_PARAMETER, SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE].contains(reason)
        if Self.authenticationReasons.contains(reason) || pskRefused {
            return SluiceError(
                .authenticationFailed, operation: operation, subject: name, detail: TLSContext.openSSLReason(error))
        }
        if handshaking && inputEnded && !heardFromPeer {
            if context.settings.role == .client { return Self.turnedAway(subject: name) }
            return SluiceError(
                .protocolViolation, operation: operation, subject: name,
                detail: "the peer closed the connection before it began the handshake")
        }
        if reason == SSL_R_UNEXPECTED_EOF_WHILE_READING || (error == 0 && inputEnded) {
            let detail =
                handshaking
                ? "the peer closed the connection during the handshake"
                : "connection cut without close_notify (the data may be truncated)"
            return SluiceError(.protocolViolation, operation: operation, subject: name, detail: detail)
        }
        let detail = error == 0 ? "OpenSSL error" : TLSContext.openSSLReason(error)
        if handshaking && usesKey && heardFromPeer {
            // The peer answered, but not as one holding the key can: another protocol version,
            // plaintext, or a handshake the key does not fit. Not a cut: a failed authentication.
            return SluiceError(
                .authenticationFailed, operation: operation, subject: name,
                detail: "the peer did not authenticate with the pre-shared key (\(detail))")
        }
        return SluiceError(.protocolViolation, operation: operation, subject: name, detail: detail)
    }

    /// The peer closed (or reset) the connection before a byte of the handshake came back: it
    /// turned the connection away before TLS (too busy, or refusing this address), which a
    /// later attempt may not meet.
    static func turnedAway(subject: String) -> SluiceError {
        SluiceError(
            .unavailable, operation: "TLS handshake", subject: subject,
            detail: "the peer closed the connection without answering the handshake")
    }

    /// The reasons that mean one side could not authenticate the other.
    private static let authenticationReasons: Set<Int32> = [
        SSL_R_CERTIFICATE_VERIFY_FAILED, SSL_R_TLSV1_ALERT_UNKNOWN_CA, SSL_R_SSLV3_ALERT_BAD_CERTIFICATE,
        SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN, SSL_R_TLSV1_ALERT_DECRYPT_ERROR, SSL_R_BINDER_DOES_NOT_VERIFY,
        SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED, SSL_R_TLSV1_ALERT_ACCESS_DENIED,
        SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE, SSL_R_TLSV1_ALERT_UNKNOWN_PSK_IDENTITY,
    ]
}
