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

    public init(excludes: [ExcludePattern] = [], only: [String]? = nil, shard: Shard? = nil) {
        self.excludes = excludes
        self.only = only
        self.shard = shard
    }

    /// Whether the file sent as `relative` is in the shard (every file is, without one).
    func inShard(_ relative: String) -> Bool {
        if let shardFiles { return shardFiles.contains(relative) }
        return shard?.contains(relative) ?? true
    }

    /// This selection with its shard balanced by bytes rather than by path hash (`send
    /// --shard-by bytes`): the sources' metadata is walked (with the same excludes and list,
    /// no file opened) and every file is given to a shard as `Shard.balance` does, so N tasks
    /// that walk the same tree compute the same assignment with no word between them and each
    /// moves about 1/N of the bytes; with what this shard holds of them. Without a shard, the
    /// selection as it is. Throws as the walk does.
    public func balancedByBytes(_ sources: [TransferSource], options: SourceOptions = [])
        throws(SluiceError) -> (selection: FileSelection, share: ShardShare)
    {
        guard let shard else { return (self, ShardShare(files: 0, bytes: 0, totalFiles: 0, totalBytes: 0)) }
        var all = self
        all.shard = nil
        all.shardFiles = nil
        let entries = try SourceTree.entries(sources, selection: all, options: options) { _ in }
        let files = entries.filter { !$0.isDirectory }.map { (path: $0.relative, size: $0.size ?? 0) }
        let assignment = Shard.balance(files, count: shard.count)
        let mine = zip(files, assignment).filter { $0.1 == shard.index }.map(\.0)
        var balanced = self
        balanced.shardFiles = Set(mine.map(\.path))
        let share = ShardShare(
            files: mine.count, bytes: mine.reduce(0) { $0 &+ $1.size }, totalFiles: files.count,
            totalBytes: files.reduce(0) { $0 &+ $1.size })
        return (balanced, share)
    }

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
