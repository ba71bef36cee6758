import Sluice

#if canImport(Glibc)
    import Glibc
#endif

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

    static let keyFileOption = OptionSpec(
        "key-file", value: .required("FILE"),
        help: "authenticate with the key in FILE (made by\n'sluice keygen', mode 600) instead of a pairing code")
    static let insecureOption = OptionSpec(
        "insecure", help: "no encryption, no authentication: plaintext, for\ntrusted links only (both sides)")

    init(_ parsed: ParsedArguments, codeFile: String? = nil) throws(UsageError) {
        let key = parsed.last("key-file")
        if parsed.has("insecure") {
            if let key { throw UsageError("\(key.spelling) and --insecure: choose one") }
            if codeFile != nil { throw UsageError("--code-file and --insecure: choose one") }
            self = .insecure
        } else if let key {
            guard let path = key.value, !path.isEmpty else { throw UsageError("\(key.spelling): empty path") }
            if codeFile != nil { throw UsageError("--code-file and \(key.spelling): choose one") }
            self = .keyFile(path)
        } else {
            self = .code(file: codeFile)
        }
    }
}

/// `sluice send [options] PATH... [HOST:]PORT`, validated.
struct SendOptions: Sendable {
    static let usage = "usage: sluice send [options] PATH... [HOST:]PORT"

    var paths: [String] = []
    var destination: TransferAddress
    /// The name standard input is stored under, when a path is `-`.
    var streamName: String?
    var chunkSize: ChunkSize = .default
    var compressionLevel: Int?
    /// Compression threads (`--threads`); nil: one per core.
    var threads: Int?
    var progress: ProgressMode = .auto
    var stats: StatsFormat?
    var rateLimit: Int?
    var timeoutSeconds: Double?
    var resume = true
    var quiet = false
    var auth = TransferAuth.code(file: nil)
    /// Connections for the transfer (`--streams`); 1 sends over one.
    var streams = 1
    /// `--exclude` patterns, in order, and `--exclude-from` files.
    var excludes: [String] = []
    var excludeFiles: [String] = []
    /// `--files-from FILE`: the paths below the one directory given to send.
    var filesFrom: String?
    /// `-0`: the lists of `--files-from` and `--exclude-from` are NUL-separated.
    var nulSeparated = false
    /// `--shard I/N`.
    var shard: Shard?
    /// `-H`, `-X`, `--owner` (or `-a`), `--numeric-ids`.
    var hardLinks = false
    var xattrs = false
    var owners = false
    var numericIDs = false
    /// `--sync`, `--dry-run` (which implies it), `--itemize`.
    var sync = false
    var dryRun = false
    var itemize = false
    /// `--delete` (implies `--sync`), `--whole-file`, `--checksum` (implies `--sync`).
    var delete = false
    var checksum = false
    var wholeFile = false

    static let name = OptionSpec(
        "name", value: .required("NAME"), help: "the name to store standard input under\n(with the path -)")
    static let noResume = OptionSpec(
        "no-resume", help: "send every file from its start, even when the\nreceiver holds part of it")
    static let compress = OptionSpec(
        "compress", short: "z", value: .optional("[=LEVEL]"),
        help: "compress each file on the way (raw deflate);\nLEVEL 0 to 9 (default 6); gzip:LEVEL also works")

