import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// send → receive failing in the middle: a connection cut, a disk without room.
@Suite(.ownThreads) struct TransferFailureTests {
    /// Over TLS through a relay that cuts both connections in the middle of a file.
    @Test func aConnectionCutWithoutCloseNotifyExits74AndStoresNothing() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            try write(randomBytes(16 << 20, seed: 31), to: "\(dir)/big.bin")
            let receiver = try ReceiverProcess(["--dir", inbox, "--once"])
            let relay = try CutRelay(to: try receiver.port(), cutAfter: 2 << 20)
            let sent = try sluice("send", "--timeout", "20", "\(dir)/big.bin", "127.0.0.1:\(relay.port)")
            #expect(relay.waitUntilDone())
            #expect(relay.didCut, "the transfer ended before the relay cut it")
            #expect(sent.status == 74, "\(sent.stderrText)")
            #expect(sent.stderrText.hasPrefix("sluice: "))
            let received = receiver.wait()
            #expect(received.status == 74, "\(received.stderr)")
            #expect(received.stderr.contains("close_notify"), "\(received.stderr)")
            #expect(!FileManager.default.fileExists(atPath: "\(inbox)/big.bin"))
            // What arrived is kept only under the hidden partial name, for a resume.
            #expect(directoryEntries(inbox).allSatisfy { $0.hasPrefix(".") }, "\(directoryEntries(inbox))")
            // ... holding no more disk than what it holds: the blocks reserved for the rest of the
            // file are given back.
            for name in directoryEntries(inbox) {
                var st = stat()
                #expect(lstat("\(inbox)/\(name)", &st) == 0)
                #expect(Int(st.st_blocks) * 512 <= Int(st.st_size) + (1 << 20), "\(name): \(st.st_blocks) blocks")
            }
        }
    }

    /// An empty inbox in `dir`, and a sparse file of 15 TiB beside it, holding `tail` at its end.
    static func inboxAndHugeFile(_ dir: String, endingIn tail: String = "") -> (String, String) {
        let inbox = "\(dir)/in"
        mkdir(inbox, 0o755)
        let huge = "\(dir)/huge.bin"
        let fd = open(huge, O_WRONLY | O_CREAT, 0o644)
        #expect(ftruncate(fd, 15 << 40) == 0)
        _ = tail.withCString { pwrite(fd, $0, strlen($0), off_t(15 << 40) - off_t(strlen($0))) }
        close(fd)
        return (inbox, huge)
    }

    /// A file larger than the receiver's free space (15 TiB, sent compressed: its data, not
    /// holes) is refused when it starts, before its data is sent: exit 74 naming the full
    /// disk, nothing left behind.
    @Test func aFileTheDiskHasNoRoomForIsRefusedBeforeItsData() throws {
        try withTemporaryDirectory { dir in
            let (inbox, huge) = Self.inboxAndHugeFile(dir)
            var fs = statvfs()
            #expect(statvfs(inbox, &fs) == 0)
            try #require(UInt64(fs.f_bavail) * UInt64(fs.f_frsize) < 15 << 40, "a disk with 15 TiB free")
            let receiver = try ReceiverProcess(["--dir", inbox, "--once"])
            // Refused at once; sent, the zeros would take hours: a failure, not a hang.
            let sent = try Running(sluiceBinary, withTestKey(["send", "-z", huge, try receiver.address()]))
                .wait(within: .seconds(30))
            #expect(sent.status == 74, "\(sent.stderrText)")
            #expect(sent.stderrText.contains("No space left on device"), "\(sent.stderrText)")
            #expect(receiver.wait().status == 74)
            #expect(directoryEntries(inbox).isEmpty, "\(directoryEntries(inbox))")
        }
    }

    /// The same 15 TiB holding nothing, sent as it is: one hole, stored sparse in a moment.
    @Test func aHugeSparseFileCrossesAsOneHole() throws {
        try withTemporaryDirectory { dir in
            let (inbox, huge) = Self.inboxAndHugeFile(dir, endingIn: "data at the end")
            let receiver = try ReceiverProcess(["--dir", inbox, "--once"])
            let sent = try Running(
                sluiceBinary, withTestKey(["send", "--stats=json", huge, try receiver.address()])
            ).wait(within: .seconds(60))
            #expect(sent.status == 0, "\(sent.stderrText)")
            #expect(receiver.wait().status == 0)
            var st = stat()
            #expect(stat("\(inbox)/huge.bin", &st) == 0)
            #expect(st.st_size == 15 << 40)
            #expect(Int(st.st_blocks) * 512 <= 1 << 20, "\(st.st_blocks) blocks")
            let stats = lastJSONObject(sent.stderrText)
            #expect((stats?["bytes_sent"] as? Int).map { $0 < 1 << 20 } == true, "\(sent.stdoutText)")
            #expect((stats?["hole_bytes"] as? Int).map { $0 >= (15 << 40) - 4096 } == true)
        }
    }

    /// The disk fails in the middle of a file (writes past the receiver's file size limit fail
    /// with EFBIG, on the worker that writes it): the file fails with the system's reason,
    /// nothing is left of it, and the session goes on with the next file.
    @Test func aWriteThatFailsInTheMiddleFailsTheFileAndTheSessionGoesOn() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            try write(randomBytes(6 << 20, seed: 32), to: "\(dir)/big.bin")
            let small = randomBytes(300_000, seed: 33)
            try write(small, to: "\(dir)/small.bin")
            let receiver = try ReceiverProcess(["--dir", inbox, "--once"], fileSizeLimit: 2048)
            let sent = try Running(
                sluiceBinary, withTestKey(["send", "\(dir)/big.bin", "\(dir)/small.bin", try receiver.address()])
            ).wait(within: .seconds(60))
            #expect(sent.status == 74, "\(sent.stderrText)")
            #expect(sent.stderrText.contains("big.bin"), "\(sent.stderrText)")
            #expect(sent.stderrText.contains("File too large"), "\(sent.stderrText)")
            let received = receiver.wait()
            #expect(received.stderr.contains("File too large"), "\(received.stderr)")
            #expect(!FileManager.default.fileExists(atPath: "\(inbox)/big.bin"))
            #expect(contents("\(inbox)/small.bin") == small)
            #expect(directoryEntries(inbox) == ["small.bin"], "\(directoryEntries(inbox))")
        }
    }

    /// A receiver whose soft open-file limit is below what `--max-sessions` needs raises it
    /// (up to the hard limit, which it may: room for the sessions and for 1,024 connections
    /// waiting to authenticate) and says nothing.
    @Test func theReceiverRaisesItsOpenFileLimitForMaxSessions() throws {
        try withTemporaryDirectory { dir in
            let receiver = try ReceiverProcess(
                ["--dir", dir, "--max-sessions", "300"], openFileLimit: 100, softOnly: true)
            _ = try receiver.port()
            let limits = try String(
                contentsOfFile: "/proc/\(receiver.process.processIdentifier)/limits", encoding: .utf8)
            let line = limits.split(separator: "\n").first { $0.hasPrefix("Max open files") } ?? ""
            let soft = line.split(separator: " ", omittingEmptySubsequences: true).dropFirst(3).first
            // 4 per session, 64 for the process and 4 per file of the staged budget (1,024 files
            // set aside for batched flushes, two descriptors each, one budget being committed
            // while another is set aside), and 1,024 connections waiting.
            #expect(soft.flatMap { Int($0) } == 300 * 4 + 64 + 4 * 1024 + 1024, "\(line)")
            let stopped = receiver.stop()
            #expect(!stopped.stderr.contains("ulimit"), "\(stopped.stderr)")
        }
    }

    /// Out of descriptors (a hard limit of 40 and 60 connections that say hello and nothing
    /// more, each holding a session: connections that say nothing at all would only push each
    /// other out of the queue of those waiting to be admitted), the
    /// receiver warns at the start, reports the failing accept once instead of ten times a
    /// second, and once the connections go it accepts again, says after how long, and stores
    /// what the next sender sends.
    @Test func aReceiverOutOfDescriptorsSaysSoOnceAndServesAgain() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            let data = randomBytes(10_000, seed: 41)
            try write(data, to: "\(dir)/after.bin")
            // Plaintext: over TLS, 60 connections closed before a handshake would (rightly) shut
            // this address out for a minute.
            let receiver = try ReceiverProcess(
                ["--insecure", "--dir", inbox, "--max-sessions", "200"], openFileLimit: 40)
            let port = try receiver.port()
            #expect(
                receiver.stderrText.contains("--max-sessions 200 needs up to 4960 open files"), "\(receiver.stderrText)"
            )
            var held: [Int32] = []
            let hello = Array("SLUICE\r\n".utf8) + [1, 0, 0, 0, 10, 0, 1, 1, 6] + Array("sha256".utf8)
            for _ in 0..<60 {
                guard let fd = connectToLoopback(port: port) else { continue }
                held.append(fd)
                _ = hello.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                // One at a time: the next connects once this one's session has started (its
                // greeting arrived, and the HELLO sent is read next), so they become sessions
                // rather than a burst waiting to be admitted; or once accepting fails.
                waitUntil {
                    var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                    return poll(&ready, 1, 0) > 0 || receiver.stderrText.contains("Too many open files")
                }
            }
            #expect(held.count == 60)
            #expect(waitUntil { receiver.stderrText.contains("Too many open files") }, "\(receiver.stderrText)")
            for fd in held { close(fd) }
            let sent = try Running(sluiceBinary, ["send", "--insecure", "\(dir)/after.bin", "127.0.0.1:\(port)"])
                .wait(within: .seconds(60))
            #expect(sent.status == 0, "\(sent.stderrText)")
            let stopped = receiver.stop()
            #expect(stopped.stderr.contains("accepting connections again after"), "\(stopped.stderr)")
            #expect(contents("\(inbox)/after.bin") == data)
        }
    }
}
