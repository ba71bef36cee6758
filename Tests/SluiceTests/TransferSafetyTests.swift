import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

@Suite("Transfer safety and resume", .ownThreads)
struct TransferSafetyTests {
    private func exchange(_ harness: TransferHarness, _ payload: [UInt8]) throws -> SocketExchange {
        try harness.exchange(payload)
    }

    @Test("The one-call parent open refuses a link on the way and a path that climbs out, as the walk does")
    func parentOpenedBeneath() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst + "/real/dir", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: root + "/outside", withIntermediateDirectories: true)
            #expect(symlink(root + "/outside", dst + "/link") == 0)
            #expect(symlink("dir", dst + "/real/inner") == 0)
            let fd = open(dst, O_RDONLY | O_DIRECTORY)
            defer { close(fd) }
            let opened = Destination.openBeneath(fd, "real/dir")
            #expect(opened >= 0)
            close(opened)
            for path in ["link", "link/x", "real/inner", "../outside", "real/../../outside", "/tmp"] {
                let refused = Destination.openBeneath(fd, path)
                #expect(refused < 0, "\(path)")
                if refused >= 0 { close(refused) }
            }
            // Through the store: a file under the link is refused, none lands outside.
            let destination = try Destination(path: dst, permissionBits: 0o755)
            guard case .failure = destination.openParent(of: ["link", "f"], relative: "link/f") else {
                Issue.record("a parent through a link was opened")
                return
            }
            guard
                case .success(let (parent, created)) = destination.openParent(
                    of: ["real", "dir", "f"], relative: "real/dir/f")
            else {
                Issue.record("real/dir was not opened")
                return
            }
            close(parent)
            #expect(created.isEmpty)
        }
    }

    @Test("A size beyond the disk's free space is refused without reserving any of it")
    func reservationBeyondTheFreeSpace() throws {
        try withTemporaryDirectory { root in
            let fd = open(root + "/huge", O_RDWR | O_CREAT, 0o600)
            try #require(fd >= 0)
            defer { close(fd) }
            let rejection = ReceiverStore.reserve(fd, from: 0, to: 15 << 40, display: "huge")
            #expect(
                rejection?.outcome.description.contains("No space left on device") == true,
                "\(String(describing: rejection))")
            // Nothing was allocated on the way: the disk was never filled for others.
            var info = stat()
            #expect(fstat(fd, &info) == 0)
            #expect(info.st_blocks == 0)
            // A size that fits is reserved.
            #expect(ReceiverStore.reserve(fd, from: 0, to: 1 << 20, display: "huge") == nil)
            #expect(fstat(fd, &info) == 0)
            #expect(info.st_blocks > 0 && info.st_size == 0)
        }
    }

    @Test("Hostile paths are refused, garbage drops the connection, and the receiver keeps serving")
    func hostileClients() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            let outside = root + "/outside"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
            symlink(outside, dst + "/link")
            let harness = try TransferHarness(directory: dst)

            let evil: [[UInt8]] = [
                Array("../escape".utf8), Array("/abs/path".utf8), Array("a/../../x".utf8), Array("link/x".utf8),
                Array("link/deeper/x".utf8), Array("a//b".utf8), Array("./a".utf8), [0x61, 0x00, 0x62], [0xFF, 0xFE],
                [], Array(repeating: 0x61, count: 256), Array(repeating: 0x61, count: 5000),
            ]
            var payload = RawWire.hello()
            for path in evil { payload += RawWire.file(bytes: path, size: 5) }
            payload += RawWire.bye
            let client = try exchange(harness, payload)
            let replies = RawWire.messages(client.received)
            let refusals = replies.filter { $0.0 == Wire.MessageType.refused.rawValue }
            #expect(refusals.count == evil.count - 1, "\(replies.map { ($0.0, PeerText.sanitized($0.1)) })")
            #expect(refusals.allSatisfy { $0.1.first == Wire.RefusalCode.invalidPath.rawValue })
            // The 5000-byte path is malformed (over 4096): a protocol error ends the session.
            #expect(replies.last?.0 == Wire.MessageType.error.rawValue)
            #expect(harness.reports.last?.error?.code == .protocolViolation)

            // A well-formed session with the same hostile paths ends with goodbye.
            var polite = RawWire.hello()
            for path in evil.dropLast() { polite += RawWire.file(bytes: path, size: 5) }
            polite += RawWire.bye
            let second = try exchange(harness, polite)
            let secondReplies = RawWire.messages(second.received)
            #expect(secondReplies.last?.0 == Wire.MessageType.bye.rawValue)
            #expect(harness.reports.last?.error == nil)
            #expect(harness.results(harness.reports.last).count == evil.count - 1)

            // An oversized length field, random bytes, a wrong magic, a header cut short.
            let oversized = RawWire.hello() + [Wire.MessageType.file.rawValue, 0xFF, 0xFF, 0xFF, 0xFF]
            let oversizedData =
                RawWire.hello() + RawWire.file("ok.bin", size: 10)
                + [Wire.MessageType.data.rawValue, 0x7F, 0xFF, 0xFF, 0xFF]
            let cutShort = RawWire.hello() + Array(RawWire.file("cut.bin", size: 10).prefix(9))
            for garbage in [
                oversized, oversizedData, randomBytes(5000, seed: 99), Array("GET / HTTP/1.0\r\n\r\n".utf8), cutShort,
            ] {
                let client = try exchange(harness, garbage)
                #expect(harness.reports.last?.error != nil)
                _ = client
            }
            // Nothing was written outside, and nothing but the link and no stray files inside.
            #expect(treePaths(outside) == [])
            #expect(!fileExists(root + "/escape"))
            #expect(!fileExists(root + "/x"))
            #expect(treePaths(dst) == ["link"])

            // A normal sender is still served.
            try writeFile(root + "/fine.txt", Array("still here".utf8))
            let summary = try harness.send(paths: [root + "/fine.txt"])
            #expect(summary.succeeded)
            #expect(readFile(dst + "/fine.txt") == Array("still here".utf8))
        }
    }

    @Test("A file whose data does not match its digest, or runs past its size, is not stored")
    func rawDataErrors() throws {
        try withTemporaryDirectory { root in
            let harness = try TransferHarness(directory: root)
            let good = Array("hello".utf8)
            var payload = RawWire.hello()
            payload += RawWire.file("bad-digest", size: 5) + RawWire.data(good)
            payload += MessageWriter.end(size: 5, digest: SHA256Digest.hash(Array("jello".utf8)))
            payload += RawWire.file("too-long", size: 5) + RawWire.data(good + good) + RawWire.end(good + good)
            payload += RawWire.file("good", size: 5) + RawWire.data(good) + RawWire.end(good)
            payload += RawWire.bye
            let client = try exchange(harness, payload)
            let types = RawWire.messages(client.received).map(\.0)
            #expect(
                types == [
                    Wire.MessageType.hello.rawValue, Wire.MessageType.accept.rawValue, Wire.MessageType.failed.rawValue,
                    Wire.MessageType.accept.rawValue, Wire.MessageType.failed.rawValue,
                    Wire.MessageType.accept.rawValue, Wire.MessageType.stored.rawValue, Wire.MessageType.bye.rawValue,
                ])
            #expect(treePaths(root) == ["good"])
        }
    }

    /// Sends `path` rate-limited and cancels it once the receiver's partial `partial` holds at
    /// least `atLeast` bytes: waiting for that, not for a time that a loaded machine may not keep.
    private func interrupt(
        _ harness: TransferHarness, _ path: String, partial: String, atLeast: Int = 256 << 10
    ) throws -> TransferSummary {
        let sessionsBefore = harness.reports.count
        let (sender, box) = try harness.startSender(
            [.path(path)], options: TransferSendOptions(chunkSize: try ChunkSize(65536), rateLimit: 4 << 20))
        let watch = harness.loop.schedule(after: .milliseconds(5), repeating: .milliseconds(5)) {
            if (FileInfo(partial)?.size ?? 0) >= atLeast { sender.cancel() }
        }
        runLoop(harness.loop, for: .seconds(20)) { box.summary != nil && harness.reports.count > sessionsBefore }
        watch.cancel()
        return try #require(box.summary)
    }

    @Test(
        "An interrupted transfer keeps a partial, and the next send resumes it (with direct writes: from its last whole block)",
        arguments: [false, true])
    func resume(directIO: Bool) throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let bytes = randomBytes(4 << 20, seed: 5)
            try writeFile(root + "/big.bin", bytes, mtime: (1_600_000_000, 42))
            let harness = try TransferHarness(directory: dst, options: TransferReceiveOptions(directIO: directIO))
            let cut = try interrupt(harness, root + "/big.bin", partial: dst + "/.big.bin.sluice-part")
            #expect(cut.error?.code == .cancelled)
            #expect(cut.files == 0)
            #expect(!fileExists(dst + "/big.bin"))
            var partial = try #require(FileInfo(dst + "/.big.bin.sluice-part"))
            #expect(partial.size > 0 && partial.size < bytes.count)
            #expect(Destination.hasResumeMark(dst + "/.big.bin.sluice-part"))
            var resumed = partial.size
            if directIO {
                // A partial that ends within a block (as one left by a crash may): continued
                // from the block's start.
                #expect(truncate(dst + "/.big.bin.sluice-part", off_t(partial.size - 1234)) == 0)
                partial = try #require(FileInfo(dst + "/.big.bin.sluice-part"))
                resumed = partial.size - partial.size % WriteTarget.directAlignment
                #expect(resumed != partial.size)
            }

            let summary = try harness.send(paths: [root + "/big.bin"])
            #expect(summary.succeeded, "\(summary.results)")
            #expect(summary.resumedBytes == UInt64(resumed))
            #expect(summary.resumedBytes > 0)
            // Sent eagerly until the receiver said how much it holds: what was in flight by then
            // was sent for nothing (at most the whole file once more).
            #expect(summary.bytes >= UInt64(bytes.count - resumed))
            #expect(summary.bytes <= UInt64(2 * bytes.count - resumed))
            #expect(readFile(dst + "/big.bin") == bytes)
            #expect(FileInfo(dst + "/big.bin")?.mtimeNanoseconds == 42)
            #expect(treePaths(dst) == ["big.bin"])
        }
    }

    @Test("resume: false starts over; a changed source does not resume")
    func noResume() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let bytes = randomBytes(4 << 20, seed: 6)
            try writeFile(root + "/big.bin", bytes, mtime: (1_600_000_000, 0))
            let harness = try TransferHarness(directory: dst)
            _ = try interrupt(harness, root + "/big.bin", partial: dst + "/.big.bin.sluice-part")
            #expect(fileExists(dst + "/.big.bin.sluice-part"))
            let summary = try harness.send(paths: [root + "/big.bin"], options: TransferSendOptions(resume: false))
            #expect(summary.succeeded)
            #expect(summary.resumedBytes == 0)
            #expect(readFile(dst + "/big.bin") == bytes)

            // Interrupted again, then the source's mtime changes: no resume.
            unlink(dst + "/big.bin")
            _ = try interrupt(harness, root + "/big.bin", partial: dst + "/.big.bin.sluice-part")
            try writeFile(root + "/big.bin", bytes, mtime: (1_600_000_001, 0))
            let changed = try harness.send(paths: [root + "/big.bin"])
            #expect(changed.succeeded)
            #expect(changed.resumedBytes == 0)
            #expect(readFile(dst + "/big.bin") == bytes)

            // A stale partial longer than the new source is cut to what arrives, not kept past it.
            unlink(dst + "/big.bin")
            _ = try interrupt(harness, root + "/big.bin", partial: dst + "/.big.bin.sluice-part")
            let stale = try #require(FileInfo(dst + "/.big.bin.sluice-part"))
            let small = Array(bytes[0..<(stale.size / 2)])
            try writeFile(root + "/big.bin", small)
            let shorter = try harness.send(paths: [root + "/big.bin"])
            #expect(shorter.succeeded)
            let stored = readFile(dst + "/big.bin")
            #expect(stored?.count == small.count)
            let identical = stored == small  // not inside #expect: a failure would print 2 MiB
            #expect(identical)
        }
    }

    @Test(
        "A partial another user owns, or group or others may write, is not resumed: replaced by a new file, logged",
        arguments: ["group-writable", "other-writable", "foreign owner"])
    func untrustedPartialStartsOver(how: String) throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let bytes = randomBytes(4 << 20, seed: 12)
            try writeFile(root + "/big.bin", bytes)
            let harness = try TransferHarness(directory: dst)
            let partialPath = dst + "/.big.bin.sluice-part"
            _ = try interrupt(harness, root + "/big.bin", partial: partialPath)
            let planted = try #require(FileInfo(partialPath))
            #expect(planted.size > 0)
            switch how {
            case "group-writable": #expect(chmod(partialPath, 0o620) == 0)
            case "other-writable": #expect(chmod(partialPath, 0o602) == 0)
            default:
                // Only root can give a file away; as another user the owner differs already.
                guard geteuid() == 0 else { return }
                #expect(chown(partialPath, 65534, 65534) == 0)
            }
            // Held open, the planted file shows what became of it (and its inode is not reused).
            let plantedFD = open(partialPath, O_RDONLY)
            try #require(plantedFD >= 0)
            defer { close(plantedFD) }

            let summary = try harness.send(paths: [root + "/big.bin"])
            #expect(summary.succeeded, "\(summary.results)")
            #expect(summary.resumedBytes == 0)
            #expect(readFile(dst + "/big.bin") == bytes)
            var after = stat()
            #expect(stat(dst + "/big.bin", &after) == 0)
            #expect(after.st_uid == geteuid())
            var old = stat()
            #expect(fstat(plantedFD, &old) == 0)
            #expect(old.st_nlink == 0 && old.st_size == planted.size, "removed, not written through")
            let reason = how == "foreign owner" ? "owned by uid 65534" : "writable by group or others"
            #expect(
                harness.warnings.contains {
                    $0.hasPrefix("partial \"\(partialPath)\" \(reason)") && $0.hasSuffix(": not resumed, started over")
                }, "\(harness.warnings)")
        }
    }

    @Test("A partial altered on disk is detected at the end and discarded")
    func alteredPartial() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let bytes = randomBytes(4 << 20, seed: 8)
            try writeFile(root + "/big.bin", bytes)
            let harness = try TransferHarness(directory: dst)
            _ = try interrupt(harness, root + "/big.bin", partial: dst + "/.big.bin.sluice-part")
            let partialPath = dst + "/.big.bin.sluice-part"
            let partial = try #require(FileInfo(partialPath))
            #expect(partial.size > 1000)
            // Flip one byte in the middle of the held data, keeping size and xattr.
            let fd = open(partialPath, O_RDWR)
            var byte: UInt8 = 0
            pread(fd, &byte, 1, 500)
            byte ^= 0xFF
            pwrite(fd, &byte, 1, 500)
            close(fd)

            let summary = try harness.send(paths: [root + "/big.bin"])
            #expect(summary.error == nil)
            #expect(summary.resumedBytes > 0)
            guard case .failed(let reason, let kind) = summary.results.first?.outcome else {
                Issue.record("expected a failure, got \(summary.results)")
                return
            }
            #expect(kind == .data)
            #expect(reason == "SHA-256 mismatch (held partial data differs from the sender's file)")
            #expect(!fileExists(dst + "/big.bin"))
            #expect(!fileExists(partialPath))

            // The next send starts over and succeeds.
            let again = try harness.send(paths: [root + "/big.bin"])
            #expect(again.succeeded)
            #expect(readFile(dst + "/big.bin") == bytes)
        }
    }

    @Test(
        "A planted partial (right name, size, mtime and attribute; other bytes): the file stored is the sender's, or it fails as a data error — never a mixture"
    )
    func plantedPartial() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let bytes = randomBytes(4 << 20, seed: 13)
            try writeFile(root + "/big.bin", bytes, mtime: (1_600_000_000, 7))
            let partialPath = dst + "/.big.bin.sluice-part"
            let harness = try TransferHarness(directory: dst)
            // The receiver's own partial, its bytes then all replaced in place: name, size,
            // mtime, attribute, owner and mode stay right.
            _ = try interrupt(harness, root + "/big.bin", partial: partialPath)
            let size = try #require(FileInfo(partialPath)).size
            let planted = randomBytes(size, seed: 14)
            let fd = open(partialPath, O_WRONLY)
            try #require(fd >= 0)
            #expect(planted.withUnsafeBytes { pwrite(fd, $0.baseAddress, size, 0) } == size)
            close(fd)

            let summary = try harness.send(paths: [root + "/big.bin"])
            #expect(summary.error == nil)
            if case .failed(let reason, let kind) = summary.results.first?.outcome {
                #expect(kind == .data)
                #expect(reason == "SHA-256 mismatch (held partial data differs from the sender's file)")
                #expect(!fileExists(dst + "/big.bin"))
                #expect(!fileExists(partialPath))
            } else {
                #expect(summary.succeeded, "\(summary.results)")
                let identical = readFile(dst + "/big.bin") == bytes
                #expect(identical)
            }
            let again = try harness.send(paths: [root + "/big.bin"])
            #expect(again.succeeded)
            let identical = readFile(dst + "/big.bin") == bytes
            #expect(identical)
        }
    }

    @Test("One byte flipped in transit is caught by the digest: nothing at the final name")
    func flippedInTransit() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try writeFile(root + "/data.bin", randomBytes(200_000, seed: 11))
            let harness = try TransferHarness(directory: dst)
            let relay = try FlippingRelay(to: harness.port, flipOffset: 30_000, on: harness.loop)
            let summary = try harness.send(
                [.path(root + "/data.bin")], options: TransferSendOptions(chunkSize: try ChunkSize(65536)),
                port: relay.port)
            #expect(summary.error == nil)
            guard case .failed(let reason, let kind) = summary.results.first?.outcome else {
                Issue.record("expected a failure, got \(summary.results)")
                return
            }
            #expect(kind == .data)
            #expect(reason.contains("\(TransferDigest.offered[0]) mismatch"))
            #expect(treePaths(dst) == [])
        }
    }

    @Test("A symbolic link at the final name is replaced only with overwrite, never followed")
    func finalNameSymlink() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try writeFile(root + "/target.txt", Array("outside".utf8))
            symlink(root + "/target.txt", dst + "/name.txt")
            try writeFile(root + "/src-name.txt", Array("sent".utf8))
            let harness = try TransferHarness(
                directory: dst, options: TransferReceiveOptions(overwrite: true, idleTimeout: .seconds(20)))
            let summary = try harness.send(
                [.stream(.memory(Array("sent".utf8)), name: "name.txt")])
            #expect(summary.succeeded)
            #expect(readFile(root + "/target.txt") == Array("outside".utf8))
            #expect(FileInfo(dst + "/name.txt")?.type == S_IFREG)
            #expect(readFile(dst + "/name.txt") == Array("sent".utf8))
        }
    }
}
