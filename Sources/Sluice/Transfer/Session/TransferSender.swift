#if canImport(Glibc)
    import Glibc
#endif

/// Sends files, directory trees and streams to a `TransferReceiver` over one connection.
///
/// ```swift
/// let sender = try TransferSender(paths: ["photos", "notes.txt"], options: TransferSendOptions(compress: true))
/// let (input, output) = Socket.connect(host: "backup.local", port: 9000, timeout: .seconds(10))
/// sender.start(input: input, output: output, on: loop) { summary in
///     print(summary.files, summary.bytes, summary.error as Any)
/// }
/// loop.run()
/// ```
///
/// A directory is sent under its base name with everything below it (`photos/…`), each
/// directory before its contents, empty ones included; symbolic links inside it go as links
/// (to a receiver that takes them), sparse files as data and holes, and with
/// `TransferSendOptions.hardLinks`, `xattrs` and `owners`, second names, `user.*` attributes
/// and owners too. Each file is announced with its size, mode and mtime; the receiver answers
/// with the offset to start from (non-zero when it holds part of the file from an interrupted
/// transfer and `resume` is on: the sender then hashes that prefix locally and sends the
/// rest), the data follows in frames of at most the chunk size (raw deflate per file with
/// `compress`), then the SHA-256 of the whole file. A file counts as stored only once the
/// receiver has verified and stored it and said so.
///
/// Memory stays within a few chunks whatever the file sizes: a file's chunks are read on
/// workers a few ahead (`SourceReader`, `readAhead` of them), a chunk goes into a frame only
/// when the connection has taken the one before (the seeds' backpressure rule, with a
/// pending-write flag), and the rate limit paces the writes.
///
/// The loop never waits for the disk: files are opened (and small ones read whole) ahead of
/// their turn, in batches on a worker (`TransferSender+Reading`), and their data read on
/// another, in order; the loop hands out those jobs and takes back the results. A file whose
/// open or reads block (a FIFO put in a file's place, a stalled network file system) holds up
/// this connection at that file, never the other connections or timers of its loop.
public final class TransferSender: WireConnectionOwner {
    public let options: TransferSendOptions
    /// Warnings found while listing the sources (skipped links and special files).
    public private(set) var warnings: [String] = []
    /// Called as each entry is answered by the receiver (or fails on this side).
    public var onFileResult: ((TransferFileResult) -> Void)?
    /// Called for problems that do not fail the transfer (compression not offered by the
    /// receiver).
    public var onWarning: ((String) -> Void)?
    /// With `delete`: called with each path the receiver removed (would remove, on a dry run).
    public var onRemoved: ((String) -> Void)?
    private var removed: [String] = []
    private var pruneFailures: [String] = []

    let entries: [OutgoingEntry]
    var machine: SenderMachine
    private var decoder = FrameDecoder(direction: .toSender)
    private var outcomes: [TransferOutcome?]
    private var sizes: [UInt64?]
    private var resumed: [UInt64]
    var current: OutgoingFile?
    var connection: WireConnection?
    var loop: EventLoop?
    private var hasher: DigestWorker?
    /// Hashes held bytes with SHA-256 (`HeldCheck`) apart from `hasher`'s jobs.
    private var heldHasher: DigestWorker?
    /// True while `advance` announces entries.
    private var advancing = false
    private var completion: ((TransferSummary) -> Void)?
    private var started: UInt64 = 0
    private var peerClosed = false
    var ended = false
    private var warnedNoDeflate = false
    /// Compresses the current file (raw deflate in pigz-style blocks on the worker pool), when
    /// it is sent compressed.
    private var deflate: StageDriver?
    private var rawBuffer: ByteBuffer?
    private lazy var sourceWatcher = SourceWatcher(self)
    /// Reads of the files' data, chunk after chunk, in order (`SourceReader`).
    lazy var readLane = SerialLane(pool: .shared)
    lazy var readBuffers = ReadBufferStock(capacity: options.chunkSize.bytes, keep: Self.readAhead)
    /// Opens of the entries to come, in batches (`TransferSender+Reading`): those handed out,
    /// in the order of the work, how many batches run, and the entry the machine waits for.
    lazy var openLane = SerialLane(pool: .shared)
    var opensAhead: [OpenAhead] = []
    var openBatches = 0
    var waitingOpen: Int?
    var waitingForOpenRoom = false

