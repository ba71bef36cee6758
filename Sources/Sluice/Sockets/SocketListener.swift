import CSluiceLinux

#if canImport(Glibc)
    import Glibc
#endif

/// A listening stream socket (TCP or Unix-domain) that hands each accepted connection over as a
/// stream pair. Create one with `Socket.listen(host:port:backlog:)` or
/// `Socket.listen(unixPath:backlog:)`.
///
/// On a loop, `accept(on:handler:)` accepts (`accept4`, non-blocking, close-on-exec) whenever
/// the listening socket is readable, until the kernel has no more, and calls the handler with
/// each connection's streams, not yet opened, and the peer's address. The listener keeps the
/// loop running until it is closed. Without a loop, `accept(timeout:)` waits for one
/// connection. Closing the listener stops accepting; accepted connections are not touched.
public final class SocketListener: FDHandler {
    /// The address the listener is bound to; for port 0, with the port the kernel chose.
    public let address: SocketAddress
    /// The port listened on (0 for a Unix-domain listener).
    public var port: UInt16 { address.port ?? 0 }
    /// False once `close()` has been called.
    public private(set) var isListening = true
    /// Told about accept failures that are not the peer's doing (`EMFILE`, `ENFILE`,
    /// `ENOBUFS`, `ENOMEM`); accepting pauses for 100 ms after one, then resumes.
    public var errorHandler: ((SluiceError) -> Void)?

    private let fd: Int32
    private var loop: EventLoop?
    private var handler: Socket.ConnectionHandler?
    private var watching = false
    private var pauseTimer: LoopTimer?
    /// For a Unix listener: the socket file and its inode, removed on close if still ours.
    private var unixPath: String?
    private var unixInode: ino_t?

    /// Asks the peers of the connections accepted from now on to send TCP segments of at most
    /// `bytes` (`TCP_MAXSEG` on the listening socket: each SYN-ACK advertises it). Between 88
    /// and 32,767; it only ever lowers the segment size the path allows. For a TCP listener.
    ///
    /// ``DirectFileWriteStream/socketSegmentSize`` makes a peer that sends from the page cache
    /// (`sendfile`, `splice`) send whole pages per segment, which is what lets a pipeline splice
    /// the socket's bytes into a ``DirectFileWriteStream`` without copying them.
    public func limitSegmentSize(to bytes: Int32) throws(SluiceError) {
        guard unixPath == nil else {
            throw SluiceError(
                .system(.invalidArgument), operation: "setsockopt", subject: address.description,
                detail: "TCP_MAXSEG is for a TCP listener")
        }
        try Socket.setOption(fd, Int32(IPPROTO_TCP), TCP_MAXSEG, bytes, address.description)
    }

