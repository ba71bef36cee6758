import CSluiceLinux

#if canImport(Glibc)
    import Glibc
#endif

extension StreamPropertyKey {
    /// `TCP_NODELAY` as `Bool`: send small writes at once instead of coalescing them (Nagle).
    /// TCP sockets only.
    public static let socketNoDelay = StreamPropertyKey(rawValue: "socketNoDelay")
    /// `SO_KEEPALIVE` as `Bool`: probe an idle connection so a vanished peer is noticed.
    public static let socketKeepAlive = StreamPropertyKey(rawValue: "socketKeepAlive")
    /// `SO_SNDBUF` as `Int`: the kernel send buffer size. Linux doubles the value set, for its
    /// bookkeeping, and reports the doubled value.
    public static let socketSendBufferSize = StreamPropertyKey(rawValue: "socketSendBufferSize")
    /// `SO_RCVBUF` as `Int`: the kernel receive buffer size (doubled as `socketSendBufferSize`).
    /// Set it before opening to size the TCP window from the start.
    public static let socketReceiveBufferSize = StreamPropertyKey(rawValue: "socketReceiveBufferSize")
    /// `TCP_MAXSEG` as `Int`: the largest TCP segment this side asks its peer for, 88 to
    /// 32,767 bytes. Set it before opening: the connect's SYN carries it (after the connection
    /// it reads the segment size in use, and a new value only lowers what this side sends).
    /// ``DirectFileWriteStream/socketSegmentSize`` for a stream whose bytes are spliced into a
    /// ``DirectFileWriteStream``. TCP sockets only.
    public static let socketMaximumSegmentSize = StreamPropertyKey(rawValue: "socketMaximumSegmentSize")
    /// The socket's own address, as `SocketAddress` (`getsockname`); read-only.
    public static let socketLocalAddress = StreamPropertyKey(rawValue: "socketLocalAddress")
    /// The peer's address, as `SocketAddress` (`getpeername`); read-only.
    public static let socketPeerAddress = StreamPropertyKey(rawValue: "socketPeerAddress")
}

/// Socket options set on a stream before its socket exists; applied to each socket created.
struct SocketOptions {
    var noDelay: Bool?
    var keepAlive: Bool?
    var sendBufferSize: Int?
    var receiveBufferSize: Int?
    var maximumSegmentSize: Int?

    /// Applies the options set. Failures are ignored: a TCP option on a Unix socket does not
    /// apply, and the connect itself reports anything that matters.
    func apply(to fd: Int32, family: SocketAddress.Family, name: String) {
        if let noDelay, family != .unix {
            try? Socket.setOption(fd, Int32(IPPROTO_TCP), TCP_NODELAY, noDelay ? 1 : 0, name)
        }
        if let keepAlive { try? Socket.setOption(fd, SOL_SOCKET, SO_KEEPALIVE, keepAlive ? 1 : 0, name) }
        if let sendBufferSize {
            try? Socket.setOption(fd, SOL_SOCKET, SO_SNDBUF, Int32(clamping: sendBufferSize), name)
        }
        if let receiveBufferSize {
            try? Socket.setOption(fd, SOL_SOCKET, SO_RCVBUF, Int32(clamping: receiveBufferSize), name)
        }
        if let maximumSegmentSize, family != .unix {
            try? Socket.setOption(fd, Int32(IPPROTO_TCP), TCP_MAXSEG, Int32(clamping: maximumSegmentSize), name)
        }
    }
}

/// The socket under a connect pair or an accepted pair, shared by its two streams.
///
/// Before it is connected it runs the connect: resolve, then for each address a non-blocking
/// `connect`, watched for writability on the loop (or waited for with `poll` in polling mode)
/// and finished with `SO_ERROR`; a loop timer bounds it. Once connected, a `DescriptorChannel`
/// takes the descriptor over: interest while a stream is armed, `shutdown(SHUT_WR)` when the
/// write stream closes first, `close` after both.
final class SocketCore: FDHandler, StreamCore {
    enum Target {
        case host(String, UInt16)
        case addresses([SocketAddress])
        case unix(String)
    }

    enum State {
        /// No stream has opened yet.
        case idle
        /// `connect` to `address` is in progress on `fd`; `rest` are tried if it fails.
        case connecting(fd: Int32, address: SocketAddress, rest: ArraySlice<SocketAddress>)
        /// Connected: the channel owns the descriptor.
        case connected(DescriptorChannel)
        /// The connect failed (or was abandoned); streams opened later fail with the same error.
        case failed(SluiceError)
    }

    private let target: Target?
    private let timeout: Duration?
    private(set) weak var reader: ByteStream?
    private(set) weak var writer: ByteStream?
    private(set) var state: State = .idle
    /// The address connected to (a connect pair) or accepted from (an accepted pair).
    private(set) var peer: SocketAddress?
    var options = SocketOptions()

