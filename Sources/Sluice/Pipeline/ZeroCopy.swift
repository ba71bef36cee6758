import CSluiceLinux

#if canImport(Glibc)
    import Glibc
#endif

/// How a pipeline moved its bytes from the source to the sink.
///
/// Where nothing needs to see the bytes — no stage, no tap, no rate limit — and both ends are
/// plain descriptors (files, pipes, TCP and Unix-domain sockets, `/dev/null`), the pipeline
/// moves them inside the kernel, one call per chunk at most, and never copies them through its
/// own memory. Anything else, and anything the kernel refuses, goes through read and write.
public enum CopyPath: String, Hashable, Sendable, CustomStringConvertible {
    /// Read into the pipeline's chunks and written from them.
    case readWrite = "read/write"
    /// `copy_file_range(2)`: file to file (on one file system; a reflink where it can).
    case copyFileRange = "copy_file_range"
    /// `sendfile(2)`: file to socket or `/dev/null`, and file to file where `copy_file_range`
    /// is refused (across file systems).
    case sendfile
    /// `splice(2)`: from or to a pipe, and from a socket through a pipe of the pipeline's own.
    case splice

    /// True for the calls that move bytes inside the kernel.
    public var isZeroCopy: Bool { self != .readWrite }

    /// The call's name, or `read/write`.
    public var description: String { rawValue }
}

/// A zero-copy call the kernel refused (the file systems differ, the destination appends, the
/// descriptor does not support it), and the path the pipeline went on with. The bytes moved
/// before are neither lost nor moved twice: every path uses the descriptors' own offsets.
public struct CopyFallback: Hashable, Sendable, CustomStringConvertible {
    /// The call that was refused.
    public var refused: CopyPath
    /// The path taken instead.
    public var next: CopyPath
    /// The bytes written to the sink before the refusal.
    public var afterBytes: UInt64
    /// What the kernel said.
    public var reason: Errno

    /// `copy_file_range refused after 0 bytes (Invalid cross-device link (errno 18)), then sendfile`.
    public var description: String {
        "\(refused) refused after \(afterBytes) bytes (\(reason)), then \(next)"
    }
}

/// A refusal scripted for tests: the first `call` once `afterBytes` bytes have passed it fails
/// with `errno`, as a file system that says no would make it fail. On a route through the
/// pipeline's pipe, `side` says which splice: into the pipe (`.source`) or out of it (`.sink`).
struct ZeroCopyFault: Hashable, Sendable {
    var call: CopyPath
    var afterBytes: UInt64
    var errno: Errno
    var side: PipelineLocation = .sink
}

/// What a descriptor is, for choosing the call that moves bytes from or to it.
enum DescriptorKind: Hashable, Sendable {
    /// A regular file: its size, and whether it is open for appending (`O_APPEND`).
    case regularFile(size: Int64, appending: Bool)
    /// A pipe or FIFO.
    case pipe
    /// A stream socket (TCP, Unix-domain).
    case socket
    /// `/dev/null`.
    case null
    /// Anything else (a terminal, another device, a datagram socket): what it is, for messages.
    case other(String)

    /// The kind of `fd` (`fstat`, `F_GETFL`, `SO_TYPE`).
    init(of fd: Int32) {
        var info = stat()
        guard (try? syscallValue("fstat", "fd \(fd)") { fstat(fd, &info) }) != nil else {
            self = .other("a descriptor that cannot be inspected")
            return
        }
        switch info.st_mode & S_IFMT {
        case S_IFREG:
            let flags = (try? syscallValue("fcntl", "fd \(fd)") { fcntl(fd, F_GETFL) }) ?? 0
            self = .regularFile(size: Int64(info.st_size), appending: flags & O_APPEND != 0)
        case S_IFIFO:
            self = .pipe
        case S_IFSOCK:
            var type: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            let isStream =
                (try? syscallValue("getsockopt", "fd \(fd)") { getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) })
                != nil && type == Int32(SOCK_STREAM.rawValue)
            self = isStream ? .socket : .other("a socket that is not a stream")
        case S_IFCHR:
            // /dev/null is character device 1:3 (Linux's encoding of makedev(1, 3)).
            self = info.st_rdev == 0x103 ? .null : .other("a terminal or device")
        default:
            self = .other("neither a file, a pipe nor a socket")
        }
    }

    var isRegularFile: Bool {
        if case .regularFile = self { return true }
        return false
    }
}

/// How the bytes go from a source to a sink inside the kernel: the calls to try in turn (after
/// the last one is refused, read/write), and whether they go through a pipe of the pipeline's
/// own.
struct KernelRoute: Hashable, Sendable {
    var calls: [CopyPath]
    /// `splice` needs a pipe at one end: a socket source is spliced into the pipeline's pipe,
    /// and from there into the sink.
    var throughPipe: Bool
    /// Which end a call that would block waits for, when only one of them can block; nil when
    /// either can (a pipe or socket at both ends).
    var blockingEnd: PipelineLocation?
}

