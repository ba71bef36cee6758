import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// Which files of its sources a sender sends: the paths listed (`--files-from`), less those a
/// pattern excludes (`--exclude`), and of the files left, one shard (`--shard I/N`).
///
/// Paths are matched below each directory sent: for `send photos`, the file
/// `photos/2024/a.jpg` is `2024/a.jpg` here. A file named on the command line is matched by its
/// name. An excluded directory is not walked at all.
public struct FileSelection: Sendable, Hashable {
    /// Patterns in gitignore's style; an entry matching any of them is not sent.
    public var excludes: [ExcludePattern]
    /// When set, only these paths (relative, `/`-separated, below each directory sent) and
    /// what they hold are sent, with the directories that lead to them.
    public var only: [String]?
    /// When set, only the files of this shard are sent (every shard sends the directories).
    public var shard: Shard?
    /// The files of `shard` when it is balanced by bytes (`balancedByBytes`): by their paths on
    /// the wire. Nil: a file is in the shard its path hashes to.
    public private(set) var shardFiles: Set<String>?
    /// The ranges of files split across shards that this shard sends (`balancedByBytes` with
    /// `splitting`), by path on the wire, with the size the file had when they were planned.
    private(set) var shardRanges: [String: PlannedRanges] = [:]

    /// The ranges of one file a shard sends, and the file's size when they were planned.
    struct PlannedRanges: Sendable, Hashable {
        var size: UInt64
        var ranges: [ByteRange]
    }

    public init(excludes: [ExcludePattern] = [], only: [String]? = nil, shard: Shard? = nil) {
        self.excludes = excludes
        self.only = only
        self.shard = shard
    }

    /// Whether the file sent as `relative` is in the shard (every file is, without one).
    func inShard(_ relative: String) -> Bool {
        if let shardFiles { return shardFiles.contains(relative) || shardRanges[relative] != nil }
        return shard?.contains(relative) ?? true
    }

    /// This selection with its shard balanced by bytes rather than by path hash (`send
    /// --shard-by bytes`): the sources' metadata is walked (with the same excludes and list,
    /// no file opened) and every file is given to a shard as `Shard.balance` does, so N tasks
    /// that walk the same tree compute the same assignment with no word between them and each
    /// moves about 1/N of the bytes; with what this shard holds of them. Without a shard, the
    /// selection as it is. Throws as the walk does.
    ///
    /// With `splitting` (`send --group`, whose receiver puts a file's ranges together), a file
    /// larger than a share is split into ranges given to several shards (`Shard.balanceInRanges`).
    public func balancedByBytes(_ sources: [TransferSource], options: SourceOptions = [], splitting: Bool = false)
        throws(SluiceError) -> (selection: FileSelection, share: ShardShare)
    {
        guard let shard else { return (self, ShardShare(files: 0, bytes: 0, totalFiles: 0, totalBytes: 0)) }
        var all = self
        all.shard = nil
        all.shardFiles = nil
        all.shardRanges = [:]
        let entries = try SourceTree.entries(sources, selection: all, options: options) { _ in }
        // Files of unknown size or that cannot be read in place (a FIFO named on the command
        // line, say) are never split.
        let listed = entries.filter { !$0.isDirectory }
        let files = listed.map { (path: $0.relative, size: $0.size ?? 0) }
        let splittable = listed.map { entry in
            guard splitting, entry.size != nil, case .file = entry.kind else { return false }
            return entry.hardLinkTo == nil && !entry.linked && !entry.sparse
        }
        let pieces = Shard.balanceInRanges(files, count: shard.count, splittable: splittable)
        var balanced = self
        var whole: Set<String> = []
        var ranges: [String: PlannedRanges] = [:]
        var bytes: UInt64 = 0
        for piece in pieces where piece.shard == shard.index {
            let file = files[piece.file]
            bytes &+= piece.length
            if piece.whole {
                whole.insert(file.path)
            } else {
                ranges[file.path, default: PlannedRanges(size: file.size, ranges: [])].ranges.append(
                    ByteRange(start: piece.start, length: piece.length))
            }
        }
        balanced.shardFiles = whole
        balanced.shardRanges = ranges
        let share = ShardShare(
            files: whole.count + ranges.count, bytes: bytes, totalFiles: files.count,
            totalBytes: files.reduce(0) { $0 &+ $1.size }, ranges: ranges.values.reduce(0) { $0 + $1.ranges.count },
            splitFiles: Set(pieces.filter { !$0.whole }.map { $0.file }).count)
        return (balanced, share)
    }

