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
/// The loop's thread never waits: hashing runs on `WorkerPool.shared`, and directory creation,
/// opening, flushing and renaming on a pool of disk workers; while one of those is in progress
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
        sessions.sorted { $0.key < $1.key }.filter { !$0.value.isEnded }.map(\.value.inboundCapacity)
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

    /// A connection from `address` is about to wait. Past the per-address cap, the oldest
    /// waiting connection of `address` is dropped; past the overall cap, the oldest of the
    /// address with the most waiting. Only connections past `admissionGrace` are dropped; when
    /// every one is younger (a burst), the newcomer waits too, up to twice the cap, and beyond
    /// that it is closed at once. Returns whether the newcomer may wait.
    private func makeRoomToWait(for address: String) -> Bool {
        let now = monotonicNanoseconds()
        let grace = UInt64(admissionGrace.nanoseconds)
        let waiting = sessions.values.filter { !$0.isAdmitted && !$0.isEnded }
        var byAddress: [String: [ReceiverSession]] = [:]
        for session in waiting { byAddress[addresses[session.id] ?? "", default: []].append(session) }
        let ownCount = byAddress[address]?.count ?? 0
        let victims: [ReceiverSession]
        if ownCount >= maxPendingPerAddress {
            victims = byAddress[address] ?? []
        } else if waiting.count >= maxPendingConnections {
            let heaviest = byAddress.values.max { a, b in
                a.count != b.count ? a.count < b.count : a.map(\.id).min()! > b.map(\.id).min()!
            }
            victims = heaviest ?? []
        } else {
            return true
        }
        guard let oldest = victims.filter({ now - $0.started >= grace }).min(by: { $0.id < $1.id }) else {
            return ownCount < 2 * maxPendingPerAddress && waiting.count < 2 * maxPendingConnections
        }
        pendingDropped += 1
        oldest.dropWhileWaiting(
            SluiceError(
                .unavailable, operation: "receive", subject: oldest.peer,
                detail: "dropped before it authenticated: newer connections were waiting"))
        return true
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
        if join.index == 0 {
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
        guard let group = groupOfSession.removeValue(forKey: session), group.leave(session) else { return }
        groups[group.id] = nil
        for file in group.files.values where !file.finished {
            file.finished = true
            guard let opened = file.opened else { continue }
            let progress = file.progress
            store.pool.submit { [store] in store.abandonRanged(opened, held: progress, keep: true) }
        }
        group.files.removeAll()
    }

    /// Ends every session (interrupted files keep their partial data for a later resume).
    public func closeAllSessions() {
        for session in Array(sessions.values) { session.cancel() }
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

/// The receiver's state of the file being received: its temporary file, digest, decoder.
final class ActiveFile {
    let opened: OpenedFile
    let request: EntryRequest
    /// The digest agreed with the sender, of what the file holds.
    let digest: FileDigest
    /// Decompresses the file's data, when it comes compressed (the stage driver `copy` uses).
    let inflate: StageDriver?
    /// Bytes written to the temporary file (after the held prefix).
    var written: UInt64 = 0
    /// Its writes, with their writeback: made here on the loop, or by the session's
    /// `DigestWorker` (a file received whole, while others are received too, or compressed).
    let target: WriteTarget
    /// Its digest was asked for: the commit reports a failed write.
    var committing = false
    /// A worker holds the file's descriptors (reading back its prefix, or committing it): it
    /// must not be closed under that work.
    var busy = false
    /// Dropped while busy: abandon it (keeping the partial when true) once the work is done.
    var abandonWhenIdle: Bool?
    /// For a range: the file shared with the other connections of the transfer, the range,
    /// and the bytes of it held from an interrupted transfer.
    let shared: SharedFile?
    let range: ByteRange?
    let held: UInt64
    /// With `held-sha256`: the SHA-256 of the held bytes, computed beside the data.
    var heldCheck: HeldCheck?
    /// Where this session's bytes start in the file.
    let base: UInt64

    /// With `writebackWindow`, writeback of what was written is started each time that much
    /// more has arrived (receive with fsync).
    init(
        opened: OpenedFile, request: EntryRequest, digest: TransferDigest, inflate: StageDriver?,
        writebackWindow: UInt64?, shared: SharedFile? = nil, range: ByteRange? = nil, held: UInt64 = 0
    ) {
        self.digest = FileDigest(digest)
        self.opened = opened
        self.request = request
        self.inflate = inflate
        self.shared = shared
        self.range = range
        self.held = held
        base = range.map { $0.start + held } ?? opened.offset
        target = WriteTarget(fd: opened.fd, display: opened.display, writebackWindow: writebackWindow, start: base)
    }

    var position: UInt64 { base + written }
}

/// One connection to a `TransferReceiver`: runs a `ReceiverMachine` on the loop, feeding it
/// what the `FrameDecoder` makes of the socket's bytes and performing its actions.
final class ReceiverSession: WireConnectionOwner {
    /// With fsync on, writeback of a file is started each time this much more has arrived.
    static let writebackWindow: UInt64 = 8 << 20
    /// The window of this receiver's files: none without fsync.
    private var writeback: UInt64? { options.fsync ? Self.writebackWindow : nil }
    /// With `directIO`, files of at least this many bytes to come are written past the page
    /// cache (smaller ones would be written through it all the same: a tail of a block).
    static let directMinimum: UInt64 = 1 << 20
    /// Buffers of a connection that has only said hello: room for the largest control message.
    static let initialInbound = 16 << 10
    static let initialOutbound = 8 << 10
    /// The inbound buffer once a file starts: large reads for throughput, while few files
    /// arrive at once.
    static let fileInbound = 1 << 20
    /// The smallest inbound buffer of a session receiving a file.
    static let smallestFileInbound = 64 << 10
    /// What the inbound buffers of the sessions receiving files hold between them, at most,
    /// once there are more than four: each holds bytes from their read until the worker has
    /// written and hashed them, and sixteen sessions holding 1 MiB each put that work out of the
    /// processor's caches (sixteen senders at once cost the receiver about a third less CPU
    /// with 256 KiB each than with 1 MiB; Benchmarks/RESULTS.md).
    static let inboundBudget = 4 << 20

    /// The inbound buffer of a session receiving a file while `files` are being received:
    /// 1 MiB, halved until the sessions' buffers fit `inboundBudget`, down to 64 KiB.
    static func fileInbound(receiving files: Int) -> Int {
        var size = fileInbound
        while size > smallestFileInbound && size * files > inboundBudget { size /= 2 }
        return size
    }
    /// Where decompressed bytes go before they are written.
    static let scratchSize = 1 << 18

    let id: Int
    let peer: String
    private weak var receiver: TransferReceiver?
    private let connection: WireConnection
    /// Bytes of the protocol read (over TLS, none before the handshake is done).
    var bytesRead: UInt64 { connection.bytesRead }
    private let loop: EventLoop
    private let store: ReceiverStore
    private let options: TransferReceiveOptions
    private var machine: ReceiverMachine
    private var decoder = FrameDecoder(direction: .toReceiver)
    private let hasher: DigestWorker
    /// Hashes held bytes with SHA-256 (`HeldCheck`) apart from `hasher`'s jobs.
    private let heldHasher: DigestWorker
    private var file: ActiveFile? {
        didSet {
            if (oldValue == nil) != (file == nil) { receiver?.filesReceiving += file == nil ? -1 : 1 }
        }
    }
    private var results: [TransferFileResult] = []
    private var createdDirectories: [(path: String, mode: UInt32, mtime: timespec)] = []
    private var bytesStored: UInt64 = 0
    /// When the connection was accepted.
    let started = monotonicNanoseconds()
    private var idleTimer: LoopTimer?
    private var peerClosed = false
    /// The data path waits for the hasher to free a slot.
    private var dataBlocked = false
    /// `finishData` waits for the hasher to free a slot.
    private var finishBlocked = false
    /// Pieces of the inbound buffer lent to the hasher's worker, which writes and hashes them.
    private var piecesLent = 0
    private var ended = false
    private var scratchStorage: UnsafeMutableRawBufferPointer?
    /// The transfer of several connections this session joined.
    private var group: TransferGroup?

    var isEnded: Bool { ended }
    var inboundCapacity: Int { connection.inbound.capacity }
    /// Past its TLS handshake and HELLO: holding one of the receiver's session slots.
    private(set) var isAdmitted = false
    /// How long the connection may take to be admitted.
    private let admissionDeadline: Duration
    private var admissionTimer: LoopTimer?

    init(
        id: Int, peer: String, receiver: TransferReceiver, input: ReadStream, output: WriteStream, loop: EventLoop,
        admissionDeadline: Duration
    ) {
        self.admissionDeadline = admissionDeadline
        self.id = id
        self.peer = peer
        self.receiver = receiver
        self.loop = loop
        store = receiver.store
        options = receiver.options
        machine = ReceiverMachine(
            settings: .init(
                overwrite: options.overwrite, maxSize: options.maxSize, resume: options.resume,
                streams: options.streams, eager: options.eager))
        hasher = DigestWorker(loop: loop)
        heldHasher = DigestWorker(loop: loop)
        connection = WireConnection(
            input: input, output: output, inboundCapacity: Self.initialInbound,
            outboundCapacity: Self.initialOutbound)
        connection.pauseReadingAbove = Self.initialOutbound - 2 * Frame.largestAnswer
        connection.owner = self
        connection.onClose = { [weak receiver] in receiver?.sessionClosed(id) }
        hasher.onRoom = { [weak self] in self?.roomForHashing() }
        hasher.onWriteFailed = { [weak self] target in self?.writeFailed(target) }
    }

    deinit {
        scratchStorage?.deallocate()
        if file != nil { receiver?.filesReceiving -= 1 }
    }

    private var scratch: UnsafeMutableRawBufferPointer {
        if let scratchStorage { return scratchStorage }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.scratchSize, alignment: 16)
        scratchStorage = buffer
        return buffer
    }

    func start() {
        connection.start(on: loop)
        guard !ended, !connection.isClosed else { return }
        connection.send(Wire.magic)
        perform(machine.start())
        scheduleIdleCheck()
        admissionTimer = loop.schedule(after: admissionDeadline) { [weak self] in
            guard let self, !self.isAdmitted else { return }
            self.dropWhileWaiting(
                SluiceError(
                    .timedOut, operation: "receive", subject: self.peer,
                    detail: "no handshake and HELLO within \(self.admissionDeadline)"))
        }
    }

    func cancel() {
        perform(machine.handle(.cancelled))
    }

    /// Ends the connection before it was admitted (pushed out by newer ones, or too slow).
    func dropWhileWaiting(_ error: SluiceError) {
        guard !isAdmitted else { return }
        perform(machine.handle(.connectionFailed(error)))
    }

    /// HELLO taken: the connection takes a session slot, or is told the receiver is busy.
    /// Returns false when it was turned away.
    private func admit() -> Bool {
        isAdmitted = true
        admissionTimer?.cancel()
        admissionTimer = nil
        guard let refusal = receiver?.admit(id) else { return true }
        perform(machine.turnAway(refusal))
        return false
    }

    private func scheduleIdleCheck() {
        guard let timeout = options.idleTimeout, !ended else { return }
        let limit = timeout.nanoseconds
        let idle = monotonicNanoseconds() - connection.lastActivity
        let wait = idle >= limit ? 0 : limit - idle
        idleTimer = loop.schedule(after: .nanoseconds(Int64(clamping: wait))) { [weak self] in
            guard let self, !self.ended else { return }
            // Waiting for its own disk or hasher is not the peer's silence.
            let waitingHere =
                !self.machine.acceptsMessages || self.dataBlocked || self.finishBlocked || self.piecesLent > 0
            if !waitingHere && monotonicNanoseconds() - self.connection.lastActivity >= limit {
                self.perform(self.machine.handle(.timedOut))
            } else {
                self.scheduleIdleCheck()
            }
        }
    }

    // MARK: WireConnectionOwner

    func wireReceived(_ connection: WireConnection) { parse() }

    func wireCanSend(_ connection: WireConnection) { pump() }

    /// While a file arrives, its share of `inboundBudget`; between files, as it is.
    func wireInboundCapacity(_ connection: WireConnection) -> Int? {
        file == nil ? nil : inboundShare
    }

    /// This session's inbound buffer while it receives a file, by how many files arrive now.
    private var inboundShare: Int { Self.fileInbound(receiving: receiver?.filesReceiving ?? 1) }

    func wirePeerClosed(_ connection: WireConnection) {
        peerClosed = true
        pump()
    }

    func wireFailed(_ connection: WireConnection, _ error: SluiceError) {
        perform(machine.handle(.connectionFailed(error)))
    }

    // MARK: Parsing

    /// Hands the machine what the decoder finds, while it accepts messages, the outbound
    /// buffer has room for its answers, and the hasher has room for data; then lets the
    /// connection read again.
    /// Parses what is buffered and reads more, as far as both can go.
    private func pump() {
        connection.deliver()
    }

    private func parse() {
        while !ended, machine.acceptsMessages, !dataBlocked {
            guard connection.outbound.freeSpace >= 2 * Frame.largestAnswer else { return }
            switch decoder.next(connection.inbound.readable) {
            case .needMore:
                if peerClosed { perform(machine.handle(.peerClosed)) }
                return
            case .violation(let reason):
                perform(machine.violated(reason))
                return
            case .item(let item, let consumed):
                if machine.awaitsFirstRequest, let receiver, case .frame(let frame) = item {
                    var join: TransferJoin?
                    if case .join(let asked) = frame { join = asked }
                    if frame.type != .error, let refusal = receiver.claimKey(session: id, join: join) {
                        connection.inbound.consume(consumed)
                        perform(machine.turnAway(refusal))
                        return
                    }
                    machine.settings.mustJoin = receiver.mustJoin(id)
                }
                let actions = machine.received(item)
                if !isAdmitted && machine.saidHello && !admit() {
                    connection.inbound.consume(consumed)
                    return
                }
                guard case .data(let piece, _) = item, actions == [.deliverData] else {
                    connection.inbound.consume(consumed)
                    perform(actions)
                    continue
                }
                let used = deliver(piece)
                let unused = piece.count - used
                decoder.unread(unused)
                connection.inbound.consume(consumed - unused)
            }
        }
    }

    // MARK: Data

    /// Passes DATA bytes through the file's data path: decompress, check with the machine,
    /// write, hash. Returns how many it took: fewer when the hasher is full (the rest waits in
    /// the inbound buffer, and reading stops, until `onRoom`).
    private func deliver(_ piece: UnsafeRawBufferPointer) -> Int {
        guard let file else { return piece.count }
        guard let inflate = file.inflate else {
            // A range's descriptor belongs to its transfer, which may close it: never lent.
            // Nor are bytes written directly: the disk is written from the hasher's aligned
            // slots, by its worker.
            if file.shared == nil, !file.target.wantsAlignedWrites,
                piecesLent > 0 || (receiver?.filesReceiving ?? 0) > 1
            {
                return lend(piece, to: file, file.target)
            }
            guard hasher.hasRoom(for: 1) else {
                dataBlocked = true
                return 0
            }
            let n = min(piece.count, hasher.room)
            store(UnsafeRawBufferPointer(rebasing: piece[0..<n]), to: file)
            return n
        }
        var input = piece
        while !input.isEmpty, self.file === file {
            guard hasher.hasRoom(for: Self.scratchSize) else {
                dataBlocked = true
                return piece.count - input.count
            }
            let step = Result { () throws(SluiceError) in try inflate.step(input: input, output: scratch) }
            switch step {
            case .failure(let error):
                perform(machine.handle(.dataFailed(Self.rejection(inflating: error))))
                return piece.count
            case .success(let progress):
                if progress.produced > 0 {
                    store(UnsafeRawBufferPointer(rebasing: scratch[0..<progress.produced]), to: file)
                }
                input = UnsafeRawBufferPointer(rebasing: input[progress.consumed...])
                if progress.consumed == 0 && progress.produced == 0 && self.file === file {
                    let reason = progress.finished ? "bytes after the end" : "no progress"
                    perform(machine.handle(.dataFailed(.failed(.data, "compressed data: \(reason)"))))
                    return piece.count
                }
            }
        }
        return piece.count
    }

    private static func rejection(inflating error: SluiceError) -> EntryRejection {
        error.code == .limitExceeded
            ? .failed(.data, "more data than announced") : .failed(.data, "compressed data: \(error.reason)")
    }

    /// Decoded bytes: if the machine allows them, written at the file's end and hashed — here,
    /// or by the hasher's worker for a compressed file.
    private func store(_ bytes: UnsafeRawBufferPointer, to file: ActiveFile) {
        let (allowed, actions) = machine.decoded(bytes.count)
        guard allowed else {
            perform(actions)
            return
        }
        let target = file.target
        if file.inflate != nil || target.wantsAlignedWrites {
            // Decompressed into the scratch buffer, used again at once, or to be written
            // past the page cache (from aligned memory, which can wait for the disk on the
            // worker): copied for the worker.
            hasher.update(file.digest, bytes, writingTo: target, at: file.position)
        } else {
            // Written here: no piece of it is lent then, so the worker does not hold it.
            guard target.write(bytes, at: file.position) == .written else {
                let reason = target.failure?.description ?? "write \(quoted(file.opened.display)): failed"
                perform(machine.handle(.dataFailed(.failed(.io, reason))))
                return
            }
            hasher.update(file.digest, bytes)
        }
        file.written += UInt64(bytes.count)
        bytesStored += UInt64(bytes.count)
    }

    /// A file received whole, uncompressed: its bytes are written and hashed where they lie in
    /// the inbound buffer, by the hasher's worker, so that the loop goes on receiving meanwhile
    /// (the page-cache copy and the hash are most of a receiver's work). The buffer keeps lent
    /// bytes in place until they come back, reading into the space after them only; when that
    /// is full, this session reads nothing more until they are back. Returns the bytes taken:
    /// all of them.
    private func lend(_ piece: UnsafeRawBufferPointer, to file: ActiveFile, _ target: WriteTarget) -> Int {
        let (allowed, actions) = machine.decoded(piece.count)
        guard allowed else {
            perform(actions)
            return piece.count
        }
        let position = file.position
        file.written += UInt64(piece.count)
        bytesStored += UInt64(piece.count)
        piecesLent += 1
        receiver?.piecesLent += 1
        connection.inbound.lend()
        hasher.writeLent(file.digest, piece, to: target, at: position, owner: connection) { [self] written in
            piecesLent -= 1
            connection.inbound.returned()
            if piecesLent == 0 { connection.fitInbound() }
            if !written { writeFailed(target) }
            pump()
        }
        return piece.count
    }

    /// The hasher's worker could not write to the file: the file fails (unless its commit,
    /// already waiting for the worker, reports it).
    private func writeFailed(_ target: WriteTarget) {
        guard let file, file.target === target, !file.committing else { return }
        let reason = target.failure?.description ?? "write \(quoted(file.opened.display)): failed"
        perform(machine.handle(.dataFailed(.failed(.io, reason))))
        pump()
    }

    /// END arrived: flush the decompressor (when there is one) into the file.
    private func finishData() {
        guard let file else { return }
        guard let inflate = file.inflate else {
            perform(machine.handle(.dataFinished))
            return
        }
        while self.file === file {
            guard hasher.hasRoom(for: Self.scratchSize) else {
                finishBlocked = true
                return
            }
            let step = Result { () throws(SluiceError) in try inflate.step(input: nil, output: scratch) }
            switch step {
            case .failure(let error):
                perform(machine.handle(.dataFailed(Self.rejection(inflating: error))))
                return
            case .success(let progress):
                if progress.produced > 0 {
                    store(UnsafeRawBufferPointer(rebasing: scratch[0..<progress.produced]), to: file)
                }
                guard self.file === file else { return }
                if progress.finished {
                    perform(machine.handle(.dataFinished))
                    return
                }
                if progress.produced == 0 {
                    perform(machine.handle(.dataFailed(.failed(.data, "compressed data: truncated"))))
                    return
                }
            }
        }
    }

    private func roomForHashing() {
        guard !ended else { return }
        if finishBlocked {
            finishBlocked = false
            finishData()
        }
        dataBlocked = false
        pump()
    }

    // MARK: Actions

    private func perform(_ actions: [ReceiverAction]) {
        for action in actions {
            switch action {
            case .send(let frame):
                connection.send(frame.encoded)
            case .makeDirectory(let request):
                makeDirectory(request)
            case .openFile(let request):
                openFile(request)
            case .deliverData:
                break  // done by `parse`, which holds the bytes
            case .finishData:
                finishData()
            case .commitFile(let digest, let held):
                commitFile(expecting: digest, held: held)
            case .joinTransfer(let join):
                joinTransfer(join)
            case .openRange(let request, let range):
                openRange(request, range)
            case .commitRange(let digest, let fileDigest, let held):
                commitRange(expecting: digest, file: fileDigest, held: held)
            case .dropFile(let keep):
                dropFile(keep: keep)
            case .report(let result):
                results.append(result)
                receiver?.emit(.entry(sessionID: id, result))
            case .settleDirectories:
                settleDirectories()
            case .end(let how):
                end(how)
            }
        }
    }

    private func makeDirectory(_ request: EntryRequest) {
        let store = self.store
        store.pool.submit({ store.makeDirectory(request) }, completingOn: loop) { [self] result in
            guard !ended else { return }
            switch result {
            case .success(let created):
                if created.last == request.relative {
                    let header = request.header
                    let mtime = timespec(tv_sec: Int(header.mtimeSeconds), tv_nsec: Int(header.mtimeNanoseconds))
                    createdDirectories.append((request.relative, header.mode, mtime))
                }
                perform(machine.handle(.directoryMade(nil)))
            case .failure(let rejection):
                perform(machine.handle(.directoryMade(rejection)))
            }
            pump()
        }
    }

    private func openFile(_ request: EntryRequest) {
        let store = self.store
        let (overwrite, resume, continueHeld) = (options.overwrite, options.resume, machine.continuesHeld)
        store.pool.submit(
            { store.openFile(request, overwrite: overwrite, resume: resume, continueHeld: continueHeld) },
            completingOn: loop
        ) {
            [self] result in
            switch result {
            case .failure(let rejection):
                perform(machine.handle(.fileOpened(.failure(rejection))))
            case .success(let opened):
                logStartedOver(opened)
                guard !ended else {
                    store.pool.submit { store.abandon(opened, keep: true) }
                    return
                }
                didOpen(opened, request)
            }
            pump()
        }
    }

    /// Logs why a partial found at the file's temporary name was not continued, if it was not.
    private func logStartedOver(_ opened: OpenedFile) {
        if let notice = opened.startedOver { receiver?.emit(.warning(sessionID: id, notice)) }
    }

    private func didOpen(_ opened: OpenedFile, _ request: EntryRequest) {
        var inflate: StageDriver?
        let header = request.header
        if header.compressed {
            var maxOutput: UInt64? = header.sizeKnown ? header.size - min(opened.offset, header.size) : nil
            if let maxSize = options.maxSize { maxOutput = min(maxOutput ?? maxSize, maxSize) }
            let limit = InflateLimit(maxOutputBytes: maxOutput.map { Int(clamping: $0) })
            inflate = (try? Inflate(format: .deflate, limit: limit)).map { StageDriver($0) }
            guard inflate != nil else {
                store.pool.submit { [store] in store.abandon(opened, keep: true) }
                perform(machine.handle(.fileOpened(.failure(.failed(.io, "inflate: cannot initialise zlib")))))
                return
            }
        }
        let direct =
            options.directIO
            && (!header.sizeKnown || header.size - min(opened.offset, header.size) >= Self.directMinimum)
        // Direct writes need block-aligned offsets: a partial is continued from its last whole
        // block (the few bytes after it come again, and are written over themselves).
        let block = UInt64(WriteTarget.directAlignment)
        let opened = direct ? opened.continued(at: opened.offset - opened.offset % block) : opened
        let file = ActiveFile(
            opened: opened, request: request, digest: machine.digest, inflate: inflate, writebackWindow: writeback)
        if direct { file.target.writeDirectly() }
        self.file = file
        connection.inbound.resize(to: inboundShare)
        guard opened.offset > 0 else {
            perform(machine.handle(.fileOpened(.success(0))))
            return
        }
        if machine.checksHeld {
            // Checked apart with SHA-256 (HELD) while the rest arrives; the agreed digest covers
            // only the rest.
            file.heldCheck = HeldCheck(worker: heldHasher, fd: opened.fd, from: 0, length: opened.offset)
            perform(machine.handle(.fileOpened(.success(opened.offset))))
            return
        }
        file.busy = true
        hasher.hashPrefix(file.digest, of: opened.fd, length: opened.offset) { [self] ok in
            file.busy = false
            if let keep = file.abandonWhenIdle {
                let abandoned = file.opened
                store.pool.submit { [store] in store.abandon(abandoned, keep: keep) }
                return
            }
            guard !ended, self.file === file else { return }
            if ok {
                perform(machine.handle(.fileOpened(.success(opened.offset))))
            } else {
                self.file = nil
                store.pool.submit { [store] in store.abandon(opened, keep: false) }
                perform(
                    machine.handle(
                        .fileOpened(
                            .failure(.failed(.io, "read \(quoted(opened.display)): cannot read the held partial")))))
            }
            pump()
        }
    }

    /// Nil when `file` held no bytes to check apart, or their SHA-256 is the sender's (HELD);
    /// else why the file fails. On the loop.
    private func checkHeld(_ file: ActiveFile, against expected: [UInt8]?, _ then: @escaping (EntryRejection?) -> Void)
    {
        HeldCheck.outcome(of: file.heldCheck) { outcome in
            switch outcome {
            case .none:
                then(nil)
            case .digest(let computed):
                then(
                    computed == expected
                        ? nil : .failed(.data, "SHA-256 mismatch (held partial data differs from the sender's file)"))
            case .unreadable:
                then(.failed(.io, "read \(quoted(file.opened.display)): cannot read the held partial"))
            }
        }
    }

    private func commitFile(expecting digest: [UInt8], held: [UInt8]?) {
        guard let file else { return }
        file.committing = true
        hasher.finalize(file.digest) { [self] computed in
            checkHeld(file, against: held) { [self] heldFailure in
                commitFile(file, digest: digest, computed: computed, heldFailure: heldFailure)
            }
        }
    }

    private func commitFile(_ file: ActiveFile, digest: [UInt8], computed: [UInt8], heldFailure: EntryRejection?) {
        guard !ended, self.file === file else { return }
        var rejection: EntryRejection?
        if let failure = file.target.failure {
            rejection = .failed(.io, failure.description)
        } else if let heldFailure {
            rejection = heldFailure
        } else if computed != digest {
            let what =
                file.opened.offset > 0 && file.heldCheck == nil
                ? " (held partial data or data in transit altered)" : " (data altered in transit)"
            rejection = .failed(.data, "\(machine.digest) mismatch\(what)")
        }
        if let rejection {
            self.file = nil
            let abandoned = file.opened
            store.pool.submit { [store] in store.abandon(abandoned, keep: false) }
            perform(machine.handle(.committed(rejection)))
            pump()
            return
        }
        let store = self.store
        let (overwrite, fsync) = (options.overwrite, options.fsync)
        let (request, opened) = (file.request, file.opened)
        // The commit closes the descriptors, whatever becomes of the session meanwhile.
        file.busy = true
        file.abandonWhenIdle = nil
        store.pool.submit(
            {
                store.commit(
                    opened, header: request.header, relative: request.relative, overwrite: overwrite, fsync: fsync)
            }, completingOn: loop
        ) { [self] rejection in
            if self.file === file { self.file = nil }
            perform(machine.handle(.committed(rejection)))
            pump()
        }
    }

    private func dropFile(keep: Bool) {
        guard let file else { return }
        self.file = nil
        hasher.discardFilling()
        if file.shared != nil {
            dropRange(file)
            return
        }
        guard !file.busy else {
            // A worker has the descriptors: it abandons the file when done (a commit in
            // progress finishes and closes them itself).
            file.abandonWhenIdle = keep
            return
        }
        let store = self.store
        let abandoned = file.opened
        // Writes still queued for it finish before its descriptors close (even when the loop
        // stops meanwhile: `finishDiskWork` waits for the hand-over).
        store.handingOn.enter()
        hasher.afterQueued {
            store.pool.submit { store.abandon(abandoned, keep: keep) }
            store.handingOn.leave()
        }
    }

    private func settleDirectories() {
        let store = self.store
        let directories = createdDirectories
        createdDirectories.removeAll()
        let box = UncheckedBox(directories)
        store.pool.submit({ store.settleDirectories(box.value) }, completingOn: loop) { [self] warnings in
            for warning in warnings { receiver?.emit(.warning(sessionID: id, warning)) }
            perform(machine.handle(.directoriesSettled))
        }
    }

    // MARK: Ending

    private func end(_ how: SessionEnd) {
        guard !ended else { return }
        ended = true
        idleTimer?.cancel()
        idleTimer = nil
        admissionTimer?.cancel()
        admissionTimer = nil
        let error: SluiceError?
        var graceful = true
        switch how {
        case .goodbye:
            error = nil
        case .violation(let reason):
            error = SluiceError(.protocolViolation, operation: "receive", subject: peer, detail: reason)
        case .peerError(let reason):
            error = SluiceError(.refused, operation: "receive", subject: peer, detail: "sender: \(reason)")
        case .closedEarly(let detail):
            error = SluiceError(.truncatedData, operation: "receive", subject: peer, detail: detail)
            graceful = false
        case .timedOut:
            error = SluiceError(.timedOut, operation: "receive", subject: peer, detail: "idle")
            graceful = false
        case .connectionFailed(let failure):
            error = failure
            graceful = false
        case .cancelled:
            error = SluiceError(.cancelled, operation: "receive", subject: peer)
            graceful = false
        case .turnedAway(let reason):
            error = SluiceError(.unavailable, operation: "receive", subject: peer, detail: reason)
        }
        if graceful && !connection.isClosed {
            // A peer turned away or told of its violation may have sent on (it pipelines its
            // requests): read and drop that rather than reset the connection under the ERROR.
            var drains = false
            if case .turnedAway = how { drains = true }
            if case .violation = how { drains = true }
            connection.closeAfterFlush(drainingInput: drains)
            if !connection.isClosed {
                // A peer that does not read gets 5 seconds, then the connection is cut.
                let timer = loop.schedule(after: .seconds(5)) { [connection] in connection.close() }
                let previous = connection.onClose
                connection.onClose = {
                    timer.cancel()
                    previous?()
                }
            }
        } else {
            connection.close()
        }
        let report = TransferSessionReport(
            id: id, peer: peer, results: results, bytes: bytesStored,
            seconds: Double(monotonicNanoseconds() - started) / 1e9, error: error, streamIndex: machine.joined?.index)
        receiver?.sessionEnded(self, report: report)
    }
}

// MARK: Ranges of a transfer over several connections

extension ReceiverSession {
    /// JOIN: admitted to the transfer (JOINED), or refused (ERROR, and the connection closes).
    fileprivate func joinTransfer(_ join: TransferJoin) {
        guard let receiver else {
            perform(machine.handle(.transferJoined("the receiver is shutting down")))
            return
        }
        switch receiver.join(join, session: id) {
        case .success(let group):
            self.group = group
            perform(machine.handle(.transferJoined(nil)))
        case .failure(let refusal):
            perform(machine.handle(.transferJoined(refusal.reason)))
        }
    }

    /// RANGE: admitted against the file's other ranges, then received into the file the
    /// transfer shares (opened by the first of its ranges to arrive).
    fileprivate func openRange(_ request: EntryRequest, _ range: ByteRange) {
        guard let group else { return }
        let shared: SharedFile
        if let found = group.files[request.relative] {
            shared = found
        } else {
            guard group.openFiles < TransferGroup.maxOpenFiles else {
                let reason = "busy: \(TransferGroup.maxOpenFiles) files of this transfer are being received in ranges"
                perform(machine.handle(.fileOpened(.failure(.refused(.busy, reason)))))
                return
            }
            shared = SharedFile(relative: request.relative, header: request.header)
            group.files[request.relative] = shared
            let store = self.store
            let (overwrite, resume, continueHeld) = (options.overwrite, options.resume, machine.continuesHeld)
            store.pool.submit(
                {
                    store.openRangedFile(
                        request, overwrite: overwrite, resume: resume, continueHeld: continueHeld)
                }, completingOn: loop
            ) { [self] result in
                if case .success(let (opened, _)) = result { logStartedOver(opened) }
                shared.didOpen(result)
            }
        }
        if let refusal = shared.admit(range, of: request.header) {
            perform(machine.handle(.fileOpened(.failure(refusal))))
            return
        }
        shared.whenOpen { [self] in
            guard !ended else { return }
            guard let opened = shared.opened else {
                perform(machine.handle(.fileOpened(.failure(shared.failure ?? .failed(.io, "cannot open the file")))))
                pump()
                return
            }
            let held = shared.heldBytes(of: range)
            let file = ActiveFile(
                opened: opened, request: request, digest: machine.digest, inflate: nil, writebackWindow: writeback,
                shared: shared, range: range, held: held)
            self.file = file
            connection.inbound.resize(to: inboundShare)
            guard held > 0 else {
                perform(machine.handle(.fileOpened(.success(0))))
                pump()
                return
            }
            if machine.checksHeld {
                file.heldCheck = HeldCheck(worker: heldHasher, fd: opened.fd, from: range.start, length: held)
                perform(machine.handle(.fileOpened(.success(held))))
                pump()
                return
            }
            file.busy = true
            hasher.hashRange(file.digest, of: opened.fd, from: range.start, length: held) { [self] ok in
                file.busy = false
                if file.abandonWhenIdle != nil {
                    releaseRange(file)
                    return
                }
                guard !ended, self.file === file else { return }
                if ok {
                    perform(machine.handle(.fileOpened(.success(held))))
                } else {
                    self.file = nil
                    releaseRange(file, holding: 0)
                    let reason = "read \(quoted(opened.display)): cannot read the held part of the range"
                    perform(machine.handle(.fileOpened(.failure(.failed(.io, reason)))))
                }
                pump()
            }
        }
    }

    /// RANGE-END and the data checked by the machine: verify the range's SHA-256; when it was
    /// the last range of the file, read the whole file back and verify its SHA-256, then move
    /// it into place.
    fileprivate func commitRange(expecting digest: [UInt8], file fileDigest: [UInt8], held: [UInt8]?) {
        guard let file else { return }
        hasher.finalize(file.digest) { [self] computed in
            checkHeld(file, against: held) { [self] heldFailure in
                commitRange(file, digest: digest, computed: computed, fileDigest: fileDigest, heldFailure: heldFailure)
            }
        }
    }

    private func commitRange(
        _ file: ActiveFile, digest: [UInt8], computed: [UInt8], fileDigest: [UInt8], heldFailure: EntryRejection?
    ) {
        guard let shared = file.shared, let range = file.range else { return }
        guard !ended, self.file === file else { return }
        let mismatch = computed == digest ? nil : EntryRejection.failed(.data, "\(machine.digest) mismatch (\(range))")
        if let rejection = heldFailure ?? mismatch {
            self.file = nil
            releaseRange(file, holding: 0)
            perform(machine.handle(.rangeCommitted(rejection, fileStored: false)))
            pump()
            return
        }
        guard shared.verify(range) else {
            self.file = nil
            perform(machine.handle(.rangeCommitted(nil, fileStored: false)))
            pump()
            return
        }
        // Every range is in: the whole file, read back, must match the sender's digest.
        // From here this session owns the file's descriptors (the transfer leaves it be).
        shared.finished = true
        let whole = FileDigest(machine.digest)
        file.busy = true
        hasher.hashRange(whole, of: file.opened.fd, from: 0, length: shared.header.size) { _ in }
        hasher.finalize(whole) { [self] computed in
            guard computed == fileDigest else {
                file.busy = false
                if self.file === file { self.file = nil }
                let opened = file.opened
                store.pool.submit { [store] in store.abandon(opened, keep: false) }
                guard !ended else { return }
                perform(
                    machine.handle(
                        .rangeCommitted(
                            .failed(.data, "\(machine.digest) mismatch (whole file)"), fileStored: false)))
                pump()
                return
            }
            let store = self.store
            let (overwrite, fsync) = (options.overwrite, options.fsync)
            let (request, opened, header) = (file.request, file.opened, shared.header)
            store.pool.submit(
                {
                    store.commitRanged(
                        opened, header: header, relative: request.relative, overwrite: overwrite, fsync: fsync)
                },
                completingOn: loop
            ) { [self] rejection in
                file.busy = false
                if self.file === file { self.file = nil }
                guard !ended else { return }
                perform(
                    machine.handle(
                        .rangeCommitted(rejection, fileStored: rejection == nil, resumed: shared.heldTotal)))
                pump()
            }
        }
    }

    /// The range is dropped (the connection ended, or the range failed): the shared file
    /// keeps what the range holds, for a resume; the transfer closes it when it ends.
    fileprivate func dropRange(_ file: ActiveFile) {
        guard !file.busy else {
            file.abandonWhenIdle = true
            return
        }
        releaseRange(file)
    }

    fileprivate func releaseRange(_ file: ActiveFile, holding bytes: UInt64? = nil) {
        guard let shared = file.shared, let range = file.range, !shared.finished else { return }
        shared.note(range, holds: bytes ?? (file.held + file.written))
    }
}

/// Why a connection may not join a transfer: the text its ERROR carries.
struct JoinRefusal: Error {
    var reason: String
    init(_ reason: String) { self.reason = reason }
}
