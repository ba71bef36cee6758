import Sluice
import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// `sluice receive [options]`.
enum ReceiveCommand: Command {
    static let name = "receive"
    static let summary = "receive files from sluice send into a directory"
    static var parser: ArgumentParser { ReceiveOptions.parser }

    static var help: String {
        """
        Usage: sluice receive [options]
               sluice receive [--relay HOST[:PORT]] [options] CODE

        Listen for 'sluice send' and store what is sent under DIR, serving any
        number of senders at once, until interrupted (or, with --once, after one
        sender). Each file is written under a temporary name, its digest
        (XXH3-128 or SHA-256) checked, and renamed into place only when
        complete. By default only new entries are stored: an existing one is
        replaced only with --sync (what differs from the sender's) or
        --overwrite (anything), and removed only with --delete; nothing is
        changed outside DIR.
        An interrupted file is kept (hidden, as .NAME.sluice-part) and continued
        when it is sent again. Prints the address it listens on, then a line per
        file stored, refused or failed.
        With a CODE (printed by 'sluice send --relay'), nothing listens: the
        receiver meets the sender through the relay (--relay, or
        $SLUICE_RELAY; without one, it finds the sender's announcement on
        the local network), checks the code with SPAKE2, and receives one
        transfer over TLS 1.3 as with --once.

        Options:
        \(ReceiveOptions.parser.helpLines().joined(separator: "\n"))

        Exit status:
          0 every file stored (--once); 64 usage error; 65 a file failed its
          integrity check (--once); 69 cannot listen on the address; 73 DIR
          missing or not writable, or a file refused (--once); 74 input/output
          error or connection lost (--once); 77 the CODE was wrong, or
          someone else used it first; 129 hung up (SIGHUP);
          130 interrupted (SIGINT); 143 terminated (SIGTERM)

        """
    }

    static func run(_ parsed: ParsedArguments) -> ExitStatus {
        let options: ReceiveOptions
        do {
            options = try ReceiveOptions(parsed)
        } catch {
            Terminal.report(error.message)
            return .usage
        }
        return ReceiveSession.run(options)
    }
}

/// One run of `sluice receive`: a listener and a `TransferReceiver` on one event loop.
final class ReceiveSession: Interruptible {
    let options: ReceiveOptions
    let loop: EventLoop
    private var receiver: TransferReceiver?
    private var listener: SocketListener?
    private var signal: Int32?
    private(set) var status: ExitStatus?
    /// Failures to accept (out of descriptors): the first is reported, its repeats counted.
    private var acceptFailures = RepeatedFailureLog(operation: "accepting connections")
    private(set) var stats: ReceiveStatsReport
    private let started = monotonicNanoseconds()
    /// `receive CODE`: the connections met at the relay (the first carried the code
    /// exchange), and the key the code gave.
    var relayed: [(ReadStream, WriteStream)] = []
    var relayKey: PreSharedKey?
    /// Whether those connections go straight to the sender (else through the relay).
    var relayDirect = false

    init(options: ReceiveOptions, loop: EventLoop) {
        self.options = options
        self.loop = loop
        stats = ReceiveStatsReport(directory: options.directory, address: options.listen.description)
    }

    /// Descriptors a session may hold (its socket, the file it writes, the partial it resumes,
    /// a directory), and those the process holds anyway (the loop, its workers, standard I/O).
    static let descriptorsPerSession = 4
    /// Besides the loop, its workers and standard I/O: the files sessions set aside to be
    /// flushed in batches (two descriptors each, a budget's worth being committed while
    /// another is set aside).
    static let descriptorsBesides = 64 + 4 * TransferReceiver.stagedBudget

    /// Connections waiting to authenticate, at most (each holds its socket): fewer where the
    /// open-file limit cannot make room for them beside the sessions.
    static let pendingConnections = 1024

