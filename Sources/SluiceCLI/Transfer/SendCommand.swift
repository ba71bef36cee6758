import Sluice
import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// `sluice send [options] PATH... [HOST:]PORT`.
enum SendCommand: Command {
    static let name = "send"
    static let summary = "send files and directories to a sluice receive"
    static var parser: ArgumentParser { SendOptions.parser }

    static var help: String {
        """
        Usage: sluice send [options] PATH... [HOST:]PORT
               sluice send [options] - --name NAME [HOST:]PORT
               sluice send [--relay HOST[:PORT]] [options] PATH...

        Send files and directories (recursively, under their base names) to a
        'sluice receive' at HOST:PORT (default host localhost; also [V6]:PORT,
        tcp:HOST:PORT, unix:PATH). The receiver checks each file's digest
        (XXH3-128 or SHA-256) and stores it under its final name only when
        complete; an interrupted file is continued where it stopped when sent
        again (vouched for by the resume key in $XDG_STATE_HOME/sluice, or
        ~/.local/state/sluice, made on first use; else checked with SHA-256
        at both ends). Symbolic links inside directories go as links, sparse files as
        data and holes. With --sync, what the receiver has the same is not sent
        again. With the path -, standard input is sent as one file named NAME
        (never resumed).
        With --relay, no address is needed: the relay gives a nameplate, send
        prints a short code (NAMEPLATE-word-word-word) and waits for the
        receiver who types it ('sluice receive --relay HOST CODE'); the code
        is checked with SPAKE2 (one guess: a wrong code ends both sides with
        77) and its key secures TLS 1.3 end to end. With no relay ($SLUICE_RELAY
        unset) and no address last, the code's nameplate is announced on the
        local network for 'sluice receive CODE' to find.

        Options:
        \(SendOptions.parser.helpLines().joined(separator: "\n"))

        Exit status:
          0 every file stored; 64 usage error; 65 a file failed its integrity
          check; 66 a PATH is missing or unreadable; 69 cannot connect (refused,
          unknown host, timed out, receiver busy); 73 the receiver refused a
          file (it exists, too large, invalid name); 74 connection lost or
          input/output error; 77 the code was wrong or someone tried to guess
          it (a short code), or the receiver's key did not match; 129 hung up
          (SIGHUP); 130 interrupted (SIGINT); 143 terminated (SIGTERM)

        """
    }

    static func run(_ parsed: ParsedArguments) -> ExitStatus {
        let options: SendOptions
        do {
            options = try SendOptions(parsed)
        } catch {
            Terminal.report(error.message)
            return .usage
        }
        return SendSession.run(options)
    }
}

/// One run of `sluice send`: lists the paths, connects, sends on one event loop, and reports.
final class SendSession: Interruptible {
    let options: SendOptions
    let loop: EventLoop
    /// The transfer running: its progress, and how to stop it.
    private var sender: (any TransferProgressSource)?
    private var cancelTransfer: (() -> Void)?
    /// Whether something below the paths could not be listed (a warning said what).
    private var listingIncomplete: () -> Bool = { false }
    /// With `--streams`: the sender of several connections.
    private(set) var parallel: ParallelTransferSender?
    private(set) var summary: TransferSummary?
    /// With `--shard-by bytes`: what this task's shard holds of the tree.
    private(set) var shardShare: ShardShare?
    private var signal: Int32?
    /// Set when `--timeout` ends the transfer: the status and message to report.
    private var timeoutFailure: CLIError?
    private var progress: TransferProgressDisplay?
    private var watchdog: LoopTimer?
    /// With `--relay`: the connections met there (the first carried the code exchange), each
    /// taken by the transfer in turn, and the key the code gave.
    var relayed: [(ReadStream, WriteStream)] = []
    var relayKey: PreSharedKey?
    /// With `--watch`: the watch running (`SendWatch`).
    private var watch: TransferWatch?

    init(options: SendOptions, loop: EventLoop) {
        self.options = options
        self.loop = loop
    }

    /// The destination as messages name it.
    var destinationName: String {
        if let relay = options.relay { return "the receiver (through relay \(relay))" }
        if options.local { return "the receiver (on the local network)" }
        switch options.destination {
        case .tcp(let host, let port): return TransferAddress.tcp(host: host ?? "localhost", port: port).description
        case .unix(let path): return path
        }
    }

