import Sluice
import SluiceTransfer

/// `sluice receive [options]`, validated.
struct ReceiveOptions: Sendable {
    static let usage = "usage: sluice receive [options], or receive [--relay HOST] CODE"
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
    /// `receive CODE`: the sender's short code, met through `relay` (`--relay` or
    /// `$SLUICE_RELAY`); one transfer, as with `--once`.
    var code: WordCode?
    var relay: RelayEndpoint?
    /// With a CODE and no relay: the UDP port to hear the sender's announcement on.
    var lanPort = LocalAnnounce.defaultPort
    /// `--no-direct`, `--no-relay`: the ways the connections may go after meeting at the relay.
    var routes = ReachRoutes()

    static let listen = Option(
        "listen", short: "l", value: .required("ADDRESS"),
        help:
            "listen on [HOST:]PORT, [V6]:PORT or unix:PATH\n(default: port \(TransferAddress.defaultPort), every interface, or\nloopback only with --insecure; port 0 picks a\nfree port)",
        read: { (option: ParsedArguments.Occurrence) throws(UsageError) in
            try TransferAddress(parsing: option.value ?? "", listening: true)
        })
    static let dir = Option(
        "dir", short: "C", value: .required("DIR"), help: "store into DIR, which must exist\n(default: .)",
        read: Read.path)
    static let once = Flag(
        "once",
        help: "serve one sender, then exit with its status\n(connections that fail their handshake do\nnot count)")
    static let overwrite = Flag("overwrite", help: "replace existing files")
    static let keepModes = Flag(
        "keep-modes",
        help:
            "give files and directories the sender's\npermission bits as sent, as rsync -p (default:\nless this process's umask, as cp); never\nsetuid, setgid or sticky"
    )
    static let sync = Flag(
        "sync",
        help:
            "let senders replace what differs (send --sync):\nby default only new entries are stored, and an\nentry here is replaced only with --overwrite"
    )
    static let delete = Flag(
        "delete", help: "let senders remove what they no longer have\n(send --delete); implies --sync")
    static let noOwners = Flag(
        "no-owners", help: "running as root: leave files owned by root\nwhatever owner a sender sends (send --owner)")
    static let devices = Flag(
        "devices",
        help:
            "running as root: make the device files a sender\nsends (send -D); by default they are refused\n(FIFOs and sockets are made either way)"
    )
    static let maxSize = Option(
        "max-size", value: .required("SIZE"), help: "refuse files larger than SIZE, like 100M, 4G",
        read: { (option: ParsedArguments.Occurrence) throws(UsageError) -> UInt64 in
            let text = option.value ?? ""
            guard let size = ChunkSize.parseBytes(text) else {
                throw UsageError("\(option.spelling) '\(text)': must be a number of bytes, like 100M or 4G")
            }
            return UInt64(size)
        })
    static let maxSessions = Option(
        "max-sessions", value: .required("N"),
        help:
            "serve at most N authenticated senders at once; one\nmore is told 'busy' and disconnected (default \(TransferReceiveOptions().maxSessions));\n"
            + "connections still authenticating wait apart; the\nopen-file limit is raised to N x 4 + 64 + 1024",
        read: Read.number(of: "sessions", in: 1...100_000))
    static let noResume = Flag("no-resume", help: "never continue interrupted files: start over")
    static let noFsync = Flag(
        "no-fsync", help: "do not flush files to disk before\nanswering (by default one syncfs per\nbatch of files)")
    static let direct = Flag(
        "direct",
        help:
            "write files of 1 MiB or more with O_DIRECT,\npast the page cache: less CPU, and the file\nis not left cached"
    )
    static let noStreams = Flag(
        "no-streams",
        help:
            "do not offer parallel streams: answer as a\nreceiver of the first protocol version, so a\n'send --streams' uses one connection (for tests)"
    )
    static let timeout = CommonOptions.timeout.withHelp(
        "drop a sender silent for SECONDS\n(default \(Int(defaultIdleSeconds)))")
    static let codeUses = Option(
        "code-uses", value: .required("N"),
        help:
            "let a pairing code serve N transfers (default 1),\neach with all its connections; then print a\nnew one",
        read: Read.number(of: "transfers", in: 1...1_000_000))
    static let quiet = Flag(
        "quiet", short: "q", help: "print neither the address nor a line per file;\nonly errors (and --stats)")

