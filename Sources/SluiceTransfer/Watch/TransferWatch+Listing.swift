import Sluice

/// A directory that appeared (made, moved in, or gone through again after an overflow), walked
/// by a `TransferWatch` as the one-shot sender walks its sources (`TransferSender+Walk`): on a
/// worker, `TransferSender.walkStepEntries` entries at a time, each step's entries fed to the
/// session as it comes, at most `TransferSender.walkAheadEntries` entries ahead of the
/// announcements. The loop stays free meanwhile: the first CHECKs go while the rest is listed.
///
/// Order: while a listing runs, nothing else is fed (what changes waits in `pending`), so what
/// is fed after it comes after all its entries. A rename goes at once (MOVE, after what was fed
/// before it), unless it concerns the directory listed (a path in it, or it, or above it): then
/// the listing ends there (what its walk still holds may name paths that are gone), and the
/// directory is listed again from its path now, after the MOVE.
struct WatchListing {
    /// The directory listed (as sent).
    var path: String
    /// Its walk, stepped on a worker.
    let walk: SourceWalk
    /// Which listing this is: a step that ends after its listing did is dropped.
    let serial: Int
    /// Entries the walk listed before the step running (a second name's `hardLinkTo` counts
    /// from its first entry).
    var emitted = 0
    /// A step runs on a worker.
    var running = false
}

extension TransferWatch {
    /// Lists directory `local` (`path` as sent, `below` its components under its tree) on a
    /// worker, step by step (`listMore`). Nothing else is fed until it ends.
    func startListing(_ path: String, local: String, below: [String]) {
        // Gone meanwhile: its event follows.
        guard let walk = walk(local, relative: path, below: below) else { return }
        listings += 1
        listing = WatchListing(path: path, walk: SourceWalk(walk), serial: listings)
        listMore()
    }

    /// Starts the listing's next step, unless one runs, it is held, the session ended, or the entries
    /// waiting to be announced are `TransferSender.walkAheadEntries` (the session's next
    /// advance calls it again).
    func listMore() {
        guard var current = listing, !current.running, !listingHeld, let loop else { return }
        guard !sender.ended else {
            listing = nil
            return
        }
        guard sender.inspect({ $0.entriesWaiting }) < TransferSender.walkAheadEntries else { return }
        current.running = true
        listing = current
        let (walk, serial, limit) = (current.walk, current.serial, listingStep)
        WorkerPool.shared.submit({ walk.next(limit: limit) }, completingOn: loop) {
            [weak self] batch in
            self?.listed(batch, serial: serial)
        }
    }

    /// A step of listing `serial` is done: its entries are fed (unless the listing ended
    /// meanwhile), then the next step, or what waited behind the listing.
    private func listed(_ batch: SourceTree.Batch, serial: Int) {
        guard var current = listing, current.serial == serial else { return }
        current.running = false
        let base = current.emitted
        current.emitted += batch.entries.count
        listing = current
        batch.warnings.forEach(warn)
        var entries: [OutgoingEntry] = []
        feed(batch.entries, base: base, into: &entries)
        if !entries.isEmpty { sender.watchArrived(entries) }
        onListingStep?(batch.entries.count)
        if batch.done {
            listingEnded()
        } else {
            listMore()
        }
    }

    /// The listing is over: what changed meanwhile goes (all of it when stopping).
    func listingEnded() {
        listing = nil
        if stopping {
            flush(all: true)
        } else {
            schedule()
        }
        settleDirectoriesSoon()
    }

    /// A rename from `from` to `to` is about to go: one that concerns the directory listed (a
    /// path in it, it, or a directory above it) ends the listing, and the directory is listed
    /// again at its path now once what is pending goes, after the MOVE.
    func listingSees(move from: String, to: String) {
        guard let path = listing?.path else { return }
        func concerns(_ other: String) -> Bool {
            other == path || other.hasPrefix(path + "/") || path.hasPrefix(other + "/")
        }
        guard concerns(from) || concerns(to) else { return }
        let now = path == from || path.hasPrefix(from + "/") ? to + path.dropFirst(from.count) : path
        listing = nil
        pending[now] = monotonicNanoseconds()
    }

    /// Appends to `entries` those of `listed` (a walk's, the first of them its `base`th entry)
    /// that are not fed and unanswered already (each such one is looked at again once it is
    /// answered), marking the others fed and their directories touched. A second name keeps
    /// naming its first when that one is fed with it; else it goes as a file of its own.
    func feed(_ listed: [OutgoingEntry], base: Int, into entries: inout [OutgoingEntry]) {
        var placed: [Int: Int] = [:]
        for (offset, var entry) in listed.enumerated() {
            // (Marked fed, and found fed already, with one look-up.)
            if unanswered.updateValue(1, forKey: entry.relative) != nil {
                // Fed already and not answered: looked at again once it is.
                pending[entry.relative] = monotonicNanoseconds() + UInt64(settle.nanoseconds)
                continue
            }
            if entry.linked { placed[base + offset] = entries.count }
            if let first = entry.hardLinkTo { entry.hardLinkTo = placed[first] }
            touch(entry.relative, isDirectory: entry.isDirectory)
            entries.append(entry)
        }
    }
}
