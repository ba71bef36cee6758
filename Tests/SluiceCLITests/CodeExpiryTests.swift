import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A pairing code authenticates one transfer (with all its connections); then `receive` prints
/// a new one, and the old one is refused. `--code-uses N` lets one code serve N transfers.
@Suite(.ownThreads) struct CodeExpiryTests {
    /// The codes the receiver has printed so far, in order.
    static func codes(_ receiver: ReceiverProcess) -> [String] {
        receiver.stderrText.matches(of: /code: ([0-9A-Z-]+)\n/).map { String($0.output.1) }
    }

    func send(_ arguments: [String], code: String, dir: String) throws -> Outcome {
        try writeSecret(code + "\n", to: "\(dir)/code")
        return try Running(sluiceBinary, ["send", "--code-file", "\(dir)/code"] + arguments).wait(
            within: .seconds(30))
    }

    @Test func aCodeServesOneTransferThenANewOneIsPrinted() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            let data = randomBytes(1 << 20, seed: 91)
            for name in ["a", "b", "c"] { try write(data, to: "\(dir)/\(name).bin") }
            let receiver = try ReceiverProcess(["--dir", inbox], pairingCode: true)
            let address = try receiver.address()
            let first = try receiver.code()
            try writeSecret(first + "\n", to: "\(dir)/first")
            // One transfer over four connections, slowed down so that it is still running when
            // a second sender tries the same code: every one of its connections is admitted.
            let slow = try Running(
                sluiceBinary,
                [
                    "send", "--code-file", "\(dir)/first", "--streams", "4", "--rate-limit", "100K", "\(dir)/a.bin",
                    address,
                ])
            #expect(waitUntil(.seconds(30)) { directoryEntries(inbox).contains { $0.contains("sluice-part") } })
            // The code serves that transfer only: another sender with it is told so (77), nothing stored.
            let other = try send(["\(dir)/b.bin", address], code: first, dir: dir)
            #expect(other.status == 77, "\(other.stderrText)")
            #expect(other.stderrText.contains("code expired"), "\(other.stderrText)")
            #expect(other.stderrLines.count == 1, "\(other.stderrText)")
            let sent = slow.wait(within: .seconds(60))
            #expect(sent.status == 0, "\(sent.stderrText)")
            #expect(contents("\(inbox)/a.bin") == data)
            #expect(fileSize("\(inbox)/b.bin") == nil)
            // Once it is over a new code is printed; the old one no longer authenticates.
            #expect(waitUntil { Self.codes(receiver).count == 2 }, "\(receiver.stderrText)")
            let again = try send(["\(dir)/b.bin", address], code: first, dir: dir)
            #expect(again.status == 77, "\(again.stderrText)")
            let second = try #require(Self.codes(receiver).last)
            #expect(second != first)
            let next = try send(["\(dir)/c.bin", address], code: second, dir: dir)
            #expect(next.status == 0, "\(next.stderrText)")
            #expect(contents("\(inbox)/c.bin") == data)
            _ = receiver.stop()
        }
    }

    @Test func codeUsesLetsOneCodeServeSeveralTransfers() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            let data = randomBytes(10_000, seed: 92)
            for name in ["a", "b", "c"] { try write(data, to: "\(dir)/\(name).bin") }
            let receiver = try ReceiverProcess(["--dir", inbox, "--code-uses", "2"], pairingCode: true)
            let address = try receiver.address()
            let code = try receiver.code()
            for name in ["a", "b"] {
                let sent = try send(["\(dir)/\(name).bin", address], code: code, dir: dir)
                #expect(sent.status == 0, "\(sent.stderrText)")
            }
            #expect(waitUntil { Self.codes(receiver).count == 2 }, "\(receiver.stderrText)")
            let third = try send(["\(dir)/c.bin", address], code: code, dir: dir)
            #expect(third.status == 77, "\(third.stderrText)")
            #expect(directoryEntries(inbox) == ["a.bin", "b.bin"])
            _ = receiver.stop()
        }
    }

    @Test func codeUsesIsForPairingCodesOnly() throws {
        for arguments in [["--code-uses", "0"], ["--code-uses", "2", "--insecure"], ["--code-uses", "x"]] {
            let outcome = try sluice(["receive"] + arguments)
            #expect(outcome.status == 64, "\(arguments): \(outcome.stderrText)")
        }
        let withKey = try sluice(["receive", "--key-file", testKeyFile, "--code-uses", "2"])
        #expect(withKey.status == 64, "\(withKey.stderrText)")
    }
}
