import Sluice
import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// `sluice relay [options]`: the rendezvous and relay server that `send --relay` and
/// `receive --relay` meet at.
enum RelayCommand: Command {
    static let name = "relay"
    static let summary = "run a relay that pairs senders and receivers by nameplate"

    static let listen = Option(
        "listen", value: .required("[HOST:]PORT"),
        help: "listen on PORT (default 9009), on HOST's address\nonly if given (port 0: any free port)",
        read: { (option: ParsedArguments.Occurrence) throws(UsageError) -> (String?, UInt16) in
            let text = option.value ?? ""
            return try Endpoint.hostAndPort(
                text, in: "\(option.spelling) \(text)", hostRequired: false, allowsAnyPort: true)
        })
    static let expire = Option(
        "expire", value: .required("DURATION"),
        help: "a nameplate waits this long for its receiver,\nand a used one is refused this long\n(default 10m)",
        read: readDuration)
    static let idle = Option(
        "idle", value: .required("DURATION"), help: "cut a pair that moves nothing for DURATION\n(default 10m)",
        read: readDuration)
    static let maxConnections = Option(
        "max-connections", value: .required("N"), help: "hold at most N connections (default 4096)",
        read: Read.number(of: "connections", in: 1...1_000_000))
    static let maxPerAddress = Option(
        "max-per-address", value: .required("N"),
        help: "hold at most N connections from one address\n(default 64)",
        read: Read.number(of: "connections", in: 1...1_000_000))
    static let maxNameplatesPerAddress = Option(
        "max-nameplates-per-address", value: .required("N"),
        help:
            "hand one address at most N nameplates and\nstream tokens at once, waiting or used (a used\none counts until it would have expired;\ndefault 256)",
        read: Read.number(of: "nameplates", in: 1...1_000_000))
    static let rateLimit = CommonOptions.rateLimit.withHelp(
        "each pair moves at most RATE bytes a second\n(both ways together), like 500K, 10M")
    static let rateLimitTotal = Option(
        "rate-limit-total", value: .required("RATE"), help: "the relay moves at most RATE bytes a second",
        read: { (option: ParsedArguments.Occurrence) throws(UsageError) -> Int in
            try CommonOptions.rateLimit.read(option)
        })
    static let stats = CommonOptions.stats.withHelp(
        "when stopped, print what the relay did: text\non stderr, or one JSON object on stdout")
    static let quiet = Flag("quiet", short: "q", help: "no log lines; print only errors (and --stats)")

    static var parser: ArgumentParser {
        ArgumentParser([
            listen, expire, idle, maxConnections, maxPerAddress, maxNameplatesPerAddress, rateLimit, rateLimitTotal,
            stats, quiet, CommonOptions.help, CommonOptions.version,
        ])
    }

    static var help: String {
        """
        Usage: sluice relay [options]

        Run a relay that senders and receivers both connect out to, for peers
        that cannot reach each other (behind NAT): sluice send --relay HOST
        prints a code whose first part is a nameplate the relay handed out,
        and sluice receive --relay HOST CODE joins it. The relay pairs the two
        connections and splices their bytes both ways (splice(2): nothing is
        copied through its memory). It sees the nameplate, byte counts and the
        peers' addresses, and after pairing only the PAKE's messages and TLS
        ciphertext: it learns neither the code nor the files.

        A nameplate is used once: a second receiver joining it is refused
        (until it would have expired), so a guess at a code costs the code.
        Connections over the caps, and when no nameplate is free, are told
        ERR busy. The log on stderr has a line per pairing (the nameplate, the
        two addresses), per pair ended (bytes each way, seconds) and per
        expiry or refusal. SIGINT, SIGTERM or SIGHUP stop it: the pairs are
        cut, --stats is printed, and it exits 0.

        Options:
        \(parser.helpLines().joined(separator: "\n"))

        DURATION is a number of seconds, or with a unit: 500ms, 30s, 10m, 2h.

        Exit status:
          0 stopped by a signal; 64 usage error; 69 cannot listen (address in
          use, unknown host)

        """
    }

