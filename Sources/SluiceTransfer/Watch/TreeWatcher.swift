import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The inotify side of `send --watch`: one descriptor (`inotify_init1`, non-blocking and
/// close-on-exec) read on the loop as a stream, a watch on every directory of the trees sent,
/// and which directory (relative path, as sent) each watch stands for. Events are parsed
/// (`InotifyEvent.parse`) and handed over a read at a time (`onEvents`); what they mean is
/// `TransferWatch`'s to decide.
final class TreeWatcher: ByteStreamDelegate {
    /// What every directory is watched for: a file closed after writing, written, its
    /// attributes changed, names made, removed and renamed, and the directory's own end; never
    /// through a link, only directories.
    static let mask: UInt32 = {
        let bits =
            IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
            | IN_DELETE_SELF | IN_MOVE_SELF
        return UInt32(bits) | UInt32(IN_ONLYDIR) | UInt32(IN_DONT_FOLLOW) | UInt32(IN_EXCL_UNLINK)
    }()

    let fd: Int32
    private var stream: ReadStream?
    /// One watched directory: its parent's watch and its name there (a tree's top: no
    /// parent, its name as sent). A path is stored once, a name per directory: a rename
    /// moves one node, whatever lies below it.
    private struct Node {
        var parent: Int32?
        var name: String
    }
    /// Each watch's directory, and each directory's watched children (by watch).
    private var nodes: [Int32: Node] = [:]
    private var children: [Int32: [Int32]] = [:]
    /// The watches without a parent, by name: the trees' tops (and a directory whose parent
    /// was not watched, by its whole path).
    private var tops: [String: Int32] = [:]
    /// Called with each read's events, in order, on the loop's thread.
    var onEvents: (([InotifyEvent]) -> Void)?
    private var buffer = [UInt8](repeating: 0, count: 1 << 16)

    /// A new inotify descriptor; throws when the process has no more (`max_user_instances`).
    init() throws(SluiceError) {
        fd = try syscallValue("inotify_init1") { inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC)) }
    }

    /// How many directories are watched.
    var count: Int { nodes.count }

    /// Every directory watched (as sent).
    var directories: [String] { nodes.keys.compactMap(relative(of:)) }

    /// The directory (as sent, `photos/2024`) watch `watch` stands for: its names up to its
    /// tree's top (nil for a watch not known, or one whose parent went).
    func relative(of watch: Int32) -> String? {
        var names: [String] = []
        var current: Int32? = watch
        while let wd = current {
            guard let node = nodes[wd], names.count <= nodes.count else { return nil }
            names.append(node.name)
            current = node.parent
        }
        return names.reversed().joined(separator: "/")
    }

    /// The watch of directory `relative` (as sent), if it is watched.
    private func watch(of relative: String) -> Int32? {
        if let top = tops[relative] { return top }
        guard let slash = relative.lastIndex(of: "/"), let parent = watch(of: String(relative[..<slash])) else {
            return nil
        }
        let name = String(relative[relative.index(after: slash)...])
        return children[parent]?.first { nodes[$0]?.name == name }
    }

    /// Puts `watch` at `relative`: under its parent's watch with its last name, or a top of
    /// its own when its parent is not watched.
    private func place(_ watch: Int32, at relative: String) {
        detach(watch)
        var node = Node(parent: nil, name: relative)
        if let slash = relative.lastIndex(of: "/"), let parent = self.watch(of: String(relative[..<slash])) {
            node = Node(parent: parent, name: String(relative[relative.index(after: slash)...]))
            children[parent, default: []].append(watch)
        }
        nodes[watch] = node
        if node.parent == nil { tops[relative] = watch }
    }

    /// Takes `watch` from its parent's children (or from the tops).
    private func detach(_ watch: Int32) {
        guard let node = nodes[watch] else { return }
        guard let parent = node.parent else {
            if tops[node.name] == watch { tops[node.name] = nil }
            return
        }
        children[parent]?.removeAll { $0 == watch }
        if children[parent]?.isEmpty == true { children[parent] = nil }
    }

    /// `watch` and every watch below it.
    private func subtree(_ watch: Int32) -> [Int32] {
        var found = [watch]
        var next = 0
        while next < found.count {
            found += children[found[next]] ?? []
            next += 1
        }
        return found
    }

    /// Watches directory `path`, sent as `relative`: nil once watched, else the errno of
    /// `inotify_add_watch` (ENOSPC: `fs.inotify.max_user_watches` reached).
    func add(_ path: String, relative: String) -> Errno? {
        let watch = inotify_add_watch(fd, path, Self.mask)
        guard watch >= 0 else { return Errno.current }
        if let old = self.watch(of: relative), old != watch {
            // Another directory was watched under that name: it went without a word.
            detach(old)
            nodes[old] = nil
        }
        place(watch, at: relative)
        return nil
    }

    /// Forgets the watches of `relative` and every directory below it (gone, or moved out):
    /// the kernel drops a removed directory's watch itself.
    func forget(below relative: String) {
        guard let top = watch(of: relative) else { return }
        detach(top)
        for watch in subtree(top) {
            nodes[watch] = nil
            children[watch] = nil
            inotify_rm_watch(fd, watch)
        }
    }

    /// A watch the kernel dropped (`IN_IGNORED`).
    func dropped(_ watch: Int32) {
        guard nodes[watch] != nil else { return }
        detach(watch)
        nodes[watch] = nil
        children[watch] = nil
    }

    /// A directory renamed within the tree: its watch, and so those below it, now stand for
    /// the new paths.
    func renamed(from: String, to: String) {
        guard let watch = watch(of: from) else { return }
        place(watch, at: to)
    }

    /// Stops reading and closes the descriptor (every watch goes with it).
    func close() {
        stream?.delegate = nil
        stream?.close()
        stream = nil
        nodes = [:]
        children = [:]
        tops = [:]
    }

    /// Starts reading events on `loop`.
    func start(on loop: EventLoop) {
        let stream = ReadStream.descriptor(fd, closeWhenDone: true, name: "inotify")
        stream.delegate = self
        stream.schedule(on: loop)
        stream.open()
        self.stream = stream
    }

    func stream(_ stream: ByteStream, handle event: StreamEvent) {
        guard event == .hasBytesAvailable, let reader = stream as? ReadStream else { return }
        while self.stream === reader {
            let result = buffer.withUnsafeMutableBytes { reader.tryRead(into: $0) }
            guard case .processed(let count) = result, count > 0 else { return }
            let (events, _) = buffer.withUnsafeBytes {
                InotifyEvent.parse(UnsafeRawBufferPointer(rebasing: $0[..<count]))
            }
            onEvents?(events)
        }
    }
}
