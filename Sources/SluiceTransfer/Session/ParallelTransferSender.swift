import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// Something that reports a transfer's progress: a `TransferSender` or a
/// `ParallelTransferSender`.
public protocol TransferProgressSource: AnyObject {
    var progress: TransferProgress { get }
}

extension TransferSender: TransferProgressSource {}

/// Sends one transfer over several connections to a `TransferReceiver` that offers parallel
/// streams (`sluice send --streams N`): where one connection is capped (per-flow shaping, a
/// long path with a small window), N of them carry about N times as much.
///
/// ```swift
/// let sender = try ParallelTransferSender(paths: ["big.iso", "photos"], streams: 4)
/// sender.start(connect: { Socket.connect(host: "backup.local", port: 9000) }, on: loop) { summary in
///     print(summary.files, summary.error as Any)
/// }
/// loop.run()
/// ```
///
/// The first connection joins the receiver under a random transfer id (JOIN, inside the same
/// authenticated connection as everything else) and sends the directories; the others join the
/// same id once it is admitted. The sources are walked while the transfer runs, on a worker, as
/// a `TransferSender` walks them (`init` checks the sources given and throws as it does), and
/// each step's entries are shared out as they come (`StreamPlan.Planner`): a file for another
/// connection than the first waits until the directories listed before it are answered on the
/// first. Files are shared out: each large file is split into ranges, one
/// per connection, each range sent at once with its own SHA-256 and the whole file's, written in
/// place by the receiver and renamed into place when every range is in and the whole file
/// verifies; smaller files go whole to the least loaded connection. A connection that fails
/// fails only its own ranges and files; the receiver keeps what every range holds, and the
/// next send of the same files resumes each range where it stopped. A receiver that does not
/// offer streams gets everything over the first connection, as from a `TransferSender`.
///
/// As one task of a task group (`group`: `sluice send --group`), its connections join the group
/// the receiver keeps for all the tasks (by an id drawn from the group's name, so every task
/// names the same), and the files the shard splits across tasks
/// (`FileSelection.balancedByBytes` with `splitting`) go as this task's ranges of them, each
/// with the whole file's digest (every task holding a range reads the whole file for it), which
/// the receiver checks when the last range of the file, whichever task sends it, is in.
public final class ParallelTransferSender: TransferProgressSource {
    public let options: TransferSendOptions
    /// Connections asked for.
    public let streams: Int
    /// The task group this sender is a task of, if any.
    public let group: TaskGroup?
    /// Warnings found while listing the sources.
    public private(set) var warnings: [String] = []
    /// Called as each entry is answered (a file in ranges once all its ranges are).
    public var onFileResult: ((TransferFileResult) -> Void)?
    public var onWarning: ((String) -> Void)?
    /// With `delete`: called with each path the receiver removed (would remove, on a dry run).
    public var onRemoved: ((String) -> Void)?
    /// Called for each connection once it has joined the transfer (its index).
    public var onStreamJoined: ((Int) -> Void)?