    var bytesDone: UInt64 = 0
    /// Each entry's bytes in `bytesDone`: a file announced again (its receiver held part of
    /// it) counts from what it held, not twice.
    var counted: [UInt64]
    var bytesSentOfFiles: UInt64 = 0
    /// Bytes of holes not sent (sparse files).
    private(set) var holeBytes: UInt64 = 0
    /// Bytes of files sent as a delta that the receiver copied from its old copy (COPY).
    var matchedBytes: UInt64 = 0
    /// Entries sent as deltas.
    var sentAsDelta: Set<Int> = []
    /// With `checksum`: the digests to compute, the next, and how many run.
    var checksumsStarted = false
    var checksumQueue: [Int] = []
    var checksumsRunning = 0
    private var resumedBytes: UInt64 = 0
    /// Of those, the bytes the receiver said were written under their file's TOKEN.
    private var vouchedBytes: UInt64 = 0

    /// A sender of `paths` (files and directories). Lists directories now: throws for a path
    /// that does not exist (`stat "x": No such file or directory (errno 2)`) or cannot be
    /// listed; `warning` hears about what is skipped.
    public convenience init(
        paths: [String], options: TransferSendOptions = TransferSendOptions(), warning: ((String) -> Void)? = nil
    ) throws(SluiceError) {
        try self.init(sources: paths.map { .path($0) }, options: options, warning: warning)
    }

    /// A sender of `sources`: paths and streams.
    public convenience init(
        sources: [TransferSource], options: TransferSendOptions = TransferSendOptions(),
        warning: ((String) -> Void)? = nil
    ) throws(SluiceError) {
        var warnings: [String] = []
        let entries = try SourceTree.entries(
            sources, selection: options.selection, options: SourceTree.Options(options)
        ) { text in
            warnings.append(text)
            warning?(text)
        }
        self.init(entries: entries, options: options, work: nil, join: nil, fallback: nil)
        self.warnings = warnings
    }

    /// One connection of a transfer over several (`ParallelTransferSender`): sends `work` of
    /// `entries` after joining the transfer as `join`, or `fallback` alone when the receiver
    /// does not offer `streams`.
    init(
        entries: [OutgoingEntry], options: TransferSendOptions, work: [SenderMachine.Work]?, join: TransferJoin?,
        fallback: [SenderMachine.Work]?
    ) {
        self.options = options
        self.entries = entries
        outcomes = Array(repeating: nil, count: entries.count)
        sizes = entries.map(\.size)
        resumed = Array(repeating: 0, count: entries.count)
        counted = Array(repeating: 0, count: entries.count)
        machine = SenderMachine(
            entries: Self.machineEntries(entries),
            settings: .init(
                compress: options.compress, resume: options.resume, eager: options.eager, sync: options.sync,
                dryRun: options.sync && options.dryRun,
                pruneRoots: options.sync && options.delete ? Self.pruneRoots(entries) : [],
                checksum: options.sync && options.checksum, delta: !options.wholeFile,
                resumeKey: options.resume ? options.resumeKey : nil),
            work: work, join: join, fallback: fallback)
    }

    /// The directories given as sources: what `--delete` prunes.
    static func pruneRoots(_ entries: [OutgoingEntry]) -> [Int] {
        entries.indices.filter { entries[$0].isDirectory && !entries[$0].relative.contains("/") }
    }

    /// The entries as the sender machine knows them.
    static func machineEntries(_ entries: [OutgoingEntry]) -> [SenderMachine.Entry] {
        entries.map { entry in
            var seekable = false
            var target: [UInt8]?
            switch entry.kind {
            case .file: seekable = true
            case .symlink(_, let linkTarget): target = linkTarget
            case .directory, .stream: break
            }
            return SenderMachine.Entry(
                relative: entry.relative, isDirectory: entry.isDirectory, seekable: seekable, mode: entry.mode,
                mtimeSeconds: entry.mtimeSeconds, mtimeNanoseconds: entry.mtimeNanoseconds, symlinkTarget: target,
                hardLinkTo: entry.hardLinkTo, linked: entry.linked, sparse: entry.sparse,
                attributes: entry.attributes, listedSize: seekable ? entry.size : nil)
        }
    }

    // MARK: Hooks of a transfer over several connections

    /// Called as each entry (or range of an entry) is answered, with its index.
    var onSettle: ((Int, TransferOutcome) -> Void)?
    /// The receiver admitted the connection to the transfer; or offers no `streams`.
    var onJoined: (() -> Void)?
    var onStreamsDeclined: (() -> Void)?
    /// Computes the digest (the one agreed) of a whole file (entry index) whose range was sent:
    /// once per file and digest for all the connections.
    var fileDigest: ((Int, TransferDigest, @escaping ([UInt8]?) -> Void) -> Void)?
    /// While set, BYE waits: the receiver settles directory attributes at this connection's
    /// BYE, which must come after the other connections' files.
    var holdGoodbye = false {
        didSet { if !holdGoodbye { advance() } }
    }
    /// The receiver takes links: hard links went as links.
    var sentLinks: Bool { machine.peerOffers(Wire.Capability.links) }
    /// Bytes written to the connection.
    var bytesWritten: UInt64 { connection?.bytesWritten ?? 0 }
    /// Bytes of entry `index` the receiver held and were not sent again.
    func resumedBytes(of index: Int) -> UInt64 { resumed[index] }

