import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// Receives files and directories sent by `TransferSender`s into one directory, serving any
/// number of connections at once on one `EventLoop`, one session per connection.
///
/// ```swift
/// let receiver = try TransferReceiver(directory: "/srv/in", options: TransferReceiveOptions())
/// receiver.onSessionEnd = { report in print(report.peer, report.files, report.error as Any) }
/// let listener = try Socket.listen(port: 9000)
/// try receiver.accept(from: listener, on: loop)
/// loop.run()
/// ```
///
/// Each file is written under a temporary name next to its final name (`.NAME.sluice-part`),
/// its SHA-256 checked against the sender's, flushed (`fsync`), given the sender's mode and
/// mtime (`fchmod`, `futimens`; the mode less the umask unless `keepsModes`, and never
/// setuid, setgid or sticky), and renamed into place atomically — never replacing an
/// existing file unless `overwrite` is set (`renameat2(RENAME_NOREPLACE)`). Paths are walked
/// from a descriptor of the directory one component at a time without following links, so
/// nothing is ever written outside it. A connection that breaks the protocol, sends garbage
/// or goes silent ends alone; the others go on.
///
/// The loop's thread never waits and never touches a file's data: it parses and lends the
/// received bytes to the session's worker on `WorkerPool.shared`, which decompresses, writes
/// and hashes them in order, and directory creation, opening, flushing and renaming run on a
/// pool of disk workers; while one of those is in progress
/// for a session, that session stops reading its socket (its sender is held by TCP), and the
/// other sessions and their timers go on.
///
/// An interrupted file keeps its data under the temporary name, marked with the file's size
/// and mtime in the extended attribute `user.sluice.resume`; when the same file is sent
/// again, the receiver answers with the length held and the sender sends the rest. The
/// SHA-256 covers the whole file, held prefix included, so altered partial data is detected.
public final class TransferReceiver {
    /// The directory files are stored in, as given.
    public let directory: String
    public let options: TransferReceiveOptions
    /// Called when a connection ends, with what it did.
    public var onSessionEnd: ((TransferSessionReport) -> Void)?
    /// Called as sessions start, entries are answered, and on warnings.
    public var onEvent: ((TransferReceiverEvent) -> Void)?

    let store: ReceiverStore
    private var sessions: [Int: ReceiverSession] = [:]
    /// Sessions receiving a file now: with more than one, sessions hand their writes to
    /// workers rather than make the others wait while they write.
    var filesReceiving = 0
    /// Files set aside by sessions to be flushed and renamed in batches (each holds two
    /// descriptors): past `stagedBudget` between them, a session commits its batch at once.
    var filesStaged = 0
    /// The most files the receiver's sessions set aside between them before committing, with
    /// `TransferReceiveOptions.fsync`: each holds two descriptors until its batch is renamed.
    public static let stagedBudget = 1024
    /// Pieces of data handed to workers to write, since the start (for tests and statistics).
    var piecesLent: UInt64 = 0
    private var nextID = 1
    /// Connections turned away because `maxSessions` were being served.
    public private(set) var connectionsRefused = 0

    /// A receiver storing into `directory`, which must exist. Throws when it cannot be opened
    /// (`open "/srv/in": No such file or directory (errno 2)`).
    public init(directory: String, options: TransferReceiveOptions = TransferReceiveOptions()) throws(SluiceError) {
        self.directory = directory
        self.options = options
        let permissions = Destination.permissionBits(
            keepingModes: options.keepsModes, umask: options.umask ?? FileCreationMask.current())
        store = ReceiverStore(destination: try Destination(path: directory, permissionBits: permissions))
    }

    /// Sessions in progress: connections admitted (past their TLS handshake and HELLO), each
    /// holding one of `maxSessions` slots.
    public var activeSessions: Int { sessions.values.filter { $0.isAdmitted && !$0.isEnded }.count }

    /// Connections waiting to be admitted: their TLS handshake or their HELLO not yet done.
    /// They hold no session slot; they wait apart, at most `maxPendingConnections` of them and
    /// `maxPendingPerAddress` from one address (an IPv6 /64 counting as one), each for at most
    /// `handshakeTimeout`. A connection past either cap pushes out the oldest waiting one (of
    /// its own address, or of the address with the most waiting), never itself: strangers who
    /// connect and say nothing cannot keep a sender out.
    public var pendingConnections: Int { sessions.values.filter { !$0.isAdmitted && !$0.isEnded }.count }
    /// The most connections waiting to be admitted at once.
    public var maxPendingConnections = 1024
    /// The most connections from one address waiting to be admitted at once (by default
    /// `maxSessions`, and at least 8: a host opening all the connections it may use at once
    /// is not held back).
    public lazy var maxPendingPerAddress = max(8, options.maxSessions)
    /// Waiting connections pushed out by newer ones, since the start.
    public private(set) var pendingDropped = 0
    /// The size of each open session's inbound buffer, in the order the sessions began (for
    /// tests and statistics).
    var inboundCapacities: [Int] {
        sessions.sorted { $0.key < $1.key }.filter { !$0.value.isEnded }.map(\.value.connection.inbound.capacity)
    }

