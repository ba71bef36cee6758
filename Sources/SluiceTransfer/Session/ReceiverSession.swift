import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// One connection to a `TransferReceiver`: the receiving role of a `ProtocolSession`, which
/// feeds its `ReceiverMachine` what the decoder makes of the socket's bytes; this type performs
/// the machine's actions (files stored, answers sent) and says when it can take more.
final class ReceiverSession: ProtocolRole {
    /// With fsync on, writeback of a file is started each time this much more has arrived.
    static let writebackWindow: UInt64 = 8 << 20
    /// With fsync on, verified files are flushed (one `syncfs`) and renamed in batches of at
    /// most this many files or bytes; while one batch is committed the next fills, and a
    /// session whose next batch is full stops reading until the first is done. A staged file
    /// holds two descriptors (the file, locked, and its directory).
    static let stagedFiles = 64
    static let stagedBytes: UInt64 = 64 << 20
    /// A sender that has sent everything may wait for the answers of staged files (it says
    /// goodbye once no file it sent eagerly can be asked for again): staged files are committed
    /// once nothing has arrived for this long.
    static let quietCommit: Duration = .milliseconds(3)
    /// The window of this receiver's files: none without fsync.
    var writeback: UInt64? { options.fsync ? Self.writebackWindow : nil }
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

    let id: Int
    let peer: String
    weak var receiver: TransferReceiver?
    let connection: WireConnection
    /// Bytes of the protocol read (over TLS, none before the handshake is done).
    var bytesRead: UInt64 { connection.bytesRead }
    let loop: EventLoop
    let store: ReceiverStore
    let options: TransferReceiveOptions
    var machine: ReceiverMachine
    /// The connection's protocol loop, idle timeout and ending, with this session as its role.
    private(set) lazy var session = ProtocolSession(
        role: self, connection: connection, loop: loop, decoding: .toReceiver, operation: "receive",
        peerName: "sender", idleTimeout: options.idleTimeout)
    let hasher: DigestWorker
    /// Hashes held bytes with SHA-256 (`HeldCheck`) apart from `hasher`'s jobs.
    let heldHasher: DigestWorker
    var file: ActiveFile? {
        didSet {
            if (oldValue == nil) != (file == nil) { receiver?.filesReceiving += file == nil ? -1 : 1 }
        }
    }
    /// The answers sent, counted.
    private var tally = TransferTally()
    /// Directories to give the sender's mode and mtime at goodbye (bounded).
    var createdDirectories = DirectoriesToSettle()
    /// This session's warnings: the first few are told, the rest counted.
    var warnings = SessionWarnings()
    var bytesStored: UInt64 = 0
    /// When the connection was accepted.
    let started = monotonicNanoseconds()
    /// Pieces of the inbound buffer lent to the hasher's worker, which writes and hashes them.
    var piecesLent = 0
    var ended: Bool { session.ended }
    /// The transfer of several connections this session joined.
    var group: TransferGroup?
    /// The paths CHECKed in this session, for PRUNE (`send --delete`), when it joined no group.
    var ownNames: Set<String> = []
    /// CHECKs taken and not yet handed to the lane.
    var pendingChecks: [([String]?, CheckHeader, EntryAttributes)] = []
    /// What waits for the connection to have sent what it holds (the next SIGS).
    var afterSent: (() -> Void)?
    /// Messages waiting, in order, for room in the connection's buffer (`sendOrdered`).
    var outbox: [[UInt8]] = []
    /// The signatures of a delta's basis being sent.
    var signing: SignatureWork?
    /// With fsync: files verified and set aside, to be flushed with one `syncfs` and renamed
    /// into place together (`ReceiverStore.commitStaged`), and their bytes.
    var staged: [StagedSlot] = [] {
        didSet { receiver?.filesStaged += staged.count - oldValue.count }
    }
    /// A small file received whole into memory, written with one job on `lane`.
    var wholeFile: WholeFile?
    /// The bytes of the small files received whole and not yet handed to a job (`wholeFile`'s
    /// and those of `wholesWaiting`).
    let wholeBytes = WholeBytes()
    /// This session's disk work that must stay in order: small files written whole, and files
    /// set aside for a batch. Jobs submitted and not yet completed on the loop:
    let lane: SerialLane
    var laneJobs = 0
    /// Bytes of small files held by jobs on `lane`: past `laneBytesLimit`, the session stops
    /// reading until one is done.
    var laneBytes = 0
    static let laneBytesLimit = 8 << 20
    /// Small files received whole and verified, waiting to be stored by one job on `lane`
    /// (a BATCH's, until its end), and their bytes.
    var wholesWaiting: [ReceivedWhole] = []
    var wholesWaitingBytes = 0
    /// Of `wholesWaiting`, those whose bytes are lent from the inbound buffer (not copied):
    /// handed to a job as soon as the decoder waits for more (`caughtUp`), since the inbound
    /// buffer cannot take more while they pin it.
    var wholesWaitingLent = 0
    var stagedBytes: UInt64 = 0
    /// A batch of staged files is being committed on a worker (one at a time, so that their
    /// answers come back in order).
    var committingStaged = false
    /// Committing the staged files was asked for while a batch was being committed.
    var commitAsked = false
    /// Work waiting for every staged file to be committed (goodbye).
    var afterStaged: [() -> Void] = []
    /// Small files written whole in flight on `lane` at most, each holding its bytes: past
    /// that, the session stops reading until one is done.
    static let laneDepth = 64
    /// Commits the staged files once the sender has been quiet for `quietCommit`.
    var quietTimer: LoopTimer?
    /// A MOVE or REMOVE came (`send --watch`): directories created may be gone at goodbye.
    var movedOrRemoved = false
    /// `send --watch`: directories' attributes are being set mid-session (`settleWatched`).
    var settlingWatched = false

