import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// An endpoint that checks nothing of its peer says so in one line on stderr: a `tls:` client
/// with `verify=0` and no pin, and a `tls-listen:` whose `cafile=` `verify=0` turns off, as a
/// listener with nothing to check its client by does.
@Suite(.ownThreads) struct TLSUnverifiedWarningTests {
    @Test func verifyZeroWarnsOnAClientAndOnAListener() throws {
        try withTemporaryDirectory { dir in
            let pin = try makeCertificates(in: dir)
            let data = randomBytes(100_000, seed: 171)
            try write(data, to: "\(dir)/in")
            let certificate = "cert=\(dir)/srv.pem,key=\(dir)/srv.key"
            // A listener with cafile= and verify=0 checks no client: it serves anyone, and says so.
            let (listener, port) = try TLSListenerAuthTests.listener {
                ["copy", $0 + ",\(certificate),cafile=\(dir)/ca.pem,verify=0", "\(dir)/out"]
            }
            #expect(waitUntil { listener.stderrText.contains("pin sha256:") }, "\(listener.stderrText)")
            let operand =
                "tls-listen:127.0.0.1:\(port),cert=\(dir)/srv.pem,key=\(dir)/srv.key,cafile=\(dir)/ca.pem,verify=0"
            #expect(
                listener.stderrText.hasPrefix(
                    "sluice: warning: \(operand): any client is served (verify=0, and no pin=, key-file= or code=1 "
                        + "to check it by)\n"), "\(listener.stderrText)")
            // A client with verify=0 and no pin= checks no server: it is warned, in one line.
            let client = try sluice(["copy", "\(dir)/in", "tls:127.0.0.1:\(port),verify=0"])
            #expect(client.status == 0, "\(client.stderrText)")
            #expect(
                client.stderrLines == [
                    "sluice: warning: tls:127.0.0.1:\(port),verify=0: the server is not verified (verify=0, and no "
                        + "pin= to check it by): whoever answers at that address is sent to or read from"
                ])
            #expect(listener.wait().status == 0)
            #expect(contents("\(dir)/out") == data)

            // With pin= the server is checked all the same, and with cafile= (verify=1) the
            // listener checks its client: neither warns.
            let (checking, checkingPort) = try TLSListenerAuthTests.listener {
                ["copy", $0 + ",\(certificate),cafile=\(dir)/ca.pem", "\(dir)/out2"]
            }
            #expect(waitUntil { checking.stderrText.contains("pin sha256:") }, "\(checking.stderrText)")
            let pinned = try sluice([
                "copy", "\(dir)/in", "tls:127.0.0.1:\(checkingPort),verify=0,pin=\(pin),\(certificate)",
            ])
            #expect(pinned.status == 0, "\(pinned.stderrText)")
            #expect(pinned.stderrText.isEmpty, "\(pinned.stderrText)")
            let ended = checking.wait()
            #expect(ended.status == 0, "\(ended.stderr)")
            #expect(!ended.stderr.contains("warning"), "\(ended.stderr)")
            #expect(contents("\(dir)/out2") == data)
        }
    }
}
