import Sluice

/// The sender's walk: what lies below the sources is listed on a worker, a step of
/// `walkStepEntries` at a time, while the transfer runs; each step's entries join the machine's
/// as they come (in the walk's order, announced as any others), and goodbye waits for the last.
/// The walk stays at most `walkAheadEntries` entries ahead of the announcements: a tree of
/// millions of files starts at once, and the entries waiting to go stay bounded.
extension TransferSender {
    /// Entries a step of the walk lists at most (but a directory's names are read whole, and
    /// the files held back for `-H` all come at the end). Steps of 256 cost a second
    /// `send --sync` of 10,000 unchanged files 1.11–1.23 × rsync's time against 0.97–1.01
    /// before the walk streamed: its CHECKs went out in small batches; 2,048 brought it back
    /// (0.96, Benchmarks/RESULTS.md).
    static let walkStepEntries = 2048
    /// Entries listed and not announced yet beyond which the next step waits. With `sync`,
    /// an entry is announced once its HAVE is in: the walk may run a round trip's worth of
    /// CHECKs ahead, and some more.
    static let walkAheadEntries = 16384

    /// Starts the walk's next step on a worker, unless one runs, the walk has ended, or it is
    /// far enough ahead of the announcements.
    func walkMore() {
        guard let loop, !ended, let (walk, limit) = walker.startStep(waiting: machine.entriesWaiting) else { return }
        WorkerPool.shared.submit({ walk.next(limit: limit) }, completingOn: loop) { [weak self] batch in
            self?.walked(batch)
        }
    }

    /// Whether the walk has listed everything (the machine has every entry).
    var walkEnded: Bool { machine.listed }

    /// A step of the walk runs on a worker.
    var walking: Bool { walker.running }

    /// While set, no step of the walk starts; for tests (a walk held up).
    var walkHeld: Bool {
        get { walker.held }
        set {
            walker.hold(newValue)
            if !newValue { walkMore() }
        }
    }

    /// Entries a step of the walk lists; for tests.
    var walkStep: Int {
        get { walker.step }
        set { walker.limit(step: newValue) }
    }

    /// Entries listed ahead of the announcements beyond which the walk waits; for tests.
    var walkAhead: Int {
        get { walker.ahead }
        set { walker.limit(ahead: newValue) }
    }

    /// Called on the loop after each step's entries were added (how many): for tests.
    var onWalkStep: ((Int) -> Void)? {
        get { walker.onStep }
        set { walker.observeSteps(newValue) }
    }

    /// Something below the sources could not be listed so far (a warning said what): it is not
    /// sent, and `delete` removes nothing.
    public var listingIncomplete: Bool { machine.listingIncomplete }

    /// A step of the walk is done: its entries join the transfer, its warnings are heard.
    private func walked(_ batch: SourceTree.Batch) {
        walker.stepDone(last: batch.done || ended)
        guard !ended else { return }
        for text in batch.warnings {
            warnings.append(text)
            walker.warning?(text)
        }
        take(batch.entries, last: batch.done && !watching, incomplete: batch.incomplete)
        if batch.done && watching { machine.firstPassListed() }
        walker.onStep?(batch.entries.count)
        advance()
    }

    /// Entries listed after those this sender has (by its walk, or by the walk of the
    /// `ParallelTransferSender` it is a connection of) join the transfer, with `work`, this
    /// connection's share of them (or of earlier ones), where the work is not every entry.
    /// `last`: no more entries nor work will come. Call `advance()` after. Taken after the end
    /// too (nothing is sent then): the entries are indexed alike on every connection. With
    /// `prunes` false, a source directory among them is no PRUNE (`send --watch`: a
    /// directory's entry alone).
    func take(
        _ arrived: [OutgoingEntry], work: [SenderMachine.Work] = [], last: Bool, incomplete: Bool = false,
        prunes: Bool = true
    ) {
        let first = entries.endIndex
        entries += arrived
        tally.arrived(arrived)
        let checksBefore = machine.checks.endIndex
        machine.entriesArrived(
            Self.machineEntries(arrived), work: work,
            pruneRoots: options.sync && options.delete && prunes ? Self.pruneRoots(arrived, first: first) : [],
            last: last, incomplete: incomplete)
        guard !ended else { return }
        if warnedNoDeflate {
            warnAboutEntries(first..<entries.endIndex)
        } else if inspect({ $0.canProceed }) {
            // The receiver's HELLO came while the machine had nothing to announce.
            warnAboutPeer()
        }
        checksumsArrived(from: checksBefore)
    }

    /// The receiver offers no `streams` while entries still arrive (`ParallelTransferSender`):
    /// this connection sends every entry.
    func takeEveryEntry() {
        machine.takeEveryEntry()
    }

    /// Once the receiver said HELLO: what among `range` of the entries it will not take, each
    /// warning once.
    func warnAboutEntries(_ range: Range<Int>) {
        let (links, specials) = inspect {
            ($0.peerOffers(Wire.Capability.links), $0.peerOffers(Wire.Capability.specials))
        }
        guard !links || !specials else { return }
        for index in range {
            let entry = entries[index]
            if !links {
                if case .symlink = entry.kind, walker.warnsFirst(about: .symlinks) {
                    warn("the receiver does not take symbolic links: they are not sent")
                }
                if entry.hardLinkTo != nil, walker.warnsFirst(about: .hardLinks) {
                    warn("the receiver does not take hard links: each name is sent as a file of its own")
                }
            }
            if entry.isSpecial, !specials, walker.warnsFirst(about: .specials) {
                warn("the receiver does not take devices, FIFOs or sockets: they are not sent")
            }
        }
    }
}
