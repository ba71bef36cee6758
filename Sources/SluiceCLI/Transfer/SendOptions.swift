import Sluice
import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// `sluice send [options] PATH... [HOST:]PORT`, validated.
struct SendOptions: Sendable {
    static let usage = "usage: sluice send [options] PATH... [HOST:]PORT, or send [--relay HOST] PATH..."

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
    /// `--shard I/N`, or `--shard auto` read from the launcher's environment (with
    /// `--shard-count N` where it does not say how many tasks there are).
    var shard: Shard?
    /// `--shard-by bytes`: the shard's files chosen to balance bytes, not by path hash.
    var shardByBytes = false
    /// With a shard: the task group (`--group ID`, else the job's id from a Slurm environment)
    /// the receiver puts this task's ranges of split files together in; nil without.
    var group: TaskGroup?
    /// `-H`, `-X`, `--owner`, `--numeric-ids`, `--devices`, `--specials`, `-D`, `-a`
    /// (`SourceOptionFlags`).
    var sourceOptions = SourceOptions()
    /// `--sync`, `--dry-run` (which implies it), `--itemize`.
    var sync = false
    var dryRun = false
    var itemize = false
    /// `--delete` (implies `--sync`), `--whole-file`, `--checksum` (implies `--sync`).
    var delete = false
    var checksum = false
    var wholeFile = false
    /// `--relay`: meet the receiver through this relay with a short code (every operand is
    /// a path then).
    var relay: RelayEndpoint?
    /// No relay and no address: a short code, announced on the local network (`--lan-port`).
    var local = false
    var lanPort = LocalAnnounce.defaultPort
    /// `--code-words`: words in the short code.
    var codeWords = WordCode.defaultWordCount
    /// `--no-direct`, `--no-relay`: the ways the connections may go after meeting at the relay.
    var routes = ReachRoutes()
    /// `--watch` (implies `--sync`): the session stays open and changes are sent as they
    /// happen; `--settle MS`: how long a file written but not closed must be quiet first.
    var watch = false
    var settleMilliseconds = 50

