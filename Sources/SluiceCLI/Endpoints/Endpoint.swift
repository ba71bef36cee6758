/// Where bytes come from or go to, as written on the command line (socat-like):
///
/// | written                  | endpoint                                   |
/// |--------------------------|--------------------------------------------|
/// | `PATH`, `file:PATH`      | `.file(PATH)`                              |
/// | `-`                      | `.standardIO` (stdin as SOURCE, stdout as DEST) |
/// | `tcp:HOST:PORT`          | `.tcpConnect` (IPv6 as `tcp:[::1]:PORT`)   |
/// | `tcp-listen:[HOST:]PORT` | `.tcpListen`, accepts one connection       |
/// | `unix:PATH`              | `.unixConnect`                             |
/// | `unix-listen:PATH`       | `.unixListen`, accepts one connection      |
/// | `tls:HOST:PORT[,OPT=VAL…]` | `.tlsConnect`: TLS 1.3 client            |
/// | `tls-listen:[HOST:]PORT[,OPT=VAL…]` | `.tlsListen`: TLS 1.3 server, one connection |
enum Endpoint: Hashable, Sendable, CustomStringConvertible {
    case file(String)
    case standardIO
    case tcpConnect(host: String, port: UInt16)
    case tcpListen(host: String?, port: UInt16)
    case unixConnect(String)
    case unixListen(String)
    case tlsConnect(host: String, port: UInt16, TLSEndpointOptions)
    case tlsListen(host: String?, port: UInt16, TLSEndpointOptions)

    /// The longest path a Unix-domain socket address holds (`sun_path` is 108 bytes with the NUL).
    static let maximumUnixPathBytes = 107

    /// The endpoint types written as `TYPE:`.
    static let schemes = ["file", "tcp", "tcp-listen", "unix", "unix-listen", "tls", "tls-listen"]

    /// Parses one endpoint operand. Throws a usage error that names the operand and what is wrong.
    init(parsing text: String) throws(UsageError) {
        if text == "-" {
            self = .standardIO
            return
        }
        guard let colon = text.firstIndex(of: ":"), Self.looksLikeScheme(text[..<colon]) else {
            guard !text.isEmpty else { throw UsageError("empty endpoint (a path, '-', or TYPE:ADDRESS)") }
            self = .file(text)
            return
        }
        let scheme = String(text[..<colon])
        let rest = String(text[text.index(after: colon)...])
        switch scheme {
        case "file":
            guard !rest.isEmpty else { throw UsageError("\(text): missing path after 'file:'") }
            self = .file(rest)
        case "tcp":
            let (host, port) = try Self.hostAndPort(rest, in: text, hostRequired: true)
            self = .tcpConnect(host: host!, port: port)
        case "tcp-listen":
            let (host, port) = try Self.hostAndPort(rest, in: text, hostRequired: false)
            self = .tcpListen(host: host, port: port)
        case "tls", "tls-listen":
            let address = rest.prefix { $0 != "," }
            let options =
                address.endIndex == rest.endIndex
                ? TLSEndpointOptions()
                : try TLSEndpointOptions(parsing: rest[rest.index(after: address.endIndex)...], in: text)
            let (host, port) = try Self.hostAndPort(String(address), in: text, hostRequired: scheme == "tls")
            self =
                scheme == "tls"
                ? .tlsConnect(host: host!, port: port, options) : .tlsListen(host: host, port: port, options)
        case "unix", "unix-listen":
            guard !rest.isEmpty else { throw UsageError("\(text): missing socket path after '\(scheme):'") }
            guard rest.utf8.count <= Self.maximumUnixPathBytes else {
                throw UsageError(
                    "\(text): socket path is \(rest.utf8.count) bytes, at most \(Self.maximumUnixPathBytes) fit")
            }
            self = scheme == "unix" ? .unixConnect(rest) : .unixListen(rest)
        default:
            throw UsageError(
                "\(text): unknown endpoint type '\(scheme):' (one of \(Self.schemes.map { $0 + ":" }.joined(separator: ", "));"
                    + " a file whose name has a colon: file:\(text))")
        }
    }

