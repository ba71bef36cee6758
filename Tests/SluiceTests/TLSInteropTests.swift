import Foundation
import Synchronization
import TestThreads
import Testing

@testable import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// `openssl s_server` or `s_client` as the peer: stdin a pipe the test writes, stdout and
/// stderr files.
final class OpenSSLPeer: @unchecked Sendable {
    let process = Process()
    let input = Pipe()
    let stdoutPath: String
    let stderrPath: String

    init(_ arguments: [String], in dir: String) throws {
        signal(SIGPIPE, SIG_IGN)
        stdoutPath = "\(dir)/peer.out"
        stderrPath = "\(dir)/peer.err"
        for path in [stdoutPath, stderrPath] { _ = FileManager.default.createFile(atPath: path, contents: nil) }
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.standardInput = input
        process.standardOutput = FileHandle(forWritingAtPath: stdoutPath)
        process.standardError = FileHandle(forWritingAtPath: stderrPath)
        try process.run()
    }

    deinit { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }

    /// Writes `bytes` to the peer's stdin from another thread (the pipe holds less).
    func type(_ bytes: [UInt8]) {
        let handle = input.fileHandleForWriting
        let data = Data(bytes)
        Thread.detachNewThread { try? handle.write(contentsOf: data) }
    }

    func endInput() { try? input.fileHandleForWriting.close() }

    var stdout: [UInt8] { (try? [UInt8](Data(contentsOf: URL(fileURLWithPath: stdoutPath)))) ?? [] }
    var stderr: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    /// Waits for the exit (at most 30 s, then SIGKILL).
    func wait() -> Int32 {
        #expect(waitUntil(.seconds(30)) { !process.isRunning }, "\(stderr)")
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// Whether something listens on 127.0.0.1:`port` (from /proc/net/tcp).
    static func listening(_ port: UInt16) -> Bool {
        guard let table = try? String(contentsOfFile: "/proc/net/tcp", encoding: .utf8) else { return false }
        var hex = String(port, radix: 16, uppercase: true)
        while hex.count < 4 { hex = "0" + hex }
        let local = "0100007F:" + hex
        return table.split(separator: "\n").contains { $0.contains(local) && $0.contains(" 0A ") }
    }
}

/// Random bytes none of which `s_client` would take for a command at the start of a read
/// of its stdin (Q, R, K, k).
func commandFreeBytes(_ count: Int, seed: UInt64) -> [UInt8] {
    randomBytes(count, seed: seed).map { [0x51, 0x52, 0x4b, 0x6b].contains($0) ? $0 ^ 0x80 : $0 }
}

/// The SHA-256 of `bytes` in hex: what tests compare large arrays by (an `==` of two large
/// arrays in `#expect` makes the testing library compute their difference, for minutes).
func digest(_ bytes: [UInt8]) -> String { SHA256Digest.hex(SHA256Digest.hash(bytes)) }

/// Reads exactly `count` bytes from `input` in polling mode, with reads of the sizes given in
/// turn (smaller than a record: handed out in pieces; larger: decrypted in place).
func readExactly(_ count: Int, from input: ReadStream, sizes: [Int]) -> [UInt8] {
    var received: [UInt8] = []
    var turn = 0
    while received.count < count {
        var buffer = [UInt8](repeating: 0, count: min(sizes[turn % sizes.count], count - received.count))
        turn += 1
        let n = buffer.withUnsafeMutableBytes { input.read(into: $0) }
        guard n > 0 else {
            Issue.record("read \(n) after \(received.count) of \(count): \(String(describing: input.streamError))")
            break
        }
        received += buffer[..<n]
    }
    return received
}

/// A relay on loopback for one connection that alters a record in transit when told to: it
/// flips a byte (the eleventh, inside the record's ciphertext) of the next bytes the client
/// sends. Everything else passes as it is, each direction ended when its sender ends.
final class FlippingProxy: Sendable {
    let port: UInt16
    let flipNext = Atomic(false)
    private let listener: Int32

    init(to target: UInt16) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && listen(fd, 1) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard fd >= 0, bound else { throw SluiceError(.system(.current), operation: "listen", subject: "proxy") }
        listener = fd
        port = UInt16(bigEndian: address.sin_port)
        Thread.detachNewThread { [self] in relay(to: target) }
    }

    deinit { close(listener) }