    static let relay = RelayChoice.option.withHelp(
        "with CODE: meet the sender through the sluice\nrelay at HOST (port \(RelayClient.defaultPort) unless given; "
            + "default\n$\(RelayChoice.variable))")

    /// The options, in the order `--help` lists them.
    static let parser = ArgumentParser([
        relay, RelayChoice.lanPort, RelayChoice.noDirect, RelayChoice.noRelay, listen, dir, once, overwrite, keepModes,
        sync, delete, noOwners, devices, maxSize, maxSessions,
        noResume, noFsync, direct, noStreams, timeout, TransferAuth.keyFileOption, TransferAuth.insecureOption,
        codeUses, CommonOptions.stats, quiet, CommonOptions.help, CommonOptions.version,
    ])

    init(_ parsed: ParsedArguments, environment: (String) -> String? = SendOptions.environment) throws(UsageError) {
        if parsed.operands.count > 1 {
            throw UsageError("receive: unexpected operand '\(parsed.operands[1])' (\(Self.usage))")
        }
        if let operand = parsed.operands.first {
            switch WordCode.parse(operand) {
            case .success(let code): self.code = code
            case .failure(let error): throw UsageError("receive: code '\(operand)': \(error)")
            }
            // Without a relay, the sender is looked for on the local network.
            relay = try RelayChoice.endpoint(parsed, environment: environment)
            if let port = try parsed[RelayChoice.lanPort] {
                guard relay == nil else { throw UsageError("--lan-port: not with a relay") }
                lanPort = port
            }
            try RelayChoice.refuseOtherAuth(parsed)
            for option: any CommandOption in [Self.listen, Self.codeUses] {
                if let spelling = parsed.spelling(of: option) {
                    throw UsageError("\(spelling): not with a CODE (the relay is met, nothing listens)")
                }
            }
        } else if let spelling = parsed.spelling(of: Self.relay) ?? parsed.spelling(of: RelayChoice.lanPort) {
            throw UsageError("\(spelling): give the CODE the sender printed (\(Self.usage))")
        }
        routes = try RelayChoice.routes(parsed, relay: relay != nil)
        auth = try TransferAuth(parsed)
        if let listen = try parsed[Self.listen] { self.listen = listen }
        // Plaintext is for trusted links: without a host it listens on loopback only.
        if auth == .insecure, case .tcp(nil, let port) = listen { listen = .tcp(host: "127.0.0.1", port: port) }
        if let directory = try parsed[Self.dir] { self.directory = directory }
        once = parsed[Self.once] || code != nil
        overwrite = parsed[Self.overwrite]
        keepModes = parsed[Self.keepModes]
        keepOwners = !parsed[Self.noOwners]
        devices = parsed[Self.devices]
        delete = parsed[Self.delete]
        sync = parsed[Self.sync] || delete
        maxSize = try parsed[Self.maxSize]
        if let maxSessions = try parsed[Self.maxSessions] { self.maxSessions = maxSessions }
        resume = !parsed[Self.noResume]
        fsync = !parsed[Self.noFsync]
        streams = !parsed[Self.noStreams]
        directIO = parsed[Self.direct]
        if let seconds = try parsed[Self.timeout] { idleSeconds = seconds }
        stats = try parsed[CommonOptions.stats]
        quiet = parsed[Self.quiet]
        if let codeUses = try parsed.last(Self.codeUses) {
            guard case .code = auth else {
                throw UsageError("\(codeUses.spelling): only with a pairing code (not with --key-file or --insecure)")
            }
            self.codeUses = codeUses.value
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