    /// Serves every connection `listener` accepts on `loop`, in plaintext.
    public func accept(from listener: SocketListener, on loop: EventLoop) throws(SluiceError) {
        try listener.accept(on: loop) { [weak self] input, output, peer in
            self?.serve(input: input, output: output, from: peer, on: loop)
        }
    }

    /// Failed authentications per address (see `accept(from:on:preSharedKey:)`).
    public var throttle = HandshakeLimiter()
    /// Connections closed unanswered because their address failed to authenticate too often.
    public private(set) var connectionsThrottled = 0
    private var tlsContext: TLSContext?

    /// Serves every connection `listener` accepts on `loop` over TLS 1.3 with the external
    /// pre-shared key `key` (see `useTLS(preSharedKey:)`).
    public func accept(from listener: SocketListener, on loop: EventLoop, preSharedKey key: PreSharedKey)
        throws(SluiceError)
    {
        try useTLS(preSharedKey: key)
        try listener.accept(on: loop) { [weak self] input, output, peer in
            self?.serve(input: input, output: output, from: peer, on: loop)
        }
    }

    /// From now on, `serve(input:output:from:on:)` secures each connection with TLS 1.3 and the
    /// external pre-shared key `key` (`psk_dhe_ke`: an ephemeral key exchange too, for forward
    /// secrecy), this receiver being the TLS server. A peer without the key fails the
    /// handshake: no message of the transfer protocol is read from it or sent to it. A
    /// handshake must be done within `handshakeTimeout` (or the idle timeout, if shorter). An
    /// address whose handshakes fail or time out `throttle.maximumFailures` times within
    /// `throttle.window` has its connections closed at once until the window passes, so that a
    /// peer without the key can neither guess it at speed nor keep the sessions busy with
    /// connections that never finish a handshake.
    public func useTLS(preSharedKey key: PreSharedKey) throws(SluiceError) {
        var settings = TLSSettings(role: .server)
        settings.preSharedKey = key
        settings.handshakeTimeout = min(Self.handshakeTimeout, options.idleTimeout ?? Self.handshakeTimeout)
        tlsContext = try TLSContext(settings)
    }

    /// How long a connection has to finish its TLS handshake: one round trip for a sender with
    /// the key, so a connection still silent after this long is not one.
    public static let handshakeTimeout: Duration = .seconds(10)

    /// Serves one accepted connection from `peer`: over TLS after `useTLS(preSharedKey:)`,
    /// else in plaintext. Returns the session's id, or nil when the connection was turned away
    /// (over TLS, an address that failed to authenticate too often: it is closed without a
    /// word, since no key has been checked). The connection waits to be admitted as
    /// `pendingConnections` describes; once admitted beyond `maxSessions` it is told `busy`.
    @discardableResult
    public func serve(input: ReadStream, output: WriteStream, from peer: SocketAddress, on loop: EventLoop) -> Int? {
        let address = HandshakeLimiter.key(for: peer)
        guard let context = tlsContext else {
            return serve(input: input, output: output, peer: peer.description, on: loop, address: address)
        }
        guard throttle.allows(address) else {
            connectionsThrottled += 1
            // Before TLS there is no way to say why: the connection is closed (what the peer
            // already sent is read first, so that closing does not reset it).
            Self.turnAway(input, output)
            return nil
        }
        let (reader, writer) = TLS.secure((input, output), context: context)
        return serve(input: reader, output: writer, peer: peer.description, on: loop, address: address)
    }

    /// Serves one connection given as its two streams (opened here if not yet open), `peer`
    /// naming it and counting as its address. Returns the session's id. Once it has said
    /// HELLO beyond `maxSessions` sessions, the peer is told `busy` in an ERROR message and
    /// the connection closed.
    @discardableResult
    public func serve(input: ReadStream, output: WriteStream, peer: String, on loop: EventLoop) -> Int? {
        serve(input: input, output: output, peer: peer, on: loop, address: peer)
    }

