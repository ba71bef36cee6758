import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// `send --watch`: a tree kept in sync as it changes, over one session.
///
/// ```swift
/// let watch = try TransferWatch(paths: ["site"], options: options, settle: .milliseconds(50))
/// watch.start(input: input, output: output, on: loop) { summary in … }
/// // … later, on the loop's thread:
/// watch.stop()  // what is pending goes, then goodbye once everything is answered
/// ```
///
/// Every directory below the paths (directories only) is watched with inotify before the
/// first pass starts, so nothing changed during it is missed; the first pass is a
/// `--sync` (with `--delete`, its PRUNEs too). Once it is answered, the session stays open and
/// each change goes as it settles:
///
/// - A file goes once it is closed after writing (`IN_CLOSE_WRITE`, 2 ms later at most, so
///   that a rename right behind it is seen first), or once it has been quiet for
///   `settle` after its last write or change of attributes: a burst of writes sends it once,
///   and a file being written slowly is sent when it is closed, whole. It goes as any entry
///   of `--sync` does: checked, and sent (as a delta where it is large and the receiver has a
///   copy) only where it differs. The receiver stores each file whole, under a temporary
///   name renamed into place: a reader there never sees half a file.
/// - A directory that appears (made, or moved in from outside) is watched, then walked: what
///   it holds goes, however fast it was filled (the walk comes after its watch). It is walked
///   as the one-shot sender walks (`TransferWatch+Listing`): on a worker, a step at a time,
///   each step's entries fed as it comes; what changes meanwhile waits for the walk's end.
/// - A rename within the trees is a MOVE at the receiver (a file, or a directory with all it
///   holds: nothing sent again); a file renamed before it was ever sent (an editor's
///   temporary renamed over the file it saves) simply goes under its new name.
/// - A path removed (or moved out of the trees) is removed at the receiver with REMOVE when
///   `options.delete` is set (and the receiver allows it), else left there.
/// - An inotify queue overflow (`IN_Q_OVERFLOW`), or a directory that could not be watched,
///   is caught by a `--sync` pass over the trees (or that directory).
///
/// - A directory in which something changed goes again, its entry alone, once everything
///   fed is answered and nothing is pending (every directory once the first pass is over):
///   a receiver that knows (`watch` in the sender's HELLO) sets its mode and mtime then.
///
/// Eventually consistent: once the trees are quiet for `settle` and the answers are in, the
/// receiver's copy is the same as the trees (what `--sync` compares: sizes, mtimes, modes,
/// links, what the options send), directories' times included.
///
/// Memory follows what is in flight: the session forgets each entry once it is answered
/// (`TransferSender.forgetAnswered`), the watch table keeps a name per directory, and the
/// summary counts what was stored across every session (`TransferSummary.forgotten`).
public final class TransferWatch {
    /// How long a file must be quiet (no write) before it goes when nobody closed it.
    public let settle: Duration
    /// The session: the first pass and every change (its `onFileResult`, `progress`…); a new
    /// one after each reconnection (`reconnect`), with the same callbacks.
    public private(set) var sender: TransferSender
    /// Reopens a dropped connection: with it, a session that ends with an error once a first
    /// pass was over is started again after a delay (250 ms, doubling up to 30 s, back to
    /// 250 ms once a first pass is over again), beginning with a `--sync` pass (a file cut off
    /// is resumed as usual). Nil: a dropped connection ends the watch.
    public var reconnect: (() -> (ReadStream, WriteStream))?
    /// Called before each reconnection: why the session ended, and the delay.
    public var onReconnecting: ((String, Duration) -> Void)?
    /// Reconnections so far.
    public private(set) var reconnections = 0
    /// Called once the watch has started (its loop), and once it has ended, before its
    /// completion: for a status line.
    public var onStarted: ((EventLoop) -> Void)?
    public var onEnded: (() -> Void)?
    /// Directories that could not be watched: each gone through again, as `--sync` does,
    /// every `unwatchedPass` (for tests, sooner).
    var unwatched: Set<String> = []
    var unwatchedTimer: LoopTimer?
    var warnedLimit = false
    var unwatchedPass = Duration.seconds(10)
    /// Called for problems that fail nothing: a directory that cannot be watched, a name
    /// that is not UTF-8.
    public var onWarning: ((String) -> Void)?
    /// Called as each MOVE or REMOVE is answered: the paths (`to` nil for a removal) and
    /// the outcome.
    public var onMoved: ((_ from: String, _ to: String?, TransferOutcome) -> Void)?

