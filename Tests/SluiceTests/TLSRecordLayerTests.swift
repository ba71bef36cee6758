import CCrypto
import Foundation
import TestThreads
import Testing

@testable import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// Two `TLSEngine`s joined in memory: what one sends, the other receives, moved by the test.
struct EnginePair {
    let client: TLSEngine
    let server: TLSEngine

    /// A client and a server with a pre-shared key, or (nil) the server's throwaway
    /// certificate, unchecked; `suites` restricts both contexts' TLS 1.3 suites.
    init(key: Bool = true, suites: String? = nil) throws {
        var settings = TLSSettings(role: .server)
        if key {
            settings.preSharedKey = PreSharedKey(key: [UInt8](repeating: 9, count: 32))
        }
        let serverContext = try TLSContext(settings)
        settings.role = .client
        settings.verifiesPeer = false
        let clientContext = try TLSContext(settings)
        if let suites {
            for context in [serverContext, clientContext] {
                #expect(SSL_CTX_set_ciphersuites(context.context, suites) == 1)
            }
        }
        server = try TLSEngine(context: serverContext, name: "server")
        client = try TLSEngine(context: clientContext, name: "client")
    }

    /// Moves all of `from`'s output into `to`; returns the bytes moved.
    @discardableResult
    static func move(_ from: TLSEngine, _ to: TLSEngine, edit: (inout [UInt8]) -> Void = { _ in }) -> Int {
        var bytes: [UInt8] = []
        while true {
            let out = from.output()
            if out.isEmpty { break }
            bytes += out
            from.consumeOutput(out.count)
        }
        edit(&bytes)
        let fed = bytes.withUnsafeBytes { to.feed($0) }
        #expect(fed == bytes.count)
        return bytes.count
    }

    /// Runs both handshakes to their end.
    func handshake() {
        for _ in 0..<20 {
            _ = client.handshake()
            Self.move(client, server)
            _ = server.handshake()
            Self.move(server, client)
            if client.handshakeDone && server.handshakeDone { return }
        }
        Issue.record("the handshake did not finish")
    }

    /// Writes all of `data` from `from` and reads it at `to` with reads of `readSize` bytes.
    static func send(_ data: [UInt8], from: TLSEngine, to: TLSEngine, readSize: Int) -> [UInt8] {
        var sent = 0
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: readSize)
        while received.count < data.count {
            if sent < data.count {
                let step = data.withUnsafeBytes { from.write(from: .init(rebasing: $0[sent...])) }
                if case .done(let n) = step { sent += n }
            }
            move(from, to)
            var progress = false
            while true {
                let step = buffer.withUnsafeMutableBytes { to.read(into: $0) }
                guard case .done(let n) = step, n > 0 else {
                    if case .failed(let error) = step { Issue.record("read failed: \(error)") }
                    break
                }
                received += buffer[..<n]
                progress = true
            }
            if !progress && sent == data.count { break }
        }
        return received
    }
}

