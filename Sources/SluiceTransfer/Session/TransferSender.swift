import Sluice

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
/// Directories are walked while the transfer runs: `init` only checks the sources given (it
/// throws for one that does not exist, as a command line's missing operand is an error), and
/// once started a worker lists what lies below them, a step of a few hundred entries at a time
/// and never more than about a thousand entries ahead of what has been announced
/// (`TransferSender+Walk`). The first file goes at once however large the tree, memory for the
/// entries waiting stays bounded, and goodbye waits for the walk's end; `paths` and `progress`
/// count what is listed so far. What cannot be listed below a source is a warning
/// (`listingIncomplete`).
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
public final class TransferSender: ProtocolRole {
    public let options: TransferSendOptions
    /// Warnings found while listing the sources (skipped links and special files, what could
    /// not be listed), and those of the transfer (`onWarning`'s).
    public internal(set) var warnings: [String] = []
    /// Called as each entry is answered by the receiver (or fails on this side).
    public var onFileResult: ((TransferFileResult) -> Void)?
    /// Called for problems that do not fail the transfer (compression not offered by the
    /// receiver).
    public var onWarning: ((String) -> Void)?
    /// With `delete`: called with each path the receiver removed (would remove, on a dry run).
    public var onRemoved: ((String) -> Void)?

    /// The entries listed so far (the walk adds to them while the transfer runs); with `watch`,
    /// those answered are forgotten as it goes (`forgetAnswered`).
    var entries: IndexedWindow<OutgoingEntry>
    /// The streams among the sources (`OutgoingEntry.Kind.stream`'s numbers).
    let streams: [ReadStream]
    var machine: SenderMachine
    /// Each entry's outcome, size and held bytes, and the bytes counted (`SendTally`).
    var tally: SendTally
    /// With `checksum`: the digests to compute, and how many run (`TransferSender+Checksum`).
    var checksums = SenderChecksums()
    var current: OutgoingFile?
    /// The connection's protocol loop and ending, with this sender as its role (from `start`).
    private(set) var session: ProtocolSession<TransferSender>?
    var connection: WireConnection? { session?.connection }
    var loop: EventLoop? {
        // The walk starts with the session (`start` sets the loop).
        didSet { if oldValue == nil { walkMore() } }
    }
    /// The walk of the sources below what `init` checked, on a worker (`TransferSender+Walk`).
    var walker = SenderWalk()
    private(set) var hasher: DigestWorker?
    /// Hashes held bytes with SHA-256 (`HeldCheck`) apart from `hasher`'s jobs.
    private(set) var heldHasher: DigestWorker?
    /// True while `advance` announces entries.
    private var advancing = false
    /// Whether small files go in BATCHes, and the timer closing the open one
    /// (`TransferSender+Batch`).
    var batching = SenderBatching()
    /// A BATCH is being written: its header waits in the outbound buffer (`WireConnection.hold`)
    /// for its length, until `closeBatch`, at the end of the loop's turn at the latest.
    var batchOpen: Bool { connection?.heldFrom != nil }
    var completion: ((TransferSummary) -> Void)?
    private(set) var started: UInt64 = 0
    /// Ended before it started (cancelled).
    var endedUnstarted = false
    var ended: Bool { session?.ended ?? endedUnstarted }
    var warnedNoDeflate = false
    /// Compresses the current file (raw deflate in pigz-style blocks on the worker pool), when
    /// it is sent compressed.
    var deflate: StageDriver?
    var rawBuffer: ByteBuffer?
    private(set) lazy var sourceWatcher = SourceWatcher(self)
    /// Reads of the files' data, chunk after chunk, in order (`SourceReader`).
    private(set) lazy var readLane = SerialLane(pool: .shared)
    private(set) lazy var readBuffers = ReadBufferStock(capacity: options.chunkSize.bytes, keep: Self.readAhead + 2)
    /// Opens of the entries to come, in batches (`TransferSender+Reading`), and what they opened.
    private(set) lazy var openLane = SerialLane(pool: .shared)
    var opens = SenderOpens()
    /// `send --watch`: the session kept open after the first pass (`TransferSender+Watch`).
    var watch = SenderWatch()