    deinit {
        rawBuffer?.deallocate()
        discardOpensAhead()
    }

    /// The entries to send, as relative paths (directories included).
    public var paths: [String] { entries.map(\.relative) }

    /// Where the transfer is now.
    public var progress: TransferProgress {
        let files = entries.indices.filter { !entries[$0].isDirectory }
        return TransferProgress(
            bytesDone: bytesDone, bytesTotal: sizes.reduce(0) { $0 + ($1 ?? 0) },
            bytesSent: connection?.bytesWritten ?? 0,
            filesDone: files.filter { outcomes[$0] != nil }.count, filesTotal: files.count,
            currentPath: current.map { entries[$0.index].relative },
            seconds: started == 0 ? 0 : Double(monotonicNanoseconds() - started) / 1e9)
    }

    /// Starts sending over the connection `input`/`output` (opened here if not open yet, e.g.
    /// straight from `Socket.connect`) on `loop`. Call on the loop's thread. `completion`
    /// runs once, with every entry's outcome.
    public func start(
        input: ReadStream, output: WriteStream, on loop: EventLoop, completion: @escaping (TransferSummary) -> Void
    ) {
        precondition(self.loop == nil, "a TransferSender runs once (a caller's error)")
        self.loop = loop
        self.completion = completion
        started = monotonicNanoseconds()
        let chunk = options.chunkSize.bytes
        // `produce` asks room for a whole chunk (up to 4 MiB): slots for one and one more.
        let hasher = DigestWorker(loop: loop, slotCount: DigestWorker.slotsToHold(chunk))
        hasher.onRoom = { [weak self] in self?.produce() }
        self.hasher = hasher
        heldHasher = DigestWorker(loop: loop)
        let connection = WireConnection(
            input: input, output: output, inboundCapacity: 1 << 16,
            outboundCapacity: 4 * (chunk + Wire.frameHeaderSize) + 2 * Wire.maxControlPayload + 64,
            rateLimit: options.rateLimit)
        connection.owner = self
        self.connection = connection
        connection.outbound.append(Wire.magic)
        perform(machine.start())
        connection.start(on: loop)
    }

    /// Stops the transfer: the connection closes, and the summary's error is `.cancelled`. A
    /// file cut off this way is kept by the receiver for a later resume.
    public func cancel() {
        perform(machine.handle(.cancelled))
    }

    // MARK: WireConnectionOwner

    func wireReceived(_ connection: WireConnection) { parse() }

    func wireCanSend(_ connection: WireConnection) {
        if current != nil { produce() }
        advance()
    }

    func wirePeerClosed(_ connection: WireConnection) {
        peerClosed = true
        pump()
    }

    func wireFailed(_ connection: WireConnection, _ error: SluiceError) {
        perform(machine.handle(.connectionFailed(error)))
    }

    // MARK: Answers

    /// Parses what is buffered and reads more, as far as both can go.
    private func pump() {
        connection?.deliver()
    }

    private func parse() {
        guard let connection else { return }
        while !ended {
            switch decoder.next(connection.inbound.readable) {
            case .needMore:
                if peerClosed { perform(machine.handle(.peerClosed)) }
                return
            case .violation(let reason):
                perform(machine.violated(reason))
                return
            case .item(let item, let consumed):
                connection.inbound.consume(consumed)
                perform(machine.received(item))
                if !warnedNoDeflate && machine.canProceed { warnAboutPeer() }
                if !checksumsStarted && machine.syncing { startChecksums() }
                advance()
            }
        }
    }

    /// Announces entries while the machine may and the outbound buffer has room for them.
    /// Called again from within (a small file sent whole while it announced it), it leaves the
    /// next entry to the loop already running, so the stack does not grow with each file.
    func advance() {
        guard let connection, !advancing else { return }
        advancing = true
        defer { advancing = false }
        while machine.canProceed, !ended, connection.outbound.freeSpace >= 2 * Wire.maxControlPayload,
            !(holdGoodbye && machine.workDone)
        {
            perform(machine.proceed())
        }
    }

