import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// `sluice receive` stores new entries only unless told otherwise (`--sync`, `--delete`,
/// `--overwrite`); a pairing code serves a whole `send --sync`; what a sender that holds the code
/// sends costs the receiver bounded memory.
@Suite(.ownThreads) struct ReceiverConsentTests {
    /// A tree `tree` (a, b, sub/c) beside an inbox that holds an older `tree/a` (of another size:
    /// two files written within a clock tick share their mtime) and a
    /// `tree/extra` the sender does not have.
    static func scene(_ dir: String) throws -> (tree: String, inbox: String) {
        let tree = "\(dir)/tree"
        let inbox = "\(dir)/in"
        for path in [tree + "/sub", inbox + "/tree"] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        try write(Data("new a".utf8), to: "\(tree)/a")
        try write(Data("b".utf8), to: "\(tree)/b")
        try write(Data("c".utf8), to: "\(tree)/sub/c")
        try write(Data("older a".utf8), to: "\(inbox)/tree/a")
        try write(Data("extra".utf8), to: "\(inbox)/tree/extra")
        return (tree, inbox)
    }

    func send(_ tree: String, _ receiver: ReceiverProcess, _ extra: [String]) throws -> Outcome {
        try sluice(withTestKey(["send", "--no-progress"] + extra + [tree, try receiver.address()]))
    }

    @Test func theDefaultReceiverStoresNewEntriesOnly() throws {
        try withTemporaryDirectory { dir in
            let (tree, inbox) = try Self.scene(dir)
            let receiver = try ReceiverProcess(["--dir", inbox])
            let sent = try send(tree, receiver, ["--sync", "--delete"])
            #expect(sent.status == 73, "\(sent.stderrText)")
            #expect(sent.stderrText.contains("receive --sync"), "\(sent.stderrText)")
            #expect(sent.stderrText.contains("receive --delete"), "\(sent.stderrText)")
            #expect(contents("\(inbox)/tree/a") == Data("older a".utf8))
            #expect(contents("\(inbox)/tree/extra") == Data("extra".utf8))
            #expect(contents("\(inbox)/tree/sub/c") == Data("c".utf8), "new entries are stored")
            _ = receiver.stop()
        }
    }

    @Test func syncReplacesAndDeleteRemoves() throws {
        try withTemporaryDirectory { dir in
            let (tree, inbox) = try Self.scene(dir)
            let syncing = try ReceiverProcess(["--dir", inbox, "--sync"])
            let removing = try send(tree, syncing, ["--sync", "--delete"])
            #expect(removing.status == 73, "\(removing.stderrText)")
            #expect(removing.stderrText.contains("receive --delete"), "\(removing.stderrText)")
            #expect(contents("\(inbox)/tree/a") == Data("new a".utf8), "--sync replaces what differs")
            #expect(contents("\(inbox)/tree/extra") == Data("extra".utf8), "but removes nothing")
            _ = syncing.stop()

            let deleting = try ReceiverProcess(["--dir", inbox, "--delete"])
            let removed = try send(tree, deleting, ["--sync", "--delete"])
            #expect(removed.status == 0, "\(removed.stderrText)")
            #expect(contents("\(inbox)/tree/extra") == nil)
            _ = deleting.stop()
            #expect(try treesIdentical(tree, "\(inbox)/tree"))
        }
    }

    @Test func noSyncIsGone() throws {
        let outcome = try sluice("receive", "--no-sync", "--insecure")
        #expect(outcome.status == 64, "\(outcome.stderrText)")
        let help = try sluice("receive", "--help")
        #expect(help.stdoutText.contains("--sync") && help.stdoutText.contains("--delete"), "\(help.stdoutText)")
        #expect(!help.stdoutText.contains("--no-sync"))
    }