    /// The loop watching a connect in progress, and whether the fd is registered with it.
    private var connectLoop: EventLoop?
    private var watching = false
    private var timer: LoopTimer?
    private var deadline: UInt64?
    private var lastError: SluiceError?

    /// A socket still to be connected, when a stream opens.
    init(target: Target, timeout: Duration?) {
        self.target = target
        self.timeout = timeout
    }

    /// A socket already connected (accepted by a listener).
    init(acceptedFD fd: Int32, peer: SocketAddress) {
        target = nil
        timeout = nil
        self.peer = peer
        state = .connected(makeChannel(fd))
    }

    deinit {
        if case .connecting(let fd, _, _) = state {
            stopWatching(fd)
            closeDescriptor(fd)
        }
        timer?.cancel()
    }

    /// Sets the two streams of the pair.
    func adopt(reader: ByteStream, writer: ByteStream) {
        self.reader = reader
        self.writer = writer
        if case .connected(let channel) = state {
            channel.reader = reader
            channel.writer = writer
        }
    }

    var channel: DescriptorChannel? {
        if case .connected(let channel) = state { return channel }
        return nil
    }

    /// The descriptor of a connected socket that is still open, for I/O by `stream`.
    func descriptor(for stream: ByteStream, _ operation: String) throws(SluiceError) -> Int32 {
        guard let channel, !channel.closed else {
            throw stream.error(.notOpen, operation: operation)
        }
        return channel.fd
    }

    private var streams: [ByteStream] { [reader, writer].compactMap { $0 } }

    // MARK: Opening

    /// `openPrimitive` of both streams: true when connected now, false while connecting on a
    /// loop. The first stream to open starts the connect.
    func open(_ stream: ByteStream, side: StreamSide) throws(SluiceError) -> Bool {
        switch state {
        case .connected(let channel):
            guard !channel.closed else { throw stream.error(.closed, operation: "open") }
            channel.opened(stream)
            return true
        case .failed(let error):
            throw error
        case .connecting:
            if stream.loop != nil { return false }
            // A stream in polling mode while its partner's loop drives the connect: wait here.
            try waitForConnect()
            return true
        case .idle:
            try start(loop: stream.loop)
            return channel != nil
        }
    }

    private func start(loop: EventLoop?) throws(SluiceError) {
        do {
            let addresses = try resolveTarget()
            if let timeout {
                deadline = monotonicNanoseconds() + timeout.nanoseconds
                if let loop {
                    timer = loop.schedule(after: timeout) { [weak self] in self?.timedOut() }
                }
            }
            connectLoop = loop
            try attempt(addresses[...])
        } catch {
            abort(error)
            throw error
        }
        if loop == nil { try waitForConnect() }
    }

    private func resolveTarget() throws(SluiceError) -> [SocketAddress] {
        switch target {
        case .host(let host, let port): return try Socket.resolve(host: host, port: port, passive: false)
        case .addresses(let addresses): return addresses
        case .unix(let path): return [try SocketAddress(unixPath: path)]
        case nil: preconditionFailure("an accepted socket is connected from the start")
        }
    }

    /// Connects to each address in turn until one connects at once or is in progress.
    /// Throws the last address's error when none is left.
    private func attempt(_ addresses: ArraySlice<SocketAddress>) throws(SluiceError) {
        var rest = addresses
        while let address = rest.popFirst() {
            let fd: Int32
            do {
                fd = try Socket.makeSocket(for: address)
            } catch {
                lastError = error
                continue
            }
            options.apply(to: fd, family: address.family, name: address.description)
            do {
                if try Self.beginConnect(fd, address) {
                    state = .connecting(fd: fd, address: address, rest: rest)
                    if let connectLoop {
                        try connectLoop.watch(fd: fd, interest: .write, handler: self)
                        watching = true
                    }
                    return
                }
            } catch {
                if case .connecting = state { state = .idle }
                closeDescriptor(fd)
                lastError = error
                continue
            }
            connected(fd: fd, address: address)
            return
        }
        throw lastError ?? SluiceError(.invalidArgument, operation: "connect", detail: "no address")
    }

    /// Starts `connect`: returns true while in progress (EINPROGRESS), false when connected.
    private static func beginConnect(_ fd: Int32, _ address: SocketAddress) throws(SluiceError) -> Bool {
        do throws(SluiceError) {
            let result = try address.withSockAddr { sa, length throws(SluiceError) in
                try syscall("connect", address.description) { Glibc.connect(fd, sa, length) }
            }
            switch result {
            case .processed: return false
            case .wouldBlock:
                // A Unix socket whose listener's backlog is full: not in progress, refused for now.
                throw SluiceError(.system(.wouldBlock), operation: "connect", subject: address.description)
            }
        } catch {
            if error.caughtErrno == .inProgress { return true }
            throw error
        }
    }

