import Sluice

/// `sluice bench`, validated: the local matrix, a network server, or a network client.
struct BenchOptions: Hashable, Sendable {
    enum Mode: Hashable, Sendable {
        case matrix
        case server(host: String?, port: UInt16)
        case client(host: String, port: UInt16)
    }

    var mode: Mode = .matrix
    var chunkSizes: [ChunkSize] = LocalBench.defaultChunkSizes
    var size = 128 << 20
    var json = false
    var jsonStream = false
    var seconds = 5.0
    var interval = 1.0
    var compress = false
    /// Compression threads of the compression rows (`--threads`); nil: one per core.
    var threads: Int?
    var reverse = false
    var once = false
    var quiet = false
    var progress: ProgressMode = .auto
    var timeoutSeconds: Double?
    /// TLS 1.3 (`--tls`, or a `tls:` operand with its options).
    var tls: TLSEndpointOptions?
    /// Client: connections run at once (`-P`, `--parallel`).
    var parallel = 1
    /// Where to draw the measurement (`--svg`), and whether to replace a file there (`-f`).
    var svg: String?
    var force = false

    static let size = Option(
        "size", value: .required("SIZE"), help: "bytes per cell of the local matrix (default 128M)",
        read: { (option: ParsedArguments.Occurrence) throws(UsageError) -> Int in
            guard let bytes = option.value.flatMap(ChunkSize.parseBytes), bytes >= 1 << 20, bytes <= 64 << 30 else {
                throw UsageError("\(option.spelling) '\(option.value ?? "")': must be 1M to 64G, like 64M or 1G")
            }
            return bytes
        })
    static let json = Flag("json", help: "print one JSON object on stdout")
    static let jsonStream = Flag("json-stream", help: "client: one JSON line per interval, then a summary")
    /// The server's address, read as the mode it makes.
    static let listen = Option(
        "listen", value: .required("[HOST:]PORT"), help: "be the network server (port 0: any free port)",
        read: { (option: ParsedArguments.Occurrence) throws(UsageError) -> Mode in
            let listen = option.value ?? ""
            let (host, port) = try Endpoint.hostAndPort(
                listen, in: "--listen \(listen)", hostRequired: false, allowsAnyPort: true)
            return .server(host: host, port: port)
        })
    static let once = Flag(
        "once",
        help: "server: exit after one client run (one\nconnection, or the N of a client's -P N;\n"
            + "those not in within --timeout, default 10 s,\nof the first are not waited for)")
    static let seconds = Option(
        "seconds", value: .required("N"), help: "client: send (or receive) for N seconds (default 5)",
        read: number(in: 0.1...3600))
    static let interval = Option(
        "interval", value: .required("S"), help: "client: report every S seconds (default 1)",
        read: number(in: 0.1...3600))
    static let reverse = Flag("reverse", help: "client: the server sends, the client receives")
    static let tls = Flag(
        "tls",
        help: "TLS 1.3: the server makes a throwaway\ncertificate and prints its pin; the client\n"
            + "checks it as tls: does (tls:HOST:PORT,pin=sha256:HEX);\nwith -P, a handshake per connection")
    static let compress = Flag("compress", short: "z", help: "client: gzip -1 on the sending side, gunzip on the other")
    static let parallel = Option(
        "parallel", short: "P", value: .required("N"),
        help: "client: run N connections at once (1 to \(BenchHello.maxStreams)),\nreport each and their sum",
        read: Read.number(of: "connections", in: 1...BenchHello.maxStreams, digitsOnly: true))
    static let svg = Option<String>(
        "svg", value: .required("FILE"),
        help: "draw the local matrix, or the client's rate per\ninterval, as an SVG picture in FILE")
    static let force = Flag("force", short: "f", help: "replace an existing --svg FILE")
    /// `--timeout` with the common help, read as bench's other numbers are.
    static let timeout = CommonOptions.timeout.reading(number(in: 0.001...86400))

