import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A TCP relay on 127.0.0.1 (port 0) to `target`: it accepts one connection, forwards bytes both
/// ways, and once `cutAfter` bytes have gone from the client to the target (or, with
/// `towardClient`, from the target to the client), closes both connections at once — a network
/// failure in the middle of a transfer: each end sees its connection end with no TLS
/// close_notify (nor anything else) from the other. With `stall`, it stops forwarding there
/// instead and leaves both connections open until `release()`: a path that died without
/// either end being told, as in a network outage.
final class CutRelay: @unchecked Sendable {
    /// The port the relay listens on.
    let port: UInt16
    private let listener: Int32
    private let lock = NSLock()
    private var forwarded = 0
    private var cut = false
    private let finished = DispatchSemaphore(value: 0)
    private let released = DispatchSemaphore(value: 0)
    private let towardClient: Bool
    private let stall: Bool

    init(to targetPort: UInt16, cutAfter: Int, towardClient: Bool = false, stall: Bool = false) throws {
        self.towardClient = towardClient
        self.stall = stall
        (listener, port) = try listeningLoopbackSocket()
        Thread.detachNewThread { [self] in
            defer { finished.signal() }
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return }
            guard let server = connectToLoopback(port: targetPort) else {
                close(client)
                return
            }
            relay(client, server, cutAfter: cutAfter)
        }
    }

    deinit { close(listener) }

    /// Ends a stall: the relay closes both connections.
    func release() { released.signal() }

    /// Bytes forwarded in the direction watched (from the client to the target by default).
    var bytesForwarded: Int { lock.withLock { forwarded } }

    /// Whether the relay cut the connections (rather than seeing one end close).
    var didCut: Bool { lock.withLock { cut } }

    /// Waits (at most `seconds`) until the relay has closed both connections.
    func waitUntilDone(seconds: Double = 30) -> Bool {
        finished.wait(timeout: .now() + seconds) == .success
    }

    /// Forwards both ways with `poll` until either end closes or `cutAfter` bytes went to the
    /// server; then closes both sockets, without a shutdown, so what each peer sees is an end
    /// of the connection in the middle of its stream.
    private func relay(_ client: Int32, _ server: Int32, cutAfter: Int) {
        defer {
            close(client)
            close(server)
        }
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        var fds = [
            pollfd(fd: client, events: Int16(POLLIN), revents: 0),
            pollfd(fd: server, events: Int16(POLLIN), revents: 0),
        ]
        while true {
            guard poll(&fds, 2, 30_000) > 0 else { return }
            for index in 0..<2 where fds[index].revents != 0 {
                let from = fds[index].fd
                let to = index == 0 ? server : client
                let watched = index == (towardClient ? 1 : 0)
                // Up to the cut exactly: the bytes past it never reach the other end.
                let room = watched ? cutAfter - bytesForwarded : buffer.count
                let n = buffer.withUnsafeMutableBytes { recv(from, $0.baseAddress, min($0.count, room), 0) }
                if n <= 0 { return }
                var sent = 0
                while sent < n {
                    let m = buffer.withUnsafeBytes { send(to, $0.baseAddress! + sent, n - sent, Int32(MSG_NOSIGNAL)) }
                    if m <= 0 { return }
                    sent += m
                }
                guard watched else { continue }
                let reached = lock.withLock {
                    forwarded += n
                    cut = forwarded >= cutAfter
                    return cut
                }
                if reached {
                    // Stalled: nothing more is read or forwarded either way, and neither end
                    // hears of it, until the test lets go (or a minute passes).
                    if stall { _ = released.wait(timeout: .now() + 60) }
                    return
                }
            }
        }
    }
}

/// A TCP socket listening on a free port of 127.0.0.1 (a backlog of one), and the port.
func listeningLoopbackSocket() throws -> (Int32, UInt16) {
    let (fd, port) = try boundLoopbackSocket()
    guard listen(fd, 1) == 0 else {
        close(fd)
        throw POSIXError(.EADDRINUSE)
    }
    return (fd, port)
}
