#if canImport(Glibc)
    import Glibc
#endif

/// A sender's secret that vouches for the bytes a receiver holds of a file it was sending
/// (`resume-token`), so that resuming the file costs no read of them.
///
/// Before each resumable file a sender with a key sends a token: an HMAC-SHA256, under its
/// secret, of the receiver it dialled and the file's path, size and mtime. The receiver keeps
/// only a digest of the token beside a partial it starts (the attribute `user.sluice.token`),
/// drops it as soon as a partial is continued without the same token, and continues a partial
/// without reading it back only when the token presented now is the one it was written under.
/// Every other partial is checked with SHA-256 at both ends (`held-sha256`), as before.
///
/// Nobody but the sender can compute its tokens: another holder of the transfer's key, or a
/// receiver the sender also sends to (which learns the tokens for *its* address), cannot plant
/// bytes that a later resume would take without checking them. Tokens are sent only over an
/// authenticated, encrypted connection: `sluice send` uses one only with a key or a code.
public struct ResumeKey: Sendable, Equatable {
    /// The secret: 32 random bytes.
    public let secret: [UInt8]
    /// The receiver as the sender names it (address and key), bound into every token: tokens
    /// learned by one receiver are worthless at another.
    public let receiver: String

    public init(secret: [UInt8], receiver: String) {
        self.secret = secret
        self.receiver = receiver
    }

    /// The key kept at `path` (by default `defaultPath`), made on first use: a key file
    /// (`sluice-key-v1 HEX`, mode 0600, as `KeyFile`) in a directory made with mode 0700.
    /// Throws when no path is known, or the file cannot be made or read, or others may read it.
    public init(receiver: String, path: String? = nil) throws(SluiceError) {
        guard let path = path ?? Self.defaultPath else {
            throw SluiceError(
                .invalidArgument, operation: "resume key", detail: "no state directory (set XDG_STATE_HOME or HOME)")
        }
        self.init(secret: try Self.loadOrMake(path).bytes, receiver: receiver)
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

    private static func loadOrMake(_ path: String) throws(SluiceError) -> KeyFile {
        if access(path, F_OK) == 0 { return try KeyFile.load(path: path) }
        try makeDirectories(String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)]))
        let made = Result { () throws(SluiceError) in try KeyFile.generate(atPath: path) }
        switch made {
        case .success(let key): return key
        // Made meanwhile by another sender: use that one.
        case .failure(let error) where error.errno == .fileExists: return try KeyFile.load(path: path)
        case .failure(let error): throw error
        }
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

    /// The token of a file as announced: HMAC-SHA256 under the secret of a label, the
    /// receiver, and the path, size and mtime (a ranged file's ranges share it).
    func token(for header: EntryHeader) -> [UInt8] {
        var message = Array("sluice-resume-token-v1".utf8) + [0]
        message += Array(receiver.utf8) + [0]
        message += header.path + [0]
        message += bigEndian(header.size) + bigEndian(UInt64(bitPattern: header.mtimeSeconds))
        message += bigEndian(UInt64(header.mtimeNanoseconds))
        return Self.hmacSHA256(key: secret, message: message)
    }

    private func bigEndian(_ value: UInt64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) }
    }

    /// What a receiver keeps of a token beside its partial: the hex SHA-256 of a label and the
    /// token (reading the attribute tells nobody the token).
    static func tag(of token: [UInt8]) -> [UInt8] {
        Array(SHA256Digest.hex(SHA256Digest.hash(Array("sluice-resume-tag-v1".utf8) + [0] + token)).utf8)
    }

    /// HMAC (RFC 2104) with SHA-256.
    static func hmacSHA256(key: [UInt8], message: [UInt8]) -> [UInt8] {
        let block = 64
        var padded = key.count > block ? SHA256Digest.hash(key) : key
        padded += [UInt8](repeating: 0, count: block - padded.count)
        let inner = SHA256Digest.hash(padded.map { $0 ^ 0x36 } + message)
        return SHA256Digest.hash(padded.map { $0 ^ 0x5C } + inner)
    }
}