    /// The options, in the order `--help` lists them.
    static let parser = ArgumentParser([
        CommonOptions.chunkSize, size, json, jsonStream, listen, once, seconds, interval, reverse, compress, parallel,
        tls, svg, force, CommonOptions.threads, CommonOptions.progress, CommonOptions.noProgress, timeout,
        CommonOptions.quiet, CommonOptions.help, CommonOptions.version,
    ])

    /// The options that only a client takes, in the order their misuse is reported.
    static let clientOnly: [any CommandOption] = [seconds, interval, reverse, compress, jsonStream, parallel]

    init() {}

    init(_ parsed: ParsedArguments) throws(UsageError) {
        switch parsed.operands.count {
        case 0:
            if let mode = try parsed[Self.listen] { self.mode = mode }
        case 1:
            guard !parsed.isGiven(Self.listen) else {
                throw UsageError("bench: --listen makes a server, which takes no tcp:HOST:PORT operand")
            }
            let operand = parsed.operands[0]
            switch try Endpoint(parsing: operand) {
            case .tcpConnect(let host, let port):
                mode = .client(host: host, port: port)
            case .tlsConnect(let host, let port, let options):
                mode = .client(host: host, port: port)
                tls = options
            default:
                throw UsageError("bench: '\(operand)': the server to measure is written tcp:HOST:PORT or tls:HOST:PORT")
            }
        default:
            throw UsageError(
                "bench: unexpected operand '\(parsed.operands[1])' (usage: sluice bench [options] [tcp:HOST:PORT])")
        }

        if let chunkSize = try parsed[CommonOptions.chunkSize] { chunkSizes = [chunkSize] }
        if let size = try parsed[Self.size] { self.size = size }
        seconds = try parsed[Self.seconds] ?? seconds
        interval = try parsed[Self.interval] ?? interval
        timeoutSeconds = try parsed[Self.timeout]
        json = parsed[Self.json]
        jsonStream = parsed[Self.jsonStream]
        compress = parsed[Self.compress]
        threads = try parsed[CommonOptions.threads]
        reverse = parsed[Self.reverse]
        once = parsed[Self.once]
        if parsed[Self.tls] && tls == nil { tls = TLSEndpointOptions() }
        quiet = parsed[CommonOptions.quiet]
        progress = CommonOptions.givenProgress(parsed) ?? (quiet ? .off : .auto)
        if let parallel = try parsed[Self.parallel] { self.parallel = parallel }
        svg = try parsed[Self.svg]
        force = parsed[Self.force]
        if svg == "" { throw UsageError("--svg '': the picture needs a file name") }
        if json && jsonStream { throw UsageError("--json and --json-stream cannot be used together") }
        if force && svg == nil { throw UsageError("--force replaces an existing --svg FILE: give --svg FILE") }
        if case .server = mode, parsed.isGiven(Self.svg) {
            throw UsageError(
                "--svg draws the local matrix or a client's run; a server has nothing to draw (draw on the client)")
        }
        if case .client = mode {
        } else if let option = Self.clientOnly.first(where: parsed.isGiven) {
            throw UsageError("\(option.displayName) is for the client: sluice bench [options] tcp:HOST:PORT")
        }
        if case .server = mode {
        } else if parsed[Self.once] {
            throw UsageError("--once is for the server: sluice bench --listen [HOST:]PORT --once")
        }
        if case .matrix = mode {
        } else if parsed.isGiven(Self.size) {
            throw UsageError("--size is for the local matrix (sluice bench without --listen or tcp:HOST:PORT)")
        }
    }

    /// A number of seconds within `range`, in decimal digits and a point.
    private static func number(
        in range: ClosedRange<Double>
    ) -> @Sendable (ParsedArguments.Occurrence) throws(UsageError) -> Double {
        { (option: ParsedArguments.Occurrence) throws(UsageError) -> Double in
            let text = option.value ?? ""
            guard let value = Double(text), value.isFinite, range.contains(value),
                text.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") })
            else {
                throw UsageError(
                    "\(option.spelling) '\(text)': must be a number from \(Format.fixed(range.lowerBound, 3)) to "
                        + "\(Format.fixed(range.upperBound, 0))")
            }
            return value
        }
    }
}