    static let parser = ArgumentParser([
        CommonOptions.chunkSize, compress, CommonOptions.threads, CommonOptions.progress, CommonOptions.noProgress,
        CommonOptions.stats,
        CommonOptions.rateLimit,
        OptionSpec(
            "timeout", value: .required("SECONDS"),
            help: "give up when nothing moves for SECONDS\n(also when connecting)"),
        noResume, name,
        OptionSpec(
            "streams", short: "P", value: .required("N"),
            help:
                "spread the transfer over N connections (1 to \(maxStreams)):\nfiles shared out, large files sent in ranges\nat once (default 1)"
        ),
        OptionSpec(
            "code-file", value: .required("FILE"),
            help:
                "read the receiver's pairing code from FILE, which\nonly its owner may read (chmod 600; default:\n$SLUICE_CODE, else ask on the terminal)"
        ),
        TransferAuth.keyFileOption, TransferAuth.insecureOption,
        OptionSpec(
            "exclude", value: .required("PATTERN"),
            help:
                "leave out what PATTERN matches, in gitignore's\nstyle: *, ?, [..] within a name, ** across\n"
                + "directories, a trailing / for directories only,\na / elsewhere anchors it to the directory sent"),
        OptionSpec("exclude-from", value: .required("FILE"), help: "the patterns in FILE, one a line (# comments)"),
        OptionSpec(
            "files-from", value: .required("FILE"),
            help:
                "send only the paths listed in FILE (one a line),\nrelative to the one directory given, with the\n"
                + "directories leading to them"),
        OptionSpec("from0", short: "0", help: "the lists of --files-from and --exclude-from\nare NUL-separated"),
        OptionSpec(
            "shard", value: .required("I/N"),
            help:
                "send only shard I (0 to N-1) of N: the files whose\npath hashes to I, so N runs cover the tree\n"
                + "exactly once"),
        OptionSpec(
            "sync",
            help:
                "ask the receiver what it has first: skip files\nof the same size and mtime, replace those that\n"
                + "differ (atomically), send the rest"),
        OptionSpec(
            "dry-run", short: "n",
            help: "with --sync (implied): change nothing, print\nwhat would be sent, replaced or left"),
        OptionSpec(
            "delete",
            help:
                "with --sync (implied): once every file is\nstored, remove what the receiver has under each\n"
                + "directory sent that is not sent"),
        OptionSpec(
            "checksum", short: "c",
            help: "with --sync (implied): compare files by digest,\nnot by size and mtime"),
        OptionSpec(
            "whole-file", short: "W",
            help: "with --sync: send a changed file whole, not as\nthe blocks that changed (the rsync algorithm)"),
        OptionSpec(
            "itemize", short: "i",
            help: "print a line per entry sent or changed, as\nrsync -i does (>f+++++++++ new, >f.st...... changed)"),
        OptionSpec(
            "hard-links", short: "H",
            help: "send a file with several names once, and the\nother names as links to it"),
        OptionSpec("xattrs", short: "X", help: "send user.* extended attributes"),
        OptionSpec(
            "owner",
            help: "send owners and groups, kept by a receiver\nrunning as root (by name, else by number)"),
        OptionSpec("numeric-ids", help: "with --owner: by number, not by name"),
        OptionSpec(
            "archive", short: "a",
            help: "what rsync -a keeps: with links, modes and\ntimes (always sent), --owner"),
        // Never a secret on the command line: other users can read it. Parsed only to say so.
        OptionSpec("code", value: .optional("[=CODE]"), help: ""),
        CommonOptions.quiet, CommonOptions.help, CommonOptions.version,
    ])

