import Foundation
import TestThreads
import Testing

@testable import Sluice

#if canImport(Glibc)
    import Glibc
#endif

@Suite struct PairingCodeTests {
    @Test func generatedCodesRoundTripAndAreDistinct() throws {
        let a = try #require(PairingCode.generate())
        let b = try #require(PairingCode.generate())
        #expect(a != b)
        let written = a.description
        #expect(written.count == 7 * 4 + 6)
        #expect(written.split(separator: "-").allSatisfy { $0.count == 4 })
        #expect(try PairingCode.parse(written).get() == a)
        // As a person may type it: lower case, no dashes, O for 0 and l for 1.
        let sloppy = written.lowercased().replacingOccurrences(of: "-", with: " ")
            .replacingOccurrences(of: "0", with: "o").replacingOccurrences(of: "1", with: "l")
        #expect(try PairingCode.parse(sloppy).get() == a)
    }

    @Test func everySingleCharacterTypoIsCaughtOrHarmless() throws {
        let code = try #require(PairingCode.generate())
        let written = Array(code.description)
        var caught = 0
        var total = 0
        for index in written.indices where written[index] != "-" {
            for replacement in "0123456789ABCDEFGHJKMNPQRSTVWXYZ" where replacement != written[index] {
                var typo = written
                typo[index] = replacement
                total += 1
                if case .failure(.checksumMismatch) = PairingCode.parse(String(typo)) { caught += 1 }
            }
        }
        // Ten checksum bits: about 1 typo in 1024 slips through.
        #expect(Double(caught) / Double(total) > 0.99)
    }

    @Test func malformedCodesSayWhatIsWrong() {
        #expect(PairingCode.parse("ABCD") == .failure(.wrongLength(4)))
        #expect(PairingCode.parse("ABCD-EFGH-JKMN-PQRS-TVWX-YZ01-23U5") == .failure(.badCharacter("U")))
        #expect(PairingCode.parse("é") == .failure(.badCharacter("é")))
        #expect(PairingCode.ParseError.checksumMismatch.description.contains("typo"))
    }

    @Test func derivedKeysDependOnTheSecretAndTheLabel() throws {
        let code = try #require(PairingCode.generate())
        let again = try PairingCode.parse(code.description.lowercased()).get()
        #expect(PreSharedKey.derive(from: code) == PreSharedKey.derive(from: again))
        #expect(PreSharedKey.derive(from: code) != PreSharedKey.derive(from: try #require(PairingCode.generate())))
        let key = KeyFile(bytes: Array(code.payload.utf8.prefix(26)) + [0, 0, 0, 0, 0, 0])
        #expect(PreSharedKey.derive(from: key).key.count == 32)
    }
}

@Suite(.ownThreads) struct KeyFileTests {
    @Test func keygenMakesAPrivateFileAndRefusesToOverwrite() throws {
        try withTemporaryDirectory { dir in
            let path = "\(dir)/key"
            let key = try KeyFile.generate(atPath: path)
            var info = stat()
            #expect(stat(path, &info) == 0)
            #expect(info.st_mode & 0o777 == 0o600)
            #expect(try KeyFile.load(path: path) == key)
            #expect(throws: SluiceError.self) { try KeyFile.generate(atPath: path) }
            #expect(try KeyFile.load(path: path) == key)
            chmod(path, 0o644)
            #expect(throws: SluiceError.self) { try KeyFile.load(path: path) }
        }
    }

    @Test func parseAcceptsOnlyOneKeyLine() {
        let hex = String(repeating: "0f", count: 32)
        #expect(KeyFile.parse("sluice-key-v1 \(hex)\n")?.bytes == [UInt8](repeating: 15, count: 32))
        #expect(KeyFile.parse("sluice-key-v1 \(hex)x") == nil)
        #expect(KeyFile.parse("sluice-key-v2 \(hex)") == nil)
        #expect(KeyFile.parse("") == nil)
    }
}

@Suite struct HandshakeLimiterTests {
    @Test func failuresFromOneAddressAreLimitedWithinTheWindow() {
        var limiter = HandshakeLimiter(maximumFailures: 3, window: .seconds(10), maximumAddresses: 2)
        let start = ContinuousClock.now
        for i in 0..<3 {
            let allowed = limiter.allows("10.0.0.1", at: start + .seconds(i))
            #expect(allowed)
            limiter.recordFailure("10.0.0.1", at: start + .seconds(i))
        }
        let refused = !limiter.allows("10.0.0.1", at: start + .seconds(5))
        let other = limiter.allows("10.0.0.2", at: start + .seconds(5))
        let later = limiter.allows("10.0.0.1", at: start + .seconds(10))
        #expect(refused && other && later)
        limiter.recordFailure("10.0.0.2", at: start + .seconds(11))
        limiter.recordFailure("10.0.0.3", at: start + .seconds(12))
        #expect(limiter.trackedAddresses == 2)
    }
}

