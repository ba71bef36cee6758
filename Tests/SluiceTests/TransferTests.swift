import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

@Suite("Transfer", .ownThreads)
struct TransferTests {
    @Test("One file arrives identical, with its mode and mtime")
    func oneFile() throws {
        try withTemporaryDirectory { root in
            let src = root + "/src"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try writeFile(src + "/a.bin", randomBytes(300_000), mode: 0o640, mtime: (1_000_000_000, 123_456_789))
            let harness = try TransferHarness(directory: dst)
            let summary = try harness.send(
                paths: [src + "/a.bin"], options: TransferSendOptions(chunkSize: try ChunkSize(65536)))
            #expect(summary.error == nil)
            #expect(summary.results.map(\.outcome) == [.stored])
            #expect(summary.files == 1)
            #expect(summary.bytes == 300_000)
            #expect(summary.bytesSent > 300_000)
            #expect(readFile(dst + "/a.bin") == readFile(src + "/a.bin"))
            #expect(FileInfo(dst + "/a.bin") == FileInfo(src + "/a.bin"))
            #expect(!fileExists(dst + "/.a.bin.sluice-part"))
            #expect(harness.reports.count == 1)
            #expect(harness.reports.first?.error == nil)
            #expect(harness.reports.first?.files == 1)
        }
    }

