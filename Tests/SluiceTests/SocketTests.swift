import Foundation
import TestThreads
import Testing

@testable import Sluice

#if canImport(Glibc)
    import Glibc
#endif

// MARK: Helpers

/// The client side of a request/response: writes `payload` on `hasSpaceAvailable`, closes the
/// write stream after the last byte (half-close), and reads the reply to the end.
final class SocketExchange: ByteStreamDelegate {
    let input: ReadStream
    let output: WriteStream
    let payload: [UInt8]
    private var sent = 0
    private(set) var received: [UInt8] = []
    private(set) var events: [ObjectIdentifier: [StreamEvent]] = [:]
    private(set) var done = false
    var failure: SluiceError?
    var onDone: (() -> Void)?

    init(_ pair: (ReadStream, WriteStream), payload: [UInt8]) {
        (input, output) = pair
        self.payload = payload
    }

    func start(on loop: EventLoop) {
        input.delegate = self
        output.delegate = self
        input.schedule(on: loop)
        output.schedule(on: loop)
        input.open()
        output.open()
    }

    func events(of stream: ByteStream) -> [StreamEvent] { events[ObjectIdentifier(stream), default: []] }

    func stream(_ stream: ByteStream, handle event: StreamEvent) {
        events[ObjectIdentifier(stream), default: []].append(event)
        switch event {
        case .hasSpaceAvailable:
            let n = payload.withUnsafeBytes { output.write(from: UnsafeRawBufferPointer(rebasing: $0[sent...])) }
            if n > 0 { sent += n }
            if sent == payload.count { output.close() }
        case .hasBytesAvailable:
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n = chunk.withUnsafeMutableBytes { input.read(into: $0) }
            if n > 0 { received.append(contentsOf: chunk[0..<n]) }
        case .endEncountered:
            input.close()
            finish()
        case .errorOccurred:
            failure = stream.streamError
            input.close()
            output.close()
            finish()
        default:
            break
        }
    }

    private func finish() {
        guard !done else { return }
        done = true
        onDone?()
    }
}

/// An echo server on `listener`: every accepted connection is pumped back to itself.
final class EchoServer {
    let listener: SocketListener
    private(set) var sessions: [LoopCopier] = []
    private(set) var peers: [SocketAddress] = []

    init(_ listener: SocketListener, on loop: EventLoop) throws {
        self.listener = listener
        try listener.accept(on: loop) { [unowned self] input, output, peer in
            let pump = LoopCopier(source: input, sink: output)
            self.sessions.append(pump)
            self.peers.append(peer)
            pump.start(on: loop)
        }
    }

    var failures: [SluiceError] { sessions.compactMap(\.failure) }
}

/// A loopback port nobody listens on right now: bound with port 0, then released.
func freeLoopbackPort() throws -> UInt16 {
    let listener = try Socket.listen(host: "127.0.0.1", port: 0)
    defer { listener.close() }
    return listener.port
}

/// Runs `loop` until `done()` or `limit`; returns whether `done()` came true.
@discardableResult
func runLoop(_ loop: EventLoop, for limit: Duration = .seconds(10), until done: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now.advanced(by: limit)
    while !done() && ContinuousClock.now < deadline {
        loop.run(for: .milliseconds(50))
    }
    return done()
}

/// A short path for a Unix socket (sun_path holds 107 bytes).
func withUnixSocketDirectory<T>(_ body: (String) throws -> T) throws -> T {
    let dir = "/tmp/sluice-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: dir) }
    return try body(dir)
}

// MARK: Connect pairs

@Suite(.serialized, .ownThreads) struct SocketTests {
    @Test func echoRoundTrip() throws {
        let loop = try EventLoop()
        let server = try EchoServer(Socket.listen(host: "127.0.0.1", port: 0), on: loop)
        defer { server.listener.close() }
        let payload = randomBytes(300_000, seed: 1)
        let client = SocketExchange(Socket.connect(host: "127.0.0.1", port: server.listener.port), payload: payload)
        client.start(on: loop)
        #expect(client.input.streamStatus == .opening)
        #expect(runLoop(loop) { client.done })
        #expect(client.failure == nil)
        #expect(client.received == payload)
        #expect(client.events(of: client.input).first == .openCompleted)
        #expect(client.events(of: client.output).first == .openCompleted)
        #expect(client.events(of: client.input).last == .endEncountered)
        #expect(server.failures.isEmpty)
        #expect(server.peers.first?.host == "127.0.0.1")
    }