    /// Once the receiver said HELLO: what it will not keep of what was asked.
    private func warnAboutPeer() {
        warnedNoDeflate = true
        let lacks = { (capability: String) in !self.machine.peerOffers(capability) }
        if options.compress && lacks(Wire.Capability.deflate) {
            warn("the receiver does not accept compressed data: sending uncompressed")
        }
        if options.xattrs && lacks(Wire.Capability.xattrs) {
            warn("the receiver does not keep extended attributes: sending files without them")
        }
        if options.sync && lacks(Wire.Capability.sync) {
            warn("the receiver does not offer sync: every file is sent, and those it has are refused")
        }
        if options.owners && lacks(Wire.Capability.owners) {
            warn("the receiver does not keep owners (it is not running as root): files take its user and group")
        }
        if lacks(Wire.Capability.links) {
            if entries.contains(where: { if case .symlink = $0.kind { return true } else { return false } }) {
                warn("the receiver does not take symbolic links: they are not sent")
            }
            if entries.contains(where: { $0.hardLinkTo != nil }) {
                warn("the receiver does not take hard links: each name is sent as a file of its own")
            }
        }
    }

    // MARK: Actions

    func perform(_ actions: [SenderAction]) {
        // Messages in a row go out in one write: a write can call back into the session (room
        // came back) and announce the next entry, which must not come between HELD and END.
        var messages: [UInt8] = []
        for (position, action) in actions.enumerated() {
            if case .send(let frame) = action {
                messages += frame.encoded
                let next = actions.index(after: position)
                if next < actions.endIndex, case .send = actions[next] { continue }
                connection?.send(messages)
                messages.removeAll()
                continue
            }
            switch action {
            case .send:
                break  // sent above
            case .openEntry(let index):
                openEntry(index)
            case .startData(let index, let offset, let compressed, let range):
                startData(index, offset: offset, compressed: compressed, range: range)
            case .takeSignatures(let index, let batch):
                takeSignatures(index, batch)
            case .streamsDeclined:
                onStreamsDeclined?()
            case .joined:
                onJoined?()
            case .stopData(let index):
                if current?.index == index { closeCurrent() }
            case .settle(let index, let outcome):
                outcomes[index] = outcome
                onSettle?(index, outcome)
                onFileResult?(result(index))
            case .gone(_, let path):
                removed.append(path)
                onRemoved?(path)
            case .pruned(let root, let outcome):
                if !outcome.isStored {
                    let failure = "\(entries[root].relative): nothing removed: \(outcome)"
                    pruneFailures.append(failure)
                    warn("--delete: " + failure)
                }
            case .end(let how):
                end(how)
            }
        }
    }

    private func result(_ index: Int) -> TransferFileResult {
        let entry = entries[index]
        var result = TransferFileResult(
            path: entry.relative, isDirectory: entry.isDirectory, size: sizes[index], resumedBytes: resumed[index],
            outcome: outcomes[index] ?? .failed(reason: "not answered", kind: .io))
        Self.describeLink(&result, entry, entries, sentLinks: sentLinks)
        if machine.syncing {
            result.change = change(of: index)
            result.dryRun = options.dryRun
        }
        result.sentAsDelta = sentAsDelta.contains(index)
        return result
    }

    /// Marks `result` as a link, with its target, when `entry` is one (a second name only when
    /// the receiver takes links: else it went as a file).
    static func describeLink(
        _ result: inout TransferFileResult, _ entry: OutgoingEntry, _ entries: [OutgoingEntry], sentLinks: Bool
    ) {
        if case .symlink(_, let target) = entry.kind {
            result.isLink = true
            result.linkTarget = String(decoding: target, as: UTF8.self)
        }
        if let first = entry.hardLinkTo, sentLinks {
            result.isLink = true
            result.isHardLink = true
            result.linkTarget = entries[first].relative
        }
        if result.isLink { result.size = nil }
    }

    /// What this connection's CHECK of entry `index` found (nil: not checked here).
    func change(of index: Int) -> TransferChange? { Self.change(machine.haves[index]) }

    /// A HAVE as the library reports it (nil: not checked, a second name).
    static func change(_ have: HaveAnswer?) -> TransferChange? {
        guard let have else { return nil }
        let differences = TransferDifferences(rawValue: have.differences)
        switch have.status {
        case .absent: return .created
        case .same: return .unchanged(differences)
        case .differs: return .replaced(differences)
        }
    }

    private func warn(_ text: String) {
        warnings.append(text)
        onWarning?(text)
    }

    // MARK: Entries

    /// Opens entry `index` (a file by path, or a stream) and tells the machine what it found.
    private func openEntry(_ index: Int) {
        let entry = entries[index]
        if machine.announcedAgain.contains(index) {
            bytesDone -= counted[index]
            counted[index] = 0
        }
        switch entry.kind {
        case .directory, .symlink:
            perform(machine.handle(.entryOpened(index, .failure(LocalFailure("a directory or link has no data")))))
        case .file:
            openFileEntry(index)
        case .stream(let stream):
            current = OutgoingFile(index: index, fd: nil, stream: stream, size: nil, digest: machine.digest)
            stream.delegate = sourceWatcher
            if let loop { stream.schedule(on: loop) }
            if stream.streamStatus == .notOpen { stream.open() }
            let info = OpenedEntry(
                size: nil, mode: entry.mode, mtimeSeconds: entry.mtimeSeconds, mtimeNanoseconds: entry.mtimeNanoseconds)
            perform(machine.handle(.entryOpened(index, .success(info))))
        }
    }