/// TLS streams authenticated by a pre-shared key, end to end on loopback.
@Suite(.ownThreads) struct PreSharedKeyTLSTests {
    func exchange(serverKey: PreSharedKey, clientKey: PreSharedKey) throws -> (SocketExchange, TLSEchoServer) {
        let loop = try EventLoop()
        let server = try TLSEchoServer(serverContext { $0.preSharedKey = serverKey }, on: loop)
        let client = try clientContext { $0.preSharedKey = clientKey }
        let pair = TLS.secure(Socket.connect(host: "127.0.0.1", port: server.listener.port), context: client)
        let exchange = SocketExchange(pair, payload: randomBytes(500_000, seed: 11))
        exchange.start(on: loop)
        #expect(runLoop(loop, for: .seconds(5)) { exchange.done && server.sessions.allSatisfy(\.finished) })
        server.listener.close()
        return (exchange, server)
    }

    @Test func theRightKeyConnects() throws {
        let code = try #require(PairingCode.generate())
        let key = PreSharedKey.derive(from: try PairingCode.parse(code.description).get())
        let (client, server) = try exchange(serverKey: PreSharedKey.derive(from: code), clientKey: key)
        #expect(client.failure == nil, "\(String(describing: client.failure)) \(server.failures)")
        #expect(client.received == client.payload)
        #expect(client.input.property(forKey: .tlsProtocol) as? String == "TLSv1.3")
        #expect(client.input.property(forKey: .tlsPeerPin) == nil)  // no certificate: the key is the proof
        #expect(server.failures.isEmpty)
    }

    @Test func aWrongKeyFailsTheHandshakeOnBothSides() throws {
        let right = PreSharedKey.derive(from: try #require(PairingCode.generate()))
        let wrong = PreSharedKey.derive(from: try #require(PairingCode.generate()))
        let (client, server) = try exchange(serverKey: right, clientKey: wrong)
        #expect(
            client.failure?.code == .authenticationFailed, "\(String(describing: client.failure)) \(server.failures)")
        #expect(client.received.isEmpty)
        #expect(!client.events(of: client.input).contains(.openCompleted))
        #expect(server.sessions.count == 1)
        #expect(server.failures.first?.code == .authenticationFailed)
    }
}

/// With a pre-shared key the key is the only proof, in both directions: a peer that runs an
/// ordinary certificate handshake instead (a man in the middle who knows neither code nor key)
/// fails authentication on the side that holds the key, before a byte of data moves.
@Suite(.ownThreads) struct PreSharedKeyIsRequiredTests {
    @Test func aClientWithTheKeyRefusesAServerThatShowsACertificate() throws {
        let loop = try EventLoop()
        let server = try TLSEchoServer(serverContext(), on: loop)
        defer { server.listener.close() }
        let key = PreSharedKey.derive(from: try #require(PairingCode.generate()))
        let client = try clientContext { $0.preSharedKey = key }
        let pair = TLS.secure(Socket.connect(host: "127.0.0.1", port: server.listener.port), context: client)
        let exchange = SocketExchange(pair, payload: randomBytes(10_000, seed: 12))
        exchange.start(on: loop)
        #expect(runLoop(loop, for: .seconds(10)) { exchange.done })
        #expect(exchange.failure?.code == .authenticationFailed, "\(String(describing: exchange.failure))")
        #expect(exchange.failure?.detail?.contains("certificate") == true)
        #expect(!exchange.events(of: exchange.input).contains(.openCompleted))
        #expect(server.sessions.allSatisfy { $0.total == 0 })
    }

    @Test func aServerWithTheKeyRefusesAClientThatDidNotUseIt() throws {
        try withTemporaryDirectory { dir in
            // The server has a certificate as well as the key: a client without the key can
            // finish a certificate handshake with it, and must still be refused.
            let openssl = Process()
            openssl.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
            openssl.arguments = [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                "\(dir)/key.pem", "-out", "\(dir)/cert.pem", "-days", "1", "-subj", "/CN=sluice",
            ]
            openssl.standardError = FileHandle.nullDevice
            try openssl.run()
            openssl.waitUntilExit()
            try #require(openssl.terminationStatus == 0)
            let loop = try EventLoop()
            let key = PreSharedKey.derive(from: try #require(PairingCode.generate()))
            let server = try TLSEchoServer(
                serverContext {
                    $0.preSharedKey = key
                    $0.certificateFile = "\(dir)/cert.pem"
                    $0.keyFile = "\(dir)/key.pem"
                }, on: loop)
            defer { server.listener.close() }
            let client = try clientContext { $0.verifiesPeer = false }
            let pair = TLS.secure(Socket.connect(host: "127.0.0.1", port: server.listener.port), context: client)
            let exchange = SocketExchange(pair, payload: randomBytes(10_000, seed: 13))
            exchange.start(on: loop)
            #expect(runLoop(loop, for: .seconds(10)) { exchange.done && server.sessions.allSatisfy(\.finished) })
            #expect(exchange.received.isEmpty)
            #expect(server.failures.first?.code == .authenticationFailed, "\(server.failures)")
            #expect(server.sessions.allSatisfy { $0.total == 0 })
        }
    }
}
