import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// One entry a sender will send: a directory, a file by path, or a stream.
struct OutgoingEntry: Sendable {
    enum Kind: Sendable {
        case directory
        case file(String)
        /// The `k`th stream among the sources (`SourceTree.streams`).
        case stream(Int)
        /// A symbolic link inside a directory sent: its target as written.
        case symlink(String, target: [UInt8])
        /// A device (its numbers), FIFO or socket (`devices`, `specials`): never opened.
        case special(Wire.SpecialType, major: UInt32, minor: UInt32)
    }

    var kind: Kind
    /// The relative path on the wire.
    var relative: String
    var mode: UInt32
    var mtimeSeconds: Int64
    var mtimeNanoseconds: UInt32
    var size: UInt64?
    /// Another name of the file entry at this index (`-H`).
    var hardLinkTo: Int? = nil
    /// A later entry is another name of this file.
    var linked = false
    /// Fewer blocks allocated than its size: it has holes.
    var sparse = false
    var attributes = EntryAttributes()

    var isDirectory: Bool {
        if case .directory = kind { return true }
        return false
    }

    /// A device, FIFO or socket.
    var isSpecial: Bool {
        if case .special = kind { return true }
        return false
    }
}

/// Turns the sender's sources into the list of entries to send, walking directories: regular
/// files, directories (empty ones too) and symbolic links are sent, each directory before what
/// it holds; devices and FIFOs and sockets with the `SourceOptions` `.devices` and `.specials`
/// (each only `lstat`ed, never opened), else skipped with a warning. A path given directly is
/// followed if it is a link, as `scp -r` does. `selection` chooses among them
/// (`FileSelection`). With `.hardLinks`, a file's second name is an entry of its own, after
/// every file, naming the first (`hardLinkTo`). A `Walk` lists them a few at a time, for
/// a sender that sends while it walks; `list` lists them all at once.
enum SourceTree {
    /// Lists `sources` whole, at once (`ParallelTransferSender` shares the entries out before it
    /// sends; and tests). Throws as `Walk.init` does; what cannot be listed below the sources is
    /// a warning, and `incomplete` says there was some.
    static func list(
        _ sources: [TransferSource], selection: FileSelection = FileSelection(), options: SourceOptions = [],
        warn: (String) -> Void
    ) throws(SluiceError) -> (entries: [OutgoingEntry], incomplete: Bool) {
        var walk = try Walk(sources, selection: selection, options: options)
        var entries: [OutgoingEntry] = []
        var incomplete = false
        while true {
            let batch = walk.next(limit: Int.max)
            batch.warnings.forEach(warn)
            entries += batch.entries
            incomplete = incomplete || batch.incomplete
            if batch.done { return (entries, incomplete) }
        }
    }

    /// The entries of `sources`, listed whole (`list`).
    static func entries(
        _ sources: [TransferSource], selection: FileSelection = FileSelection(), options: SourceOptions = [],
        warn: (String) -> Void
    ) throws(SluiceError) -> [OutgoingEntry] {
        try list(sources, selection: selection, options: options, warn: warn).entries
    }

    /// The streams among `sources`, in order: an entry `.stream(k)` is the `k`th.
    static func streams(_ sources: [TransferSource]) -> [ReadStream] {
        sources.compactMap { source in
            if case .stream(let stream, _, _) = source { return stream }
            return nil
        }
    }

    /// What one step of a walk found.
    struct Batch: Sendable {
        /// The entries, in the walk's order, following those of the steps before.
        var entries: [OutgoingEntry] = []
        /// What was skipped, and why.
        var warnings: [String] = []
        /// Something below a source could not be listed (a directory that cannot be read, an
        /// entry gone between its directory's listing and its `lstat`): `--delete` removes
        /// nothing.
        var incomplete = false
        /// The walk is over: no entries follow.
        var done = false
    }