    /// The entries listed so far.
    private var entries: [OutgoingEntry] = []
    private let streamSources: [ReadStream]
    /// Something below the sources could not be listed so far (a warning said what): it is not
    /// sent, and `delete` removes nothing.
    public private(set) var listingIncomplete = false
    /// The walk (`TransferSender+Walk`'s, stepped here): nil once it has ended.
    private var walk: SourceWalk?
    private var walking = false
    /// The walk has listed everything.
    private(set) var walkEnded = false
    /// Entries a step of the walk lists; while `walkHeld`, no step starts; `onWalkStep` hears
    /// each step's count once shared out. For tests.
    var walkStep = TransferSender.walkStepEntries
    var walkHeld = false {
        didSet { if !walkHeld { walkMore() } }
    }
    var onWalkStep: ((Int) -> Void)?
    private let walkWarning: ((String) -> Void)?
    private let prunesArriving: Bool
    private var planner: StreamPlan.Planner
    /// Work planned for connection `k` (> 0) and not handed to it yet: each item waits for the
    /// directories listed before its entry (`needs` of them) to be answered on connection 0,
    /// and for its connection to start. Connection `k` has been told no more will come.
    private var held: [[(work: SenderMachine.Work, needs: Int)]]
    private var toldLast: [Bool]
    private var directoriesListed = 0
    private var directoriesAnswered = 0
    /// Ranges per entry split into ranges, and their answers so far.
    private var rangeCounts: [Int: Int] = [:]
    private var rangeOutcomes: [Int: [TransferOutcome]] = [:]
    private var outcomes: [TransferOutcome?] = []
    private var senders: [TransferSender] = []
    private var summaries: [Int: TransferSummary] = [:]
    private var connect: (() -> (ReadStream, WriteStream))?
    private var loop: EventLoop?
    private var completion: ((TransferSummary) -> Void)?
    private var started: UInt64 = 0
    /// Whether the others may start, everything goes over the first, the walk goes on.
    private(set) var join = JoinLifecycle()
    /// Whole-file digests by entry and algorithm (every connection agrees on the same one with
    /// one receiver; keyed by both all the same).
    private var digests: [DigestKey: DigestState] = [:]
    private var digestWorker: DigestWorker?
    private var transferID: [UInt8]?

    private struct DigestKey: Hashable {
        var entry: Int
        var algorithm: TransferDigest
    }

    private enum DigestState {
        case computing([([UInt8]?) -> Void])
        case done([UInt8]?)
    }

    /// A sender of `paths` over `streams` connections.
    public convenience init(
        paths: [String], streams: Int, options: TransferSendOptions = TransferSendOptions(),
        warning: ((String) -> Void)? = nil
    ) throws(SluiceError) {
        try self.init(sources: paths.map { .path($0) }, streams: streams, options: options, warning: warning)
    }

    /// A sender of `sources` over `streams` connections (2 to 64; streams of unknown size go
    /// whole over the first).
    ///
    /// As a task of `group`, `streams` may be 1.
    public init(
        sources: [TransferSource], streams: Int, options: TransferSendOptions = TransferSendOptions(),
        group: TaskGroup? = nil, warning: ((String) -> Void)? = nil
    ) throws(SluiceError) {
        precondition(
            ((group == nil ? 2 : 1)...Wire.maxStreams).contains(streams), "streams must be 2...\(Wire.maxStreams)")
        self.options = options
        self.streams = streams
        self.group = group
        let walk = try SourceTree.Walk(sources, selection: options.selection, options: options.sourceOptions)
        prunesArriving = options.sync && options.delete && walk.mayPrune
        self.walk = SourceWalk(walk)
        walkWarning = warning
        streamSources = SourceTree.streams(sources)
        planner = StreamPlan.Planner(streams: streams)
        held = Array(repeating: [], count: streams)
        toldLast = Array(repeating: false, count: streams)
    }

    /// The entries to send, as relative paths: those listed so far.
    public var paths: [String] { entries.map(\.relative) }

    /// Connections used: `streams`, or 1 when the receiver offers no streams.
    public var streamsUsed: Int { join.declined ? 1 : streams }

    /// Bytes written to each connection so far (protocol included).
    public var bytesPerStream: [UInt64] { senders.map(\.bytesWritten) }

    public var progress: TransferProgress {
        let parts = senders.map(\.progress)
        let files = entries.indices.filter { !entries[$0].isDirectory }
        return TransferProgress(
            bytesDone: parts.reduce(0) { $0 + $1.bytesDone },
            bytesTotal: entries.reduce(0) { $0 + ($1.size ?? 0) },
            bytesSent: parts.reduce(0) { $0 + $1.bytesSent },
            filesDone: files.filter { outcomes[$0] != nil }.count, filesTotal: files.count,
            currentPath: parts.lazy.compactMap(\.currentPath).first,
            seconds: started == 0 ? 0 : Double(monotonicNanoseconds() - started) / 1e9)
    }

