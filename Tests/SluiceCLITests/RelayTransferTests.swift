import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `send --relay` and `receive CODE` through a real `sluice relay` on loopback: trees, options,
/// several connections, and the code's one guess against a stranger who joins first.
@Suite("Transfers through a relay", .ownThreads) struct RelayTransferTests {
    /// A tree with a file of `size` random bytes, a small one below a directory, and an empty one.
    func makeTree(_ root: String, size: Int = 3 << 20) throws {
        try FileManager.default.createDirectory(atPath: root + "/sub", withIntermediateDirectories: true)
        try write(randomBytes(size, seed: 7), to: root + "/big.bin")
        try write(Data("small\n".utf8), to: root + "/sub/small.txt")
        try write(Data(), to: root + "/sub/empty")
    }

    @Test func aTreeGoesThroughTheRelayAndTheRelaySeesNeitherPlaintextNorAddresses() throws {
        try withTemporaryDirectory { dir in
            try makeTree(dir + "/src")
            try FileManager.default.createDirectory(atPath: dir + "/dst", withIntermediateDirectories: true)
            let relay = try RunningRelay()
            // Everything the relay receives and sends passes the proxy first.
            let proxy = try CapturingProxy(to: relay.port)
            let via = "127.0.0.1:\(proxy.port)"
            // --no-direct: every byte through the relay, to see what it sees.
            let (sender, code) = try relaySender(via, ["--no-direct", dir + "/src"])
            #expect(code.split(separator: "-").count == 4)
            let receiver = try LiveSluice(["receive", "--relay", via, "-C", dir + "/dst", code])
            let received = receiver.wait()
            let sent = sender.wait()
            #expect(received.status == 0, "\(received.stderr)")
            #expect(sent.status == 0, "\(sent.stderr)")
            #expect(try treesIdentical(dir + "/src", dir + "/dst/src"))
            let captured = proxy.captured
            #expect(captured.count > 3 << 20)
            // No 64-byte run of the file, no name, no address in any form a peer could send.
            let file = try #require(contents(dir + "/src/big.bin"))
            for offset in stride(from: 0, to: file.count - 64, by: file.count / 16) {
                #expect(captured.range(of: file[offset..<offset + 64]) == nil, "plaintext at \(offset)")
            }
            for needle in ["small.txt", "big.bin", "127.0.0.1", code] {
                #expect(captured.range(of: Data(needle.utf8)) == nil, "\(needle) in the relay's bytes")
            }
            #expect(captured.range(of: Data([127, 0, 0, 1])) == nil)
            _ = relay.stop()
        }
    }

    /// The addresses of this host's interfaces (`hostname -I`), as text and as raw bytes.
    func interfaceAddresses() throws -> [Data] {
        let run = Process()
        run.executableURL = URL(fileURLWithPath: "/bin/hostname")
        run.arguments = ["-I"]
        let pipe = Pipe()
        run.standardOutput = pipe
        try run.run()
        let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        run.waitUntilExit()
        var forms: [Data] = []
        for word in text.split(separator: " ") where !word.hasPrefix("fe80") {
            let host = word.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !host.isEmpty else { continue }
            forms.append(Data(host.utf8))
            var v4 = in_addr()
            var v6 = in6_addr()
            if inet_pton(AF_INET, host, &v4) == 1 { forms.append(withUnsafeBytes(of: &v4) { Data($0) }) }
            if inet_pton(AF_INET6, host, &v6) == 1 { forms.append(withUnsafeBytes(of: &v6) { Data($0) }) }
        }
        return forms
    }

