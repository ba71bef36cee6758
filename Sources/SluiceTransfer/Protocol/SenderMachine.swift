import Sluice

/// The sending side of the transfer protocol as a pure state machine: decoded messages and the
/// outcomes of its own actions in, actions out — no sockets, files or clocks.
///
/// Directories are announced without waiting. To a receiver that offers `eager` a small file
/// does not wait either: its data follows FILE at once (it is not resumable, and the receiver
/// sends no ACCEPT for it); to one that also offers `eager-resume` neither does a file of any
/// size, flagged resumable when over `Wire.eagerLimit`: if the receiver holds part of it, it
/// answers ACCEPT with what it holds and skips the data, and the file is announced again, not
/// eager, to be resumed. Otherwise a file waits for ACCEPT (with the offset the receiver holds),
/// its data follows, then END. The next entry is announced at once while the receiver
/// verifies, so no file costs a round trip. Answers come in the order entries were announced.
/// `proceed()` announces one entry at a time, so that its session can stop while its outbound
/// buffer is full whatever the number of entries.
///
/// The entries may arrive while the session runs (`entriesArrived`, as its walk lists them):
/// made with `listed` false, the machine announces those it has and waits for more; goodbye
/// (and PRUNE) wait for the last.
///
/// The machine lives in three files: this one (its types, its state, and what goes out next),
/// `+Answers` (the receiver's messages) and `+Outcomes` (its actions' outcomes and the end). Its
/// state is set by those files alone; the sessions and the tests only read it.
struct SenderMachine: Sendable {
    struct Settings: Equatable, Sendable {
        var compress = false
        var resume = true
        /// Send files of at most `Wire.eagerLimit` bytes eagerly to a receiver that offers
        /// `eager`: FILE, DATA and END without waiting for ACCEPT.
        var eager = true
        /// The digests offered, the preferred first (SHA-256 among them).
        var digests = TransferDigest.offered
        /// Ask the receiver what it has first (CHECK, to a receiver offering `sync`): what is
        /// the same is skipped, what differs replaced.
        var sync = false
        /// With `sync`: send nothing but the CHECKs; every entry is settled here with what
        /// would have been done.
        var dryRun = false
        /// With `sync` (`--delete`): directory entries under which the receiver is to remove what
        /// was not sent (PRUNE), once every entry is stored.
        var pruneRoots: [Int] = []
        /// With `sync` (`--delete`), entries still to arrive: some of them are directories to
        /// prune (`entriesArrived` names them). Offers `delete` in HELLO, as `pruneRoots` does.
        var prunesArriving = false
        /// With `sync` (`--checksum`): CHECK carries each file's digest, computed by the session
        /// (`checksumComputed`): the same contents, not the same mtime, leave a file unsent.
        var checksum = false
        /// With `sync`: send a changed file of `Delta.minimumSize` or more as a delta against the
        /// receiver's copy, where it offers `delta` (`--whole-file` turns it off).
        var delta = true
        /// The sender's resume key: a TOKEN goes before each resumable file, to a receiver that
        /// offers `resume-token`, and a resume it vouches for needs no HELD.
        var resumeKey: ResumeKey? = nil
        /// Offer `sync-attributes`: with `sync`, XATTR and OWNER go before a CHECK too, so
        /// that the receiver brings an entry otherwise the same up to date without data. Off,
        /// the sender speaks as one published before it; for tests of that.
        var syncAttributes = true
        /// With `resume`, offer `held-sha256`. Off, the sender speaks as one published before
        /// it (held bytes checked within the agreed digest of the whole file); for tests of that.
        var heldSHA256 = true
    }