    /// Starts the transfer on `loop` (call on its thread): `connect` makes each connection
    /// (its streams opened here if not yet open; over TLS, secured by the caller). `completion`
    /// runs once, when every connection has ended.
    public func start(
        connect: @escaping () -> (ReadStream, WriteStream), on loop: EventLoop,
        completion: @escaping (TransferSummary) -> Void
    ) {
        precondition(self.loop == nil, "a ParallelTransferSender runs once (a caller's error)")
        self.loop = loop
        self.connect = connect
        self.completion = completion
        started = monotonicNanoseconds()
        digestWorker = DigestWorker(loop: loop)
        // The system generator is the kernel's CSPRNG (getrandom): an id nobody can guess.
        var random = SystemRandomNumberGenerator()
        let id = group?.id ?? (0..<Wire.transferIDBytes).map { _ in UInt8.random(in: 0...255, using: &random) }
        transferID = id
        // What the walk has listed goes with the next step; a receiver without streams gets
        // every entry over this connection (`takeEveryEntry`) — but a task of a group, whose
        // ranges only a group puts together, ends with the reason.
        let first = TransferSender(
            entries: [], streams: streamSources, options: options, work: [],
            join: join(index: 0, id: id), fallback: group == nil ? [] : nil, listed: false,
            prunesArriving: prunesArriving)
        first.holdGoodbye = true
        first.onJoined = { [weak self] in self?.take(.joined) }
        first.onStreamsDeclined = { [weak self] in self?.take(.declined) }
        run(first, index: 0)
        walkMore()
    }

    /// The JOIN of connection `index`.
    private func join(index: Int, id: [UInt8]) -> TransferJoin {
        TransferJoin(
            id: id, index: index, count: streams,
            group: group.map { TaskGroupJoin(task: $0.task, tasks: $0.tasks, name: Array($0.name.utf8)) })
    }

    /// Stops every connection; files cut off are kept by the receiver for a resume.
    public func cancel() {
        take(.cancel)
        for sender in senders { sender.cancel() }
    }

    /// Moves the join's lifecycle by `event` and does what it says. An event it cannot take is
    /// a fault of this sender: warned about, and otherwise ignored.
    private func take(_ event: JoinLifecycle.Event) {
        let effect: JoinLifecycle.Effect
        do {
            effect = try join.handle(event)
        } catch {
            warn(error.description)
            return
        }
        switch effect {
        case .nothing:
            break
        case .startOthers:
            onStreamJoined?(0)
            startOthers()
        case .reportJoined:
            onStreamJoined?(0)
        case .fallBack:
            warn("the receiver does not offer parallel streams: sending over one connection")
            guard let first = senders.first else { return }
            // Every entry first: letting goodbye go announces what the connection has.
            first.takeEveryEntry()
            held = Array(repeating: [], count: streams)
            first.holdGoodbye = false
        case .stopOthers:
            leadEnded()
        case .finish:
            summarize()
        }
    }

    private func run(_ sender: TransferSender, index: Int) {
        guard let connect, let loop else { return }
        senders.append(sender)
        sender.onWarning = { [weak self] text in self?.warn(text) }
        sender.onRemoved = { [weak self] path in self?.onRemoved?(path) }
        sender.onSettle = { [weak self] entry, outcome in self?.settled(entry, outcome, on: index) }
        sender.fileDigest = { [weak self] entry, algorithm, completion in
            self?.fileDigest(entry, algorithm, completion)
        }
        let (input, output) = connect()
        sender.start(input: input, output: output, on: loop) { [weak self] summary in
            self?.ended(index, summary)
        }
    }