    @Test func peersThatReachEachOtherGoDirectAndTheRelayCarriesOnlyTheMeeting() throws {
        try withTemporaryDirectory { dir in
            try makeTree(dir + "/src")
            try FileManager.default.createDirectory(atPath: dir + "/dst", withIntermediateDirectories: true)
            let relay = try RunningRelay()
            let proxy = try CapturingProxy(to: relay.port)
            let via = "127.0.0.1:\(proxy.port)"
            let (sender, code) = try relaySender(via, ["--streams", "2", dir + "/src"])
            let receiver = try LiveSluice(["receive", "--relay", via, "-C", dir + "/dst", code])
            let received = receiver.wait()
            let sent = sender.wait()
            #expect(received.status == 0, "\(received.stderr)")
            #expect(sent.status == 0, "\(sent.stderr)")
            #expect(received.stderr.contains("from the sender, directly"))
            #expect(sent.stderr.contains("sending directly to the receiver (2 connections)"))
            #expect(try treesIdentical(dir + "/src", dir + "/dst/src"))
            // The relay saw the hellos, the code exchange and the sealed offer and answer.
            let captured = proxy.captured
            #expect(captured.count < 2048, "\(captured.count) bytes through the relay")
            for form in try interfaceAddresses() {
                #expect(captured.range(of: form) == nil, "an address of the sender in the relay's bytes")
            }
            // With --no-relay on the receiver and a sender that offers no way in (--no-direct):
            // 69 on both sides, nothing stored.
            try FileManager.default.createDirectory(atPath: dir + "/none", withIntermediateDirectories: true)
            let (closed, second) = try relaySender(via, ["--no-direct", dir + "/src"])
            let refused = try LiveSluice(["receive", "--relay", via, "--no-relay", "-C", dir + "/none", second]).wait()
            #expect(refused.status == 69, "\(refused.stderr)")
            #expect(closed.wait().status == 69)
            #expect(directoryEntries(dir + "/none").isEmpty)
            // A receiver whose directory is missing says so before spending the code: 73.
            let missing = try LiveSluice(["receive", "--relay", via, "-C", dir + "/missing", second]).wait()
            #expect(missing.status == 73, "\(missing.stderr)")
            _ = relay.stop()
        }
    }

    @Test func syncCompressionAndSeveralConnectionsWorkThroughTheRelay() throws {
        try withTemporaryDirectory { dir in
            try makeTree(dir + "/src", size: 6 << 20)
            try FileManager.default.createDirectory(atPath: dir + "/dst", withIntermediateDirectories: true)
            let relay = try RunningRelay()
            let (sender, code) = try relaySender(
                relay.address, ["--no-direct", "-z", "--streams", "3", "--sync", dir + "/src"])
            let receiver = try LiveSluice([
                "receive", "--relay", relay.address, "--sync", "--stats=json", "-C", dir + "/dst", code,
            ])
            let received = receiver.wait()
            #expect(received.status == 0, "\(received.stderr)")
            #expect(sender.wait().status == 0)
            #expect(try treesIdentical(dir + "/src", dir + "/dst/src"))
            // A change, sent again with --sync: only the changed file goes.
            try write(Data("changed\n".utf8), to: dir + "/src/sub/small.txt")
            let (again, secondCode) = try relaySender(relay.address, ["--sync", "--itemize", dir + "/src"])
            #expect(secondCode != code)
            let second = try LiveSluice([
                "receive", "--relay", relay.address, "--sync", "-C", dir + "/dst", secondCode,
            ])
            #expect(second.wait().status == 0)
            let resent = again.wait()
            #expect(resent.status == 0)
            #expect(try treesIdentical(dir + "/src", dir + "/dst/src"))
            let stats = relay.stop()
            #expect(stats.status == 0, "\(stats.stderr)")
        }
    }