    /// One entry as the machine knows it before it is opened.
    struct Entry: Equatable, Sendable {
        var relative: String
        var isDirectory: Bool
        /// A file that may be resumed (a regular file by path, not a stream).
        var seekable: Bool
        var mode: UInt32
        var mtimeSeconds: Int64
        var mtimeNanoseconds: UInt32
        /// A symbolic link: its target as read (`readlink`), sent with LINK.
        var symlinkTarget: [UInt8]? = nil
        /// A file with another name earlier in the transfer (`-H`): that entry's index. Sent as a
        /// LINK to it once it is stored, or as a file where the receiver takes no links.
        var hardLinkTo: Int? = nil
        /// A later entry is a hard link to this file: FILE says so (`linked`).
        var linked = false
        /// Fewer blocks than its size (holes): its data may be sent as data and HOLEs.
        var sparse = false
        /// Extended attributes and owner, sent before the entry where the receiver takes them.
        var attributes = EntryAttributes()
        /// Its size when listed (a file by path), for CHECK.
        var listedSize: UInt64? = nil
        /// A device, FIFO or socket (`-D`): sent with SPECIAL.
        var special: Special? = nil
    }

    /// A device's, FIFO's or socket's type and numbers (0 for a FIFO or socket).
    struct Special: Equatable, Sendable {
        var type: Wire.SpecialType
        var major: UInt32 = 0
        var minor: UInt32 = 0
    }

    struct CurrentFile: Equatable, Sendable {
        var index: Int
        var size: UInt64?
        var resumable: Bool
        var compressed: Bool
        var range: ByteRange? = nil
        /// The bytes the receiver holds (ACCEPT's offset).
        var held: UInt64 = 0
        /// Its data goes as DATA and HOLE (FILE flagged `sparse`).
        var sparse = false
        /// Its data goes as DATA and COPY against the receiver's copy (FILE flagged `delta`).
        var delta = false
        /// A TOKEN went before it (`resume-token`).
        var token = false
        /// ACCEPT said the held bytes were written under that TOKEN: no HELD for them.
        var vouched = false
    }

    /// One piece of work of a connection: an entry, whole, or one range of a file (whose size
    /// at planning was `fileSize`).
    enum Work: Equatable, Sendable {
        case entry(Int)
        case range(Int, ByteRange, fileSize: UInt64)

        var index: Int {
            switch self {
            case .entry(let index), .range(let index, _, _): return index
            }
        }
    }

    enum State: Equatable, Sendable {
        case awaitingMagic
        case awaitingHello
        /// Between files: the next entry may be announced.
        case ready
        /// JOIN was sent: waiting for JOINED.
        case joining
        /// Entry `index` is being opened.
        case opening(Int)
        /// FILE was sent: waiting for ACCEPT (or an answer).
        case awaitingAccept(CurrentFile)
        case sending(CurrentFile)
        /// BYE was sent: waiting for the remaining answers and the receiver's BYE.
        case byeSent
        case ended(SessionEnd)
    }

