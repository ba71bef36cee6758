import CSluiceLinux

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A connected TCP socket used one call at a time under a deadline, for the short exchanges that
/// come before a stream pair takes a connection over: a relay's hello and answer, the code
/// handshake. The descriptor stays non-blocking; each call waits with `poll(2)` until it can go
/// on or the deadline passes (`.timedOut`). `takeDescriptor()` hands the connection on (to
/// `Socket.streams(adopting:)`); a socket not handed on is closed when it goes.
package final class BlockingSocket {
    private var fd: Int32
    /// The address connected to, as messages name it.
    package let name: String

    /// Takes `fd`, a connected stream socket, over (it is made non-blocking).
    package init(adopting fd: Int32, name: String) throws(SluiceError) {
        self.fd = fd
        self.name = name
        _ = try setNonBlocking(fd, true)
    }

    deinit {
        if fd >= 0 { closeDescriptor(fd) }
    }

    /// Connects to `host:port` (resolved; each address tried in turn) before `deadline`
    /// (`monotonicNanoseconds()`), with `TCP_NODELAY`: the exchanges are small messages that
    /// each wait for an answer.
    package static func connect(host: String, port: UInt16, deadline: UInt64) throws(SluiceError) -> BlockingSocket {
        let name = Socket.displayName(host: host, port: port)
        var lastError = SluiceError(.unknownHost(host), operation: "connect", subject: name)
        for address in try Socket.resolve(host: host, port: port) {
            let fd = try Socket.makeSocket(for: address)
            switch Result(catching: { () throws(SluiceError) in try connect(fd, to: address, deadline: deadline) }) {
            case .success:
                try? Socket.setOption(fd, Int32(IPPROTO_TCP), TCP_NODELAY, 1, name)
                return try BlockingSocket(adopting: fd, name: name)
            case .failure(let error):
                closeDescriptor(fd)
                lastError = SluiceError(error.code, operation: "connect", subject: name, detail: error.detail)
                if error.code == .timedOut { throw lastError }
            }
        }
        throw lastError
    }

    /// Connects to all of `addresses` at once and returns as soon as some have connected (or
    /// `deadline` passes, or every attempt failed): those connected, in the order they did.
    /// The attempts still going are given up: an address that never answers (its packets
    /// dropped, or the ICMP error that would refuse it rate-limited) costs nothing once another
    /// has answered.
    package static func connectAll(_ addresses: [SocketAddress], deadline: UInt64) -> [BlockingSocket] {
        var pending: [(fd: Int32, address: SocketAddress)] = []
        var connected: [BlockingSocket] = []
        for address in addresses {
            guard let fd = try? Socket.makeSocket(for: address) else { continue }
            let started =
                (try? address.withSockAddr { sa, length throws(SluiceError) -> Int32 in
                    retryingOnInterrupt { Glibc.connect(fd, sa, length) } == 0 ? 0 : errno
                }) ?? EINVAL
            if started == 0, let socket = try? BlockingSocket(adopting: fd, name: address.description) {
                connected.append(socket)
            } else if started == EINPROGRESS {
                pending.append((fd, address))
            } else {
                closeDescriptor(fd)
            }
        }
        while !pending.isEmpty && connected.isEmpty {
            let now = monotonicNanoseconds()
            guard now < deadline else { break }
            var fds = pending.map { pollfd(fd: $0.fd, events: Int16(POLLOUT), revents: 0) }
            let milliseconds = Int32(clamping: (deadline - now + 999_999) / 1_000_000)
            guard retryingOnInterrupt({ poll(&fds, nfds_t(fds.count), milliseconds) }) >= 0 else { break }
            var still: [(fd: Int32, address: SocketAddress)] = []
            for (index, entry) in pending.enumerated() {
                guard fds[index].revents != 0 else {
                    still.append(entry)
                    continue
                }
                let err = (try? Socket.option(entry.fd, SOL_SOCKET, SO_ERROR, entry.address.description)) ?? EIO
                if err == 0, let socket = try? BlockingSocket(adopting: entry.fd, name: entry.address.description) {
                    try? Socket.setOption(entry.fd, Int32(IPPROTO_TCP), TCP_NODELAY, 1, socket.name)
                    connected.append(socket)
                } else if err != 0 {
                    closeDescriptor(entry.fd)
                }
            }
            pending = still
        }
        for entry in pending { closeDescriptor(entry.fd) }
        return connected
    }

    private static func connect(_ fd: Int32, to address: SocketAddress, deadline: UInt64) throws(SluiceError) {
        let started = try address.withSockAddr { sa, length throws(SluiceError) -> Int32 in
            retryingOnInterrupt { Glibc.connect(fd, sa, length) } == 0 ? 0 : errno
        }
        if started == 0 { return }
        guard started == EINPROGRESS else {
            throw SluiceError(.system(Errno(rawValue: started)), operation: "connect", subject: address.description)
        }
        try wait(fd, for: Int16(POLLOUT), until: deadline, operation: "connect")
        let err = try Socket.option(fd, SOL_SOCKET, SO_ERROR, address.description)
        guard err == 0 else {
            throw SluiceError(.system(Errno(rawValue: err)), operation: "connect", subject: address.description)
        }
    }

    /// Writes all of `bytes` before `deadline`.
    package func write(_ bytes: [UInt8], deadline: UInt64) throws(SluiceError) {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { raw in
                retryingOnInterrupt { send(fd, raw.baseAddress! + done, raw.count - done, Int32(MSG_NOSIGNAL)) }
            }
            if n > 0 {
                done += n
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                try Self.wait(fd, for: Int16(POLLOUT), until: deadline, operation: "send", subject: name)
            } else {
                throw SluiceError(.system(.current), operation: "send", subject: name)
            }
        }
    }

    /// Reads exactly `count` bytes before `deadline`; `.truncatedData` when the peer ends first.
    package func read(exactly count: Int, deadline: UInt64) throws(SluiceError) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let n = out.withUnsafeMutableBytes { raw in
                retryingOnInterrupt { recv(fd, raw.baseAddress! + done, raw.count - done, 0) }
            }
            if n > 0 {
                done += n
            } else if n == 0 {
                throw SluiceError(
                    .truncatedData, operation: "recv", subject: name, detail: "the peer closed the connection")
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                try Self.wait(fd, for: Int16(POLLIN), until: deadline, operation: "recv", subject: name)
            } else {
                throw SluiceError(.system(.current), operation: "recv", subject: name)
            }
        }
        return out
    }

    /// Reads one line (up to and without its `\n`), never a byte past it: what follows belongs
    /// to whoever reads next. `.protocolViolation` when `limit` bytes pass without a newline.
    package func readLine(limit: Int, deadline: UInt64) throws(SluiceError) -> [UInt8] {
        var line: [UInt8] = []
        while true {
            let byte = try read(exactly: 1, deadline: deadline)[0]
            if byte == UInt8(ascii: "\n") { return line }
            line.append(byte)
            guard line.count < limit else {
                throw SluiceError(.protocolViolation, operation: "recv", subject: name, detail: "a line too long")
            }
        }
    }

    /// The descriptor, to wait on (`BlockingSocket.readable`); still this socket's.
    package var descriptor: Int32 { fd }

    /// The descriptor, for a stream pair to own: this socket no longer closes it.
    package func takeDescriptor() -> Int32 {
        let taken = fd
        fd = -1
        return taken
    }

    /// Waits until `fd` is ready for `events` (or has an error or hang-up, which the next call
    /// reports) or `deadline` passes.
    private static func wait(
        _ fd: Int32, for events: Int16, until deadline: UInt64, operation: String, subject: String? = nil
    ) throws(SluiceError) {
        let now = monotonicNanoseconds()
        guard now < deadline else { throw SluiceError(.timedOut, operation: operation, subject: subject) }
        let milliseconds = Int32(clamping: (deadline - now + 999_999) / 1_000_000)
        _ = try pollDescriptor(fd, events: events, timeoutMilliseconds: milliseconds)
    }
}