    /// Binds and listens on an IP address, with `SO_REUSEADDR`.
    init(bindingTo address: SocketAddress, backlog: Int32) throws(SluiceError) {
        let fd = try Socket.makeSocket(for: address)
        do {
            try Socket.setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1, address.description)
            try Self.bind(fd, address)
            try syscallValue("listen", address.description) { Glibc.listen(fd, backlog) }
            self.address = try SocketAddress.local(of: fd)
        } catch {
            closeDescriptor(fd)
            throw error
        }
        self.fd = fd
    }

    /// Binds and listens on a Unix-domain path, replacing a stale socket file.
    init(unixPath path: String, backlog: Int32) throws(SluiceError) {
        let address = try SocketAddress(unixPath: path)
        let fd = try Socket.makeSocket(for: address)
        do throws(SluiceError) {
            do {
                try Self.bind(fd, address)
            } catch {
                guard error.caughtErrno == .addressInUse else { throw error }
                if let why = Self.whyNotStale(path, address) {
                    throw SluiceError(.system(.addressInUse), operation: "bind", path: path, detail: why)
                }
                // A socket file nobody accepts on: left by a listener that died. Replace it.
                try syscallValue("unlink", path) { unlink(path) }
                try Self.bind(fd, address)
            }
            try syscallValue("listen", path) { Glibc.listen(fd, backlog) }
        } catch {
            closeDescriptor(fd)
            throw error
        }
        self.fd = fd
        self.address = address
        unixPath = path
        var st = stat()
        if lstat(path, &st) == 0 { unixInode = st.st_ino }
    }

    deinit { close() }

    private static func bind(_ fd: Int32, _ address: SocketAddress) throws(SluiceError) {
        try address.withSockAddr { sa, length throws(SluiceError) in
            _ = try syscallValue("bind", address.description) { Glibc.bind(fd, sa, length) }
        }
    }

    /// Why the file at `path` must not be replaced, or nil when it is a stale socket: a socket
    /// that refuses connections (ECONNREFUSED).
    private static func whyNotStale(_ path: String, _ address: SocketAddress) -> String? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return "cannot inspect the existing file" }
        guard st.st_mode & S_IFMT == S_IFSOCK else { return "an existing file that is not a socket" }
        guard let probe = try? Socket.makeSocket(for: address) else { return "cannot probe the existing socket" }
        defer { closeDescriptor(probe) }
        do {
            _ = try address.withSockAddr { sa, length throws(SluiceError) in
                try syscall("connect", path) { Glibc.connect(probe, sa, length) }
            }
            return "a listener is accepting on it"
        } catch {
            return error.caughtErrno == .connectionRefused ? nil : "probing the existing socket: \(error.reason)"
        }
    }

    // MARK: Accepting

    /// Starts accepting on `loop`: `handler` is called on the loop with each connection's
    /// streams (to be given a delegate, scheduled and opened) and the peer's address. The
    /// listener keeps `loop.run()` going until `close()`.
    public func accept(on loop: EventLoop, handler: @escaping Socket.ConnectionHandler) throws(SluiceError) {
        guard isListening else { throw SluiceError(.closed, operation: "accept", subject: address.description) }
        precondition(self.loop == nil, "\(address): already accepting on a loop")
        try loop.watch(fd: fd, interest: .read, handler: self)
        watching = true
        self.loop = loop
        self.handler = handler
        loop.retainSource()
    }

    /// Waits for one connection (polling mode) and returns its streams, not yet opened, and the
    /// peer's address. Throws `.timedOut` when `timeout` passes first.
    public func accept(timeout: Duration? = nil) throws(SluiceError) -> (ReadStream, WriteStream, SocketAddress) {
        let deadline = timeout.map { monotonicNanoseconds() + $0.nanoseconds }
        while true {
            guard isListening else { throw SluiceError(.closed, operation: "accept", subject: address.description) }
            if let connection = try acceptOne() { return connection }
            var milliseconds: Int32 = -1
            if let deadline {
                let now = monotonicNanoseconds()
                if now >= deadline {
                    throw SluiceError(.timedOut, operation: "accept", subject: address.description)
                }
                milliseconds = Int32(clamping: (deadline - now + 999_999) / 1_000_000)
            }
            _ = try pollDescriptor(fd, events: Int16(POLLIN), timeoutMilliseconds: milliseconds)
        }
    }

    /// Accepts one pending connection, nil when none is pending. Connections the peer gave up
    /// before they were accepted are skipped.
    private func acceptOne() throws(SluiceError) -> (ReadStream, WriteStream, SocketAddress)? {
        while true {
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let listenFD = fd
            let flags = Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
            let result: IOResult<Int32>
            do throws(SluiceError) {
                result = try withUnsafeMutablePointer(to: &storage) { pointer throws(SluiceError) in
                    try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa throws(SluiceError) in
                        try syscall("accept4", address.description) { accept4(listenFD, sa, &length, flags) }
                    }
                }
            } catch {
                // Linux reports errors of the pending connection itself through accept:
                // the connection is gone, the listener is fine.
                switch error.caughtErrno?.rawValue {
                case ECONNABORTED, EPROTO, EPERM, ENETDOWN, ENOPROTOOPT, EHOSTDOWN, ENONET, EHOSTUNREACH, EOPNOTSUPP,
                    ENETUNREACH:
                    continue
                default:
                    throw error
                }
            }
            guard case .processed(let connectionFD) = result else { return nil }
            let peer =
                withUnsafeBytes(of: &storage) { SocketAddress(sockaddr: $0.baseAddress!, length: length) } ?? address
            let name = address.family == .unix ? address.description : peer.description
            let (reader, writer) = Socket.makePair(SocketCore(acceptedFD: connectionFD, peer: peer), name: name)
            return (reader, writer, peer)
        }
    }

    /// The listening socket is readable: accept until the kernel has no more connections.
    func fdReady(_ readiness: Readiness) {
        while isListening, let handler {
            do {
                guard let (reader, writer, peer) = try acceptOne() else { return }
                handler(reader, writer, peer)
            } catch {
                // Out of descriptors or memory: the connection stays queued and epoll would
                // report it again at once. Pause, so the loop can free something.
                errorHandler?(error)
                pause()
                return
            }
        }
    }

    private func pause() {
        guard let loop, watching, pauseTimer == nil else { return }
        loop.setInterest(fd: fd, [])
        pauseTimer = loop.schedule(after: .milliseconds(100)) { [weak self] in
            guard let self else { return }
            self.pauseTimer = nil
            if self.isListening, self.watching { self.loop?.setInterest(fd: self.fd, .read) }
        }
    }

    /// Stops listening and closes the socket (a Unix listener also removes its socket file).
    /// Accepted connections are not touched. Idempotent.
    public func close() {
        guard isListening else { return }
        isListening = false
        pauseTimer?.cancel()
        pauseTimer = nil
        if let loop {
            if watching { loop.unwatch(fd: fd) }
            loop.releaseSource()
        }
        watching = false
        loop = nil
        handler = nil
        closeDescriptor(fd)
        if let unixPath, let unixInode {
            var st = stat()
            if lstat(unixPath, &st) == 0 && st.st_ino == unixInode { unlink(unixPath) }
        }
    }
}