    let settings: Settings
    /// Every entry listed so far, by index; with `watch`, those answered are forgotten as it
    /// goes (`forget`, in `+Watch`).
    var entries: IndexedWindow<Entry>
    /// Every entry has arrived (`entriesArrived`).
    private(set) var listed: Bool
    /// The work is every entry, whole, in order: entries arriving join it (else their work
    /// comes with them, `entriesArrived`'s `work`).
    private(set) var workIsEveryEntry: Bool
    /// Directories to prune that arrived with their entries (`prunesArriving`).
    var arrivedPruneRoots: [Int] = []
    /// The paths of the directories to prune (`pruneRoots`' and `arrivedPruneRoots`'), kept
    /// apart from their entries: a watch forgets entries answered before its PRUNEs go.
    private(set) var prunePaths: [Int: String] = [:]
    /// Something below the sources could not be listed: PRUNE removes nothing.
    var listingIncomplete = false
    /// What this connection sends, in order; by default every entry, whole.
    var work: IndexedWindow<Work>
    /// For a connection of a transfer over several: which one it is, and what it sends
    /// instead when the receiver does not offer `streams` (nil: it must).
    var join: TransferJoin?
    let fallback: [Work]?
    var state = State.awaitingMagic
    var peerCapabilities: Set<String> = [] {
        didSet {
            syncing = settings.sync && peerCapabilities.contains(Wire.Capability.sync)
            syncsAttributes =
                syncing && settings.syncAttributes && peerCapabilities.contains(Wire.Capability.syncAttributes)
            offers = PeerOffers(peerCapabilities)
        }
    }
    /// What the peer offers that is asked about for every entry, looked up once.
    private(set) var offers = PeerOffers([])
    /// The digest agreed in HELLO, for every END and RANGE-END of this connection.
    var digest = TransferDigest.sha256
    var next = 0
    /// Announced entries without an answer yet, oldest first.
    var unanswered = AnswerOrder()
    /// Entries whose data could not be read here: their FAILED answer reports this reason.
    var localFailures: [Int: String] = [:]
    /// Files sent eager and resumable, unanswered, with their announced size: ACCEPT for one of
    /// them says the receiver holds that many of its bytes and skips the data sent.
    var eagerResumable: [Int: UInt64] = [:]
    /// Files announced again, not eager, because the receiver holds part of them.
    var announcedAgain: Set<Int> = []
    var settled: IndexedWindow<Bool>
    /// Entries answered STORED (or the same at the receiver) that a later entry names as its
    /// first name (`linked`): a hard link to one of them may go out.
    var stored: Set<Int> = []
    /// With `sync`: the entries to CHECK, in the order of the work, and how many went out.
    var checks: IndexedWindow<Int> = []
    var checksSent = 0
    /// CHECKs without a HAVE yet, oldest first, and the HAVEs by entry.
    var awaitingHave: [Int] = []
    var haves: [Int: HaveAnswer] = [:]
    /// With `checksum`: the digests computed so far, and the files that could not be read.
    var checksums: [Int: [UInt8]] = [:]
    var checksumFailed: Set<Int> = []
    /// PRUNEs sent, those without an answer (oldest first), and whether an entry was not stored.
    var prunesSent = 0
    var pruning: [Int] = []
    var anyNotStored = false
    /// `watch`: the first pass's walk has ended (`firstPassListed`): its PRUNEs may go while
    /// more entries, MOVEs and REMOVEs still come.
    var passListed = false
    /// `watch`: the session stays open for changes; HELLO says so (`watch`), and a receiver
    /// that knows sets a directory's mode and mtime as its CHECK comes, not at goodbye.
    var watching = false
    /// `watch`: the MOVEs and REMOVEs to send, in order (`queue`), and the one sent and not
    /// answered yet (nothing else goes meanwhile).
    var operations: [TreeOperation] = []
    var operating: [TreeOperation] = []

    init(
        entries: [Entry], settings: Settings, work: [Work]? = nil, join: TransferJoin? = nil, fallback: [Work]? = nil,
        listed: Bool = true
    ) {
        self.entries = IndexedWindow(entries)
        self.settings = settings
        self.listed = listed
        workIsEveryEntry = work == nil
        self.work = IndexedWindow(work ?? entries.indices.map(Work.entry))
        self.join = join
        self.fallback = fallback
        settled = IndexedWindow(Array(repeating: false, count: entries.count))
        for root in settings.pruneRoots where entries.indices.contains(root) {
            prunePaths[root] = entries[root].relative
        }
    }

    /// True when the next `proceed()` would say goodbye (or PRUNE).
    var workDone: Bool { next >= work.endIndex && listed }

    /// Entries not yet announced: what the walk has listed ahead of the announcements.
    var entriesWaiting: Int { work.endIndex - next }