extension BlockingSocket {
    /// Which of `descriptors` can be read (or have ended) before `deadline`: all false when it
    /// passed first.
    package static func readable(_ descriptors: [Int32], deadline: UInt64) throws(SluiceError) -> [Bool] {
        var fds = descriptors.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        let now = monotonicNanoseconds()
        guard now < deadline else { return descriptors.map { _ in false } }
        let milliseconds = Int32(clamping: (deadline - now + 999_999) / 1_000_000)
        _ = try syscallValue("poll") { poll(&fds, nfds_t(fds.count), milliseconds) }
        return fds.map { $0.revents != 0 }
    }
}

/// A TCP listener on every interface (IPv6 and IPv4 where the host has both) on a free port,
/// accepting one connection at a time for `BlockingSocket` exchanges: the sender's door for
/// a receiver that can reach it directly.
package final class BlockingListener {
    private let fd: Int32
    /// The port the kernel chose.
    package let port: UInt16

    package init() throws(SluiceError) {
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        var fd = Glibc.socket(AF_INET6, type, 0)
        if fd >= 0 {
            var off: Int32 = 0
            _ = setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &off, socklen_t(MemoryLayout<Int32>.size))
            var any = sockaddr_in6()
            any.sin6_family = sa_family_t(AF_INET6)
            let bound = withUnsafePointer(to: &any) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size))
                }
            }
            if bound != 0 {
                closeDescriptor(fd)
                fd = -1
            }
        }
        if fd < 0 {
            fd = try syscallValue("socket", "direct listener") { Glibc.socket(AF_INET, type, 0) }
            var any = sockaddr_in()
            any.sin_family = sa_family_t(AF_INET)
            let listening = fd
            let bound = withUnsafePointer(to: &any) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(listening, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard bound == 0 else {
                let error = SluiceError(.system(.current), operation: "bind", subject: "direct listener")
                closeDescriptor(fd)
                throw error
            }
        }
        self.fd = fd
        do {
            let listening = fd
            try syscallValue("listen", "direct listener") { Glibc.listen(listening, 16) }
            port = try SocketAddress.local(of: fd).port ?? 0
        } catch {
            closeDescriptor(fd)
            throw error
        }
    }

    deinit { closeDescriptor(fd) }

    /// The descriptor, to wait on (`BlockingSocket.readable`).
    package var descriptor: Int32 { fd }

    /// A pending connection, or nil when none is.
    package func accept() -> BlockingSocket? {
        let flags = Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        let accepted = retryingOnInterrupt { accept4(fd, nil, nil, flags) }
        guard accepted >= 0 else { return nil }
        let name = (try? SocketAddress.peer(of: accepted))?.description ?? "a peer"
        return try? BlockingSocket(adopting: accepted, name: name)
    }
}

extension Socket {
    /// The two streams of a socket the caller connected (or accepted) itself, as
    /// `CFStreamCreatePairWithSocket` makes them: the pair owns `fd` from now on (made
    /// non-blocking; closed when both streams are) and behaves as one from
    /// `connect(host:port:timeout:)` once connected.
    public static func streams(adopting fd: Int32) throws(SluiceError) -> (ReadStream, WriteStream) {
        _ = try setNonBlocking(fd, true)
        let peer = try SocketAddress.peer(of: fd)
        return makePair(SocketCore(acceptedFD: fd, peer: peer), name: peer.description)
    }
}