    /// The connecting fd is writable: the connect finished one way or the other.
    func fdReady(_ readiness: Readiness) {
        finishAttempt()
    }

    private func finishAttempt() {
        guard case .connecting(let fd, let address, let rest) = state else { return }
        stopWatching(fd)
        let err = (try? Socket.option(fd, SOL_SOCKET, SO_ERROR, address.description)) ?? EIO
        if err == 0 {
            connected(fd: fd, address: address)
            return
        }
        closeDescriptor(fd)
        state = .idle
        lastError = SluiceError(.system(Errno(rawValue: err)), operation: "connect", subject: address.description)
        do {
            try attempt(rest)
        } catch {
            abort(error)
        }
    }

    /// Polling mode: waits with `poll` until the connect in progress completes or times out.
    private func waitForConnect() throws(SluiceError) {
        while case .connecting(let fd, _, _) = state {
            var milliseconds: Int32 = -1
            if let deadline {
                let now = monotonicNanoseconds()
                milliseconds = now >= deadline ? 0 : Int32(clamping: (deadline - now + 999_999) / 1_000_000)
            }
            let revents: Int16
            do {
                revents = try pollDescriptor(fd, events: Int16(POLLOUT), timeoutMilliseconds: milliseconds)
            } catch {
                abort(error)
                break
            }
            if revents == 0 { timedOut() } else { finishAttempt() }
        }
        switch state {
        case .connected: return
        case .failed(let error): throw error
        case .idle, .connecting: preconditionFailure("connect neither finished nor failed")
        }
    }

    private func connected(fd: Int32, address: SocketAddress) {
        timer?.cancel()
        timer = nil
        connectLoop = nil
        peer = address
        let channel = makeChannel(fd)
        state = .connected(channel)
        for stream in streams where stream.streamStatus == .opening {
            channel.opened(stream)
            stream.didOpen()
            if let loop = stream.loop { channel.attach(stream, to: loop) }
        }
    }

    private func makeChannel(_ fd: Int32) -> DescriptorChannel {
        let channel = DescriptorChannel(fd: fd, ownsDescriptor: true)
        channel.reader = reader
        channel.writer = writer
        channel.halfCloseWrite = { fd in
            // ENOTCONN after a reset is no news: the reader reports the reset.
            _ = try? syscallValue("shutdown", "fd \(fd)") { Glibc.shutdown(fd, Int32(SHUT_WR)) }
        }
        return channel
    }

    private func timedOut() {
        guard case .connecting(_, let address, _) = state else { return }
        abort(SluiceError(.timedOut, operation: "connect", subject: address.description))
    }

    /// Gives up the connect: every stream still opening fails with `error`, and so does every
    /// stream opened later.
    private func abort(_ error: SluiceError) {
        timer?.cancel()
        timer = nil
        if case .connecting(let fd, _, _) = state {
            stopWatching(fd)
            closeDescriptor(fd)
        }
        connectLoop = nil
        state = .failed(error)
        for stream in streams where stream.streamStatus == .opening {
            stream.fail(error)
        }
    }

    private func stopWatching(_ fd: Int32) {
        guard watching else { return }
        connectLoop?.unwatch(fd: fd)
        watching = false
    }

    // MARK: Loop and closing

    func attach(_ stream: ByteStream, side: StreamSide, to loop: EventLoop) {
        if case .connected(let channel) = state, stream.isOpenish, !channel.closed {
            channel.attach(stream, to: loop)
        }
    }

    func detach(_ stream: ByteStream, side: StreamSide) {
        if case .connected(let channel) = state { channel.detach(stream) }
    }

    /// A socket is always watched by epoll, connected or not.
    func interestChanged(_ stream: ByteStream) { channel?.updateInterest() }

    /// Polling mode: waits with `poll` until the connected socket is readable (writable).
    func waitUntilReady(_ stream: ByteStream, side: StreamSide) throws(SluiceError) {
        let fd = try descriptor(for: stream, "poll")
        _ = try pollDescriptor(fd, events: side.pollEvents, timeoutMilliseconds: -1)
    }

    func isReady(_ stream: ByteStream, side: StreamSide) -> Bool {
        guard let fd = try? descriptor(for: stream, "poll") else { return false }
        return (try? pollDescriptor(fd, events: side.pollEvents, timeoutMilliseconds: 0)) ?? 0 != 0
    }

    var kernelCopyDescriptor: Int32? { channel?.kernelCopyDescriptor }

    func streamClosed(_ stream: ByteStream, side: StreamSide) {
        switch state {
        case .connected(let channel):
            channel.streamClosed(side)
        case .connecting:
            if !streams.contains(where: { $0.streamStatus == .opening }) {
                abort(stream.error(.closed, operation: "connect"))
            }
        case .idle, .failed:
            break
        }
    }

