import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `openssl s_server ARGUMENTS` on 127.0.0.1 port 0, its standard output (handshake reports and
/// whatever application data it decrypts) in `outputPath`; stdin stays open, so it waits.
final class OpenSSLServer: @unchecked Sendable {
    let server: WatchedProcess
    let outputPath: String
    let port: UInt16

    init(_ arguments: [String], outputPath: String) throws {
        self.outputPath = outputPath
        let process = try WatchedProcess(
            opensslBinary, ["s_server", "-accept", "127.0.0.1:0", "-naccept", "1"] + arguments, stdout: outputPath)
        var found: UInt16?
        waitUntil {
            let text = String(decoding: contents(outputPath) ?? Data(), as: UTF8.self)
            if let match = text.firstMatch(of: /ACCEPT 127\.0\.0\.1:([0-9]+)/) { found = UInt16(match.output.1) }
            return found != nil || !process.process.isRunning
        }
        guard let found else { throw ReceiverError(message: "s_server printed no port: \(process.stderrText)") }
        server = process
        port = found
    }

    /// What it printed: with an unauthenticated peer, never a byte of the transfer.
    var output: String { String(decoding: contents(outputPath) ?? Data(), as: UTF8.self) }

    func stop() {
        if server.process.isRunning { kill(server.process.processIdentifier, SIGTERM) }
        _ = server.wait(seconds: 10)
    }
}

/// A TCP server on 127.0.0.1 port 0 that accepts one connection, reads what the client sends
/// first (its ClientHello), answers with `reply` and closes: a peer that breaks off in the
/// middle of the handshake.
final class CuttingServer: @unchecked Sendable {
    let port: UInt16
    private let listener: Int32
    private let finished = DispatchSemaphore(value: 0)

    init(reply: [UInt8]) throws {
        (listener, port) = try listeningLoopbackSocket()
        Thread.detachNewThread { [self] in
            defer { finished.signal() }
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return }
            var buffer = [UInt8](repeating: 0, count: 4096)
            _ = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
            _ = reply.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            close(client)
        }
    }

    deinit { close(listener) }

    func waitUntilDone() -> Bool { finished.wait(timeout: .now() + 30) == .success }
}

/// A sender with a key or a code authenticates the receiver by that key and nothing else: a
/// server that answers its handshake any other way gets exit 77 (74 for a connection cut in
/// the middle), one line, and not a byte of a name or a file.
@Suite(.ownThreads) struct MisbehavingServerTests {
    static let certificateServer = ["-cert", "DIR/srv.pem", "-key", "DIR/srv.key"]

    /// What each server does instead of using the key.
    static let servers: [String: [String]] = [
        "ignores the key and shows a certificate": certificateServer,
        "asks for another key share (HelloRetryRequest), then shows a certificate": certificateServer + [
            "-groups", "P-384",
        ],
        "speaks TLS 1.2 only": certificateServer + ["-tls1_2"],
        "knows another key": [
            "-nocert", "-psk", String(repeating: "5a", count: 32), "-psk_identity", "sluice",
        ],
    ]

    @Test(arguments: servers.keys.sorted(), ["--key-file", "--code-file", "--streams"])
    func aServerThatDoesNotUseTheKeyGetsNothing(_ server: String, _ how: String) throws {
        try withTemporaryDirectory { dir in
            _ = try makeCertificates(in: dir)
            let secret = "\(dir)/secret-name-\(UUID().uuidString.prefix(8)).txt"
            try write(Data("the sender's secret\n".utf8), to: secret)
            let arguments = (Self.servers[server] ?? []).map { $0.replacingOccurrences(of: "DIR", with: dir) }
            let openssl = try OpenSSLServer(arguments, outputPath: "\(dir)/server.out")
            defer { openssl.stop() }
            var send = ["send", "--key-file", testKeyFile, secret, "127.0.0.1:\(openssl.port)"]
            switch how {
            case "--code-file":
                // A well-formed code (its check digits right), from a receiver that is gone.
                let issuer = try ReceiverProcess(["--dir", dir, "--once"], pairingCode: true)
                let code = try issuer.code()
                _ = issuer.stop()
                try write(Data((code + "\n").utf8), to: "\(dir)/code")
                chmod("\(dir)/code", 0o600)
                send = ["send", "--code-file", "\(dir)/code", secret, "127.0.0.1:\(openssl.port)"]
            case "--streams":
                send.insert(contentsOf: ["--streams", "4"], at: 1)
            default:
                break
            }
            let outcome = try Running(sluiceBinary, send).wait(within: .seconds(30))
            #expect(outcome.status == 77, "\(server) \(how): \(outcome.stderrText)")
            #expect(outcome.stderrLines.count == 1, "\(outcome.stderrText)")
            #expect(outcome.stderrText.contains("authentication failed"), "\(outcome.stderrText)")
            openssl.stop()
            #expect(!openssl.output.contains("secret"), "\(openssl.output)")
            #expect(!openssl.output.contains("SLUICE"), "\(openssl.output)")
        }
    }