    let options: TransferSendOptions
    /// Each tree's name as sent (its base name) and its path here.
    let roots: [String: String]
    var watcher: TreeWatcher?
    var loop: EventLoop?
    /// Paths (as sent) that changed and are not fed yet, each with when it may go (the
    /// loop's clock, in nanoseconds).
    var pending: [String: UInt64] = [:]
    /// Paths seen made since the watch began and not fed yet: the receiver has nothing there
    /// (a rename of one is no MOVE).
    var unsent: Set<String> = []
    private var timer: LoopTimer?
    /// `stop` was called (or the session ended): nothing more is fed.
    public private(set) var stopping = false
    /// Changes fed to the session, MOVEs and REMOVEs among them; the last change's latency
    /// from its event to its answer is `lastLatency`.
    public internal(set) var changesSent = 0
    public internal(set) var moves = 0
    public internal(set) var overflows = 0
    /// Paths fed that failed because they were gone before they could be read: left out of
    /// the summary (not failures of the watch).
    private var vanished: Set<String> = []
    /// The paths fed and not answered yet, with when their change was seen.
    var inFlight: [String: UInt64] = [:]
    /// Entries fed and not answered yet, by path: a path is never fed twice at once (two
    /// files of one name in one BATCH, two CHECKs that both found it absent); a change to one
    /// of them waits for its answer.
    var unanswered: [String: Int] = [:]
    /// The directory being listed on a worker (`TransferWatch+Listing`): nothing else is fed
    /// until it ends. `listings` counts them.
    var listing: WatchListing?
    var listings = 0
    /// Entries a step of a listing lists at most (for tests, fewer).
    var listingStep = TransferSender.walkStepEntries
    /// While set, no step of a listing starts (for tests: a listing held up).
    var listingHeld = false {
        didSet { if !listingHeld { listMore() } }
    }
    /// Called on the loop after each step of a listing was fed (how many entries it listed):
    /// for tests.
    var onListingStep: ((Int) -> Void)?
    /// Directories whose mode or mtime may have changed (something in them did): each one's
    /// entry alone goes once everything fed is answered and nothing is pending, so that the
    /// receiver sets them after what they hold (`settleDirectories`).
    private(set) var touched: Set<String> = []
    /// The directory `touch` inserted last (in `touched` unless it was emptied since).
    private var lastTouched: String?
    private var settleTimer: LoopTimer?
    /// `stop` was called: goodbye follows the directories touched, once all is answered.
    private var finishing = false
    /// The last change answered: its path and how long from its event to its answer.
    public private(set) var lastChange: (path: String, seconds: Double)?
    /// For tests: called once the first pass is over and changes are fed.
    var onPassDone: (() -> Void)?
    /// For tests: events read so far, and whether they are dropped unread (lost, as an
    /// overflow loses them).
    var eventsSeen = 0
    var dropsEvents = false

    /// Watches `paths` (directories) and sends them with `options` (`sync` is implied).
    /// Throws as `TransferSender.init` does, and for a path that is not a directory or two
    /// with the same base name.
    public init(
        paths: [String], options: TransferSendOptions, settle: Duration = .milliseconds(50),
        warning: ((String) -> Void)? = nil
    ) throws(SluiceError) {
        var options = options
        options.sync = true
        var roots: [String: String] = [:]
        for path in paths {
            var st = stat()
            try syscallValue("stat", path) { stat(path, &st) }
            guard st.st_mode & S_IFMT == S_IFDIR else {
                throw SluiceError(
                    .invalidArgument, operation: "send --watch", subject: path, detail: "only directories are watched")
            }
            let name = try SourceTree.baseName(path)
            guard roots[name] == nil else {
                throw SluiceError(
                    .invalidArgument, operation: "send --watch", subject: path,
                    detail: "two directories named \(quoted(name)) would be sent to one place")
            }
            roots[name] = path
        }
        self.options = options
        self.roots = roots
        self.settle = settle
        self.paths = paths
        self.listingWarning = warning
        sender = try TransferSender(paths: paths, options: options, warning: warning)
        sender.watching = true
    }

