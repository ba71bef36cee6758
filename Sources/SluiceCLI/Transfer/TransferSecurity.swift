import FoundationEssentials
import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// Turns `TransferAuth` into what the library needs: a pre-shared key, or nil for plaintext.
enum TransferSecurity {
    /// The environment variable `send` reads the receiver's pairing code from.
    static let codeVariable = "SLUICE_CODE"

    /// The sender's key: from the key file, or from the code in `--code-file`, `$SLUICE_CODE`,
    /// or typed at the terminal (without echo). Nil for `--insecure`.
    static func senderKey(
        _ auth: TransferAuth, for command: String = "send",
        orGive options: String = "--code-file FILE or --key-file FILE"
    ) -> Result<PreSharedKey?, CLIError> {
        switch auth {
        case .insecure:
            return .success(nil)
        case .keyFile(let path):
            return keyFromFile(path)
        case .code(let file):
            let text: String
            let source: String
            if let file {
                switch readCodeFile(file) {
                case .success(let read): (text, source) = (read, "code file \(file)")
                case .failure(let error): return .failure(error)
                }
            } else if let value = getenv(codeVariable) {
                (text, source) = (String(cString: value), codeVariable)
            } else if let typed = promptForCode() {
                (text, source) = (typed, "code")
            } else {
                return .failure(
                    CLIError(
                        .usage,
                        "\(command): no pairing code: set \(codeVariable), or give \(options)"
                            + (command == "send" ? " (or --insecure on both sides of a trusted link)" : "")))
            }
            let trimmed = String(text.drop(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed())
            switch PairingCode.parse(trimmed) {
            case .success(let code): return .success(PreSharedKey.derive(from: code))
            case .failure(let error): return .failure(CLIError(.usage, "\(source): \(error)"))
            }
        }
    }

    /// The receiver's key: from the key file, or a new pairing code (returned to be shown).
    static func receiverKey(_ auth: TransferAuth) -> Result<(PreSharedKey, PairingCode?)?, CLIError> {
        switch auth {
        case .insecure:
            return .success(nil)
        case .keyFile(let path):
            return keyFromFile(path).map { key in key.map { ($0, nil) } }
        case .code:
            guard let code = PairingCode.generate() else {
                return .failure(CLIError(.ioError, "receive: no random bytes for a pairing code"))
            }
            return .success((PreSharedKey.derive(from: code), code))
        }
    }

    private static func keyFromFile(_ path: String) -> Result<PreSharedKey?, CLIError> {
        do {
            return .success(PreSharedKey.derive(from: try KeyFile.load(path: path)))
        } catch {
            let status: ExitStatus = error.code == .invalidArgument ? .usage : .noInput
            // A key file open to others: said as for a code file, without "authentication failed".
            let reason = error.code == .authenticationFailed ? error.detail ?? error.reason : error.reason
            return .failure(CLIError(status, "key file \(path): \(reason)"))
        }
    }

    /// The text of a code file, refused (as ssh refuses a private key, and as a key file is)
    /// when group or others may read or write it: the code is the transfer's secret.
    private static func readCodeFile(_ path: String) -> Result<String, CLIError> {
        let failed = { CLIError(.noInput, "code file \(path): \(String(cString: strerror(errno)))") }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .failure(failed()) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return .failure(failed()) }
        if let open = KeyFile.openToOthers(info.st_mode) {
            return .failure(CLIError(.noInput, "code file \(path): \(open)"))
        }
        var buffer = [UInt8](repeating: 0, count: 512)
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard n >= 0 else { return .failure(failed()) }
        return .success(String(decoding: buffer[0..<n], as: UTF8.self))
    }

    /// Asks for the code on the controlling terminal with echo off; nil without a terminal.
    private static func promptForCode() -> String? {
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC)
        guard tty >= 0 else { return nil }
        defer { close(tty) }
        var saved = termios()
        let haveTermios = tcgetattr(tty, &saved) == 0
        if haveTermios {
            var quiet = saved
            quiet.c_lflag &= ~tcflag_t(ECHO)
            _ = tcsetattr(tty, TCSAFLUSH, &quiet)
        }
        defer { if haveTermios { _ = tcsetattr(tty, TCSAFLUSH, &saved) } }
        let prompt = Array("pairing code (from the receiver): ".utf8)
        _ = prompt.withUnsafeBytes { write(tty, $0.baseAddress, $0.count) }
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while line.count < 256, read(tty, &byte, 1) == 1, byte != UInt8(ascii: "\n") { line.append(byte) }
        _ = write(tty, "\n", 1)
        return String(decoding: line, as: UTF8.self)
    }

    /// Says on stderr that the connection is not protected.
    static func warnInsecure(_ command: String) {
        Terminal.report(
            "warning: \(command) --insecure: no encryption and no authentication; anyone on the path can read "
                + "and alter the files, and anyone who reaches the port can send")
    }
}
