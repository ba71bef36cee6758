import CSluiceLinux

#if canImport(Glibc)
    import Glibc
#endif

/// Stream sockets: connect pairs and listeners over TCP (IPv4 and IPv6) and Unix-domain
/// sockets, as `CFStreamCreatePairWithSocketToHost` and a listening socket.
///
/// ```swift
/// let (input, output) = Socket.connect(host: "example.org", port: 80, timeout: .seconds(5))
/// input.delegate = self; output.delegate = self
/// input.schedule(on: loop); output.schedule(on: loop)
/// input.open(); output.open()      // starts the connect; openCompleted once connected
/// ```
public enum Socket {
    /// A connection accepted by a `SocketListener`: its two streams and the peer's address.
    public typealias ConnectionHandler = (ReadStream, WriteStream, SocketAddress) -> Void

    /// Creates the two streams of one TCP connection to `host:port`, as
    /// `CFStreamCreatePairWithSocketToHost`.
    ///
    /// Nothing happens until a stream is opened. Opening the first one resolves `host`
    /// (`getaddrinfo`, IPv4 and IPv6; numeric addresses such as `::1` skip the resolver) and
    /// starts a non-blocking `connect` to each resolved address in turn until one succeeds.
    /// On a loop the connect is driven by the loop: both opened streams report
    /// `openCompleted` once connected, or `errorOccurred` with a `SluiceError` naming the
    /// address (`connect 127.0.0.1:5: Connection refused (errno 111)`), code `.unknownHost`
    /// when the name does not resolve, `.timedOut` when `timeout` passes first. In polling
    /// mode (no loop) `open()` blocks until connected or failed.
    ///
    /// - Important: name resolution blocks the calling thread (getaddrinfo has no
    ///   non-blocking form). Pass a numeric address to avoid it.
    /// - Parameters:
    ///   - host: a name to resolve, or a numeric IPv4 or IPv6 address.
    ///   - port: the TCP port.
    ///   - timeout: the limit for the whole connect, all addresses included; nil leaves it to
    ///     the kernel (about two minutes for TCP).
    /// - Returns: the read and the write stream of the connection. Closing the write stream
    ///   shuts down the sending direction only (`shutdown(SHUT_WR)`): the peer reads the end
    ///   while this side keeps reading. The socket is closed when both streams are (a stream
    ///   never opened does not count: closing the only opened stream closes the socket).
    public static func connect(host: String, port: UInt16, timeout: Duration? = nil) -> (ReadStream, WriteStream) {
        let core = SocketCore(target: .host(host, port), timeout: timeout)
        return makePair(core, name: displayName(host: host, port: port))
    }

    /// Creates the two streams of one connection to the first of `addresses` that accepts,
    /// tried in order; otherwise as `connect(host:port:timeout:)`, without name resolution.
    public static func connect(to addresses: [SocketAddress], timeout: Duration? = nil) -> (ReadStream, WriteStream) {
        precondition(!addresses.isEmpty, "Socket.connect(to:) needs at least one address")
        let core = SocketCore(target: .addresses(addresses), timeout: timeout)
        return makePair(core, name: addresses[0].description)
    }

    /// Creates the two streams of one connection to the Unix-domain socket at `path`;
    /// otherwise as `connect(host:port:timeout:)`. A path too long for `sockaddr_un` fails
    /// at open with `.invalidArgument`.
    public static func connect(unixPath path: String, timeout: Duration? = nil) -> (ReadStream, WriteStream) {
        let core = SocketCore(target: .unix(path), timeout: timeout)
        return makePair(core, name: path)
    }

    /// Listens on `host:port` (`socket`, `SO_REUSEADDR`, `bind`, `listen`). `host` nil listens
    /// on every interface; port 0 picks a free port, which `SocketListener.port` then tells.
    /// A name is resolved (blocking) and the first address that binds is used.
    public static func listen(host: String? = nil, port: UInt16, backlog: Int32 = 128) throws(SluiceError)
        -> SocketListener
    {
        let addresses = try resolve(host: host, port: port, passive: true)
        var lastError: SluiceError?
        for address in addresses {
            do {
                return try SocketListener(bindingTo: address, backlog: backlog)
            } catch {
                lastError = error
            }
        }
        throw lastError!
    }