    /// Entry `index`'s file is open (on a worker, `TransferSender+Reading`): to the machine.
    func fileOpened(_ index: Int, _ result: Result<OpenedSource, LocalFailure>) {
        switch result {
        case .failure(let failure):
            perform(machine.handle(.entryOpened(index, .failure(failure))))
        case .success(let opened):
            sizes[index] = opened.size
            let file = OutgoingFile(
                index: index, fd: opened.fd, stream: nil, size: opened.size, digest: machine.digest)
            file.openedMtime = opened.mtime
            file.preloaded = opened.bytes
            file.changed = opened.changed
            current = file
            let info = OpenedEntry(
                size: opened.size, mode: opened.mode, mtimeSeconds: Int64(opened.mtime.tv_sec),
                mtimeNanoseconds: UInt32(opened.mtime.tv_nsec))
            perform(machine.handle(.entryOpened(index, .success(info))))
        }
    }

    /// ACCEPT arrived: hash the prefix the receiver holds (on a worker), then send the rest.
    private func startData(_ index: Int, offset: UInt64, compressed: Bool, range: ByteRange?) {
        guard let file = current, file.index == index, let hasher else { return }
        if machine.sendingDelta, startDelta(file) { return }
        file.delta = nil
        file.compressed = compressed
        file.sparse = machine.sendingSparse && range == nil && file.fd != nil
        if let range, let fd = file.fd {
            file.range = range
            file.position = range.start + offset
            resumed[index] += offset
            resumedBytes += offset
            bytesDone += offset
            guard offset > 0 else {
                file.ready = true
                produce()
                return
            }
            if startHeldCheck(file, fd: fd, from: range.start, length: offset) { return }
            hasher.hashRange(file.digest, of: fd, from: range.start, length: offset) { [weak self] ok in
                self?.prefixHashed(file, ok)
            }
            return
        }
        if compressed {
            let made = Result { () throws(SluiceError) in
                try ParallelDeflate(format: .deflate, level: options.compressionLevel, threads: options.threads)
            }
            switch made {
            case .success(let stage):
                let driver = StageDriver(stage)
                if let loop {
                    driver.attach(to: loop) { [weak self, weak file] in
                        guard let self, let file, self.current === file else { return }
                        self.produce()
                    }
                }
                deflate = driver
            case .failure(let error):
                perform(machine.handle(.readFailed(error.description)))
                advance()
                return
            }
            if rawBuffer == nil { rawBuffer = ByteBuffer(capacity: options.chunkSize.bytes) }
        }
        guard offset > 0, let fd = file.fd else {
            file.ready = true
            produce()
            return
        }
        file.position = offset
        resumed[index] = offset
        resumedBytes += offset
        bytesDone += offset
        if startHeldCheck(file, fd: fd, from: 0, length: offset) { return }
        hasher.hashPrefix(file.digest, of: fd, length: offset) { [weak self] ok in
            self?.prefixHashed(file, ok)
        }
    }

    /// With `held-sha256`: hashes the bytes the receiver holds with SHA-256 beside the rest,
    /// which may go out at once (the agreed digest covers only the rest); not at all when the
    /// receiver said they were written under this file's TOKEN. False without `held-sha256`.
    private func startHeldCheck(_ file: OutgoingFile, fd: Int32, from start: UInt64, length: UInt64) -> Bool {
        guard machine.checksHeld, let heldHasher else { return false }
        if machine.heldVouched {
            vouchedBytes += length
        } else {
            file.heldCheck = HeldCheck(worker: heldHasher, fd: fd, from: start, length: length)
        }
        file.ready = true
        produce()
        return true
    }

    /// The held part is hashed: the rest may go out.
    private func prefixHashed(_ file: OutgoingFile, _ ok: Bool) {
        guard current === file, !ended else { return }
        guard ok else {
            perform(machine.handle(.readFailed("read \(quoted(localPath(file))): \(Errno.current)")))
            advance()
            return
        }
        file.ready = true
        produce()
    }

    func localPath(_ file: OutgoingFile) -> String {
        if case .file(let path) = entries[file.index].kind { return path }
        return entries[file.index].relative
    }

    // MARK: Data

    private enum ReadResult {
        case bytes(Int)
        /// A hole of this many bytes (a sparse file's).
        case hole(UInt64)
        case end
        case wait
        case failed(String)
    }