    /// Serves a connection this receiver made itself rather than accepted (one met through a
    /// relay, `peer` naming it): over TLS after `useTLS(preSharedKey:)`, else in plaintext, as
    /// `serve(input:output:from:on:)` does, without its throttle (the peer has no address of
    /// its own to throttle). Returns the session's id.
    @discardableResult
    public func serve(input: ReadStream, output: WriteStream, metAt peer: String, on loop: EventLoop) -> Int? {
        guard let context = tlsContext else { return serve(input: input, output: output, peer: peer, on: loop) }
        let (reader, writer) = TLS.secure((input, output), context: context)
        return serve(input: reader, output: writer, peer: peer, on: loop, address: peer)
    }

    /// The address (`HandshakeLimiter.key(for:)`) of each session, for the throttle over TLS and
    /// for the caps of waiting connections.
    private var addresses: [Int: String] = [:]

    private func serve(input: ReadStream, output: WriteStream, peer: String, on loop: EventLoop, address: String)
        -> Int?
    {
        guard makeRoomToWait(for: address) else {
            pendingDropped += 1
            Self.turnAway(input, output)
            return nil
        }
        let id = nextID
        nextID += 1
        let session = ReceiverSession(
            id: id, peer: peer, receiver: self, input: input, output: output, loop: loop,
            admissionDeadline: admissionDeadline)
        sessions[id] = session
        addresses[id] = address
        generationOfSession[id] = keyGeneration
        onEvent?(.sessionStarted(id: id, peer: peer))
        session.start()
        return id
    }

    /// How long a connection may wait to be admitted: `handshakeTimeout`, or the idle timeout
    /// if shorter.
    private var admissionDeadline: Duration {
        min(Self.handshakeTimeout, options.idleTimeout ?? Self.handshakeTimeout)
    }

    /// A waiting connection younger than this is not pushed out by a newer one: a sender
    /// authenticates within a round trip or two, and a host opening many connections at once
    /// (accepted together, before any of them is read) is not a flood.
    public var admissionGrace: Duration = .seconds(1)

    /// A connection from `address` is about to wait: `AdmissionPolicy` with this receiver's
    /// caps and grace decides whether it may, and which waiting connection it pushes out.
    /// Returns whether the newcomer may wait.
    private func makeRoomToWait(for address: String) -> Bool {
        let policy = AdmissionPolicy(
            maximumWaiting: maxPendingConnections, maximumPerAddress: maxPendingPerAddress, grace: admissionGrace)
        let waiting = sessions.values.filter { !$0.isAdmitted && !$0.isEnded }.map {
            AdmissionPolicy.Waiting(id: $0.id, address: addresses[$0.id] ?? "", since: $0.started)
        }
        switch policy.admit(from: address, among: waiting, at: monotonicNanoseconds()) {
        case .wait:
            return true
        case .refuse:
            return false
        case .waitDropping(let id):
            pendingDropped += 1
            guard let oldest = sessions[id] else { return true }
            oldest.dropWhileWaiting(
                SluiceError(
                    .unavailable, operation: "receive", subject: oldest.peer,
                    detail: "dropped before it authenticated: newer connections were waiting"))
            return true
        }
    }

    /// Session `id` said HELLO: admitted, or the reason to turn it away (all `maxSessions`
    /// slots are taken).
    func admit(_ id: Int) -> String? {
        let others = sessions.values.filter { $0.isAdmitted && !$0.isEnded && $0.id != id }.count
        guard others >= options.maxSessions else { return nil }
        connectionsRefused += 1
        return "\(Wire.busyPrefix) this receiver serves \(options.maxSessions) sessions at once; try again later"
    }

    /// Turns a connection away unanswered: what the peer already sent is drained so that
    /// closing does not reset the connection.
    private static func turnAway(_ input: ReadStream, _ output: WriteStream) {
        if output.streamStatus == .notOpen { output.open() }
        if input.streamStatus == .notOpen { input.open() }
        output.close()
        var sink = [UInt8](repeating: 0, count: 4096)
        var drained = 0
        while drained < 65536, input.streamStatus == .open, input.hasBytesAvailable {
            let n = sink.withUnsafeMutableBufferPointer { input.read($0.baseAddress!, maxLength: $0.count) }
            if n <= 0 { break }
            drained += n
        }
        input.close()
    }

    /// Waits until the disk work that ended sessions left queued is done: abandoned files closed
    /// and removed, or kept for a resume with their unused reserved blocks given back. Call once
    /// the loop has stopped, before the process exits; the receiver stores nothing afterwards.
    public func finishDiskWork() {
        expireTaskGroups(all: true)
        store.handingOn.wait()
        store.pool.shutdown()
    }

