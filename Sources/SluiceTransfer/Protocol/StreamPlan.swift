import Sluice

/// How a transfer over several connections shares out its entries: pure, so that the same
/// sources and count always give the same ranges (a resume finds the ranges it left).
///
/// - Directories go first on connection 0, in order (before anything is stored under them),
///   and streams of unknown size last on it.
/// - A regular file of at least two minimum ranges is split into up to `streams` ranges of
///   equal length (rounded up to 64 KiB), range `k` on connection `k`; these files come next
///   on every connection, in the same order, so that all the ranges of a file travel at once.
/// - Other files go, whole, to the connection with the fewest bytes planned so far; but files
///   with holes or with another name (`-H`) go whole on connection 0, and links (and devices,
///   FIFOs and sockets) last on it, so
///   that a hard link follows its file on the same connection.
///
/// A `Planner` shares out entries as a walk lists them, a batch at a time, by the same rules
/// within each batch (what goes "first" or "last" does so within its batch), the load planned
/// so far carried from one batch to the next: `plan` is one batch of every entry.
enum StreamPlan {
    /// The smallest range a file is split into.
    static let minimumRange: UInt64 = 256 << 10
    /// Range lengths are multiples of this (but the last).
    static let rangeAlignment: UInt64 = 64 << 10

    /// The work of each of `streams` connections for `entries` whose sizes at listing were
    /// `sizes` (nil: unknown, a stream).
    static func plan(
        entries: [SenderMachine.Entry], sizes: [UInt64?], streams: Int, minimumRange: UInt64 = minimumRange
    ) -> [[SenderMachine.Work]] {
        var planner = Planner(streams: streams, minimumRange: minimumRange)
        return planner.place(entries, sizes: sizes, first: 0)
    }

    /// Shares out entries batch after batch, by `StreamPlan`'s rules.
    struct Planner: Sendable {
        let streams: Int
        let minimumRange: UInt64
        /// Bytes planned so far on each connection.
        private(set) var load: [UInt64]

        init(streams: Int, minimumRange: UInt64 = StreamPlan.minimumRange) {
            precondition(streams >= 1, "StreamPlan: a caller's error")
            self.streams = streams
            self.minimumRange = minimumRange
            load = Array(repeating: 0, count: streams)
        }

        /// The work of each connection for `entries`, those from index `first` on, whose sizes
        /// at listing were `sizes` (nil: unknown, a stream).
        mutating func place(_ entries: [SenderMachine.Entry], sizes: [UInt64?], first: Int)
            -> [[SenderMachine.Work]]
        {
            precondition(entries.count == sizes.count, "StreamPlan: a caller's error")
            var work = Array(repeating: [SenderMachine.Work](), count: streams)
            var whole: [Int] = []
            var unknown: [Int] = []
            var pinned: [Int] = []
            var links: [Int] = []
            for (offset, entry) in entries.enumerated() {
                let index = first + offset
                if entry.isDirectory {
                    work[0].append(.entry(index))
                } else if entry.symlinkTarget != nil || entry.hardLinkTo != nil || entry.special != nil {
                    links.append(index)
                } else if entry.linked || entry.sparse {
                    pinned.append(index)
                    load[0] += sizes[offset] ?? 0
                } else if !entry.seekable || sizes[offset] == nil {
                    unknown.append(index)
                } else {
                    whole.append(index)
                }
            }
            var small: [Int] = []
            for index in whole {
                let size = sizes[index - first] ?? 0
                let ranges = StreamPlan.ranges(of: size, streams: streams, minimumRange: minimumRange)
                guard ranges.count > 1 else {
                    small.append(index)
                    continue
                }
                for (k, range) in ranges.enumerated() {
                    work[k].append(.range(index, range, fileSize: size))
                    load[k] += range.length
                }
            }
            for index in small {
                let target = load.indices.min { load[$0] < load[$1] } ?? 0
                work[target].append(.entry(index))
                load[target] += sizes[index - first] ?? 0
            }
            work[0] += (pinned + unknown + links).map(SenderMachine.Work.entry)
            return work
        }
    }

    /// The ranges a file of `size` bytes is split into: one (the whole file) when it is smaller
    /// than two minimum ranges.
    static func ranges(of size: UInt64, streams: Int, minimumRange: UInt64 = minimumRange) -> [ByteRange] {
        let pieces = min(UInt64(streams), size / max(minimumRange, 1))
        guard pieces > 1 else { return [ByteRange(start: 0, length: size)] }
        var length = (size + pieces - 1) / pieces
        length = (length + rangeAlignment - 1) / rangeAlignment * rangeAlignment
        var out: [ByteRange] = []
        var start: UInt64 = 0
        while start < size {
            let this = min(length, size - start)
            out.append(ByteRange(start: start, length: this))
            start += this
        }
        return out
    }
}