    /// Reads the next bytes of the current file into `buffer`.
    /// A file's bytes come from what was read with its open (a small file) or from its reads
    /// on the worker (`.wait` until the next is back); a stream's from the stream.
    private func readSource(_ file: OutgoingFile, into buffer: UnsafeMutableRawBufferPointer) -> ReadResult {
        if let fd = file.fd {
            if let bytes = file.preloaded, file.range == nil {
                let position = Int(clamping: file.position)
                guard position < bytes.count else { return .end }
                let n = min(buffer.count, bytes.count - position)
                bytes.withUnsafeBytes { whole in
                    UnsafeMutableRawBufferPointer(rebasing: buffer[0..<n])
                        .copyMemory(from: UnsafeRawBufferPointer(rebasing: whole[position..<position + n]))
                }
                return .bytes(n)
            }
            guard let reader = file.reader ?? makeReader(file, fd) else { return .failed("internal: no loop") }
            switch reader.take(into: buffer) {
            case .bytes(let n): return .bytes(n)
            case .hole(let length): return .hole(length)
            case .end: return .end
            case .wait: return .wait
            case .failed(let reason): return .failed(reason)
            }
        }
        guard let stream = file.stream else { return .end }
        guard file.streamReadable else { return .wait }
        file.streamReadable = false
        switch stream.tryRead(into: buffer) {
        case .processed(let n) where n > 0: return .bytes(n)
        case .processed(0): return .end
        case .processed:
            let error = stream.streamError ?? SluiceError(.system(.ioError), operation: "read", subject: stream.name)
            return .failed(error.description)
        case .wouldBlock: return .wait
        }
    }

    /// Appends DATA frames of the current file until about a chunk waits to be written (so
    /// reads and socket writes alternate chunk by chunk, as in a copy pipeline, rather than in
    /// bursts that leave the receiver idle), while the hasher has room for another chunk; at
    /// the end of the file, has the digest finished on the worker, then END goes out.
    func produce() {
        loop?.preconditionInLoop("TransferSender.produce")
        guard let file = current, file.ready, !file.sourceEnded || file.compressed, machine.sendingIndex == file.index,
            let connection, let hasher
        else { return }
        if let delta = file.delta, delta.basis != nil, file.fd != nil, machine.sendingDelta {
            produceDelta(file, delta, connection)
            return
        }
        let chunk = options.chunkSize.bytes
        while current === file, !file.finalizing, file.changeCheck == .none, connection.outbound.readableBytes < chunk,
            connection.outbound.reserve(chunk + Wire.frameHeaderSize + 64)
        {
            guard hasher.hasRoom(for: chunk) else { return }  // `onRoom` calls again
            let frameStart = connection.outbound.writeIndex
            let payload = UnsafeMutableRawBufferPointer(
                rebasing: connection.outbound.tail[Wire.frameHeaderSize..<Wire.frameHeaderSize + chunk])
            var produced = 0
            if file.compressed, let deflate, var raw = rawBuffer {
                if raw.isEmpty && !file.sourceEnded {
                    let target = raw.tail
                    switch readSource(file, into: target) {
                    case .bytes(let n):
                        raw.produced(n)
                        noteRead(file, UnsafeRawBufferPointer(rebasing: target[0..<n]))
                    case .end, .hole: file.sourceEnded = true  // no holes in compressed data
                    case .wait:
                        rawBuffer = raw
                        return
                    case .failed(let reason):
                        rawBuffer = raw
                        readFailed(reason)
                        return
                    }
                }
                let input: UnsafeRawBufferPointer? = raw.isEmpty ? nil : raw.readable
                let step = Result { () throws(SluiceError) in try deflate.step(input: input, output: payload) }
                guard case .success(let progress) = step else {
                    rawBuffer = raw
                    if case .failure(let error) = step { readFailed(error.description) }
                    return
                }
                raw.consume(progress.consumed)
                rawBuffer = raw
                produced = progress.produced
                if progress.finished { file.compressionFinished = true }
                // The blocks are on the workers: the driver's wake handler calls again.
                if deflate.isWaitingForWorkers { return }
            } else {
                switch readSource(file, into: payload) {
                case .bytes(let n):
                    produced = n
                    noteRead(file, UnsafeRawBufferPointer(rebasing: payload[0..<n]))
                case .hole(let length):
                    // HOLE: type, length 8, the hole's length.
                    connection.outbound.setUInt8(Wire.MessageType.hole.rawValue, at: frameStart)
                    connection.outbound.setUInt32(8, at: frameStart + 1)
                    connection.outbound.setUInt32(UInt32(truncatingIfNeeded: length >> 32), at: frameStart + 5)
                    connection.outbound.setUInt32(UInt32(truncatingIfNeeded: length), at: frameStart + 9)
                    connection.outbound.produced(Wire.frameHeaderSize + 8)
                    hasher.updateHole(file.digest, length: length)
                    file.position += length
                    bytesDone += length
                    counted[file.index] += length
                    holeBytes += length
                case .end:
                    file.sourceEnded = true
                case .wait:
                    return
                case .failed(let reason):
                    readFailed(reason)
                    return
                }
            }
            if produced > 0 {
                connection.outbound.setUInt8(Wire.MessageType.data.rawValue, at: frameStart)
                connection.outbound.setUInt32(UInt32(produced), at: frameStart + 1)
                connection.outbound.produced(Wire.frameHeaderSize + produced)
                connection.flush()
            }
            if file.sourceEnded && (!file.compressed || file.compressionFinished) {
                dataEnded(file)
                return
            }
        }
    }