    // MARK: Transfers over several connections

    /// Transfers of several connections in progress, by id; and the transfer of each session
    /// that joined one.
    private var groups: [[UInt8]: TransferGroup] = [:]
    private var groupOfSession: [Int: TransferGroup] = [:]

    /// Serve one transfer only (`receive --once`): the first session to get past its handshake
    /// and HELLO and ask for something (a file, a directory, JOIN or BYE) becomes
    /// `onlyTransferOfSession`; from then on every other session must join that session's
    /// transfer (`JOIN` with its transfer id) and is refused otherwise. A connection that never
    /// gets that far (a port scan, a wrong key) is served and ends as any other, and claims
    /// nothing.
    public var servesOneTransfer = false

    /// When set, every other session must join the transfer that session `id` started and is
    /// refused otherwise; set by the first session's first request when `servesOneTransfer`.
    public var onlyTransferOfSession: Int?

    // MARK: Keys that serve a number of transfers

    /// With a key from a one-time pairing code: how many transfers it serves (all their
    /// connections) before it expires; nil, any number. A session authenticated by it that
    /// starts one more transfer, or by an expired key, is told so (`code expired: …` in an
    /// ERROR: its sender exits as for a failed authentication). Once the key has served its
    /// transfers and they have all ended, `onKeyUsedUp` is called for the next key.
    public var transfersPerKey: Int?
    /// Called when the key has served `transfersPerKey` transfers and they have ended: the key
    /// to serve with from now on (the receiver makes a new TLS context with it), or nil to
    /// serve none (every session is then told its code has expired).
    public var onKeyUsedUp: (() -> PreSharedKey?)?
    /// Bumped each time the key changes; each session is marked with the one it was accepted under.
    private var keyGeneration = 0
    private var generationOfSession: [Int: Int] = [:]
    /// Transfers started with the current key.
    private var transfersOnKey = 0
    /// Transfers on the current key not yet over: their first session, and the transfer id of
    /// those over several connections.
    private var liveTransfers: [Int: [UInt8]?] = [:]
    /// The key has served its transfers and no next one came: every session is told so.
    private var keyRetired = false

    /// Session `id` is about to make its first request (`join`: a JOIN, else it starts a
    /// transfer of its own): nil when it may, else the reason to turn it away.
    func claimKey(session id: Int, join: TransferJoin?) -> String? {
        guard let limit = transfersPerKey else { return nil }
        guard generationOfSession[id] == keyGeneration, !keyRetired else {
            return "\(Wire.expiredPrefix) the pairing code this connection used has expired; "
                + "ask the receiver for its new one"
        }
        if let join, join.index > 0 { return nil }
        // A task group is one transfer, however many tasks join it.
        if let join, join.group != nil, groups[join.id]?.isTaskGroup == true { return nil }
        guard transfersOnKey < limit else {
            let served = limit == 1 ? "transfer" : "\(limit) transfers"
            return "\(Wire.expiredPrefix) this pairing code has served its \(served); ask the receiver for its new one"
        }
        transfersOnKey += 1
        liveTransfers[id] = join?.id
        return nil
    }

    /// A session ended: if that ended the last transfer the used-up key served, on to the next.
    private func settleKey() {
        for (head, group) in liveTransfers where sessions[head].map({ $0.isEnded }) ?? true {
            if let group, groups[group] != nil { continue }
            liveTransfers[head] = nil
        }
        guard let limit = transfersPerKey, transfersOnKey >= limit, liveTransfers.isEmpty else { return }
        keyGeneration += 1
        transfersOnKey = 0
        guard let key = onKeyUsedUp?() else {
            keyRetired = true
            return
        }
        do {
            try useTLS(preSharedKey: key)
        } catch {
            keyRetired = true
            emit(.warning(sessionID: 0, "no TLS context for the next key: \(error.description)"))
        }
    }

    /// Session `id` is about to make its first request: whether it must join another's
    /// transfer (claiming the one transfer served if none has been yet).
    func mustJoin(_ id: Int) -> Bool {
        if servesOneTransfer && onlyTransferOfSession == nil { onlyTransferOfSession = id }
        return onlyTransferOfSession.map { $0 != id } ?? false
    }

    /// True while session `id` is part of a transfer over several connections.
    public func isInTransfer(_ id: Int) -> Bool { groupOfSession[id] != nil }

