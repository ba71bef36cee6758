import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `sluice send --streams N` and `sluice receive --once` / `--no-streams` as programs.
@Suite(.ownThreads) struct TransferStreamsCommandTests {
    /// A tree with a file large enough to be sent in ranges, and small ones.
    func makeTree(_ dir: String) throws -> Data {
        try FileManager.default.createDirectory(atPath: "\(dir)/tree/sub", withIntermediateDirectories: true)
        let big = randomBytes(3_000_000, seed: 5)
        try write(big, to: "\(dir)/tree/big.bin")
        try write(randomBytes(12_345, seed: 6), to: "\(dir)/tree/sub/a")
        try write(randomBytes(10, seed: 7), to: "\(dir)/tree/sub/b")
        return big
    }

    @Test func aTreeOverFourStreamsToReceiveOnce() throws {
        try withTemporaryDirectory { dir in
            _ = try makeTree(dir)
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: false)
            let receiver = try ReceiverProcess(["--dir", inbox, "--once", "--stats=json"])
            let send = try sluice(
                "send", "-q", "--streams", "4", "--stats=json", "\(dir)/tree", try receiver.address())
            #expect(send.status == 0, "\(send.stderrText)")
            let sent = try #require(lastJSONObject(send.stderrText))
            #expect(sent["streams"] as? Int == 4, "\(sent)")
            #expect((sent["stream_bytes"] as? [Int])?.allSatisfy { $0 > 500_000 } == true, "\(sent)")
            let received = receiver.wait()
            #expect(received.status == 0, "\(received.stderr)")
            #expect(try treesIdentical("\(dir)/tree", "\(inbox)/tree"))
            // One line per file (not per range), and all four connections were served.
            #expect(received.stderr.components(separatedBy: "stored tree/big.bin").count == 2, "\(received.stderr)")
            let stats = try #require(lastJSONObject(received.stderr))
            #expect(stats["sessions"] as? Int == 4, "\(stats)")
            #expect(stats["files"] as? Int == 3, "\(stats)")
        }
    }

    @Test func theOneTimeCodeAdmitsEveryConnectionOfTheTransfer() throws {
        try withTemporaryDirectory { dir in
            _ = try makeTree(dir)
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: false)
            let receiver = try ReceiverProcess(["--dir", inbox, "--once", "--stats=json"], pairingCode: true)
            try writeSecret(try receiver.code(), to: "\(dir)/code")
            // Three TLS handshakes with the key from the one code, one transfer.
            let send = try sluice(
                "send", "-q", "-P", "3", "--code-file", "\(dir)/code", "\(dir)/tree", try receiver.address())
            #expect(send.status == 0, "\(send.stderrText)")
            let received = receiver.wait()
            #expect(received.status == 0, "\(received.stderr)")
            #expect(try treesIdentical("\(dir)/tree", "\(inbox)/tree"))
            let stats = try #require(lastJSONObject(received.stderr))
            #expect(stats["sessions"] as? Int == 3, "\(stats)")
        }
    }

    @Test func aReceiverWithoutStreamsGetsOneConnection() throws {
        try withTemporaryDirectory { dir in
            _ = try makeTree(dir)
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: false)
            let receiver = try ReceiverProcess(["--dir", inbox, "--once", "--no-streams", "--stats=json"])
            let send = try sluice("send", "-P", "4", "\(dir)/tree", try receiver.address())
            #expect(send.status == 0, "\(send.stderrText)")
            #expect(send.stderrText.contains("does not offer parallel streams: sending over one connection"))
            let received = receiver.wait()
            #expect(received.status == 0, "\(received.stderr)")
            #expect(try treesIdentical("\(dir)/tree", "\(inbox)/tree"))
            let stats = try #require(lastJSONObject(received.stderr))
            #expect(stats["sessions"] as? Int == 1, "\(stats)")
        }
    }

    @Test func tooManyStreamsForTheReceiverIsBusy() throws {
        try withTemporaryDirectory { dir in
            _ = try makeTree(dir)
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: false)
            let receiver = try ReceiverProcess(["--dir", inbox, "--max-sessions", "2"])
            let send = try sluice("send", "--streams", "3", "\(dir)/tree", try receiver.address())
            #expect(send.status == 69, "\(send.stderrText)")
            #expect(send.stderrLines.last?.contains("busy: 3 connections asked") == true, "\(send.stderrText)")
            #expect(directoryEntries(inbox) == [])
            _ = receiver.stop()
        }
    }

    @Test func streamsUsageErrors() throws {
        for value in ["0", "65", "x", ""] {
            let outcome = try sluice("send", "--streams", value, "a", "h:1")
            #expect(outcome.status == 64, "\(value)")
            #expect(outcome.stderrLines.count == 1, "\(value): \(outcome.stderrText)")
        }
    }
}