    static let name = Option<String>(
        "name", value: .required("NAME"), help: "the name to store standard input under\n(with the path -)")
    static let noResume = Flag(
        "no-resume", help: "send every file from its start, even when the\nreceiver holds part of it")
    static let compress = Option(
        "compress", short: "z", value: .optional("[=LEVEL]"),
        help: "compress each file on the way (raw deflate);\nLEVEL 0 to 9 (default 6); gzip:LEVEL also works",
        read: TransferCompression.level)
    static let timeout = CommonOptions.timeout.withHelp(
        "give up when nothing moves for SECONDS\n(also when connecting)")
    static let streams = Option(
        "streams", short: "P", value: .required("N"),
        help:
            "spread the transfer over N connections (1 to \(maxStreams)):\nfiles shared out, large files sent in ranges\nat once (default 1)",
        read: Read.number(of: "connections", in: 1...maxStreams))
    static let codeFile = Option(
        "code-file", value: .required("FILE"),
        help:
            "read the receiver's pairing code from FILE, which\nonly its owner may read (chmod 600; default:\n$SLUICE_CODE, else ask on the terminal)",
        read: Read.path)
    static let exclude = Option<String>(
        "exclude", value: .required("PATTERN"),
        help:
            "leave out what PATTERN matches, in gitignore's\nstyle: *, ?, [..] within a name, ** across\n"
            + "directories, a trailing / for directories only,\na / elsewhere anchors it to the directory sent")
    static let excludeFrom = Option<String>(
        "exclude-from", value: .required("FILE"), help: "the patterns in FILE, one a line (# comments)")
    static let filesFrom = Option<String>(
        "files-from", value: .required("FILE"),
        help:
            "send only the paths listed in FILE (one a line),\nrelative to the one directory given, with the\n"
            + "directories leading to them")
    static let from0 = Flag(
        "from0", short: "0", help: "the lists of --files-from and --exclude-from\nare NUL-separated")
    static let shard = Option(
        "shard", value: .required("I/N|auto"),
        help:
            "send only shard I (0 to N-1) of N: the files whose\npath hashes to I, so N runs cover the tree\n"
            + "exactly once; auto: I and N from the launcher\n(Slurm, MPI, a Kubernetes Indexed Job)",
        read: readShard)
    static let shardBy = Option(
        "shard-by", value: .required("paths|bytes"),
        help:
            "how --shard shares out files: by a hash of each\npath (default), or bytes: every task walks the\n"
            + "metadata and takes its balanced share",
        read: readShardBy)
    static let shardCount = Option(
        "shard-count", value: .required("N"),
        help: "with --shard auto: how many tasks there are,\nwhere the launcher does not say (Kubernetes)",
        read: Read.number(of: "tasks", in: 1...1 << 31))
    static let group = Option(
        "group", value: .required("ID"),
        help:
            "with --shard: send as one task of the task group\nID (default: the Slurm job's id); with\n"
            + "--shard-by bytes a file larger than a share is\nsplit by range across the tasks",
        read: { $0.value })
    static let sync = Flag(
        "sync",
        help:
            "ask the receiver what it has first: skip files\nof the same size and mtime, replace those that\n"
            + "differ (atomically), send the rest (the\nreceiver must allow it: receive --sync)")
    static let dryRun = Flag(
        "dry-run", short: "n",
        help: "with --sync (implied): change nothing, print\nwhat would be sent, replaced or left")
    static let delete = Flag(
        "delete",
        help:
            "with --sync (implied): once every file is\nstored, remove what the receiver has under each\n"
            + "directory sent that is not sent (the receiver\nmust allow it: receive --delete)")
    static let checksum = Flag(
        "checksum", short: "c", help: "with --sync (implied): compare files by digest,\nnot by size and mtime")
    static let wholeFile = Flag(
        "whole-file", short: "W",
        help: "with --sync: send a changed file whole, not as\nthe blocks that changed (the rsync algorithm)")
    static let itemize = Flag(
        "itemize", short: "i",
        help: "print a line per entry sent or changed, as\nrsync -i does (>f+++++++++ new, >f.st...... changed)")
    static let relay = RelayChoice.option.withHelp(
        "meet the receiver through the sluice relay at\nHOST (port \(RelayClient.defaultPort) unless given): print a "
            + "short\ncode for 'sluice receive CODE', no address needed")
    static let watch = Flag(
        "watch",
        help:
            "with --sync (implied): after the first pass, stay\nconnected and send what changes under the\n"
            + "directories as it happens (renames as renames;\nremovals with --delete) until SIGINT or SIGTERM")
    static let settle = Option(
        "settle", value: .required("MS"),
        help: "with --watch: send a file written but not closed\nonce quiet for MS milliseconds (default 50)",
        read: Read.number(of: "milliseconds", in: 0...60000))
    /// Never a secret on the command line: other users can read it. Parsed only to say so.
    static let code = Option<String?>("code", value: .optional("[=CODE]"), help: "", read: { $0.value })

    /// The options, in the order `--help` lists them.
    static let parser = ArgumentParser(
        [
            CommonOptions.chunkSize, compress, CommonOptions.threads, CommonOptions.progress, CommonOptions.noProgress,
            CommonOptions.stats, CommonOptions.rateLimit, timeout, noResume, name, streams, relay,
            RelayChoice.codeWords, RelayChoice.lanPort, RelayChoice.noDirect, RelayChoice.noRelay, codeFile,
            TransferAuth.keyFileOption, TransferAuth.insecureOption, exclude, excludeFrom, filesFrom, from0,
            shard, shardBy, shardCount, group, sync, dryRun, delete, checksum, wholeFile, itemize, watch, settle,
        ] + SourceOptionFlags.table.map(\.flag) + [
            code, CommonOptions.quiet, CommonOptions.help, CommonOptions.version,
        ]
    )

