#if canImport(Glibc)
    import Glibc
#endif

/// Writes a regular file past the page cache: whole 4 KiB blocks go from memory to the disk
/// with `O_DIRECT`, as `dd oflag=direct` writes, and only a head before the first block
/// boundary and a tail after the last one go through the page cache.
///
/// The writer gives bytes of any length at any moment, as to any ``WriteStream``; the stream
/// copies them into a 1 MiB buffer aligned to a page and writes the buffer when it is full (the
/// copy costs about 40 µs per MiB; a write into new page-cache pages costs several times that
/// on a virtual machine whose host takes back the memory the guest frees). A ``Pipeline`` with
/// no stage, tap or rate limit skips that copy: it reads its source straight into the buffer.
/// What costs the kernel less is paid for in two ways: the file is not left in the page cache
/// (reading it soon after reads the disk), and each write waits for the disk, one at a time.
///
/// The last bytes are written by ``finishWriting()``, or by `close()` (the pipeline's end),
/// which keeps the error of that write for a later ``finishWriting()`` to report: call it
/// before treating the file as complete.
///
/// On a file system without direct I/O (the second open with `O_DIRECT` fails), or one asking
/// for another alignment (`EINVAL` from a write), the file is written through the page cache
/// as usual; ``bytesWrittenDirectly`` tells which happened.
///
/// ```swift
/// let fd = open("out.bin", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
/// let sink = DirectFileWriteStream(fd: fd, closeWhenDone: true, name: "out.bin")
/// let result = try await Pipeline(source: .file(atPath: "in.bin"), sink: sink).run()
/// try sink.finishWriting()  // the tail's write error, if any (the pipeline closed the sink)
/// ```
public final class DirectFileWriteStream: WriteStream {
    /// The size of the buffer, and of most writes.
    public static let bufferSize = 1 << 20

    private let fd: Int32
    private let ownsDescriptor: Bool
    /// Whether to open the second, direct descriptor at all (false: the buffered path alone,
    /// for tests of it).
    private let tryDirect: Bool
    private var target: WriteTarget?
    private let buffer: UnsafeMutableRawBufferPointer
    /// `buffer[start..<end]` holds the bytes not yet written, which belong at `offset` in the
    /// file. `start` is `offset` modulo the block size, so that the bytes after the first
    /// block boundary sit at an aligned address, as direct writes need.
    private var start = 0
    private var end = 0
    private var offset: UInt64 = 0
    /// The descriptor has `O_APPEND`: its offset follows the file's end by itself.
    private var appends = false
    private var finished = false
    /// The first failure of a write: the stream's error, and `finishWriting()`'s.
    private var failure: SluiceError?
    private var descriptorClosed = false

    /// A stream writing the regular file open on `fd` from its current offset (with
    /// `O_APPEND`, from its end). With `closeWhenDone` the stream closes `fd` when it closes.
    /// Opening fails with `EINVAL` when `fd` is not a regular file.
    public convenience init(fd: Int32, closeWhenDone: Bool = false, name: String? = nil) {
        self.init(fd: fd, closeWhenDone: closeWhenDone, name: name, direct: true)
    }

    init(fd: Int32, closeWhenDone: Bool, name: String?, direct: Bool) {
        self.fd = fd
        ownsDescriptor = closeWhenDone
        tryDirect = direct
        buffer = .allocate(byteCount: Self.bufferSize, alignment: WriteTarget.directAlignment)
        super.init(name: name ?? "fd \(fd)")
    }

    deinit {
        buffer.deallocate()
        // Dropped without `close()`: the descriptor is still the stream's to close.
        if ownsDescriptor && !descriptorClosed { closeDescriptor(fd) }
    }

    /// Bytes written with `O_DIRECT` so far; the rest of what was written went through the page
    /// cache.
    public var bytesWrittenDirectly: UInt64 { target?.directBytes ?? finalDirectBytes }
    private var finalDirectBytes: UInt64 = 0

    /// Writes the bytes still held (the tail), and puts the descriptor's offset after them, as
    /// `write(2)` would have; the stream takes no more bytes after it. Throws the first write
    /// error of the stream, including one met by `close()` doing this. Idempotent.
    public func finishWriting() throws(SluiceError) {
        if !finished {
            finished = true
            try? flush()  // a failure is kept in `failure`
            if failure == nil, !appends, lseek(fd, off_t(offset), SEEK_SET) < 0 {
                failure = SluiceError(.system(.current), operation: "lseek", subject: name)
            }
        }
        if let failure { throw failure }
    }

    override func openPrimitive() throws(SluiceError) -> Bool {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw SluiceError(.system(.current), operation: "fstat", subject: name) }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw SluiceError(
                .system(.invalidArgument), operation: "open", subject: name, detail: "direct writes need a regular file"
            )
        }
        appends = fcntl(fd, F_GETFL) & O_APPEND != 0
        if appends {
            offset = UInt64(info.st_size)
        } else {
            let position = lseek(fd, 0, SEEK_CUR)
            guard position >= 0 else { throw SluiceError(.system(.current), operation: "lseek", subject: name) }
            offset = UInt64(position)
        }
        let target = WriteTarget(fd: fd, display: name, writebackWindow: nil, start: offset)
        if tryDirect { target.writeDirectly() }
        self.target = target
        start = Int(offset % UInt64(WriteTarget.directAlignment))
        end = start
        servedByReadyQueue = true
        return true
    }

    override func writePrimitive(_ bytes: UnsafeRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        if let failure { throw failure }
        guard !finished, let source = bytes.baseAddress else {
            throw SluiceError(.closed, operation: "write", subject: name)
        }
        let n = min(bytes.count, buffer.count - end)
        (buffer.baseAddress! + end).copyMemory(from: source, byteCount: n)
        end += n
        if end == buffer.count { try flush() }
        return .processed(n)
    }

    /// Writes `buffer[start..<end]` at `offset`; the buffer then starts at a block boundary.
    /// A failure becomes the stream's `failure` (the first one is kept) and is thrown.
    private func flush() throws(SluiceError) {
        if let failure { throw failure }
        guard end > start, let target else { return }
        let pending = UnsafeRawBufferPointer(rebasing: buffer[start..<end])
        switch target.write(pending, at: offset) {
        case .written:
            offset += UInt64(pending.count)
            start = 0
            end = 0
        case .failedNow, .failedBefore:
            let error = target.failure ?? SluiceError(.system(.ioError), operation: "write", subject: name)
            failure = error
            throw error
        }
    }

    override var spaceAvailablePrimitive: Bool { true }

    override func lendSpace(upTo maxLength: Int) -> UnsafeMutableRawBufferPointer? {
        guard streamStatus == .open, failure == nil, !finished, end < buffer.count else { return nil }
        return UnsafeMutableRawBufferPointer(rebasing: buffer[end..<min(buffer.count, end + maxLength)])
    }

    override func takeLentSpace(_ count: Int) throws(SluiceError) {
        precondition(count >= 0 && end + count <= buffer.count, "more bytes taken than lent")
        end += count
        guard end == buffer.count else { return }
        do {
            try flush()
        } catch {
            fail(error)
            throw error
        }
    }

    override func closePrimitive() {
        try? finishWriting()
        finalDirectBytes = target?.directBytes ?? 0
        target = nil  // closes the direct descriptor
        if ownsDescriptor {
            closeDescriptor(fd)
            descriptorClosed = true
        }
    }

    override public func property(forKey key: StreamPropertyKey) -> Any? {
        switch key {
        case .fileCurrentOffset: return isOpenish ? offset + UInt64(end - start) : nil
        case .fileDescriptor: return fd
        default: return nil
        }
    }
}