    /// Listens on the Unix-domain socket `path`. A stale socket file left by a listener that
    /// died (a socket nobody accepts on: connecting gives ECONNREFUSED) is replaced; any other
    /// existing file is not, and the error is EADDRINUSE naming the path. Closing the listener
    /// removes the socket file.
    public static func listen(unixPath path: String, backlog: Int32 = 128) throws(SluiceError) -> SocketListener {
        try SocketListener(unixPath: path, backlog: backlog)
    }

    /// Resolves `host` to the addresses a stream socket can connect to (`getaddrinfo`,
    /// `AF_UNSPEC`, `SOCK_STREAM`), in the resolver's order of preference. Blocks while
    /// resolving; a numeric address (`127.0.0.1`, `::1`, `[::1]`) returns at once.
    /// Throws `.unknownHost` with the resolver's text when the name does not resolve.
    public static func resolve(host: String, port: UInt16) throws(SluiceError) -> [SocketAddress] {
        try resolve(host: host, port: port, passive: false)
    }

    package static func resolve(host: String?, port: UInt16, passive: Bool) throws(SluiceError) -> [SocketAddress] {
        var host = host
        if let h = host, h.hasPrefix("[") && h.hasSuffix("]") { host = String(h.dropFirst().dropLast()) }
        if let host, let address = SocketAddress(numericHost: host, port: port) { return [address] }
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)
        var list: UnsafeMutablePointer<addrinfo>?
        // getaddrinfo reports failure through its return value, not errno, so it cannot go
        // through `syscall`; EAI_SYSTEM is the one case where errno says why.
        let rc = getaddrinfo(host, String(port), &hints, &list)
        guard rc == 0 else {
            let subject = host ?? "*"
            if rc == EAI_SYSTEM {
                throw SluiceError(.system(Errno.current), operation: "resolve", subject: subject)
            }
            throw SluiceError(.unknownHost(String(cString: gai_strerror(rc))), operation: "resolve", subject: subject)
        }
        defer { freeaddrinfo(list) }
        var addresses: [SocketAddress] = []
        var entry = list
        while let info = entry {
            if let sa = info.pointee.ai_addr,
                let address = SocketAddress(sockaddr: UnsafeRawPointer(sa), length: info.pointee.ai_addrlen),
                !addresses.contains(address)
            {
                addresses.append(address)
            }
            entry = info.pointee.ai_next
        }
        guard !addresses.isEmpty else {
            throw SluiceError(.unknownHost("no stream address"), operation: "resolve", subject: host ?? "*")
        }
        return addresses
    }

    // MARK: Internals shared by connect pairs and listeners

    /// `host:port`, with an IPv6 literal in brackets.
    static func displayName(host: String, port: UInt16) -> String {
        if host.contains(":") && !host.hasPrefix("[") { return "[\(host)]:\(port)" }
        return "\(host):\(port)"
    }

    static func makePair(_ core: SocketCore, name: String) -> (ReadStream, WriteStream) {
        let reader = SocketReadStream(core: core, name: name)
        let writer = SocketWriteStream(core: core, name: name)
        core.adopt(reader: reader, writer: writer)
        return (reader, writer)
    }

    /// A non-blocking, close-on-exec stream socket for `address`'s family.
    package static func makeSocket(for address: SocketAddress) throws(SluiceError) -> Int32 {
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        let family = address.addressFamily
        return try syscallValue("socket", address.description) { Glibc.socket(family, type, 0) }
    }

    /// Sets an integer socket option (`setsockopt`).
    package static func setOption(_ fd: Int32, _ level: Int32, _ option: Int32, _ value: Int32, _ name: String)
        throws(SluiceError)
    {
        var v = value
        try syscallValue("setsockopt", name) {
            setsockopt(fd, level, option, &v, socklen_t(MemoryLayout<Int32>.size))
        }
    }

    /// Reads an integer socket option (`getsockopt`).
    static func option(_ fd: Int32, _ level: Int32, _ option: Int32, _ name: String) throws(SluiceError) -> Int32 {
        var v: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        try syscallValue("getsockopt", name) { getsockopt(fd, level, option, &v, &length) }
        return v
    }
}

extension SluiceError {
    /// `errno`, for use inside a `catch`. Never inlined: reading `errno` of a caught typed
    /// error inline crashes the Swift 6.3.1 optimizer (CopyPropagation ownership error) in
    /// release builds.
    @inline(never)
    var caughtErrno: Errno? { errno }
}
