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
/// From a socket, a ``Pipeline`` copies nothing at all: it splices the socket's bytes into a
/// pipe of its own and from there into the file's `O_DIRECT` descriptor (`splice(2)`, path
/// ``CopyPath/splice``), where the pages are aligned as direct I/O needs — a peer sending from
/// the page cache (`sendfile`) to a socket that asked for ``socketSegmentSize``. Other pieces
/// are refused by the kernel at the first splice, and the pipeline reads into the buffer from
/// there on (``PipelineResult/fallbacks`` says so).
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
/// let sink = DirectFileWriteStream(fd: fd, closeWhenDone: true, path: "out.bin")
/// let result = try await Pipeline(source: .file(atPath: "in.bin"), sink: sink).run()
/// try sink.finishWriting()  // the tail's write error, if any (the pipeline closed the sink)
/// ```
public final class DirectFileWriteStream: WriteStream {
    /// The size of the buffer, and of most writes.
    public static let bufferSize = 1 << 20

    /// The TCP segment size to ask of a peer whose bytes this stream takes from a socket
    /// (``SocketListener/limitSegmentSize(to:)``, or ``StreamPropertyKey/socketMaximumSegmentSize``
    /// on a socket before it connects): seven 4 KiB pages of payload, plus the 12
    /// bytes of TCP timestamps. A peer sending from the page cache then sends whole pages, which
    /// a ``Pipeline`` splices from the socket into the file with `O_DIRECT`, no byte copied;
    /// other pieces are refused by the kernel at the first splice, and the bytes are read into
    /// the buffer instead.
    public static let socketSegmentSize: Int32 = 7 * 4096 + 12

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

    /// A stream writing the regular file at `path`, open on `fd`, as `init(fd:closeWhenDone:name:)`;
    /// the stream is named by the path, which its errors quote (`write "out.bin": …`).
    public convenience init(fd: Int32, closeWhenDone: Bool = false, path: String) {
        self.init(fd: fd, closeWhenDone: closeWhenDone, name: path, direct: true, nameIsPath: true)
    }

    init(fd: Int32, closeWhenDone: Bool, name: String?, direct: Bool, nameIsPath: Bool = false) {
        self.fd = fd
        ownsDescriptor = closeWhenDone
        tryDirect = direct
        buffer = .allocate(byteCount: Self.bufferSize, alignment: WriteTarget.directAlignment)
        super.init(name: name ?? "fd \(fd)", nameIsPath: nameIsPath && name != nil)
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

    // MARK: From a pipe

    /// What `takeFromPipe` did.
    enum PipeTake {
        /// Bytes taken from the pipe (spliced to the disk, or read into the buffer).
        case took(Int)
        /// Nothing to do until the pipe holds a whole block (or the source ends).
        case needsMore
        /// The kernel will not splice the pipe's pages into the file with `O_DIRECT` (they are
        /// not aligned as direct I/O needs): nothing was taken; the pipeline goes on with
        /// read/write, which this stream takes as any other.
        case refused(Errno)
        case failed(SluiceError)
    }

    /// The file's own (buffered) descriptor.
    var bufferedDescriptor: Int32 { fd }

    /// Whether `takeFromPipe` can splice: the file is open with `O_DIRECT` beside `fd`.
    var splicesFromPipes: Bool { streamStatus == .open && failure == nil && !finished && target?.writesDirect == true }

    /// Whether `takeFromPipe(pipe, holding: held, final: false)` would take anything: a whole
    /// block is held, or the buffer has a head to complete first.
    func wouldTakeFromPipe(holding held: Int) -> Bool {
        let block = WriteTarget.directAlignment
        return held > 0 && (held >= block || end > start || offset % UInt64(block) != 0)
    }

    /// Takes bytes from the head of `pipe`, which holds `held` bytes, the way a pipeline whose
    /// source is a socket moves them without a copy: while the file's offset is at a block
    /// boundary and the buffer is empty, whole blocks are spliced (`splice(2)`) from the pipe
    /// into the direct descriptor; a head up to the next boundary (after a start inside a block,
    /// or a short splice) is read into the buffer and written as usual; with `final` (the
    /// source has ended, or the pipe cannot take more), what is left is read into the buffer,
    /// whose tail is written at the end.
    func takeFromPipe(_ pipe: Int32, holding held: Int, final: Bool) -> PipeTake {
        if let failure { return .failed(failure) }
        guard let target, !finished, held > 0 else { return .needsMore }
        // Direct writes were turned off (a file system that wants another alignment): the
        // pipeline's read/write goes on.
        guard target.writesDirect else { return .refused(Errno(rawValue: EINVAL)) }
        let block = WriteTarget.directAlignment
        let pending = end - start
        let position = offset + UInt64(pending)
        let head = (block - Int(position % UInt64(block))) % block
        if head == 0 && pending > 0 {
            // The buffer ends at a block boundary: write it, then splice.
            do { try flush() } catch { return .failed(error) }
            return takeFromPipe(pipe, holding: held, final: final)
        } else if head == 0 && held >= block {
            let count = held / block * block  // the pipe holds at most the pipeline's limit
            switch target.spliceDirectly(from: pipe, count: count, at: offset) {
            case .moved(let n):
                offset += UInt64(n)
                start = Int(offset % UInt64(block))
                end = start
                return .took(n)
            case .refused(let errno):
                return .refused(errno)
            case .failed:
                let error = target.failure ?? SluiceError(.system(.ioError), operation: "write", subject: name)
                failure = error
                return .failed(error)
            }
        } else if head == 0 && !final {
            return .needsMore
        }
        // Through the buffer: a head up to the next block boundary, or at the end what is left.
        // The buffer's indices follow the file's offsets modulo the block (`start`), so one
        // ending at a boundary in the file ends at one in memory.
        let count = min(head > 0 ? head : held, held, buffer.count - end)
        guard count > 0 else { return .needsMore }
        let n = retryingOnInterrupt { read(pipe, buffer.baseAddress! + end, count) }
        guard n > 0 else {
            let code: SluiceError.Code = .system(n < 0 ? .current : .ioError)
            return .failed(SluiceError(code, operation: "read", subject: "the pipeline's pipe"))
        }
        end += n
        if end == buffer.count || (head > 0 && n == head) {
            do { try flush() } catch { return .failed(error) }
        }
        return .took(n)
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