    private func noteRead(_ file: OutgoingFile, _ bytes: UnsafeRawBufferPointer) {
        hasher?.update(file.digest, bytes)
        file.position += UInt64(bytes.count)
        bytesDone += UInt64(bytes.count)
        counted[file.index] += UInt64(bytes.count)
        bytesSentOfFiles += UInt64(bytes.count)
    }

    func readFailed(_ reason: String) {
        perform(machine.handle(.readFailed(reason)))
        advance()
    }

    /// The file's bytes are all out: once its digest is final (here when little of it is left
    /// to hash and nothing queued, else on the worker), END goes out with the size and digest,
    /// and the next entry is announced.
    private func dataEnded(_ file: OutgoingFile) {
        // Once: a flush within `produce` can write, call back and reach the end first.
        guard let hasher, !file.finalizing else { return }
        if let reader = file.reader, file.range == nil, file.delta == nil {
            // Whether it changed while it was sent: asked now, on the worker, then on (unless
            // its one read just told).
            if file.changeCheck == .none, let changed = reader.changedAtEnd {
                file.changed = changed
                file.changeCheck = .done
            }
            switch file.changeCheck {
            case .running: return
            case .none:
                file.changeCheck = .running
                reader.checkChanged { [weak self] changed in
                    file.changed = changed
                    file.changeCheck = .done
                    guard let self, self.current === file, !self.ended else { return }
                    self.dataEnded(file)
                }
                return
            case .done: break
            }
        }
        file.finalizing = true
        warnIfChanged(file)
        if file.size == nil { sizes[file.index] = file.position }
        if file.range == nil, file.heldCheck == nil, let digest = hasher.finalizeNow(file.digest) {
            // A small file: its digest here and now, END at once.
            perform(machine.handle(.dataEnded(size: file.position, digest: digest)))
            advance()
            return
        }
        hasher.finalize(file.digest) { [weak self] digest in
            HeldCheck.outcome(of: file.heldCheck) { [weak self] outcome in
                self?.digestsReady(file, digest, outcome)
            }
        }
    }

    /// The file's digest, and its held bytes' SHA-256 when they are checked apart, are ready:
    /// END (or RANGE-END, after the whole file's digest) goes out.
    private func digestsReady(_ file: OutgoingFile, _ digest: [UInt8], _ outcome: HeldCheck.Outcome) {
        guard current === file, !ended else { return }
        let held: [UInt8]?
        switch outcome {
        case .none: held = nil
        case .digest(let value): held = value
        case .unreadable:
            readFailed("read \(quoted(localPath(file))): cannot read the part the receiver holds")
            return
        }
        guard let range = file.range else {
            perform(machine.handle(.dataEnded(size: file.position, digest: digest, held: held)))
            advance()
            return
        }
        // A range: its END carries the whole file's digest too, computed once for all.
        guard let fileDigest = self.fileDigest else {
            // Ranges come only from a ParallelTransferSender, which sets it.
            perform(machine.handle(.readFailed("internal: no whole-file digest for a range")))
            advance()
            return
        }
        fileDigest(file.index, self.machine.digest) { [weak self] whole in
            guard let self, self.current === file, !self.ended else { return }
            if let whole {
                let length = file.position - range.start
                self.perform(
                    self.machine.handle(.rangeEnded(length: length, digest: digest, fileDigest: whole, held: held)))
            } else {
                self.perform(
                    self.machine.handle(.readFailed("read \(quoted(self.localPath(file))): cannot hash it")))
            }
            self.advance()
        }
    }

    /// A whole file written to while it was read is stored as read, which may mix old and new
    /// bytes (its digest is of what was sent, so the receiver cannot tell): say so, as tar does.
    /// Ranges are not warned about: the whole file is hashed apart from them, and a change
    /// usually makes that check fail.
    /// (Its end was checked by the last read, on the worker.)
    private func warnIfChanged(_ file: OutgoingFile) {
        guard file.fd != nil, file.range == nil, file.changed else { return }
        warn(
            "\(quoted(localPath(file))) changed while it was being sent: the copy stored holds the bytes as they were "
                + "read, \(file.position) of them")
    }

