import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension ReceiverProcess {
    /// The pairing code from `sluice: code: CODE`, waiting up to 10 s.
    func code() throws -> String {
        guard waitUntil(.seconds(10), { self.stderrText.contains("code: ") }),
            let match = stderrText.firstMatch(of: /code: ([0-9A-Za-z-]+)\n/)
        else { throw ReceiverError(message: "no code printed: \(stderrText)") }
        return String(match.output.1)
    }
}

@Suite(.ownThreads) struct TransferAuthTests {
    @Test func aPairingCodeAuthenticatesAndAWrongOneIsRefusedWith77() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            let data = randomBytes(300_000)
            try write(data, to: "\(dir)/a.bin")
            let receiver = try ReceiverProcess(["--dir", inbox], pairingCode: true)
            let code = try receiver.code()
            let address = try receiver.address()
            // A wrong code: the handshake fails, exit 77, nothing arrives, the receiver goes on.
            try writeSecret("0000-0000-0000-0000-0000-0000-0000", to: "\(dir)/typo")
            let typo = try sluice("send", "--code-file", "\(dir)/typo", "\(dir)/a.bin", address)
            #expect(typo.status == 64, "\(typo.stderrText)")
            let other = try ReceiverProcess(["--dir", inbox, "--once"], pairingCode: true)
            let wrongCode = try other.code()
            other.signal(SIGTERM)
            _ = other.wait()
            try writeSecret(wrongCode + "\n", to: "\(dir)/wrong")
            let wrong = try sluice("send", "--code-file", "\(dir)/wrong", "\(dir)/a.bin", address)
            #expect(wrong.status == 77, "\(wrong.stderrText)")
            #expect(wrong.stderrLines.count == 1)
            #expect(directoryEntries(inbox).isEmpty)
            // The right code, typed in lower case: stored.
            try writeSecret(code.lowercased(), to: "\(dir)/right")
            let right = try sluice("send", "--code-file", "\(dir)/right", "\(dir)/a.bin", address)
            #expect(right.status == 0, "\(right.stderrText)")
            #expect(contents("\(inbox)/a.bin") == data)
            receiver.signal(SIGINT)
            let ended = receiver.wait()
            #expect(ended.stderr.contains("authentication failed"), "\(ended.stderr)")
        }
    }

    @Test func aCodeFileOrKeyFileOthersMayReadOrWriteIsRefusedWith66() throws {
        try withTemporaryDirectory { dir in
            try write(randomBytes(1000), to: "\(dir)/a.bin")
            try writeSecret("ABCD-EFGH-JKMN-PQRS-TVWX-YZ23-4567", to: "\(dir)/code")
            #expect(try sluice("keygen", "\(dir)/key").status == 0)
            for (mode, how) in [(0o644, "readable"), (0o640, "readable"), (0o604, "readable"), (0o620, "writable")] {
                chmod("\(dir)/code", mode_t(mode))
                // Refused before anything is sent: no receiver needed.
                let sent = try sluice("send", "--code-file", "\(dir)/code", "\(dir)/a.bin", "127.0.0.1:9")
                #expect(sent.status == 66, "\(sent.stderrText)")
                #expect(
                    sent.stderrText
                        == "sluice: code file \(dir)/code: \(how) by others (mode 0\(String(mode, radix: 8)); chmod 600 it)\n"
                )
                chmod("\(dir)/key", mode_t(mode))
                let keyed = try sluice("send", "--key-file", "\(dir)/key", "\(dir)/a.bin", "127.0.0.1:9")
                #expect(keyed.status == 66, "\(keyed.stderrText)")
                #expect(
                    keyed.stderrText
                        == "sluice: key file \(dir)/key: \(how) by others (mode 0\(String(mode, radix: 8)); chmod 600 it)\n"
                )
            }
        }
    }

    @Test func aKeyFileOnBothSidesWorksAndACodeOnTheCommandLineIsAUsageError() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            #expect(try sluice("keygen", "\(dir)/key").status == 0)
            #expect(try sluice("keygen", "\(dir)/key").status == 73)
            let data = randomBytes(100_000, seed: 4)
            try write(data, to: "\(dir)/b.bin")
            let receiver = try ReceiverProcess(["--key-file", "\(dir)/key", "--dir", inbox, "--once"])
            #expect(!receiver.stderrText.contains("code:"))
            let address = try receiver.address()
            let onArgv = try sluice("send", "--code=ABCD", "\(dir)/b.bin", address)
            #expect(onArgv.status == 64)
            #expect(onArgv.stderrText.contains("other users"))
            let sent = try sluice("send", "--key-file", "\(dir)/key", "\(dir)/b.bin", address)
            #expect(sent.status == 0, "\(sent.stderrText)")
            #expect(receiver.wait().status == 0)
            #expect(contents("\(inbox)/b.bin") == data)
        }
    }

    @Test func aPlaintextPeerGetsNothingAndInsecureNeedsBothSides() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            let data = randomBytes(50_000, seed: 9)
            try write(data, to: "\(dir)/c.bin")
            let receiver = try ReceiverProcess(["--dir", inbox], pairingCode: true)
            let port = try receiver.port()
            // nc speaks plaintext sluice (the magic and a HELLO) to a TLS receiver: nothing is
            // written, no answer in clear.
            let nc = try Running(URL(fileURLWithPath: "/usr/bin/env"), ["nc", "-N", "127.0.0.1", "\(port)"])
            nc.write(Data("SLUICE\r\n".utf8) + Data([1, 0, 0, 0, 10, 0, 1, 1, 6]) + Data("sha256".utf8))
            let ncOut = nc.wait(within: .seconds(20))
            #expect(!String(decoding: ncOut.stdout, as: UTF8.self).contains("SLUICE"))
            // --insecure on the sender alone: the TLS receiver refuses it.
            let half = try sluice("send", "--insecure", "--timeout", "5", "\(dir)/c.bin", "127.0.0.1:\(port)")
            #expect(half.status != 0)
            #expect(directoryEntries(inbox).isEmpty)
            receiver.signal(SIGINT)
            _ = receiver.wait()
            // --insecure on both: plaintext on loopback, with a warning on each side.
            let plain = try ReceiverProcess(["--insecure", "--dir", inbox, "--once"])
            let sent = try sluice("send", "--insecure", "\(dir)/c.bin", try plain.address())
            #expect(sent.status == 0)
            #expect(sent.stderrText.contains("--insecure"))
            let ended = plain.wait()
            #expect(ended.status == 0)
            #expect(ended.stderr.contains("--insecure"))
            #expect(contents("\(inbox)/c.bin") == data)
        }
    }

    /// Over TLS, a receiver serving all the senders it allows tells the next one so once it has
    /// authenticated (a stranger could not take its slot meanwhile): that sender exits 69 at
    /// once and says the receiver is busy, and once the first session ends the next send is
    /// stored.
    @Test func aBusyReceiverTurnsASenderAwayAtOnceOverTLS() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            // Over 1 MiB: not sent whole, so it is opened under its temporary name at once.
            try write(randomBytes(2_000_000, seed: 44), to: "\(dir)/slow.bin")
            let data = randomBytes(1000, seed: 45)
            try write(data, to: "\(dir)/next.bin")
            let receiver = try ReceiverProcess(["--dir", inbox, "--max-sessions", "1"])
            let address = try receiver.address()
            let slow = try Running(sluiceBinary, ["send", "--rate-limit", "2K", "\(dir)/slow.bin", address])
            #expect(waitUntil(.seconds(30)) { fileSize("\(inbox)/.slow.bin.sluice-part") != nil })
            let turnedAway = try Running(sluiceBinary, ["send", "\(dir)/next.bin", address]).wait(within: .seconds(20))
            #expect(turnedAway.status == 69, "\(turnedAway.stderrText)")
            #expect(
                turnedAway.stderrText.contains("busy: this receiver serves 1 sessions at once"),
                "\(turnedAway.stderrText)")
            slow.signal(SIGINT)
            _ = slow.wait()
            #expect(waitUntil { receiver.stderrText.contains("in the middle of a file") }, "\(receiver.stderrText)")
            let sent = try Running(sluiceBinary, ["send", "\(dir)/next.bin", address]).wait(within: .seconds(20))
            #expect(sent.status == 0, "\(sent.stderrText)")
            #expect(contents("\(inbox)/next.bin") == data)
            _ = receiver.stop()
        }
    }

    /// Connections that never finish a handshake (here: never say a word, past a one-second
    /// --timeout) count against their address like wrong keys: after five, the address is
    /// shut out, and even a sender with the key is turned away for the rest of the minute.
    @Test func handshakesThatTimeOutShutTheAddressOut() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            try write(randomBytes(100, seed: 46), to: "\(dir)/x.bin")
            let receiver = try ReceiverProcess(["--dir", inbox, "--timeout", "1"])
            let port = try receiver.port()
            var held: [Int32] = []
            defer { for fd in held { close(fd) } }
            for _ in 0..<5 {
                if let fd = connectToLoopback(port: port) { held.append(fd) }
            }
            #expect(held.count == 5)
            let timedOut = waitUntil(.seconds(30)) {
                receiver.stderrText.components(separatedBy: "timed out").count - 1 >= 5
            }
            #expect(timedOut, "\(receiver.stderrText)")
            let sent = try Running(sluiceBinary, ["send", "\(dir)/x.bin", "127.0.0.1:\(port)"]).wait(
                within: .seconds(20))
            #expect(sent.status == 69, "\(sent.stderrText)")
            #expect(directoryEntries(inbox).isEmpty)
            _ = receiver.stop()
        }
    }

    /// `receive --once` serves one sender: a connection that closes before its handshake (a
    /// port scan) and one with a wrong code are not that sender, and the receiver waits on
    /// for the one with the code, then exits with its status.
    @Test func onceIsNotUsedUpByAStrangerOrAWrongCode() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            let data = randomBytes(20_000, seed: 47)
            try write(data, to: "\(dir)/a.bin")
            let receiver = try ReceiverProcess(["--dir", inbox, "--once"], pairingCode: true)
            let code = try receiver.code()
            let port = try receiver.port()
            let scan = try #require(connectToLoopback(port: port))
            close(scan)
            #expect(
                waitUntil { receiver.stderrText.contains("before it began the handshake") }, "\(receiver.stderrText)")
            let other = try ReceiverProcess(["--dir", inbox, "--once"], pairingCode: true)
            let wrongCode = try other.code()
            other.signal(SIGTERM)
            _ = other.wait()
            try writeSecret(wrongCode + "\n", to: "\(dir)/wrong")
            let wrong = try sluice("send", "--code-file", "\(dir)/wrong", "\(dir)/a.bin", "127.0.0.1:\(port)")
            #expect(wrong.status == 77, "\(wrong.stderrText)")
            try writeSecret(code + "\n", to: "\(dir)/right")
            let right = try sluice("send", "--code-file", "\(dir)/right", "\(dir)/a.bin", "127.0.0.1:\(port)")
            #expect(right.status == 0, "\(right.stderrText)")
            let ended = receiver.wait()
            #expect(ended.status == 0, "\(ended.stderr)")
            #expect(contents("\(inbox)/a.bin") == data)
        }
    }
}
