import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A `tls-listen:` copy serves only a client that authenticates by what its options name — a
/// key file, a pairing code, a pin or a CA — and waits on past every other connection (a port
/// scan, plaintext, TLS 1.2, the wrong key), one line each.
@Suite(.ownThreads) struct TLSListenerAuthTests {
    /// `sluice copy ARGUMENTS` with a `tls-listen:127.0.0.1:PORT,OPTIONS` endpoint, once it
    /// listens; and the port.
    static func listener(_ arguments: (String) -> [String], environment: [String: String] = [:]) throws -> (
        WatchedProcess, UInt16
    ) {
        let port = try freePort()
        let process = try WatchedProcess(sluiceBinary, arguments("tls-listen:127.0.0.1:\(port)"))
        #expect(waitUntil { isListening(port: port) || !process.process.isRunning }, "\(process.stderrText)")
        return (process, port)
    }

    @Test(arguments: ["source", "destination"])
    func aKeyFileListenerServesOnlyTheClientWithTheKey(_ role: String) throws {
        try withTemporaryDirectory { dir in
            #expect(try sluice("keygen", "\(dir)/key").status == 0)
            #expect(try sluice("keygen", "\(dir)/other").status == 0)
            let data = randomBytes(500_000, seed: 81)
            try write(data, to: "\(dir)/in")
            let sending = role == "destination"
            let (listener, port) = try Self.listener { endpoint in
                let end = endpoint + ",key-file=\(dir)/key"
                return sending ? ["copy", "\(dir)/in", end] : ["copy", end, "\(dir)/out"]
            }
            #expect(!listener.stderrText.contains("any client is served"))
            let client = { (key: String) throws -> Outcome in
                let end = "tls:127.0.0.1:\(port),key-file=\(dir)/\(key)"
                return try sluice(sending ? ["copy", end, "\(dir)/out"] : ["copy", "\(dir)/in", end])
            }
            // A port scan, plaintext, TLS 1.2, then the wrong key: each refused, the listener waits on.
            if let fd = connectToLoopback(port: port) { close(fd) }
            _ = try peer(URL(fileURLWithPath: "/usr/bin/nc"), ["-N", "127.0.0.1", "\(port)"], stdin: "\(dir)/key")
            _ = try peer(
                opensslBinary, ["s_client", "-connect", "127.0.0.1:\(port)", "-tls1_2", "-quiet"], stdin: "/dev/null")
            let wrong = try client("other")
            #expect(wrong.status == 77, "\(wrong.stderrText)")
            #expect(waitUntil { listener.stderrText.components(separatedBy: "TLS handshake").count - 1 == 4 })
            #expect(listener.process.isRunning)
            #expect(!FileManager.default.fileExists(atPath: "\(dir)/out"))
            let right = try client("key")
            #expect(right.status == 0, "\(right.stderrText)")
            let ended = listener.wait()
            #expect(ended.status == 0, "\(ended.stderr)")
            #expect(contents("\(dir)/out") == data)
            // One line for each connection turned away, and nothing else.
            let lines = ended.stderr.split(separator: "\n")
            #expect(lines.count == 4, "\(ended.stderr)")
            #expect(lines.allSatisfy { $0.hasPrefix("sluice: tls-listen:127.0.0.1:\(port),key-file=") })
        }
    }

