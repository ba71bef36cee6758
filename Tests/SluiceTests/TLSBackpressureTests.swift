import CCrypto
import Foundation
import TestThreads
import Testing

@testable import Sluice

/// The TLS streams against a socket that does not keep up: the ciphertext kept for it is
/// bounded; and the cipher suite is the fast one both sides can do.
@Suite(.ownThreads) struct TLSBackpressureTests {
    /// A client writes 24 MiB to an echo server while reading nothing back: both sockets fill,
    /// the ciphertext kept for the socket never passes half the BIO pair and a bit (the writer
    /// is ready below half), and once the socket takes nothing a write takes nothing either.
    /// Once the client reads, every byte comes back in order.
    @Test func aFullSocketKeepsBoundedCiphertextAndLosesNothing() throws {
        let loop = try EventLoop()
        let server = try TLSEchoServer(serverContext(), on: loop)
        defer { server.listener.close() }
        let client = try clientContext { $0.pin = server.context.localPin }
        let (input, output) = TLS.secure(Socket.connect(host: "127.0.0.1", port: server.listener.port), context: client)
        let connection = try #require((output as? TLSWriteStream)?.connection)
        // Ready below half the buffer; a write then encrypts until the buffer is full at most.
        let bound = TLSEngine.bufferSize
        for stream in [input as ByteStream, output] {
            stream.schedule(on: loop)
            stream.open()
        }
        #expect(runLoop(loop) { output.streamStatus == .open })
        let payload = randomBytes(24 << 20, seed: 52)
        var sent = 0
        var keptCiphertext = false
        var refusedWhileKept = false
        // Writing only: until a write leaves ciphertext kept and the next one takes nothing.
        let deadline = ContinuousClock.now.advanced(by: .seconds(30))
        while sent < payload.count && !refusedWhileKept && ContinuousClock.now < deadline {
            let pending = { connection.engine?.outputPending ?? 0 }
            let result = payload.withUnsafeBytes {
                output.tryWrite(from: UnsafeRawBufferPointer(rebasing: $0[sent...]))
            }
            #expect(pending() <= bound)
            switch result {
            case .processed(let n) where n > 0:
                sent += n
                keptCiphertext = keptCiphertext || pending() > 0
            case .wouldBlock:
                refusedWhileKept = pending() > 0 && !connection.writerReady
                if !refusedWhileKept { loop.run(for: .milliseconds(10)) }
            case .processed:
                Issue.record("write failed: \(String(describing: output.streamError))")
                return
            }
        }
        #expect(keptCiphertext && refusedWhileKept, "sent \(sent) bytes without a short write")
        // Now both directions: the rest goes out as the echo comes back.
        var received: [UInt8] = []
        received.reserveCapacity(payload.count)
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        let done = runLoop(loop, for: .seconds(60)) {
            if sent < payload.count,
                case .processed(let n) = payload.withUnsafeBytes({
                    output.tryWrite(from: UnsafeRawBufferPointer(rebasing: $0[sent...]))
                }), n > 0
            {
                sent += n
            }
            while case .processed(let n) = chunk.withUnsafeMutableBytes({ input.tryRead(into: $0) }), n > 0 {
                received.append(contentsOf: chunk[0..<n])
            }
            return received.count >= payload.count
        }
        #expect(done, "\(received.count) of \(payload.count) bytes came back")
        #expect(received == payload)
        #expect(server.failures.isEmpty)
        input.close()
        output.close()
    }

    /// With certificates, the server picks AES-128-GCM even for a client that lists
    /// AES-256-GCM first, and keeps ChaCha20-Poly1305 for a client that puts it first (one
    /// without AES instructions).
    @Test(arguments: [
        ("TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"),
        ("TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256", "TLS_CHACHA20_POLY1305_SHA256"),
        ("TLS_AES_256_GCM_SHA384", "TLS_AES_256_GCM_SHA384"),
    ])
    func theServerPrefersAES128(clientSuites: String, expected: String) throws {
        let loop = try EventLoop()
        let server = try TLSEchoServer(serverContext(), on: loop)
        defer { server.listener.close() }
        let client = try clientContext { $0.pin = server.context.localPin }
        #expect(SSL_CTX_set_ciphersuites(client.context, clientSuites) == 1)
        let pair = TLS.secure(Socket.connect(host: "127.0.0.1", port: server.listener.port), context: client)
        let exchange = SocketExchange(pair, payload: randomBytes(100_000, seed: 3))
        exchange.start(on: loop)
        #expect(runLoop(loop) { exchange.done })
        #expect(exchange.failure == nil)
        #expect(exchange.received == exchange.payload)
        #expect(exchange.input.property(forKey: .tlsCipher) as? String == expected)
    }

    /// A client of ours offers AES-128-GCM first: against a server that takes the client's
    /// order, that is the suite.
    @Test func ourClientOffersAES128First() throws {
        let loop = try EventLoop()
        let serverContext = try serverContext()
        // A server that follows the client's order.
        _ = SSL_CTX_clear_options(serverContext.context, TLSContext.serverPreference)
        let server = try TLSEchoServer(serverContext, on: loop)
        defer { server.listener.close() }
        let client = try clientContext { $0.pin = server.context.localPin }
        let pair = TLS.secure(Socket.connect(host: "127.0.0.1", port: server.listener.port), context: client)
        let exchange = SocketExchange(pair, payload: randomBytes(1000, seed: 4))
        exchange.start(on: loop)
        #expect(runLoop(loop) { exchange.done })
        #expect(exchange.input.property(forKey: .tlsCipher) as? String == "TLS_AES_128_GCM_SHA256")
    }
}
