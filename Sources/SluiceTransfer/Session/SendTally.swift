/// What a `TransferSender` counts and what it was answered: each entry's outcome, size and
/// bytes held by the receiver, the bytes done (for progress) and sent, holes, matched and
/// vouched bytes, the entries sent as deltas, and what `--delete` removed or could not. Changed
/// only by its methods, each one thing that happened.
struct SendTally {
    /// Each entry's answer (or failure on this side); nil while it has none.
    private(set) var outcomes: IndexedWindow<TransferOutcome?> = []
    /// Each entry's size: as listed, then as opened, then (a stream) as read.
    private(set) var sizes: IndexedWindow<UInt64?> = []
    /// Bytes of each entry the receiver held and were not sent again.
    private(set) var resumed: IndexedWindow<UInt64> = []
    /// Each entry's bytes in `bytesDone`: a file announced again (its receiver held part of it)
    /// counts from what it held, not twice.
    private var counted: IndexedWindow<UInt64> = []
    /// Bytes of the entries done: read, skipped as held, holes, matched (progress).
    private(set) var bytesDone: UInt64 = 0
    /// Bytes of the files' data sent (literal bytes, before compression).
    private(set) var bytesSentOfFiles: UInt64 = 0
    /// Bytes of holes not sent (sparse files).
    private(set) var holeBytes: UInt64 = 0
    /// Bytes of files sent as a delta that the receiver copied from its old copy (COPY).
    private(set) var matchedBytes: UInt64 = 0
    /// Bytes the receiver held and were not sent again.
    private(set) var resumedBytes: UInt64 = 0
    /// Of those, the bytes the receiver said were written under their file's TOKEN.
    private(set) var vouchedBytes: UInt64 = 0
    /// Entries sent as deltas.
    private(set) var sentAsDelta: Set<Int> = []
    /// With `delete`: the paths the receiver removed (would remove, on a dry run).
    private(set) var removed: [String] = []
    /// With `delete`: the directories it removed nothing from, and why.
    private(set) var pruneFailures: [String] = []
    /// One of `pruneFailures` was a refusal (the receiver did not allow removing).
    private(set) var pruneRefused = false

    /// The tally of `entries`, none answered yet.
    init(_ entries: [OutgoingEntry]) {
        arrived(entries)
    }

    /// More entries listed, none answered yet.
    mutating func arrived(_ entries: [OutgoingEntry]) {
        outcomes += Array(repeating: nil, count: entries.count)
        sizes += entries.map(\.size)
        resumed += Array(repeating: 0, count: entries.count)
        counted += Array(repeating: 0, count: entries.count)
    }

    /// Entry `index` is announced again (the receiver holds part of it): what it counted goes.
    mutating func announcedAgain(_ index: Int) {
        bytesDone -= counted[index]
        counted[index] = 0
    }

    /// Entry `index` is `size` bytes (as opened, or a stream as read).
    mutating func sized(_ index: Int, _ size: UInt64) {
        sizes[index] = size
    }

    /// The receiver holds `offset` bytes of entry `index` (of its `range`: the ranges of a file
    /// a connection sends add up).
    mutating func resumes(_ index: Int, offset: UInt64, range: Bool) {
        resumed[index] = range ? resumed[index] + offset : offset
        resumedBytes += offset
        bytesDone += offset
    }

    /// `length` held bytes the receiver wrote under the file's TOKEN: not hashed again.
    mutating func vouched(_ length: UInt64) {
        vouchedBytes += length
    }

    /// `count` bytes of entry `index` were read and sent.
    mutating func sent(_ index: Int, _ count: UInt64) {
        bytesDone += count
        counted[index] += count
        bytesSentOfFiles += count
    }

    /// A hole of `length` bytes of entry `index` went as HOLE.
    mutating func hole(_ index: Int, _ length: UInt64) {
        bytesDone += length
        counted[index] += length
        holeBytes += length
    }

    /// `bytes` of entry `index` went as COPY (the receiver copies them from its old copy).
    mutating func matched(_ index: Int, _ bytes: UInt64) {
        bytesDone += bytes
        counted[index] += bytes
        matchedBytes += bytes
    }

    /// Entry `index` went as a delta.
    mutating func sentDelta(_ index: Int) {
        sentAsDelta.insert(index)
    }

    /// Entry `index` was answered (or failed here) with `outcome`.
    mutating func settled(_ index: Int, _ outcome: TransferOutcome) {
        outcomes[index] = outcome
    }

    /// The receiver removed `path` (`delete`).
    mutating func gone(_ path: String) {
        removed.append(path)
    }

    /// `delete` removed nothing under a directory: `failure` says which and why.
    mutating func pruneFailed(_ failure: String, refused: Bool) {
        if refused { pruneRefused = true }
        pruneFailures.append(failure)
    }

    /// `send --watch`: the entries before `bound` are answered and forgotten (their indices
    /// stay theirs: those after keep them), and so are the paths removed so far (returned:
    /// counted, not listed, by the caller).
    mutating func forget(below bound: Int) -> Int {
        for index in outcomes.startIndex..<max(bound, outcomes.startIndex) { sentAsDelta.remove(index) }
        outcomes.forget(below: bound)
        sizes.forget(below: bound)
        resumed.forget(below: bound)
        counted.forget(below: bound)
        if sentAsDelta.isEmpty { sentAsDelta = [] }
        let removedCount = removed.count
        removed = []
        return removedCount
    }

    /// The transfer ended: the entries not answered failed with `reason`.
    mutating func unanswered(_ reason: String) {
        for index in outcomes.indices where outcomes[index] == nil {
            outcomes[index] = .failed(reason: reason, kind: .io)
        }
    }
}