    /// Reads `parsed`; `--shard auto` looks up the launcher's variables with `environment`.
    init(_ parsed: ParsedArguments, environment: (String) -> String? = Self.environment) throws(UsageError) {
        if let spelling = parsed.spelling(of: Self.code) {
            throw UsageError(
                "\(spelling): a code on the command line can be read by other users; "
                    + "set SLUICE_CODE or give --code-file FILE")
        }
        let codeFile = try parsed[Self.codeFile]
        auth = try TransferAuth(parsed, codeFile: codeFile)
        let operands = parsed.operands
        relay = try parsed[Self.relay]
        // No --relay and no address last (and no other way to authenticate asked for): a short
        // code, through $SLUICE_RELAY if set, else on the local network.
        let chosenAuth = auth != .code(file: nil) || codeFile != nil
        let addressLast =
            operands.count >= 2
            && (try? TransferAddress(parsing: operands[operands.count - 1], listening: false)) != nil
        if relay == nil, !operands.isEmpty, !addressLast, !chosenAuth {
            relay = try RelayChoice.endpoint(parsed, environment: environment)
            local = relay == nil
        }
        if relay != nil || local {
            try RelayChoice.refuseOtherAuth(parsed, codeFile: codeFile != nil)
            guard !operands.isEmpty else { throw UsageError("send --relay: missing PATH (\(Self.usage))") }
            destination = relay.map { .tcp(host: $0.host, port: $0.port) } ?? .tcp(host: nil, port: lanPort)
            paths = operands
            if let words = try parsed[RelayChoice.codeWords] { codeWords = words }
            if let port = try parsed[RelayChoice.lanPort] { lanPort = port }
        } else {
            guard let last = operands.last else {
                throw UsageError("send: missing PATH and destination (\(Self.usage))")
            }
            guard operands.count >= 2 else {
                throw UsageError("send: missing the destination [HOST:]PORT after '\(last)' (\(Self.usage))")
            }
            for option: any CommandOption in [RelayChoice.codeWords, RelayChoice.lanPort] {
                if let spelling = parsed.spelling(of: option) { throw UsageError("\(spelling) goes with a short code") }
            }
            destination = try TransferAddress(parsing: last, listening: false)
            paths = Array(operands.dropLast())
        }
        routes = try RelayChoice.routes(parsed, relay: relay != nil)
        for path in paths where path.isEmpty {
            throw UsageError("send: empty path")
        }
        let stdinCount = paths.filter { $0 == "-" }.count
        if let name = try parsed.last(Self.name) {
            guard stdinCount == 1 else {
                throw UsageError("\(name.spelling) names standard input: give '-' as one PATH")
            }
            streamName = name.value
        } else if stdinCount > 0 {
            throw UsageError("send -: standard input needs a name to be stored under (--name NAME)")
        }
        if stdinCount > 1 { throw UsageError("send: '-' may be given once") }
        if let chunkSize = try parsed[CommonOptions.chunkSize] { self.chunkSize = chunkSize }
        compressionLevel = try parsed[Self.compress]
        threads = try parsed[CommonOptions.threads]
        quiet = parsed[CommonOptions.quiet]
        progress = CommonOptions.progressMode(parsed)
        stats = try parsed[CommonOptions.stats]
        rateLimit = try parsed[CommonOptions.rateLimit]
        timeoutSeconds = try parsed[Self.timeout]
        resume = !parsed[Self.noResume]
        if let streams = try parsed[Self.streams] { self.streams = streams }
        excludes = try parsed.all(Self.exclude)
        excludeFiles = try parsed.all(Self.excludeFrom)
        nulSeparated = parsed[Self.from0]
        if let filesFrom = try parsed.last(Self.filesFrom) {
            guard paths.count == 1, paths[0] != "-" else {
                throw UsageError(
                    "\(filesFrom.spelling): give one directory the listed paths are below (\(Self.usage))")
            }
            self.filesFrom = filesFrom.value
        }
        shard = try Self.shard(parsed, environment)
        if let by = try parsed.last(Self.shardBy) {
            guard shard != nil else { throw UsageError("\(by.spelling) goes with --shard") }
            shardByBytes = by.value
        }
        let groupName = try parsed.last(Self.group)
        if let groupName, shard == nil { throw UsageError("\(groupName.spelling) goes with --shard") }
        if let shard, let name = groupName?.value ?? TaskGroup.nameFromJob(environment: environment) {
            guard let made = TaskGroup(name: name, task: shard.index, tasks: shard.count) else {
                throw UsageError("--group: '\(name)' is not 1 to 64 bytes without control characters")
            }
            group = made
        }
        sourceOptions = SourceOptionFlags.read(parsed)
        dryRun = parsed[Self.dryRun]
        delete = parsed[Self.delete]
        wholeFile = parsed[Self.wholeFile]
        checksum = parsed[Self.checksum]
        watch = parsed[Self.watch]
        sync = parsed[Self.sync] || dryRun || delete || checksum || watch
        try readWatch(parsed)
        if watch, relay != nil || local, let spelling = parsed.spelling(of: Self.watch) {
            throw UsageError(
                "\(spelling) needs the receiver's address: a short code serves one meeting, and a watch "
                    + "reconnects when the connection drops")
        }
        if delete, let spelling = parsed.spelling(of: Self.delete),
            !excludes.isEmpty || !excludeFiles.isEmpty || filesFrom != nil || shard != nil
        {
            throw UsageError(
                "\(spelling) with --exclude, --exclude-from, --files-from or --shard would remove what they "
                    + "leave out; not supported")
        }
        itemize = parsed[Self.itemize] || dryRun
        if sync && paths.contains("-") {
            throw UsageError("--sync: standard input has nothing to compare; send it without --sync")
        }
        if sourceOptions.contains(.numericIDs) && !sourceOptions.contains(.owners),
            let spelling = parsed.spelling(of: SourceOptionFlags.numericIDs)
        {
            throw UsageError("\(spelling) goes with --owner (or -a)")
        }
    }

