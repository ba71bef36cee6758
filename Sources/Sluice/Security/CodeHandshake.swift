import CCrypto

#if canImport(Glibc)
    import Glibc
#endif

/// The exchange that turns a short code (`WordCode`) into a strong shared key over a connection
/// two peers already hold (through a relay, or direct): SPAKE2 (RFC 9382) with the sender as A
/// and the receiver as B, then each side's key confirmation. A wrong code, a tampered message or
/// a share off the curve ends it with `.authenticationFailed`; nothing else is sent then. The
/// key that comes out (`CodeKey`) is used as TLS 1.3's external PSK, so what follows is the same
/// authenticated TLS as with a pairing code.
///
/// On the wire, each side sends `magic` and its share (65 bytes), then its confirmation (32
/// bytes): the messages do not wait for each other's, so the exchange takes one round trip for
/// the shares and one for the confirmations. A peer that sends no whole hello (it left, went
/// silent, or speaks another protocol) ends it with `.protocolViolation`: it made no guess.
package enum CodeHandshake {
    /// Which end: the sender is SPAKE2's A, the receiver its B.
    package enum Role: Sendable {
        case sender, receiver
    }

    /// Sent before each share: the protocol and its version, so a peer that is not a sluice of
    /// this version is told apart from a wrong code.
    static let magic = Array("sluice-code-v2\n".utf8)

    /// Runs the exchange on `socket` with `password` (the code's SPAKE2 scalar:
    /// `WordCode.passwordScalar`, worked out before, since scrypt takes tens of milliseconds)
    /// before `deadline`. `context` binds the key to what both sides agreed on before (the
    /// nameplate): a code used under another nameplate gives another key.
    package static func run(
        on socket: BlockingSocket, password: [UInt8], role: Role, context: [UInt8], deadline: UInt64
    ) throws(SluiceError) -> CodeKey {
        let spake: SPAKE2
        do {
            spake = try SPAKE2(
                role: role == .sender ? .a : .b, password: password, identityA: Array("sluice sender".utf8),
                identityB: Array("sluice receiver".utf8), additionalData: context)
        } catch {
            throw SluiceError(.authenticationFailed, operation: "code exchange", detail: "libcrypto failed (\(error))")
        }
        // A peer that never sends a whole hello made no guess, however it went (silent, closed,
        // reset before or while our share went out): `.protocolViolation`, which a sender at
        // its own door (on a local network) may shrug off and go on waiting.
        let hello: [UInt8]
        do {
            try socket.write(magic + spake.share, deadline: deadline)
            hello = try socket.read(exactly: magic.count + SPAKE2.shareBytes, deadline: deadline)
        } catch {
            let how = error.code == .truncatedData || error.code == .timedOut ? "" : " (\(error.reason))"
            throw SluiceError(
                .protocolViolation, operation: "code exchange",
                detail: "the peer sent no share (not a sluice?)" + how)
        }
        guard Array(hello[0..<magic.count]) == magic else {
            throw SluiceError(
                .protocolViolation, operation: "code exchange",
                detail: "the peer does not speak this version of sluice's code exchange")
        }
        let exchange: SPAKE2.Exchange
        do {
            exchange = try spake.finish(peerShare: Array(hello[magic.count...]))
        } catch {
            throw failure("the peer's share is not a point of the curve (a tampered message?)")
        }
        try socket.write(exchange.confirmation, deadline: deadline)
        let confirmation = try peerBytes(socket, SPAKE2.confirmationBytes, deadline: deadline)
        guard exchange.confirms(confirmation) else {
            throw failure("the code is wrong, or someone tried to guess it; this code is used up")
        }
        return CodeKey(secret: exchange.key)
    }

    /// Reads the peer's message; its end before the exchange finished is a failed exchange too:
    /// one that left without confirming may have been a guess.
    private static func peerBytes(_ socket: BlockingSocket, _ count: Int, deadline: UInt64) throws(SluiceError)
        -> [UInt8]
    {
        do {
            return try socket.read(exactly: count, deadline: deadline)
        } catch {
            guard error.code == .truncatedData else { throw error }
            throw failure("the peer left before the code was confirmed (a wrong code, or a guess)")
        }
    }

    private static func failure(_ why: String) -> SluiceError {
        SluiceError(.authenticationFailed, operation: "code exchange", detail: why)
    }
}

