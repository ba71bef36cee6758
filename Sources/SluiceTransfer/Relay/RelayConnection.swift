import CSluiceLinux

#if canImport(Glibc)
    import Glibc
#endif

/// One client connection of the relay: its socket, where it is in the protocol, and what the
/// loop watches it for. Small while it waits (a few hundred bytes and one timer), since a relay
/// holds thousands of waiting connections.
final class RelayConnection {
    /// Where the connection is in the protocol.
    enum Phase {
        /// Before a complete hello: what arrived so far (at most `RelayHello.maximumLength`).
        case hello([UInt8])
        /// Waiting on a nameplate or stream token for its peer.
        case waiting(RelayRendezvous.Key)
        /// Paired: `pair.ends[side]` is this connection.
        case paired(RelayPair, side: Int)
        case closed
    }

    /// The server's number for it.
    let id: UInt64
    let fd: Int32
    /// The peer's address as the relay sees it (`203.0.113.5:40112`).
    let peer: String
    /// Who the peer is for the caps (`SocketAddress.capSource`: its IPv4 address, or its IPv6
    /// /64): what `--max-per-address` and `--max-nameplates-per-address` count.
    let host: String
    var phase: Phase = .hello([])
    /// The hello timeout, until a complete hello.
    var helloTimer: LoopTimer?
    /// What the loop watches the socket for now (empty: not watched).
    private(set) var interest: Interest = []
    /// Whether the socket is registered with the loop (it may be, with no interest, until a
    /// hang-up shows that it must not be).
    private var registered = false
    private unowned let loop: EventLoop
    private let ready: (RelayConnection, Readiness) -> Void

    /// A connection just accepted: `fd` (non-blocking), the peer as seen, and what to call with
    /// each readiness the loop reports for it.
    init(
        id: UInt64, fd: Int32, peer: String, host: String, loop: EventLoop,
        ready: @escaping (RelayConnection, Readiness) -> Void
    ) {
        self.id = id
        self.fd = fd
        self.peer = peer
        self.host = host
        self.loop = loop
        self.ready = ready
    }

    /// Watches the socket for `wanted` (registering it, or changing its interest). False when
    /// the loop refused it (out of memory): the caller closes the connection.
    func want(_ wanted: Interest) -> Bool {
        if registered {
            loop.setInterest(fd: fd, wanted)
        } else if !wanted.isEmpty {
            let registration = Result { () throws(SluiceError) in
                try loop.watch(fd: fd, interest: wanted) { [weak self] readiness in
                    guard let self else { return }
                    self.ready(self, readiness)
                }
            }
            guard case .success = registration else { return false }
            registered = true
        }
        interest = wanted
        return true
    }

    /// Takes the socket off the loop (nothing is asked of it for now).
    func stopWatching() {
        guard registered else { return }
        loop.unwatch(fd: fd)
        registered = false
        interest = []
    }

    /// Takes the socket off the loop and closes it. Idempotent.
    func close() {
        if case .closed = phase { return }
        phase = .closed
        helloTimer?.cancel()
        helloTimer = nil
        stopWatching()
        closeDescriptor(fd)
    }

    /// Sends a short line (a reply of the protocol) without blocking: true when all of it went.
    /// The send buffer of a connection that has been sent a line or two at most always has
    /// room, so a short write means a connection already gone.
    func send(_ line: String) -> Bool {
        var bytes = Array(line.utf8)
        let count = bytes.count
        let sent = bytes.withUnsafeMutableBytes { buffer in
            retryingOnInterrupt { Glibc.send(fd, buffer.baseAddress, count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
        }
        return sent == count
    }

    /// What a non-blocking read found.
    enum Received {
        case bytes([UInt8])
        case end
        case nothing
        case failed
    }

    /// Reads what is there (at most `limit` bytes) without blocking.
    func receive(upTo limit: Int) -> Received {
        guard limit > 0 else { return .nothing }
        var buffer = [UInt8](repeating: 0, count: limit)
        let n = buffer.withUnsafeMutableBytes { raw in
            retryingOnInterrupt { Glibc.recv(fd, raw.baseAddress, limit, Int32(MSG_DONTWAIT)) }
        }
        if n > 0 { return .bytes(Array(buffer.prefix(n))) }
        if n == 0 { return .end }
        return errno == EAGAIN || errno == EWOULDBLOCK ? .nothing : .failed
    }

    /// Answers a connection the relay will not serve (`ERR ...`) and closes it: the line, the
    /// end of stream, and what the peer had sent read and dropped first, so that closing sends
    /// a FIN and not a reset that could overtake the line.
    static func refuse(fd: Int32, with line: String) {
        var bytes = Array(line.utf8)
        let count = bytes.count
        _ = bytes.withUnsafeMutableBytes { buffer in
            retryingOnInterrupt { Glibc.send(fd, buffer.baseAddress, count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
        }
        _ = Glibc.shutdown(fd, Int32(SHUT_WR))
        var sink = [UInt8](repeating: 0, count: 512)
        for _ in 0..<4 {
            let n = sink.withUnsafeMutableBytes { raw in
                retryingOnInterrupt { Glibc.recv(fd, raw.baseAddress, raw.count, Int32(MSG_DONTWAIT)) }
            }
            if n <= 0 { break }
        }
        closeDescriptor(fd)
    }
}
