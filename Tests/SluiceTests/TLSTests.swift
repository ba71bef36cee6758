import Foundation
import TestThreads
import Testing

@testable import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// A TLS echo server on 127.0.0.1 port 0: each connection is secured with `context`, and
/// copied back to the client.
final class TLSEchoServer {
    let listener: SocketListener
    let context: TLSContext
    private(set) var sessions: [LoopCopier] = []

    init(_ context: TLSContext, on loop: EventLoop) throws {
        self.context = context
        listener = try Socket.listen(host: "127.0.0.1", port: 0)
        try listener.accept(on: loop, context: context) { [unowned self] input, output, _ in
            let pump = LoopCopier(source: input, sink: output)
            self.sessions.append(pump)
            pump.start(on: loop)
        }
    }

    var failures: [SluiceError] { sessions.compactMap(\.failure) }
}

func serverContext(_ configure: (inout TLSSettings) -> Void = { _ in }) throws -> TLSContext {
    var settings = TLSSettings(role: .server)
    configure(&settings)
    return try TLSContext(settings)
}

func clientContext(_ configure: (inout TLSSettings) -> Void) throws -> TLSContext {
    var settings = TLSSettings(role: .client)
    configure(&settings)
    return try TLSContext(settings)
}

@Suite(.ownThreads) struct TLSStreamTests {
    @Test func echoWithAPinnedThrowawayCertificate() throws {
        let loop = try EventLoop()
        let server = try TLSEchoServer(serverContext(), on: loop)
        defer { server.listener.close() }
        let pin = try #require(server.context.localPin)
        let client = try clientContext { $0.pin = pin }
        let payload = randomBytes(3_000_000, seed: 7)
        let pair = TLS.secure(Socket.connect(host: "127.0.0.1", port: server.listener.port), context: client)
        let exchange = SocketExchange(pair, payload: payload)
        exchange.start(on: loop)
        #expect(runLoop(loop, for: .seconds(30)) { exchange.done })
        #expect(exchange.failure == nil)
        #expect(exchange.received == payload)
        #expect(exchange.events(of: exchange.input).first == .openCompleted)
        #expect(exchange.events(of: exchange.input).last == .endEncountered)
        #expect(exchange.input.property(forKey: .tlsProtocol) as? String == "TLSv1.3")
        #expect((exchange.input.property(forKey: .tlsCipher) as? String)?.hasPrefix("TLS_") == true)
        #expect(exchange.input.property(forKey: .tlsPeerPin) as? TLSPin == pin)
        #expect(server.failures.isEmpty)
    }

    @Test func wrongPinFailsTheHandshakeBeforeOpenCompleted() throws {
        let loop = try EventLoop()
        let server = try TLSEchoServer(serverContext(), on: loop)
        defer { server.listener.close() }
        let wrong = try #require(TLSPin(digest: [UInt8](repeating: 7, count: 32)))
        let client = try clientContext { $0.pin = wrong }
        let pair = TLS.secure(Socket.connect(host: "127.0.0.1", port: server.listener.port), context: client)
        let exchange = SocketExchange(pair, payload: [1, 2, 3])
        exchange.start(on: loop)
        #expect(runLoop(loop) { exchange.done })
        #expect(exchange.failure?.code == .authenticationFailed)
        #expect(exchange.failure?.description.contains("pin mismatch") == true)
        #expect(!exchange.events(of: exchange.output).contains(.openCompleted))
        #expect(runLoop(loop) { server.sessions.allSatisfy(\.finished) })
        #expect(server.sessions.allSatisfy { $0.failure != nil })
    }

    @Test func untrustedCertificateIsAnAuthenticationFailure() throws {
        let loop = try EventLoop()
        let server = try TLSEchoServer(serverContext(), on: loop)
        defer { server.listener.close() }
        let client = try clientContext { $0.peerName = "127.0.0.1" }
        let pair = TLS.secure(Socket.connect(host: "127.0.0.1", port: server.listener.port), context: client)
        let exchange = SocketExchange(pair, payload: [1, 2, 3])
        exchange.start(on: loop)
        #expect(runLoop(loop) { exchange.done })
        #expect(exchange.failure?.code == .authenticationFailed)
        #expect(exchange.failure?.description.contains("self-signed") == true)
    }

    @Test func pollingModeClientAgainstALoopServer() throws {
        let loop = try EventLoop()
        let server = try TLSEchoServer(serverContext(), on: loop)
        let port = server.listener.port
        let pin = try #require(server.context.localPin)
        let done = LockedData()
        let thread = Thread {
            guard let client = try? clientContext({ $0.pin = pin }) else { return }
            let (input, output) = TLS.secure(Socket.connect(host: "127.0.0.1", port: port), context: client)
            input.open()
            output.open()
            let payload = randomBytes(200_000, seed: 3)
            guard output.write(all: payload) else { return }
            output.close()
            if let reply = try? input.readToEnd(), reply == Data(payload) { done.set(Data([1])) }
            input.close()
        }
        thread.start()
        #expect(runLoop(loop, for: .seconds(30)) { done.value != nil })
        server.listener.close()
    }

