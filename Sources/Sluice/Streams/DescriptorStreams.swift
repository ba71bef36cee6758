#if canImport(Glibc)
    import Glibc
#endif

/// How a file write stream treats an existing file.
public enum FileWriteMode: Sendable {
    /// Create, or truncate an existing file (`O_CREAT|O_TRUNC`).
    case truncate
    /// Create, or append to an existing file (`O_CREAT|O_APPEND`).
    case append
    /// Create; fail with EEXIST if the file exists (`O_CREAT|O_EXCL`).
    case createNew
}

/// Reads a file by path (from an offset) or any descriptor: stdin, a pipe, a tty, a socket.
/// Regular files are served from the loop's ready queue; everything else is watched by epoll.
/// Opened, it forwards to its `DescriptorChannel` (its `StreamCore`).
final class DescriptorReadStream: ReadStream {
    private let origin: DescriptorOrigin
    private var offset: UInt64
    private(set) var channel: DescriptorChannel? {
        didSet { streamCore = channel }
    }

    init(path: String, offset: UInt64) {
        origin = .path(path)
        self.offset = offset
        super.init(name: path, nameIsPath: true)
    }

    init(fd: Int32, ownsDescriptor: Bool, name: String? = nil, nameIsPath: Bool = false) {
        origin = .descriptor(fd, owned: ownsDescriptor)
        offset = 0
        super.init(name: name ?? "fd \(fd)", nameIsPath: nameIsPath && name != nil)
    }

    override func openPrimitive() throws(SluiceError) -> Bool {
        if channel == nil { channel = try origin.channel(for: self, opening: openPath) }
        return try super.openPrimitive()
    }

    /// Opens the file to read, at the offset asked for; a directory is refused.
    private func openPath(_ path: String) throws(SluiceError) -> Int32 {
        let fd = try openFile(path, flags: O_RDONLY | O_CLOEXEC, permissions: 0).get()
        var st = stat()
        if fstat(fd, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR {
            closeDescriptor(fd)
            throw SluiceError(.system(.isDirectory), operation: "open", path: path)
        }
        if offset > 0 && lseek(fd, off_t(offset), SEEK_SET) < 0 {
            let error = SluiceError(.system(.current), operation: "lseek", path: path)
            closeDescriptor(fd)
            throw error
        }
        return fd
    }

    override func readPrimitive(_ buffer: UnsafeMutableRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        let fd = channel!.fd
        return try syscall("read", name) { Glibc.read(fd, buffer.baseAddress, buffer.count) }
    }

    override var offersKernelCopy: Bool { true }

    override func property(forKey key: StreamPropertyKey) -> Any? {
        switch key {
        case .fileCurrentOffset where channel == nil || !isOpenish: return offset
        case .fileDescriptor where channel == nil: return origin.givenFD
        default: return super.property(forKey: key)
        }
    }

    override func setProperty(_ value: Any?, forKey key: StreamPropertyKey) -> Bool {
        guard key == .fileCurrentOffset, let v = value as? UInt64 ?? (value as? Int).map({ UInt64($0) }) else {
            return false
        }
        if streamStatus == .notOpen {
            offset = v
            return true
        }
        guard let channel, channel.isRegularFile, isOpenish else { return false }
        return lseek(channel.fd, off_t(v), SEEK_SET) >= 0
    }
}

/// Writes a file by path (truncate, append, or create-new, with permissions) or any descriptor.
/// Opened, it forwards to its `DescriptorChannel` (its `StreamCore`).
final class DescriptorWriteStream: WriteStream {
    private let origin: DescriptorOrigin
    /// The file did not exist before this stream opened it.
    private var createdFile = false
    private let mode: FileWriteMode
    private let permissions: mode_t
    private(set) var channel: DescriptorChannel? {
        didSet { streamCore = channel }
    }

    init(path: String, mode: FileWriteMode, permissions: mode_t) {
        origin = .path(path)
        self.mode = mode
        self.permissions = permissions
        super.init(name: path, nameIsPath: true)
    }

    init(fd: Int32, ownsDescriptor: Bool, name: String? = nil, nameIsPath: Bool = false) {
        origin = .descriptor(fd, owned: ownsDescriptor)
        mode = .append
        permissions = 0
        super.init(name: name ?? "fd \(fd)", nameIsPath: nameIsPath && name != nil)
    }

    override func openPrimitive() throws(SluiceError) -> Bool {
        if channel == nil { channel = try origin.channel(for: self, opening: openPath) }
        return try super.openPrimitive()
    }

    /// Opens (creates) the file to write, as `mode` says, noting whether it created it.
    private func openPath(_ path: String) throws(SluiceError) -> Int32 {
        var flags = O_WRONLY | O_CREAT | O_CLOEXEC
        switch mode {
        case .truncate: flags |= O_TRUNC
        case .append: flags |= O_APPEND
        case .createNew: flags |= O_EXCL
        }
        let perms = permissions
        // Try an exclusive create first, so a failed copy knows whether the file is its own.
        let exclusive = (flags & ~(O_TRUNC | O_APPEND)) | O_EXCL
        var opened = openFile(path, flags: exclusive, permissions: perms)
        createdFile = (try? opened.get()) != nil
        if !createdFile && mode != .createNew && opened.failureErrno == .fileExists {
            opened = openFile(path, flags: flags, permissions: perms)
        }
        return try opened.get()
    }