/// The choice between the kernel's calls and read/write for a source and a sink. Pure, so the
/// whole table is testable without descriptors.
enum ZeroCopyPlan: Hashable, Sendable {
    case kernel(KernelRoute)
    case readWrite(because: String)

    init(source: DescriptorKind, sink: DescriptorKind) {
        switch (source, sink) {
        case (.other(let what), _):
            self = .readWrite(because: "the source is \(what)")
        case (.null, _):
            self = .readWrite(because: "the source is a device")
        case (.regularFile(let size, _), _) where size == 0:
            // Empty, or a file like those of /proc whose size says nothing: read(2) tells.
            self = .readWrite(because: "the source file's size is 0")
        case (_, .other(let what)):
            self = .readWrite(because: "the destination is \(what)")
        case (.regularFile, .regularFile(_, let appending)):
            // copy_file_range calls an appending destination EBADF, the errno of a bug; sendfile
            // says EINVAL, and read/write takes over.
            let calls: [CopyPath] = appending ? [.sendfile] : [.copyFileRange, .sendfile]
            self = .kernel(KernelRoute(calls: calls, throughPipe: false, blockingEnd: .sink))
        case (.regularFile, .socket), (.regularFile, .null):
            self = .kernel(KernelRoute(calls: [.sendfile], throughPipe: false, blockingEnd: .sink))
        case (.regularFile, .pipe):
            self = .kernel(KernelRoute(calls: [.splice], throughPipe: false, blockingEnd: .sink))
        case (.pipe, .regularFile), (.pipe, .null):
            self = .kernel(KernelRoute(calls: [.splice], throughPipe: false, blockingEnd: .source))
        case (.pipe, .pipe), (.pipe, .socket):
            self = .kernel(KernelRoute(calls: [.splice], throughPipe: false, blockingEnd: nil))
        case (.socket, _):
            self = .kernel(KernelRoute(calls: [.splice], throughPipe: true, blockingEnd: nil))
        }
    }
}

/// Moves a pipeline's bytes inside the kernel: the calls of a `KernelRoute` on the two
/// descriptors, each bounded by the chunk size. A refusal is answered by the next call on the
/// list and, after the last, by read/write (`fellBack`). The pipeline keeps the readiness
/// offers, the counts and the clock; this makes the calls and says what happened.
///
/// Through a pipe (a socket source), the pipe holds at most `pipeLimit` bytes: the pipeline's
/// in-flight bound, `depth × chunkSize`, or less where the kernel will not make the pipe that
/// large.
final class ZeroCopyDriver {
    /// What one call did.
    enum Outcome {
        case moved(Int)
        /// The source is at its end.
        case end
        case wouldBlock
        /// The kernel refused every call: go on with read/write.
        case fellBack
        case failed(PipelineLocation, SluiceError)
    }

    let route: KernelRoute
    private let source: (fd: Int32, name: String, kind: DescriptorKind)
    private let sink: (fd: Int32, name: String, kind: DescriptorKind)
    private var calls: ArraySlice<CopyPath>
    /// The call in use; `.readWrite` once every call was refused.
    private(set) var path: CopyPath
    private(set) var fallbacks: [CopyFallback] = []
    /// The sink is a pipe or socket and SIGPIPE is not ignored: keep it off each call.
    private let suppressSIGPIPE: Bool
    private var fault: ZeroCopyFault?

    private var pipe: (read: Int32, write: Int32)?
    /// Bytes in the pipeline's pipe.
    private(set) var held = 0
    let pipeLimit: Int
    /// A splice into the pipe would block with bytes in it: the pipe may be full (its slots are
    /// pages, and a socket's pieces can be smaller), so wait for a splice out before the next.
    var pipeFull = false
    /// A splice into the pipe found the source's end.
    private(set) var sourceDone = false
    /// A sink that writes past the page cache, into which the pipe is spliced through its own
    /// `O_DIRECT` descriptor, whole blocks at a time (`DirectFileWriteStream.takeFromPipe`).
    private let directSink: DirectFileWriteStream?