    /// Opens the directory and starts listening (on the loop's thread, before it runs).
    func start() -> CLIError? {
        let wanted = options.maxSessions * Self.descriptorsPerSession + Self.descriptorsBesides
        let limit = OpenFileLimit.raise(to: wanted + Self.pendingConnections)
        let pendingRoom = min(Self.pendingConnections, max(16, (limit ?? Int.max) - wanted))
        if let limit, limit < wanted {
            Terminal.report(
                "warning: --max-sessions \(options.maxSessions) needs up to \(wanted) open files and this process "
                    + "may have \(limit) (ulimit -n): connections beyond that wait until others end")
        }
        let opened = Result { () throws(SluiceError) in
            try TransferReceiver(directory: options.directory, options: options.libraryOptions)
        }
        let receiver: TransferReceiver
        switch opened {
        case .success(let made): receiver = made
        case .failure(let error):
            return CLIError(
                CLIError.status(for: error, during: .creatingDestination),
                "receive into \(options.directory): \(error.reason)")
        }
        self.receiver = receiver
        receiver.maxPendingConnections = pendingRoom
        receiver.servesOneTransfer = options.once
        receiver.onEvent = { [weak self] event in self?.event(event) }
        receiver.onSessionEnd = { [weak self] report in self?.sessionEnded(report) }
        if let relayKey { return serveRelayed(receiver, key: relayKey, relay: options.relay) }

        let listening = Result { () throws(SluiceError) -> SocketListener in
            switch options.listen {
            case .tcp(let host, let port): return try Socket.listen(host: host, port: port)
            case .unix(let path): return try Socket.listen(unixPath: path)
            }
        }
        let listener: SocketListener
        switch listening {
        case .success(let made): listener = made
        case .failure(let error):
            let status: ExitStatus = error.code == .invalidArgument ? .usage : .unavailable
            return CLIError(status, "listen on \(options.listen): \(error.reason)")
        }
        self.listener = listener
        listener.errorHandler = { [weak self] error in self?.acceptFailures.failed("warning: \(error.description)") }
        let key: (PreSharedKey, PairingCode?)?
        switch TransferSecurity.receiverKey(options.auth) {
        case .success(let found): key = found
        case .failure(let error):
            listener.close()
            return error
        }
        if let (_, code) = key, code != nil {
            // A code serves its transfers, then the next one is printed (with --once the
            // receiver stops after its transfer instead).
            receiver.transfersPerKey = options.codeUses
            receiver.onKeyUsedUp = { [weak self] in self?.nextCode() }
        }
        let accepted = Result { () throws(SluiceError) in
            if let (psk, _) = key { try receiver.useTLS(preSharedKey: psk) }
            try listener.accept(on: loop) { [weak self] input, output, peer in
                self?.accepted(input, output, peer)
            }
        }
        if case .failure(let error) = accepted {
            listener.close()
            return CLIError(.unavailable, "listen on \(options.listen): \(error.reason)")
        }
        let address: String
        switch options.listen {
        case .unix(let path): address = "unix:\(path)"
        case .tcp: address = listener.address.description
        }
        stats.address = address
        if !options.quiet {
            Terminal.report("receiving into \(options.directory) on \(address)")
        }
        if key == nil { TransferSecurity.warnInsecure("receive") }
        // The code is shown even with --quiet: without it no sender can connect.
        if let code = key?.1 { Terminal.report("code: \(code)") }
        return nil
    }

    /// The code has served its transfers: a new one, printed as the first was.
    private func nextCode() -> PreSharedKey? {
        guard !options.once, status == nil else { return nil }
        flushLines()  // the transfer's lines come before the next code
        guard case .success(let made) = TransferSecurity.receiverKey(.code(file: nil)), let (key, code) = made,
            let code
        else {
            Terminal.report("warning: no new pairing code (no random bytes): no more transfers are served")
            return nil
        }
        Terminal.report("code: \(code)")
        return key
    }

    private func accepted(_ input: ReadStream, _ output: WriteStream, _ peer: SocketAddress) {
        acceptFailures.succeeded()
        guard let receiver, status == nil else {
            Self.refuse(input, output)
            return
        }
        let id = receiver.serve(input: input, output: output, from: peer, on: loop)
        guard options.once, let id else { return }
        onceServed.insert(id)
    }

    /// With `--once`: sessions served (the transfer's, and strangers: those that never got
    /// past their handshake or were turned away), and the reports of the transfer's sessions.
    /// The transfer's first session is the receiver's `onlyTransferOfSession`: the first to
    /// ask for something, so a port scan or a wrong key before the sender does not end it.
    private var onceServed: Set<Int> = []
    private var onceReports: [TransferSessionReport] = []
    private var onlySessionEnded = false

    /// `--once`: the transfer's sessions have all ended: the status is theirs.
    private func onceSessionEnded(_ report: TransferSessionReport) {
        guard let receiver else { return }
        onceServed.remove(report.id)
        guard let only = receiver.onlyTransferOfSession else { return }
        if report.id == only || report.streamIndex != nil { onceReports.append(report) }
        if report.id == only { onlySessionEnded = true }
        guard onlySessionEnded, !onceServed.contains(where: receiver.isInTransfer), status == nil else { return }
        listener?.close()
        let failure = onceReports.lazy.compactMap(\.error).first
        let connectionError: ExitStatus? = failure.map { $0.code == .authenticationFailed ? .notPermitted : .ioError }
        var tally = TransferTally()
        for report in onceReports { tally.add(report.tally) }
        status = TransferStatus.status(tally: tally, connectionError: connectionError)
        loop.stop()
    }

    /// `receive CODE`: serves the connections met at `relay` (or on the local network) as one
    /// transfer, with `key`.
    private func serveRelayed(_ receiver: TransferReceiver, key: PreSharedKey, relay: RelayEndpoint?) -> CLIError? {
        receiver.servesOneTransfer = true
        do {
            try receiver.useTLS(preSharedKey: key)
        } catch {
            return CLIError(.ioError, "receive: TLS: \(error.reason)")
        }
        let met = relay.map { "met at relay \($0)" } ?? "found on the local network"
        let address = relayDirect ? "the sender, directly (\(met))" : "relay \(relay?.description ?? "")"
        stats.address = address
        if !options.quiet {
            Terminal.report("receiving into \(options.directory) \(relayDirect ? "from" : "through") \(address)")
        }
        for (input, output) in relayed {
            guard let id = receiver.serve(input: input, output: output, metAt: address, on: loop) else { continue }
            onceServed.insert(id)
        }
        relayed = []
        return nil
    }