    /// More entries, listed after those the machine has (their indices follow), and more work:
    /// every arriving entry where the work is every entry, else `work` (of these entries or
    /// earlier ones, each entry once); with `sync` (once HELLO is in) their CHECKs join the
    /// checks. `pruneRoots` are directories among them to prune (`prunesArriving`). `last`: no
    /// more entries nor work will arrive; `incomplete`: something could not be listed, and
    /// PRUNE will remove nothing.
    mutating func entriesArrived(
        _ arrived: [Entry], work more: [Work] = [], pruneRoots: [Int] = [], last: Bool, incomplete: Bool = false
    ) {
        let first = entries.endIndex
        entries += arrived
        settled += Array(repeating: false, count: arrived.count)
        guard !listed else {
            // Indexed as on the other connections, never sent.
            assertionFailure("sender machine: entries after the last")
            return
        }
        let added = workIsEveryEntry ? (first..<entries.endIndex).map(Work.entry) : more
        work += added
        if syncing {
            var seen: Set<Int> = []
            checks += added.map(\.index).filter { isChecked($0) && seen.insert($0).inserted }
        }
        arrivedPruneRoots += pruneRoots
        for root in pruneRoots where entries.indices.contains(root) { prunePaths[root] = entries[root].relative }
        listed = last
        listingIncomplete = listingIncomplete || incomplete
    }

    var capabilities: Set<String> {
        var set: Set<String> = [
            Wire.Capability.deflate, Wire.Capability.links, Wire.Capability.holes, Wire.Capability.xattrs,
            Wire.Capability.owners, Wire.Capability.specials,
        ]
        set.formUnion(settings.digests.map(\.capability))
        if settings.resume { set.insert(Wire.Capability.resume) }
        if settings.resume && settings.heldSHA256 { set.insert(Wire.Capability.heldSHA256) }
        if settings.resume && settings.resumeKey != nil { set.insert(Wire.Capability.resumeToken) }
        if !settings.pruneRoots.isEmpty || settings.prunesArriving { set.insert(Wire.Capability.delete) }
        if settings.sync && settings.syncAttributes { set.insert(Wire.Capability.syncAttributes) }
        if settings.sync && watching { set.insert(Wire.Capability.watch) }
        return set
    }

    /// The PRUNEs of this connection: the roots it sends itself (refused here, unsent, when the
    /// receiver does not offer sync). Where the work is every entry, all of them (and the work
    /// may be forgotten as it is answered, `forget`).
    var pruneRoots: [Int] {
        let roots = settings.pruneRoots + arrivedPruneRoots
        return workIsEveryEntry ? roots : roots.filter { work.contains(.entry($0)) }
    }

    /// The path of directory `root` to prune, as sent.
    func prunePath(_ root: Int) -> String { prunePaths[root] ?? "" }

    /// Whether a resumed file's held bytes are checked with SHA-256 (HELD) rather than as part
    /// of the agreed digest: both sides list `held-sha256`.
    var checksHeld: Bool {
        settings.resume && settings.heldSHA256 && offers.heldSHA256
    }

    /// The TOKEN to send before a resumable file: with a resume key, to a receiver that checks
    /// held bytes and offers `resume-token`.
    func tokenMessage(_ header: EntryHeader) -> [SenderAction] {
        guard let key = settings.resumeKey, checksHeld, offers.resumeToken
        else { return [] }
        return [.send(.token(key.token(for: header)))]
    }

    /// Whether the bytes the receiver holds of the file being sent are vouched for by its
    /// TOKEN: they are not read again here, and no HELD goes.
    var heldVouched: Bool {
        if case .sending(let file) = state { return file.vouched }
        return false
    }

    /// The HELLO to send after the magic.
    func start() -> [SenderAction] {
        [.send(.hello(version: Wire.version, capabilities: capabilities))]
    }

