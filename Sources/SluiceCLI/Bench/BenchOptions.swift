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

    static let size = OptionSpec(
        "size", value: .required("SIZE"), help: "bytes per cell of the local matrix (default 128M)")
    static let json = OptionSpec("json", help: "print one JSON object on stdout")
    static let jsonStream = OptionSpec("json-stream", help: "client: one JSON line per interval, then a summary")
    static let listen = OptionSpec(
        "listen", value: .required("[HOST:]PORT"), help: "be the network server (port 0: any free port)")
    static let once = OptionSpec(
        "once",
        help: "server: exit after one client run (one\nconnection, or the N of a client's -P N;\n"
            + "those not in within --timeout, default 10 s,\nof the first are not waited for)")
    static let seconds = OptionSpec(
        "seconds", value: .required("N"), help: "client: send (or receive) for N seconds (default 5)")
    static let interval = OptionSpec(
        "interval", value: .required("S"), help: "client: report every S seconds (default 1)")
    static let reverse = OptionSpec("reverse", help: "client: the server sends, the client receives")
    static let tls = OptionSpec(
        "tls",
        help: "TLS 1.3: the server makes a throwaway\ncertificate and prints its pin; the client\n"
            + "checks it as tls: does (tls:HOST:PORT,pin=sha256:HEX);\nwith -P, a handshake per connection")
    static let compress = OptionSpec(
        "compress", short: "z", help: "client: gzip -1 on the sending side, gunzip on the other")
    static let parallel = OptionSpec(
        "parallel", short: "P", value: .required("N"),
        help: "client: run N connections at once (1 to \(BenchHello.maxStreams)),\nreport each and their sum")
    static let svg = OptionSpec(
        "svg", value: .required("FILE"),
        help: "draw the local matrix, or the client's rate per\ninterval, as an SVG picture in FILE")
    static let force = OptionSpec("force", short: "f", help: "replace an existing --svg FILE")

    static let parser = ArgumentParser([
        CommonOptions.chunkSize, size, json, jsonStream, listen, once, seconds, interval, reverse, compress, parallel,
        tls, svg, force, CommonOptions.threads,
        CommonOptions.progress, CommonOptions.noProgress, CommonOptions.timeout, CommonOptions.quiet,
        CommonOptions.help, CommonOptions.version,
    ])

    init() {}

    init(_ parsed: ParsedArguments) throws(UsageError) {
        switch parsed.operands.count {
        case 0:
            if let listen = parsed.value("listen") {
                let (host, port) = try Endpoint.hostAndPort(
                    listen, in: "--listen \(listen)", hostRequired: false, allowsAnyPort: true)
                mode = .server(host: host, port: port)
            }
        case 1:
            guard !parsed.has("listen") else {
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

        if let text = parsed.value("chunk-size") {
            do {
                chunkSizes = [try ChunkSize(parsing: text)]
            } catch {
                throw UsageError(CLIError.message(for: error))
            }
        }
        if let option = parsed.last("size") {
            guard let bytes = option.value.flatMap(ChunkSize.parseBytes), bytes >= 1 << 20, bytes <= 64 << 30 else {
                throw UsageError("\(option.spelling) '\(option.value ?? "")': must be 1M to 64G, like 64M or 1G")
            }
            size = bytes
        }
        seconds = try Self.number(parsed.last("seconds"), range: 0.1...3600) ?? seconds
        interval = try Self.number(parsed.last("interval"), range: 0.1...3600) ?? interval
        timeoutSeconds = try Self.number(parsed.last("timeout"), range: 0.001...86400)
        json = parsed.has("json")
        jsonStream = parsed.has("json-stream")
        compress = parsed.has("compress")
        threads = try CommonOptions.threads(parsed)
        reverse = parsed.has("reverse")
        once = parsed.has("once")
        if parsed.has("tls") && tls == nil { tls = TLSEndpointOptions() }
        quiet = parsed.has("quiet")
        switch parsed.lastOf(["progress", "no-progress"]) {
        case "progress": progress = .on
        case "no-progress": progress = .off
        default: progress = quiet ? .off : .auto
        }
        if let option = parsed.last("parallel") {
            let text = option.value ?? ""
            guard text.count <= 3, text.allSatisfy({ $0.isASCII && $0.isNumber }), let n = Int(text),
                (1...BenchHello.maxStreams).contains(n)
            else {
                throw UsageError(
                    "\(option.spelling) '\(text)': must be a number of connections from 1 to \(BenchHello.maxStreams)")
            }
            parallel = n
        }
        svg = parsed.value("svg")
        force = parsed.has("force")
        if svg == "" { throw UsageError("--svg '': the picture needs a file name") }
        if json && jsonStream { throw UsageError("--json and --json-stream cannot be used together") }
        if force && svg == nil { throw UsageError("--force replaces an existing --svg FILE: give --svg FILE") }
        if case .server = mode, parsed.has("svg") {
            throw UsageError(
                "--svg draws the local matrix or a client's run; a server has nothing to draw (draw on the client)")
        }
        let clientOnly = ["seconds", "interval", "reverse", "compress", "json-stream", "parallel"].filter(parsed.has)
        if case .client = mode {
        } else if let option = clientOnly.first {
            throw UsageError("--\(option) is for the client: sluice bench [options] tcp:HOST:PORT")
        }
        if case .server = mode {
        } else if parsed.has("once") {
            throw UsageError("--once is for the server: sluice bench --listen [HOST:]PORT --once")
        }
        if case .matrix = mode {
        } else if parsed.has("size") {
            throw UsageError("--size is for the local matrix (sluice bench without --listen or tcp:HOST:PORT)")
        }
    }

    private static func number(_ option: ParsedArguments.Occurrence?, range: ClosedRange<Double>) throws(UsageError)
        -> Double?
    {
        guard let option else { return nil }
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
