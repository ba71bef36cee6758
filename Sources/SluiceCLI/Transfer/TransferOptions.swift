import Sluice
import SluiceTransfer

/// Where `sluice send` connects and where `sluice receive` listens.
///
/// Written `[HOST:]PORT`, `[V6]:PORT`, `tcp:HOST:PORT` or `unix:PATH`. Without a host, a
/// sender connects to `localhost` and a receiver listens on every interface. Only a
/// receiver may use port 0 (the kernel picks a free port, which it prints).
enum TransferAddress: Hashable, Sendable, CustomStringConvertible {
    case tcp(host: String?, port: UInt16)
    case unix(String)

    /// The port a receiver listens on without `--listen`.
    static let defaultPort: UInt16 = 9000

    /// Parses `text`; `listening` allows port 0 and a missing host.
    init(parsing text: String, listening: Bool) throws(UsageError) {
        if text.hasPrefix("unix:") {
            let path = String(text.dropFirst("unix:".count))
            guard !path.isEmpty else { throw UsageError("\(text): missing socket path after 'unix:'") }
            guard path.utf8.count <= Endpoint.maximumUnixPathBytes else {
                throw UsageError(
                    "\(text): socket path is \(path.utf8.count) bytes, at most \(Endpoint.maximumUnixPathBytes) fit")
            }
            self = .unix(path)
            return
        }
        var rest = Substring(text)
        for scheme in ["tcp:", "tcp-listen:"] where rest.hasPrefix(scheme) {
            rest = rest.dropFirst(scheme.count)
            break
        }
        guard !rest.isEmpty else { throw UsageError("empty address (like HOST:PORT, PORT or unix:PATH)") }
        var host: String?
        var portText = rest
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else {
                throw UsageError("\(text): missing ']' after the IPv6 address")
            }
            let inside = rest[rest.index(after: rest.startIndex)..<close]
            guard inside.contains(":") else {
                throw UsageError("\(text): brackets are for IPv6 addresses, not '\(inside)'")
            }
            let after = rest[rest.index(after: close)...]
            guard after.hasPrefix(":") else { throw UsageError("\(text): missing ':PORT' after the address") }
            host = String(inside)
            portText = after.dropFirst()
        } else if let colon = rest.lastIndex(of: ":") {
            let hostPart = rest[..<colon]
            guard !hostPart.isEmpty else { throw UsageError("\(text): empty host") }
            guard !hostPart.contains(":") else {
                throw UsageError("\(text): write an IPv6 address in brackets, like [::1]:PORT")
            }
            host = String(hostPart)
            portText = rest[rest.index(after: colon)...]
        }
        let lowest = listening ? 0 : 1
        guard !portText.isEmpty, portText.count <= 5, portText.allSatisfy({ $0.isASCII && $0.isNumber }),
            let port = Int(portText), (lowest...65535).contains(port)
        else {
            throw UsageError("\(text): port '\(portText)' is not a number from \(lowest) to 65535")
        }
        self = .tcp(host: host, port: UInt16(port))
    }

    var description: String {
        switch self {
        case .tcp(let host?, let port): return "\(host.contains(":") ? "[\(host)]" : host):\(port)"
        case .tcp(nil, let port): return "\(port)"
        case .unix(let path): return "unix:\(path)"
        }
    }
}

/// Turns a session's or a transfer's outcome into an exit status, the same way for both ends:
/// any file that failed its integrity check → 65; else the connection's own failure; else any
/// refused file → 73; else any file that failed for input/output → 74; else 0.
enum TransferStatus {
    static func status(results: [TransferFileResult], connectionError: ExitStatus?) -> ExitStatus {
        var refused = false
        var ioFailed = false
        for result in results {
            switch result.outcome {
            case .stored: break
            case .refused: refused = true
            case .failed(_, .data): return .dataError
            case .failed(_, .io): ioFailed = true
            }
        }
        if let connectionError { return connectionError }
        if refused { return .cannotCreate }
        if ioFailed { return .ioError }
        return .ok
    }

    /// The same for a receiver's sessions, from their counts.
    static func status(tally: TransferTally, connectionError: ExitStatus?) -> ExitStatus {
        if tally.failedData > 0 { return .dataError }
        if let connectionError { return connectionError }
        if tally.refused > 0 { return .cannotCreate }
        if tally.failedIO > 0 { return .ioError }
        return .ok
    }

    /// The status for a transfer that failed as a whole: 69 when the connection could not be
    /// made, 64 for a value the library rejects, 74 for anything else (reset, closed, protocol).
    static func status(connection error: SluiceError, connected: Bool) -> ExitStatus {
        switch error.code {
        case .unknownHost:
            return .unavailable
        case .timedOut where !connected:
            return .unavailable
        case .system(let errno) where !connected:
            let unavailable: [Errno] = [
                .connectionRefused, .hostUnreachable, .networkUnreachable, .noSuchFile, .permissionDenied,
                .notDirectory,
            ]
            return unavailable.contains(errno) ? .unavailable : .ioError
        case .invalidArgument:
            return .usage
        case .unavailable:
            return .unavailable
        case .authenticationFailed:
            return .notPermitted
        default:
            return .ioError
        }
    }
}

/// The parsing of `--compress` for a transfer: files are compressed with raw deflate, one
/// stream per file, so only the level matters. Accepts nothing (level 6), `LEVEL`, and
/// `[FORMAT][:LEVEL]` as for `copy`.
enum TransferCompression {
    static func level(_ option: ParsedArguments.Occurrence) throws(UsageError) -> Int {
        if let value = option.value, value.count == 1, let level = Int(value) {
            guard CompressionSpec.levels.contains(level) else {
                throw UsageError("\(option.spelling): level '\(value)' is not a number from 0 to 9")
            }
            return level
        }
        return try CompressionSpec(parsing: option.value, spelling: option.spelling).level
    }
}

/// How a transfer's connection is secured, as the command line says.
enum TransferAuth: Sendable, Equatable {
    /// TLS 1.3 with a key derived from a one-time pairing code (the receiver makes it; the
    /// sender reads it from `SLUICE_CODE`, `--code-file` or the terminal).
    case code(file: String?)
    /// TLS 1.3 with a key derived from a key file made by `sluice keygen`.
    case keyFile(String)
    /// Plaintext (`--insecure`): trusted links and benchmarks only.
    case insecure

    static let keyFileOption = Option<String>(
        "key-file", value: .required("FILE"),
        help: "authenticate with the key in FILE (made by\n'sluice keygen', mode 600) instead of a pairing code")
    static let insecureOption = Flag(
        "insecure", help: "no encryption, no authentication: plaintext, for\ntrusted links only (both sides)")

    init(_ parsed: ParsedArguments, codeFile: String? = nil) throws(UsageError) {
        let key = try parsed.last(Self.keyFileOption)
        if parsed[Self.insecureOption] {
            if let key { throw UsageError("\(key.spelling) and --insecure: choose one") }
            if codeFile != nil { throw UsageError("--code-file and --insecure: choose one") }
            self = .insecure
        } else if let key {
            guard !key.value.isEmpty else { throw UsageError("\(key.spelling): empty path") }
            if codeFile != nil { throw UsageError("--code-file and \(key.spelling): choose one") }
            self = .keyFile(key.value)
        } else {
            self = .code(file: codeFile)
        }
    }
}
