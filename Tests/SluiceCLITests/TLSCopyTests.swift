import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A program whose stderr is read as it comes, to wait for a line such as `pin sha256:…`.
final class WatchedProcess: @unchecked Sendable {
    let process = Process()
    private let errors = Pipe()
    private let lock = NSLock()
    private var errData = Data()
    private let done = DispatchGroup()
    let input = Pipe()

    init(_ executable: URL = sluiceBinary, _ arguments: [String], stdin: String? = nil, stdout: String? = nil) throws {
        precondition(brokenPipesIgnored)
        process.executableURL = executable
        process.arguments = arguments
        process.standardInput = stdin.map { FileHandle(forReadingAtPath: $0)! } ?? input
        if let stdout {
            _ = FileManager.default.createFile(atPath: stdout, contents: nil)
            process.standardOutput = FileHandle(forWritingAtPath: stdout)!
        } else {
            process.standardOutput = FileHandle.nullDevice
        }
        process.standardError = errors
        try process.run()
        done.enter()
        let handle = errors.fileHandleForReading
        Thread.detachNewThread { [self] in
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                lock.withLock { errData.append(chunk) }
            }
            done.leave()
        }
    }

    deinit { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }

    var stderrText: String { lock.withLock { String(decoding: errData, as: UTF8.self) } }

    /// The `pin sha256:HEX` a TLS listener prints once it listens, waiting up to 10 s.
    func pin() throws -> String {
        for _ in 0..<1000 {
            if let match = stderrText.firstMatch(of: /pin (sha256:[0-9a-f]{64})\n/) { return String(match.output.1) }
            if !process.isRunning { break }
            usleep(10_000)
        }
        throw ReceiverError(message: "no pin printed: \(stderrText)")
    }

    /// Waits for the exit (at most `seconds`, then SIGKILL).
    func wait(seconds: Double = 60) -> (status: Int32, stderr: String) {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        done.wait()
        return (process.terminationStatus, stderrText)
    }
}

let opensslBinary = URL(fileURLWithPath: "/usr/bin/openssl")
let socatBinary = URL(fileURLWithPath: "/usr/bin/socat")

/// Runs `openssl ARGS` to its end; throws if it fails.
func openssl(_ arguments: [String]) throws {
    let outcome = try Running(opensslBinary, arguments).wait()
    guard outcome.status == 0 else { throw ReceiverError(message: "openssl \(arguments): \(outcome.stderrText)") }
}

/// A CA (`ca.pem`) and a server certificate it signed for localhost and 127.0.0.1
/// (`srv.pem`, `srv.key`) in `dir`; returns the server key's pin.
func makeCertificates(in dir: String) throws -> String {
    try openssl([
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "\(dir)/ca.key",
        "-out", "\(dir)/ca.pem", "-days", "2", "-subj", "/CN=sluice test CA",
    ])
    try openssl([
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "\(dir)/srv.key", "-out",
        "\(dir)/srv.csr", "-subj", "/CN=localhost",
    ])
    try Data("subjectAltName=DNS:localhost,IP:127.0.0.1\n".utf8).write(to: URL(fileURLWithPath: "\(dir)/ext.cnf"))
    try openssl([
        "x509", "-req", "-in", "\(dir)/srv.csr", "-CA", "\(dir)/ca.pem", "-CAkey", "\(dir)/ca.key",
        "-CAcreateserial", "-out", "\(dir)/srv.pem", "-days", "2", "-extfile", "\(dir)/ext.cnf",
    ])
    // The pin as the manual page says to compute it.
    let shell = try Running(
        URL(fileURLWithPath: "/bin/sh"),
        [
            "-c",
            "openssl x509 -in '\(dir)/srv.pem' -pubkey -noout | openssl pkey -pubin -outform der | sha256sum",
        ]
    ).wait()
    return "sha256:" + shell.stdoutText.prefix(64)
}

/// Runs a peer that connects to a listener which is up (it printed its pin): once.
func peer(_ executable: URL, _ arguments: [String], stdin: String) throws -> (status: Int32, stderr: String) {
    try WatchedProcess(executable, arguments, stdin: stdin).wait()
}

/// `sluice copy` over `tls:` / `tls-listen:` against itself, socat and openssl, both ways.
@Suite(.serialized, .ownThreads) struct TLSCopyTests {
    static let size = 64 << 20

