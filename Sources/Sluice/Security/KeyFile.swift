import CCrypto

#if canImport(Glibc)
    import Glibc
#endif

/// A long-lived shared key for send/receive: 32 random bytes in a file of one line,
/// `sluice-key-v1 HEX`, readable by its owner only (mode 0600).
public struct KeyFile: Hashable, Sendable {
    public let bytes: [UInt8]
    static let header = "sluice-key-v1 "

    /// Makes a new key and writes it to `path` with mode 0600; never replaces a file.
    @discardableResult
    public static func generate(atPath path: String) throws(SluiceError) -> KeyFile {
        var bytes = [UInt8](repeating: 0, count: 32)
        guard RAND_bytes(&bytes, 32) == 1 else {
            throw SluiceError(.system(.ioError), operation: "keygen", path: path, detail: "no entropy")
        }
        let text = Array((header + Hex.encode(bytes) + "\n").utf8)
        let fd: Int32
        switch openFile(path, flags: O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, permissions: 0o600) {
        case .success(let opened): fd = opened
        case .failure(let error): throw error
        }
        defer { closeDescriptor(fd) }
        // The umask cannot widen 0600, but a file system may ignore the mode: set it again.
        _ = fchmod(fd, 0o600)
        let written = text.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        guard written == text.count, fsync(fd) == 0 else {
            let error = SluiceError(.system(.current), operation: "write", path: path)
            unlink(path)
            throw error
        }
        return KeyFile(bytes: bytes)
    }

    /// Reads a key file. Refuses one that others can read (as ssh does) or that is not one
    /// line `sluice-key-v1` and 64 hex digits.
    public static func load(path: String) throws(SluiceError) -> KeyFile {
        let fd: Int32
        switch openFile(path, flags: O_RDONLY | O_CLOEXEC, permissions: 0) {
        case .success(let opened): fd = opened
        case .failure(let error): throw error
        }
        defer { closeDescriptor(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw SluiceError(.system(.current), operation: "stat", path: path) }
        if let open = openToOthers(info.st_mode) {
            throw SluiceError(.authenticationFailed, operation: "key file", path: path, detail: open)
        }
        var buffer = [UInt8](repeating: 0, count: 256)
        let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        guard n >= 0 else { throw SluiceError(.system(.current), operation: "read", path: path) }
        guard let key = parse(String(decoding: buffer[..<n], as: UTF8.self)) else {
            throw SluiceError(
                .invalidArgument, operation: "key file", path: path,
                detail: "not a sluice key (one line: sluice-key-v1 and 64 hex digits)")
        }
        return key
    }

    /// Why a secret's file with `mode` is refused: group or others may read or write it
    /// (`readable by others (mode 0644; chmod 600 it)`). Nil when only its owner may.
    public static func openToOthers(_ mode: mode_t) -> String? {
        let permissions = mode & 0o7777
        guard permissions & 0o077 != 0 else { return nil }
        let how = permissions & 0o044 != 0 ? "readable" : "writable"
        return "\(how) by others (mode 0\(String(permissions, radix: 8)); chmod 600 it)"
    }

    /// Parses a key file's text; nil unless it is exactly one key line.
    public static func parse(_ text: String) -> KeyFile? {
        var line = Substring(text)
        if line.hasSuffix("\n") { line = line.dropLast() }
        guard line.hasPrefix(header), let bytes = Hex.decode(line.dropFirst(header.count)), bytes.count == 32 else {
            return nil
        }
        return KeyFile(bytes: bytes)
    }
}