    var isEnded: Bool { ended }
    /// The file's data path waits for the hasher to free a slot.
    var waitsForRoom: Bool { file?.lifecycle.waitsForRoom ?? false }
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
                streams: options.streams, eager: options.eager, batch: options.offersBatch,
                links: options.offersMetadata,
                holes: options.offersMetadata, xattrs: options.offersMetadata,
                owners: options.keepsOwners && geteuid() == 0, specials: options.offersMetadata,
                devices: options.makesDevices && geteuid() == 0, sync: options.sync || options.delete,
                delete: options.delete, delta: options.offersDelta, syncAttributes: options.offersSyncAttributes))
        hasher = DigestWorker(loop: loop)
        lane = SerialLane(pool: store.pool)
        heldHasher = DigestWorker(loop: loop)
        connection = WireConnection(
            input: input, output: output, inboundCapacity: Self.initialInbound,
            outboundCapacity: Self.initialOutbound)
        connection.pauseReadingAbove = Self.initialOutbound - 2 * Frame.largestAnswer
        connection.coalescesSends = true
        connection.onClose = { [weak receiver] in receiver?.sessionClosed(id) }
        hasher.onRoom = { [weak self] in self?.roomForHashing() }
        hasher.onWriteFailed = { [weak self] target in self?.writeFailed(target) }
    }

    deinit {
        if file != nil { receiver?.filesReceiving -= 1 }
        receiver?.filesStaged -= staged.count
    }

    func start() {
        guard session.start() else { return }
        admissionTimer = loop.schedule(after: admissionDeadline) { [weak self] in
            guard let self, !self.isAdmitted else { return }
            self.dropWhileWaiting(
                SluiceError(
                    .timedOut, operation: "receive", subject: self.peer,
                    detail: "no handshake and HELLO within \(self.admissionDeadline)"))
        }
    }

    func cancel() {
        session.cancel()
    }

    /// Ends the connection before it was admitted (pushed out by newer ones, or too slow).
    func dropWhileWaiting(_ error: SluiceError) {
        guard !isAdmitted else { return }
        session.tell(.failed(error))
    }

    /// HELLO taken: the connection takes a session slot (nil), or is told the receiver is busy
    /// (the actions that turn it away).
    private func admit() -> [ReceiverAction]? {
        isAdmitted = true
        admissionTimer?.cancel()
        admissionTimer = nil
        return receiver?.admit(id).map { machine.turnAway($0) }
    }

    /// Waiting for its own disk or hasher is not the peer's silence (`ProtocolSession`'s idle
    /// check).
    var waitsOnItself: Bool {
        !machine.acceptsMessages || waitsForRoom || piecesLent > 0 || committingStaged || laneJobs > 0
    }

    // MARK: ProtocolRole

    func connectionHasRoom() {
        drainOutbox()
        if outbox.isEmpty, let work = afterSent {
            afterSent = nil
            work()
        }
        pump()
    }

    /// Sends `bytes` after whatever waits in `outbox`: at once when they fit the connection's
    /// buffer, else once it has room (parsing stops meanwhile), so messages keep their order
    /// whatever their size (a batch of HAVEs, SIGS, GONEs before PRUNE's answer).
    func sendOrdered(_ bytes: [UInt8]) {
        if outbox.isEmpty, connection.outbound.freeSpace >= bytes.count {
            connection.send(bytes)
            return
        }
        outbox.append(bytes)
    }

    /// Hands the connection what waits in `outbox`, as far as it has room.
    func drainOutbox() {
        while let first = outbox.first, connection.outbound.freeSpace >= first.count {
            outbox.removeFirst()
            connection.send(first)
        }
    }

    /// While a file arrives, its share of `inboundBudget`; while small files received whole
    /// arrive (a BATCH), `wholeFilesInbound` at most; between files, as it is.
    var inboundCapacity: Int? {
        if file != nil { return inboundShare }
        return wholeFile == nil && !machine.inBatch ? nil : min(inboundShare, Self.wholeFilesInbound)
    }

    /// The inbound buffer of a session receiving small files whole: reads of many files at a
    /// time (the 16 KiB of a session that only said hello took one file a read). As large as a
    /// file's (within the same budget, `inboundShare`): the files lent from it pin it until their
    /// job is done, and at 256 KiB a tree of small files took a job, a directory opened again
    /// and a flush of answers for every 20 files or so (104,498 system calls for tree a against
    /// 92,750 at 1 MiB).
    static let wholeFilesInbound = 1 << 20

    /// This session's inbound buffer while it receives a file, by how many files arrive now.
    var inboundShare: Int { Self.fileInbound(receiving: receiver?.filesReceiving ?? 1) }

    /// Parses what is buffered and reads more, as far as both can go.
    func pump() {
        session.pump()
    }

    // MARK: Parsing

    /// Messages are taken while the machine accepts them, the outbound buffer has room for
    /// their answers (and nothing waits in `outbox`), and the disk work they start has room.
    var takesMessages: Bool {
        machine.acceptsMessages && !waitsForRoom && !stagedFull && laneJobs < Self.laneDepth
            && laneBytes < Self.laneBytesLimit && outbox.isEmpty
            && connection.outbound.freeSpace >= 2 * Frame.largestAnswer
    }

    /// The first request claims the key it authenticated with (or is turned away); HELLO
    /// takes a session slot (or is turned away); DATA the machine allows goes to `deliver`.
    func take(_ item: FrameDecoder.Item) -> Taken<ReceiverAction> {
        if machine.awaitsFirstRequest, let receiver, case .frame(let frame) = item {
            var join: TransferJoin?
            if case .join(let asked) = frame { join = asked }
            if frame.type != .error, let refusal = receiver.claimKey(session: id, join: join) {
                return .stop(machine.turnAway(refusal))
            }
            machine.settings.mustJoin = receiver.mustJoin(id)
        }
        let actions = machine.received(item)
        if !isAdmitted && machine.saidHello, let turnAway = admit() { return .stop(turnAway) }
        if case .data(let piece, _) = item, actions == [.deliverData] { return .deliver(piece) }
        return .perform(actions)
    }

    func caughtUp() {
        // Lent bytes hold the inbound buffer in place: stored now, not at the BATCH's end, which
        // may not fit in the buffer.
        if wholesWaitingLent > 0 { storeWholes() }
        commitWhenQuiet()
    }

    func parsed() { flushChecks() }

    // MARK: Actions

    func perform(_ actions: [ReceiverAction]) {
        for action in actions {
            // CHECKs gather into one job; anything else keeps its place after them.
            if case .checkEntry = action {} else { flushChecks() }
            switch action {
            case .send(let frame):
                sendOrdered(frame.encoded)
            case .makeDirectory(let request):
                makeDirectory(request)
            case .makeLink(let request, let link):
                makeLink(request, link)
            case .makeSpecial(let request, let special):
                makeSpecial(request, special)
            case .deliverHole(let length):
                deliverHole(length)
            case .deliverCopy(let offset, let length):
                deliverCopy(offset: offset, length: length)
            case .checkEntry(let components, let header, let attributes):
                checkEntry(components, header, attributes)
            case .prune(let components, let dryRun):
                prune(components, dryRun: dryRun)
            case .move(let from, let to, let replace):
                move(from: from, to: to, replace: replace)
            case .remove(let components):
                remove(components)
            case .openFile(let request):
                if request.header.delta { openDelta(request) } else { openFile(request) }
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
                tally.add(result)
                receiver?.emit(.entry(sessionID: id, result))
            case .settleDirectories:
                settleDirectories()
            case .commitStaged:
                commitStaged()
            case .storeBatch:
                storeWholes()
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
                // Created here, or (syncing) there already: given the sender's mode and mtime.
                if created.last == request.relative || machine.syncing {
                    let header = request.header
                    let mtime = timespec(tv_sec: Int(header.mtimeSeconds), tv_nsec: Int(header.mtimeNanoseconds))
                    settleLater(request.relative, mode: header.mode, mtime: mtime)
                }
                perform(machine.handle(.directoryMade(nil)))
            case .failure(let rejection):
                perform(machine.handle(.directoryMade(rejection)))
            }
            pump()
        }
    }

    /// Makes a link on the lane, after the files written whole before it.
    private func makeLink(_ request: EntryRequest, _ link: LinkHeader) {
        let (store, overwrite) = (self.store, options.overwrite || link.replace)
        lane.submit({ store.makeLink(request, link, overwrite: overwrite) }, completingOn: loop) { [self] rejection in
            guard !ended else { return }
            perform(machine.handle(.linkMade(rejection)))
            pump()
        }
    }

    /// Makes a device, FIFO or socket on the lane, after the files written whole before it.
    private func makeSpecial(_ request: EntryRequest, _ special: SpecialHeader) {
        let (store, overwrite) = (self.store, options.overwrite || special.replace)
        lane.submit({ store.makeSpecial(request, special, overwrite: overwrite) }, completingOn: loop) {
            [self] rejection in
            guard !ended else { return }
            perform(machine.handle(.specialMade(rejection)))
            pump()
        }
    }

    /// A CHECK: gathered with the ones after it into one job on the lane (`flushChecks`).
    private func checkEntry(_ components: [String]?, _ header: CheckHeader, _ attributes: EntryAttributes) {
        if machine.peerDeletes && machine.mayRemove, let components { name(components.joined(separator: "/")) }
        pendingChecks.append((components, header, attributes))
        if pendingChecks.count >= Self.checksPerJob { flushChecks() }
    }

    /// The most CHECKs one job answers.
    static let checksPerJob = 512

    /// Compares what is at the gathered CHECKs' paths on the lane, in order with the other
    /// checks and the small files, and sends their HAVEs. A directory that is there is settled
    /// at goodbye with the sender's mode and mtime, which does not send its DIR.
    func flushChecks() {
        guard !pendingChecks.isEmpty, !ended else { return }
        let batch = pendingChecks
        pendingChecks.removeAll()
        let store = self.store
        laneJobs += 1
        let algorithm = machine.digest
        lane.submit({ store.check(batch, digest: algorithm) }, completingOn: loop) { [self] answers in
            laneJobs -= 1
            guard !ended else { return }
            var out: [UInt8] = []
            for ((components, header, _), answer) in zip(batch, answers) {
                out += Frame.have(answer).encoded
                if header.kind == .directory, answer.status == .same, header.applies, let components {
                    let mtime = timespec(tv_sec: Int(header.mtimeSeconds), tv_nsec: Int(header.mtimeNanoseconds))
                    settleLater(components.joined(separator: "/"), mode: header.mode, mtime: mtime)
                }
            }
            sendOrdered(out)
            runAfterStaged()
            pump()
        }
    }

    /// Keeps directory `path` to be given `mode` and `mtime` at goodbye; past the bound, says
    /// once that the rest are left as they are.
    private func settleLater(_ path: String, mode: UInt32, mtime: timespec) {
        guard !createdDirectories.append(path, mode: mode, mtime: mtime), createdDirectories.dropped == 1 else {
            if machine.peerWatches { settleWatched() }
            return
        }
        warn(
            "more than \(DirectoriesToSettle.maxCount) directories (or \(DirectoriesToSettle.maxPathBytes >> 20) MiB "
                + "of their paths) in one session: the rest keep the mode and times they have here")
    }

    /// Tells the receiver's owner of a problem that failed no entry: the first few of a session
    /// are told, the rest counted and told in one line as the session ends.
    func warn(_ text: String) {
        guard warnings.admit() else { return }
        receiver?.emit(.warning(sessionID: id, text))
    }

    /// The paths CHECKed for PRUNE: the transfer's, over several connections.
    private var named: Set<String> { group?.named ?? ownNames }

    private func name(_ path: String) {
        if let group { group.named.insert(path) } else { ownNames.insert(path) }
    }

    /// PRUNE on the lane, after the checks before it; every path removed is reported.
    private func prune(_ components: [String], dryRun: Bool) {
        let (store, named) = (self.store, self.named)
        lane.submit({ store.prune(components, named: named, dryRun: dryRun) }, completingOn: loop) {
            [self] gone, rejection in
            guard !ended else { return }
            if !dryRun { for path in gone { receiver?.emit(.removed(sessionID: id, path)) } }
            perform(machine.handle(.pruned(gone: gone, rejection)))
            pump()
        }
    }

    /// MOVE on the lane, after the checks before it (`send --watch`).
    private func move(from: [String], to: [String], replace: Bool) {
        movedOrRemoved = true
        let store = self.store
        lane.submit({ store.move(from: from, to: to, replace: replace) }, completingOn: loop) { [self] rejection in
            guard !ended else { return }
            perform(machine.handle(.pruned(gone: [], rejection)))
            pump()
        }
    }

    /// REMOVE on the lane (`send --watch --delete`); every path removed is reported.
    private func remove(_ components: [String]) {
        movedOrRemoved = true
        let store = self.store
        lane.submit({ store.remove(components) }, completingOn: loop) { [self] gone, rejection in
            guard !ended else { return }
            for path in gone { receiver?.emit(.removed(sessionID: id, path)) }
            perform(machine.handle(.pruned(gone: gone, rejection)))
            pump()
        }
    }

    // MARK: Ending

    private func end(_ how: SessionEnd) {
        let ended = session.end(how) {
            afterStaged.removeAll()
            // Verified before the end: stored all the same (nobody hears of them).
            storeWholes()
            commitStagedAfterEnd()
            quietTimer?.cancel()
            quietTimer = nil
            admissionTimer?.cancel()
            admissionTimer = nil
        }
        guard ended else { return }
        if let summary = warnings.summary { receiver?.emit(.warning(sessionID: id, summary)) }
        var report = TransferSessionReport(
            id: id, peer: peer, tally: tally, bytes: bytesStored,
            seconds: Double(monotonicNanoseconds() - started) / 1e9, error: session.error(how, subject: peer),
            streamIndex: machine.joined?.index)
        report.taskGroup = group?.report(of: id)
        receiver?.sessionEnded(self, report: report)
    }
}