    /// The ranges this shard sends of the file sent as `relative`, if it was split across
    /// shards and still has the size it had when they were planned (nil: send it as it is).
    func ranges(of relative: String, size: UInt64?) -> [ByteRange]? {
        guard let planned = shardRanges[relative] else { return nil }
        return planned.size == size ? planned.ranges : []
    }

    /// Whether this shard sends any file in ranges.
    var sendsRanges: Bool { !shardRanges.isEmpty }

    /// Whether an entry whose path below the directory sent is `components` is excluded.
    func excludes(_ components: [String], isDirectory: Bool) -> Bool {
        excludes.contains { $0.matches(components, isDirectory: isDirectory) }
    }
}

/// What one shard balanced by bytes holds of all the files (`FileSelection.balancedByBytes`).
public struct ShardShare: Sendable, Hashable {
    /// Files and bytes of this shard.
    public let files: Int
    public let bytes: UInt64
    /// Files and bytes of all shards together.
    public let totalFiles: Int
    public let totalBytes: UInt64
    /// Ranges of files split across shards that this shard holds (among `files` and `bytes`),
    /// and how many files were split across shards in all.
    public var ranges = 0
    public var splitFiles = 0

    public init(
        files: Int, bytes: UInt64, totalFiles: Int, totalBytes: UInt64, ranges: Int = 0, splitFiles: Int = 0
    ) {
        self.files = files
        self.bytes = bytes
        self.totalFiles = totalFiles
        self.totalBytes = totalBytes
        self.ranges = ranges
        self.splitFiles = splitFiles
    }
}

/// A file, or one range of it, given to a shard (`Shard.balanceInRanges`).
public struct ShardPiece: Sendable, Hashable {
    /// The file's index in the list balanced.
    public let file: Int
    /// Bytes `start ..< start + length` of it; the whole file when `whole`.
    public let start: UInt64
    public let length: UInt64
    public let whole: Bool
    public let shard: Int
}

/// One of N disjoint parts of a set of files, chosen by a hash of each file's path: N runs with
/// the same selection and shards 0 to N − 1 (on N hosts, started by any scheduler) send every
/// file exactly once between them, whatever order they walk in.
public struct Shard: Sendable, Hashable, CustomStringConvertible {
    /// From 0 to `count` − 1.
    public let index: Int
    public let count: Int

    /// Nil unless 0 ≤ `index` < `count`.
    public init?(index: Int, count: Int) {
        guard count >= 1, (0..<count).contains(index) else { return nil }
        self.index = index
        self.count = count
    }