    private let paths: [String]
    private let listingWarning: ((String) -> Void)?
    /// What the caller set on the first session, for each one after it.
    private var resultHandler: ((TransferFileResult) -> Void)?
    private var completion: ((TransferSummary) -> Void)?
    /// A first pass was over once: a session that drops after it is reopened.
    private var passedOnce = false
    private var backoff = TransferWatch.firstBackoff
    private var retry: LoopTimer?
    /// The sessions before the one running, summed (`summed`): what a dropped one left
    /// unanswered is left out (the next one's `--sync` pass sends it), its error kept.
    private var earlier: TransferSummary?
    /// When the watch started (the loop's clock, in nanoseconds).
    private var started: UInt64 = 0
    static let firstBackoff = Duration.milliseconds(250)
    /// How long a file closed waits for a rename that may follow (nanoseconds).
    static let closeGrace: UInt64 = 2_000_000
    static let longestBackoff = Duration.seconds(30)

    /// Watches the trees, then starts the session's first pass over `input`/`output` on
    /// `loop` (as `TransferSender.start`). `completion` runs once the session ends: after
    /// `stop`, or when the connection fails.
    public func start(
        input: ReadStream, output: WriteStream, on loop: EventLoop, completion: @escaping (TransferSummary) -> Void
    ) {
        self.loop = loop
        started = monotonicNanoseconds()
        do {
            let watcher = try TreeWatcher()
            watcher.onEvents = { [weak self] events in self?.handle(events) }
            watcher.start(on: loop)
            self.watcher = watcher
            for (name, path) in roots.sorted(by: { $0.key < $1.key }) { watchTree(path, relative: name) }
        } catch {
            warn("inotify: \(error.reason): changes are not watched")
        }
        self.completion = completion
        resultHandler = sender.onFileResult
        onStarted?(loop)
        run(sender, input: input, output: output)
    }

    /// Starts `sender`'s session (the first, or one after a reconnection).
    private func run(_ sender: TransferSender, input: ReadStream, output: WriteStream) {
        guard let loop else { return }
        sender.watch.onPassDone = { [weak self] in self?.passDone() }
        sender.watch.onOperated = { [weak self] kind, outcome in self?.operated(kind, outcome) }
        sender.watch.onAdvanced = { [weak self] in self?.listMore() }
        let previous = resultHandler
        sender.onFileResult = { [weak self] result in
            guard let self else { return }
            self.answered(result.path, entry: true)
            // A file fed and gone before it could be read (an editor's temporary renamed over
            // the file it saves): not a failure; what became of it is another change.
            if self.passedOnce, case .failed = result.outcome, self.isGone(result.path) {
                self.vanished.insert(result.path)
                return
            }
            previous?(result)
        }
        sender.start(input: input, output: output, on: loop) { [weak self] summary in
            self?.sessionEnded(summary)
        }
    }

    /// A session ended: after `stop`, the watch ends; dropped after a first pass, with
    /// `reconnect`, another starts after the backoff.
    private func sessionEnded(_ finished: TransferSummary) {
        var summary = finished
        summary.results.removeAll { result in
            guard case .failed = result.outcome else { return false }
            return vanished.contains(result.path)
        }
        vanished = []
        guard !stopping, let error = summary.error, passedOnce, reconnect != nil, let loop else {
            finish(summary)
            return
        }
        // What the connection's end left unanswered goes again in the next session.
        summary.results.removeAll { result in
            guard case .failed(let reason, .io) = result.outcome else { return false }
            return reason.hasPrefix(Self.unansweredReason)
        }
        earlier = Self.summed(earlier, summary)
        let delay = backoff
        backoff = min(backoff * 2, Self.longestBackoff)
        onReconnecting?(error.description, delay)
        inFlight = [:]
        unanswered = [:]
        // The next session's --sync pass lists it all.
        listing = nil
        timer?.cancel()
        timer = nil
        retry = loop.schedule(after: delay) { [weak self] in self?.reopen() }
    }

