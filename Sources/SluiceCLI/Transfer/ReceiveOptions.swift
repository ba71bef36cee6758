import Sluice
import SluiceTransfer

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
    /// Let senders replace what differs (`--sync`, or `--delete`).
    var sync = false
    /// Let senders remove what they no longer have (`--delete`, which implies `--sync`).
    var delete = false
    /// Make the device files a sender sends, running as root (`--devices`).
    var devices = false
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
            "sync",
            help:
                "let senders replace what differs (send --sync):\nby default only new entries are stored, and an\nentry here is replaced only with --overwrite"
        ),
        OptionSpec(
            "delete",
            help: "let senders remove what they no longer have\n(send --delete); implies --sync"),
        OptionSpec(
            "no-owners",
            help: "running as root: leave files owned by root\nwhatever owner a sender sends (send --owner)"),
        OptionSpec(
            "devices",
            help:
                "running as root: make the device files a sender\nsends (send -D); by default they are refused\n(FIFOs and sockets are made either way)"
        ),
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
        devices = parsed.has("devices")
        delete = parsed.has("delete")
        sync = parsed.has("sync") || delete
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
        options.makesDevices = devices
        options.sync = sync
        options.delete = delete
        return options
    }
}
