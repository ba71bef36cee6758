import Sluice
import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// The options of `send --relay` and `receive --relay CODE`: meeting through a `sluice relay`
/// with a short code (a nameplate and words) instead of an address and a pairing code.
enum RelayChoice {
    /// The environment variable that names the relay when `--relay` does not.
    static let variable = "SLUICE_RELAY"

    static let option = Option(
        "relay", value: .required("HOST[:PORT]"),
        help:
            "meet the other side through the sluice relay at\nHOST (port \(RelayClient.defaultPort) unless given; "
            + "default\n$\(variable)) with a short code (see RELAY)",
        read: { occurrence throws(UsageError) in try endpoint(occurrence.value ?? "", spelling: occurrence.spelling) })

    static let codeWords = Option(
        "code-words", value: .required("N"),
        help:
            "with a short code: its words (\(WordCode.wordCounts.lowerBound) to "
            + "\(WordCode.wordCounts.upperBound), 11 bits\neach; default \(WordCode.defaultWordCount))",
        read: Read.number(of: "words", in: WordCode.wordCounts))

    static let lanPort = Option(
        "lan-port", value: .required("PORT"),
        help:
            "with a short code and no relay: the UDP port the\nsender announces its nameplate on "
            + "(default \(LocalAnnounce.defaultPort))",
        read: { occurrence throws(UsageError) -> UInt16 in
            UInt16(try Read.number(of: "a port", in: 1...65535)(occurrence))
        })

    static let noDirect = Flag(
        "no-direct", help: "with a relay: never try to connect directly; every\nbyte goes through the relay")
    static let noRelay = Flag(
        "no-relay",
        help: "with a relay: meet there, but move the files only\nover a direct connection (69 if none can be made)")

    /// The ways `--no-direct` and `--no-relay` leave; a usage error for both, or either without
    /// a relay.
    static func routes(_ parsed: ParsedArguments, relay: Bool) throws(UsageError) -> ReachRoutes {
        let noDirect = parsed.spelling(of: Self.noDirect)
        let noRelay = parsed.spelling(of: Self.noRelay)
        if !relay, let given = noDirect ?? noRelay { throw UsageError("\(given) goes with a relay") }
        if let noDirect, let noRelay {
            throw UsageError("\(noDirect) and \(noRelay): the files would have no way to go")
        }
        return ReachRoutes(direct: noDirect == nil, relay: noRelay == nil)
    }

    /// Parses `HOST`, `HOST:PORT`, `[V6]:PORT` or `tcp:HOST:PORT`.
    static func endpoint(_ text: String, spelling: String) throws(UsageError) -> RelayEndpoint {
        let bare = text.hasPrefix("tcp:") ? String(text.dropFirst(4)) : text
        guard !bare.isEmpty else { throw UsageError("\(spelling): empty relay address (HOST or HOST:PORT)") }
        if bare.hasPrefix("[") || bare.contains(":") {
            switch try TransferAddress(parsing: bare, listening: false) {
            case .tcp(let host, let port): return RelayEndpoint(host: host ?? "localhost", port: port)
            case .unix: throw UsageError("\(spelling) \(text): a relay is reached over TCP")
            }
        }
        return RelayEndpoint(host: bare)
    }

    /// The relay `--relay` names, else `$SLUICE_RELAY`, else nil.
    static func endpoint(_ parsed: ParsedArguments, environment: (String) -> String?) throws(UsageError)
        -> RelayEndpoint?
    {
        if let given = try parsed[option] { return given }
        guard let text = environment(variable), !text.isEmpty else { return nil }
        return try endpoint(text, spelling: "$\(variable)")
    }

    /// With a relay the code exchange authenticates: the other ways are refused.
    static func refuseOtherAuth(_ parsed: ParsedArguments, codeFile: Bool = false) throws(UsageError) {
        if parsed.spelling(of: TransferAuth.keyFileOption) != nil || parsed[TransferAuth.insecureOption] || codeFile {
            throw UsageError(
                "--relay: the short code authenticates; --key-file, --code-file and --insecure do not go with it")
        }
    }

    /// The error of a meeting that failed, with its exit status: 77 for a code exchange that
    /// failed (a wrong code, a guess, a tampered message) or a nameplate someone else claimed,
    /// 69 for a relay that cannot be reached or refuses, 74 for a connection lost.
    static func failure(_ error: SluiceError, _ command: String) -> CLIError {
        let status: ExitStatus
        switch error.code {
        case .authenticationFailed: status = .notPermitted
        case .unknownHost, .unavailable, .timedOut, .protocolViolation: status = .unavailable
        case .system(let errno) where [.connectionRefused, .hostUnreachable, .networkUnreachable].contains(errno):
            status = .unavailable
        case .invalidArgument: status = .usage
        default: status = .ioError
        }
        return CLIError(status, "\(command): \(PeerText.sanitized(error.description))")
    }

    /// What a meeting's connections become: a stream pair each, the first first.
    static func streams(_ rendezvous: Rendezvous) -> Result<[(ReadStream, WriteStream)], CLIError> {
        var pairs: [(ReadStream, WriteStream)] = []
        for socket in rendezvous.sockets {
            let fd = socket.takeDescriptor()
            switch Result(catching: { () throws(SluiceError) in try Socket.streams(adopting: fd) }) {
            case .success(let pair): pairs.append(pair)
            case .failure(let error):
                close(fd)
                return .failure(CLIError(.ioError, "relay: \(error.description)"))
            }
        }
        return .success(pairs)
    }
}