    /// The watch ends, its last session's summary (nil: it ended between sessions) added to
    /// the sessions' before it: its completion hears the sum.
    private func finish(_ last: TransferSummary?) {
        ended()
        guard var total = Self.summed(earlier, last) else { return }
        // From the watch's start: the time between sessions too.
        if started > 0 { total.seconds = Double(monotonicNanoseconds() - started) / 1e9 }
        completion?(total)
        completion = nil
    }

    /// The reason given to the entries a session's end left unanswered
    /// (`TransferSender.end`).
    static let unansweredReason = "not transferred: "

    /// Two sessions' summaries as one (nil when both are): counts and bytes added, results
    /// and removals in order (failures beyond `failureLimit` counted, as `KeptFailures` does), the later one's error and digest (or the earlier's), the time
    /// of both.
    static func summed(
        _ first: TransferSummary?, _ second: TransferSummary?, failureLimit: Int = KeptFailures().limit
    ) -> TransferSummary? {
        guard var sum = first else { return second }
        guard let second else { return sum }
        sum.files += second.files
        sum.directories += second.directories
        sum.bytes += second.bytes
        sum.bytesSent += second.bytesSent
        sum.bytesReceived += second.bytesReceived
        sum.resumedBytes += second.resumedBytes
        sum.vouchedBytes += second.vouchedBytes
        sum.holeBytes += second.holeBytes
        sum.matchedBytes += second.matchedBytes
        sum.seconds += second.seconds
        // The failures of both listed as one session lists them (`KeptFailures`).
        var failures = KeptFailures()
        failures.limit = failureLimit
        var omitted = TransferResultCounts()
        let results = (sum.results + second.results).filter { failures.admits($0, counting: &omitted) }
        sum.results = results
        sum.forgotten = sum.forgotten + second.forgotten + omitted
        sum.removed += second.removed
        sum.pruneFailures += second.pruneFailures
        sum.pruneRefused = sum.pruneRefused || second.pruneRefused
        sum.error = second.error
        sum.digest = second.digest ?? sum.digest
        return sum
    }

    /// Starts a new session: a `--sync` pass, then the changes pending.
    private func reopen() {
        retry = nil
        guard !stopping, let reconnect else { return }
        let made = Result { () throws(SluiceError) in
            try TransferSender(paths: paths, options: options, warning: listingWarning)
        }
        guard case .success(let next) = made else {
            if case .failure(let error) = made {
                earlier?.error = error
                stopping = true
                finish(nil)
            }
            return
        }
        next.watching = true
        next.onWarning = sender.onWarning
        next.onRemoved = sender.onRemoved
        sender = next
        reconnections += 1
        let (input, output) = reconnect()
        run(next, input: input, output: output)
    }

    /// How many directories are watched.
    public var directoriesWatched: Int { watcher?.count ?? 0 }

    /// Changes seen and not fed yet.
    public var queued: Int { pending.count }

    /// Stops watching: what is pending goes now, then goodbye once every answer is in
    /// (`SIGINT`, `SIGTERM`). Call on the loop's thread.
    public func stop() {
        guard !stopping else { return }
        stopping = true
        watcher?.close()
        watcher = nil
        if let retry {
            // Between sessions: nothing is open to say goodbye on.
            retry.cancel()
            self.retry = nil
            finish(nil)
            return
        }
        if sender.firstPassDone { flush(all: true) }
        timer?.cancel()
        // Goodbye once what was fed is answered and the directories touched went after it.
        finishing = true
        settleDirectoriesSoon()
    }

