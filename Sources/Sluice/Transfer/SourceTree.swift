#if canImport(Glibc)
    import Glibc
#endif

/// One entry a sender will send: a directory, a file by path, or a stream.
struct OutgoingEntry {
    enum Kind {
        case directory
        case file(String)
        case stream(ReadStream)
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
/// it holds; devices with `options.devices`, FIFOs and sockets with `options.specials` (each
/// only `lstat`ed, never opened), else skipped with a warning. A path given directly is
/// followed if it is a link, as `scp -r` does. `selection` chooses among them
/// (`FileSelection`). With `options.hardLinks`, a file's second name is an entry of its own,
/// after every file, naming the first (`hardLinkTo`).
enum SourceTree {
    /// What the walk reads besides names and sizes.
    struct Options {
        var hardLinks = false
        var xattrs = false
        var owners = false
        var numericIDs = false
        var devices = false
        var specials = false

        init(
            hardLinks: Bool = false, xattrs: Bool = false, owners: Bool = false, numericIDs: Bool = false,
            devices: Bool = false, specials: Bool = false
        ) {
            self.hardLinks = hardLinks
            self.xattrs = xattrs
            self.owners = owners
            self.numericIDs = numericIDs
            self.devices = devices
            self.specials = specials
        }

        init(_ send: TransferSendOptions) {
            self.init(
                hardLinks: send.hardLinks, xattrs: send.xattrs, owners: send.owners, numericIDs: send.numericIDs,
                devices: send.devices, specials: send.specials)
        }

        /// The entry kind of a device, FIFO or socket `st` when it is to be sent.
        func special(_ st: stat) -> OutgoingEntry.Kind? {
            guard let type = Wire.SpecialType(mode: UInt32(st.st_mode)), type.isDevice ? devices : specials else {
                return nil
            }
            let (major, minor) = type.isDevice ? SpecialFiles.split(UInt64(st.st_rdev)) : (0, 0)
            return .special(type, major: major, minor: minor)
        }
    }

    /// The walk's output: entries, then the hard links found, which go after every file.
    private struct Collected {
        var entries: [OutgoingEntry] = []
        var links: [OutgoingEntry] = []
        /// The first name of each file with several (device, inode).
        var firstNames: [FileKey: Int] = [:]
    }

    private struct FileKey: Hashable {
        var device: UInt64
        var inode: UInt64
    }

    static func entries(
        _ sources: [TransferSource], selection: FileSelection = FileSelection(), options: Options = Options(),
        warn: (String) -> Void
    ) throws(SluiceError) -> [OutgoingEntry] {
        var collected = Collected()
        let walker = Walker(selection: selection)
        for source in sources {
            switch source {
            case .stream(let stream, let name, let mode):
                guard case .success = PathCheck.components(Array(name.utf8)) else {
                    throw SluiceError(
                        .invalidArgument, operation: "send", subject: name,
                        detail: "a stream's name must be a relative path without '.' or '..' components")
                }
                collected.entries.append(
                    OutgoingEntry(
                        kind: .stream(stream), relative: name, mode: mode & 0o7777, mtimeSeconds: Int64(time(nil)),
                        mtimeNanoseconds: 0, size: nil))
            case .path(let path):
                var st = stat()
                try syscallValue("stat", path) { stat(path, &st) }
                let name = try baseName(path)
                switch st.st_mode & S_IFMT {
                case S_IFREG:
                    if walker.takesFile([name], relative: name) {
                        add(entry(.file(path), name, st), st, path: path, options: options, to: &collected, warn: warn)
                    }
                case S_IFDIR:
                    add(entry(.directory, name, st), st, path: path, options: options, to: &collected, warn: warn)
                    var found: Set<[String]> = []
                    try walk(
                        path, relative: name, below: [], walker: walker, options: options, found: &found,
                        into: &collected, warn: warn)
                    if let missing = walker.listed?.subtracting(found).min(by: { $0.lexicographicallyPrecedes($1) }) {
                        let listed = path + "/" + missing.joined(separator: "/")
                        throw SluiceError(.system(.noSuchFile), operation: "stat", subject: listed)
                    }
                default:
                    if let special = options.special(st), walker.takesFile([name], relative: name) {
                        add(entry(special, name, st), st, path: path, options: options, to: &collected, warn: warn)
                    } else if options.special(st) == nil {
                        warn("skipping \(quoted(path)): not a regular file or directory")
                    }
                }
            }
        }
        return collected.entries + collected.links
    }