    init(_ parsed: ParsedArguments) throws(UsageError) {
        if let option = parsed.last("code") {
            throw UsageError(
                "\(option.spelling): a code on the command line can be read by other users; "
                    + "set SLUICE_CODE or give --code-file FILE")
        }
        var codeFile: String?
        if let option = parsed.last("code-file") {
            guard let path = option.value, !path.isEmpty else { throw UsageError("\(option.spelling): empty path") }
            codeFile = path
        }
        auth = try TransferAuth(parsed, codeFile: codeFile)
        let operands = parsed.operands
        guard let last = operands.last else {
            throw UsageError("send: missing PATH and destination (\(Self.usage))")
        }
        guard operands.count >= 2 else {
            throw UsageError("send: missing the destination [HOST:]PORT after '\(last)' (\(Self.usage))")
        }
        destination = try TransferAddress(parsing: last, listening: false)
        paths = Array(operands.dropLast())
        for path in paths where path.isEmpty {
            throw UsageError("send: empty path")
        }
        let stdinCount = paths.filter { $0 == "-" }.count
        if let option = parsed.last("name") {
            guard stdinCount == 1 else {
                throw UsageError("\(option.spelling) names standard input: give '-' as one PATH")
            }
            streamName = option.value ?? ""
        } else if stdinCount > 0 {
            throw UsageError("send -: standard input needs a name to be stored under (--name NAME)")
        }
        if stdinCount > 1 { throw UsageError("send: '-' may be given once") }
        if let chunkSize = try CommonOptions.chunkSize(parsed) { self.chunkSize = chunkSize }
        if let option = parsed.last("compress") { compressionLevel = try TransferCompression.level(option) }
        threads = try CommonOptions.threads(parsed)
        quiet = parsed.has("quiet")
        progress = CommonOptions.progressMode(parsed)
        stats = try CommonOptions.statsFormat(parsed)
        rateLimit = try CommonOptions.rateLimit(parsed)
        timeoutSeconds = try CommonOptions.timeoutSeconds(parsed)
        resume = !parsed.has("no-resume")
        if let option = parsed.last("streams") {
            let text = option.value ?? ""
            guard let n = Int(text), (1...Self.maxStreams).contains(n) else {
                throw UsageError(
                    "\(option.spelling) '\(text)': must be a number of connections from 1 to \(Self.maxStreams)")
            }
            streams = n
        }
        excludes = parsed.options.filter { $0.key == "exclude" }.compactMap(\.value)
        excludeFiles = parsed.options.filter { $0.key == "exclude-from" }.compactMap(\.value)
        nulSeparated = parsed.has("from0")
        if let option = parsed.last("files-from") {
            guard paths.count == 1, paths[0] != "-" else {
                throw UsageError(
                    "\(option.spelling): give one directory the listed paths are below (\(Self.usage))")
            }
            filesFrom = option.value
        }
        if let option = parsed.last("shard") {
            let text = option.value ?? ""
            guard let shard = Shard(parsing: text) else {
                throw UsageError("\(option.spelling) '\(text)': must be I/N with I from 0 to N-1, like 0/4")
            }
            self.shard = shard
        }
        hardLinks = parsed.has("hard-links")
        xattrs = parsed.has("xattrs")
        owners = parsed.has("owner") || parsed.has("archive")
        numericIDs = parsed.has("numeric-ids")
        dryRun = parsed.has("dry-run")
        delete = parsed.has("delete")
        wholeFile = parsed.has("whole-file")
        checksum = parsed.has("checksum")
        sync = parsed.has("sync") || dryRun || delete || parsed.has("checksum")
        if delete, let option = parsed.last("delete"),
            !excludes.isEmpty || !excludeFiles.isEmpty || filesFrom != nil || shard != nil
        {
            throw UsageError(
                "\(option.spelling) with --exclude, --exclude-from, --files-from or --shard would remove what they "
                    + "leave out; not supported")
        }
        itemize = parsed.has("itemize") || dryRun
        if sync && paths.contains("-") {
            throw UsageError("--sync: standard input has nothing to compare; send it without --sync")
        }
        if numericIDs && !owners, let option = parsed.last("numeric-ids") {
            throw UsageError("\(option.spelling) goes with --owner (or -a)")
        }
    }

    /// The selection the options name, reading the files they name: 66 for a file that cannot
    /// be read, 64 for a pattern or a listed path that cannot be used.
    func selection() -> Result<FileSelection, CLIError> {
        var selection = FileSelection(shard: shard)
        var patterns = excludes.map { ("--exclude", $0) }
        for file in excludeFiles {
            guard let text = Self.readList(file) else {
                return .failure(CLIError(.noInput, "--exclude-from \(file): \(String(cString: strerror(errno)))"))
            }
            patterns += Self.lines(text, nulSeparated: nulSeparated).map { ("--exclude-from \(file)", $0) }
        }
        for (source, text) in patterns {
            do {
                if let pattern = try ExcludePattern(text) { selection.excludes.append(pattern) }
            } catch {
                return .failure(CLIError(.usage, "\(source) '\(text)': \(error.detail ?? error.reason)"))
            }
        }
        if let filesFrom {
            guard let text = Self.readList(filesFrom) else {
                return .failure(CLIError(.noInput, "--files-from \(filesFrom): \(String(cString: strerror(errno)))"))
            }
            var listed: [String] = []
            for line in Self.lines(text, nulSeparated: nulSeparated) {
                var path = Substring(line)
                while path.hasSuffix("/") { path.removeLast() }
                while path.hasPrefix("./") { path.removeFirst(2) }
                let parts = path.split(separator: "/", omittingEmptySubsequences: false)
                guard !path.isEmpty, !path.hasPrefix("/"), !parts.contains(where: { $0.isEmpty || $0 == ".." }) else {
                    return .failure(
                        CLIError(
                            .usage,
                            "--files-from \(filesFrom): '\(PeerText.sanitized(line))': a path below the directory "
                                + "given, without '..'"))
                }
                listed.append(parts.filter { $0 != "." }.joined(separator: "/"))
            }
            selection.only = listed
        }
        return .success(selection)
    }