    // MARK: Feeding the session

    /// The first pass is answered: what changed meanwhile goes.
    private func passDone() {
        passedOnce = true
        backoff = Self.firstBackoff
        if stopping {
            settleDirectoriesSoon()
            return
        }
        // The first pass's directories were set as their CHECKs came, before what they hold:
        // each goes again.
        touched.formUnion(watcher?.directories ?? [])
        onPassDone?()
        schedule()
        settleDirectoriesSoon()
    }

    /// Feeds the entries of the directories touched, each alone, once everything fed is
    /// answered and nothing is pending: their CHECKs reach the receiver after what changed in
    /// them, and it sets their mode and mtime (a receiver that does not know `watch` sets
    /// them at goodbye). Stopping, goodbye follows them.
    private func settleDirectories() {
        // (Goodbye waits for the first pass's walk, and for a directory's listing: their
        // entries are still to come.)
        guard !stopping || finishing, sender.answeredAll, sender.firstPassListed, listing == nil else { return }
        guard !touched.isEmpty, sender.firstPassDone, pending.isEmpty else {
            if finishing {
                finishing = false
                sender.stopWatching()
            }
            return
        }
        var entries: [OutgoingEntry] = []
        for path in touched.sorted() {
            guard let (local, below) = local(path), !excluded(path, isDirectory: true) else { continue }
            // The walk's first entry is the directory itself (gone: nothing to set).
            guard var walk = walk(local, relative: path, below: below),
                let entry = walk.next(limit: 1).entries.first, entry.isDirectory
            else { continue }
            unanswered[path] = 1
            entries.append(entry)
        }
        touched = []
        lastTouched = nil
        if !entries.isEmpty { sender.watchArrived(entries, alone: true) }
    }

    /// `settleDirectories` on the loop's next turn (not from within the session's answer).
    func settleDirectoriesSoon() {
        guard settleTimer == nil, !touched.isEmpty || finishing, let loop else { return }
        settleTimer = loop.schedule(after: .zero) { [weak self] in
            self?.settleTimer = nil
            self?.settleDirectories()
        }
    }

    /// Something changed at `path`: the directory holding it (and a directory fed, itself) is
    /// touched.
    func touch(_ path: String, isDirectory: Bool = false) {
        if isDirectory { touched.insert(path) }
        // (By its bytes: a directory's files, fed one after another, find it inserted.)
        let bytes = path.utf8
        guard let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else { return }
        let parent = path[..<slash]
        if let last = lastTouched, parent == last { return }
        let directory = String(parent)
        lastTouched = directory
        touched.insert(directory)
    }

    /// Arms the timer for the earliest pending path (at once for one due now); none while a
    /// directory is listed (its end calls it).
    func schedule() {
        timer?.cancel()
        timer = nil
        guard let loop, !stopping, sender.firstPassDone, listing == nil, let due = pending.values.min() else { return }
        let now = monotonicNanoseconds()
        let delay = due > now ? Duration.nanoseconds(Int64(due - now)) : .zero
        timer = loop.schedule(after: delay) { [weak self] in
            guard let self else { return }
            self.timer = nil
            self.flush(upTo: monotonicNanoseconds())
            self.schedule()
        }
    }