    @Test func cutWithoutCloseNotifyIsAnErrorNotAnEnd() throws {
        let loop = try EventLoop()
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let context = try serverContext()
        var received = 0
        var failure: SluiceError?
        var ended = false
        try listener.accept(on: loop, context: context) { input, output, _ in
            output.close()
            input.eventHandler = { stream, event in
                if event.contains(.hasBytesAvailable) {
                    var buffer = [UInt8](repeating: 0, count: 65536)
                    while case .processed(let n) = buffer.withUnsafeMutableBytes({ input.tryRead(into: $0) }), n > 0 {
                        received += n
                    }
                }
                if event.contains(.errorOccurred) { failure = stream.streamError }
                if event.contains(.endEncountered) { ended = true }
            }
            input.schedule(on: loop)
            input.open()
        }
        // A client that sends 100 KB, then closes its socket without close_notify.
        let data = randomBytes(100_000, seed: 9)
        let port = listener.port
        let thread = Thread {
            guard let client = try? clientContext({ $0.verifiesPeer = false }) else { return }
            let (input, output) = TLS.secure(Socket.connect(host: "127.0.0.1", port: port), context: client)
            output.open()
            guard output.write(all: data), let tls = output as? TLSWriteStream else { return }
            tls.connection.inner.writer.close()
            tls.connection.inner.reader.close()
            _ = input
        }
        thread.start()
        #expect(runLoop(loop, for: .seconds(20)) { received == data.count && (failure != nil || ended) })
        #expect(received == data.count)
        #expect(!ended)
        #expect(failure?.code == .protocolViolation)
        #expect(failure?.description.contains("close_notify") == true)
    }

    @Test func handshakeTimeout() throws {
        let loop = try EventLoop()
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        // A peer that accepts and never speaks TLS.
        var held: [ByteStream] = []
        try listener.accept(on: loop) { input, output, _ in held += [input, output] }
        let client = try clientContext {
            $0.verifiesPeer = false
            $0.handshakeTimeout = .milliseconds(300)
        }
        let pair = TLS.secure(Socket.connect(host: "127.0.0.1", port: listener.port), context: client)
        let exchange = SocketExchange(pair, payload: [1])
        exchange.start(on: loop)
        #expect(runLoop(loop) { exchange.done })
        #expect(exchange.failure?.code == .timedOut)
        _ = held
    }

    @Test func plaintextClientIsDroppedBeforeAnyRead() throws {
        let loop = try EventLoop()
        let server = try TLSEchoServer(serverContext(), on: loop)
        defer { server.listener.close() }
        let plain = SocketExchange(
            Socket.connect(host: "127.0.0.1", port: server.listener.port), payload: Array("GET / HTTP/1.0\r\n\r\n".utf8)
        )
        plain.start(on: loop)
        #expect(runLoop(loop) { plain.done })
        #expect(runLoop(loop) { server.sessions.count == 1 && server.sessions[0].finished })
        #expect(server.failures.first?.code == .protocolViolation)
        #expect(!plain.received.contains(where: { $0 == UInt8(ascii: "G") }))
    }
}

/// `TLS.handshake`: a handshake run before the streams are opened (a listener that hands on
/// only an authenticated client), then the streams used as usual; or called off.
@Suite(.ownThreads) struct TLSHandshakeFirstTests {
    @Test func aHandshakeBeforeOpeningThenTheStreamsWork() throws {
        let loop = try EventLoop()
        let server = try TLSEchoServer(serverContext(), on: loop)
        defer { server.listener.close() }
        let pin = try #require(server.context.localPin)
        let client = try clientContext { $0.pin = pin }
        let pair = TLS.secure(Socket.connect(host: "127.0.0.1", port: server.listener.port), context: client)
        nonisolated(unsafe) var outcome: SluiceError??
        TLS.handshake(pair, on: loop) { outcome = .some($0) }
        #expect(runLoop(loop, for: .seconds(10)) { outcome != nil })
        #expect(outcome == .some(nil), "\(String(describing: outcome))")
        #expect(pair.0.streamStatus == .notOpen)
        let payload = randomBytes(200_000, seed: 17)
        let exchange = SocketExchange(pair, payload: payload)
        exchange.start(on: loop)
        #expect(runLoop(loop, for: .seconds(30)) { exchange.done })
        #expect(exchange.failure == nil)
        #expect(exchange.received == payload)
        #expect(exchange.events(of: exchange.input).first == .openCompleted)
    }

    @Test func aHandshakeCalledOffEndsWithCancelled() throws {
        let loop = try EventLoop()
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        // A server that accepts and says nothing: the handshake waits until it is called off.
        let client = try clientContext { $0.verifiesPeer = false }
        let pair = TLS.secure(Socket.connect(host: "127.0.0.1", port: listener.port), context: client)
        nonisolated(unsafe) var outcome: SluiceError??
        TLS.handshake(pair, on: loop) { outcome = .some($0) }
        loop.run(for: .milliseconds(50))
        #expect(outcome == nil)
        TLS.cancelHandshake(pair)
        #expect(runLoop(loop, for: .seconds(10)) { outcome != nil })
        #expect(outcome??.code == .cancelled, "\(String(describing: outcome))")
    }
}
