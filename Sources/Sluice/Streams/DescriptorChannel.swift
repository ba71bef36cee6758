#if canImport(Glibc)
    import Glibc
#endif

/// One file descriptor shared by the streams that use it: one reader, one writer, or both
/// (a socket). Watches the fd on the loop with interest only while a stream is armed, falls
/// back to the ready queue for descriptors epoll cannot watch (regular files), shuts down a
/// direction when one side closes, and closes the fd when both have.
final class DescriptorChannel: FDHandler {
    let fd: Int32
    let ownsDescriptor: Bool
    weak var reader: ByteStream?
    weak var writer: ByteStream?
    /// Called when the writer closes while the reader stays open (sockets: `shutdown(SHUT_WR)`).
    var halfCloseWrite: ((Int32) -> Void)?

    private(set) var loop: EventLoop?
    private var watched = false
    /// Set when epoll refused the fd (EPERM): readiness comes from the ready queue.
    private(set) var unwatchable: Bool
    private var savedFlags: Int32?
    private var readerOpen = false
    private var writerOpen = false
    /// Set once the fd is closed (both streams closed); a socket pair checks it before reuse.
    private(set) var closed = false
    private var lastHangup = false

    deinit {
        // Both streams gone without closing it: dropped unopened (a connection turned away
        // before anything was read or written), or never closed. The descriptor is still this
        // channel's; nothing else can reach it any more. (A watched channel is held by its loop,
        // so it is not watched here.)
        if ownsDescriptor && !closed { closeDescriptor(fd) }
    }

    init(fd: Int32, ownsDescriptor: Bool) {
        self.fd = fd
        self.ownsDescriptor = ownsDescriptor
        var st = stat()
        let isRegular = fstat(fd, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG
        unwatchable = isRegular
    }

    var isRegularFile: Bool { unwatchable }

    func opened(_ stream: ByteStream) {
        if stream === reader { readerOpen = true }
        if stream === writer { writerOpen = true }
    }

    /// The stream is scheduled and open: start delivering its readiness on `loop`.
    func attach(_ stream: ByteStream, to loop: EventLoop) {
        if let current = self.loop {
            precondition(current === loop, "fd \(fd): reader and writer scheduled on different loops")
        }
        self.loop = loop
        if unwatchable { return }
        if savedFlags == nil {
            // The loop needs a non-blocking fd; the original flags come back on close.
            savedFlags = try? setNonBlocking(fd, true)
        }
        updateInterest()
    }

    func detach(_ stream: ByteStream) {
        let streams: [ByteStream?] = [reader, writer]
        let others = streams.contains { other in
            guard let other, other !== stream else { return false }
            return other.loop != nil
        }
        if !others {
            if watched {
                loop?.unwatch(fd: fd)
                watched = false
            }
            loop = nil
        } else {
            updateInterest()
        }
    }

    /// Recomputes what the fd is watched for from the streams' armed states.
    func updateInterest() {
        guard let loop, !unwatchable, !closed else { return }
        var interest: Interest = []
        if let r = reader, r.armed, r.loop != nil, r.streamStatus == .open { interest.insert(.read) }
        if let w = writer, w.armed, w.loop != nil, w.streamStatus == .open { interest.insert(.write) }
        if interest.isEmpty {
            // EPOLLHUP/EPOLLERR are reported even with no interest: stop watching entirely
            // while nobody wants events, or a hung-up fd would spin the loop.
            if watched && lastHangup {
                loop.unwatch(fd: fd)
                watched = false
            } else if watched {
                loop.setInterest(fd: fd, [])
            }
            return
        }
        if watched {
            loop.setInterest(fd: fd, interest)
        } else if let failure = startWatching(loop, interest) {
            watchFailed(failure)
        }
    }

    /// Registers the fd; returns the error instead of throwing it.
    private func startWatching(_ loop: EventLoop, _ interest: Interest) -> SluiceError? {
        do {
            try loop.watch(fd: fd, interest: interest, handler: self)
            watched = true
            return nil
        } catch {
            return error
        }
    }

    /// epoll refused the fd. Kept out of `updateInterest`: inlined there, this catch crashes
    /// the Swift 6.3.1 optimizer (CopyPropagation ownership error) in release builds.
    @inline(never)
    private func watchFailed(_ error: SluiceError) {
        if error.errno == .notPermitted {
            unwatchable = true
            reader?.servedByReadyQueue = true
            writer?.servedByReadyQueue = true
            reader?.signal()
            writer?.signal()
        } else {
            (reader ?? writer)?.fail(error)
        }
    }

    func fdReady(_ readiness: Readiness) {
        lastHangup = readiness.contains(.hangup) || readiness.contains(.error)
        if !readiness.isDisjoint(with: [.readable, .hangup, .error]), let r = reader {
            _ = r.kernelReady()
        }
        if !readiness.isDisjoint(with: [.writable, .error]), let w = writer {
            _ = w.kernelReady()
        }
        updateInterest()
    }

    /// A stream using the fd closed: shut down its direction, and close the fd after the last.
    /// The stream names its side rather than passing itself: a stream closing in its `deinit`
    /// can no longer be found through the channel's weak references.
    func streamClosed(_ side: StreamSide) {
        switch side {
        case .reader:
            readerOpen = false
        case .writer:
            if writerOpen && readerOpen { halfCloseWrite?(fd) }
            writerOpen = false
        }
        if readerOpen || writerOpen || closed { return }
        closed = true
        if watched {
            loop?.unwatch(fd: fd)
            watched = false
        }
        if let savedFlags { _ = fcntl(fd, F_SETFL, savedFlags) }
        if ownsDescriptor { closeDescriptor(fd) }
    }
}

/// The channel is the core of the descriptor streams over it (a file's, a pipe's, or the two
/// of a socket pair made from a descriptor).
extension DescriptorChannel: StreamCore {
    func open(_ stream: ByteStream, side: StreamSide) throws(SluiceError) -> Bool {
        opened(stream)
        stream.servedByReadyQueue = unwatchable
        return true
    }

    func streamClosed(_ stream: ByteStream, side: StreamSide) { streamClosed(side) }

    func attach(_ stream: ByteStream, side: StreamSide, to loop: EventLoop) { attach(stream, to: loop) }

    func detach(_ stream: ByteStream, side: StreamSide) { detach(stream) }

    func interestChanged(_ stream: ByteStream) {
        if stream.servedByReadyQueue {
            if stream.armed { stream.signal() }
        } else {
            updateInterest()
        }
    }

    func waitUntilReady(_ stream: ByteStream, side: StreamSide) throws(SluiceError) {
        _ = try pollDescriptor(fd, events: side.pollEvents, timeoutMilliseconds: -1)
    }

    func isReady(_ stream: ByteStream, side: StreamSide) -> Bool {
        if isRegularFile { return true }
        return (try? pollDescriptor(fd, events: side.pollEvents, timeoutMilliseconds: 0)) ?? 0 != 0
    }

    var kernelCopyDescriptor: Int32? { closed ? nil : fd }

    func property(_ key: StreamPropertyKey, of stream: ByteStream) -> Any? {
        switch key {
        case .fileCurrentOffset:
            guard stream.isOpenish else { return nil }
            let pos = lseek(fd, 0, SEEK_CUR)
            return pos < 0 ? nil : UInt64(pos)
        case .fileDescriptor:
            return fd
        default:
            return nil
        }
    }
}