    /// Before, every CHECK after the first was taken for one more transfer, and the code's one
    /// transfer was used up by the second: "code expired".
    @Test func aPairingCodeServesAWholeSyncOfSeveralDirectories() throws {
        try withTemporaryDirectory { dir in
            let tree = "\(dir)/tree"
            let inbox = "\(dir)/in"
            for path in ["\(tree)/a/b", "\(tree)/c", "\(tree)/d/e/f", inbox] {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            }
            for (index, path) in ["a/1", "a/b/2", "c/3", "d/e/f/4", "5"].enumerated() {
                try write(randomBytes(1000 + index, seed: UInt64(index)), to: "\(tree)/\(path)")
            }
            let receiver = try ReceiverProcess(["--dir", inbox, "--sync"], pairingCode: true)
            let address = try receiver.address()
            try writeSecret(try receiver.code() + "\n", to: "\(dir)/code")
            let sent = try Running(
                sluiceBinary, ["send", "--no-progress", "--code-file", "\(dir)/code", "--sync", tree, address]
            ).wait(within: .seconds(30))
            #expect(sent.status == 0, "\(sent.stderrText)")
            #expect(!sent.stderrText.contains("expired"), "\(sent.stderrText)")
            #expect(try treesIdentical(tree, "\(inbox)/tree"))
            _ = receiver.stop()
        }
    }

    /// The receiver's peak resident memory (`VmHWM`), in bytes.
    static func peakResident(_ pid: Int32) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
            let kib = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        else { return nil }
        return kib << 10
    }

    /// Sends `payload` from a played sender on a plaintext connection, reading (and dropping)
    /// every answer as it comes, until the receiver closes the connection.
    static func play(_ payload: [UInt8], to port: UInt16) throws {
        let fd = try #require(connectToLoopback(port: port))
        defer { close(fd) }
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread { [fd] in
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            while buffer.withUnsafeMutableBytes({ read(fd, $0.baseAddress, $0.count) }) > 0 {}
            done.signal()
        }
        var sent = 0
        while sent < payload.count {
            let n = payload[sent...].withUnsafeBytes { write(fd, $0.baseAddress, min($0.count, 1 << 20)) }
            guard n > 0 else { break }
            sent += n
        }
        shutdown(fd, Int32(SHUT_WR))
        #expect(done.wait(timeout: .now() + 300) == .success, "the receiver did not close the connection")
        #expect(sent == payload.count)
    }

    @Test func aMillionRefusedNamesAndAMillionChecksLeaveTheReceiverSmall() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: "\(inbox)/d", withIntermediateDirectories: true)
            let receiver = try ReceiverProcess(["--dir", inbox, "--insecure", "--sync"], pairingCode: true)
            let port = try receiver.port()

            // A million FILE headers with names that are refused: most short, a few thousand
            // of 4,096 bytes that are not UTF-8 (each shown as 24 KiB before it was bounded).
            var names = Wire.magic + MessageWriter.hello(capabilities: ["sha256"])
            let long = [UInt8](repeating: 0xFF, count: Wire.maxPathBytes)
            for index in 0..<1_000_000 {
                let path: [UInt8] = index % 200 == 0 ? long : Array("../x\(index)".utf8)
                let header = EntryHeader(
                    flags: Wire.FileFlags.sizeKnown, size: 1, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0,
                    path: path)
                names += MessageWriter.entry(.file, header)
            }
            names += MessageWriter.message(.bye)
            try Self.play(names, to: port)

            // 2^20 CHECKs of a directory that is there, each to be settled at goodbye.
            var checks = Wire.magic + MessageWriter.hello(capabilities: ["sha256", "sync"])
            let check = MessageWriter.check(
                CheckHeader(
                    kind: .directory, flags: Wire.CheckFlags.apply, mode: 0o755, mtimeSeconds: 0,
                    mtimeNanoseconds: 0, path: Array("d".utf8)))
            for _ in 0..<(1 << 20) { checks += check }
            checks += MessageWriter.message(.bye)
            try Self.play(checks, to: port)

            let peak = try #require(Self.peakResident(receiver.process.processIdentifier))
            #expect(peak < 64 << 20, "peak resident memory \(peak >> 20) MiB")
            let stopped = receiver.stop()
            // A few lines per sender, then one that counts the rest.
            #expect(stopped.stderr.contains("more refused or failed"), "\(stopped.stderr.suffix(2000))")
            #expect(stopped.stderr.utf8.count < 64 << 10, "\(stopped.stderr.utf8.count) bytes of log")
        }
    }
}