    /// Feeds what is due by `upTo` (everything with `all`): the paths in order, each once, a
    /// path below another fed at the same time left to that one's walk; a path gone is
    /// removed (with `delete`). A directory is listed on a worker (`startListing`): what is due
    /// after it waits for the listing's end. Nothing while one is listed.
    func flush(upTo: UInt64 = .max, all: Bool = false) {
        guard listing == nil else { return }
        let due = pending.filter { all || $0.value <= upTo }.keys.sorted()
        guard !due.isEmpty else { return }
        let chosen = Set(due)
        var entries: [OutgoingEntry] = []
        for path in due {
            pending[path] = nil
            if hasAncestor(path, in: chosen) { continue }
            guard let (local, below) = local(path) else { continue }
            var st = stat()
            guard lstat(local, &st) == 0 else {
                let neverSent = unsent.remove(path) != nil
                if options.delete && !neverSent {
                    if !entries.isEmpty {
                        sender.watchArrived(entries)
                        entries = []
                    }
                    changesSent += 1
                    touch(path)
                    inFlight[path] = monotonicNanoseconds()
                    sender.watchRemove(path)
                }
                continue
            }
            inFlight[path] = monotonicNanoseconds()
            changesSent += 1
            guard st.st_mode & S_IFMT != S_IFDIR else {
                unsent = unsent.filter { $0 != path && !$0.hasPrefix(path + "/") }
                if !entries.isEmpty {
                    sender.watchArrived(entries)
                    entries = []
                }
                // What is due below it is its listing's; the rest waits for its end.
                for other in due where other.hasPrefix(path + "/") { pending[other] = nil }
                startListing(path, local: local, below: below)
                if listing != nil { break }
                continue
            }
            unsent.remove(path)
            feed(listed(local, relative: path, below: below), base: 0, into: &entries)
        }
        if !entries.isEmpty { sender.watchArrived(entries) }
        settleDirectoriesSoon()
    }

    /// Whether an ancestor of `path` is among `paths`.
    private func hasAncestor(_ path: String, in paths: Set<String>) -> Bool {
        var current = Substring(path)
        while let slash = current.lastIndex(of: "/") {
            current = current[..<slash]
            if paths.contains(String(current)) { return true }
        }
        return false
    }

    /// The entries of `local` (a file, link or directory with what it holds), as sent.
    private func listed(_ local: String, relative: String, below: [String]) -> [OutgoingEntry] {
        guard var walk = walk(local, relative: relative, below: below) else { return [] }
        var entries: [OutgoingEntry] = []
        while true {
            let batch = walk.next(limit: Int.max)
            batch.warnings.forEach(warn)
            entries += batch.entries
            if batch.done { return entries }
        }
    }

    /// The walk of `local` (`relative` as sent, `below` its components under its tree) with
    /// the watch's selection and options; nil where it cannot start (gone meanwhile).
    func walk(_ local: String, relative: String, below: [String]) -> SourceTree.Walk? {
        let made = Result { () throws(SluiceError) in
            try SourceTree.Walk(
                subtree: local, relative: relative, below: below, selection: options.selection,
                options: options.sourceOptions)
        }
        guard case .success(let walk) = made else { return nil }
        return walk
    }

    /// An entry fed (`entry`), or a MOVE or REMOVE, was answered: the latency of its change.
    private func answered(_ path: String, entry: Bool = false) {
        if entry { unanswered[path] = nil }
        defer { settleDirectoriesSoon() }
        // (Most answers are for entries of a directory listed: no look-up once its own is in.)
        guard !inFlight.isEmpty, let seen = inFlight.removeValue(forKey: path) else { return }
        lastChange = (path, Double(monotonicNanoseconds() - seen) / 1e9)
    }

    /// A MOVE or REMOVE was answered: one that did not go through leaves its new path to be
    /// sent as a change.
    private func operated(_ kind: TreeOperation.Kind, _ outcome: TransferOutcome) {
        switch kind {
        case .move(let from, let to):
            answered(to)
            onMoved?(from, to, outcome)
            if outcome != .stored, !stopping {
                pending[to] = monotonicNanoseconds()
                schedule()
            }
        case .remove(let path):
            answered(path)
            onMoved?(path, nil, outcome)
            if outcome != .stored { warn("\(path): not removed: \(outcome)") }
        }
    }

    private func ended() {
        unwatchedTimer?.cancel()
        unwatchedTimer = nil
        onEnded?()
        onEnded = nil
        retry?.cancel()
        retry = nil
        timer?.cancel()
        timer = nil
        settleTimer?.cancel()
        settleTimer = nil
        watcher?.close()
        watcher = nil
        stopping = true
    }

    func warn(_ text: String) {
        onWarning?(text)
    }
}