    /// A sender of `paths` (files and directories). Checks the paths now: throws for one that
    /// does not exist (`stat "x": No such file or directory (errno 2)`), a directory that
    /// cannot be opened, or a `--files-from` path that is not there. What lies below the
    /// directories is listed once the transfer has started, on a worker, while it sends (the
    /// first file goes before the walk ends; `progress.filesTotal` grows as the walk goes);
    /// `warning` hears, on the loop's thread once started, about what is skipped and what
    /// cannot be listed (a directory that cannot be read is not sent, nor what it holds, and
    /// `delete` then removes nothing).
    public convenience init(
        paths: [String], options: TransferSendOptions = TransferSendOptions(), warning: ((String) -> Void)? = nil
    ) throws(SluiceError) {
        try self.init(sources: paths.map { .path($0) }, options: options, warning: warning)
    }

    /// A sender of `sources`: paths and streams (checked and listed as `init(paths:)` says).
    public convenience init(
        sources: [TransferSource], options: TransferSendOptions = TransferSendOptions(),
        warning: ((String) -> Void)? = nil
    ) throws(SluiceError) {
        let walk = try SourceTree.Walk(sources, selection: options.selection, options: options.sourceOptions)
        self.init(
            entries: [], streams: SourceTree.streams(sources), options: options, work: nil, join: nil,
            fallback: nil, listed: false, prunesArriving: options.sync && options.delete && walk.mayPrune)
        walker = SenderWalk(SourceWalk(walk), warning: warning)
    }

    /// One connection of a transfer over several (`ParallelTransferSender`): sends `work` of
    /// `entries` after joining the transfer as `join`, or `fallback` alone when the receiver
    /// does not offer `streams`. With `listed` false, the entries arrive later
    /// (`entriesArrived`), and `work` must be nil.
    init(
        entries: [OutgoingEntry], streams: [ReadStream], options: TransferSendOptions, work: [SenderMachine.Work]?,
        join: TransferJoin?, fallback: [SenderMachine.Work]?, listed: Bool = true, prunesArriving: Bool = false,
        listingIncomplete: Bool = false
    ) {
        self.options = options
        self.entries = IndexedWindow(entries)
        self.streams = streams
        tally = SendTally(entries)
        machine = SenderMachine(
            entries: Self.machineEntries(entries),
            settings: .init(
                compress: options.compress, resume: options.resume, eager: options.eager, digests: options.digests,
                sync: options.sync,
                dryRun: options.sync && options.dryRun,
                pruneRoots: options.sync && options.delete ? Self.pruneRoots(entries) : [],
                prunesArriving: prunesArriving, checksum: options.sync && options.checksum,
                delta: !options.wholeFile, resumeKey: options.resume ? options.resumeKey : nil,
                heldSHA256: options.offersHeldSHA256),
            work: work, join: join, fallback: fallback, listed: listed)
        machine.listingIncomplete = listingIncomplete
    }

    /// The directories given as sources: what `--delete` prunes (`first` being the index of
    /// `entries`' first).
    static func pruneRoots(_ entries: [OutgoingEntry], first: Int = 0) -> [Int] {
        entries.indices.filter { entries[$0].isDirectory && !entries[$0].relative.contains("/") }.map { $0 + first }
    }