    override func writePrimitive(_ buffer: UnsafeRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        let channel = channel!
        let fd = channel.fd
        if channel.isRegularFile {
            // Into the page cache in pieces (see PageCacheWrites), all before returning, as one
            // write(2) would; an error after some pieces is met again by the next write.
            var done = 0
            while done < buffer.count {
                let piece = PageCacheWrites.piece(buffer.count - done)
                let result: IOResult<Int>
                do {
                    result = try syscall("write", name) { Glibc.write(fd, buffer.baseAddress! + done, piece) }
                } catch {
                    if done > 0 { return .processed(done) }
                    throw error
                }
                guard case .processed(let n) = result, n > 0 else { return done > 0 ? .processed(done) : result }
                done += n
                if n < piece { break }
            }
            return .processed(done)
        }
        // A pipe, FIFO, tty or socket: its reader may be gone, and that must be EPIPE, not death.
        return try syscall("write", name) { writeSuppressingSIGPIPE(fd, buffer) }
    }

    override var offersKernelCopy: Bool { true }

    /// Removes the file this stream created, if it did (see `WriteStream.abandon()`).
    override func abandon() {
        guard createdFile, case .path(let path) = origin else { return }
        createdFile = false
        unlink(path)
    }

    /// Flushes written data to the device (`fsync`).
    func synchronize() throws(SluiceError) {
        guard let channel else { throw SluiceError(.notOpen, operation: "fsync", subject: name) }
        let fd = channel.fd
        try syscallValue("fsync", name) { fsync(fd) }
    }

    override func property(forKey key: StreamPropertyKey) -> Any? {
        key == .fileDescriptor && channel == nil ? origin.givenFD : super.property(forKey: key)
    }
}

/// Where a descriptor stream's descriptor comes from: a file it opens by path, or a
/// descriptor it was given.
private enum DescriptorOrigin {
    case path(String)
    /// `owned`: the stream closes it.
    case descriptor(Int32, owned: Bool)

    var givenFD: Int32? {
        if case .descriptor(let fd, _) = self { return fd }
        return nil
    }

    /// The channel over the descriptor, with `stream` as its reader or writer: the file at the
    /// path opened by `opening` (the channel closes it), or the descriptor given.
    func channel(for stream: ByteStream, opening: (String) throws(SluiceError) -> Int32) throws(SluiceError)
        -> DescriptorChannel
    {
        let channel: DescriptorChannel
        switch self {
        case .path(let path): channel = DescriptorChannel(fd: try opening(path), ownsDescriptor: true)
        case .descriptor(let fd, let owned): channel = DescriptorChannel(fd: fd, ownsDescriptor: owned)
        }
        switch stream.side {
        case .reader: channel.reader = stream
        case .writer: channel.writer = stream
        }
        return channel
    }
}

extension ReadStream {
    /// A stream reading the file at `path`, starting at `offset`.
    public static func file(atPath path: String, offset: UInt64 = 0) -> ReadStream {
        DescriptorReadStream(path: path, offset: offset)
    }

    /// A stream reading descriptor `fd` (a pipe, tty, socket or file). With
    /// `closeWhenDone` the stream closes `fd` when it closes.
    public static func descriptor(_ fd: Int32, closeWhenDone: Bool = false, name: String? = nil) -> ReadStream {
        DescriptorReadStream(fd: fd, ownsDescriptor: closeWhenDone, name: name)
    }

    /// A stream reading descriptor `fd`, open on the file at `path`: the stream is named by
    /// the path, which its errors quote (`read "in": …`).
    public static func descriptor(_ fd: Int32, closeWhenDone: Bool = false, path: String) -> ReadStream {
        DescriptorReadStream(fd: fd, ownsDescriptor: closeWhenDone, name: path, nameIsPath: true)
    }

    /// A stream reading standard input. Closing it leaves fd 0 open.
    public static var standardInput: ReadStream { DescriptorReadStream(fd: 0, ownsDescriptor: false, name: "stdin") }
}

extension WriteStream {
    /// A stream writing the file at `path`.
    public static func file(
        atPath path: String,
        mode: FileWriteMode = .truncate,
        permissions: mode_t = 0o644
    ) -> WriteStream {
        DescriptorWriteStream(path: path, mode: mode, permissions: permissions)
    }

    /// A stream writing descriptor `fd`. With `closeWhenDone` the stream closes `fd` when it closes.
    public static func descriptor(_ fd: Int32, closeWhenDone: Bool = false, name: String? = nil) -> WriteStream {
        DescriptorWriteStream(fd: fd, ownsDescriptor: closeWhenDone, name: name)
    }

    /// A stream writing descriptor `fd`, open on the file at `path`: the stream is named by
    /// the path, which its errors quote (`write "out": …`).
    public static func descriptor(_ fd: Int32, closeWhenDone: Bool = false, path: String) -> WriteStream {
        DescriptorWriteStream(fd: fd, ownsDescriptor: closeWhenDone, name: path, nameIsPath: true)
    }

    /// A stream writing standard output. Closing it leaves fd 1 open.
    public static var standardOutput: WriteStream {
        DescriptorWriteStream(fd: 1, ownsDescriptor: false, name: "stdout")
    }

    /// A stream writing standard error. Closing it leaves fd 2 open.
    public static var standardError: WriteStream {
        DescriptorWriteStream(fd: 2, ownsDescriptor: false, name: "stderr")
    }
}
