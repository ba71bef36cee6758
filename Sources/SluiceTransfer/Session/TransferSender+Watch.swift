import Sluice

/// What a `TransferSender` keeps of `send --watch` (`TransferSender+Watch`): whether the
/// session stays open after its first pass, and who hears of its course.
struct SenderWatch {
    /// The session stays open once the walk has ended, for the changes fed to it.
    var enabled = false
    /// The first pass is over (its entries and PRUNEs answered): said once.
    var passDone = false
    /// Called once the first pass is over: changes may be fed from now on.
    var onPassDone: (() -> Void)?
    /// Called as each MOVE or REMOVE is answered (or settled here).
    var onOperated: ((TreeOperation.Kind, TransferOutcome) -> Void)?
    /// Called after the machine went as far as it may (`noteWatch`): a listing that waited
    /// for the announcements to catch up may go on.
    var onAdvanced: (() -> Void)?
    /// The entries answered and forgotten (`forgetAnswered`): those stored, counted; the
    /// others' results, kept for the summary (as `failures` admits them, counted beyond);
    /// the files among them (any outcome), and their bytes, for `progress`.
    var forgotten = TransferResultCounts()
    var forgottenResults: [TransferFileResult] = []
    var failures = KeptFailures()
    var forgottenFiles = 0
    var forgottenBytes: UInt64 = 0
    /// The most entries kept at once since it was last set (`entriesKept`): for tests.
    var mostKept = 0
    /// Entries forgotten at once at least (unless every entry is answered): what finding
    /// them costs (a look at those kept) is spread over many. Fewer for tests.
    var forgetStep = 1024
    /// The announcements (`SenderMachine.announcedBelow`) before which `forgetAnswered` does
    /// not look again, unless all is answered.
    var nextLook = 0

    /// Counts `result` (an entry answered, being forgotten) in `forgotten`, or keeps it as one
    /// of `failures`. (One access to the sender's `watch`: `failures` and `forgotten` are
    /// both changed, which two accesses to it from the sender would do at once.)
    mutating func forget(_ result: TransferFileResult) {
        if result.outcome.isStored {
            forgotten.count(result)
        } else if failures.admits(result, counting: &forgotten) {
            forgottenResults.append(result)
        }
        if !result.isDirectory {
            forgottenFiles += 1
            forgottenBytes += result.size ?? 0
        }
    }
}

/// Which of a long watch's failures (entries refused or failed) its summary lists: the
/// first `limit`, then one of each kind the exit status tells apart (refused, failed reading
/// or writing, failed a check) that none listed is; the others are counted
/// (`TransferResultCounts.refused`, `failed`). Memory then does not grow with the watch's
/// length however many fail.
struct KeptFailures {
    /// Failures listed at most (and one of each kind beyond): fewer for tests.
    var limit = 1000
    /// Failures listed so far.
    private(set) var listed = 0
    private var kinds: Set<Int> = []

    /// Whether `result` (not stored) is listed; if not, it is counted in `counts`.
    mutating func admits(_ result: TransferFileResult, counting counts: inout TransferResultCounts) -> Bool {
        let kind: Int
        switch result.outcome {
        case .stored: return true
        case .refused: kind = 0
        case .failed(_, .io): kind = 1
        case .failed(_, .data): kind = 2
        }
        if listed < limit || !kinds.contains(kind) {
            listed += 1
            kinds.insert(kind)
            return true
        }
        if kind == 0 { counts.refused += 1 } else { counts.failed += 1 }
        return false
    }
}

/// `send --watch`: the session stays open after the first pass (the walk of the sources, as
/// `--sync` sends it), and what changes is fed to it as it happens, on the same connection:
/// entries to check and send (`watchArrived`), renames (`watchMove`) and removals
/// (`watchRemove`), each in the order fed. Goodbye waits until `stopWatching`, then for
/// every answer.
extension TransferSender {
    /// Keeps the session open after the walk (set before `start`).
    var watching: Bool {
        get { watch.enabled }
        set {
            watch.enabled = newValue
            machine.watching = newValue
        }
    }

    /// The first pass's entries and PRUNEs are all answered.
    var firstPassDone: Bool { watch.passDone }