    /// A walk of the sender's sources, step by step, so that a sender can send while it walks
    /// (on a worker: `TransferSender+Walk`). `init` checks the sources given, as a command
    /// line's operands are checked (it throws for one that does not exist, a directory that
    /// cannot be opened, a `--files-from` path that is not there); `next` lists what lies
    /// below them, a bounded number of entries at a time, in the order the whole walk has:
    /// each directory before what it holds, names sorted, the sources in the order given. What
    /// goes wrong below a source is a warning, and that part is not sent.
    ///
    /// With `.hardLinks`, a file with several names (`st_nlink` > 1) waits for the
    /// walk's end, where it follows every other entry (flagged `linked` if a second name was
    /// found), then its second names, each naming it (`hardLinkTo`): FILE must say whether a
    /// later LINK names it before the walk can know.
    struct Walk: Sendable {
        private enum Root: Sendable {
            case stream(slot: Int, name: String, mode: UInt32, mtimeSeconds: Int64)
            case path(String, name: String, status: stat)
            case skipped(String)
        }

        /// A directory being walked: its names, sorted, and the next to visit.
        private struct Frame: Sendable {
            var directory: String
            var relative: String
            var below: [String]
            var names: [String]
            var position = 0
        }

        private struct FileKey: Hashable, Sendable {
            var device: UInt64
            var inode: UInt64
        }

        private let options: SourceOptions
        private let walker: Walker
        private let roots: [Root]
        private var nextRoot = 0
        private var stack: [Frame] = []
        /// Entries given out so far: the index of the next.
        private var emitted = 0
        /// The listed paths (`only`) met below the directory source being walked.
        private var found: Set<[String]> = []
        /// With `hardLinks`: files with several names, held back; the names after the first
        /// (each with its first's place among those held); the place of each (device, inode).
        private var held: [OutgoingEntry] = []
        private var secondNames: [(entry: OutgoingEntry, first: Int)] = []
        private var firstNames: [FileKey: Int] = [:]
        private var linked: Set<Int> = []
        private(set) var done = false
        /// The components of the one root below the directory sent (`subtree`): what its
        /// excludes are matched against. Empty for a walk of sources.
        private var rootBelow: [String] = []

        /// A walk of one path inside a directory sent, `below` it (components), sent as
        /// `relative` (`send --watch`: a directory that appeared, or a file that changed).
        /// What it holds is listed as a walk of the sources would list it, with the same
        /// selection; the caller decides whether the path itself is excluded.
        init(subtree path: String, relative: String, below: [String], selection: FileSelection, options: SourceOptions)
            throws(SluiceError)
        {
            self.options = options
            walker = Walker(selection: selection)
            var st = stat()
            try syscallValue("lstat", path) { lstat(path, &st) }
            roots = [.path(path, name: relative, status: st)]
            rootBelow = below
        }

        /// Whether a directory is among the sources (for `--delete`).
        var mayPrune: Bool {
            roots.contains { root in
                if case .path(_, _, let st) = root { return st.st_mode & S_IFMT == S_IFDIR }
                return false
            }
        }

        init(_ sources: [TransferSource], selection: FileSelection, options: SourceOptions) throws(SluiceError) {
            self.options = options
            walker = Walker(selection: selection)
            var roots: [Root] = []
            var streams = 0
            let now = Int64(time(nil))
            for source in sources {
                switch source {
                case .stream(_, let name, let mode):
                    guard case .success = PathCheck.components(Array(name.utf8)) else {
                        throw SluiceError(
                            .invalidArgument, operation: "send", subject: name,
                            detail: "a stream's name must be a relative path without '.' or '..' components")
                    }
                    roots.append(.stream(slot: streams, name: name, mode: mode, mtimeSeconds: now))
                    streams += 1
                case .path(let path):
                    var st = stat()
                    try syscallValue("stat", path) { stat(path, &st) }
                    let name = try baseName(path)
                    switch st.st_mode & S_IFMT {
                    case S_IFREG:
                        roots.append(.path(path, name: name, status: st))
                    case S_IFDIR:
                        guard let dir = opendir(path) else {
                            throw SluiceError(.system(.current), operation: "opendir", subject: path)
                        }
                        closedir(dir)
                        try Self.checkListed(path, walker)
                        roots.append(.path(path, name: name, status: st))
                    default:
                        if options.special(st) != nil {
                            roots.append(.path(path, name: name, status: st))
                        } else {
                            roots.append(.skipped("skipping \(quoted(path)): not a regular file or directory"))
                        }
                    }
                }
            }
            self.roots = roots
        }