    private func closeCurrent() {
        guard let file = current else { return }
        current = nil
        if let fd = file.fd {
            if let reader = file.reader {
                reader.close(fd)  // once its reads have run
            } else {
                closeDescriptor(fd)
            }
        }
        if let stream = file.stream {
            stream.delegate = nil
            stream.close()
            if let loop { stream.remove(from: loop) }
        }
        if var raw = rawBuffer {
            raw.consume(raw.readableBytes)
            rawBuffer = raw
        }
        deflate?.cancel()
        deflate = nil
        if !file.finalizing { hasher?.discardFilling() }
    }

    /// The stream being sent has bytes (or its end, or an error).
    fileprivate func sourceReady(_ stream: ByteStream, _ event: StreamEvent) {
        guard let file = current, file.stream === stream else { return }
        switch event {
        case .hasBytesAvailable, .endEncountered, .errorOccurred:
            file.streamReadable = true
            connection?.flush()
            produce()
        default:
            break  // openCompleted, hasSpaceAvailable: nothing to read yet
        }
    }

    // MARK: Ending

    private func end(_ how: SessionEnd) {
        guard !ended else { return }
        ended = true
        closeCurrent()
        discardOpensAhead()
        let name = connection?.output.name
        let error: SluiceError?
        switch how {
        case .goodbye:
            error = nil
        case .violation(let reason):
            error = SluiceError(.protocolViolation, operation: "send", subject: name, detail: reason)
        case .turnedAway(let reason):
            // The receiver's end alone (its machine turns a sender away): not met here.
            error = SluiceError(.unavailable, operation: "send", subject: name, detail: reason)
        case .peerError(let reason) where reason.hasPrefix(Wire.expiredPrefix):
            // The key authenticated, but the code it came from has served its transfers.
            error = SluiceError(.authenticationFailed, operation: "send", subject: name, detail: "receiver: \(reason)")
        case .peerError(let reason) where reason.hasPrefix(Wire.busyPrefix):
            // Serving all the sessions it allows: nothing was refused, try again later.
            error = SluiceError(.unavailable, operation: "send", subject: name, detail: "receiver: \(reason)")
        case .peerError(let reason):
            error = SluiceError(.refused, operation: "send", subject: name, detail: "receiver: \(reason)")
        case .closedEarly(let detail):
            error = SluiceError(.truncatedData, operation: "send", subject: name, detail: detail)
        case .timedOut:
            error = SluiceError(.timedOut, operation: "send", subject: name)
        case .connectionFailed(let failure):
            error = failure
        case .cancelled:
            error = SluiceError(.cancelled, operation: "send", subject: name)
        }
        if let connection {
            let graceful: Bool
            switch how {
            case .goodbye, .violation: graceful = true
            case .peerError, .closedEarly, .timedOut, .connectionFailed, .cancelled, .turnedAway: graceful = false
            }
            if graceful && !connection.outbound.isEmpty {
                connection.closeAfterFlush()
            } else {
                connection.close()
            }
        }
        for index in entries.indices where outcomes[index] == nil {
            let reason = "not transferred: " + (error?.description ?? "no answer")
            outcomes[index] = .failed(reason: reason, kind: .io)
        }
        let stored = entries.indices.filter { outcomes[$0] == .stored }
        var summary = TransferSummary(
            files: stored.filter { !entries[$0].isDirectory }.count,
            directories: stored.filter { entries[$0].isDirectory }.count,
            bytes: bytesSentOfFiles, bytesSent: connection?.bytesWritten ?? 0, resumedBytes: resumedBytes,
            seconds: started == 0 ? 0 : Double(monotonicNanoseconds() - started) / 1e9,
            results: entries.indices.map(result), error: error,
            digest: machine.peerCapabilities.isEmpty ? nil : machine.digest)
        summary.holeBytes = holeBytes
        summary.vouchedBytes = vouchedBytes
        summary.bytesReceived = connection?.bytesRead ?? 0
        summary.matchedBytes = matchedBytes
        summary.removed = removed
        summary.pruneFailures = pruneFailures
        let done = completion
        completion = nil
        done?(summary)
    }
}

/// Receives the events of a stream being sent, for its sender.
private final class SourceWatcher: ByteStreamDelegate {
    weak var sender: TransferSender?

    init(_ sender: TransferSender) { self.sender = sender }

    func stream(_ stream: ByteStream, handle event: StreamEvent) {
        sender?.sourceReady(stream, event)
    }
}