    /// The sender's resume key (`ResumeKey`), bound to the receiver's key `key` (its key
    /// file's, or its pairing code's), not to the address dialled: the same receiver under
    /// another address vouches for what it holds, and one with a new code does not (what it
    /// holds is checked with SHA-256). Nil, with a warning, when the state directory cannot
    /// hold it: held bytes are then checked with SHA-256.
    func resumeKey(for key: PreSharedKey, quiet: Bool) -> ResumeKey? {
        switch Result(catching: { () throws(SluiceError) in try ResumeKey(receiverKey: key) }) {
        case .success(let made):
            return made
        case .failure(let error):
            if !quiet {
                Terminal.report(
                    "warning: resume key: \(error.description) (a resumed file is checked with SHA-256 instead)")
            }
            return nil
        }
    }

    /// Lists the sources and starts the transfer (on the loop's thread, before it runs).
    func start() -> CLIError? {
        let sources: [TransferSource] = options.paths.map { path in
            if path == "-" { return .stream(.standardInput, name: options.streamName ?? "stdin", mode: 0o644) }
            return .path(path)
        }
        let quiet = options.quiet
        let listingWarning = { (warning: String) in
            if !quiet { Terminal.report("warning: \(PeerText.sanitized(warning))") }
        }
        let onWarning = { [weak self] (warning: String) in
            guard let self, !self.options.quiet else { return }
            self.say("warning: \(PeerText.sanitized(warning))")
        }
        let onResult = { [weak self] (result: TransferFileResult) -> Void in self?.answered(result) }
        let onRemoved = { [weak self] (path: String) -> Void in self?.removed(path) }
        var key = relayKey
        if key == nil {
            switch TransferSecurity.senderKey(options.auth) {
            case .success(let found): key = found
            case .failure(let error): return error
            }
        }
        var library = options.libraryOptions
        if let key, library.resume { library.resumeKey = resumeKey(for: key, quiet: quiet) }
        switch options.selection() {
        case .success(let selection): library.selection = selection
        case .failure(let error): return error
        }
        if options.shardByBytes, let shard = library.selection.shard {
            let start = monotonicNanoseconds()
            let balanced = Result { () throws(SluiceError) in
                try library.selection.balancedByBytes(
                    sources, options: library.sourceOptions, splitting: options.group != nil)
            }
            switch balanced {
            case .success(let (selection, share)):
                library.selection = selection
                shardShare = share
                let milliseconds = (monotonicNanoseconds() - start) / 1_000_000
                if !options.quiet {
                    let ranges = share.ranges > 0 ? " (\(share.ranges) ranges of files split across tasks)" : ""
                    say(
                        "shard \(shard) by bytes: \(share.files) of \(share.totalFiles) files\(ranges), "
                            + "\(share.bytes) of \(share.totalBytes) bytes (metadata walked in \(milliseconds) ms)")
                }
            case .failure(let error): return Self.listingFailure(error)
            }
        }
        var single: TransferSender?
        if options.watch {
            switch SendWatch.make(
                options, library: library, listingWarning: listingWarning, warning: onWarning, result: onResult,
                removed: onRemoved)
            {
            case .success(let made):
                (watch, sender, cancelTransfer) = (made, made.sender, { [weak made] in made?.sender.cancel() })
                listingIncomplete = { [weak made] in made?.sender.listingIncomplete ?? false }
            case .failure(let error): return Self.listingFailure(error)
            }
        } else if options.streams > 1 || options.group != nil {
            let created = Result { () throws(SluiceError) in
                try ParallelTransferSender(
                    sources: sources, streams: options.streams, options: library, group: options.group,
                    warning: listingWarning)
            }
            switch created {
            case .success(let made):
                made.onWarning = onWarning
                made.onFileResult = onResult
                made.onRemoved = onRemoved
                (parallel, sender, cancelTransfer) = (made, made, { [weak made] in made?.cancel() })
                listingIncomplete = { [weak made] in made?.listingIncomplete ?? false }
            case .failure(let error): return Self.listingFailure(error)
            }
        } else {
            let created = Result { () throws(SluiceError) in
                try TransferSender(sources: sources, options: library, warning: listingWarning)
            }
            switch created {
            case .success(let made):
                made.onWarning = onWarning
                made.onFileResult = onResult
                made.onRemoved = onRemoved
                (single, sender, cancelTransfer) = (made, made, { [weak made] in made?.cancel() })
                listingIncomplete = { [weak made] in made?.listingIncomplete ?? false }
            case .failure(let error): return Self.listingFailure(error)
            }
        }

        let timeout = options.timeoutSeconds.map { Duration.nanoseconds(Int64($0 * 1e9)) }
        var context: TLSContext?
        if let key {
            var settings = TLSSettings(role: .client)
            settings.preSharedKey = key
            if let timeout { settings.handshakeTimeout = timeout }
            switch Result(catching: { () throws(SluiceError) in try TLSContext(settings) }) {
            case .success(let made): context = made
            case .failure(let error): return CLIError(.ioError, "send: TLS: \(error.reason)")
            }
        } else {
            TransferSecurity.warnInsecure("send")
        }
        // Each connection, made the same way: every one runs its own TLS handshake.
        let destination = options.destination
        var relayed = relayed
        self.relayed = []
        let connect = { () -> (ReadStream, WriteStream) in
            var (input, output): (ReadStream, WriteStream)
            if !relayed.isEmpty {
                (input, output) = relayed.removeFirst()
                if let context { (input, output) = TLS.secure((input, output), context: context) }
                return (input, output)
            }
            switch destination {
            case .tcp(let host, let port):
                (input, output) = Socket.connect(host: host ?? "localhost", port: port, timeout: timeout)
            case .unix(let path): (input, output) = Socket.connect(unixPath: path, timeout: timeout)
            }
            if let context { (input, output) = TLS.secure((input, output), context: context) }
            return (input, output)
        }
        startWatchdog()
        if CopySession.showsProgress(options.progress, stderrIsTerminal: Terminal.isTerminal(2)), let sender,
            watch == nil
        {
            progress = TransferProgressDisplay(
                sender: sender, sizeKnown: !options.paths.contains("-"), output: { Terminal.write($0, to: 2) })
        }
        if let watch {
            watch.reconnect = connect
            let (input, output) = connect()
            watch.start(input: input, output: output, on: loop) { [weak self] summary in self?.finished(summary) }
        } else if let single {
            let (input, output) = connect()
            single.start(input: input, output: output, on: loop) { [weak self] summary in self?.finished(summary) }
        } else if let parallel {
            parallel.start(connect: connect, on: loop) { [weak self] summary in self?.finished(summary) }
        }
        if summary == nil { progress?.start(on: loop) }
        return nil
    }

