import Sluice

/// A change to the receiver's tree that is not an entry (`send --watch`): a rename, or a
/// removal. It goes, as MOVE or REMOVE, once every entry listed before it is answered, and
/// nothing goes after it until it is answered: the receiver applies it to the tree those
/// entries made, and the CHECKs after it see the tree it leaves.
struct TreeOperation: Equatable, Sendable {
    enum Kind: Equatable, Sendable {
        /// Rename `from` to `to` (relative paths as sent).
        case move(from: String, to: String)
        /// Remove the path, with what it holds.
        case remove(String)
    }

    var kind: Kind
    /// How many entries the work held when it was queued: it goes once the machine has
    /// announced them all.
    var after: Int
}

extension SenderMachine {
    /// `watch`: the first pass's walk has ended. Its PRUNEs go once its entries are answered,
    /// and the session stays open for more entries (`entriesArrived`) and operations (`queue`)
    /// until the last arrives (`entriesArrived(last: true)`: BYE then follows).
    mutating func firstPassListed() {
        passListed = true
    }

    /// `watch`: queues a MOVE or REMOVE after the entries listed so far.
    mutating func queue(_ kind: TreeOperation.Kind) {
        operations.append(TreeOperation(kind: kind, after: work.endIndex))
    }

    /// The first pass is over: its walk ended, its entries are announced and answered, and
    /// its PRUNEs too.
    var firstPassDone: Bool {
        passListed && next >= work.endIndex && unanswered.isEmpty && eagerResumable.isEmpty
            && prunesSent >= pruneRoots.count && pruning.isEmpty && awaitingHave.isEmpty
    }

    /// `watch`: everything fed is answered (entries, CHECKs, MOVEs, REMOVEs, PRUNEs), and
    /// nothing waits to go.
    var answeredAll: Bool {
        next >= work.endIndex && checksSent >= checks.endIndex && unanswered.isEmpty && eagerResumable.isEmpty
            && awaitingHave.isEmpty && operations.isEmpty && operating.isEmpty && pruning.isEmpty
            && prunesSent >= pruneRoots.count
    }

    /// Whether the first queued operation may go now: every entry before it answered, the
    /// first pass's PRUNEs answered.
    var operationMayGo: Bool {
        unanswered.isEmpty && eagerResumable.isEmpty && passListed && prunesSent >= pruneRoots.count
            && pruning.isEmpty
    }

    /// Whether the receiver takes MOVE (and, with `delete`, REMOVE).
    var peerWatches: Bool { syncing && offers.watch }

    /// Sends the first queued operation (`canProceed` said it may go), or settles it here when
    /// the receiver does not take it.
    mutating func sendOperation() -> [SenderAction] {
        let operation = operations.removeFirst()
        guard peerWatches else {
            return [
                .operated(operation, .refused(reason: "the receiver does not take moves (it needs receive --sync)"))
            ]
        }
        switch operation.kind {
        case .move(let from, let to):
            operating.append(operation)
            return [.send(.move(from: Array(from.utf8), to: Array(to.utf8)))]
        case .remove(let path):
            guard
                offers.delete || settings.prunesArriving
                    || !settings.pruneRoots.isEmpty
            else {
                return [.operated(operation, .refused(reason: "removals are sent only with --delete"))]
            }
            operating.append(operation)
            return [.send(.remove(path: Array(path.utf8)))]
        }
    }

    /// STORED, REFUSED or FAILED for the operation sent (nil: it answers an entry or PRUNE).
    mutating func operationAnswered(_ frame: Frame) -> [SenderAction]? {
        guard unanswered.isEmpty, let operation = operating.first else { return nil }
        operating.removeFirst()
        switch frame {
        case .refused(_, let reason): return [.operated(operation, .refused(reason: reason))]
        case .failed(let code, let reason):
            return [.operated(operation, .failed(reason: reason, kind: code == .data ? .data : .io))]
        default: return [.operated(operation, .stored)]
        }
    }