    /// A word that is meant as an endpoint type: a letter, then letters, digits and dashes.
    /// Anything else before the first colon (`./a:b`, `/x:y`, `a.b:c`) is part of a path.
    private static func looksLikeScheme(_ word: Substring) -> Bool {
        guard let first = word.first, first.isASCII, first.isLetter else { return false }
        return word.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }
    }

    /// Splits `HOST:PORT`, `[V6]:PORT` or (without `hostRequired`) `PORT`. Port 0 (any free
    /// port) only with `allowsAnyPort`, for listeners that print the port they got.
    static func hostAndPort(
        _ text: String, in operand: String, hostRequired: Bool, allowsAnyPort: Bool = false
    ) throws(UsageError) -> (String?, UInt16) {
        let host: String?
        let portText: String
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else {
                throw UsageError("\(operand): missing ']' after the IPv6 address")
            }
            let inside = text[text.index(after: text.startIndex)..<close]
            guard !inside.isEmpty else { throw UsageError("\(operand): empty host") }
            guard inside.contains(":") else {
                throw UsageError("\(operand): brackets are for IPv6 addresses, not '\(inside)'")
            }
            let after = text[text.index(after: close)...]
            guard after.hasPrefix(":") else { throw UsageError("\(operand): missing ':PORT' after the address") }
            host = String(inside)
            portText = String(after.dropFirst())
        } else if let colon = text.lastIndex(of: ":") {
            let hostPart = text[..<colon]
            guard !hostPart.isEmpty else { throw UsageError("\(operand): empty host") }
            guard !hostPart.contains(":") else {
                throw UsageError("\(operand): write an IPv6 address in brackets, like tcp:[::1]:PORT")
            }
            host = String(hostPart)
            portText = String(text[text.index(after: colon)...])
        } else {
            guard !hostRequired else {
                throw UsageError("\(operand): missing port (HOST:PORT)")
            }
            host = nil
            portText = text
        }
        return (host, try port(portText, in: operand, allowsZero: allowsAnyPort))
    }

    private static func port(_ text: String, in operand: String, allowsZero: Bool) throws(UsageError) -> UInt16 {
        guard !text.isEmpty else { throw UsageError("\(operand): missing port") }
        let lowest = allowsZero ? 0 : 1
        guard text.allSatisfy({ $0.isASCII && $0.isNumber }), text.count <= 5, let value = Int(text),
            (lowest...65535).contains(value)
        else {
            throw UsageError("\(operand): port '\(text)' is not a number from \(lowest) to 65535")
        }
        return UInt16(value)
    }

    /// The endpoint as a user would write it, for messages and statistics.
    var description: String {
        switch self {
        case .file(let path): return path
        case .standardIO: return "-"
        case .tcpConnect(let host, let port): return "tcp:\(Self.bracketed(host)):\(port)"
        case .tcpListen(let host?, let port): return "tcp-listen:\(Self.bracketed(host)):\(port)"
        case .tcpListen(nil, let port): return "tcp-listen:\(port)"
        case .unixConnect(let path): return "unix:\(path)"
        case .unixListen(let path): return "unix-listen:\(path)"
        case .tlsConnect(let host, let port, let options): return "tls:\(Self.bracketed(host)):\(port)\(options.suffix)"
        case .tlsListen(let host?, let port, let options):
            return "tls-listen:\(Self.bracketed(host)):\(port)\(options.suffix)"
        case .tlsListen(nil, let port, let options): return "tls-listen:\(port)\(options.suffix)"
        }
    }

    private static func bracketed(_ host: String) -> String { host.contains(":") ? "[\(host)]" : host }

    /// True for the socket endpoints.
    var isSocket: Bool {
        switch self {
        case .tcpConnect, .tcpListen, .unixConnect, .unixListen, .tlsConnect, .tlsListen: return true
        case .file, .standardIO: return false
        }
    }

    /// The name for messages about this endpoint in `role`: `stdin`/`stdout` for `-`.
    func displayName(as role: EndpointRole) -> String {
        switch (self, role) {
        case (.standardIO, .source): return "stdin"
        case (.standardIO, .destination): return "stdout"
        default: return description
        }
    }
}

/// Which side of a copy an endpoint is.
enum EndpointRole: Sendable {
    case source
    case destination
}