    /// A transfer through the relay cut in the middle (the sender's connection to the relay
    /// closed after 4 MiB) is resumed by sending again with a new code: the receiver keeps the
    /// part it holds and the second run sends only the rest (the part held is checked with
    /// SHA-256, the new code giving a new key).
    @Test func aTransferCutAtTheRelayResumesWithANewCode() throws {
        try withTemporaryDirectory { dir in
            let file = dir + "/big.bin"
            try write(randomBytes(16 << 20, seed: 11), to: file)
            let inbox = dir + "/in"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
            let relay = try RunningRelay()
            let cut = try CutRelay(to: relay.port, cutAfter: 4 << 20)
            let (first, code) = try relaySender("127.0.0.1:\(cut.port)", ["--no-direct", file])
            let cutShort = try LiveSluice(["receive", "--relay", relay.address, "-C", inbox, code]).wait()
            #expect(first.wait().status == 74)
            #expect(cut.didCut)
            #expect(cutShort.status == 74, "\(cutShort.stderr)")
            #expect(!FileManager.default.fileExists(atPath: inbox + "/big.bin"))
            #expect(directoryEntries(inbox).count == 1 && directoryEntries(inbox).allSatisfy { $0.hasPrefix(".") })

            let (again, newCode) = try relaySender(relay.address, ["--no-direct", "--stats=json", file])
            #expect(newCode != code)
            let received = try LiveSluice(["receive", "--relay", relay.address, "-C", inbox, newCode]).wait()
            let sent = again.wait()
            #expect(received.status == 0, "\(received.stderr)")
            #expect(sent.status == 0, "\(sent.stderr)")
            #expect(contents(inbox + "/big.bin") == contents(file))
            let stats = try #require(lastJSONObject(sent.stderr), "\(sent.stderr)")
            let resumed = try #require(stats["resumed_bytes"] as? Int)
            #expect(resumed >= 1 << 20, "resumed \(resumed) bytes")
            #expect(stats["vouched_bytes"] as? Int == 0, "a new code vouches for nothing")
            _ = relay.stop()
        }
    }

    @Test func aWrongCodeEndsBothSidesWith77AndNothingIsSent() throws {
        try withTemporaryDirectory { dir in
            try makeTree(dir + "/src")
            try FileManager.default.createDirectory(atPath: dir + "/dst", withIntermediateDirectories: true)
            let relay = try RunningRelay()
            let (sender, code) = try relaySender(relay.address, [dir + "/src"])
            let nameplate = code.split(separator: "-")[0]
            // The right nameplate, the wrong words: one guess, and it is spent.
            let guess = try LiveSluice([
                "receive", "--relay", relay.address, "-C", dir + "/dst", "\(nameplate)-acorn-acorn-acorn",
            ])
            let guessed = guess.wait()
            let sent = sender.wait()
            #expect(guessed.status == 77, "\(guessed.stderr)")
            #expect(sent.status == 77, "\(sent.stderr)")
            #expect(sent.stderr.contains("the code is wrong, or someone tried to guess it"))
            #expect(directoryEntries(dir + "/dst").isEmpty)
            // The real receiver, with the right code, comes too late: the code is used up.
            let late = try LiveSluice(["receive", "--relay", relay.address, "-C", dir + "/dst", code]).wait()
            #expect(late.status == 77, "\(late.stderr)")
            #expect(late.stderr.contains("someone else used the code already"))
            #expect(directoryEntries(dir + "/dst").isEmpty)
            _ = relay.stop()
        }
    }

    @Test func theRelayFromTheEnvironmentAndTheErrorsOfMeeting() throws {
        try withTemporaryDirectory { dir in
            try makeTree(dir + "/src", size: 1000)
            try FileManager.default.createDirectory(atPath: dir + "/dst", withIntermediateDirectories: true)
            let relay = try RunningRelay()
            let (sender, code) = try relaySender(relay.address, ["--code-words", "5", dir + "/src"])
            #expect(code.split(separator: "-").count == 6)
            let receiver = try LiveSluice(
                ["receive", "-C", dir + "/dst", code], environment: ["SLUICE_RELAY": relay.address], keyed: false)
            #expect(receiver.wait().status == 0)
            #expect(sender.wait().status == 0)
            #expect(try treesIdentical(dir + "/src", dir + "/dst/src"))
            // A nameplate nobody waits under: 69 — each time, though the code's scrypt still runs
            // when the relay's answer comes (it must end before the process does: libcrypto's
            // clean-up at exit crashed it, with 139, most times).
            for _ in 0..<5 {
                let unknown = try LiveSluice(
                    ["receive", "--relay", relay.address, "-C", dir, "99998-acorn-acorn-acorn"])
                #expect(unknown.wait().status == 69)
            }
            _ = relay.stop()
            // No relay there: 69, before any code is printed.
            let (closedFD, closedPort) = try boundLoopbackSocket()
            close(closedFD)
            let nowhere = try LiveSluice(["send", "--relay", "127.0.0.1:\(closedPort)", dir + "/src"]).wait()
            #expect(nowhere.status == 69, "\(nowhere.stderr)")
            #expect(!nowhere.stderr.contains("code:"))
            // A missing path: 66 before the relay is asked.
            #expect(try LiveSluice(["send", "--relay", "127.0.0.1:\(closedPort)", dir + "/none"]).wait().status == 66)
        }
    }

