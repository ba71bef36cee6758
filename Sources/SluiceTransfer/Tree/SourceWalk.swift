import Synchronization

/// A `SourceTree.Walk` shared with the workers that step it, one step at a time.
final class SourceWalk: Sendable {
    private let walk: Mutex<SourceTree.Walk>

    init(_ walk: SourceTree.Walk) {
        self.walk = Mutex(walk)
    }

    /// The walk's next step (`SourceTree.Walk.next`).
    func next(limit: Int) -> SourceTree.Batch {
        walk.withLock { $0.next(limit: limit) }
    }
}
