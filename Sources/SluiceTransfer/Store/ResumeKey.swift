import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// A sender's secret that vouches for the bytes a receiver holds of a file it was sending
/// (`resume-token`), so that resuming the file costs no read of them.
///
/// Before each resumable file a sender with a key sends a token: an HMAC-SHA256 of the file's
/// path, size and mtime under a token key, itself an HMAC-SHA256 under the sender's secret of
/// the key that authenticates the receiver (the TLS pre-shared key of its key file or of its
/// pairing code). The receiver keeps only a digest of the token beside a partial it starts
/// (the attribute `user.sluice.token`), drops it as soon as a partial is continued without
/// the same token, and continues a partial without reading it back only when the token
/// presented now is the one it was written under. Every other partial is checked with SHA-256
/// at both ends (`held-sha256`), as before.
///
/// Nobody but the sender can compute its tokens: another holder of the transfer's key, or a
/// receiver the sender also sends to with another key (which learns the tokens for *its*
/// key), cannot plant bytes that a later resume would take without checking them. The binding
/// is to the receiver's key, not to the address dialled: the same receiver reached under
/// another name or port still vouches, and a receiver with a new pairing code is another
/// receiver, whose held bytes are checked. Tokens are sent only over an authenticated,
/// encrypted connection: `sluice send` uses one only with a key or a code.
public struct ResumeKey: Sendable, Equatable {
    /// The secret: 32 random bytes.
    public let secret: [UInt8]
    /// What the tokens are made with: the secret's HMAC of the receiver's binding.
    private let tokenKey: [UInt8]

    /// Tokens for the receiver that authenticates with `receiverKey`, the pre-shared key of
    /// its key file or of its pairing code: worthless to a receiver with any other key.
    public init(secret: [UInt8], receiverKey: PreSharedKey) {
        self.init(secret: secret, binding: Array("psk".utf8) + [0] + receiverKey.key + Array(receiverKey.identity.utf8))
    }

    /// Tokens bound to `receiver`, a name the caller gives the receiver (for a library user
    /// whose receivers have no pre-shared key): worthless to a receiver with another name.
    public init(secret: [UInt8], receiver: String) {
        self.init(secret: secret, binding: Array("name".utf8) + [0] + Array(receiver.utf8))
    }

    private init(secret: [UInt8], binding: [UInt8]) {
        self.secret = secret
        tokenKey = SHA256Digest.authenticationCode(
            key: secret, message: Array("sluice-resume-token-key-v2".utf8) + [0] + binding)
    }

    /// The key kept at `path` (by default `defaultPath`), made on first use: a key file
    /// (`sluice-key-v1 HEX`, mode 0600, as `KeyFile`) in a directory made with mode 0700; its
    /// tokens for the receiver that authenticates with `receiverKey`. Throws when no path is
    /// known, or the file cannot be made or read, or others may read it.
    public init(receiverKey: PreSharedKey, path: String? = nil) throws(SluiceError) {
        guard let path = path ?? Self.defaultPath else {
            throw SluiceError(
                .invalidArgument, operation: "resume key", detail: "no state directory (set XDG_STATE_HOME or HOME)")
        }
        self.init(secret: try Self.loadOrMake(path).bytes, receiverKey: receiverKey)
    }

    /// `$XDG_STATE_HOME/sluice/resume.key`, else `$HOME/.local/state/sluice/resume.key`; nil
    /// without either (or with a relative one, which the XDG specification says to ignore).
    public static var defaultPath: String? {
        if let state = environment("XDG_STATE_HOME"), state.hasPrefix("/") { return state + "/sluice/resume.key" }
        if let home = environment("HOME"), home.hasPrefix("/") { return home + "/.local/state/sluice/resume.key" }
        return nil
    }

    private static func environment(_ name: String) -> String? {
        guard let value = getenv(name) else { return nil }
        let text = String(cString: value)
        return text.isEmpty ? nil : text
    }

    /// The key at `path`, or a new one made there. It is written whole under a name of its own
    /// and linked into place (`link`, which never replaces), so that a sender starting at the
    /// same moment finds no key or the whole one, never a file still being written.
    private static func loadOrMake(_ path: String) throws(SluiceError) -> KeyFile {
        if access(path, F_OK) == 0 { return try KeyFile.load(path: path) }
        try makeDirectories(String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)]))
        let temporary = path + ".new-\(getpid())-" + String(UInt64.random(in: .min ... .max), radix: 16)
        let key = try KeyFile.generate(atPath: temporary)
        defer { unlink(temporary) }
        guard link(temporary, path) == 0 else {
            // Made meanwhile by another sender: use that one.
            if errno == EEXIST { return try KeyFile.load(path: path) }
            throw SluiceError(.system(.current), operation: "link", path: path)
        }
        return key
    }

    /// `mkdir -p` with mode 0700 for what it makes.
    private static func makeDirectories(_ path: String) throws(SluiceError) {
        guard !path.isEmpty else { return }
        var made = ""
        for component in path.split(separator: "/") {
            made += "/" + component
            if mkdir(made, 0o700) != 0 && errno != EEXIST {
                throw SluiceError(.system(.current), operation: "mkdir", path: made)
            }
        }
    }

    /// The token of a file as announced: HMAC-SHA256 under the token key of a label and the
    /// path, size and mtime (a ranged file's ranges share it).
    func token(for header: EntryHeader) -> [UInt8] {
        var message = Array("sluice-resume-token-v2".utf8) + [0]
        message += header.path + [0]
        message += bigEndian(header.size) + bigEndian(UInt64(bitPattern: header.mtimeSeconds))
        message += bigEndian(UInt64(header.mtimeNanoseconds))
        return SHA256Digest.authenticationCode(key: tokenKey, message: message)
    }

    private func bigEndian(_ value: UInt64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) }
    }

    /// What a receiver keeps of a token beside its partial: the hex SHA-256 of a label and the
    /// token (reading the attribute tells nobody the token).
    static func tag(of token: [UInt8]) -> [UInt8] {
        Array(SHA256Digest.hex(SHA256Digest.hash(Array("sluice-resume-tag-v1".utf8) + [0] + token)).utf8)
    }
}