        /// Throws for the first listed path (`only`) the walk of `directory` would not meet: not
        /// there, or below something that is not a directory, or excluded.
        private static func checkListed(_ directory: String, _ walker: Walker) throws(SluiceError) {
            guard let listed = walker.listed else { return }
            for components in listed.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
                let path = directory + "/" + components.joined(separator: "/")
                for end in 1...components.count {
                    let part = directory + "/" + components[..<end].joined(separator: "/")
                    var st = stat()
                    guard lstat(part, &st) == 0 else {
                        throw SluiceError(.system(.current), operation: "stat", subject: path)
                    }
                    if end < components.count,
                        st.st_mode & S_IFMT != S_IFDIR
                            || walker.selection.excludes(Array(components[..<end]), isDirectory: true)
                    {
                        throw SluiceError(.system(.noSuchFile), operation: "stat", subject: path)
                    }
                }
            }
        }

        /// Lists about `limit` more entries (a directory's names are read whole, and held
        /// files all come at the end).
        mutating func next(limit: Int) -> Batch {
            var batch = Batch()
            while !done && batch.entries.count < limit {
                if var frame = stack.popLast() {
                    guard frame.position < frame.names.count else {
                        if stack.isEmpty { finishDirectorySource(frame.directory, &batch) }
                        continue
                    }
                    let name = frame.names[frame.position]
                    frame.position += 1
                    let (directory, relative, below) = (frame.directory, frame.relative, frame.below)
                    stack.append(frame)
                    visit(name, in: directory, relative: relative, below: below, &batch)
                } else if nextRoot < roots.count {
                    nextRoot += 1
                    start(roots[nextRoot - 1], &batch)
                } else {
                    finish(&batch)
                }
            }
            return batch
        }

        private mutating func start(_ root: Root, _ batch: inout Batch) {
            switch root {
            case .stream(let slot, let name, let mode, let mtime):
                emit(
                    OutgoingEntry(
                        kind: .stream(slot), relative: name, mode: mode & 0o7777, mtimeSeconds: mtime,
                        mtimeNanoseconds: 0, size: nil), &batch)
            case .skipped(let warning):
                batch.warnings.append(warning)
            case .path(let path, let name, let st):
                switch st.st_mode & S_IFMT {
                case S_IFREG:
                    if walker.takesFile(rootBelow.isEmpty ? [name] : rootBelow, relative: name) {
                        add(entry(.file(path), name, st), st, path: path, &batch)
                    }
                case S_IFDIR:
                    found = []
                    guard let names = names(path, &batch) else { return }
                    add(entry(.directory, name, st), st, path: path, &batch)
                    stack.append(Frame(directory: path, relative: name, below: rootBelow, names: names))
                case S_IFLNK where !rootBelow.isEmpty:
                    // Inside a directory sent, a link goes as a link (as the walk of it sends it).
                    guard walker.selection.inShard(name), let target = SourceMetadata.linkTarget(path) else { return }
                    add(entry(.symlink(path, target: target), name, st), st, path: path, &batch)
                default:
                    if let special = options.special(st),
                        walker.takesFile(rootBelow.isEmpty ? [name] : rootBelow, relative: name)
                    {
                        add(entry(special, name, st), st, path: path, &batch)
                    }
                }
            }
        }

        /// A directory source walked: a listed path it did not meet (gone since `init`)
        /// is a warning.
        private mutating func finishDirectorySource(_ directory: String, _ batch: inout Batch) {
            guard let listed = walker.listed else { return }
            for missing in listed.subtracting(found).sorted(by: { $0.lexicographicallyPrecedes($1) }) {
                let path = directory + "/" + missing.joined(separator: "/")
                batch.warnings.append("skipping \(quoted(path)): not found by the walk")
                batch.incomplete = true
            }
        }

