import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// When the progress display is drawn.
enum ProgressMode: Hashable, Sendable {
    /// When stderr is a terminal.
    case auto
    case on
    case off
}

/// The format of the final report of `--stats`.
enum StatsFormat: String, Hashable, Sendable, CaseIterable {
    case text, json
}

/// The options shared by the commands that move bytes.
enum CommonOptions {
    static let chunkSize = Option(
        "chunk-size", short: "b", value: .required("SIZE"),
        help:
            "read and write SIZE bytes at a time, 512 to 4M\n(default \(ChunkSize.default)); like 512, 64K, 64KiB, 1M, 4MiB",
        read: readChunkSize)
    /// `copy`'s: the compression and whether `:LEVEL` was written (which `-1` … `-9` do not
    /// override).
    static let compress = Option(
        "compress", short: "z", value: .optional("[=FORMAT][:LEVEL]"),
        help:
            "compress on the way: gzip (default), zlib,\ndeflate (LEVEL 0 to 9, default 6) or zstd\n(LEVEL 1 to 19, default 3); the value is\nattached: -zgzip:1 or --compress=gzip:1",
        read: readCompress)
    static let decompress = Option(
        "decompress", short: "d", value: .optional("[=FORMAT]"),
        help: "decompress on the way: auto (default: detect\nthe format), gzip, zlib, deflate or zstd",
        read: readDecompress)
    /// `-1` … `-9`: gzip's way to give the level, read as the digit. Only `-1` is listed in help.
    static let levels = Option<Int?>(
        specs: (1...9).map { digit in
            OptionSpec(
                nil, short: Character(String(digit)), key: "level",
                help: digit == 1 ? "... -9: the level of --compress as gzip\ntakes it (-1 fastest, -9 smallest)" : "")
        },
        read: { Int($0.spelling.dropFirst()) })
    static let threads = Option(
        "threads", short: "T", value: .required("N"),
        help: "compress on N worker threads (default: one per\ncore); the output is the same for any N",
        read: Read.number(of: "threads", in: WorkerPool.threadCounts, digitsOnly: true))
    /// `copy`'s: decompression runs on the threads too.
    static let copyThreads = threads.withHelp(
        "compress or decompress on N worker threads\n(default: one per core); the output is the same\nfor any N")
    static let progress = Flag(
        "progress", short: "p", help: "show progress on stderr (default: when stderr\nis a terminal)")
    static let noProgress = Flag("no-progress", help: "never show progress")
    static let stats = Option(
        "stats", value: .optional("[=text|json]"), help: "print a report on stderr when done\n(default: text)",
        read: readStats)
    static let rateLimit = Option(
        "rate-limit", value: .required("RATE"), help: "write at most RATE bytes a second, like 500K, 10M",
        read: readRateLimit)
    static let timeout = Option(
        "timeout", value: .required("SECONDS"), help: "give up when no byte moves for SECONDS\n(also when connecting)",
        read: readTimeout)
    static let force = Flag("force", short: "f", help: "replace an existing destination file")
    static let append = Flag("append", help: "append to the destination file, in place")
    static let fsync = Flag(
        "fsync", help: "flush the destination file to disk before it\ntakes its name (survives a crash)")
    /// `copy`'s (the receiver's `--direct` is its own, in ReceiveOptions).
    static let direct = Flag(
        "direct",
        help:
            "write a destination file with O_DIRECT, past\nthe page cache: less CPU, each write waits\nfor the disk, and the file is not left cached"
    )
    static let noZeroCopy = Flag(
        "no-zero-copy",
        help:
            "read and write the bytes even where the kernel\ncould move them itself (copy_file_range,\nsendfile, splice)"
    )
    static let quiet = Flag("quiet", short: "q", help: "no progress; print only errors (and --stats)")
    static let help = Flag("help", short: "h", help: "show this help and exit")
    static let version = Flag("version", help: "show the version and exit")

    /// The largest `--timeout`: a day.
    static let maximumTimeout = 86_400.0

    /// `copy`'s idle limit without `--timeout` once a socket end is connected: five minutes, as
    /// `receive` has, so a peer whose path died does not hold the copy forever.
    static let socketIdleSeconds = 300.0