    @Test func sluiceToSluiceWithAPinnedThrowawayCertificate() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(Self.size, seed: 21)
            try write(data, to: "\(dir)/in")
            let listener = try WatchedProcess(
                sluiceBinary, ["copy", "--stats=json", "tls-listen:127.0.0.1:\(try freePort())", "\(dir)/out"])
            let pin = try listener.pin()
            let port = listener.process.arguments![2].split(separator: ":").last!
            let client = try sluice(["copy", "--stats=json", "\(dir)/in", "tls:127.0.0.1:\(port),pin=\(pin)"])
            #expect(client.status == 0, "\(client.stderrText)")
            let server = listener.wait()
            #expect(server.status == 0, "\(server.stderr)")
            #expect(contents("\(dir)/out") == data)
            let stats = try #require(lastJSONObject(client.stderrText))
            #expect(stats["tls_protocol"] as? String == "TLSv1.3")
            #expect((stats["tls_cipher"] as? String)?.hasPrefix("TLS_AES") == true)
        }
    }

    @Test func toSocatWithACAFileAndFromSocatToACertificateListener() throws {
        try withTemporaryDirectory { dir in
            _ = try makeCertificates(in: dir)
            let data = randomBytes(Self.size, seed: 22)
            try write(data, to: "\(dir)/in")
            // sluice → socat OPENSSL-LISTEN, the server checked against the CA and its name.
            let port = try freePort()
            let server = try WatchedProcess(
                socatBinary,
                [
                    "-u",
                    "OPENSSL-LISTEN:\(port),bind=127.0.0.1,reuseaddr,cert=\(dir)/srv.pem,key=\(dir)/srv.key,verify=0",
                    "CREATE:\(dir)/from-sluice",
                ])
            let sent = try sluiceWhenListening(
                port, ["copy", "\(dir)/in", "tls:localhost:\(port),cafile=\(dir)/ca.pem"])
            #expect(sent.status == 0, "\(sent.stderrText)")
            #expect(server.wait().status == 0)
            #expect(contents("\(dir)/from-sluice") == data)
            // socat OPENSSL: → sluice tls-listen with the CA-signed certificate.
            let listener = try WatchedProcess(
                sluiceBinary,
                [
                    "copy", "tls-listen:127.0.0.1:\(try freePort()),cert=\(dir)/srv.pem,key=\(dir)/srv.key",
                    "\(dir)/to-sluice",
                ])
            _ = try listener.pin()
            let listenPort = listener.process.arguments![1].split(separator: ",")[0].split(separator: ":").last!
            let client = try peer(
                socatBinary, ["-u", "STDIN", "OPENSSL:127.0.0.1:\(listenPort),cafile=\(dir)/ca.pem"], stdin: "\(dir)/in"
            )
            #expect(client.status == 0, "\(client.stderr)")
            let received = listener.wait()
            #expect(received.status == 0, "\(received.stderr)")
            #expect(contents("\(dir)/to-sluice") == data)
        }
    }

    /// Certificates (`makeCertificates`) and `size` random bytes in `DIR/in` without line ends,
    /// which openssl's s_server and s_client would take as commands ("K\n" and such).
    static func certificatesAndLineFreeInput(in dir: String, seed: UInt64) throws -> (pin: String, data: Data) {
        let pin = try makeCertificates(in: dir)
        let data = Data(randomBytes(size, seed: seed).map { $0 == 0x0A || $0 == 0x0D ? 0x20 : $0 })
        try write(data, to: "\(dir)/in")
        return (pin, data)
    }

    @Test func toAnOpenSSLClientAndTheManPagePinOfARealKey() throws {
        try withTemporaryDirectory { dir in
            let (pin, data) = try Self.certificatesAndLineFreeInput(in: dir, seed: 23)
            // sluice → socat OPENSSL-LISTEN, pinned to the real key as the manual page computes it.
            let port = try freePort()
            let server = try WatchedProcess(
                socatBinary,
                [
                    "-u",
                    "OPENSSL-LISTEN:\(port),bind=127.0.0.1,reuseaddr,cert=\(dir)/srv.pem,key=\(dir)/srv.key,verify=0",
                    "CREATE:\(dir)/pinned",
                ])
            let sent = try sluiceWhenListening(port, ["copy", "\(dir)/in", "tls:127.0.0.1:\(port),pin=\(pin)"])
            #expect(sent.status == 0, "\(sent.stderrText)")
            #expect(server.wait().status == 0)
            #expect(contents("\(dir)/pinned") == data)
            // openssl s_client sends the file to a sluice listener with a throwaway certificate.
            let listener = try WatchedProcess(
                sluiceBinary, ["copy", "tls-listen:127.0.0.1:\(try freePort())", "\(dir)/from-client"])
            _ = try listener.pin()
            let listenPort = listener.process.arguments![1].split(separator: ":").last!
            let client = try peer(
                opensslBinary,
                ["s_client", "-connect", "127.0.0.1:\(listenPort)", "-quiet", "-no_ign_eof", "-nocommands"],
                stdin: "\(dir)/in")
            #expect(client.status == 0, "\(client.stderr)")
            let outcome = listener.wait()
            #expect(outcome.status == 0, "\(outcome.stderr)")
            #expect(contents("\(dir)/from-client") == data)
        }
    }

    /// `openssl s_server` sends the file, sluice reads it over `tls:` pinned to the server's key.
    ///
    /// `-nbio`: in its default blocking mode s_server with a file on stdin deadlocks about one run
    /// in five against any client that only reads (socat `OPENSSL:` as well as sluice): when the
    /// ClientHello is already there at its first `select`, it reads stdin first, completes the
    /// handshake inside `SSL_write`, and then calls a blocking `SSL_read` on the socket readiness
    /// that the ClientHello had set, waiting for bytes the client never sends.
    @Test func fromAnOpenSSLServerPinnedToItsKey() throws {
        try withTemporaryDirectory { dir in
            let (pin, data) = try Self.certificatesAndLineFreeInput(in: dir, seed: 26)
            let port = try freePort()
            let server = try WatchedProcess(
                opensslBinary,
                [
                    "s_server", "-accept", "127.0.0.1:\(port)", "-cert", "\(dir)/srv.pem", "-key", "\(dir)/srv.key",
                    "-naccept", "1", "-quiet", "-nbio",
                ], stdin: "\(dir)/in")
            let received = try sluiceWhenListening(
                port, ["copy", "tls:127.0.0.1:\(port),pin=\(pin)", "\(dir)/from-server"])
            #expect(received.status == 0, "\(received.stderrText)")
            #expect(contents("\(dir)/from-server") == data)
            _ = server.wait(seconds: 10)
        }
    }

    /// Wrong pin, an untrusted self-signed certificate, a wrong name: 77, and the listening
    /// socat receives nothing.
    @Test(arguments: ["pin=sha256:" + String(repeating: "ab", count: 32), "verify=1", "cafile=CA,name=other.example"])
    func authenticationFailuresExit77BeforeAnyByteIsSent(_ option: String) throws {
        try withTemporaryDirectory { dir in
            _ = try makeCertificates(in: dir)
            try write(randomBytes(100_000, seed: 24), to: "\(dir)/in")
            let port = try freePort()
            let selfSigned = option == "verify=1"
            let cert = selfSigned ? "\(dir)/ca.pem" : "\(dir)/srv.pem"
            let key = selfSigned ? "\(dir)/ca.key" : "\(dir)/srv.key"
            let server = try WatchedProcess(
                socatBinary,
                [
                    "-u", "OPENSSL-LISTEN:\(port),bind=127.0.0.1,reuseaddr,cert=\(cert),key=\(key),verify=0",
                    "CREATE:\(dir)/received",
                ])
            let endpoint = "tls:127.0.0.1:\(port)," + option.replacingOccurrences(of: "CA", with: "\(dir)/ca.pem")
            let outcome = try sluiceWhenListening(port, ["copy", "\(dir)/in", endpoint])
            #expect(outcome.status == 77, "\(outcome.stderrText)")
            #expect(outcome.stderrLines.count == 1)
            #expect(outcome.stderrText.hasPrefix("sluice: TLS handshake"))
            _ = server.wait(seconds: 10)
            #expect((contents("\(dir)/received") ?? Data()).isEmpty)
        }
    }

    /// A TLS 1.2-only client and a plaintext client are dropped with one line each, and the
    /// listener waits on for a client that completes a TLS 1.3 handshake: only its bytes arrive.
    @Test(arguments: ["tls12", "plaintext"])
    func downgradeAndPlaintextClientsAreRefused(_ kind: String) throws {
        try withTemporaryDirectory { dir in
            try write(Data("hello over plaintext\n".utf8), to: "\(dir)/in")
            let data = randomBytes(100_000, seed: 27)
            try write(data, to: "\(dir)/good")
            let listener = try WatchedProcess(
                sluiceBinary, ["copy", "tls-listen:127.0.0.1:\(try freePort())", "\(dir)/out"])
            let pin = try listener.pin()
            let port = String(listener.process.arguments![1].split(separator: ":").last!)
            if kind == "tls12" {
                _ = try peer(
                    opensslBinary, ["s_client", "-connect", "127.0.0.1:\(port)", "-tls1_2", "-quiet"],
                    stdin: "\(dir)/in")
            } else {
                _ = try peer(URL(fileURLWithPath: "/usr/bin/nc"), ["-N", "127.0.0.1", port], stdin: "\(dir)/in")
            }
            let reason = kind == "tls12" ? "unsupported protocol" : "wrong version number"
            #expect(waitUntil { listener.stderrText.contains(reason) }, "\(listener.stderrText)")
            #expect(!FileManager.default.fileExists(atPath: "\(dir)/out"))
            let good = try sluice(["copy", "\(dir)/good", "tls:127.0.0.1:\(port),pin=\(pin)"])
            #expect(good.status == 0, "\(good.stderrText)")
            let outcome = listener.wait()
            #expect(outcome.status == 0, "\(outcome.stderr)")
            #expect(outcome.stderr.components(separatedBy: reason).count == 2, "\(outcome.stderr)")
            #expect(contents("\(dir)/out") == data)
        }
    }

    /// A client killed mid-transfer sends no close_notify: 74, nothing at the final name.
    @Test func connectionCutWithoutCloseNotifyExits74() throws {
        try withTemporaryDirectory { dir in
            let listener = try WatchedProcess(
                sluiceBinary, ["copy", "tls-listen:127.0.0.1:\(try freePort())", "\(dir)/out"])
            _ = try listener.pin()
            let port = String(listener.process.arguments![1].split(separator: ":").last!)
            let client = try WatchedProcess(
                opensslBinary, ["s_client", "-connect", "127.0.0.1:\(port)", "-quiet", "-nocommands"])
            client.input.fileHandleForWriting.write(randomBytes(200_000, seed: 25))
            // Wait until the listener has taken the connection and data (its temporary file grows).
            var waited = 0
            func received() -> Int {
                directoryEntries(dir).reduce(0) { $0 + (contents("\(dir)/\($1)")?.count ?? 0) }
            }
            while received() == 0 && waited < 1000 {
                usleep(10_000)
                waited += 1
            }
            kill(client.process.processIdentifier, SIGKILL)
            let outcome = listener.wait()
            #expect(outcome.status == 74, "\(outcome.stderr)")
            #expect(outcome.stderr.contains("close_notify"))
            #expect(!FileManager.default.fileExists(atPath: "\(dir)/out"))
        }
    }

    @Test func badOptionsAreUsageErrors() throws {
        for endpoint in [
            "tls:host:1,pin=sha256:12", "tls:host:1,verify=2", "tls:host:1,color=red", "tls:host:1,key=k",
            "tls:host:1,key-file=k,cafile=c", "tls:host:1,code=1,key-file=k", "tls:host:1,code=2",
            "tls-listen:1,code-file=/dev/null",
        ] {
            let outcome = try sluice(["copy", "/dev/null", endpoint])
            #expect(outcome.status == 64, "\(endpoint): \(outcome.stderrText)")
            #expect(outcome.stderrLines.count == 1, "\(endpoint): \(outcome.stderrText)")
        }
        let missing = try sluice(["copy", "/dev/null", "tls:127.0.0.1:1,cafile=/nonexistent/ca.pem"])
        #expect(missing.status == 66, "\(missing.stderrText)")
    }
}