        /// The end: the files held back (`hardLinks`), then their second names.
        private mutating func finish(_ batch: inout Batch) {
            let base = emitted
            for (place, var entry) in held.enumerated() {
                entry.linked = linked.contains(place)
                emit(entry, &batch)
            }
            for (var entry, first) in secondNames {
                entry.hardLinkTo = base + first
                emit(entry, &batch)
            }
            held = []
            secondNames = []
            firstNames = [:]
            done = true
            batch.done = true
        }

        private mutating func emit(_ entry: OutgoingEntry, _ batch: inout Batch) {
            batch.entries.append(entry)
            emitted += 1
        }

        /// The names in `directory`, sorted; nil (and a warning) when it cannot be read.
        private func names(_ directory: String, _ batch: inout Batch) -> [String]? {
            func failed(_ operation: String) -> [String]? {
                let error = SluiceError(.system(.current), operation: operation, subject: directory)
                batch.warnings.append("skipping \(quoted(directory)): \(operation): \(error.reason)")
                batch.incomplete = true
                return nil
            }
            guard let dir = opendir(directory) else { return failed("opendir") }
            defer { closedir(dir) }
            var names: [String] = []
            while true {
                errno = 0
                guard let item = readdir(dir) else {
                    if errno != 0 { return failed("readdir") }
                    break
                }
                let name = withUnsafeBytes(of: item.pointee.d_name) { raw in
                    raw.baseAddress.flatMap {
                        String(validatingCString: $0.assumingMemoryBound(to: CChar.self))
                    }
                }
                guard let name else {
                    batch.warnings.append("skipping a name in \(quoted(directory)) that is not valid UTF-8")
                    continue
                }
                if name == "." || name == ".." { continue }
                names.append(name)
            }
            return names.sorted()
        }

        /// One name in a directory being walked.
        private mutating func visit(
            _ name: String, in directory: String, relative: String, below: [String], _ batch: inout Batch
        ) {
            let path = directory.hasSuffix("/") ? directory + name : directory + "/" + name
            let childRelative = relative + "/" + name
            let childBelow = below + [name]
            var st = stat()
            guard lstat(path, &st) == 0 else {
                let error = SluiceError(.system(.current), operation: "lstat", subject: path)
                batch.warnings.append("skipping \(quoted(path)): lstat: \(error.reason)")
                batch.incomplete = true
                return
            }
            let isDirectory = st.st_mode & S_IFMT == S_IFDIR
            let (take, listed) = walker.decide(childBelow, isDirectory: isDirectory)
            if listed { found.insert(childBelow) }
            guard take else { return }
            if childRelative.utf8.count > Wire.maxPathBytes {
                batch.warnings.append("skipping \(quoted(path)): path longer than \(Wire.maxPathBytes) bytes")
                return
            }
            let inShard = walker.selection.inShard(childRelative)
            switch st.st_mode & S_IFMT {
            case S_IFREG:
                if inShard { add(entry(.file(path), childRelative, st), st, path: path, &batch) }
            case S_IFDIR:
                guard let names = names(path, &batch) else { return }
                add(entry(.directory, childRelative, st), st, path: path, &batch)
                stack.append(Frame(directory: path, relative: childRelative, below: childBelow, names: names))
            case S_IFLNK:
                guard inShard else { return }
                guard let target = SourceMetadata.linkTarget(path) else {
                    batch.warnings.append("skipping symbolic link \(quoted(path)): cannot read its target")
                    return
                }
                add(entry(.symlink(path, target: target), childRelative, st), st, path: path, &batch)
            default:
                if let special = options.special(st) {
                    if inShard { add(entry(special, childRelative, st), st, path: path, &batch) }
                } else {
                    batch.warnings.append("skipping \(quoted(path)): not a regular file or directory")
                }
            }
        }