    private func relay(to target: UInt16) {
        let client = accept(listener, nil, nil)
        let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer {
            close(client)
            close(server)
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = target.bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        guard client >= 0, connected else { return }
        var open = [true, true]
        var buffer = [UInt8](repeating: 0, count: 65536)
        while open[0] || open[1] {
            var fds = [
                pollfd(fd: open[0] ? client : -1, events: Int16(POLLIN), revents: 0),
                pollfd(fd: open[1] ? server : -1, events: Int16(POLLIN), revents: 0),
            ]
            guard poll(&fds, 2, 30_000) > 0 else { return }
            for side in 0..<2 where open[side] && fds[side].revents != 0 {
                let (from, to) = side == 0 ? (client, server) : (server, client)
                let n = buffer.withUnsafeMutableBytes { read(from, $0.baseAddress, $0.count) }
                guard n > 0 else {
                    open[side] = false
                    shutdown(to, Int32(SHUT_WR))
                    continue
                }
                if side == 0, flipNext.exchange(false, ordering: .relaxed) { buffer[min(10, n - 1)] ^= 1 }
                var sent = 0
                while sent < n {
                    let m = buffer.withUnsafeBytes { write(to, $0.baseAddress! + sent, n - sent) }
                    guard m > 0 else { return }
                    sent += m
                }
            }
        }
    }
}

/// sluice's own record layer against OpenSSL's, over real sockets.
@Suite(.serialized, .ownThreads) struct TLSInteropTests {
    /// The AES-GCM engines this CPU runs: each interop test runs with each.
    static let engines = AESGCMEngine.allCases.filter(\.isSupported)
    /// For `s_client`, which prefers ChaCha20 to AES-128 when its AES-256 is not taken: each
    /// engine with AES-128-GCM, then ChaCha20-Poly1305 (always OpenSSL's).
    static let clientEngines = engines + [.openssl]
    static let clientSuites = engines.map { _ in "TLS_AES_128_GCM_SHA256" } + ["TLS_CHACHA20_POLY1305_SHA256"]

    /// A client with a throwaway certificate's server: `openssl s_server` sends 3 MiB (after
    /// its two session tickets, which are skipped) read in pieces and whole records, takes
    /// 3 MiB, and ends at our close_notify.
    @Test(arguments: engines) func againstOpenSSLServerWithACertificateAndTickets(aesGCM: AESGCMEngine) throws {
        try withTemporaryDirectory { dir in
            let status = try runProcess(
                "/usr/bin/openssl",
                [
                    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                    "\(dir)/k.pem", "-out", "\(dir)/c.pem", "-days", "1", "-subj", "/CN=peer",
                ]
            ).status
            #expect(status == 0)
            let port = try #require(freePort(SOCK_STREAM))
            let server = try OpenSSLPeer(
                [
                    "s_server", "-accept", "127.0.0.1:\(port)", "-cert", "\(dir)/c.pem", "-key", "\(dir)/k.pem",
                    "-naccept", "1", "-quiet", "-nbio", "-tls1_3",
                ], in: dir)
            #expect(waitUntil { OpenSSLPeer.listening(port) })
            let context = try clientContext {
                $0.verifiesPeer = false
                $0.aesGCM = aesGCM
            }
            let (input, output) = TLS.secure(Socket.connect(host: "127.0.0.1", port: port), context: context)
            input.open()
            output.open()
            let engine = try #require((input as? TLSReadStream)?.connection.engine)
            #expect(engine.records?.engine == aesGCM)
            let down = randomBytes(3 << 20, seed: 61)
            server.type(down)
            try #require(digest(readExactly(down.count, from: input, sizes: [1000, 70_000, 16384, 5])) == digest(down))
            let up = randomBytes(3 << 20, seed: 62)
            #expect(output.write(all: up))
            output.close()
            #expect(server.wait() == 0)
            #expect(digest(server.stdout) == digest(up))
            input.close()
        }
    }