    /// The text of a list file (`-` is standard input), or nil with errno set.
    private static func readList(_ path: String) -> String? {
        let fd = path == "-" ? dup(0) : open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 { return nil }
            if n == 0 { return String(decoding: data, as: UTF8.self) }
            data += buffer[0..<n]
        }
    }

    /// The entries of a list: lines (without a final `\r`), or NUL-separated; no empty ones.
    private static func lines(_ text: String, nulSeparated: Bool) -> [String] {
        let separator: Character = nulSeparated ? "\0" : "\n"
        return text.split(separator: separator).map { line in
            nulSeparated || !line.hasSuffix("\r") ? String(line) : String(line.dropLast())
        }.filter { !$0.isEmpty }
    }

    /// The most connections `--streams` takes (the protocol's limit).
    static let maxStreams = 64

    var libraryOptions: TransferSendOptions {
        var options = TransferSendOptions(
            compress: compressionLevel != nil, compressionLevel: compressionLevel ?? CompressionSpec.defaultLevel,
            threads: threads,
            chunkSize: chunkSize, rateLimit: rateLimit, resume: resume)
        options.hardLinks = hardLinks
        options.xattrs = xattrs
        options.owners = owners
        options.numericIDs = numericIDs
        options.sync = sync
        options.dryRun = dryRun
        options.delete = delete
        options.wholeFile = wholeFile
        options.checksum = checksum
        return options
    }
}

/// `sluice receive [options]`, validated.
struct ReceiveOptions: Sendable {
    static let usage = "usage: sluice receive [options]"
    /// The idle limit without `--timeout`: five minutes.
    static let defaultIdleSeconds = 300.0

    var listen = TransferAddress.tcp(host: nil, port: TransferAddress.defaultPort)
    var directory = "."
    var once = false
    var overwrite = false
    var maxSize: UInt64?
    var resume = true
    var fsync = true
    var idleSeconds = defaultIdleSeconds
    var maxSessions = TransferReceiveOptions().maxSessions
    var stats: StatsFormat?
    var quiet = false
    var auth = TransferAuth.code(file: nil)
    /// Offer parallel streams (`--no-streams` hides them).
    var streams = true
    /// Write large files with O_DIRECT (`--direct`).
    var directIO = false
    /// Give files the owner a sender sends, running as root (not `--no-owners`).
    var keepOwners = true
    /// Offer sync (not `--no-sync`).
    var sync = true
    /// Give files the sender's permission bits unmasked (`--keep-modes`).
    var keepModes = false
    /// Transfers a pairing code serves before a new one is printed (`--code-uses`).
    var codeUses = 1