    // MARK: Properties

    func property(_ key: StreamPropertyKey, of stream: ByteStream) -> Any? {
        let fd = channel.flatMap { $0.closed ? nil : $0.fd }
        switch key {
        case .fileDescriptor:
            return fd
        case .socketPeerAddress:
            return peer
        case .socketLocalAddress:
            return fd.flatMap { try? SocketAddress.local(of: $0) }
        case .socketNoDelay:
            guard let fd else { return options.noDelay }
            return (try? Socket.option(fd, Int32(IPPROTO_TCP), TCP_NODELAY, "fd \(fd)")).map { $0 != 0 }
        case .socketKeepAlive:
            guard let fd else { return options.keepAlive }
            return (try? Socket.option(fd, SOL_SOCKET, SO_KEEPALIVE, "fd \(fd)")).map { $0 != 0 }
        case .socketSendBufferSize:
            guard let fd else { return options.sendBufferSize }
            return (try? Socket.option(fd, SOL_SOCKET, SO_SNDBUF, "fd \(fd)")).map { Int($0) }
        case .socketReceiveBufferSize:
            guard let fd else { return options.receiveBufferSize }
            return (try? Socket.option(fd, SOL_SOCKET, SO_RCVBUF, "fd \(fd)")).map { Int($0) }
        case .socketMaximumSegmentSize:
            guard let fd else { return options.maximumSegmentSize }
            return (try? Socket.option(fd, Int32(IPPROTO_TCP), TCP_MAXSEG, "fd \(fd)")).map { Int($0) }
        default:
            return nil
        }
    }

    func setProperty(_ value: Any?, _ key: StreamPropertyKey) -> Bool {
        let fd = channel.flatMap { $0.closed ? nil : $0.fd }
        let level: Int32
        let option: Int32
        let raw: Int32
        switch key {
        case .socketNoDelay, .socketKeepAlive:
            guard let flag = value as? Bool else { return false }
            if key == .socketNoDelay {
                (level, option) = (Int32(IPPROTO_TCP), TCP_NODELAY)
                if fd == nil { options.noDelay = flag }
            } else {
                (level, option) = (SOL_SOCKET, SO_KEEPALIVE)
                if fd == nil { options.keepAlive = flag }
            }
            raw = flag ? 1 : 0
        case .socketSendBufferSize, .socketReceiveBufferSize:
            guard let size = (value as? Int) ?? (value as? Int32).map({ Int($0) }), size > 0 else { return false }
            if key == .socketSendBufferSize {
                (level, option) = (SOL_SOCKET, SO_SNDBUF)
                if fd == nil { options.sendBufferSize = size }
            } else {
                (level, option) = (SOL_SOCKET, SO_RCVBUF)
                if fd == nil { options.receiveBufferSize = size }
            }
            raw = Int32(clamping: size)
        case .socketMaximumSegmentSize:
            guard let size = (value as? Int) ?? (value as? Int32).map({ Int($0) }), (88...32_767).contains(size) else {
                return false
            }
            (level, option) = (Int32(IPPROTO_TCP), TCP_MAXSEG)
            if fd == nil { options.maximumSegmentSize = size }
            raw = Int32(size)
        default:
            return false
        }
        guard let fd else {
            // Not connected yet: kept, and applied to the socket when it is created.
            if case .failed = state { return false }
            return true
        }
        return (try? Socket.setOption(fd, level, option, raw, "fd \(fd)")) != nil
    }
}

/// The read stream of a socket pair: `recv` on the connected socket. The rest is the core's.
final class SocketReadStream: ReadStream {
    let core: SocketCore

    init(core: SocketCore, name: String) {
        self.core = core
        super.init(name: name, core: core)
        servedByReadyQueue = false  // a socket is always watched by epoll
    }

    override func readPrimitive(_ buffer: UnsafeMutableRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        let fd = try core.descriptor(for: self, "recv")
        return try syscall("recv", name) { recv(fd, buffer.baseAddress, buffer.count, 0) }
    }

    override var offersKernelCopy: Bool { true }
}

/// The write stream of a socket pair: `send` with `MSG_NOSIGNAL` on the connected socket.
/// Closing it while the read stream is open shuts down the sending direction only.
final class SocketWriteStream: WriteStream {
    let core: SocketCore

    init(core: SocketCore, name: String) {
        self.core = core
        super.init(name: name, core: core)
        servedByReadyQueue = false  // a socket is always watched by epoll
    }

    override func writePrimitive(_ buffer: UnsafeRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        let fd = try core.descriptor(for: self, "send")
        return try syscall("send", name) { send(fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL)) }
    }

    override var offersKernelCopy: Bool { true }
}
