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
    static let chunkSize = OptionSpec(
        "chunk-size", short: "b", value: .required("SIZE"),
        help:
            "read and write SIZE bytes at a time, 512 to 4M\n(default \(ChunkSize.default)); like 512, 64K, 64KiB, 1M, 4MiB"
    )
    static let compress = OptionSpec(
        "compress", short: "z", value: .optional("[=FORMAT][:LEVEL]"),
        help:
            "compress on the way: gzip (default), zlib,\ndeflate (LEVEL 0 to 9, default 6) or zstd\n(LEVEL 1 to 19, default 3); the value is\nattached: -zgzip:1 or --compress=gzip:1"
    )
    static let decompress = OptionSpec(
        "decompress", short: "d", value: .optional("[=FORMAT]"),
        help: "decompress on the way: auto (default: detect\nthe format), gzip, zlib, deflate or zstd")
    /// `-1` … `-9`: gzip's way to give the level. Only `-1` is listed in help.
    static let levels: [OptionSpec] = (1...9).map { digit in
        OptionSpec(
            nil, short: Character(String(digit)), key: "level",
            help: digit == 1 ? "... -9: the level of --compress as gzip\ntakes it (-1 fastest, -9 smallest)" : "")
    }
    static let threads = OptionSpec(
        "threads", short: "T", value: .required("N"),
        help: "compress on N worker threads (default: one per\ncore); the output is the same for any N")
    /// `copy`'s: decompression runs on the threads too.
    static let copyThreads = OptionSpec(
        "threads", short: "T", value: .required("N"),
        help: "compress or decompress on N worker threads\n(default: one per core); the output is the same\nfor any N")
    static let progress = OptionSpec(
        "progress", short: "p", help: "show progress on stderr (default: when stderr\nis a terminal)")
    static let noProgress = OptionSpec("no-progress", help: "never show progress")
    static let stats = OptionSpec(
        "stats", value: .optional("[=text|json]"), help: "print a report on stderr when done\n(default: text)")
    static let rateLimit = OptionSpec(
        "rate-limit", value: .required("RATE"), help: "write at most RATE bytes a second, like 500K, 10M")
    static let timeout = OptionSpec(
        "timeout", value: .required("SECONDS"), help: "give up when no byte moves for SECONDS\n(also when connecting)")
    static let force = OptionSpec("force", short: "f", help: "replace an existing destination file")
    static let append = OptionSpec("append", help: "append to the destination file, in place")
    static let fsync = OptionSpec(
        "fsync", help: "flush the destination file to disk before it\ntakes its name (survives a crash)")
    /// `copy`'s (the receiver's `--direct` is its own, in TransferOptions).
    static let direct = OptionSpec(
        "direct",
        help:
            "write a destination file with O_DIRECT, past\nthe page cache: less CPU, each write waits\nfor the disk, and the file is not left cached"
    )
    static let noZeroCopy = OptionSpec(
        "no-zero-copy",
        help:
            "read and write the bytes even where the kernel\ncould move them itself (copy_file_range,\nsendfile, splice)"
    )
    static let quiet = OptionSpec("quiet", short: "q", help: "no progress; print only errors (and --stats)")
    static let help = OptionSpec("help", short: "h", help: "show this help and exit")
    static let version = OptionSpec("version", help: "show the version and exit")

    /// The largest `--timeout`: a day.
    static let maximumTimeout = 86_400.0

    /// `copy`'s idle limit without `--timeout` once a socket end is connected: five minutes, as
    /// `receive` has, so a peer whose path died does not hold the copy forever.
    static let socketIdleSeconds = 300.0

    /// `--threads N`, when given.
    static func threads(_ parsed: ParsedArguments) throws(UsageError) -> Int? {
        guard let option = parsed.last("threads") else { return nil }
        let text = option.value ?? ""
        let range = WorkerPool.threadCounts
        guard text.count <= 3, text.allSatisfy({ $0.isASCII && $0.isNumber }), let n = Int(text), range.contains(n)
        else {
            throw UsageError("\(option.spelling) '\(text)': must be a number of threads from 1 to \(range.upperBound)")
        }
        return n
    }

    /// `-z`/`-d` with their value as the next word (`-z gzip:1 SRC DST`): that word became an
    /// operand. Says what happened and how to write it.
    static func checkDetachedValue(_ parsed: ParsedArguments, operands: [String]) throws(UsageError) {
        for option in parsed.options where ["compress", "decompress"].contains(option.key) && option.value == nil {
            if let word = operands.first(where: CompressionSpec.looksLikeValue) {
                let long = option.key == "compress" ? "--compress" : "--decompress"
                let short = option.key == "compress" ? "-z" : "-d"
                throw UsageError(
                    "\(option.spelling) \(word): the value of \(option.spelling) must be attached, or '\(word)' is read as a file;"
                        + " write \(short)\(word) or \(long)=\(word)")
            }
        }
    }

    /// `--compress` with `-1` … `-9` applied (the last given wins over the default level, not
    /// over an explicit `:LEVEL`).
    static func compression(_ parsed: ParsedArguments) throws(UsageError) -> CompressionSpec? {
        let levelOption = parsed.last("level")
        guard let option = parsed.last("compress") else {
            if let levelOption {
                throw UsageError(
                    "\(levelOption.spelling) is a compression level: use it with -z (like -z \(levelOption.spelling))")
            }
            return nil
        }
        var spec = try CompressionSpec(parsing: option.value, spelling: option.spelling)
        let levelGiven = option.value?.contains(":") == true
        if let levelOption, !levelGiven, let digit = Int(levelOption.spelling.dropFirst()) {
            spec.level = digit
        }
        return spec
    }

    /// `--chunk-size`, when given.
    static func chunkSize(_ parsed: ParsedArguments) throws(UsageError) -> ChunkSize? {
        guard let text = parsed.value("chunk-size") else { return nil }
        let result = Result { () throws(SluiceError) in try ChunkSize(parsing: text) }
        switch result {
        case .success(let size): return size
        case .failure(let error): throw UsageError(CLIError.message(for: error))
        }
    }

    /// `--progress`, `--no-progress` (the last one wins) and `--quiet` (no progress).
    static func progressMode(_ parsed: ParsedArguments) -> ProgressMode {
        if parsed.has("quiet") { return .off }
        switch parsed.lastOf(["progress", "no-progress"]) {
        case "progress": return .on
        case "no-progress": return .off
        default: return .auto
        }
    }

    /// `--stats[=text|json]`, when given.
    static func statsFormat(_ parsed: ParsedArguments) throws(UsageError) -> StatsFormat? {
        guard let option = parsed.last("stats") else { return nil }
        guard let value = option.value else { return .text }
        guard let format = StatsFormat(rawValue: value) else {
            throw UsageError("\(option.spelling): unknown format '\(value)' (text or json)")
        }
        return format
    }

    /// `--rate-limit RATE`, in bytes per second, when given.
    static func rateLimit(_ parsed: ParsedArguments) throws(UsageError) -> Int? {
        guard let option = parsed.last("rate-limit") else { return nil }
        let text = option.value ?? ""
        guard let rate = ChunkSize.parseBytes(text), rate > 0 else {
            throw UsageError(
                "\(option.spelling) '\(text)': must be a positive number of bytes per second, like 500K, 10M or 1G")
        }
        return rate
    }

    /// `--timeout SECONDS`, when given.
    static func timeoutSeconds(_ parsed: ParsedArguments) throws(UsageError) -> Double? {
        guard let option = parsed.last("timeout") else { return nil }
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
    static let copyTimeout = OptionSpec(
        "timeout", value: .required("SECONDS"),
        help: "give up when no byte moves for SECONDS (also\nwhen connecting); with a socket end, 300\n"
            + "once connected unless given")

    /// The idle limit of the copy once its ends are open: `--timeout`, else
    /// `CommonOptions.socketIdleSeconds` when an end is a socket.
    var idleSeconds: Double? {
        timeoutSeconds ?? (source.isSocket || destination.isSocket ? CommonOptions.socketIdleSeconds : nil)
    }

    static let parser = ArgumentParser(
        [
            CommonOptions.chunkSize, CommonOptions.compress, CommonOptions.decompress,
        ] + CommonOptions.levels + [
            CommonOptions.copyThreads, CommonOptions.progress,
            CommonOptions.noProgress, CommonOptions.stats, CommonOptions.rateLimit, copyTimeout,
            CommonOptions.force, CommonOptions.append, CommonOptions.fsync, CommonOptions.direct,
            CommonOptions.noZeroCopy,
            CommonOptions.quiet, CommonOptions.help,
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

        if let chunkSize = try CommonOptions.chunkSize(parsed) { self.chunkSize = chunkSize }
        if let compress = parsed.last("compress"), let decompress = parsed.last("decompress") {
            throw UsageError("\(compress.spelling) and \(decompress.spelling) cannot be used together")
        }
        if let spec = try CommonOptions.compression(parsed) {
            transform = .compress(spec)
        }
        threads = try CommonOptions.threads(parsed)
        if let option = parsed.last("decompress") {
            transform = .decompress(try DecompressionSpec(parsing: option.value, spelling: option.spelling))
        }
        quiet = parsed.has("quiet")
        progress = CommonOptions.progressMode(parsed)
        stats = try CommonOptions.statsFormat(parsed)
        rateLimit = try CommonOptions.rateLimit(parsed)
        timeoutSeconds = try CommonOptions.timeoutSeconds(parsed)
        force = parsed.has("force")
        append = parsed.has("append")
        zeroCopy = !parsed.has("no-zero-copy")
        if force && append {
            throw UsageError("--force and --append cannot be used together")
        }
        fsync = parsed.has("fsync")
        direct = parsed.has("direct")
        for (used, flag) in [(append, "--append"), (fsync, "--fsync"), (direct, "--direct")] where used {
            switch destination {
            case .file, .standardIO: break
            case .tcpConnect, .tcpListen, .unixConnect, .unixListen, .tlsConnect, .tlsListen:
                throw UsageError("\(flag) needs a file destination, not \(destination)")
            }
        }
    }
}