    @Test func withNoRelayTheSenderIsFoundOnTheLocalNetworkAndOneGuessHoldsThere() throws {
        try withTemporaryDirectory { dir in
            try makeTree(dir + "/src")
            try FileManager.default.createDirectory(atPath: dir + "/dst", withIntermediateDirectories: true)
            let port = "\(try #require(freePort(SOCK_DGRAM)))"
            // No --relay and no address: a short code, announced on the local network.
            let (sender, code) = try relaySender(
                "", [], command: ["send", "--lan-port", port, "--streams", "2", dir + "/src"])
            let received = try LiveSluice(["receive", "--lan-port", port, "-C", dir + "/dst", code], keyed: false)
                .wait()
            let sent = sender.wait()
            #expect(received.status == 0, "\(received.stderr)")
            #expect(sent.status == 0, "\(sent.stderr)")
            #expect(received.stderr.contains("found on the local network"))
            #expect(sent.stderr.contains("sending directly to the receiver (2 connections)"))
            #expect(try treesIdentical(dir + "/src", dir + "/dst/src"))
            // A wrong guess at the door ends both with 77, and the sender stops announcing.
            let (second, secondCode) = try relaySender("", [], command: ["send", "--lan-port", port, dir + "/src"])
            let nameplate = secondCode.split(separator: "-")[0]
            let guess = try LiveSluice(
                ["receive", "--lan-port", port, "-C", dir + "/dst", "\(nameplate)-acorn-acorn-acorn"], keyed: false
            ).wait()
            #expect(guess.status == 77, "\(guess.stderr)")
            #expect(second.wait().status == 77)
            // Nobody announces a nameplate: the receiver gives up after --timeout with 69.
            let alone = try LiveSluice(
                ["receive", "--lan-port", port, "--timeout", "1", "-C", dir + "/dst", "99-acorn-acorn-acorn"],
                keyed: false
            ).wait()
            #expect(alone.status == 69, "\(alone.stderr)")
            #expect(alone.stderr.contains("no sender announced it on this network"))
        }
    }

    @Test func usageErrors() throws {
        let cases: [[String]] = [
            ["receive", "--relay", "127.0.0.1:1", "--lan-port", "9", "7-acorn-acorn-acorn"],
            ["receive", "--lan-port", "9"],
            ["send", "--lan-port", "9", ".", "127.0.0.1:1"],
            ["receive", "--relay", "127.0.0.1:1"],
            ["receive", "--relay", "127.0.0.1:1", "7-acorn-nope-acorn"],
            ["receive", "--relay", "127.0.0.1:1", "--listen", "0", "7-acorn-acorn-acorn"],
            ["send", "--relay", "127.0.0.1:1", "--key-file", "/nonexistent", "."],
            ["send", "--relay", "127.0.0.1:1", "--insecure", "."],
            ["send", "--relay", "127.0.0.1:1"],
            ["send", "--code-words", "3", ".", "127.0.0.1:1"],
            ["send", "--relay", "127.0.0.1:1", "--code-words", "9", "."],
            ["send", "--relay", "unix:/tmp/x", "."],
            ["send", "--relay", "127.0.0.1:1", "--no-direct", "--no-relay", "."],
            ["send", "--no-direct", ".", "127.0.0.1:1"],
            ["receive", "--no-relay"],
            ["send", "--watch", "--relay", "127.0.0.1:1", "."],
        ]
        for arguments in cases {
            let outcome = try LiveSluice(arguments, environment: ["SLUICE_RELAY": ""], keyed: false).wait()
            #expect(outcome.status == 64, "\(arguments): \(outcome.stderr)")
            #expect(outcome.stderr.hasPrefix("sluice: "), "\(arguments): \(outcome.stderr)")
        }
    }
}