    /// The first connection joined: the others may join (their work follows as the
    /// directories it needs are answered, `release`).
    private func startOthers() {
        guard let id = transferID else { return }
        // A task of a group over one connection: it says goodbye when its work is done.
        if streams == 1 { senders.first?.holdGoodbye = false }
        for index in 1..<streams {
            let sender = TransferSender(
                entries: entries, streams: streamSources, options: options, work: [],
                join: join(index: index, id: id), fallback: nil, listed: false,
                prunesArriving: prunesArriving, listingIncomplete: listingIncomplete)
            sender.onJoined = { [weak self] in self?.onStreamJoined?(index) }
            run(sender, index: index)
        }
        release()
    }

    // MARK: Walking

    /// Entries listed and not announced yet (on any connection, or held) beyond which the
    /// walk's next step waits.
    static let walkAhead = TransferSender.walkAheadEntries

    /// Starts the walk's next step on a worker, unless one runs, it has ended, or it is far
    /// enough ahead of the connections.
    private func walkMore() {
        guard let walk, let loop, !walking, !walkHeld, join.walks else { return }
        let waiting = senders.reduce(0) { $0 + $1.machine.entriesWaiting } + held.reduce(0) { $0 + $1.count }
        guard waiting < Self.walkAhead else { return }
        walking = true
        let limit = walkStep
        WorkerPool.shared.submit({ walk.next(limit: limit) }, completingOn: loop) { [weak self] batch in
            self?.walked(batch)
        }
    }

    /// A step of the walk: its entries are shared out, the first connection's share at once.
    private func walked(_ batch: SourceTree.Batch) {
        walking = false
        if batch.done || !join.walks { walk = nil }
        guard join.walks else { return }
        for text in batch.warnings {
            warn(text, listing: true)
        }
        listingIncomplete = listingIncomplete || batch.incomplete
        walkEnded = batch.done
        let first = entries.count
        entries += batch.entries
        outcomes += Array(repeating: nil, count: batch.entries.count)
        guard let lead = senders.first else { return }
        guard !join.declined else {
            lead.take(batch.entries, last: batch.done, incomplete: batch.incomplete)
            lead.advance()
            walkMore()
            return
        }
        // How many directories are listed before each entry: what a file on another
        // connection than the first waits to see answered.
        var needs: [Int] = []
        for entry in batch.entries {
            needs.append(directoriesListed)
            if entry.isDirectory { directoriesListed += 1 }
        }
        var plan = planner.place(
            TransferSender.machineEntries(batch.entries), sizes: batch.entries.map(\.size), first: first)
        if group != nil && options.selection.sendsRanges { placeShardRanges(batch.entries, first: first, in: &plan) }
        for case .range(let index, _, _) in plan.joined() { rangeCounts[index, default: 0] += 1 }
        for k in 1..<streams {
            held[k] += plan[k].map { ($0, needs[$0.index - first]) }
        }
        lead.take(batch.entries, work: plan[0], last: batch.done, incomplete: batch.incomplete)
        toldLast[0] = batch.done
        for sender in senders.dropFirst() {
            sender.take(batch.entries, last: false, incomplete: batch.incomplete)
        }
        lead.advance()
        release()
        onWalkStep?(batch.entries.count)
        walkMore()
    }

    /// A task's ranges of the files split across the group's tasks replace the work planned
    /// for those files: one connection after another (the ranges of one file on different
    /// connections, as there are enough), each before the connection's files. A file whose size is not the one its ranges were
    /// planned for (it changed since) fails: the tasks would not agree on its ranges.
    private func placeShardRanges(_ batch: [OutgoingEntry], first: Int, in plan: inout [[SenderMachine.Work]]) {
        var split: [Int: [ByteRange]] = [:]
        for (offset, entry) in batch.enumerated() where !entry.isDirectory {
            guard let ranges = options.selection.ranges(of: entry.relative, size: entry.size) else { continue }
            split[first + offset] = ranges
        }
        guard !split.isEmpty else { return }
        for k in plan.indices { plan[k].removeAll { split[$0.index] != nil } }
        var next = 0
        for index in split.keys.sorted() {
            let ranges = split[index] ?? []
            guard let size = entries[index].size, !ranges.isEmpty else {
                let reason = "changed since the shards were planned (its size is not the one every task split)"
                finish(index, .failed(reason: reason, kind: .io))
                continue
            }
            // Before the connection's other files (after its directories): the ranges of a
            // large file are the job's long pole, and a task's range is under way at once.
            for range in ranges {
                let k = next % streams
                let at = plan[k].prefix { entries[$0.index].isDirectory }.count
                plan[k].insert(.range(index, range, fileSize: size), at: at)
                next += 1
            }
        }
    }