/// Runs sluice once something listens on `port` (a peer server started just before).
private func sluiceWhenListening(_ port: some BinaryInteger, _ arguments: [String]) throws -> Outcome {
    #expect(waitUntil { isListening(port: UInt16(port)) })
    return try sluice(arguments)
}

@Suite(.ownThreads) struct TLSBenchTests {
    @Test func benchOverTLSNamesTheCipherAndAWrongPinExits77() throws {
        let server = try WatchedProcess(
            sluiceBinary, ["bench", "--listen", "127.0.0.1:\(try freePort())", "--tls", "--json"])
        let pin = try server.pin()
        let address = server.process.arguments![2]
        let wrong = try sluice([
            "bench", "--seconds", "0.2", "tls:\(address),pin=sha256:" + String(repeating: "0", count: 64),
        ])
        #expect(wrong.status == 77, "\(wrong.stderrText)")
        let outcome = try sluice(["bench", "--json", "--seconds", "0.3", "tls:\(address),pin=\(pin)"])
        #expect(outcome.status == 0, "\(outcome.stderrText)")
        let report = try #require(lastJSONObject(outcome.stdoutText))
        #expect(report["tls_protocol"] as? String == "TLSv1.3")
        #expect((report["tls_cipher"] as? String)?.hasPrefix("TLS_") == true)
        // -P: each connection makes its own handshake and checks the pin.
        let parallel = try sluice(["bench", "--json", "--seconds", "0.3", "-P", "3", "tls:\(address),pin=\(pin)"])
        #expect(parallel.status == 0, "\(parallel.stderrText)")
        let run = try #require(lastJSONObject(parallel.stdoutText))
        #expect((run["streams"] as? [[String: Any]])?.count == 3)
        #expect(run["tls_protocol"] as? String == "TLSv1.3")
        #expect(run["server_bytes"] as? Int == run["bytes"] as? Int)
        let wrongParallel = try sluice([
            "bench", "--seconds", "0.2", "-P", "2", "tls:\(address),pin=sha256:" + String(repeating: "0", count: 64),
        ])
        #expect(wrongParallel.status == 77, "\(wrongParallel.stderrText)")
        kill(server.process.processIdentifier, SIGINT)
        _ = server.wait(seconds: 10)
    }
}