    /// Session `session` asks to join (or, as index 0, create) transfer `join.id`: the
    /// transfer, or why not (the text goes to the peer in ERROR).
    func join(_ join: TransferJoin, session: Int) -> Result<TransferGroup, JoinRefusal> {
        if let only = onlyTransferOfSession, only != session {
            guard let group = groupOfSession[only], group.id == join.id else {
                return .failure(JoinRefusal("this receiver serves one transfer (--once); connection refused"))
            }
        }
        let group: TransferGroup
        if let named = join.group {
            expireTaskGroups()
            if let found = groups[join.id] {
                group = found
            } else {
                let taskGroups = groups.values.filter(\.isTaskGroup)
                if taskGroups.count >= options.maxTaskGroups {
                    // The one idle longest makes room; with every one busy, this one waits.
                    let idle = taskGroups.compactMap { group in group.idleSince.map { (group, $0) } }
                    guard let idlest = idle.min(by: { $0.1 < $1.1 })?.0 else {
                        return .failure(
                            JoinRefusal(
                                "\(Wire.busyPrefix) this receiver serves \(options.maxTaskGroups) task groups at once"))
                    }
                    close(idlest)
                }
                group = TransferGroup(id: join.id, count: join.count, group: named)
                groups[join.id] = group
            }
        } else if join.index == 0 {
            guard groups[join.id] == nil else { return .failure(JoinRefusal("JOIN: transfer id already in use")) }
            guard join.count <= options.maxSessions else {
                return .failure(
                    JoinRefusal(
                        "\(Wire.busyPrefix) \(join.count) connections asked; this receiver serves "
                            + "\(options.maxSessions) sessions at once"))
            }
            group = TransferGroup(id: join.id, count: join.count)
            groups[join.id] = group
        } else {
            guard let found = groups[join.id] else { return .failure(JoinRefusal("JOIN: unknown transfer id")) }
            group = found
        }
        if let refusal = group.admit(join, session: session) { return .failure(JoinRefusal(refusal)) }
        groupOfSession[session] = group
        return .success(group)
    }

    /// The session left its transfer; the last one out closes the files it left unfinished
    /// (kept for a resume where they may be).
    private func leaveTransfer(_ session: Int) {
        defer { expireTaskGroups() }
        guard let group = groupOfSession.removeValue(forKey: session), group.leave(session) else { return }
        // A task group waits for its other tasks (until it expires).
        guard !group.isTaskGroup else { return }
        close(group)
    }

    /// Ends transfer `group`: the files it left unfinished are closed, kept for a resume.
    private func close(_ group: TransferGroup) {
        if groups[group.id] === group { groups[group.id] = nil }
        for file in group.files.values where !file.finished {
            file.finished = true
            guard let opened = file.opened else { continue }
            let progress = file.progress
            store.pool.submit { [store] in store.abandonRanged(opened, held: progress, keep: true) }
        }
        group.files.removeAll()
    }

    /// Closes the task groups idle for longer than `taskGroupLinger` (all idle ones when
    /// `all`, as the receiver stops).
    func expireTaskGroups(all: Bool = false) {
        let linger = options.taskGroupLinger.components
        let nanoseconds =
            UInt64(max(0, linger.seconds)) &* 1_000_000_000 &+ UInt64(max(0, linger.attoseconds / 1_000_000_000))
        let now = monotonicNanoseconds()
        for group in Array(groups.values) {
            guard let since = group.idleSince, all || now &- since >= nanoseconds else { continue }
            close(group)
        }
    }

    /// Ends every session (interrupted files keep their partial data for a later resume).
    public func closeAllSessions() {
        for session in Array(sessions.values) { session.cancel() }
        expireTaskGroups(all: true)
    }

    func sessionEnded(_ session: ReceiverSession, report: TransferSessionReport) {
        // Over TLS (where the throttle applies), a session that ended in error without a byte
        // of the protocol never finished its handshake: a wrong key, a handshake that broke
        // off, or one not done before a timeout — a peer without the key.
        if let address = addresses.removeValue(forKey: report.id), tlsContext != nil, report.error != nil,
            report.error?.code == .authenticationFailed || session.bytesRead == 0
        {
            throttle.recordFailure(address)
        }
        leaveTransfer(report.id)
        generationOfSession[report.id] = nil
        settleKey()
        onSessionEnd?(report)
    }

    /// The session's connection closed: the session can go.
    func sessionClosed(_ id: Int) {
        sessions[id] = nil
    }

    func emit(_ event: TransferReceiverEvent) { onEvent?(event) }
}

struct JoinRefusal: Error {
    var reason: String
    init(_ reason: String) { self.reason = reason }
}