    /// True when `proceed()` would announce an entry (or say goodbye). Goodbye waits while a
    /// file sent eager and resumable is unanswered: the receiver may ask for it again.
    var canProceed: Bool {
        guard case .ready = state, operating.isEmpty else { return false }
        // A MOVE or REMOVE goes once every entry before it is answered; the CHECKs after it wait.
        let barrier = operations.first?.after ?? Int.max
        if syncing {
            if checksSent < checks.endIndex, checks[checksSent] < barrier {
                // With `checksum`, a file's CHECK waits for its digest.
                let index = checks[checksSent]
                return !settings.checksum || !isFile(index) || checksums[index] != nil
                    || checksumFailed.contains(index)
            }
            // An entry goes once its HAVE is in.
            // (Every entry but a stream is checked where the work is every entry: no scan of
            // the checks, which grow with each change a watch sends.)
            if next < work.endIndex, next < barrier, haves[work[next].index] == nil,
                workIsEveryEntry ? isChecked(work[next].index) : checks.contains(work[next].index)
            {
                return false
            }
        }
        if next >= barrier { return operationMayGo }
        guard next < work.endIndex else {
            // The next entries are still being listed (or, watching, may come).
            guard listed || passListed else { return false }
            // PRUNE once every entry is answered; BYE after.
            if prunesSent < pruneRoots.count { return unanswered.isEmpty && eagerResumable.isEmpty }
            return listed && eagerResumable.isEmpty
        }
        if case .entry(let index) = work[next], let target = linkTarget(of: index) {
            // A hard link waits for its target's answer (the walk puts links after the files).
            return !unanswered.contains(target)
        }
        return true
    }

    /// The entry a hard link entry names, when it goes as a LINK (the receiver takes links).
    func linkTarget(of index: Int) -> Int? {
        guard let target = entries[index].hardLinkTo, offers.links else {
            return nil
        }
        return target
    }

    /// Whether the receiver keeps what `capability` names.
    func peerOffers(_ capability: String) -> Bool { peerCapabilities.contains(capability) }

    /// Whether entries are checked first: asked for, and offered.
    /// (Kept with `peerCapabilities`: asked several times an entry, and a lookup hashes the name.)
    private(set) var syncing = false

    /// Whether XATTR and OWNER go before CHECKs and HAVE may say what was set: both sides
    /// list `sync-attributes`.
    /// (Kept with `peerCapabilities`, as `syncing` is.)
    private(set) var syncsAttributes = false

    /// A connection of several whose receiver offers no `streams` (`streamsDeclined`), while
    /// entries still arrive: it sends every entry, those it has and those to come.
    mutating func takeEveryEntry() {
        work = IndexedWindow(entries.indices.map(Work.entry))
        workIsEveryEntry = true
        if syncing { checks = IndexedWindow(entriesToCheck()) }
    }

    /// XATTR and OWNER messages for entry `index`, as far as the receiver takes them.
    func attributeMessages(_ index: Int, link: Bool = false) -> [SenderAction] {
        let attributes = entries[index].attributes
        var out: [SenderAction] = []
        if !link, offers.xattrs {
            out += attributes.xattrs.map { .send(.xattr($0)) }
        }
        if let owner = attributes.owner, offers.owners {
            out.append(.send(.owner(owner)))
        }
        return out
    }

    var hasEnded: Bool {
        if case .ended = state { return true }
        return false
    }

    /// The file whose data is going out, if any.
    var sendingIndex: Int? {
        if case .sending(let file) = state { return file.index }
        return nil
    }

    /// Whether the data going out is a delta (its FILE was flagged `delta`).
    var sendingDelta: Bool {
        if case .sending(let file) = state { return file.delta }
        return false
    }

    /// Whether the data going out may hold HOLEs (its FILE was flagged `sparse`).
    var sendingSparse: Bool {
        if case .sending(let file) = state { return file.sparse }
        return false
    }

    /// Announces the next entry, or says goodbye after the last.
    mutating func proceed() -> [SenderAction] {
        noted(proceedUnnoted())
    }