    /// `-z`/`-d` with their value as the next word (`-z gzip:1 SRC DST`): that word became an
    /// operand. Says what happened and how to write it.
    static func checkDetachedValue(_ parsed: ParsedArguments, operands: [String]) throws(UsageError) {
        for option in parsed.occurrences(of: [compress, decompress]) where option.value == nil {
            if let word = operands.first(where: CompressionSpec.looksLikeValue) {
                let spec = option.key == compress.key ? compress.specs[0] : decompress.specs[0]
                let long = spec.displayName
                let short = "-" + (spec.short.map { String($0) } ?? "")
                throw UsageError(
                    "\(option.spelling) \(word): the value of \(option.spelling) must be attached, or '\(word)' is read as a file;"
                        + " write \(short)\(word) or \(long)=\(word)")
            }
        }
    }

    /// `--compress` with `-1` … `-9` applied (the last given wins over the default level, not
    /// over an explicit `:LEVEL`).
    static func compression(_ parsed: ParsedArguments) throws(UsageError) -> CompressionSpec? {
        let level = try parsed.last(levels)
        guard let compression = try parsed[compress] else {
            if let level {
                throw UsageError("\(level.spelling) is a compression level: use it with -z (like -z \(level.spelling))")
            }
            return nil
        }
        var spec = compression.spec
        if let level, !compression.levelGiven, let digit = level.value {
            spec.level = digit
        }
        return spec
    }

    /// `--progress`, `--no-progress` (the last one wins) and `--quiet` (no progress).
    static func progressMode(_ parsed: ParsedArguments) -> ProgressMode {
        if parsed[quiet] { return .off }
        return givenProgress(parsed) ?? .auto
    }

    /// What `--progress` and `--no-progress` say, the last one given winning; nil for neither.
    static func givenProgress(_ parsed: ParsedArguments) -> ProgressMode? {
        parsed.lastGiven([(progress, .on), (noProgress, .off)])
    }

    private static func readChunkSize(_ option: ParsedArguments.Occurrence) throws(UsageError) -> ChunkSize {
        let result = Result { () throws(SluiceError) in try ChunkSize(parsing: option.value ?? "") }
        switch result {
        case .success(let size): return size
        case .failure(let error): throw UsageError(CLIError.message(for: error))
        }
    }

    private static func readCompress(
        _ option: ParsedArguments.Occurrence
    ) throws(UsageError) -> (spec: CompressionSpec, levelGiven: Bool) {
        let spec = try CompressionSpec(parsing: option.value, spelling: option.spelling)
        return (spec, option.value?.contains(":") == true)
    }

    private static func readDecompress(_ option: ParsedArguments.Occurrence) throws(UsageError) -> DecompressionSpec {
        try DecompressionSpec(parsing: option.value, spelling: option.spelling)
    }

    private static func readStats(_ option: ParsedArguments.Occurrence) throws(UsageError) -> StatsFormat {
        guard let value = option.value else { return .text }
        guard let format = StatsFormat(rawValue: value) else {
            throw UsageError("\(option.spelling): unknown format '\(value)' (text or json)")
        }
        return format
    }

    /// `--rate-limit RATE`, in bytes per second.
    private static func readRateLimit(_ option: ParsedArguments.Occurrence) throws(UsageError) -> Int {
        let text = option.value ?? ""
        guard let rate = ChunkSize.parseBytes(text), rate > 0 else {
            throw UsageError(
                "\(option.spelling) '\(text)': must be a positive number of bytes per second, like 500K, 10M or 1G")
        }
        return rate
    }

    /// `--timeout SECONDS`.
    private static func readTimeout(_ option: ParsedArguments.Occurrence) throws(UsageError) -> Double {
        let text = option.value ?? ""
        guard let seconds = Double(text), seconds.isFinite, seconds > 0, seconds <= maximumTimeout,
            text.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") })
        else {
            throw UsageError("\(option.spelling) '\(text)': must be a number of seconds from 0.001 to 86400")
        }
        return max(seconds, 0.001)
    }
}

/// `sluice copy [options] SOURCE DEST`, validated.
struct CopyOptions: Hashable, Sendable {
    var source: Endpoint
    var destination: Endpoint
    var chunkSize: ChunkSize = .default
    var transform: Transform?
    var progress: ProgressMode = .auto
    var stats: StatsFormat?
    var rateLimit: Int?
    var timeoutSeconds: Double?
    var force = false
    var append = false
    /// Flush the destination file to disk before it takes its name (`--fsync`).
    var fsync = false
    var quiet = false
    /// Compression and decompression threads (`--threads`); nil: one per core.
    var threads: Int?
    /// Let the kernel move the bytes where nothing transforms them (off: `--no-zero-copy`).
    var zeroCopy = true
    /// Write a destination file with O_DIRECT (`--direct`).
    var direct = false