@Suite(.ownThreads) struct TLSRecordLayerTests {
    /// Each suite: sluice's own record layer takes over on both ends, data goes both ways in
    /// reads larger and smaller than a record (decrypted into the caller's buffer, and opened
    /// in place and handed out in pieces), and close_notify is a clean end.
    @Test(arguments: ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"])
    func ownRecordLayerCarriesDataBothWays(suite: String) throws {
        let pair = try EnginePair(key: suite != "TLS_AES_256_GCM_SHA384", suites: suite)
        pair.handshake()
        #expect(pair.client.cipherName == suite)
        #expect(pair.client.records != nil && pair.server.records != nil)
        let data = randomBytes(1_000_000, seed: 52)
        for readSize in [1 << 20, 16384, 1000, 1] where readSize > 1 || suite.contains("CHACHA") {
            let size = readSize == 1 ? 40000 : data.count
            let chunk = Array(data[..<size])
            try #require(
                digest(EnginePair.send(chunk, from: pair.client, to: pair.server, readSize: readSize)) == digest(chunk))
            try #require(
                digest(EnginePair.send(chunk, from: pair.server, to: pair.client, readSize: readSize)) == digest(chunk))
        }
        pair.client.shutdown()
        EnginePair.move(pair.client, pair.server)
        var buffer = [UInt8](repeating: 0, count: 100)
        #expect(buffer.withUnsafeMutableBytes { pair.server.read(into: $0) } == .closed)
    }

    /// Application data the client sends right after its Finished arrives with it, in one
    /// read of the socket: OpenSSL gets the Finished alone, and the data is the record layer's.
    @Test func dataRightAfterTheFinishedIsNotLeftToOpenSSL() throws {
        let pair = try EnginePair()
        _ = pair.client.handshake()
        EnginePair.move(pair.client, pair.server)
        _ = pair.server.handshake()
        EnginePair.move(pair.server, pair.client)
        #expect(pair.client.handshake() == .done(0))
        let data = randomBytes(100_000, seed: 3)
        #expect(data.withUnsafeBytes { pair.client.write(from: $0) } == .done(data.count))
        EnginePair.move(pair.client, pair.server)  // the Finished, then the data
        #expect(pair.server.handshake() == .done(0))
        #expect(pair.server.records != nil)
        #expect(pair.server.plaintextPending)
        var buffer = [UInt8](repeating: 0, count: 200_000)
        #expect(buffer.withUnsafeMutableBytes { pair.server.read(into: $0) } == .done(data.count))
        #expect(digest(Array(buffer[..<data.count])) == digest(data))
        #expect(!pair.server.plaintextPending)
    }

    /// A ciphertext byte flipped on the way: a clear failure, no byte of that record handed
    /// out, and the failure stays.
    @Test func aTamperedRecordFailsTheConnection() throws {
        let pair = try EnginePair()
        pair.handshake()
        let data = randomBytes(50_000, seed: 5)
        #expect(data.withUnsafeBytes { pair.client.write(from: $0) } == .done(data.count))
        EnginePair.move(pair.client, pair.server) { $0[5 + 16384 + 17 + 5 + 100] ^= 1 }
        var buffer = [UInt8](repeating: 0, count: 100_000)
        #expect(buffer.withUnsafeMutableBytes { pair.server.read(into: $0) } == .done(16384))
        for _ in 0..<2 {
            guard case .failed(let error) = buffer.withUnsafeMutableBytes({ pair.server.read(into: $0) }) else {
                Issue.record("the tampered record was accepted")
                return
            }
            #expect(error.code == .protocolViolation)
            #expect("\(error)".contains("bad_record_mac"), "\(error)")
        }
        // The server told the client why, in a bad_record_mac alert (RFC 8446 §5.2), once.
        EnginePair.move(pair.server, pair.client)
        guard case .failed(let told) = buffer.withUnsafeMutableBytes({ pair.client.read(into: $0) }) else {
            Issue.record("no alert reached the client")
            return
        }
        #expect("\(told)".contains("the peer sent alert 20"), "\(told)")
        #expect(pair.server.outputPending == 0)
    }

    /// The network's end without close_notify, whole records read or a record cut: the
    /// "connection cut" failure, not an end.
    @Test(arguments: [0, 3000])
    func anEndWithoutCloseNotifyIsACut(cut: Int) throws {
        let pair = try EnginePair()
        pair.handshake()
        let data = randomBytes(10_000, seed: 6)
        #expect(data.withUnsafeBytes { pair.client.write(from: $0) } == .done(data.count))
        EnginePair.move(pair.client, pair.server) { $0.removeLast(cut) }
        pair.server.endInput()
        var buffer = [UInt8](repeating: 0, count: 100_000)
        if cut == 0 {
            #expect(buffer.withUnsafeMutableBytes { pair.server.read(into: $0) } == .done(data.count))
        }
        guard case .failed(let error) = buffer.withUnsafeMutableBytes({ pair.server.read(into: $0) }) else {
            Issue.record("a cut connection read as an end")
            return
        }
        #expect("\(error)".contains("connection cut without close_notify"), "\(error)")
    }

    /// Records sealed by a test's own record layer (fixed secrets): the peer's malformed
    /// records and messages are refused with a reason; tickets are skipped; a KeyUpdate is
    /// applied, and one asked for is answered.
    @Test func malformedRecordsAndPostHandshakeMessages() throws {
        var (peer, us) = Self.layers()
        func deliver(_ type: UInt8, _ content: [UInt8], edit: (inout [UInt8]) -> Void = { _ in }) -> TLSEngine.Step {
            #expect(peer.seal(content, type: type))
            return Self.pass(from: peer, to: us, edit: edit)
        }
        func failure(_ step: TLSEngine.Step) -> String {
            guard case .failed(let error) = step else { return "no failure: \(step)" }
            return "\(error)"
        }
        // The alert `us` sent back for what it refused, as the peer reads it; then nothing more.
        func alertBack() -> String {
            let told = failure(Self.pass(from: us, to: peer))
            #expect(us.pending == 0 && us.readable().isEmpty, "more after the alert")
            return told
        }
        #expect(deliver(23, [1, 2, 3]) == .done(3))
        #expect(deliver(23, [1, 2, 3, 0, 0, 0]) == .done(6))  // data ending in zero bytes
        #expect(deliver(23, []) == .wantInput)  // an empty data record is allowed
        let ticket: [UInt8] = [4, 0, 0, 3, 9, 9, 9]
        #expect(deliver(22, ticket + ticket) == .wantInput)
        #expect(deliver(22, Array(ticket[..<5])) == .wantInput)  // a ticket cut across records
        #expect(deliver(22, Array(ticket[5...])) == .wantInput)
        // The peer's KeyUpdate: its records after it are read with its next keys.
        #expect(peer.sendKeyUpdate(requested: false))
        #expect(Self.pass(from: peer, to: us) == .wantInput)
        #expect(us.pending == 0)
        #expect(deliver(23, [7]) == .done(1))
        // Asked for ours: it goes before our next record, which the peer reads with our next keys.
        #expect(peer.sendKeyUpdate(requested: true))
        #expect(Self.pass(from: peer, to: us) == .wantInput)
        #expect(us.pending > 0)
        #expect(Self.pass(from: us, to: peer) == .wantInput)
        #expect([UInt8]([5, 6]).withUnsafeBytes { us.write(from: $0) } == .done(2))
        #expect(Self.pass(from: us, to: peer) == .done(2))
        #expect(deliver(23, [8]) == .done(1))
        #expect(failure(deliver(22, [24, 0, 0, 1, 2])).contains("KeyUpdate"))
        #expect(alertBack().contains("alert 50"))
        (peer, us) = Self.layers()
        #expect(failure(deliver(22, [24, 0, 0, 1, 0] + ticket)).contains("KeyUpdate"))
        (peer, us) = Self.layers()
        #expect(failure(deliver(22, [13, 0, 0, 0])).contains("type 13"))
        #expect(alertBack().contains("alert 10"))
        (peer, us) = Self.layers()
        #expect(deliver(22, [4, 0, 0, 3, 9]) == .wantInput)
        #expect(failure(deliver(23, [1])).contains("cut by a record"))
        (peer, us) = Self.layers()
        #expect(failure(deliver(21, [2, 40])).contains("alert 40"))
        #expect(us.pending == 0, "an alert answered with an alert")
        (peer, us) = Self.layers()
        let refused = deliver(21, [2, 48])
        #expect(failure(refused).contains("alert 48"))
        if case .failed(let error) = refused { #expect(error.code == .authenticationFailed) }
        (peer, us) = Self.layers()
        #expect(failure(deliver(23, [1]) { $0[0] = 22 }).contains("type 22"))
        (peer, us) = Self.layers()
        #expect(failure(deliver(23, [1]) { $0[2] = 1 }).contains("version"))
        (peer, us) = Self.layers()
        #expect(failure(deliver(23, [1]) { $0.removeLast() }) == "no failure: wantInput")
        (peer, us) = Self.layers()
        #expect(failure(deliver(23, [1]) { $0[3] = 0x41 }).contains("record_overflow"))
        #expect(alertBack().contains("alert 22"))
        (peer, us) = Self.layers()
        #expect(
            failure(deliver(23, [1]) { $0 = Array($0[..<3]) + [0, 16] + Array(repeating: 0, count: 16) })
                .contains("too short"))
        (peer, us) = Self.layers()
        #expect(failure(deliver(99, [1])).contains("inner type 99"))
        #expect(alertBack().contains("alert 10"))
        (peer, us) = Self.layers()
        #expect(failure(deliver(0, [0, 0])).contains("no content type"))
        (peer, us) = Self.layers()
        #expect(failure(deliver(23, [UInt8](repeating: 1, count: 16385))).contains("record_overflow"))
        (peer, us) = Self.layers()
        #expect(failure(deliver(21, [1, 0, 0])).contains("alert record of 3 bytes"))
        #expect(alertBack().contains("alert 50"))
        (peer, us) = Self.layers()
        #expect(failure(deliver(23, [1, 2, 3]) { $0[6] ^= 1 }).contains("bad_record_mac"))
        #expect(alertBack().contains("alert 20"))
        (peer, us) = Self.layers()
        #expect(deliver(21, [1, 0]) == .closed)
        #expect(us.pending == 0, "close_notify answered with an alert")
    }

    /// Moves `from`'s output into `to`'s input (edited), and reads there.
    static func pass(from: TLSRecordLayer, to: TLSRecordLayer, edit: (inout [UInt8]) -> Void = { _ in })
        -> TLSEngine.Step
    {
        var bytes = Array(from.readable())
        from.output.consume(bytes.count)
        edit(&bytes)
        let space = to.input.space()
        #expect(space.count >= bytes.count)
        space.copyBytes(from: bytes)
        to.input.commit(bytes.count)
        var buffer = [UInt8](repeating: 0, count: 20000)
        return buffer.withUnsafeMutableBytes { to.read(into: $0) }
    }

    /// A pair of record layers with fixed secrets, the first sealing for the second, each with
    /// its AES-GCM engine.
    static func layers(
        suite: TLSSuite = .aes128GCM, engines: (peer: AESGCMEngine, us: AESGCMEngine) = (.current, .current)
    ) -> (peer: TLSRecordLayer, us: TLSRecordLayer) {
        let a = [UInt8](repeating: 1, count: suite.hashLength)
        let b = [UInt8](repeating: 2, count: suite.hashLength)
        func layer(_ send: [UInt8], _ receive: [UInt8], _ engine: AESGCMEngine) -> TLSRecordLayer {
            send.withUnsafeBytes { s in
                receive.withUnsafeBytes { r in
                    TLSRecordLayer(
                        suite: suite, sendSecret: s, receiveSecret: r, input: TLSInputBuffer(capacity: 1 << 18),
                        output: TLSOutputBuffer(capacity: 1 << 18), name: "test", engine: engine)!
                }
            }
        }
        return (layer(a, b, engines.peer), layer(b, a, engines.us))
    }
}