    /// A path that cannot be listed: 66 (64 for a name the protocol cannot carry).
    static func listingFailure(_ error: SluiceError) -> CLIError {
        if error.code == .invalidArgument { return CLIError(.usage, CLIError.message(for: error)) }
        let subject = error.subject ?? "send"
        return CLIError(.noInput, "\(subject): \(error.reason)")
    }

    private func answered(_ result: TransferFileResult) {
        // The path made safe to print only for a line that prints it.
        var path: String { PeerText.sanitized(result.path) }
        switch result.outcome {
        case .stored:
            if options.itemize, let line = TransferText.itemized(result) {
                progress?.clearLine()
                Terminal.write(line + "\n", to: 1)
            }
        case .refused(let reason):
            var line = "\(path): refused by receiver: \(PeerText.sanitized(reason))"
            if reason == "exists" { line += " (use --overwrite on the receiver)" }
            say(line)
        case .failed(let reason, _):
            say("\(path): failed: \(PeerText.sanitized(reason))")
        }
    }

    /// `--delete` removed `path` (or would, on a dry run): rsync's `*deleting` line with
    /// `--itemize`.
    private func removed(_ path: String) {
        guard options.itemize else { return }
        progress?.clearLine()
        Terminal.write("*deleting   \(PeerText.sanitized(path))\n", to: 1)
    }

    /// One line on stderr, clearing the progress line first.
    private func say(_ message: String) {
        progress?.clearLine()
        Terminal.report(message)
    }

    private func startWatchdog() {
        guard let limit = options.timeoutSeconds, !options.watch else { return }
        let tick = Duration.milliseconds(Int64(min(1000, max(10, limit * 250))))
        var last: UInt64 = 0
        var lastChange = monotonicNanoseconds()
        watchdog = loop.schedule(after: tick, repeating: tick) { [weak self] in
            guard let self, self.summary == nil, let sender = self.sender else { return }
            let now = monotonicNanoseconds()
            let progress = sender.progress
            let activity = progress.bytesSent &+ progress.bytesDone &+ UInt64(progress.filesDone)
            if activity != last {
                last = activity
                lastChange = now
                return
            }
            guard Double(now - lastChange) / 1e9 >= limit, self.timeoutFailure == nil else { return }
            let seconds = Format.seconds(limit)
            if progress.bytesSent == 0 {
                self.timeoutFailure = CLIError(
                    .unavailable, "connect \(self.destinationName): timed out after \(seconds) s")
            } else {
                self.timeoutFailure = CLIError(
                    .ioError, "send to \(self.destinationName): timed out (nothing moved for \(seconds) s)")
            }
            self.cancelTransfer?()
        }
    }