    /// `--timeout` as `copy` has it: with a default once a socket is connected.
    static let copyTimeout = CommonOptions.timeout.withHelp(
        "give up when no byte moves for SECONDS (also\nwhen connecting); with a socket end, 300\n"
            + "once connected unless given")

    /// The idle limit of the copy once its ends are open: `--timeout`, else
    /// `CommonOptions.socketIdleSeconds` when an end is a socket.
    var idleSeconds: Double? {
        timeoutSeconds ?? (source.isSocket || destination.isSocket ? CommonOptions.socketIdleSeconds : nil)
    }

    /// The options, in the order `--help` lists them.
    static let parser = ArgumentParser([
        CommonOptions.chunkSize, CommonOptions.compress, CommonOptions.decompress, CommonOptions.levels,
        CommonOptions.copyThreads, CommonOptions.progress, CommonOptions.noProgress, CommonOptions.stats,
        CommonOptions.rateLimit, copyTimeout, CommonOptions.force, CommonOptions.append, CommonOptions.fsync,
        CommonOptions.direct, CommonOptions.noZeroCopy, CommonOptions.quiet, CommonOptions.help,
        CommonOptions.version,
    ])

    /// The largest `--timeout`: a day.
    static let maximumTimeout = CommonOptions.maximumTimeout

    init(source: Endpoint, destination: Endpoint) {
        self.source = source
        self.destination = destination
    }

    /// `copy FILE DIR`, DIR an existing directory, writes DIR/(FILE's last component), as cp
    /// does. Other sources have no name to give the file: DIR stays, and fails as a directory.
    func intoDirectory() -> CopyOptions {
        guard case .file(let directory) = destination, case .file(let path) = source else { return self }
        var info = stat()
        guard stat(directory, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else { return self }
        guard let name = path.split(separator: "/").last.map(String.init), name != ".", name != ".." else {
            return self
        }
        var resolved = self
        resolved.destination = .file(directory.hasSuffix("/") ? directory + name : directory + "/" + name)
        return resolved
    }

    /// Validates parsed arguments (help and version already handled by the caller).
    init(_ parsed: ParsedArguments) throws(UsageError) {
        let operands = parsed.operands
        try CommonOptions.checkDetachedValue(parsed, operands: operands)
        switch operands.count {
        case 0: throw UsageError("copy: missing SOURCE and DEST (usage: sluice copy [options] SOURCE DEST)")
        case 1: throw UsageError("copy: missing DEST after '\(operands[0])' (usage: sluice copy [options] SOURCE DEST)")
        case 2: break
        default:
            throw UsageError("copy: unexpected operand '\(operands[2])' (usage: sluice copy [options] SOURCE DEST)")
        }
        self.init(source: try Endpoint(parsing: operands[0]), destination: try Endpoint(parsing: operands[1]))

        if let chunkSize = try parsed[CommonOptions.chunkSize] { self.chunkSize = chunkSize }
        if let compress = parsed.spelling(of: CommonOptions.compress),
            let decompress = parsed.spelling(of: CommonOptions.decompress)
        {
            throw UsageError("\(compress) and \(decompress) cannot be used together")
        }
        if let spec = try CommonOptions.compression(parsed) {
            transform = .compress(spec)
        }
        threads = try parsed[CommonOptions.copyThreads]
        if let spec = try parsed[CommonOptions.decompress] {
            transform = .decompress(spec)
        }
        quiet = parsed[CommonOptions.quiet]
        progress = CommonOptions.progressMode(parsed)
        stats = try parsed[CommonOptions.stats]
        rateLimit = try parsed[CommonOptions.rateLimit]
        timeoutSeconds = try parsed[Self.copyTimeout]
        force = parsed[CommonOptions.force]
        append = parsed[CommonOptions.append]
        zeroCopy = !parsed[CommonOptions.noZeroCopy]
        if force && append {
            throw UsageError("--force and --append cannot be used together")
        }
        fsync = parsed[CommonOptions.fsync]
        direct = parsed[CommonOptions.direct]
        for (used, flag) in [(append, "--append"), (fsync, "--fsync"), (direct, "--direct")] where used {
            switch destination {
            case .file, .standardIO: break
            case .tcpConnect, .tcpListen, .unixConnect, .unixListen, .tlsConnect, .tlsListen:
                throw UsageError("\(flag) needs a file destination, not \(destination)")
            }
        }
    }
}