    /// Closes a connection that is not served (a second sender with `--once`).
    private static func refuse(_ input: ReadStream, _ output: WriteStream) {
        input.open()
        output.open()
        input.close()
        output.close()
    }

    /// Refusals and failures logged per session before the rest are only counted: one peer
    /// cannot flood the log.
    static let problemLinesPerSession = 5
    /// Per session: problem lines shown, and those left out.
    private var problems: [Int: (shown: Int, omitted: Int)] = [:]

    /// Lines about files and sessions gathered during a turn of the loop and written together
    /// at its end (or once 16 KiB wait): one write for a run of small files, not one each.
    private var pendingLines = ""
    private var linesTimer: LoopTimer?

    private func log(_ message: String) {
        pendingLines += "sluice: \(message)\n"
        if pendingLines.utf8.count >= 16 << 10 { return flushLines() }
        guard linesTimer == nil else { return }
        linesTimer = loop.schedule(after: .zero) { [weak self] in
            self?.linesTimer = nil
            self?.flushLines()
        }
    }

    /// Writes the lines gathered so far.
    func flushLines() {
        linesTimer?.cancel()
        linesTimer = nil
        guard !pendingLines.isEmpty else { return }
        Terminal.write(pendingLines, to: 2)
        pendingLines = ""
    }

    private func event(_ event: TransferReceiverEvent) {
        guard !options.quiet else { return }
        switch event {
        case .sessionStarted:
            break
        case .removed(_, let path):
            log("removed \(PeerText.sanitized(path)) (the sender's --delete)")
        case .entry(let session, let result):
            let path = PeerText.sanitized(result.path)
            let line: String
            switch result.outcome {
            case .stored:
                if !result.isDirectory && !result.rangeOnly {
                    log("stored \(path) (\(TransferText.size(result)))")
                }
                return
            case .refused(let reason):
                line = "refused \(path): \(PeerText.sanitized(reason))"
            case .failed(let reason, _):
                line = "failed \(path): \(PeerText.sanitized(reason))"
            }
            var count = problems[session] ?? (0, 0)
            if count.shown < Self.problemLinesPerSession {
                count.shown += 1
                log(line)
            } else {
                count.omitted += 1
            }
            problems[session] = count
        case .warning(_, let text):
            log("warning: \(PeerText.sanitized(text))")
        }
    }

    private func sessionEnded(_ report: TransferSessionReport) {
        stats.add(report)
        if let count = problems.removeValue(forKey: report.id), count.omitted > 0, !options.quiet {
            let peer = PeerText.sanitized(report.peer)
            log("… and \(count.omitted) more refused or failed from \(peer)")
        }
        guard signal == nil else { return }
        if let error = report.error {
            log(PeerText.sanitized(error.description))
        }
        if options.once { onceSessionEnded(report) }
    }

    /// SIGINT, SIGTERM or SIGHUP: stop listening and end every session; partial files stay for a
    /// resume.
    func interrupt(_ signal: Int32) {
        guard self.signal == nil else { return }
        self.signal = signal
        listener?.close()
        receiver?.closeAllSessions()
        status = ExitStatus.stopped(by: signal).status
        loop.stop()
    }

    // MARK: Running

    static func run(_ options: ReceiveOptions) -> ExitStatus {
        var met: (Rendezvous, [(ReadStream, WriteStream)])?
        if options.code != nil {
            // Before signals are routed: an interrupt while meeting ends the command at once.
            switch meetAtRelay(options) {
            case .success(let meeting): met = meeting
            case .failure(let failure):
                Terminal.report(failure.message)
                return failure.status
            }
        }
        guard let loop = makeCommandLoop() else { return .ioError }
        let session = ReceiveSession(options: options, loop: loop)
        if let (rendezvous, pairs) = met {
            session.relayed = pairs
            session.relayKey = rendezvous.key.preSharedKey
            session.relayDirect = rendezvous.direct
        }
        SignalWatcher.shared.route(to: session, on: loop)
        if let failure = session.start() {
            SignalWatcher.shared.setHandler(nil)
            Terminal.report(failure.message)
            return failure.status
        }
        loop.run()
        session.flushLines()
        SignalWatcher.shared.setHandler(nil)
        session.listener?.close()
        session.receiver?.finishDiskWork()
        guard let status = session.status else {
            Terminal.report("receive: the event loop ran out of work (a bug)")
            return .ioError
        }
        if let signal = session.signal {
            Terminal.report("receive into \(options.directory): \(ExitStatus.stopped(by: signal).word)")
        }
        if let format = options.stats {
            var stats = session.stats
            stats.seconds = Double(monotonicNanoseconds() - session.started) / 1e9
            Terminal.write(format == .json ? stats.json + "\n" : stats.text, to: 2)
        }
        return status
    }
}