    /// Adds an entry found by the walk: a file's second name becomes a link to its first (with
    /// `hardLinks`); extended attributes and owner are read as asked.
    private static func add(
        _ found: OutgoingEntry, _ st: stat, path: String, options: Options, to collected: inout Collected,
        warn: (String) -> Void
    ) {
        var entry = found
        if options.owners { entry.attributes.owner = OwnerNames.shared.owner(of: st, numeric: options.numericIDs) }
        switch entry.kind {
        case .symlink, .special:
            collected.entries.append(entry)
            return
        case .directory, .file, .stream:
            break
        }
        if options.xattrs {
            entry.attributes.xattrs = SourceMetadata.xattrs(path, warn: warn)
            entry.attributes.xattrsRead = true
        }
        if case .file = entry.kind {
            entry.sparse = Int64(st.st_blocks) * 512 < Int64(st.st_size)
            if options.hardLinks, st.st_nlink > 1 {
                let key = FileKey(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
                if let first = collected.firstNames[key] {
                    entry.hardLinkTo = first
                    collected.entries[first].linked = true
                    collected.links.append(entry)
                    return
                }
                collected.firstNames[key] = collected.entries.count
            }
        }
        collected.entries.append(entry)
    }

    /// The selection, prepared for the walk.
    private struct Walker {
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
            !selection.excludes(below, isDirectory: false) && (selection.shard?.contains(relative) ?? true)
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

    private static func walk(
        _ directory: String, relative: String, below: [String], walker: Walker, options: Options,
        found: inout Set<[String]>, into out: inout Collected, warn: (String) -> Void
    )
        throws(SluiceError)
    {
        guard let dir = opendir(directory) else {
            throw SluiceError(.system(.current), operation: "opendir", subject: directory)
        }
        var names: [String] = []
        while true {
            errno = 0
            guard let item = readdir(dir) else {
                if errno != 0 {
                    let error = SluiceError(.system(.current), operation: "readdir", subject: directory)
                    closedir(dir)
                    throw error
                }
                break
            }
            let name = withUnsafeBytes(of: item.pointee.d_name) { raw in
                String(validatingCString: raw.baseAddress!.assumingMemoryBound(to: CChar.self))
            }
            guard let name else {
                warn("skipping a name in \(quoted(directory)) that is not valid UTF-8")
                continue
            }
            if name == "." || name == ".." { continue }
            names.append(name)
        }
        closedir(dir)
        for name in names.sorted() {
            let path = directory.hasSuffix("/") ? directory + name : directory + "/" + name
            let childRelative = relative + "/" + name
            let childBelow = below + [name]
            var st = stat()
            try syscallValue("lstat", path) { lstat(path, &st) }
            let isDirectory = st.st_mode & S_IFMT == S_IFDIR
            let (take, listed) = walker.decide(childBelow, isDirectory: isDirectory)
            if listed { found.insert(childBelow) }
            guard take else { continue }
            if childRelative.utf8.count > Wire.maxPathBytes {
                warn("skipping \(quoted(path)): path longer than \(Wire.maxPathBytes) bytes")
                continue
            }
            switch st.st_mode & S_IFMT {
            case S_IFREG:
                if walker.selection.shard?.contains(childRelative) ?? true {
                    add(entry(.file(path), childRelative, st), st, path: path, options: options, to: &out, warn: warn)
                }
            case S_IFDIR:
                add(entry(.directory, childRelative, st), st, path: path, options: options, to: &out, warn: warn)
                try walk(
                    path, relative: childRelative, below: childBelow, walker: walker, options: options,
                    found: &found, into: &out, warn: warn)
            case S_IFLNK:
                guard walker.selection.shard?.contains(childRelative) ?? true else { continue }
                guard let target = SourceMetadata.linkTarget(path) else {
                    warn("skipping symbolic link \(quoted(path)): cannot read its target")
                    continue
                }
                add(
                    entry(.symlink(path, target: target), childRelative, st), st, path: path, options: options,
                    to: &out, warn: warn)
            default:
                if let special = options.special(st) {
                    guard walker.selection.shard?.contains(childRelative) ?? true else { continue }
                    add(entry(special, childRelative, st), st, path: path, options: options, to: &out, warn: warn)
                } else {
                    warn("skipping \(quoted(path)): not a regular file or directory")
                }
            }
        }
    }
}