    /// What `--shard` says: a shard, or to ask the launcher.
    enum ShardChoice: Sendable {
        case fixed(Shard)
        case auto
    }

    private static func readShard(_ option: ParsedArguments.Occurrence) throws(UsageError) -> ShardChoice {
        let text = option.value ?? ""
        if text == "auto" { return .auto }
        guard let shard = Shard(parsing: text) else {
            throw UsageError("\(option.spelling) '\(text)': must be I/N with I from 0 to N-1, like 0/4, or auto")
        }
        return .fixed(shard)
    }

    /// `--shard-by`: true for bytes, false for paths.
    private static func readShardBy(_ option: ParsedArguments.Occurrence) throws(UsageError) -> Bool {
        switch option.value {
        case "bytes": return true
        case "paths": return false
        default: throw UsageError("\(option.spelling) '\(option.value ?? "")': must be paths or bytes")
        }
    }

    /// The shard `--shard` and `--shard-count` name: `auto` from the launcher's environment.
    private static func shard(_ parsed: ParsedArguments, _ environment: (String) -> String?) throws(UsageError)
        -> Shard?
    {
        let count = try parsed.last(Self.shardCount)
        guard let choice = try parsed.last(Self.shard) else {
            if let count { throw UsageError("\(count.spelling) goes with --shard auto") }
            return nil
        }
        switch choice.value {
        case .fixed(let shard):
            if let count { throw UsageError("\(count.spelling) goes with --shard auto, not --shard I/N") }
            return shard
        case .auto:
            switch Shard.fromLauncher(environment: environment, count: count?.value) {
            case .success(let found): return found.0
            case .failure(let error): throw UsageError("\(choice.spelling) auto: \(error)")
            }
        }
    }

    /// The process's environment, for `--shard auto`.
    static func environment(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
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
        options.sourceOptions = sourceOptions
        options.sync = sync
        options.dryRun = dryRun
        options.delete = delete
        options.wholeFile = wholeFile
        options.checksum = checksum
        return options
    }
}