    /// SIGINT, SIGTERM or SIGHUP: stop sending; the receiver keeps what it has for a resume.
    func interrupt(_ signal: Int32) {
        // A watch ends on a signal: what is in flight is answered, then goodbye (a second stops at once).
        if let watch, summary == nil, !watch.stopping { return watch.stop() }
        guard summary == nil, self.signal == nil else { return }
        self.signal = signal
        cancelTransfer?()
    }

    private func finished(_ summary: TransferSummary) {
        self.summary = summary
        watchdog?.cancel()
        watchdog = nil
        progress?.finish(summary)
        progress = nil
        loop.stop()
    }

    /// The exit status and, for a failure of the whole transfer, its one-line message.
    func outcome(of summary: TransferSummary) -> CLIError {
        if let signal {
            let stopped = ExitStatus.stopped(by: signal)
            return CLIError(stopped.status, "send to \(destinationName): \(stopped.word)")
        }
        if let timeoutFailure { return timeoutFailure }
        guard let error = summary.error else {
            let status = TransferStatus.status(results: summary.results, connectionError: nil)
            // Something not listed (and so not sent) is missing input when nothing else failed.
            if status == .ok && listingIncomplete() { return CLIError(.noInput, "") }
            // A directory not pruned (--delete) fails the transfer when nothing else did: 73 when
            // the receiver refused (it does not allow removing), else an input/output failure.
            if status == .ok && !summary.pruneFailures.isEmpty {
                return CLIError(summary.pruneRefused ? .cannotCreate : .ioError, "")
            }
            return CLIError(status, "")
        }
        let connected = summary.bytesSent > 0 && !["connect", "resolve"].contains(error.operation)
        let status = TransferStatus.status(connection: error, connected: connected)
        // It may quote the receiver's ERROR.
        let description = PeerText.sanitized(error.description)
        let message: String
        if ["connect", "resolve", "send"].contains(error.operation) {
            message = description
        } else if error.operation == "TLS handshake" && error.code == .unavailable {
            // A receiver turns a connection away before TLS when it serves --max-sessions
            // senders, or when this address failed to authenticate too often.
            message =
                "send to \(destinationName): \(description) (the receiver may be serving all the senders "
                + "it allows, or refusing this address after failed attempts); try again later"
        } else {
            message = "send to \(destinationName): \(description)"
        }
        return CLIError(TransferStatus.status(results: summary.results, connectionError: status), message)
    }

    // MARK: Running

    static func run(_ options: SendOptions) -> ExitStatus {
        var options = options
        var met: (Rendezvous, [(ReadStream, WriteStream)])?
        if options.relay != nil || options.local {
            // Before signals are routed: an interrupt while waiting ends the command at once.
            switch meetAtRelay(options) {
            case .success(let meeting):
                met = meeting
                options.streams = meeting.1.count
            case .failure(let failure):
                Terminal.report(failure.message)
                return failure.status
            }
        }
        guard let loop = makeCommandLoop() else { return .ioError }
        let session = SendSession(options: options, loop: loop)
        if let (rendezvous, pairs) = met {
            session.relayed = pairs
            session.relayKey = rendezvous.key.preSharedKey
        }
        SignalWatcher.shared.route(to: session, on: loop)
        if let failure = session.start() {
            SignalWatcher.shared.setHandler(nil)
            Terminal.report(failure.message)
            return failure.status
        }
        if session.summary == nil { loop.run() }
        SignalWatcher.shared.setHandler(nil)
        guard let summary = session.summary else {
            Terminal.report("send: the event loop ran out of work before the transfer ended (a bug)")
            return .ioError
        }
        let outcome = session.outcome(of: summary)
        if !outcome.message.isEmpty { Terminal.report(outcome.message) }
        if let format = options.stats {
            let streams = session.parallel.map { Array($0.bytesPerStream.prefix($0.streamsUsed)) }
            let report = SendStatsReport(
                summary: summary, destination: session.destinationName, options: options, streamBytes: streams,
                share: session.shardShare)
            Terminal.write(format == .json ? report.json + "\n" : report.text, to: 2)
        }
        return outcome.status
    }
}