    @Test func localhostResolvesAndTriesEachAddress() throws {
        let loop = try EventLoop()
        let server = try EchoServer(Socket.listen(host: "127.0.0.1", port: 0), on: loop)
        defer { server.listener.close() }
        // The first address refuses; the second accepts.
        let refused = SocketAddress(numericHost: "127.0.0.1", port: try freeLoopbackPort())!
        let good = SocketAddress(numericHost: "127.0.0.1", port: server.listener.port)!
        let first = SocketExchange(Socket.connect(to: [refused, good]), payload: Array("first".utf8))
        let second = SocketExchange(
            Socket.connect(host: "localhost", port: server.listener.port), payload: Array("second".utf8))
        first.start(on: loop)
        second.start(on: loop)
        #expect(runLoop(loop) { first.done && second.done })
        #expect(first.failure == nil && second.failure == nil)
        #expect(first.received == Array("first".utf8))
        #expect(second.received == Array("second".utf8))
        #expect(first.input.property(forKey: .socketPeerAddress) as? SocketAddress == good)
    }

    @Test func halfCloseRequestResponse() throws {
        let loop = try EventLoop()
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        var serverSawEnd = false
        var serverInput: ReadStream?
        var serverOutput: WriteStream?
        var request: [UInt8] = []
        try listener.accept(on: loop) { input, output, _ in
            serverInput = input
            serverOutput = output
            input.eventHandler = { _, event in
                if event == .hasBytesAvailable {
                    var chunk = [UInt8](repeating: 0, count: 4096)
                    let n = chunk.withUnsafeMutableBytes { input.read(into: $0) }
                    if n > 0 { request.append(contentsOf: chunk[0..<n]) }
                } else if event == .endEncountered {
                    // The request is complete only because the client half-closed.
                    serverSawEnd = true
                    output.open()
                }
            }
            output.eventHandler = { _, event in
                if event == .hasSpaceAvailable {
                    output.write(all: Array("got \(request.count) bytes".utf8))
                    output.close()
                    input.close()
                }
            }
            input.schedule(on: loop)
            output.schedule(on: loop)
            input.open()
        }
        let request0 = Array("GET /index HTTP/1.0\r\n\r\n".utf8)
        let client = SocketExchange(Socket.connect(host: "127.0.0.1", port: listener.port), payload: request0)
        client.start(on: loop)
        #expect(runLoop(loop) { client.done })
        #expect(serverSawEnd)
        #expect(request == request0)
        #expect(client.failure == nil)
        #expect(String(decoding: client.received, as: UTF8.self) == "got \(request0.count) bytes")
        #expect(client.output.streamStatus == .closed)
        #expect(serverInput?.streamStatus == .closed && serverOutput?.streamStatus == .closed)
    }

    @Test func refusedConnectNamesTheAddress() throws {
        let port = try freeLoopbackPort()
        let loop = try EventLoop()
        let client = SocketExchange(Socket.connect(host: "127.0.0.1", port: port), payload: [1])
        client.start(on: loop)
        #expect(runLoop(loop) { client.done })
        let error = try #require(client.failure)
        #expect(error.errno == .connectionRefused)
        #expect(error.description == "connect 127.0.0.1:\(port): Connection refused (errno 111)")
        // Both streams fail; the delegate closed the output in answer to the input's event.
        #expect(client.events(of: client.input) == [.errorOccurred])
        #expect(client.output.streamError == error)

        // Polling mode: open() blocks and fails the same way.
        let (input, _) = Socket.connect(host: "127.0.0.1", port: port)
        input.open()
        #expect(input.streamStatus == .error)
        #expect(input.streamError?.errno == .connectionRefused)
    }

    @Test func unknownHost() throws {
        let loop = try EventLoop()
        let client = SocketExchange(Socket.connect(host: "no-such-host.invalid", port: 80), payload: [1])
        client.start(on: loop)
        #expect(runLoop(loop) { client.done })
        let error = try #require(client.failure)
        guard case .unknownHost = error.code else {
            Issue.record("expected unknownHost, got \(error)")
            return
        }
        #expect(error.description.hasPrefix("resolve no-such-host.invalid: unknown host"))
        #expect(client.output.streamError?.code == error.code)
    }