    /// `--expire 10m`, `--idle 30s`: a number of seconds or of ms, s, m, h; 1 ms to 7 days.
    static func readDuration(_ option: ParsedArguments.Occurrence) throws(UsageError) -> Duration {
        let text = option.value ?? ""
        let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600)]
        let (number, scale) =
            units.first { text.hasSuffix($0.0) }.map { (String(text.dropLast($0.0.count)), $0.1) } ?? (text, 1)
        guard !number.isEmpty, number.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
            let value = Double(number), value.isFinite
        else {
            throw UsageError(
                "\(option.spelling) '\(text)': must be a duration like 30s, 10m or 2h (a number of seconds, or with ms, s, m, h)"
            )
        }
        let seconds = value * scale
        guard seconds >= 0.001, seconds <= 7 * 86_400 else {
            throw UsageError("\(option.spelling) '\(text)': must be from 1ms to 7 days")
        }
        return .milliseconds(Int64((seconds * 1000).rounded()))
    }

    /// The server's options from the command line.
    static func options(_ parsed: ParsedArguments) throws(UsageError) -> (RelayOptions, StatsFormat?, Bool) {
        guard parsed.operands.isEmpty else {
            throw UsageError("relay takes no operands (usage: sluice relay [--listen [HOST:]PORT] [options])")
        }
        var options = RelayOptions()
        if let (host, port) = try parsed[listen] {
            options.host = host
            options.port = port
        }
        if let expire = try parsed[expire] { options.expire = expire }
        if let idle = try parsed[idle] { options.idle = idle }
        if let n = try parsed[maxConnections] { options.maxConnections = n }
        if let n = try parsed[maxPerAddress] { options.maxPerAddress = n }
        if let n = try parsed[maxNameplatesPerAddress] { options.maxKeysPerAddress = n }
        options.rateLimit = try parsed[rateLimit]
        options.rateLimitTotal = try parsed[rateLimitTotal]
        return (options, try parsed[stats], parsed[quiet])
    }

    /// Listens, serves until a signal, and prints `--stats`.
    static func run(_ parsed: ParsedArguments) -> ExitStatus {
        let options: RelayOptions
        let statsFormat: StatsFormat?
        let quiet: Bool
        do {
            (options, statsFormat, quiet) = try Self.options(parsed)
        } catch {
            Terminal.report(error.message)
            return .usage
        }
        // Each connection is a descriptor, and each pair two pipes more.
        _ = OpenFileLimit.raise(to: options.maxConnections * 4 + 64)
        let started = Result { () throws(SluiceError) in
            try RelayServer(options) { line in
                if !quiet { Terminal.write(RelayLog.stamp() + " " + line + "\n", to: 2) }
            }
        }
        let server: RelayServer
        switch started {
        case .success(let made): server = made
        case .failure(let error): return cannotListen(error, options)
        }
        Terminal.write("relaying on \(server.address)\n", to: 2)
        SignalWatcher.shared.setHandler { _ in server.stop() }
        server.run()
        SignalWatcher.shared.setHandler(nil)
        let statistics = server.statistics
        switch statsFormat {
        case .json?: Terminal.write(RelayLog.json(statistics) + "\n", to: 1)
        case .text?: Terminal.write(RelayLog.text(statistics), to: 2)
        case nil: break
        }
        return .ok
    }

    /// Kept out of `run`: a typed catch there crashes the Swift 6.3.1 optimizer.
    @inline(never)
    private static func cannotListen(_ error: SluiceError, _ options: RelayOptions) -> ExitStatus {
        let host = options.host.map { $0.contains(":") ? "[\($0)]" : $0 } ?? "*"
        Terminal.report("relay: cannot listen on \(host):\(options.port): \(error.reason)")
        return .unavailable
    }
}

/// The relay's log stamps and its `--stats` report.
enum RelayLog {
    /// The time now in UTC, `2026-12-06T10:07:25Z`, for the start of each log line.
    static func stamp() -> String {
        var now = time(nil)
        var parts = tm()
        gmtime_r(&now, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T"
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }

    /// The fields of the report, in order: JSON name, value as JSON, text label.
    private static func fields(_ s: RelayStatistics) -> [(String, String, String)] {
        [
            ("pairs_made", "\(s.pairsMade)", "pairs made"),
            ("pairs_ended", "\(s.pairsEnded)", "pairs ended"),
            ("bytes_relayed", "\(s.bytesRelayed)", "bytes relayed"),
            ("nameplates_opened", "\(s.nameplatesOpened)", "nameplates opened"),
            ("expired", "\(s.expired)", "expired (nameplates, streams)"),
            ("refused_claimed", "\(s.claimedRefused)", "refused: claimed"),
            ("refused_unknown", "\(s.unknownRefused)", "refused: unknown"),
            ("refused_busy", "\(s.busyRefused)", "refused: busy"),
            ("refused_bad_hello", "\(s.badHello)", "refused: bad hello"),
            ("closed_early_bytes", "\(s.earlyBytes)", "closed: bytes before PAIRED"),
            ("closed_no_hello", "\(s.noHello)", "closed: no hello"),
            ("pairs_idle_cut", "\(s.idleCut)", "pairs cut idle"),
            ("peak_connections", "\(s.peakConnections)", "peak connections"),
            ("seconds", Format.jsonNumber(s.seconds), "seconds"),
        ]
    }

    /// One JSON object on one line.
    static func json(_ statistics: RelayStatistics) -> String {
        "{" + fields(statistics).map { "\(Format.jsonString($0.0)):\($0.1)" }.joined(separator: ",") + "}"
    }

    /// Aligned `label  value` lines.
    static func text(_ statistics: RelayStatistics) -> String {
        let rows = fields(statistics)
        let width = (rows.map(\.2.count).max() ?? 0) + 2
        return rows.map { $0.2 + String(repeating: " ", count: width - $0.2.count) + $0.1 + "\n" }.joined()
    }
}