    mutating func proceedUnnoted() -> [SenderAction] {
        guard canProceed else { return [] }
        if syncing && checksSent < checks.endIndex && checks[checksSent] < (operations.first?.after ?? Int.max) {
            let index = checks[checksSent]
            checksSent += 1
            awaitingHave.append(index)
            return checkAttributeMessages(index) + [.send(.check(check(index)))]
        }
        if let operation = operations.first, next >= operation.after { return sendOperation() }
        guard next < work.endIndex else {
            let roots = pruneRoots
            if prunesSent < roots.count {
                let root = roots[prunesSent]
                let path = prunePath(root)
                prunesSent += 1
                guard !anyNotStored else {
                    return [.pruned(path, .refused(reason: "nothing removed: not every entry was stored"))]
                }
                guard !listingIncomplete else {
                    return [.pruned(path, .refused(reason: "not every entry could be listed"))]
                }
                guard syncing else {
                    let reason = "the receiver does not let senders remove entries (it needs receive --delete)"
                    return [.pruned(path, .refused(reason: reason))]
                }
                pruning.append(root)
                return [.send(.prune(path: Array(path.utf8), dryRun: settings.dryRun))]
            }
            state = .byeSent
            return [.send(.bye)]
        }
        let item = work[next]
        next += 1
        let index = item.index
        // Its fields read in place: `entries[index]` is borrowed, not the entry copied.
        if let settledHere = settledBySync(index) { return settledHere }
        if settings.dryRun && !syncing {
            // A dry run changes nothing: without CHECK there is nothing it may send.
            settled[index] = true
            let reason = "not checked: the receiver does not offer sync, and a dry run sends nothing"
            return [.settle(index, .failed(reason: reason, kind: .io))]
        }
        if case .range = item {
            state = .opening(index)
            return [.openEntry(index)]
        }
        if let target = entries[index].symlinkTarget {
            guard offers.links else {
                settled[index] = true
                return [.settle(index, .refused(reason: "a symbolic link: the receiver does not take links"))]
            }
            unanswered.append(index)
            let link = LinkHeader(
                kind: .symbolic, mtimeSeconds: entries[index].mtimeSeconds,
                mtimeNanoseconds: entries[index].mtimeNanoseconds,
                path: Array(entries[index].relative.utf8), target: target, replace: replaces(index))
            return attributeMessages(index, link: true) + [.send(.link(link))]
        }
        if let special = entries[index].special {
            guard offers.specials else {
                settled[index] = true
                let reason = "a \(special.type.name): the receiver does not take devices, FIFOs or sockets"
                return [.settle(index, .refused(reason: reason))]
            }
            unanswered.append(index)
            let header = SpecialHeader(
                mode: special.type.rawValue | entries[index].mode & 0o7777, mtimeSeconds: entries[index].mtimeSeconds,
                mtimeNanoseconds: entries[index].mtimeNanoseconds, major: special.major, minor: special.minor,
                path: Array(entries[index].relative.utf8), replace: replaces(index))
            return attributeMessages(index, link: true) + [.send(.special(header))]
        }
        if let target = linkTarget(of: index) {
            guard stored.contains(target) else {
                settled[index] = true
                let reason = "not linked: \(entries[target].relative) (its other name) was not stored"
                return [.settle(index, .failed(reason: reason, kind: .io))]
            }
            unanswered.append(index)
            let link = LinkHeader(
                kind: .hard, mtimeSeconds: entries[index].mtimeSeconds,
                mtimeNanoseconds: entries[index].mtimeNanoseconds,
                path: Array(entries[index].relative.utf8), target: Array(entries[target].relative.utf8),
                replace: syncing)
            return [.send(.link(link))]
        }
        if entries[index].isDirectory {
            unanswered.append(index)
            return attributeMessages(index) + [
                .send(
                    .directory(
                        EntryHeader(
                            mode: entries[index].mode, mtimeSeconds: entries[index].mtimeSeconds,
                            mtimeNanoseconds: entries[index].mtimeNanoseconds, path: Array(entries[index].relative.utf8)
                        )))
            ]
        }
        state = .opening(index)
        return [.openEntry(index)]
    }
}