    init(
        route: KernelRoute, source: (fd: Int32, name: String, kind: DescriptorKind),
        sink: (fd: Int32, name: String, kind: DescriptorKind), pipeCapacity: Int, fault: ZeroCopyFault?,
        directSink: DirectFileWriteStream? = nil
    ) throws(SluiceError) {
        precondition(!route.calls.isEmpty, "a kernel route has a call")
        precondition(directSink == nil || route.throughPipe, "a direct sink is spliced into from the pipe")
        self.route = route
        self.source = source
        self.sink = sink
        self.directSink = directSink
        calls = route.calls[...]
        path = route.calls[0]
        self.fault = fault
        switch sink.kind {
        case .pipe, .socket: suppressSIGPIPE = !isSIGPIPEIgnored()
        case .regularFile, .null, .other: suppressSIGPIPE = false
        }
        if route.throughPipe {
            let made = try makeKernelPipe(capacity: pipeCapacity, subject: source.name)
            pipe = (made.read, made.write)
            pipeLimit = min(pipeCapacity, made.capacity)
        } else {
            pipeLimit = 0
        }
    }

    deinit { close() }

    /// Closes the pipeline's pipe, if any. Idempotent.
    func close() {
        guard let pipe else { return }
        closeDescriptor(pipe.read)
        closeDescriptor(pipe.write)
        self.pipe = nil
        held = 0
    }

    /// Room left in the pipe.
    var room: Int { pipeLimit - held }

    /// Whether a splice out of the pipe would move anything now: bytes are held (for a direct
    /// sink: a whole block, or a head it must complete first, or anything once the source ended).
    var sinkCanTake: Bool {
        guard let directSink else { return held > 0 }
        return sourceDone ? held > 0 : directSink.wouldTakeFromPipe(holding: held)
    }

    // MARK: Calls

    /// One call from the source to the sink (a direct route), of at most `count` bytes;
    /// `written` is the bytes written so far. A refused call is followed by the next at once.
    func moveDirect(upTo count: Int, written: UInt64) -> Outcome {
        precondition(!route.throughPipe, "a direct move on a route through a pipe")
        while path.isZeroCopy {
            let attempt = self.attempt(
                from: source.fd, to: sink.fd, upTo: count, counted: written, side: .sink, written: written,
                suppress: suppressSIGPIPE)
            switch attempt {
            case .done(.processed(0)): return .end
            case .done(.processed(let n)): return .moved(n)
            case .done(.wouldBlock): return .wouldBlock
            case .refused: continue
            case .failed(let error):
                // Only the sink of a direct route fails for a reason of its own: a file or pipe
                // source reads what is there (an I/O error is a refusal, and read/write then
                // says which end it was).
                return .failed(.sink, endError(error, at: .sink))
            }
        }
        return .fellBack
    }

    /// Splices at most `count` bytes from the source (a socket) into the pipe.
    func spliceIn(upTo count: Int, read: UInt64, written: UInt64) -> Outcome {
        guard let pipe else { preconditionFailure("splice into a pipe that is closed") }
        switch attempt(
            from: source.fd, to: pipe.write, upTo: count, counted: read, side: .source, written: written,
            suppress: false)
        {
        case .done(.processed(0)):
            sourceDone = true
            return .end
        case .done(.processed(let n)):
            held += n
            return .moved(n)
        case .done(.wouldBlock): return .wouldBlock
        case .refused: return .fellBack
        case .failed(let error): return .failed(.source, endError(error, at: .source))
        }
    }

    /// Splices at most `count` bytes from the pipe into the sink. A direct sink takes what it
    /// can (whole blocks), or with `final` everything held (the source ended, or
    /// the socket ran dry with less than a block in the pipe): `.wouldBlock` when it needs more.
    func spliceOut(upTo count: Int, written: UInt64, final: Bool = false) -> Outcome {
        guard let pipe else { preconditionFailure("splice out of a pipe that is closed") }
        if let directSink {
            switch directSink.takeFromPipe(pipe.read, holding: held, final: final || sourceDone) {
            case .took(let n):
                held -= n
                pipeFull = false
                return .moved(n)
            case .needsMore:
                return .wouldBlock
            case .refused(let errno):
                refuse(errno, written: written)
                return .fellBack
            case .failed(let error):
                return .failed(.sink, error)
            }
        }
        var most = min(count, held)
        if case .regularFile = sink.kind { most = PageCacheWrites.piece(most) }
        switch attempt(
            from: pipe.read, to: sink.fd, upTo: most, counted: written, side: .sink, written: written,
            suppress: suppressSIGPIPE)
        {
        case .done(.processed(0)):
            return .failed(.sink, SluiceError(.system(.ioError), operation: operation(at: .sink), subject: sink.name))
        case .done(.processed(let n)):
            held -= n
            pipeFull = false
            return .moved(n)
        case .done(.wouldBlock): return .wouldBlock
        case .refused: return .fellBack
        case .failed(let error): return .failed(.sink, endError(error, at: .sink))
        }
    }