    /// The entries as the sender machine knows them.
    static func machineEntries(_ entries: [OutgoingEntry]) -> [SenderMachine.Entry] {
        entries.map { entry in
            var seekable = false
            var target: [UInt8]?
            var special: SenderMachine.Special?
            switch entry.kind {
            case .file: seekable = true
            case .symlink(_, let linkTarget): target = linkTarget
            case .special(let type, let major, let minor):
                special = SenderMachine.Special(type: type, major: major, minor: minor)
            case .directory, .stream: break
            }
            return SenderMachine.Entry(
                relative: entry.relative, isDirectory: entry.isDirectory, seekable: seekable, mode: entry.mode,
                mtimeSeconds: entry.mtimeSeconds, mtimeNanoseconds: entry.mtimeNanoseconds, symlinkTarget: target,
                hardLinkTo: entry.hardLinkTo, linked: entry.linked, sparse: entry.sparse,
                attributes: entry.attributes, listedSize: seekable ? entry.size : nil, special: special)
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
    var sentLinks: Bool { inspect { $0.offers.links } }
    /// Bytes written to the connection.
    var bytesWritten: UInt64 { connection?.bytesWritten ?? 0 }
    /// Bytes of entry `index` the receiver held and were not sent again.
    func resumedBytes(of index: Int) -> UInt64 { tally.resumed[index] }

    deinit {
        discardOpensAhead()
    }

    /// The entries to send, as relative paths (directories included): those listed so far (the
    /// walk lists them while the transfer runs: every one once it has ended).
    public var paths: [String] { entries.map(\.relative) }

    /// Where the transfer is now. `filesTotal` and `bytesTotal` count the files listed so far:
    /// they grow while the walk runs.
    public var progress: TransferProgress {
        let files = entries.indices.filter { !entries[$0].isDirectory }
        return TransferProgress(
            bytesDone: tally.bytesDone, bytesTotal: watch.forgottenBytes + tally.sizes.reduce(0) { $0 + ($1 ?? 0) },
            bytesSent: connection?.bytesWritten ?? 0,
            filesDone: watch.forgottenFiles + files.filter { tally.outcomes[$0] != nil }.count,
            filesTotal: watch.forgottenFiles + files.count,
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
        let session = ProtocolSession(
            role: self, connection: connection, loop: loop, decoding: .toSender, operation: "send",
            peerName: "receiver")
        self.session = session
        session.start()
    }

    /// Stops the transfer: the connection closes, and the summary's error is `.cancelled`. A
    /// file cut off this way is kept by the receiver for a later resume.
    public func cancel() {
        perform(machine.connectionEnded(.cancelled))
    }

    // MARK: ProtocolRole

    func connectionHasRoom() {
        if current != nil { produce() }
        advance()
    }

    /// After each answer: what the receiver said it will not keep, the checksums a sync
    /// needs, and the entries the machine may now announce.
    func tookMessage() {
        if !warnedNoDeflate && inspect({ $0.canProceed }) { warnAboutPeer() }
        if !checksums.started && inspect({ $0.syncing }) { startChecksums() }
        advance()
    }

    /// Reads the machine where it lies. A computed property read straight off `machine` (a
    /// stored property of this class) copies the whole struct first, each of its references
    /// retained and then released, whenever the getter calls code the optimiser cannot see
    /// through; through an `inout` access the getter borrows it in place. Several of those
    /// copies a file made up about a tenth of the sender's user time on a tree of small files
    /// (issue 52, Benchmarks/RESULTS.md).
    @inline(__always)
    func inspect<Value>(_ read: (inout SenderMachine) -> Value) -> Value {
        read(&machine)
    }

    /// Announces entries while the machine may and the outbound buffer has room for them.
    /// Called again from within (a small file sent whole while it announced it), it leaves the
    /// next entry to the loop already running, so the stack does not grow with each file.
    func advance() {
        guard let connection, !advancing else { return }
        advancing = true
        // What the entries announce in a row (CHECKs above all) goes out in one write; should
        // that write make room, more is announced.
        while mayAnnounce(connection) {
            connection.corking {
                while mayAnnounce(connection) { perform(machine.proceed()) }
            }
        }
        advancing = false
        walkMore()
        noteWatch()
    }

    /// Whether `advance` announces another entry (or says goodbye) now: the machine may, and
    /// the outbound buffer has room.
    private func mayAnnounce(_ connection: WireConnection) -> Bool {
        inspect({ $0.canProceed }) && !ended && connection.outbound.freeSpace >= 2 * Wire.maxControlPayload
            && !(holdGoodbye && inspect({ $0.workDone }))
    }

    /// Once the receiver said HELLO: what it will not keep of what was asked.
    func warnAboutPeer() {
        warnedNoDeflate = true
        let lacks = { (capability: String) in !self.machine.peerOffers(capability) }
        if options.compress && lacks(Wire.Capability.deflate) {
            warn("the receiver does not accept compressed data: sending uncompressed")
        }
        if options.xattrs && lacks(Wire.Capability.xattrs) {
            warn("the receiver does not keep extended attributes: sending files without them")
        }
        if options.sync && lacks(Wire.Capability.sync) {
            warn(
                "the receiver does not let senders replace entries (it needs receive --sync): "
                    + "every file is sent, and those it has are refused")
        }
        if options.sync && options.delete && lacks(Wire.Capability.delete) {
            warn("the receiver does not let senders remove entries (it needs receive --delete): nothing is removed")
        }
        if options.owners && lacks(Wire.Capability.owners) {
            warn("the receiver does not keep owners (it is not running as root): files take its user and group")
        }
        warnAboutEntries(entries.indices)
    }

    // MARK: Actions

    func perform(_ actions: [SenderAction]) {
        // Messages in a row go out in one write: a write can call back into the session (room
        // came back) and announce the next entry, which must not come between HELD and END.
        var messages: [UInt8] = []
        for (position, action) in actions.enumerated() {
            if case .send(let frame) = action {
                if batchOpen, !batchHolds(frame) {
                    if !messages.isEmpty { connection?.send(messages) }
                    messages.removeAll()
                    closeBatch()
                }
                // A FILE with nothing before it (no XATTR, OWNER or TOKEN) may open one.
                if !batchOpen, messages.isEmpty, opensBatch(frame) { openBatch() }
                messages += frame.encoded
                let next = actions.index(after: position)
                if next < actions.endIndex, case .send = actions[next] { continue }
                connection?.send(messages)
                messages.removeAll()
                if batchOpen { closeBatchIfFull() }
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
                tally.settled(index, outcome)
                onSettle?(index, outcome)
                onFileResult?(result(index))
            case .gone(_, let path):
                tally.gone(path)
                onRemoved?(path)
            case .pruned(let path, let outcome):
                if !outcome.isStored {
                    var refused = false
                    if case .refused = outcome { refused = true }
                    let failure = "\(path): nothing removed: \(outcome)"
                    tally.pruneFailed(failure, refused: refused)
                    warn("--delete: " + failure)
                }
            case .operated(let operation, let outcome):
                operated(operation, outcome)
            case .removed(let path):
                tally.gone(path)
                onRemoved?(path)
            case .end(let how):
                end(how)
            }
        }
    }

    func result(_ index: Int) -> TransferFileResult {
        // The entry's fields read in place (`entries[index]` borrowed), not the entry copied.
        var result = TransferFileResult(
            path: entries[index].relative, isDirectory: entries[index].isDirectory, size: tally.sizes[index],
            resumedBytes: tally.resumed[index],
            outcome: tally.outcomes[index] ?? .failed(reason: "not answered", kind: .io))
        Self.describeLink(&result, entries[index], entries, sentLinks: sentLinks)
        if inspect({ $0.syncing }) {
            result.change = change(of: index)
            result.dryRun = options.dryRun
        }
        result.sentAsDelta = tally.sentAsDelta.contains(index)
        return result
    }

    /// Marks `result` as a link, with its target, when `entry` is one (a second name only when
    /// the receiver takes links: else it went as a file), or as a device, FIFO or socket.
    static func describeLink<Entries: RandomAccessCollection<OutgoingEntry>>(
        _ result: inout TransferFileResult, _ entry: OutgoingEntry, _ entries: Entries, sentLinks: Bool
    ) where Entries.Index == Int {
        if case .symlink(_, let target) = entry.kind {
            result.isLink = true
            result.linkTarget = String(decoding: target, as: UTF8.self)
        }
        if case .special(let type, _, _) = entry.kind {
            result.isDevice = type.isDevice
            result.isSpecial = !type.isDevice
            result.size = nil
        }
        if let first = entry.hardLinkTo, sentLinks {
            result.isLink = true
            result.isHardLink = true
            result.linkTarget = entries.indices.contains(first) ? entries[first].relative : nil
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

    func warn(_ text: String) {
        warnings.append(text)
        onWarning?(text)
    }
}
