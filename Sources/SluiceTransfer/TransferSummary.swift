import Sluice

/// The result of a sender's run.
public struct TransferSummary: Sendable {
    /// Files stored by the receiver.
    public var files: Int
    /// Directory entries stored (created or already present).
    public var directories: Int
    /// File bytes sent in this run (before compression; resumed prefixes excluded). A file
    /// sent eagerly that the receiver turned out to hold part of counts what was sent of it
    /// before the receiver said so, too.
    public var bytes: UInt64
    /// Bytes written to the connection: protocol, after compression.
    public var bytesSent: UInt64
    /// Bytes read from the connection: the receiver's answers (and signatures, for deltas).
    public var bytesReceived: UInt64 = 0
    /// File bytes not sent because the receiver held them from an interrupted transfer.
    public var resumedBytes: UInt64
    /// Of `resumedBytes`, those the resume key vouched for (`TransferSendOptions.resumeKey`):
    /// neither end read them back to check them. The others were read at both ends and
    /// checked with SHA-256.
    public var vouchedBytes: UInt64 = 0
    public var seconds: Double
    /// Every entry, in the order sent, with its outcome. Entries never reached because the
    /// connection failed are `.failed(…, kind: .io)`.
    public var results: [TransferFileResult]
    /// Why the transfer as a whole failed (connect failed, connection reset, protocol
    /// violation, cancelled), or nil when every entry was answered.
    public var error: SluiceError?
    /// The digest files were checked with, as agreed with the receiver (nil when no HELLO came).
    public var digest: TransferDigest? = nil
    /// Bytes of sparse files' holes: counted in the files' sizes, not sent.
    public var holeBytes: UInt64 = 0
    /// Bytes of files sent as deltas that the receiver took from its old copies (the literal
    /// bytes are in `bytes`).
    public var matchedBytes: UInt64 = 0
    /// With `TransferSendOptions.delete`: the paths the receiver removed (on a dry run, would
    /// remove), and why a directory was not pruned, if one was not.
    public var removed: [String] = []
    public var pruneFailures: [String] = []
    /// Among `pruneFailures`, one the receiver refused (it does not allow removing:
    /// `receive --delete`), rather than one that failed.
    public var pruneRefused = false
    /// The entries answered STORED that `results` does not list, counted: a watch
    /// (`TransferWatch`) forgets them as it goes, so that its memory does not grow with its
    /// length; `results` then lists the others (refused, failed). Zero for any other transfer.
    public var forgotten = TransferResultCounts()

    /// Symbolic and hard links stored (counted in `files` too).
    public var links: Int { forgotten.links + results.filter { $0.isLink && $0.outcome.isStored }.count }
    /// Devices, and FIFOs and sockets, stored (counted in `files` too).
    public var devices: Int { forgotten.devices + results.filter { $0.isDevice && $0.outcome.isStored }.count }
    public var specials: Int { forgotten.specials + results.filter { $0.isSpecial && $0.outcome.isStored }.count }
    /// Entries sent as deltas.
    public var deltas: Int { forgotten.deltas + results.filter(\.sentAsDelta).count }
    /// Paths the receiver removed (`removed`, and those a watch counted and forgot).
    public var removedCount: Int { forgotten.removed + removed.count }

    /// True when the connection completed and every entry was stored.
    public var succeeded: Bool {
        error == nil && results.allSatisfy { $0.outcome.isStored } && pruneFailures.isEmpty
    }
}

/// Counts of a summary's entries stored and no longer listed one by one (`TransferSummary.forgotten`):
/// what a report takes from them. Sums add up (`+`): a watch's sessions make one summary.
public struct TransferResultCounts: Hashable, Sendable {
    /// Files, and directories, stored (already counted in the summary's `files` and
    /// `directories`).
    public var files = 0
    public var directories = 0
    public var links = 0
    public var devices = 0
    public var specials = 0
    public var deltas = 0
    /// With sync: what the receiver had (`TransferChange`): nothing, something else, the same
    /// (and among those, how many were given new attributes without data: a mode, extended
    /// attributes, an owner or group).
    public var created = 0
    public var replaced = 0
    public var unchanged = 0
    public var updatedInPlace = 0
    /// Paths removed (`TransferSummary.removed`, counted).
    public var removed = 0
    /// Entries refused, and entries failed, that `TransferSummary.results` does not list: a
    /// long watch keeps the first thousand of them (and one of each kind the exit status tells
    /// apart), and counts the rest here.
    public var refused = 0
    public var failed = 0

    public init() {}

    /// What a change that left an entry unchanged but set without data is: a new mode,
    /// extended attributes, owner or group.
    public static let inPlace: TransferDifferences = [.mode, .xattrs, .owner, .group]

    /// Counts `result` (a stored one).
    public mutating func count(_ result: TransferFileResult) {
        if result.isDirectory { directories += 1 } else { files += 1 }
        if result.isLink { links += 1 }
        if result.isDevice { devices += 1 }
        if result.isSpecial { specials += 1 }
        if result.sentAsDelta { deltas += 1 }
        switch result.change {
        case .created: created += 1
        case .replaced: replaced += 1
        case .unchanged(let differences):
            unchanged += 1
            if !differences.isDisjoint(with: Self.inPlace) { updatedInPlace += 1 }
        case nil: break
        }
    }

    public static func + (lhs: TransferResultCounts, rhs: TransferResultCounts) -> TransferResultCounts {
        var sum = lhs
        sum.files += rhs.files
        sum.directories += rhs.directories
        sum.links += rhs.links
        sum.devices += rhs.devices
        sum.specials += rhs.specials
        sum.deltas += rhs.deltas
        sum.created += rhs.created
        sum.replaced += rhs.replaced
        sum.unchanged += rhs.unchanged
        sum.updatedInPlace += rhs.updatedInPlace
        sum.removed += rhs.removed
        sum.refused += rhs.refused
        sum.failed += rhs.failed
        return sum
    }
}