    /// A server with a pre-shared key against `openssl s_client`: data both ways, the
    /// client's KeyUpdate with update_requested (its `K` command) applied to what it sends
    /// next, ours sent in answer and our later records read by it, and its close_notify the end.
    @Test(arguments: zip(clientEngines, clientSuites))
    func againstOpenSSLClientWithAKeyAndKeyUpdates(aesGCM: AESGCMEngine, suite: String) throws {
        try withTemporaryDirectory { dir in
            let key = [UInt8](repeating: 0x5a, count: 32)
            let listener = try Socket.listen(host: "127.0.0.1", port: 0)
            defer { listener.close() }
            let client = try Self.pskClient(port: listener.port, key: key, suite: suite, in: dir)
            let (input, output) = try Self.acceptPSK(listener, key: key, aesGCM: aesGCM)
            let engine = try #require((input as? TLSReadStream)?.connection.engine)
            let records = try #require(engine.records)
            #expect(engine.cipherName == suite)
            #expect(records.engine == aesGCM)
            let first = commandFreeBytes(1 << 20, seed: 71)
            client.type(first)
            try #require(digest(readExactly(first.count, from: input, sizes: [300_000, 999])) == digest(first))
            client.type(Array("K".utf8))
            try #require(waitUntil { client.stderr.contains("KEYUPDATE") }, "\(client.stderr)")
            let second = commandFreeBytes(1 << 20, seed: 72)
            client.type(second)
            try #require(digest(readExactly(second.count, from: input, sizes: [65536, 4000])) == digest(second))
            #expect(records.keyUpdates == 1)
            let reply = randomBytes(1 << 20, seed: 73)
            #expect(output.write(all: reply))
            try #require(waitUntil(.seconds(30)) { client.stdout.count >= reply.count }, "\(client.stderr)")
            #expect(digest(client.stdout) == digest(reply))
            client.endInput()
            var buffer = [UInt8](repeating: 0, count: 100)
            #expect(buffer.withUnsafeMutableBytes { input.read(into: $0) } == 0)
            #expect(input.streamError == nil)
            output.close()
            input.close()
            _ = client.wait()
        }
    }

    /// A record of `s_client`'s altered on the way (a relay flips a byte of it): sluice's
    /// server fails the connection with bad_record_mac and tells the client so in a fatal alert
    /// (RFC 8446 §5.2), which OpenSSL reads and reports.
    @Test(arguments: engines) func aRecordAlteredInTransitIsAnsweredWithAnAlert(aesGCM: AESGCMEngine) throws {
        try withTemporaryDirectory { dir in
            let key = [UInt8](repeating: 0x3c, count: 32)
            let listener = try Socket.listen(host: "127.0.0.1", port: 0)
            defer { listener.close() }
            let proxy = try FlippingProxy(to: listener.port)
            let client = try Self.pskClient(port: proxy.port, key: key, suite: "TLS_AES_128_GCM_SHA256", in: dir)
            let (input, output) = try Self.acceptPSK(listener, key: key, aesGCM: aesGCM)
            let first = commandFreeBytes(1000, seed: 81)
            client.type(first)
            try #require(digest(readExactly(first.count, from: input, sizes: [65536])) == digest(first))
            proxy.flipNext.store(true, ordering: .relaxed)
            client.type(commandFreeBytes(1000, seed: 82))
            var buffer = [UInt8](repeating: 0, count: 65536)
            #expect(buffer.withUnsafeMutableBytes { input.read(into: $0) } < 0)
            #expect("\(String(describing: input.streamError))".contains("bad_record_mac"))
            try #require(waitUntil(.seconds(20)) { client.stderr.contains("alert") }, "\(client.stderr)")
            #expect(client.stderr.contains("bad record mac"), "\(client.stderr)")
            output.close()
            input.close()
            _ = client.wait()
        }
    }

    /// `openssl s_client` with the pre-shared `key` (identity "interop"), TLS 1.3 only with
    /// `suite`, connecting to 127.0.0.1:`port`.
    static func pskClient(port: UInt16, key: [UInt8], suite: String, in dir: String) throws -> OpenSSLPeer {
        let hex = key.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
        return try OpenSSLPeer(
            [
                "s_client", "-connect", "127.0.0.1:\(port)", "-psk", hex, "-psk_identity", "interop", "-tls1_3",
                "-ciphersuites", suite, "-quiet", "-no_ign_eof",
            ], in: dir)
    }

    /// The listener's next connection, secured as a server with the pre-shared `key` and the
    /// `aesGCM` engine; the streams open.
    static func acceptPSK(_ listener: SocketListener, key: [UInt8], aesGCM: AESGCMEngine) throws -> (
        ReadStream, WriteStream
    ) {
        var settings = TLSSettings(role: .server)
        settings.preSharedKey = PreSharedKey(key: key, identity: "interop")
        settings.aesGCM = aesGCM
        let context = try TLSContext(settings)
        let (socketIn, socketOut, _) = try listener.accept(timeout: .seconds(20))
        let (input, output) = TLS.secure((socketIn, socketOut), context: context)
        input.open()
        output.open()
        return (input, output)
    }
}