    /// Hands each started connection the work whose directories are answered (and, once the
    /// walk has ended and nothing is held for it, says no more will come).
    private func release() {
        guard !join.declined else { return }
        for (k, sender) in senders.enumerated().dropFirst() where !toldLast[k] {
            let ready = held[k].prefix { $0.needs <= directoriesAnswered }.count
            let last = walkEnded && ready == held[k].count
            guard ready > 0 || last else { continue }
            let work = held[k][..<ready].map(\.work)
            held[k].removeFirst(ready)
            toldLast[k] = last
            sender.take([], work: work, last: last)
            sender.advance()
        }
    }

    /// The first connection ended: what is held for the others can never go (their
    /// directories may not be there); they end with what they have, and the walk stops.
    private func leadEnded() {
        walk = nil
        walkEnded = true
        held = Array(repeating: [], count: streams)
        for (k, sender) in senders.enumerated().dropFirst() where !toldLast[k] {
            toldLast[k] = true
            sender.take([], last: true)
            sender.advance()
        }
    }

    private func settled(_ entry: Int, _ outcome: TransferOutcome, on stream: Int) {
        if entries[entry].isDirectory && stream == 0 {
            directoriesAnswered += 1
            release()
        }
        walkMore()
        guard let count = rangeCounts[entry], !join.declined else {
            finish(entry, outcome)
            return
        }
        rangeOutcomes[entry, default: []].append(outcome)
        let answers = rangeOutcomes[entry] ?? []
        guard answers.count == count else { return }
        finish(entry, answers.first { !$0.isStored } ?? .stored)
    }

    private func finish(_ entry: Int, _ outcome: TransferOutcome) {
        guard outcomes[entry] == nil else { return }
        outcomes[entry] = outcome
        onFileResult?(result(entry))
    }

    private func result(_ entry: Int) -> TransferFileResult {
        let resumed = senders.reduce(UInt64(0)) { total, sender in
            total + sender.resumedBytes(of: entry)
        }
        var result = TransferFileResult(
            path: entries[entry].relative, isDirectory: entries[entry].isDirectory, size: entries[entry].size,
            resumedBytes: resumed, outcome: outcomes[entry] ?? .failed(reason: "not answered", kind: .io))
        TransferSender.describeLink(
            &result, entries[entry], entries, sentLinks: senders.first?.sentLinks ?? false)
        if options.sync, let change = senders.lazy.compactMap({ $0.change(of: entry) }).first {
            result.change = change
            result.dryRun = options.dryRun
        }
        return result
    }

    /// A warning: of the walk (heard by `init`'s `warning`), or of the transfer (`onWarning`).
    private func warn(_ text: String, listing: Bool = false) {
        warnings.append(text)
        if listing {
            walkWarning?(text)
        } else {
            onWarning?(text)
        }
    }

    /// The whole file's digest, computed once on a worker however many ranges ask.
    private func fileDigest(_ entry: Int, _ algorithm: TransferDigest, _ completion: @escaping ([UInt8]?) -> Void) {
        let key = DigestKey(entry: entry, algorithm: algorithm)
        switch digests[key] {
        case .done(let digest):
            completion(digest)
            return
        case .computing(let waiting):
            digests[key] = .computing(waiting + [completion])
            return
        case nil:
            digests[key] = .computing([completion])
        }
        guard case .file(let path) = entries[entry].kind, let worker = digestWorker, let loop else {
            digestDone(key, nil)
            return
        }
        // Opened on a worker, as the connections open their files: the loop never waits for it.
        WorkerPool.shared.submit({ Self.openForDigest(path) }, completingOn: loop) { [weak self] opened in
            guard let (fd, size) = opened else {
                self?.digestDone(key, nil)
                return
            }
            guard let self else {
                closeDescriptor(fd)
                return
            }
            self.hashWhole(key, fd: fd, size: size, worker: worker)
        }
    }