    @Test func connectTimeout() throws {
        // A listener with backlog 0 that never accepts: one connection fills its queue, and
        // the kernel then drops further SYNs, so a connect stays in progress.
        let listener = try Socket.listen(host: "127.0.0.1", port: 0, backlog: 0)
        defer { listener.close() }
        var fillers: [(ReadStream, WriteStream)] = []
        defer { for (r, w) in fillers { r.close(); w.close() } }
        // Connect until one is left in progress: a filler that times out (in polling mode, open()
        // gives up after its own timeout) shows the queue is full and SYNs are now dropped.
        for _ in 0..<4 {
            let pair = Socket.connect(host: "127.0.0.1", port: listener.port, timeout: .milliseconds(300))
            pair.1.open()
            fillers.append(pair)
            if pair.1.streamError?.code == .timedOut { break }
        }
        try #require(
            fillers.last?.1.streamError?.code == .timedOut,
            "the kernel completed every connect to a listener that never accepts")
        let loop = try EventLoop()
        let client = SocketExchange(
            Socket.connect(host: "127.0.0.1", port: listener.port, timeout: .milliseconds(200)), payload: [1])
        let started = ContinuousClock.now
        client.start(on: loop)
        #expect(runLoop(loop) { client.done })
        let elapsed = ContinuousClock.now - started
        let error = try #require(client.failure)
        #expect(error.code == .timedOut)
        #expect(error.description == "connect 127.0.0.1:\(listener.port): timed out")
        // Not before its time (a loaded machine can only make it later; runLoop bounds that).
        #expect(elapsed >= .milliseconds(190))
    }

    @Test func sixtyFourConcurrentClients() throws {
        let loop = try EventLoop()
        let server = try EchoServer(Socket.listen(host: "127.0.0.1", port: 0), on: loop)
        defer { server.listener.close() }
        var clients: [SocketExchange] = []
        for i in 0..<64 {
            let client = SocketExchange(
                Socket.connect(host: "127.0.0.1", port: server.listener.port),
                payload: randomBytes(1 << 20, seed: UInt64(i + 1) &* 0x9E37_79B9))
            client.start(on: loop)
            clients.append(client)
        }
        #expect(runLoop(loop, for: .seconds(20)) { clients.allSatisfy(\.done) })
        #expect(server.sessions.count == 64)
        #expect(server.failures.isEmpty)
        for (i, client) in clients.enumerated() {
            #expect(client.failure == nil, "client \(i)")
            #expect(client.received == client.payload, "client \(i)")
        }
    }

    /// Whether this machine has an IPv6 loopback to listen on (containers often have none).
    static let hasIPv6Loopback: Bool = {
        guard let listener = try? Socket.listen(host: "::1", port: 0) else { return false }
        listener.close()
        return true
    }()

    @Test(.enabled(if: SocketTests.hasIPv6Loopback, "this machine has no IPv6 loopback (::1) to listen on"))
    func ipv6Loopback() throws {
        let listener = try Socket.listen(host: "::1", port: 0)
        let loop = try EventLoop()
        let server = try EchoServer(listener, on: loop)
        defer { listener.close() }
        #expect(listener.address.description == "[::1]:\(listener.port)")
        let payload = randomBytes(100_000, seed: 6)
        let client = SocketExchange(Socket.connect(host: "::1", port: listener.port), payload: payload)
        client.start(on: loop)
        #expect(client.input.name == "[::1]:\(listener.port)")
        #expect(runLoop(loop) { client.done })
        #expect(client.failure == nil)
        #expect(client.received == payload)
        #expect(server.peers.first?.family == .ipv6)
        let bracketed = Socket.connect(host: "[::1]", port: listener.port)
        bracketed.1.open()
        #expect(bracketed.1.streamStatus == .open)
        bracketed.1.close()
    }

    @Test func listenOnEveryInterface() throws {
        let loop = try EventLoop()
        let server = try EchoServer(Socket.listen(port: 0), on: loop)
        defer { server.listener.close() }
        #expect(server.listener.port != 0)
        let client = SocketExchange(Socket.connect(host: "127.0.0.1", port: server.listener.port), payload: [1, 2, 3])
        client.start(on: loop)
        #expect(runLoop(loop) { client.done })
        #expect(client.received == [1, 2, 3])
    }

    @Test func pollingModeConnect() throws {
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let (input, output) = Socket.connect(host: "127.0.0.1", port: listener.port, timeout: .seconds(5))
        input.open()
        output.open()
        #expect(input.streamStatus == .open && output.streamStatus == .open)
        let (serverInput, serverOutput, peer) = try listener.accept(timeout: .seconds(5))
        #expect(peer == input.property(forKey: .socketLocalAddress) as? SocketAddress)
        serverInput.open()
        serverOutput.open()
        #expect(output.write(all: Array("ping".utf8)))
        output.close()
        #expect(try serverInput.readToEnd() == Data("ping".utf8))
        #expect(serverOutput.write(all: Array("pong".utf8)))
        serverOutput.close()
        serverInput.close()
        #expect(try input.readToEnd() == Data("pong".utf8))
        input.close()
        #expect(throws: SluiceError.self) { _ = try listener.accept(timeout: .milliseconds(20)) }
    }

    /// An accepted connection whose streams are dropped, or closed, without ever being opened
    /// (a server turning it away before a word) is closed: the peer reads its end at once
    /// instead of waiting on a socket nobody holds.
    @Test(arguments: [false, true]) func anAcceptedPairNeverOpenedClosesTheConnection(closing: Bool) throws {
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let (input, output) = Socket.connect(host: "127.0.0.1", port: listener.port, timeout: .seconds(5))
        input.open()
        output.open()
        defer {
            input.close()
            output.close()
        }
        do {
            let (serverInput, serverOutput, _) = try listener.accept(timeout: .seconds(5))
            if closing {
                serverInput.close()
                serverOutput.close()
            }
        }
        // The end comes at once (before the fix, never): wait for it with a deadline.
        let fd = try #require(input.property(forKey: .fileDescriptor) as? Int32)
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        try #require(poll(&pfd, 1, 10_000) == 1)
        #expect(try input.readToEnd() == Data())
    }

    /// `TCP_MAXSEG` asked of the peer: by the connecting side before it connects (the
    /// property), and by a listener for what it accepts. Loopback's own segments are 65,483
    /// bytes, so either side's segments at most `socketSegmentSize` show the limit took.
    @Test func segmentSizeAskedOfThePeer() throws {
        let limit = Int(DirectFileWriteStream.socketSegmentSize)
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let (input, output) = Socket.connect(host: "127.0.0.1", port: listener.port)
        #expect(!input.setProperty(40_000, forKey: .socketMaximumSegmentSize))
        #expect(!input.setProperty(10, forKey: .socketMaximumSegmentSize))
        #expect(input.setProperty(limit, forKey: .socketMaximumSegmentSize))
        #expect(input.property(forKey: .socketMaximumSegmentSize) as? Int == limit)
        output.open()
        let (serverInput, serverOutput, _) = try listener.accept(timeout: .seconds(10))
        let streams: [ByteStream] = [input, output, serverInput, serverOutput]
        defer { streams.forEach { $0.close() } }
        serverInput.open()
        let serverSegment = try #require(serverInput.property(forKey: .socketMaximumSegmentSize) as? Int)
        #expect(serverSegment > 0 && serverSegment <= limit, "\(serverSegment)")

        let limited = try Socket.listen(host: "127.0.0.1", port: 0)
        defer { limited.close() }
        try limited.limitSegmentSize(to: DirectFileWriteStream.socketSegmentSize)
        let (clientInput, clientOutput) = Socket.connect(host: "127.0.0.1", port: limited.port)
        clientOutput.open()
        let (acceptedInput, acceptedOutput, _) = try limited.accept(timeout: .seconds(10))
        let limitedStreams: [ByteStream] = [clientInput, clientOutput, acceptedInput, acceptedOutput]
        defer { limitedStreams.forEach { $0.close() } }
        let clientSegment = try #require(clientOutput.property(forKey: .socketMaximumSegmentSize) as? Int)
        #expect(clientSegment > 0 && clientSegment <= limit, "\(clientSegment)")

        try withTemporaryDirectory { dir in
            let unix = try Socket.listen(unixPath: dir + "/s")
            defer { unix.close() }
            #expect(throws: SluiceError.self) { try unix.limitSegmentSize(to: 1000) }
        }
    }

    @Test func socketOptionsAndAddresses() throws {
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let (input, output) = Socket.connect(host: "127.0.0.1", port: listener.port)
        #expect(output.setProperty(true, forKey: .socketNoDelay))
        #expect(output.setProperty(256 * 1024, forKey: .socketReceiveBufferSize))
        #expect(output.property(forKey: .socketNoDelay) as? Bool == true)
        output.open()
        defer {
            input.close()
            output.close()
        }
        #expect(input.property(forKey: .socketNoDelay) as? Bool == true)
        #expect((input.property(forKey: .socketReceiveBufferSize) as? Int ?? 0) >= 256 * 1024)
        #expect(input.setProperty(true, forKey: .socketKeepAlive))
        #expect(output.property(forKey: .socketKeepAlive) as? Bool == true)
        #expect(output.setProperty(false, forKey: .socketNoDelay))
        #expect(output.property(forKey: .socketNoDelay) as? Bool == false)
        #expect(output.setProperty(128 * 1024, forKey: .socketSendBufferSize))
        #expect((output.property(forKey: .socketSendBufferSize) as? Int ?? 0) >= 128 * 1024)
        #expect(!output.setProperty("yes", forKey: .socketNoDelay))
        let peer = try #require(output.property(forKey: .socketPeerAddress) as? SocketAddress)
        #expect(peer.description == "127.0.0.1:\(listener.port)")
        let local = try #require(output.property(forKey: .socketLocalAddress) as? SocketAddress)
        #expect(local.host == "127.0.0.1" && local.port != listener.port)
        #expect(output.property(forKey: .fileDescriptor) as? Int32 != nil)
        #expect(SocketAddress(numericHost: "::1", port: 8080)?.description == "[::1]:8080")
        #expect(SocketAddress(numericHost: "localhost", port: 1) == nil)
        #expect(try SocketAddress(unixPath: "/run/x.sock").description == "/run/x.sock")
        #expect(throws: SluiceError.self) { try SocketAddress(unixPath: String(repeating: "x", count: 200)) }
    }

    /// What a server's caps count: an IPv4 address, mapped or not, as itself; IPv6 by its /64.
    @Test func capSourcesCountAnIPv6NetworkAsOne() throws {
        func source(_ host: String) -> String? { SocketAddress(numericHost: host, port: 9)?.capSource }
        #expect(source("192.0.2.7") == "192.0.2.7")
        #expect(source("::ffff:192.0.2.7") == "192.0.2.7")
        #expect(source("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64")
        #expect(source("2001:db8:1:2:ffff:ffff:ffff:ffff") == source("2001:db8:1:2::9"))
        #expect(source("2001:db8:1:3::9") != source("2001:db8:1:2::9"))
        #expect(try SocketAddress(unixPath: "/run/x.sock").capSource == nil)
    }

    // MARK: Unix-domain sockets

    @Test func unixSocketEchoAndStaleFile() throws {
        try withUnixSocketDirectory { dir in
            let path = dir + "/echo.sock"
            // A stale socket file: bound, never listened on, closed without unlink.
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            let stale = try SocketAddress(unixPath: path)
            try stale.withSockAddr { sa, length in #expect(bind(fd, sa, length) == 0) }
            close(fd)
            #expect(FileManager.default.fileExists(atPath: path))

            let loop = try EventLoop()
            let listener = try Socket.listen(unixPath: path)
            let server = try EchoServer(listener, on: loop)
            // A live listener is not replaced.
            #expect {
                _ = try Socket.listen(unixPath: path)
            } throws: { error in
                (error as? SluiceError)?.errno == .addressInUse
            }
            let payload = randomBytes(500_000, seed: 3)
            let client = SocketExchange(Socket.connect(unixPath: path), payload: payload)
            client.start(on: loop)
            #expect(runLoop(loop) { client.done })
            #expect(client.failure == nil)
            #expect(client.received == payload)
            #expect(server.peers.first?.family == .unix)
            listener.close()
            #expect(!FileManager.default.fileExists(atPath: path))
        }
    }

    @Test func unixListenerRefusesToReplaceARegularFile() throws {
        try withUnixSocketDirectory { dir in
            let path = dir + "/not-a-socket"
            try Data("keep me".utf8).write(to: URL(fileURLWithPath: path))
            do throws(SluiceError) {
                _ = try Socket.listen(unixPath: path)
                Issue.record("listen replaced a regular file")
            } catch {
                #expect(error.errno == .addressInUse)
                #expect(error.description.hasPrefix("bind \"\(path)\": Address already in use"))
            }
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data("keep me".utf8))
            // Connecting to a path where nothing listens names the path.
            let (input, _) = Socket.connect(unixPath: dir + "/nobody.sock")
            input.open()
            #expect(input.streamError?.errno == .noSuchFile)
            #expect(input.streamError?.description.contains(dir + "/nobody.sock") == true)
        }
    }

    // MARK: Failures and backpressure

    @Test func peerResetMidTransfer() throws {
        let loop = try EventLoop()
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        var accepted: [(ReadStream, WriteStream)] = []
        try listener.accept(on: loop) { input, output, _ in
            accepted.append((input, output))
            input.eventHandler = { _, event in
                guard event == .hasBytesAvailable else { return }
                // Read a little, then reset: SO_LINGER 0 makes close send RST.
                var chunk = [UInt8](repeating: 0, count: 1024)
                _ = chunk.withUnsafeMutableBytes { input.read(into: $0) }
                let fd = input.property(forKey: .fileDescriptor) as! Int32
                var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
                input.close()
                output.close()
            }
            input.schedule(on: loop)
            input.open()
            output.open()
        }
        // 64 MiB: far more than the socket buffers hold, so the writer is mid-transfer.
        let client = SocketExchange(
            Socket.connect(host: "127.0.0.1", port: listener.port), payload: randomBytes(64 << 20, seed: 4))
        client.start(on: loop)
        #expect(runLoop(loop) { client.done })
        let error = try #require(client.failure)
        #expect([Errno.connectionReset, .brokenPipe].contains(error.errno ?? .ioError), "\(error)")
        #expect(client.output.streamStatus == .closed || client.output.streamStatus == .error)
    }

    @Test func backpressureReachesTheWire() throws {
        let loop = try EventLoop()
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        var serverInput: ReadStream?
        var readerReady = false
        try listener.accept(on: loop) { input, output, _ in
            serverInput = input
            // Takes the first hasBytesAvailable and does not read: the reader is disarmed.
            input.eventHandler = { _, event in if event == .hasBytesAvailable { readerReady = true } }
            input.schedule(on: loop)
            input.open()
            output.close()
        }
        let (input, output) = Socket.connect(host: "127.0.0.1", port: listener.port)
        defer { input.close() }
        let chunk = [UInt8](repeating: 7, count: 1 << 20)
        var written = 0
        var events = 0
        output.eventHandler = { _, event in
            guard event == .hasSpaceAvailable else { return }
            events += 1
            chunk.withUnsafeBytes { raw in
                if case .processed(let n) = output.tryWrite(from: raw), n > 0 { written += n }
            }
        }
        output.schedule(on: loop)
        output.open()
        // The kernel buffers filled: a state to wait for, not a time (a fixed time to fill them
        // is too short on a loaded machine). The writer's socket is no longer writable and the
        // loop watches it for writability.
        let full = {
            guard let clientFD = output.property(forKey: .fileDescriptor) as? Int32 else { return false }
            var entry = pollfd(fd: clientFD, events: Int16(POLLOUT), revents: 0)
            return poll(&entry, 1, 0) == 0 && loop.interest(fd: clientFD).contains(.write)
        }
        #expect(runLoop(loop, for: .seconds(30)) { readerReady && written > 0 && full() })
        let (eventsThen, writtenThen) = (events, written)
        loop.run(for: .milliseconds(300))
        // The kernel buffers are full: no more space offered, nothing more accepted.
        #expect(events == eventsThen)
        #expect(written == writtenThen)
        #expect(written < 64 << 20)
        // The server reader is not armed, so the loop no longer watches its fd for reading.
        let serverFD = try #require(serverInput?.property(forKey: .fileDescriptor) as? Int32)
        #expect(!loop.interest(fd: serverFD).contains(.read))

        // Draining the server side lets the writer go on.
        var drained = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        serverInput?.eventHandler = { stream, event in
            guard event == .hasBytesAvailable else { return }
            let n = buffer.withUnsafeMutableBytes { (stream as! ReadStream).read(into: $0) }
            if n > 0 { drained += n }
        }
        let before = buffer.withUnsafeMutableBytes { serverInput!.read(into: $0) }
        drained += max(0, before)
        #expect(runLoop(loop, for: .seconds(5)) { written > writtenThen + (4 << 20) })
        output.close()
        serverInput?.close()
        #expect(drained > 0)
    }

    @Test func writerWaitingAfterPeerHalfCloseDoesNotSpin() throws {
        // The client half-closes at once and never reads; the server reads to the end and then
        // writes until the buffers are full. The peer's FIN stays pending on the server's fd:
        // waiting for space must not wake the loop for it at every turn.
        let loop = try EventLoop()
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        var server: [ByteStream] = []
        var written = 0
        let chunk = [UInt8](repeating: 1, count: 1 << 20)
        try listener.accept(on: loop) { input, output, _ in
            server = [input, output]
            input.eventHandler = { _, event in
                if event == .hasBytesAvailable {
                    var buffer = [UInt8](repeating: 0, count: 64)
                    _ = buffer.withUnsafeMutableBytes { input.read(into: $0) }
                } else if event == .endEncountered {
                    output.open()
                }
            }
            output.eventHandler = { _, event in
                guard event == .hasSpaceAvailable else { return }
                chunk.withUnsafeBytes { raw in
                    if case .processed(let n) = output.tryWrite(from: raw), n > 0 { written += n }
                }
            }
            input.schedule(on: loop)
            output.schedule(on: loop)
            input.open()
        }
        let (input, output) = Socket.connect(host: "127.0.0.1", port: listener.port)
        input.open()
        output.open()
        output.close()
        defer {
            input.close()
            for stream in server { stream.close() }
        }
        // The buffers are full: the server's socket is no longer writable, and its writer waits.
        let full = {
            guard server.count == 2, let fd = server[1].property(forKey: .fileDescriptor) as? Int32 else {
                return false
            }
            var entry = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            return poll(&entry, 1, 0) == 0
        }
        #expect(runLoop(loop, for: .seconds(10)) { written > 0 && full() })
        #expect(written > 0)
        // Counted in turns of the loop, not CPU time (which a loaded machine scatters): a loop
        // that waits takes a turn per wake-up — the deadline, and the few times the peer's kernel
        // frees space — while one woken for the pending FIN at every turn takes thousands even
        // on a starved CPU. The window only bounds the count.
        let before = loop.iterations
        loop.run(for: .milliseconds(500))
        let turns = loop.iterations - before
        #expect(turns < 50, "the loop took \(turns) turns in 500 ms while waiting")
    }

    /// The `SocketClient` example as a test: the seed's client against an echo server.
    @Test func seedClientAgainstEchoServer() throws {
        let loop = try EventLoop()
        let server = try EchoServer(Socket.listen(host: "127.0.0.1", port: 0), on: loop)
        defer { server.listener.close() }
        let (inputStream, outputStream) = Socket.connect(host: "127.0.0.1", port: server.listener.port)
        let message = Array("收到啦，服務端！".utf8)
        var reply: [UInt8] = []
        var done = false
        let recorder = EventRecorder { stream, event in
            switch event {
            case .hasSpaceAvailable where stream === outputStream:
                _ = message.withUnsafeBytes { outputStream.write(from: $0) }
                outputStream.close()
            case .hasBytesAvailable where stream === inputStream:
                var buffer = [UInt8](repeating: 0, count: 2048)
                while inputStream.hasBytesAvailable {
                    let len = buffer.withUnsafeMutableBytes { inputStream.read(into: $0) }
                    if len <= 0 { break }
                    reply += buffer[0..<len]
                }
            case .endEncountered, .errorOccurred:
                inputStream.close()
                outputStream.close()
                done = true
            default:
                break
            }
        }
        let outputEvents = EventRecorder()
        inputStream.delegate = recorder
        outputStream.delegate = recorder
        outputStream.eventHandler = { _, event in outputEvents.events.append(event) }
        inputStream.schedule(on: loop)
        outputStream.schedule(on: loop)
        inputStream.open()
        outputStream.open()
        #expect(runLoop(loop) { done })
        #expect(reply == message)
        #expect(outputEvents.events == [.openCompleted, .hasSpaceAvailable])
        #expect(recorder.events.first == .openCompleted)
        #expect(recorder.events.last == .endEncountered)
        #expect(inputStream.streamError == nil && outputStream.streamError == nil)
    }

    // MARK: Interop with real peers

    @Test func bytesArriveAtNetcat() throws {
        let payload = randomBytes(1 << 20, seed: 7)
        var lastError: String = ""
        for _ in 0..<5 {
            let port = try freeLoopbackPort()
            let nc = Process()
            nc.executableURL = URL(fileURLWithPath: "/usr/bin/nc")
            nc.arguments = ["-l", "127.0.0.1", "\(port)"]
            let out = Pipe()
            nc.standardOutput = out
            nc.standardInput = FileHandle.nullDevice
            nc.standardError = FileHandle.nullDevice
            try nc.run()
            defer { if nc.isRunning { nc.terminate() } }
            // nc needs a moment to listen: retry the connect while it is refused.
            var pair: (ReadStream, WriteStream)?
            waitUntil(.seconds(5)) {
                guard nc.isRunning else { return true }
                let attempt = Socket.connect(host: "127.0.0.1", port: port)
                attempt.1.open()
                if attempt.1.streamStatus == .open {
                    pair = attempt
                    return true
                }
                lastError = "\(attempt.1.streamError.map { "\($0)" } ?? "?")"
                return false
            }
            guard let (_, output) = pair else { continue }  // port taken meanwhile: try another
            // Read nc's stdout concurrently so a full pipe cannot stall it.
            let received = LockedData()
            let readerThread = Thread {
                received.set(out.fileHandleForReading.readDataToEndOfFile())
            }
            readerThread.start()
            #expect(output.write(all: payload))
            output.close()
            nc.waitUntilExit()
            waitUntil { received.value != nil }
            #expect(received.value == Data(payload))
            return
        }
        Issue.record("could not reach nc -l: \(lastError)")
    }

    @Test(arguments: ["nc", "socat"])
    func listenerReceivesFromRealPeer(_ peer: String) throws {
        try withTemporaryDirectory { dir in
            let payload = randomBytes(1 << 20, seed: peer == "nc" ? 8 : 9)
            let file = dir + "/payload"
            try Data(payload).write(to: URL(fileURLWithPath: file))
            let loop = try EventLoop()
            let listener = try Socket.listen(host: "127.0.0.1", port: 0)
            defer { listener.close() }
            var received: [UInt8] = []
            var ended = false
            try listener.accept(on: loop) { input, output, _ in
                output.close()
                input.eventHandler = { _, event in
                    if event == .hasBytesAvailable {
                        var chunk = [UInt8](repeating: 0, count: 65536)
                        let n = chunk.withUnsafeMutableBytes { input.read(into: $0) }
                        if n > 0 { received.append(contentsOf: chunk[0..<n]) }
                    } else if event == .endEncountered || event == .errorOccurred {
                        ended = true
                        input.close()
                    }
                }
                input.schedule(on: loop)
                input.open()
            }
            let process = Process()
            if peer == "nc" {
                process.executableURL = URL(fileURLWithPath: "/usr/bin/nc")
                process.arguments = ["-N", "127.0.0.1", "\(listener.port)"]
            } else {
                process.executableURL = URL(fileURLWithPath: "/usr/bin/socat")
                process.arguments = ["-", "TCP:127.0.0.1:\(listener.port)"]
            }
            process.standardInput = FileHandle(forReadingAtPath: file)
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            defer { if process.isRunning { process.terminate() } }
            #expect(runLoop(loop) { ended })
            #expect(received == payload)
        }
    }
}

/// Data handed from a reader thread to the test.
final class LockedData: @unchecked Sendable {
    private let lock = NSLock()
    private var data: Data?
    func set(_ value: Data) { lock.withLock { data = value } }
    var value: Data? { lock.withLock { data } }
}
