import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// A sparse file (a VM disk image) changed and sent again with `send --sync`: it goes as a
/// delta, and the receiver's rebuilt file keeps the old file's holes; over real sockets into a
/// real directory.
@Suite("Deltas of sparse files", .ownThreads)
struct DeltaSparseTests {
    /// A file of `size` bytes at `path` holding `regions` (offset and bytes), holes elsewhere.
    static func writeSparse(_ path: String, size: Int, _ regions: [(Int, [UInt8])], mtime: Int) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        try #require(fd >= 0)
        defer { close(fd) }
        #expect(ftruncate(fd, off_t(size)) == 0)
        for (offset, bytes) in regions {
            let written = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) }
            #expect(written == bytes.count)
        }
        var times = [timespec(tv_sec: mtime, tv_nsec: 0), timespec(tv_sec: mtime, tv_nsec: 0)]
        #expect(futimens(fd, &times) == 0)
    }

    static func allocated(_ path: String) -> Int {
        var st = stat()
        guard stat(path, &st) == 0 else { return -1 }
        return Int(st.st_blocks) * 512
    }

    /// The regions of data: 1 MiB at each 16 MiB of a 64 MiB file, and its last 64 KiB.
    static let size = 64 << 20
    static func regions(seed: UInt64) -> [(Int, [UInt8])] {
        (0..<4).map { ($0 * (16 << 20), randomBytes(1 << 20, seed: seed + UInt64($0))) }
            + [(size - (64 << 10), randomBytes(64 << 10, seed: seed + 9))]
    }

    /// Writes `old` as the receiver's `root/dst/tree/name` and `new` as the sender's
    /// `root/tree/name` (sparse files: sizes and regions), syncs `root/tree` into `root/dst`,
    /// and checks that it went as a delta and arrived the same, size and bytes; returns the
    /// summary and both files' paths.
    static func sync(
        _ root: String, _ name: String, old: (Int, [(Int, [UInt8])]), new: (Int, [(Int, [UInt8])])
    ) throws -> (summary: TransferSummary, sent: String, stored: String) {
        let (sent, stored) = (root + "/tree/" + name, root + "/dst/tree/" + name)
        for dir in [root + "/tree", root + "/dst/tree"] {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        }
        try writeSparse(stored, size: old.0, old.1, mtime: 1_600_000_000)
        try writeSparse(sent, size: new.0, new.1, mtime: 1_600_000_100)
        let harness = try TransferHarness(directory: root + "/dst")
        var options = TransferSendOptions()
        options.sync = true
        let summary = try harness.send(paths: [root + "/tree"], options: options)
        #expect(summary.succeeded, "\(summary.results)")
        let result = try #require(summary.results.first { $0.path == "tree/" + name })
        #expect(result.sentAsDelta, "a sparse file goes as a delta")
        #expect(FileInfo(stored)?.size == new.0)
        #expect(FileInfo(stored)?.mtimeSeconds == 1_600_000_100)
        let same = readFile(stored) == readFile(sent)
        #expect(same, "the same bytes")
        return (summary, sent, stored)
    }

    @Test(
        "A changed sparse file goes as a delta: the same bytes, its holes kept holes, the old file's allocated zeros too"
    )
    func sparseDeltaKeepsHoles() throws {
        try withTemporaryDirectory { root in
            // The receiver's old file: data regions and holes, and 2 MiB of zeros written out
            // (allocated) right after the first region, its first blocks of zeros: the sender
            // finds the source's zeros there first.
            var old = Self.regions(seed: 1)
            old.append((1 << 20, [UInt8](repeating: 0, count: 2 << 20)))
            // The sender's: each region with 4 KiB rewritten, 64 KiB more in the first, the
            // second region gone (a hole now), and a new MiB in a hole.
            var new = Self.regions(seed: 1)
            for index in new.indices { new[index].1.replaceSubrange(0..<4096, with: randomBytes(4096, seed: 77)) }
            new[0].1.replaceSubrange(300_000..<(300_000 + (64 << 10)), with: randomBytes(64 << 10, seed: 5))
            new.remove(at: 1)
            new.append((50 << 20, randomBytes(1 << 20, seed: 50)))
            let (summary, sent, stored) = try Self.sync(root, "disk.img", old: (Self.size, old), new: (Self.size, new))
            // The new MiB and the changed blocks go literal; the rest, holes included, is COPY.
            #expect(summary.bytes < 2 << 20, "literal bytes: \(summary.bytes)")
            #expect(summary.bytesSent < 3 << 20, "on the wire: \(summary.bytesSent)")
            let (got, want) = (Self.allocated(stored), Self.allocated(sent))
            if want < 8 << 20 {
                // The source holds 4.0625 MiB of data; neither the old file's holes nor its
                // allocated zeros were written.
                #expect(got <= want + (256 << 10), "allocated: \(got) bytes, the source \(want)")
            }
        }
    }

    @Test(
        "A sparse file grown by a hole, ending in zeros short of a block (DATA left a hole): the rebuilt file has its full size"
    )
    func endsInAHole() throws {
        try withTemporaryDirectory { root in
            let data = randomBytes(1 << 20, seed: 3)
            var changed = data
            changed.replaceSubrange(0..<(64 << 10), with: randomBytes(64 << 10, seed: 4))
            // Grown by 8 MiB of hole, and a few zeros that are not a whole block at its end.
            let (_, sent, stored) = try Self.sync(
                root, "vm.img", old: (32 << 20, [(0, data)]), new: ((40 << 20) + 1000, [(0, changed)]))
            if Self.allocated(sent) < 4 << 20 {
                #expect(Self.allocated(stored) < 2 << 20, "\(Self.allocated(stored)) allocated")
            }
        }
    }
}