    /// The reproduction from the report: socat terminates TLS with its own certificate in front
    /// of a plaintext receiver. The sender refuses it; the receiver behind it stores nothing.
    @Test func aRelayWithACertificateInFrontOfAPlaintextReceiverGetsNothing() throws {
        try withTemporaryDirectory { dir in
            _ = try makeCertificates(in: dir)
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            try write(Data("secret\n".utf8), to: "\(dir)/secret.txt")
            let receiver = try ReceiverProcess(["--insecure", "--dir", inbox])
            let behind = try receiver.port()
            let port = try freePort()
            let relay = try WatchedProcess(
                socatBinary,
                [
                    "OPENSSL-LISTEN:\(port),bind=127.0.0.1,reuseaddr,cert=\(dir)/srv.pem,key=\(dir)/srv.key,verify=0",
                    "TCP:127.0.0.1:\(behind)",
                ])
            #expect(waitUntil { isListening(port: port) })
            let outcome = try Running(sluiceBinary, ["send", "\(dir)/secret.txt", "127.0.0.1:\(port)"]).wait(
                within: .seconds(30))
            #expect(outcome.status == 77, "\(outcome.stderrText)")
            #expect(outcome.stderrText.contains("certificate instead of using the pre-shared key"))
            _ = relay.wait(seconds: 10)
            _ = receiver.stop()
            #expect(directoryEntries(inbox).isEmpty)
        }
    }

    /// A plaintext peer (a receiver run with --insecure) answers the ClientHello with an ERROR
    /// frame in clear: not TLS, not the key, 77.
    @Test func aPlaintextReceiverIsNotAuthenticated() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            try write(Data("secret\n".utf8), to: "\(dir)/secret.txt")
            let receiver = try ReceiverProcess(["--insecure", "--dir", inbox])
            let outcome = try Running(sluiceBinary, ["send", "\(dir)/secret.txt", try receiver.address()]).wait(
                within: .seconds(30))
            #expect(outcome.status == 77, "\(outcome.stderrText)")
            #expect(outcome.stderrLines.count == 1)
            _ = receiver.stop()
            #expect(directoryEntries(inbox).isEmpty)
        }
    }

    /// A server that sends the start of a ServerHello record and closes: a cut, 74.
    @Test func aServerThatClosesInTheMiddleOfTheHandshakeIsACut() throws {
        try withTemporaryDirectory { dir in
            try write(Data("secret\n".utf8), to: "\(dir)/secret.txt")
            // A handshake record announcing 122 bytes, of which 6 come.
            let server = try CuttingServer(reply: [0x16, 0x03, 0x03, 0x00, 0x7a, 0x02, 0x00, 0x00, 0x76, 0x03, 0x03])
            let outcome = try Running(sluiceBinary, ["send", "\(dir)/secret.txt", "127.0.0.1:\(server.port)"]).wait(
                within: .seconds(30))
            #expect(outcome.status == 74, "\(outcome.stderrText)")
            #expect(outcome.stderrLines.count == 1)
            #expect(server.waitUntilDone())
        }
    }
}