    /// Parses `I/N`.
    public init?(parsing text: String) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy(\.isASCII) }),
            let index = Int(parts[0]), let count = Int(parts[1])
        else { return nil }
        self.init(index: index, count: count)
    }

    /// The shard of each of `files` when `count` shards are balanced by bytes: the largest file
    /// first (ties by path, in byte order) goes to the shard holding the fewest bytes so far
    /// (ties to the lowest index). A pure function of its input: every task that lists the same
    /// files gets the same answer. The shards' totals differ by at most the size of one file.
    public static func balance(_ files: [(path: String, size: UInt64)], count: Int) -> [Int] {
        guard count > 1 else { return Array(repeating: 0, count: files.count) }
        let order = files.indices.sorted { a, b in
            files[a].size != files[b].size
                ? files[a].size > files[b].size : files[a].path.utf8.lexicographicallyPrecedes(files[b].path.utf8)
        }
        var assignment = Array(repeating: 0, count: files.count)
        var lightest = LoadHeap(count: count)
        for index in order {
            assignment[index] = lightest.add(files[index].size)
        }
        return assignment
    }

    /// The pieces of `files` given to `count` shards when a file larger than a share (the total
    /// over `count`, rounded up) may be split (where `splittable` says so): such a file is cut
    /// into as many ranges as it holds shares (at most `count`), of equal length rounded up to
    /// 64 KiB (none shorter than two `minimumRange`s is split), and each range goes, largest
    /// first (ties by path, then by start), to the lightest shard that holds no range of the
    /// file yet (ties to the lowest index); then the other files go whole as `balance` gives
    /// them, onto those loads. A pure function of its input: every task that lists the same
    /// files gets the same pieces, and the pieces of a file cover it exactly once.
    public static func balanceInRanges(
        _ files: [(path: String, size: UInt64)], count: Int, splittable: [Bool],
        minimumRange: UInt64 = 256 << 10
    ) -> [ShardPiece] {
        let shards = max(count, 1)
        let total = files.reduce(UInt64(0)) { $0.addingReportingOverflow($1.size).overflow ? .max : $0 + $1.size }
        let share = max(total / UInt64(shards) + (total % UInt64(shards) == 0 ? 0 : 1), 1)
        var ranged: [(file: Int, range: ByteRange)] = []
        var whole: [Int] = []
        for (index, file) in files.enumerated() {
            guard shards > 1, index < splittable.count, splittable[index], file.size > share,
                file.size >= 2 * max(minimumRange, 1)
            else {
                whole.append(index)
                continue
            }
            let pieces = min(UInt64(shards), file.size / share + (file.size % share == 0 ? 0 : 1))
            for range in StreamPlan.ranges(of: file.size, streams: Int(pieces), minimumRange: minimumRange) {
                ranged.append((index, range))
            }
        }
        ranged.sort { a, b in
            if a.range.length != b.range.length { return a.range.length > b.range.length }
            if a.file != b.file {
                return files[a.file].path.utf8.lexicographicallyPrecedes(files[b.file].path.utf8)
            }
            return a.range.start < b.range.start
        }
        var loads = Array(repeating: UInt64(0), count: shards)
        var holding: [Int: Set<Int>] = [:]
        var pieces: [ShardPiece] = []
        for (file, range) in ranged {
            let taken = holding[file, default: []]
            let candidates = loads.indices.filter { !taken.contains($0) }
            let target = (candidates.isEmpty ? Array(loads.indices) : candidates).min { loads[$0] < loads[$1] } ?? 0
            loads[target] &+= range.length
            holding[file, default: []].insert(target)
            pieces.append(
                ShardPiece(file: file, start: range.start, length: range.length, whole: false, shard: target))
        }
        let order = whole.sorted { a, b in
            files[a].size != files[b].size
                ? files[a].size > files[b].size : files[a].path.utf8.lexicographicallyPrecedes(files[b].path.utf8)
        }
        var lightest = LoadHeap(loads: loads)
        for index in order {
            let shard = lightest.add(files[index].size)
            pieces.append(ShardPiece(file: index, start: 0, length: files[index].size, whole: true, shard: shard))
        }
        return pieces
    }

    /// Whether the file sent as `relative` (its path on the wire) belongs to this shard: by the
    /// 64-bit FNV-1a hash of the path's UTF-8 bytes, which every host computes alike.
    public func contains(_ relative: String) -> Bool {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in relative.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        return Int(hash % UInt64(count)) == index
    }

    public var description: String { "\(index)/\(count)" }
}

