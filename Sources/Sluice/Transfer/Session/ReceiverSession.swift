#if canImport(Glibc)
    import Glibc
#endif

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

/// A small file received whole into memory before anything of it touches the disk.
final class WholeFile {
    let request: EntryRequest
    let digest: FileDigest
    private(set) var bytes: [UInt8] = []

    /// Files received this way: eager (their data follows at once), of a known size of at most
    /// `Wire.eagerLimit` bytes, uncompressed.
    static func takes(_ header: EntryHeader) -> Bool {
        header.eager && header.sizeKnown && header.size <= Wire.eagerLimit && !header.compressed
    }

    init(_ request: EntryRequest, digest: TransferDigest) {
        self.request = request
        self.digest = FileDigest(digest)
        bytes.reserveCapacity(Int(request.header.size))
    }

    func append(_ piece: UnsafeRawBufferPointer) {
        digest.update(piece)
        bytes.append(contentsOf: piece)
    }
}

/// A verified file set aside for a batch, or one whose answer waits its turn among them.
enum StagedSlot {
    case file(ReceiverStore.StagedFile)
    case failed(EntryRejection)
}

/// One connection to a `TransferReceiver`: runs a `ReceiverMachine` on the loop, feeding it
/// what the `FrameDecoder` makes of the socket's bytes and performing its actions.
final class ReceiverSession: WireConnectionOwner {
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
    /// With fsync: files verified and set aside, to be flushed with one `syncfs` and renamed
    /// into place together (`ReceiverStore.commitStaged`), and their bytes.
    private var staged: [StagedSlot] = [] {
        didSet { receiver?.filesStaged += staged.count - oldValue.count }
    }
    /// A small file received whole into memory, written with one job on `lane`.
    private var wholeFile: WholeFile?
    /// This session's disk work that must stay in order: small files written whole, and files
    /// set aside for a batch. Jobs submitted and not yet completed on the loop:
    private let lane: SerialLane
    private var laneJobs = 0
    private var stagedBytes: UInt64 = 0
    /// A batch of staged files is being committed on a worker (one at a time, so that their
    /// answers come back in order).
    private var committingStaged = false
    /// Committing the staged files was asked for while a batch was being committed.
    private var commitAsked = false
    /// Work waiting for every staged file to be committed (goodbye).
    private var afterStaged: [() -> Void] = []
    /// Small files written whole in flight on `lane` at most, each holding its bytes: past
    /// that, the session stops reading until one is done.
    static let laneDepth = 64
    /// Commits the staged files once the sender has been quiet for `quietCommit`.
    private var quietTimer: LoopTimer?

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
        lane = SerialLane(pool: store.pool)
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
        receiver?.filesStaged -= staged.count
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
                || self.committingStaged || self.laneJobs > 0
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
        while !ended, machine.acceptsMessages, !dataBlocked, !stagedFull, laneJobs < Self.laneDepth {
            guard connection.outbound.freeSpace >= 2 * Frame.largestAnswer else { return }
            switch decoder.next(connection.inbound.readable) {
            case .needMore:
                if peerClosed { perform(machine.handle(.peerClosed)) }
                commitWhenQuiet()
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
        if let wholeFile {
            let (allowed, actions) = machine.decoded(piece.count)
            guard allowed else {
                perform(actions)
                return piece.count
            }
            wholeFile.append(piece)
            bytesStored += UInt64(piece.count)
            return piece.count
        }
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
        if wholeFile != nil {
            perform(machine.handle(.dataFinished))
            return
        }
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
            case .commitStaged:
                commitStaged()
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
        if WholeFile.takes(request.header) {
            // Nothing touches the disk until the file is here and verified: then one job on
            // the lane creates, writes and settles it, while the next file arrives.
            wholeFile = WholeFile(request, digest: machine.digest)
            perform(machine.handle(.fileOpened(.success(0))))
            return
        }
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
        guard opened.offset > 0, !header.eager else {
            // An eager file with held bytes is not continued here: the machine tells the
            // sender how many, drops the file (keeping the partial), and skips the data.
            perform(machine.handle(.fileOpened(.success(opened.offset))))
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
        if let whole = wholeFile {
            wholeFile = nil
            storeWhole(whole, expecting: digest)
            return
        }
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
        if fsync {
            stage(file)
            return
        }
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

    /// Sets the verified file's mode and mtime on a worker and sets it aside, to be flushed and
    /// renamed with others; the machine goes on with the next entry.
    private func stage(_ file: ActiveFile) {
        let store = self.store
        let (request, opened) = (file.request, file.opened)
        laneJobs += 1
        lane.submit({ store.stage(opened, header: request.header) }, completingOn: loop) { [self] rejection in
            laneJobs -= 1
            if self.file === file { self.file = nil }
            if let rejection {
                perform(machine.handle(.committed(rejection)))
                pump()
                return
            }
            setAside(.file(ReceiverStore.StagedFile(opened: opened, request: request)), bytes: file.position)
            perform(machine.handle(.staged))
            if batchFull { commitStaged() }
            pump()
        }
    }

    /// A small file received whole: its digest checked here, then created, written and
    /// settled by one job on the lane. The machine goes on at once (`.staged`); the file's
    /// answer follows the job (without fsync) or its batch (with).
    private func storeWhole(_ whole: WholeFile, expecting digest: [UInt8]) {
        guard whole.digest.finalize() == digest else {
            perform(machine.handle(.committed(.failed(.data, "\(machine.digest) mismatch (data altered in transit)"))))
            return
        }
        let (store, overwrite, fsync) = (self.store, options.overwrite, options.fsync)
        let (request, bytes) = (whole.request, whole.bytes)
        laneJobs += 1
        lane.submit({ store.storeWhole(request, bytes: bytes, overwrite: overwrite, fsync: fsync) }, completingOn: loop)
        { [self] outcome in
            laneJobs -= 1
            switch outcome {
            case .stored:
                perform(machine.handle(.stagedCommitted(nil)))
            case .rejected(let rejection) where !fsync:
                perform(machine.handle(.stagedCommitted(rejection)))
            case .rejected(let rejection):
                // Answered in its turn among the batch's files.
                setAside(.failed(rejection), bytes: 0)
            case .staged(let file):
                setAside(.file(file), bytes: UInt64(bytes.count))
            }
            if ended {
                commitStagedAfterEnd()
            } else if batchFull || !afterStaged.isEmpty {
                commitStaged()
            } else {
                commitWhenQuiet()
            }
            pump()
        }
        perform(machine.handle(.staged))
    }

    /// Adds to the batch; after the session's end, what is verified takes its name all the
    /// same (nobody hears of it).
    private func setAside(_ slot: StagedSlot, bytes: UInt64) {
        staged.append(slot)
        stagedBytes += bytes
        if ended { commitStagedAfterEnd() }
    }

    /// The staged files make a batch: this session's limits, or the receiver's budget of
    /// descriptors for staged files.
    private var batchFull: Bool {
        staged.count >= Self.stagedFiles || stagedBytes >= Self.stagedBytes
            || (receiver?.filesStaged ?? 0) >= TransferReceiver.stagedBudget
    }

    /// A full batch is staged while the one before is being committed: stop reading.
    private var stagedFull: Bool { committingStaged && batchFull }

    /// Commits the staged files (one flush, then the renames) on a worker, and hands the
    /// machine their outcomes in order. One batch at a time: asked meanwhile, the next batch
    /// follows this one.
    private func commitStaged() {
        guard !committingStaged else {
            commitAsked = true
            return
        }
        guard !staged.isEmpty else {
            runAfterStaged()
            return
        }
        let batch = staged
        staged.removeAll()
        stagedBytes = 0
        committingStaged = true
        commitAsked = false
        let (store, overwrite) = (self.store, options.overwrite)
        store.pool.submit({ Self.commit(batch, in: store, overwrite: overwrite) }, completingOn: loop) {
            [self] rejections in
            committingStaged = false
            for rejection in rejections { perform(machine.handle(.stagedCommitted(rejection))) }
            if ended {
                commitStagedAfterEnd()
                return
            }
            if commitAsked || !afterStaged.isEmpty || batchFull {
                commitStaged()
            } else {
                commitWhenQuiet()
            }
            pump()
        }
    }

    /// Commits the staged files if nothing more arrives for `quietCommit`: the sender may be
    /// waiting for their answers.
    private func commitWhenQuiet() {
        guard quietTimer == nil, !staged.isEmpty, !ended else { return }
        let seen = connection.bytesRead
        quietTimer = loop.schedule(after: Self.quietCommit) { [weak self] in
            guard let self else { return }
            quietTimer = nil
            guard !ended else { return }
            if connection.bytesRead == seen {
                commitStaged()
            } else {
                commitWhenQuiet()
            }
        }
    }

    /// Commits a batch's files (`ReceiverStore.commitStaged`) and returns an outcome for each
    /// slot, in order.
    private static func commit(_ batch: [StagedSlot], in store: ReceiverStore, overwrite: Bool) -> [EntryRejection?] {
        let files = batch.compactMap { slot -> ReceiverStore.StagedFile? in
            if case .file(let file) = slot { return file }
            return nil
        }
        var committed = store.commitStaged(files, overwrite: overwrite)[...]
        return batch.map { slot in
            switch slot {
            case .file: return committed.popFirst() ?? nil
            case .failed(let rejection): return rejection
            }
        }
    }

    /// Runs what waits for every staged file to be committed, once none is left.
    private func runAfterStaged() {
        guard staged.isEmpty, !committingStaged, laneJobs == 0 else { return }
        let waiting = afterStaged
        afterStaged.removeAll()
        for work in waiting { work() }
    }

    /// The session ended with files staged: they are committed all the same, in the background
    /// (`finishDiskWork` waits for them).
    private func commitStagedAfterEnd() {
        guard !staged.isEmpty, !committingStaged else { return }
        let batch = staged
        staged.removeAll()
        let (store, overwrite) = (self.store, options.overwrite)
        store.handingOn.enter()
        store.pool.submit {
            _ = Self.commit(batch, in: store, overwrite: overwrite)
            store.handingOn.leave()
        }
    }

    private func dropFile(keep: Bool) {
        wholeFile = nil
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

    /// Once every staged file is in place: sets the directories' attributes and, with fsync,
    /// flushes the file system once more, so that goodbye means every file stored is on disk
    /// under its name.
    private func settleDirectories() {
        afterStaged.append { [self] in
            let store = self.store
            let directories = createdDirectories
            createdDirectories.removeAll()
            let box = UncheckedBox(directories)
            let fsync = options.fsync
            store.pool.submit(
                { (store.settleDirectories(box.value), fsync ? store.flushAll() : nil) }, completingOn: loop
            ) { [self] warnings, failure in
                for warning in warnings { receiver?.emit(.warning(sessionID: id, warning)) }
                if let failure {
                    perform(machine.handle(.flushFailed(failure)))
                    return
                }
                perform(machine.handle(.directoriesSettled))
            }
        }
        commitStaged()
    }

    // MARK: Ending

    private func end(_ how: SessionEnd) {
        guard !ended else { return }
        ended = true
        afterStaged.removeAll()
        commitStagedAfterEnd()
        quietTimer?.cancel()
        quietTimer = nil
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