    /// Entries listed by the watcher join the transfer: checked, and sent where they differ.
    /// (A second name names its first by its index in `arrived`: by its index here once
    /// taken.) With `alone`, they are directories without what they hold (their mode and
    /// mtime to set): the top of a tree among them is no PRUNE.
    func watchArrived(_ arrived: [OutgoingEntry], alone: Bool = false) {
        guard !ended, !machine.listed else { return }
        let first = entries.endIndex
        take(
            arrived.map { entry in
                var entry = entry
                entry.hardLinkTo = entry.hardLinkTo.map { $0 + first }
                return entry
            }, last: false, prunes: !alone)
        advance()
    }

    /// A rename within the tree: MOVE once the entries fed before it are answered.
    func watchMove(from: String, to: String) {
        guard !ended, !machine.listed else { return }
        machine.queue(.move(from: from, to: to))
        advance()
    }

    /// A removal (with `delete`): REMOVE once the entries fed before it are answered.
    func watchRemove(_ path: String) {
        guard !ended, !machine.listed else { return }
        machine.queue(.remove(path))
        advance()
    }

    /// No more changes: goodbye once everything fed is answered.
    func stopWatching() {
        guard !ended, !machine.listed else { return }
        take([], last: true)
        advance()
    }

    /// After the machine went as far as it may: forgets what is answered, and says when the
    /// first pass is over.
    func noteWatch() {
        if watch.enabled { watch.mostKept = max(watch.mostKept, entriesKept) }
        forgetAnswered()
        watch.onAdvanced?()
        guard watch.enabled, !watch.passDone, !ended, inspect({ $0.firstPassDone }) else { return }
        watch.passDone = true
        watch.onPassDone?()
    }

    /// `watch`: forgets the entries answered and done with (`SenderMachine.answeredBelow`),
    /// here and in the machine, once there are `watch.forgetStep` of them or every entry is: those
    /// stored are counted, the others' results kept, for the summary. Memory then follows
    /// what is in flight, not the tree's size nor the number of changes. With `-H` too: the
    /// walk holds every file with several names for its end, where its second names follow
    /// it, so what comes before is never named by index (`SenderMachine.answeredBelow` keeps
    /// a first while its second names are kept).
    func forgetAnswered() {
        guard watch.enabled, !ended else { return }
        let start = entries.startIndex
        // What finding the bound costs (a look at every entry in flight) is paid once per
        // `forgetStep` entries announced, or once all is answered: not at each answer. (The
        // machine is read in place, `inspect`: not copied at each advance.)
        let announced = inspect { $0.announcedBelow }
        guard announced == entries.endIndex || announced - start >= watch.forgetStep,
            announced >= watch.nextLook || inspect({ $0.answeredAll })
        else { return }
        let bound = min(inspect { $0.answeredBelow }, current?.index ?? .max)
        if bound - start < watch.forgetStep && bound != entries.endIndex {
            // In flight still: looked at again a quarter step of announcements later.
            watch.nextLook = announced + watch.forgetStep / 4
        }
        guard bound > start, bound - start >= watch.forgetStep || bound == entries.endIndex else { return }
        // (`result` is built before `watch` is accessed: it reads the sender.)
        for index in start..<bound {
            let result = result(index)
            watch.forget(result)
        }
        machine.forget(below: bound)
        entries.forget(below: bound)
        watch.forgotten.removed += tally.forget(below: bound)
    }

    /// Entries kept (listed and not forgotten), here and in the machine: for tests.
    var entriesKept: Int {
        max(entries.count, inspect { max($0.entries.count, $0.work.count, $0.checks.count, $0.haves.count) })
    }

    /// The first pass's walk has ended: what is fed now comes after all its entries.
    var firstPassListed: Bool { inspect { $0.passListed } }

    /// Everything fed is answered (entries, CHECKs, MOVEs and REMOVEs), and nothing waits to go.
    var answeredAll: Bool { inspect { $0.answeredAll } }

    /// A MOVE or REMOVE was answered.
    func operated(_ operation: TreeOperation, _ outcome: TransferOutcome) {
        watch.onOperated?(operation.kind, outcome)
    }
}