        /// Gives out an entry the walk found, with its extended attributes and owner as asked;
        /// a file with several names (`hardLinks`) is held back for the end.
        private mutating func add(_ found: OutgoingEntry, _ st: stat, path: String, _ batch: inout Batch) {
            var entry = found
            if options.contains(.owners) {
                entry.attributes.owner = OwnerNames.shared.owner(of: st, numeric: options.contains(.numericIDs))
            }
            switch entry.kind {
            case .symlink, .special:
                emit(entry, &batch)
                return
            case .directory, .file, .stream:
                break
            }
            if options.contains(.xattrs) {
                entry.attributes.xattrs = SourceMetadata.xattrs(path) { batch.warnings.append($0) }
                entry.attributes.xattrsRead = true
            }
            if case .file = entry.kind {
                entry.sparse = Int64(st.st_blocks) * 512 < Int64(st.st_size)
                if options.contains(.hardLinks), st.st_nlink > 1 {
                    let key = FileKey(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
                    if let first = firstNames[key] {
                        linked.insert(first)
                        secondNames.append((entry, first))
                    } else {
                        firstNames[key] = held.count
                        held.append(entry)
                    }
                    return
                }
            }
            emit(entry, &batch)
        }
    }

    /// The selection, prepared for the walk.
    private struct Walker: Sendable {
        let selection: FileSelection
        /// The listed paths (`only`), and every directory leading to one.
        let listed: Set<[String]>?
        let leading: Set<[String]>

        init(selection: FileSelection) {
            self.selection = selection
            let listed = selection.only.map { Set($0.map { $0.split(separator: "/").map(String.init) }) }
            var leading: Set<[String]> = []
            for path in listed ?? [] where path.count > 1 {
                for end in 1..<path.count { leading.insert(Array(path[..<end])) }
            }
            self.listed = listed
            self.leading = leading
        }

        /// What to do with the entry at `below` (components under the directory sent).
        func decide(_ below: [String], isDirectory: Bool) -> (take: Bool, listed: Bool) {
            let isListed = listed?.contains(below) ?? false
            if selection.excludes(below, isDirectory: isDirectory) { return (false, isListed) }
            guard let listed else { return (true, false) }
            if isListed { return (true, true) }
            // Inside a listed directory, or a directory on the way to a listed path.
            if (1..<max(1, below.count)).contains(where: { listed.contains(Array(below[..<$0])) }) {
                return (true, false)
            }
            return (isDirectory && leading.contains(below), false)
        }

        /// Whether a file is sent: not excluded, and in the shard.
        func takesFile(_ below: [String], relative: String) -> Bool {
            !selection.excludes(below, isDirectory: false) && selection.inShard(relative)
        }
    }

    private static func entry(_ kind: OutgoingEntry.Kind, _ relative: String, _ st: stat) -> OutgoingEntry {
        let isFile: Bool
        if case .file = kind { isFile = true } else { isFile = false }
        return OutgoingEntry(
            kind: kind, relative: relative, mode: UInt32(st.st_mode & 0o7777), mtimeSeconds: Int64(st.st_mtim.tv_sec),
            mtimeNanoseconds: UInt32(st.st_mtim.tv_nsec), size: isFile ? UInt64(st.st_size) : nil)
    }

    /// The name a path is sent under: its last component (`photos/` → `photos`; `.` → the
    /// current directory's name).
    static func baseName(_ path: String) throws(SluiceError) -> String {
        let parts = path.split(separator: "/")
        if let last = parts.last, last != ".", last != ".." { return String(last) }
        guard let resolved = realpath(path, nil) else {
            throw SluiceError(.system(.current), operation: "realpath", subject: path)
        }
        defer { free(resolved) }
        let full = String(cString: resolved)
        guard let last = full.split(separator: "/").last else {
            throw SluiceError(
                .invalidArgument, operation: "send", subject: path,
                detail: "the root directory has no name to send under")
        }
        return String(last)
    }
}

extension SourceOptions {
    /// The entry kind of a device, FIFO or socket `st` when it is to be sent (`.devices`,
    /// `.specials`).
    func special(_ st: stat) -> OutgoingEntry.Kind? {
        guard let type = Wire.SpecialType(mode: UInt32(st.st_mode)),
            contains(type.isDevice ? .devices : .specials)
        else {
            return nil
        }
        let (major, minor) = type.isDevice ? SpecialFiles.split(UInt64(st.st_rdev)) : (0, 0)
        return .special(type, major: major, minor: minor)
    }
}
