import CSluiceLinux
import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A resume token vouches only to the receiver it was made for: bound to the receiver's key (a
/// key file's, a pairing code's), not to the address the sender dialled. The same key under
/// another address vouches; a new code does not, and the held bytes are checked with SHA-256.
@Suite(.ownThreads) struct ResumeBindingTests {
    static let size = 6_000_000

    /// Starts `send ARGUMENTS` slowed to 1 MiB/s, kills it once the receiver holds 512 KiB of
    /// `partial`, and waits until the receiver has stamped the partial with its token (the
    /// mark is longer than a bare tag once the session that wrote it is over).
    static func interruptedSend(_ arguments: [String], partial: String) throws {
        let sending = try Running(sluiceBinary, ["send", "--rate-limit", "1M"] + arguments)
        let held = waitUntil(.seconds(30)) { fileSize(partial) ?? 0 >= 512 * 1024 }
        sending.signal(SIGKILL)
        let killed = sending.wait()
        #expect(held, "no partial")
        #expect(!killed.stderrText.contains("resume key"), "\(killed.stderrText)")
        #expect(waitUntil { (tokenMark(partial)?.count ?? 0) > 64 }, "the partial was not stamped")
    }

    /// The receiver's token mark on `path` (`user.sluice.token`), if any.
    static func tokenMark(_ path: String) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: 256)
        let n = getxattr(path, "user.sluice.token", &buffer, buffer.count)
        return n > 0 ? Array(buffer[0..<n]) : nil
    }

    /// The statistics `send --stats=json` printed last.
    static func stats(_ outcome: Outcome) throws -> (resumed: Int, vouched: Int) {
        let stats = try #require(lastJSONObject(outcome.stderrText), "\(outcome.stderrText)")
        return (try #require(stats["resumed_bytes"] as? Int), try #require(stats["vouched_bytes"] as? Int))
    }

    /// A directory `dir/in` to receive into, and `dir/big` of `size` bytes made from `seed`.
    static func scene(_ dir: String, seed: UInt64) throws -> (inbox: String, data: Data) {
        let inbox = "\(dir)/in"
        mkdir(inbox, 0o755)
        let data = randomBytes(size, seed: seed)
        try write(data, to: "\(dir)/big")
        return (inbox, data)
    }

    @Test func theSameKeyUnderAnotherAddressVouchesForWhatItHolds() throws {
        try withTemporaryDirectory { dir in
            let (inbox, data) = try Self.scene(dir, seed: 181)
            // Two receivers with the tests' key into one directory, on two ports: one receiver
            // as far as the key says, under two addresses.
            let first = try ReceiverProcess(["--dir", inbox])
            let second = try ReceiverProcess(["--dir", inbox])
            let (one, two) = (try first.address(), try second.address())
            #expect(one != two)
            try Self.interruptedSend(["\(dir)/big", one], partial: "\(inbox)/.big.sluice-part")
            let resumed = try sluice("send", "--stats=json", "\(dir)/big", two)
            #expect(resumed.status == 0, "\(resumed.stderrText)")
            let (held, vouched) = try Self.stats(resumed)
            #expect(held > 0 && vouched == held, "\(held) resumed, \(vouched) vouched for")
            #expect(contents("\(inbox)/big") == data)
            _ = first.stop()
            _ = second.stop()
        }
    }

    @Test func aNewCodeAtTheSameAddressChecksWhatIsHeldAndCatchesATamperedPrefix() throws {
        try withTemporaryDirectory { dir in
            let (inbox, data) = try Self.scene(dir, seed: 182)
            let partial = "\(inbox)/.big.sluice-part"
            let receiver = try ReceiverProcess(["--dir", inbox], pairingCode: true)
            let address = try receiver.address()
            /// The code the receiver printed `index`th (from 0), once it has.
            func code(_ index: Int) throws -> String {
                #expect(waitUntil { CodeExpiryTests.codes(receiver).count > index }, "\(receiver.stderrText)")
                let codes = CodeExpiryTests.codes(receiver)
                try #require(codes.count > index)
                try writeSecret(codes[index] + "\n", to: "\(dir)/code")
                return codes[index]
            }
            let send = ["send", "--code-file", "\(dir)/code", "--stats=json", "\(dir)/big", address]

            // Held under the first code, resumed under the next: checked with SHA-256, not vouched for.
            _ = try code(0)
            try Self.interruptedSend(["--code-file", "\(dir)/code", "\(dir)/big", address], partial: partial)
            _ = try code(1)
            let checked = try sluice(send)
            #expect(checked.status == 0, "\(checked.stderrText)")
            let (held, vouched) = try Self.stats(checked)
            #expect(held > 0 && vouched == 0, "\(held) resumed, \(vouched) vouched for")
            #expect(contents("\(inbox)/big") == data)

            // Held under a code, then changed on the receiver's side where the mark does not
            // see it (its mtime put back), and resumed under the next code: the digest catches it.
            unlink("\(inbox)/big")
            _ = try code(2)
            try Self.interruptedSend(["--code-file", "\(dir)/code", "\(dir)/big", address], partial: partial)
            var before = stat()
            #expect(stat(partial, &before) == 0)
            let fd = open(partial, O_WRONLY)
            try #require(fd >= 0)
            #expect([UInt8(0x55)].withUnsafeBytes { pwrite(fd, $0.baseAddress, 1, 1000) } == 1)
            var times = [before.st_atim, before.st_mtim]
            #expect(futimens(fd, &times) == 0)
            close(fd)
            _ = try code(3)
            let tampered = try sluice(send)
            #expect(tampered.status == 65, "\(tampered.stderrText)")
            #expect(tampered.stderrText.contains("SHA-256 mismatch"), "\(tampered.stderrText)")
            #expect(fileSize("\(inbox)/big") == nil)
            // Sent again, whole: byte for byte the sender's.
            _ = try code(4)
            let again = try sluice(send)
            #expect(again.status == 0, "\(again.stderrText)")
            #expect(contents("\(inbox)/big") == data)
            _ = receiver.stop()
        }
    }
}