    static let parser = ArgumentParser([
        OptionSpec(
            "listen", short: "l", value: .required("ADDRESS"),
            help:
                "listen on [HOST:]PORT, [V6]:PORT or unix:PATH\n(default: port \(TransferAddress.defaultPort), every interface, or\nloopback only with --insecure; port 0 picks a\nfree port)"
        ),
        OptionSpec(
            "dir", short: "C", value: .required("DIR"), help: "store into DIR, which must exist\n(default: .)"),
        OptionSpec(
            "once",
            help: "serve one sender, then exit with its status\n(connections that fail their handshake do\nnot count)"),
        OptionSpec("overwrite", help: "replace existing files"),
        OptionSpec(
            "keep-modes",
            help:
                "give files and directories the sender's\npermission bits as sent, as rsync -p (default:\nless this process's umask, as cp); never\nsetuid, setgid or sticky"
        ),
        OptionSpec(
            "no-sync",
            help: "refuse send --sync: never replace a file that is\nhere unless --overwrite"),
        OptionSpec(
            "no-owners",
            help: "running as root: leave files owned by root\nwhatever owner a sender sends (send --owner)"),
        OptionSpec("max-size", value: .required("SIZE"), help: "refuse files larger than SIZE, like 100M, 4G"),
        OptionSpec(
            "max-sessions", value: .required("N"),
            help:
                "serve at most N authenticated senders at once; one\nmore is told 'busy' and disconnected (default \(TransferReceiveOptions().maxSessions));\n"
                + "connections still authenticating wait apart; the\nopen-file limit is raised to N x 4 + 64 + 1024"
        ),
        OptionSpec("no-resume", help: "never continue interrupted files: start over"),
        OptionSpec(
            "no-fsync", help: "do not flush files to disk before\nanswering (by default one syncfs per\nbatch of files)"
        ),
        OptionSpec(
            "direct",
            help:
                "write files of 1 MiB or more with O_DIRECT,\npast the page cache: less CPU, and the file\nis not left cached"
        ),
        OptionSpec(
            "no-streams",
            help:
                "do not offer parallel streams: answer as a\nreceiver of the first protocol version, so a\n'send --streams' uses one connection (for tests)"
        ),
        OptionSpec(
            "timeout", value: .required("SECONDS"),
            help: "drop a sender silent for SECONDS\n(default \(Int(defaultIdleSeconds)))"),
        TransferAuth.keyFileOption, TransferAuth.insecureOption,
        OptionSpec(
            "code-uses", value: .required("N"),
            help:
                "let a pairing code serve N transfers (default 1),\neach with all its connections; then print a\nnew one"
        ),
        CommonOptions.stats,
        OptionSpec(
            "quiet", short: "q", help: "print neither the address nor a line per file;\nonly errors (and --stats)"),
        CommonOptions.help, CommonOptions.version,
    ])

    init(_ parsed: ParsedArguments) throws(UsageError) {
        if let operand = parsed.operands.first {
            throw UsageError("receive: unexpected operand '\(operand)' (\(Self.usage))")
        }
        auth = try TransferAuth(parsed)
        if let text = parsed.value("listen") { listen = try TransferAddress(parsing: text, listening: true) }
        // Plaintext is for trusted links: without a host it listens on loopback only.
        if auth == .insecure, case .tcp(nil, let port) = listen { listen = .tcp(host: "127.0.0.1", port: port) }
        if let option = parsed.last("dir") {
            guard let text = option.value, !text.isEmpty else { throw UsageError("\(option.spelling): empty path") }
            directory = text
        }
        once = parsed.has("once")
        overwrite = parsed.has("overwrite")
        keepModes = parsed.has("keep-modes")
        keepOwners = !parsed.has("no-owners")
        sync = !parsed.has("no-sync")
        if let option = parsed.last("max-size") {
            let text = option.value ?? ""
            guard let size = ChunkSize.parseBytes(text) else {
                throw UsageError("\(option.spelling) '\(text)': must be a number of bytes, like 100M or 4G")
            }
            maxSize = UInt64(size)
        }
        if let option = parsed.last("max-sessions") {
            let text = option.value ?? ""
            guard let n = Int(text), (1...100_000).contains(n) else {
                throw UsageError("\(option.spelling) '\(text)': must be a number of sessions from 1 to 100000")
            }
            maxSessions = n
        }
        resume = !parsed.has("no-resume")
        fsync = !parsed.has("no-fsync")
        streams = !parsed.has("no-streams")
        directIO = parsed.has("direct")
        if let seconds = try CommonOptions.timeoutSeconds(parsed) { idleSeconds = seconds }
        stats = try CommonOptions.statsFormat(parsed)
        quiet = parsed.has("quiet")
        if let option = parsed.last("code-uses") {
            let text = option.value ?? ""
            guard let n = Int(text), (1...1_000_000).contains(n) else {
                throw UsageError("\(option.spelling) '\(text)': must be a number of transfers from 1 to 1000000")
            }
            guard case .code = auth else {
                throw UsageError("\(option.spelling): only with a pairing code (not with --key-file or --insecure)")
            }
            codeUses = n
        }
    }

    var libraryOptions: TransferReceiveOptions {
        var options = TransferReceiveOptions(
            overwrite: overwrite, maxSize: maxSize, resume: resume, fsync: fsync,
            idleTimeout: .nanoseconds(Int64(idleSeconds * 1e9)), maxSessions: maxSessions, streams: streams,
            directIO: directIO, keepsModes: keepModes)
        options.keepsOwners = keepOwners
        options.sync = sync
        return options
    }
}