    private enum Attempt {
        case done(IOResult<Int>)
        /// The kernel (or a scripted fault) refused: recorded, and `path` is the next call.
        case refused
        case failed(SluiceError)
    }

    /// One call of the current path, of at most `count` bytes, unless a scripted refusal comes
    /// first; `counted` is what a fault on `side` counts (bytes into the pipe, or written).
    private func attempt(
        from: Int32, to: Int32, upTo count: Int, counted: UInt64, side: PipelineLocation, written: UInt64,
        suppress: Bool
    ) -> Attempt {
        let ask: Int
        switch scriptedLimit(count, moved: counted, side: side) {
        case .refuse(let errno):
            refuse(errno, written: written)
            return .refused
        case .limit(let n):
            ask = n
        }
        switch call(path, from: from, to: to, count: ask, suppress: suppress) {
        case .success(let result):
            return .done(result)
        case .failure(let error):
            guard let errno = error.errno, Self.isRefusal(errno) else { return .failed(error) }
            refuse(errno, written: written)
            return .refused
        }
    }

    /// After a fallback: reads bytes still held in the pipe into `buffer` (`read(2)`), filling
    /// it unless the pipe empties first, so that read/write goes on with them first.
    func drain(into buffer: UnsafeMutableRawBufferPointer) -> Result<Int, SluiceError> {
        var filled = 0
        while let pipe, held > 0, filled < buffer.count {
            let count = min(buffer.count - filled, held)
            let readEnd = pipe.read
            let start = buffer.baseAddress.map { $0 + filled }
            let result = Result { () throws(SluiceError) in
                try syscallValue("read", source.name) { Glibc.read(readEnd, start, count) }
            }
            switch result {
            case .success(let n) where n > 0:
                held -= n
                filled += n
            case .success:
                return .success(filled)
            case .failure(let error):
                return .failure(error)
            }
        }
        return .success(filled)
    }

    // MARK: Helpers

    /// The errnos with which the kernel or a file system says "not this way" rather than "this
    /// failed": read/write (or the next call) tries again, and if the failure was real, reports
    /// it in its own words at the end it belongs to.
    static func isRefusal(_ errno: Errno) -> Bool {
        [EINVAL, EXDEV, EOPNOTSUPP, ENOSYS, EPERM, EIO, ESPIPE, EOVERFLOW, ETXTBSY].contains(errno.rawValue)
    }

    private func refuse(_ errno: Errno, written: UInt64) {
        let refused = path
        calls = calls.dropFirst()
        path = calls.first ?? .readWrite
        fallbacks.append(CopyFallback(refused: refused, next: path, afterBytes: written, reason: errno))
    }

    private enum Scripted {
        case refuse(Errno)
        case limit(Int)
    }

    /// `count`, or less so that a scripted refusal happens exactly at its byte; the refusal
    /// itself once its byte is reached.
    private func scriptedLimit(_ count: Int, moved: UInt64, side: PipelineLocation) -> Scripted {
        guard let fault, fault.call == path, !route.throughPipe || fault.side == side else { return .limit(count) }
        if moved >= fault.afterBytes {
            self.fault = nil
            return .refuse(fault.errno)
        }
        return .limit(Int(min(UInt64(count), fault.afterBytes - moved)))
    }

    /// One call (`copy_file_range`, `sendfile` or `splice`), as a `Result`: kept out of the
    /// callers' switches (a typed catch there trips the 6.3 optimizer).
    @inline(never)
    private func call(_ path: CopyPath, from: Int32, to: Int32, count: Int, suppress: Bool)
        -> Result<IOResult<Int>, SluiceError>
    {
        let subject = sink.name
        return Result { () throws(SluiceError) in
            switch path {
            case .copyFileRange: return try copyFileRange(from, to, count: count, subject: subject)
            case .sendfile: return try sendFile(from, to, count: count, subject: subject, suppressingSIGPIPE: suppress)
            case .splice: return try spliceBytes(from, to, count: count, subject: subject, suppressingSIGPIPE: suppress)
            case .readWrite: preconditionFailure("read/write is not a kernel call")
            }
        }
    }

    /// The name read/write would give the operation at `end`: `recv`/`send` on a socket,
    /// `read`/`write` elsewhere (the command's messages and exit statuses rest on them).
    private func operation(at end: PipelineLocation) -> String {
        let isSocket = (end == .source ? source.kind : sink.kind) == .socket
        switch end {
        case .source: return isSocket ? "recv" : "read"
        case .sink, .stage: return isSocket ? "send" : "write"
        }
    }

    /// `error`, told as read/write would tell it at `end`.
    private func endError(_ error: SluiceError, at end: PipelineLocation) -> SluiceError {
        SluiceError(error.code, operation: operation(at: end), subject: end == .source ? source.name : sink.name)
    }
}