    /// The descriptor and size of the file at `path`, or nil when it cannot be opened.
    private static func openForDigest(_ path: String) -> (Int32, UInt64)? {
        guard case .success(let fd) = Sluice.openFile(path, flags: O_RDONLY | O_NOFOLLOW | O_CLOEXEC, permissions: 0)
        else { return nil }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            closeDescriptor(fd)
            return nil
        }
        return (fd, UInt64(st.st_size))
    }

    private func hashWhole(_ key: DigestKey, fd: Int32, size: UInt64, worker: DigestWorker) {
        let digest = FileDigest(key.algorithm)
        worker.hashPrefix(digest, of: fd, length: size) { [weak self] ok in
            closeDescriptor(fd)
            guard ok else {
                self?.digestDone(key, nil)
                return
            }
            worker.finalize(digest) { [weak self] value in self?.digestDone(key, value) }
        }
    }

    private func digestDone(_ key: DigestKey, _ digest: [UInt8]?) {
        guard case .computing(let waiting) = digests[key] else { return }
        digests[key] = .done(digest)
        for completion in waiting { completion(digest) }
    }

    // MARK: Ending

    private func ended(_ index: Int, _ summary: TransferSummary) {
        summaries[index] = summary
        // The first connection ended before the others could join: they never will.
        if index == 0 { take(.leadEnded) }
        let running = senders.indices.filter { summaries[$0] == nil }
        if running == [0] { senders[0].holdGoodbye = false }
        if running.isEmpty { take(.allEnded) }
    }

    /// Every connection ended: the entries no answer came for fail, and the summary of all the
    /// connections goes to the completion.
    private func summarize() {
        // Entries no answer came for fail with the connections' error, which the summary
        // carries: as with one connection, they are not reported one by one.
        let reasons = summaries.keys.sorted().compactMap { summaries[$0]?.error?.description }
        for entry in entries.indices where outcomes[entry] == nil {
            outcomes[entry] = .failed(reason: "not transferred: " + (reasons.first ?? "no answer"), kind: .io)
        }
        let ordered = summaries.keys.sorted().compactMap { summaries[$0] }
        let stored = entries.indices.filter { outcomes[$0] == .stored }
        var total = TransferSummary(
            files: stored.filter { !entries[$0].isDirectory }.count,
            directories: stored.filter { entries[$0].isDirectory }.count,
            bytes: ordered.reduce(0) { $0 + $1.bytes }, bytesSent: ordered.reduce(0) { $0 + $1.bytesSent },
            resumedBytes: ordered.reduce(0) { $0 + $1.resumedBytes },
            seconds: Double(monotonicNanoseconds() - started) / 1e9, results: entries.indices.map(result),
            error: ordered.lazy.compactMap(\.error).first, digest: ordered.lazy.compactMap(\.digest).first)
        total.holeBytes = ordered.reduce(0) { $0 + $1.holeBytes }
        total.vouchedBytes = ordered.reduce(0) { $0 + $1.vouchedBytes }
        total.bytesReceived = ordered.reduce(0) { $0 + $1.bytesReceived }
        total.matchedBytes = ordered.reduce(0) { $0 + $1.matchedBytes }
        total.removed = ordered.flatMap(\.removed)
        total.pruneFailures = ordered.flatMap(\.pruneFailures)
        total.pruneRefused = ordered.contains { $0.pruneRefused }
        let finished = completion
        completion = nil
        finished?(total)
    }
}
