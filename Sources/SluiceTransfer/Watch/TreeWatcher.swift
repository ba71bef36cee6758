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
    /// Each watch's directory, as sent (`photos/2024`), and each directory's watch.
    private var relatives: [Int32: String] = [:]
    private var watches: [String: Int32] = [:]
    /// Called with each read's events, in order, on the loop's thread.
    var onEvents: (([InotifyEvent]) -> Void)?
    private var buffer = [UInt8](repeating: 0, count: 1 << 16)

    /// A new inotify descriptor; throws when the process has no more (`max_user_instances`).
    init() throws(SluiceError) {
        fd = try syscallValue("inotify_init1") { inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC)) }
    }

    /// How many directories are watched.
    var count: Int { watches.count }

    /// The directory (as sent) watch `watch` stands for.
    func relative(of watch: Int32) -> String? { relatives[watch] }

    /// Starts reading events on `loop`.
    func start(on loop: EventLoop) {
        let stream = ReadStream.descriptor(fd, closeWhenDone: true, name: "inotify")
        stream.delegate = self
        stream.schedule(on: loop)
        stream.open()
        self.stream = stream
    }

    /// Watches directory `path`, sent as `relative`: nil once watched, else the errno of
    /// `inotify_add_watch` (ENOSPC: `fs.inotify.max_user_watches` reached).
    func add(_ path: String, relative: String) -> Errno? {
        let watch = inotify_add_watch(fd, path, Self.mask)
        guard watch >= 0 else { return Errno.current }
        if let old = relatives[watch], old != relative { watches[old] = nil }
        relatives[watch] = relative
        watches[relative] = watch
        return nil
    }

    /// Forgets the watches of `relative` and every directory below it (gone, or moved out):
    /// the kernel drops a removed directory's watch itself.
    func forget(below relative: String) {
        for (path, watch) in watches where path == relative || path.hasPrefix(relative + "/") {
            watches[path] = nil
            relatives[watch] = nil
            inotify_rm_watch(fd, watch)
        }
    }

    /// A watch the kernel dropped (`IN_IGNORED`).
    func dropped(_ watch: Int32) {
        guard let path = relatives.removeValue(forKey: watch) else { return }
        if watches[path] == watch { watches[path] = nil }
    }

    /// A directory renamed within the tree: its watches and those below it now stand for
    /// the new paths.
    func renamed(from: String, to: String) {
        for (path, watch) in watches where path == from || path.hasPrefix(from + "/") {
            let moved = to + path.dropFirst(from.count)
            watches[path] = nil
            watches[moved] = watch
            relatives[watch] = moved
        }
    }

    /// Stops reading and closes the descriptor (every watch goes with it).
    func close() {
        stream?.delegate = nil
        stream?.close()
        stream = nil
        relatives = [:]
        watches = [:]
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