/// The strong key a `CodeHandshake` agreed on, and what is derived from it (HKDF-SHA256, one
/// label each): the TLS PSK, the relay tokens of further connections, and the keys that seal
/// the one message each side sends before TLS.
package struct CodeKey: Sendable {
    private let secret: [UInt8]

    package init(secret: [UInt8]) { self.secret = secret }

    private func derive(_ label: String, count: Int = 32) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        let info = Array(label.utf8)
        let salt = PreSharedKey.salt
        _ = sluice_hkdf_sha256(secret, secret.count, salt, salt.count, info, info.count, &out, out.count)
        return out
    }

    /// TLS 1.3's external PSK for every connection of the transfer.
    package var preSharedKey: PreSharedKey {
        PreSharedKey.derive(secret: secret, label: "sluice tls13 psk from code exchange")
    }

    /// The relay's pairing token of further connection `index` (1, 2, …): 64 hex digits that
    /// only the two peers can work out.
    package func streamToken(_ index: Int) -> String {
        Hex.encode(derive("sluice relay stream \(index)"))
    }

    /// What `role` shows on direct connection `index` to prove it holds the key (a peer
    /// reached directly may be anyone until it does).
    package func proof(from role: CodeHandshake.Role, index: Int) -> [UInt8] {
        derive("sluice direct proof from \(role == .sender ? "sender" : "receiver") \(index)")
    }

    /// Whether `shown` is `role`'s proof for connection `index` (compared in constant time).
    package func checks(_ shown: [UInt8], from role: CodeHandshake.Role, index: Int) -> Bool {
        let expected = proof(from: role, index: index)
        guard shown.count == expected.count else { return false }
        return shown.withUnsafeBytes { a in
            expected.withUnsafeBytes { b in CRYPTO_memcmp(a.baseAddress, b.baseAddress, a.count) == 0 }
        }
    }

    /// `plaintext` sealed by `role` as its message `number` (0, 1, …) with AES-256-GCM: a key of
    /// its own per role and number, each sealing one message, so the nonce can be fixed. The
    /// ciphertext and its 16-byte tag.
    package func seal(_ plaintext: [UInt8], from role: CodeHandshake.Role, number: Int = 0) -> [UInt8]? {
        Self.gcm(encrypt: true, key: derive(Self.sealLabel(role, number)), plaintext)
    }

    /// What `seal(_:from:number:)` sealed; nil when it was not sealed with this key by `role` as
    /// message `number`.
    package func open(_ sealed: [UInt8], from role: CodeHandshake.Role, number: Int = 0) -> [UInt8]? {
        guard sealed.count >= 16 else { return nil }
        return Self.gcm(encrypt: false, key: derive(Self.sealLabel(role, number)), sealed)
    }

    private static func sealLabel(_ role: CodeHandshake.Role, _ number: Int) -> String {
        "sluice sealed from \(role == .sender ? "sender" : "receiver") \(number)"
    }

    private static func gcm(encrypt: Bool, key: [UInt8], _ input: [UInt8]) -> [UInt8]? {
        guard let context = EVP_CIPHER_CTX_new() else { return nil }
        defer { EVP_CIPHER_CTX_free(context) }
        let nonce = [UInt8](repeating: 0, count: 12)
        let body = encrypt ? input : Array(input.dropLast(16))
        var tag = encrypt ? [UInt8](repeating: 0, count: 16) : Array(input.suffix(16))
        var out = [UInt8](repeating: 0, count: body.count + 16)
        var length: Int32 = 0
        var tail: Int32 = 0
        let mode: Int32 = encrypt ? 1 : 0
        guard EVP_CipherInit_ex(context, EVP_aes_256_gcm(), nil, key, nonce, mode) == 1 else { return nil }
        if !encrypt {
            guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, 16, &tag) == 1 else { return nil }
        }
        guard EVP_CipherUpdate(context, &out, &length, body, Int32(body.count)) == 1 else { return nil }
        let ok = out.withUnsafeMutableBufferPointer { buffer in
            EVP_CipherFinal_ex(context, buffer.baseAddress! + Int(length), &tail)
        }
        guard ok == 1 else { return nil }
        let produced = Int(length + tail)
        if encrypt {
            guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, 16, &tag) == 1 else { return nil }
            return Array(out[0..<produced]) + tag
        }
        return Array(out[0..<produced])
    }
}