/// An exclusion pattern in gitignore's style:
///
/// - `*` matches any run of characters but `/`, `?` one character, `[a-z]` one of a set (as
///   `fnmatch(3)` does, within one name);
/// - a pattern without a `/` (but a trailing one) matches a name at any depth (`*.o`, `.git`);
///   one with a `/` is anchored to the directory sent (`build/out`, `/TODO`);
/// - `**` as a whole component matches any number of directories (`**/cache`, `logs/**`,
///   `a/**/b`);
/// - a trailing `/` matches only a directory (`tmp/`).
///
/// Blank lines and lines starting with `#` are not patterns; `!` (re-including) is not
/// supported and is refused.
public struct ExcludePattern: Sendable, Hashable, CustomStringConvertible {
    /// The pattern as written.
    public let text: String
    private let components: [String]
    private let anchored: Bool
    private let directoryOnly: Bool

    /// Nil for a line that is not a pattern (blank, or a comment).
    public init?(_ text: String) throws(SluiceError) {
        var body = Substring(text)
        while body.last == " " || body.last == "\r" { body.removeLast() }
        if body.isEmpty || body.hasPrefix("#") { return nil }
        if body.hasPrefix("!") {
            throw SluiceError(
                .invalidArgument, operation: "exclude", subject: text,
                detail: "'!' (including again what a pattern excluded) is not supported")
        }
        self.text = text
        directoryOnly = body.hasSuffix("/")
        while body.hasSuffix("/") { body.removeLast() }
        guard !body.isEmpty else {
            throw SluiceError(.invalidArgument, operation: "exclude", subject: text, detail: "an empty pattern")
        }
        anchored = body.dropFirst().contains("/") || body.hasPrefix("/")
        components = body.split(separator: "/").map(String.init)
    }

    public var description: String { text }

    /// Whether the entry at `path` (components below the directory sent) matches.
    func matches(_ path: [String], isDirectory: Bool) -> Bool {
        if directoryOnly && !isDirectory { return false }
        guard !path.isEmpty else { return false }
        if !anchored { return Self.matches(components[0], path[path.count - 1]) }
        return Self.matches(components[...], path[...])
    }

    /// `pattern` against `path`, component by component, `**` taking zero or more.
    private static func matches(_ pattern: ArraySlice<String>, _ path: ArraySlice<String>) -> Bool {
        guard let first = pattern.first else { return path.isEmpty }
        if first == "**" {
            let rest = pattern.dropFirst()
            if rest.isEmpty { return !path.isEmpty }  // `dir/**`: everything inside
            var tail = path
            while true {
                if matches(rest, tail) { return true }
                guard !tail.isEmpty else { return false }
                tail = tail.dropFirst()
            }
        }
        guard let name = path.first, matches(first, name) else { return false }
        return matches(pattern.dropFirst(), path.dropFirst())
    }

    /// One name against one component of a pattern.
    private static func matches(_ pattern: String, _ name: String) -> Bool {
        fnmatch(pattern, name, 0) == 0
    }
}

/// The shards' loads, lightest first (ties by index): a binary min-heap of (bytes, shard).
private struct LoadHeap {
    private var heap: [(bytes: UInt64, shard: Int)]

    init(count: Int) {
        heap = (0..<count).map { (0, $0) }  // already a heap: equal loads, indices in order
    }

    /// Shards holding `loads` already.
    init(loads: [UInt64]) {
        // Sorted lightest first (ties by index): a sorted array is a heap.
        heap = loads.enumerated().map { ($0.element, $0.offset) }.sorted { ($0.0, $0.1) < ($1.0, $1.1) }
    }

    /// Adds `size` to the lightest shard; returns it.
    mutating func add(_ size: UInt64) -> Int {
        let shard = heap[0].shard
        heap[0].bytes &+= size
        var i = 0
        while true {
            let (left, right) = (2 * i + 1, 2 * i + 2)
            var smallest = i
            if left < heap.count, precedes(heap[left], heap[smallest]) { smallest = left }
            if right < heap.count, precedes(heap[right], heap[smallest]) { smallest = right }
            if smallest == i { return shard }
            heap.swapAt(i, smallest)
            i = smallest
        }
    }

    private func precedes(_ a: (bytes: UInt64, shard: Int), _ b: (bytes: UInt64, shard: Int)) -> Bool {
        a.bytes != b.bytes ? a.bytes < b.bytes : a.shard < b.shard
    }
}