    @Test func aPairingCodeListenerPrintsTheCodeAndTheClientReadsIt() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(200_000, seed: 82)
            try write(data, to: "\(dir)/in")
            let (listener, port) = try Self.listener { ["copy", "\(dir)/in", $0 + ",code=1"] }
            #expect(waitUntil { listener.stderrText.contains("code: ") })
            let code = try #require(listener.stderrText.firstMatch(of: /code: ([0-9A-Z-]+)\n/)).output.1
            // Another code (well formed, its own check digits) is the wrong key: 77.
            let other = try Self.listener { ["copy", "/dev/null", $0 + ",code=1"] }.0
            #expect(waitUntil { other.stderrText.contains("code: ") })
            let otherCode = try #require(other.stderrText.firstMatch(of: /code: ([0-9A-Z-]+)\n/)).output.1
            other.process.terminate()
            try writeSecret(String(otherCode) + "\n", to: "\(dir)/wrong")
            let wrong = try sluice(["copy", "tls:127.0.0.1:\(port),code-file=\(dir)/wrong", "\(dir)/out"])
            #expect(wrong.status == 77, "\(wrong.stderrText)")
            let running = try Running(
                sluiceBinary, ["copy", "tls:127.0.0.1:\(port),code=1", "\(dir)/out"],
                environment: ["SLUICE_CODE": String(code)])
            let right = running.wait(within: .seconds(30))
            #expect(right.status == 0, "\(right.stderrText)")
            #expect(listener.wait().status == 0)
            #expect(contents("\(dir)/out") == data)
        }
    }

    /// `pin=` on a listener is the client's key: a client showing that certificate is served;
    /// one with another certificate, or none, is refused and the listener waits on, nothing
    /// stored. (In TLS 1.3 a client checked by certificate finishes its handshake before the
    /// server checks it: such a client learns of the refusal only from the alert that follows,
    /// so its own status is not what this test looks at.)
    @Test func aPinnedListenerServesOnlyTheClientWithThatKey() throws {
        try withTemporaryDirectory { dir in
            let pin = try makeCertificates(in: dir)
            let data = randomBytes(200_000, seed: 83)
            try write(data, to: "\(dir)/in")
            let (listener, port) = try Self.listener { ["copy", $0 + ",pin=\(pin)", "\(dir)/out"] }
            _ = try sluice(["copy", "\(dir)/in", "tls:127.0.0.1:\(port),verify=0"])
            _ = try sluice([
                "copy", "\(dir)/in", "tls:127.0.0.1:\(port),verify=0,cert=\(dir)/ca.pem,key=\(dir)/ca.key",
            ])
            #expect(waitUntil { listener.stderrText.components(separatedBy: "TLS handshake").count - 1 == 2 })
            #expect(!FileManager.default.fileExists(atPath: "\(dir)/out"))
            let right = try sluice([
                "copy", "\(dir)/in", "tls:127.0.0.1:\(port),verify=0,cert=\(dir)/srv.pem,key=\(dir)/srv.key",
            ])
            #expect(right.status == 0, "\(right.stderrText)")
            #expect(listener.wait().status == 0)
            #expect(contents("\(dir)/out") == data)
        }
    }

    /// `cafile=` on a listener checks the client's certificate against it.
    @Test func aListenerWithACAFileServesOnlyACertifiedClient() throws {
        try withTemporaryDirectory { dir in
            _ = try makeCertificates(in: dir)
            let data = randomBytes(200_000, seed: 84)
            try write(data, to: "\(dir)/in")
            let (listener, port) = try Self.listener { ["copy", $0 + ",cafile=\(dir)/ca.pem", "\(dir)/out"] }
            // A self-signed certificate the CA did not sign.
            try openssl([
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                "\(dir)/self.key", "-out", "\(dir)/self.pem", "-days", "1", "-subj", "/CN=stranger",
            ])
            _ = try sluice([
                "copy", "\(dir)/in", "tls:127.0.0.1:\(port),verify=0,cert=\(dir)/self.pem,key=\(dir)/self.key",
            ])
            #expect(waitUntil { listener.stderrText.contains("TLS handshake") }, "\(listener.stderrText)")
            #expect(!FileManager.default.fileExists(atPath: "\(dir)/out"))
            let right = try sluice([
                "copy", "\(dir)/in", "tls:127.0.0.1:\(port),verify=0,cert=\(dir)/srv.pem,key=\(dir)/srv.key",
            ])
            #expect(right.status == 0, "\(right.stderrText)")
            #expect(listener.wait().status == 0)
            #expect(contents("\(dir)/out") == data)
        }
    }

    @Test func aListenerThatChecksNoClientSaysSo() throws {
        try withTemporaryDirectory { dir in
            let (listener, port) = try Self.listener { ["copy", "/dev/null", $0] }
            #expect(waitUntil { listener.stderrText.contains("any client is served") }, "\(listener.stderrText)")
            if let fd = connectToLoopback(port: port) { close(fd) }
            #expect(waitUntil { listener.stderrText.contains("before it began the handshake") })
            #expect(listener.process.isRunning, "a port scan does not end the copy")
            listener.process.terminate()
            #expect(listener.wait().status == 143)
            _ = dir
        }
    }
}
