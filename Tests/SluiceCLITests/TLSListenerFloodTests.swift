import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Whether the peer of `fd` has closed it (or reset it): it polls readable with nothing to
/// wait for. A listener never sends a byte to a client that has not begun its handshake, so
/// for a silent connection readable means closed.
func closedByPeer(_ fd: Int32) -> Bool {
    var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
    return poll(&entry, 1, 0) == 1 && entry.revents & Int16(POLLIN | POLLHUP | POLLERR) != 0
}

/// A relay that hands a connection already made to whoever connects to it: it listens on
/// 127.0.0.1 (port 0), accepts one client, and forwards bytes both ways between it and
/// `upstream`; a direction ends with a shutdown of its destination once its source ends, and
/// both sockets are closed when both directions have ended. So a test can open a connection
/// from an address of its choosing, hold it while something happens, and then let a real
/// client speak through it.
final class HeldConnectionRelay: @unchecked Sendable {
    let port: UInt16
    private let listener: Int32
    private let finished = DispatchSemaphore(value: 0)

    /// Takes over `upstream` (it closes it).
    init(upstream: Int32) throws {
        (listener, port) = try listeningLoopbackSocket()
        let listener = self.listener
        Thread.detachNewThread { [finished] in
            defer {
                close(upstream)
                finished.signal()
            }
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return }
            defer { close(client) }
            Self.forward(between: client, and: upstream)
        }
    }

    deinit { close(listener) }

    /// Waits (at most `seconds`) until the relay has closed both connections.
    func waitUntilDone(seconds: Double = 30) -> Bool {
        finished.wait(timeout: .now() + seconds) == .success
    }

    private static func forward(between a: Int32, and b: Int32) {
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        var fds = [pollfd(fd: a, events: Int16(POLLIN), revents: 0), pollfd(fd: b, events: Int16(POLLIN), revents: 0)]
        var open = [true, true]
        while open.contains(true) {
            for index in 0..<2 { fds[index].fd = open[index] ? (index == 0 ? a : b) : -1 }
            guard poll(&fds, 2, 30_000) > 0 else { return }
            for index in 0..<2 where open[index] && fds[index].revents != 0 {
                let to = index == 0 ? b : a
                let n = buffer.withUnsafeMutableBytes { recv(fds[index].fd, $0.baseAddress, $0.count, 0) }
                if n <= 0 {
                    shutdown(to, Int32(SHUT_WR))
                    open[index] = false
                    continue
                }
                var sent = 0
                while sent < n {
                    let m = buffer.withUnsafeBytes { send(to, $0.baseAddress! + sent, n - sent, Int32(MSG_NOSIGNAL)) }
                    if m <= 0 { return }
                    sent += m
                }
            }
        }
    }
}

/// A `tls-listen:` copy admits as `receive` does: connections waiting for their handshake are
/// capped per address, and a flood from one address pushes out only its own, so a client from
/// another address that connected before it still completes its handshake and its copy.
@Suite(.ownThreads) struct TLSListenerFloodTests {
    @Test func aFloodFromOneAddressDoesNotKeepAClientFromAnotherFromItsHandshake() throws {
        #expect(testDescriptorsRaised)
        try withTemporaryDirectory { dir in
            #expect(try sluice("keygen", "\(dir)/key").status == 0)
            let data = randomBytes(300_000, seed: 161)
            try write(data, to: "\(dir)/in")
            let (listener, port) = try TLSListenerAuthTests.listener {
                ["copy", $0 + ",key-file=\(dir)/key", "\(dir)/out"]
            }
            // The client's connection, from 127.0.0.3: accepted, and waiting for its handshake
            // while the flood comes; and four connections of another host, 127.0.0.4.
            let early = try #require(connect(from: "127.0.0.3", toLoopbackPort: port))
            var relay: HeldConnectionRelay?
            defer { if relay == nil { close(early) } }
            let others = (0..<4).compactMap { _ in connect(from: "127.0.0.4", toLoopbackPort: port) }
            #expect(others.count == 4)
            // The flood, from 127.0.0.2: 48 connections, 8 of them stopped inside a ClientHello
            // (a record announcing 512 bytes, 16 of them sent), the others silent.
            let header: [UInt8] = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]
            let partialHello = header + [UInt8](repeating: 7, count: 5)
            var flood: [Int32] = []
            defer { for fd in others + flood { close(fd) } }
            for index in 0..<48 {
                guard let fd = connect(from: "127.0.0.2", toLoopbackPort: port) else { continue }
                flood.append(fd)
                if index % 6 == 0 {
                    _ = partialHello.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                }
            }
            #expect(flood.count == 48)
            // The per-address cap: 8 wait, and a burst younger than the grace up to 16; the
            // rest are closed (refused at once, or pushed out by newer ones of their address),
            // well before the handshake timeout (10 s) would close them all.
            let capped = waitUntil(.seconds(8)) { flood.filter(closedByPeer).count >= 48 - 16 }
            #expect(capped, "\(flood.filter(closedByPeer).count) of the flood closed")
            // Nothing of the other addresses was pushed out.
            #expect(!closedByPeer(early), "the flood pushed out the client's connection")
            #expect(others.allSatisfy { !closedByPeer($0) }, "the flood pushed out another host's connections")
            #expect(listener.process.isRunning)
            // The client speaks now, through its early connection, and is served.
            let through = try HeldConnectionRelay(upstream: early)
            relay = through
            let client = try sluice(["copy", "\(dir)/in", "tls:127.0.0.1:\(through.port),key-file=\(dir)/key"])
            #expect(client.status == 0, "\(client.stderrText)")
            let ended = listener.wait()
            #expect(ended.status == 0, "\(ended.stderr)")
            #expect(contents("\(dir)/out") == data)
            #expect(through.waitUntilDone())
        }
    }
}