    /// GONE for the REMOVE sent (nil: it is PRUNE's): the path must be the one removed or
    /// below it.
    mutating func operationGone(_ path: [UInt8]) -> [SenderAction]? {
        guard let operation = operating.first else { return nil }
        guard case .remove(let removed) = operation.kind else { return violation("GONE for a MOVE") }
        let root = Array(removed.utf8)
        guard path == root || (path.starts(with: root + [UInt8(ascii: "/")]) && path.count > root.count + 1) else {
            return violation("GONE for a path outside the path removed")
        }
        return [.removed(PeerText.sanitized(path))]
    }
}

extension SenderMachine {
    /// `watch`: the index below which every entry is done with: announced, answered (or
    /// settled here), its CHECK answered, nothing of it open, read or waited for, and no entry
    /// after it a hard link to it. Those entries may be forgotten (`forget`), with `--delete`
    /// before the PRUNEs go too (they name their directories by path, `prunePaths`). Only where
    /// the work is every entry (one connection): its work is the entries in order (a file
    /// announced again put back in it).
    var answeredBelow: Int {
        guard workIsEveryEntry else { return entries.startIndex }
        var bound = announcedBelow
        if let first = unanswered.min() { bound = min(bound, first) }
        if checksSent < checks.endIndex { bound = min(bound, checks[checksSent]) }
        if let first = awaitingHave.min() { bound = min(bound, first) }
        if let first = eagerResumable.keys.min() { bound = min(bound, first) }
        if let first = localFailures.keys.min() { bound = min(bound, first) }
        switch state {
        case .opening(let index): bound = min(bound, index)
        case .awaitingAccept(let file), .sending(let file): bound = min(bound, file.index)
        default: break
        }
        // A second name names its first by index: the first stays while the second does.
        for index in bound..<entries.endIndex {
            if let target = entries[index].hardLinkTo { bound = min(bound, target) }
        }
        return max(bound, entries.startIndex)
    }

    /// `watch`: the entries before it are announced and their CHECKs sent: an upper bound of
    /// `answeredBelow`, found at once (that one looks at every entry in flight).
    var announcedBelow: Int {
        var bound = next < work.endIndex ? work[next].index : entries.endIndex
        if checksSent < checks.endIndex { bound = min(bound, checks[checksSent]) }
        return bound
    }

    /// `watch`: forgets the entries before `bound` (at most `answeredBelow`), and what is kept
    /// of them by index; the others keep their indices.
    mutating func forget(below bound: Int) {
        guard bound > entries.startIndex else { return }
        for index in entries.startIndex..<bound {
            haves[index] = nil
            checksums[index] = nil
            checksumFailed.remove(index)
            stored.remove(index)
            announcedAgain.remove(index)
        }
        entries.forget(below: bound)
        settled.forget(below: bound)
        var position = work.startIndex
        while position < next, work[position].index < bound { position += 1 }
        work.forget(below: position)
        var checked = checks.startIndex
        while checked < checksSent, checks[checked] < bound { checked += 1 }
        checks.forget(below: checked)
        // Dictionaries and sets keep their capacity as they empty: a tree's first pass would
        // leave its size behind.
        haves = haves.compacted()
        checksums = checksums.compacted()
        stored = stored.compacted()
    }
}

extension Dictionary {
    /// The same pairs in storage of their size (a dictionary keeps its capacity as it empties).
    func compacted() -> Self {
        guard capacity > 64, count * 4 < capacity else { return self }
        var fresh = Self(minimumCapacity: count)
        for (key, value) in self { fresh[key] = value }
        return fresh
    }
}

extension Set {
    /// The same members in storage of their size (a set keeps its capacity as it empties).
    func compacted() -> Self {
        guard capacity > 64, count * 4 < capacity else { return self }
        var fresh = Self(minimumCapacity: count)
        fresh.formUnion(self)
        return fresh
    }
}