    /// The sender asks its hasher room for a whole chunk: with the largest chunk (4 MiB) it
    /// must still have it, or the transfer would stop for good.
    @Test("A file sent in the largest chunks, 4 MiB, arrives identical")
    func largestChunks() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try writeFile(root + "/big.bin", randomBytes(9 << 20 + 5), mode: 0o644, mtime: (1_000_000_000, 0))
            let harness = try TransferHarness(directory: dst)
            let summary = try harness.send(
                paths: [root + "/big.bin"], options: TransferSendOptions(chunkSize: try ChunkSize(4 << 20)))
            #expect(summary.error == nil)
            #expect(summary.results.map(\.outcome) == [.stored])
            let same = readFile(dst + "/big.bin") == readFile(root + "/big.bin")
            #expect(same)
        }
        #expect(DigestWorker.slotsToHold(4 << 20) == 5)
        #expect(DigestWorker.slotsToHold(1 << 20) == 2)
        #expect(DigestWorker.slotsToHold(65536) == 2)
    }

    @Test("A tree with nested and empty directories, an empty file, spaces and non-ASCII names")
    func tree() throws {
        try withTemporaryDirectory { root in
            let tree = root + "/src/photos"
            let dst = root + "/dst"
            let fm = FileManager.default
            for dir in ["", "/2024/summer", "/empty dir", "/日本/ファイル", "/deep/a/b/c/d"] {
                try fm.createDirectory(atPath: tree + dir, withIntermediateDirectories: true)
            }
            try fm.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try writeFile(tree + "/2024/summer/beach day.jpg", randomBytes(150_000, seed: 1), mtime: (1_500_000_000, 1))
            try writeFile(tree + "/2024/empty.txt", [], mode: 0o600)
            try writeFile(tree + "/日本/ファイル/héllo wörld.txt", Array("grüße".utf8), mode: 0o755)
            try writeFile(tree + "/deep/a/b/c/d/x", randomBytes(70_000, seed: 2))
            try writeFile(tree + "/top.txt", Array("top".utf8))
            symlink("/etc/passwd", tree + "/link-out")
            // Directory times last: creating the files changed them.
            for dir in ["/2024/summer", "/2024", "/empty dir", "/日本/ファイル", "/日本", "/deep/a/b/c/d", ""] {
                let times = [timespec(tv_sec: 1_400_000_000, tv_nsec: 0), timespec(tv_sec: 1_400_000_000, tv_nsec: 5)]
                utimensat(AT_FDCWD, tree + dir, times, 0)
            }
            let harness = try TransferHarness(directory: dst)
            var warnings: [String] = []
            let sender = try TransferSender(
                paths: [tree + "/"], options: TransferSendOptions(chunkSize: try ChunkSize(16384)),
                warning: { warnings.append($0) })
            #expect(warnings.isEmpty, "a symbolic link is sent as a link: \(warnings)")
            let (input, output) = Socket.connect(host: "127.0.0.1", port: harness.port)
            var summary: TransferSummary?
            sender.start(input: input, output: output, on: harness.loop) { summary = $0 }
            runLoop(harness.loop, for: .seconds(20)) { summary != nil && harness.reports.count == 1 }
            let result = try #require(summary)
            #expect(result.error == nil)
            #expect(result.succeeded, "\(result.results)")
            #expect(result.files == 6)
            #expect(result.links == 1)
            // The link arrives as a link, holding its target as written, never followed.
            #expect(
                try FileManager.default.destinationOfSymbolicLink(atPath: dst + "/photos/link-out") == "/etc/passwd")
            #expect(treeDifferences(tree, dst + "/photos") == [])
        }
    }

    @Test("16 senders at once into one receiver on one loop")
    func manySenders() throws {
        try withTemporaryDirectory { root in
            let src = root + "/src"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            for i in 0..<16 {
                try writeFile(src + "/file-\(i).bin", randomBytes(100_000 + i * 37_000, seed: UInt64(i + 10)))
            }
            let harness = try TransferHarness(directory: dst)
            var boxes: [SummaryBox] = []
            var senders: [TransferSender] = []
            for i in 0..<16 {
                let (sender, box) = try harness.startSender(
                    [.path(src + "/file-\(i).bin")],
                    options: TransferSendOptions(compress: i % 2 == 0, chunkSize: try ChunkSize(32768)))
                senders.append(sender)
                boxes.append(box)
            }
            runLoop(harness.loop, for: .seconds(30)) {
                boxes.allSatisfy { $0.summary != nil } && harness.reports.count == 16
            }
            for (i, box) in boxes.enumerated() {
                let summary = try #require(box.summary)
                #expect(summary.succeeded, "sender \(i): \(summary.error?.description ?? "") \(summary.results)")
                #expect(readFile(dst + "/file-\(i).bin") == readFile(src + "/file-\(i).bin"))
            }
            #expect(harness.reports.allSatisfy { $0.error == nil })
            #expect(treePaths(dst).count == 16)
        }
    }

    @Test(
        "Small files go out eagerly, refusals among them skip only their own data, and peers without eager get the same tree",
        arguments: [(true, true), (false, true), (true, false)])
    func eagerSmallFiles(receiverEager: Bool, senderEager: Bool) throws {
        try withTemporaryDirectory { root in
            let tree = root + "/src/t"
            let dst = root + "/dst"
            let fm = FileManager.default
            for i in 0..<10 { try fm.createDirectory(atPath: tree + "/d\(i)", withIntermediateDirectories: true) }
            try fm.createDirectory(atPath: dst + "/t/d3", withIntermediateDirectories: true)
            var expected: [String: [UInt8]] = [:]
            for i in 0..<300 {
                // Sizes 0 to 64 KiB + 1: the eager limit and just past it included.
                let size = i == 7 ? Int(Wire.eagerLimit) : i == 8 ? Int(Wire.eagerLimit) + 1 : (i * 997) % 5000
                let relative = "t/d\(i % 10)/f\(i)"
                let bytes = randomBytes(size, seed: UInt64(i + 1))
                try writeFile(root + "/src/" + relative, bytes)
                expected[relative] = bytes
            }
            // Already at the destination: refused 'exists' while the files around it are stored.
            let old = Array("old".utf8)
            try writeFile(dst + "/t/d3/f13", old)
            expected["t/d3/f13"] = old
            var options = TransferReceiveOptions(fsync: false, idleTimeout: .seconds(20))
            options.eager = receiverEager
            let harness = try TransferHarness(directory: dst, options: options)
            var sendOptions = TransferSendOptions(chunkSize: try ChunkSize(16384))
            sendOptions.eager = senderEager
            let summary = try harness.send(paths: [tree], options: sendOptions)
            #expect(summary.error == nil, "\(summary.error?.description ?? "")")
            let refused = summary.results.filter { !$0.outcome.isStored }
            #expect(refused.map(\.path) == ["t/d3/f13"])
            #expect(refused.first?.outcome == .refused(reason: "exists"))
            #expect(summary.results.count == 311)
            for (relative, bytes) in expected {
                #expect(readFile(dst + "/" + relative) == bytes, "\(relative)")
            }
            #expect(treePaths(dst).filter { $0.contains("sluice-part") } == [])
            #expect(harness.reports.count == 1 && harness.reports.first?.error == nil)
        }
    }

    @Test(
        "With direct writes, large, compressed, odd-sized and small files arrive identical", arguments: [false, true])
    func directWrites(fsync: Bool) throws {
        try withTemporaryDirectory { root in
            let src = root + "/src"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            // Whole slots, a tail of a block, a file of exactly one slot, one under the minimum.
            let sizes = [3 << 20, (2 << 20) + 4097, 1 << 20, 5000]
            for (i, size) in sizes.enumerated() {
                try writeFile(src + "/f\(i)", randomBytes(size, seed: UInt64(i + 40)))
            }
            let options = TransferReceiveOptions(
                overwrite: true, fsync: fsync, idleTimeout: .seconds(20), directIO: true)
            let harness = try TransferHarness(directory: dst, options: options)
            for compress in [false, true] {
                let summary = try harness.send(
                    paths: sizes.indices.map { src + "/f\($0)" },
                    options: TransferSendOptions(compress: compress, chunkSize: try ChunkSize(65536)))
                #expect(summary.succeeded, "\(summary.error?.description ?? "") \(summary.results)")
                for i in sizes.indices {
                    #expect(readFile(dst + "/f\(i)") == readFile(src + "/f\(i)"), "f\(i), compress \(compress)")
                }
            }
            #expect(treePaths(dst).count == sizes.count)
            #expect(harness.reports.allSatisfy { $0.error == nil })
        }
    }

    @Test("An existing file is refused 'exists' and left alone; overwrite replaces it")
    func existingFile() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try writeFile(root + "/same.txt", Array("new contents".utf8))
            try writeFile(dst + "/same.txt", Array("old".utf8))
            let harness = try TransferHarness(directory: dst)
            let summary = try harness.send(paths: [root + "/same.txt"])
            #expect(summary.results.map(\.outcome) == [.refused(reason: "exists")])
            #expect(!summary.succeeded)
            #expect(summary.error == nil)
            #expect(readFile(dst + "/same.txt") == Array("old".utf8))
            #expect(treePaths(dst) == ["same.txt"])

            let replacing = try TransferHarness(
                directory: dst, options: TransferReceiveOptions(overwrite: true, idleTimeout: .seconds(20)))
            let again = try replacing.send(paths: [root + "/same.txt"])
            #expect(again.succeeded)
            #expect(readFile(dst + "/same.txt") == Array("new contents".utf8))
        }
    }

    @Test("Files above maxSize are refused, by header and by stream length")
    func maxSize() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try writeFile(root + "/big", randomBytes(20_000))
            let harness = try TransferHarness(
                directory: dst, options: TransferReceiveOptions(maxSize: 10_000, idleTimeout: .seconds(20)))
            let summary = try harness.send(
                [.path(root + "/big"), .stream(.memory(randomBytes(30_000)), name: "piped")],
                options: TransferSendOptions(chunkSize: try ChunkSize(4096)))
            #expect(summary.error == nil)
            #expect(summary.results.count == 2)
            for result in summary.results {
                guard case .refused(let reason) = result.outcome else {
                    Issue.record("\(result.path): \(result.outcome)")
                    continue
                }
                #expect(reason.hasPrefix("too large"))
            }
            #expect(treePaths(dst) == [])
        }
    }

    @Test("A stream of unknown length (like stdin) is stored under its name")
    func streamSource() throws {
        try withTemporaryDirectory { root in
            let bytes = randomBytes(1_000_003, seed: 7)
            let harness = try TransferHarness(directory: root)
            let summary = try harness.send(
                [.stream(.memory(bytes), name: "from-stdin.bin", mode: 0o600)],
                options: TransferSendOptions(compress: true, chunkSize: try ChunkSize(65536)))
            #expect(summary.succeeded, "\(summary.results)")
            #expect(summary.results.first?.size == 1_000_003)
            #expect(readFile(root + "/from-stdin.bin") == bytes)
            #expect(FileInfo(root + "/from-stdin.bin")?.mode == 0o600)
        }
    }

    @Test("Compressed transfer round trip: fewer bytes on the wire, identical files")
    func compressed() throws {
        try withTemporaryDirectory { root in
            let src = root + "/src"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let text = Array(String(repeating: "the quick brown fox jumps over the lazy dog\n", count: 50_000).utf8)
            try writeFile(src + "/text.txt", text)
            try writeFile(src + "/random.bin", randomBytes(500_000, seed: 3))
            try writeFile(src + "/empty", [])
            let harness = try TransferHarness(directory: dst)
            let summary = try harness.send(
                paths: [src], options: TransferSendOptions(compress: true, compressionLevel: 6))
            #expect(summary.succeeded, "\(summary.results)")
            #expect(summary.bytes == UInt64(text.count + 500_000))
            #expect(summary.bytesSent < summary.bytes / 2)
            #expect(treeDifferences(src, dst + "/src", compareDirectoryTimes: false) == [])
        }
    }

    @Test(
        "Compression on 1 and 4 worker threads sends the same bytes and stores identical files",
        arguments: [1, 4])
    func compressedThreads(threads: Int) throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            // Ten blocks and a bit: several jobs in flight, a short last block.
            let text = Array(String(repeating: "sluice moves bytes, block by block; ", count: 40_000).utf8)
            let bytes = text + randomBytes(10 * 131_072 + 17 - text.count % 131_072, seed: 11)
            try writeFile(root + "/big", bytes)
            let harness = try TransferHarness(directory: dst)
            let summary = try harness.send(
                paths: [root + "/big"],
                options: TransferSendOptions(compress: true, compressionLevel: 1, threads: threads))
            #expect(summary.succeeded, "\(summary.results)")
            #expect(readFile(dst + "/big") == bytes)
            #expect(summary.bytesSent < UInt64(bytes.count))
        }
    }
}
