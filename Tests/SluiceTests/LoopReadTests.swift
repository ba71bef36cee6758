import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// A sender reads a small file in the page cache on its loop, straight into the connection's
/// buffer (`TransferSender.readOnLoop`, `preadv2` with `RWF_NOWAIT`), and leaves what the cache
/// does not hold to a worker.
@Suite("Small files read on the loop", .ownThreads)
struct LoopReadTests {
    /// A file of `bytes` opened as a sender opens it, and its `OutgoingFile` read on the loop.
    private static func opened(_ path: String, claimedSize: UInt64? = nil, mtimeOff: Int = 0) throws -> (
        Int32, OutgoingFile
    ) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        try #require(fd >= 0)
        var st = stat()
        try #require(fstat(fd, &st) == 0)
        var mtime = st.st_mtim
        mtime.tv_nsec = (mtime.tv_nsec + mtimeOff) % 1_000_000_000
        let file = OutgoingFile(
            index: 0, fd: fd, stream: nil, size: claimedSize ?? UInt64(st.st_size), digest: .xxh128,
            openedMtime: mtime, readsOnLoop: true)
        return (fd, file)
    }

    /// Reads `file` on the loop a buffer of `capacity` at a time until it ends or goes to a
    /// worker, as `produce` does: the bytes read and how it stopped.
    private static func readAll(
        _ sender: TransferSender, _ file: OutgoingFile, _ fd: Int32, capacity: Int
    ) -> ([UInt8], TransferSender.LoopRead) {
        var out: [UInt8] = []
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let read = sender.readOnLoop(file, fd, into: buffer)
            guard case .bytes(let n) = read else { return (out, read) }
            out += buffer[0..<n]
            file.advance(UInt64(n))
        }
    }

    @Test("A cached file is read whole on the loop, buffer by buffer; its change since its open is told at its end")
    func readsCachedBytesAndTellsChange() throws {
        try withTemporaryDirectory { root in
            let data = randomBytes(10_000, seed: 52)
            try writeFile(root + "/f", data)
            try writeFile(root + "/empty", [])
            let sender = try TransferSender(sources: [.path(root)], options: TransferSendOptions())

            let (fd, file) = try Self.opened(root + "/f")
            defer { close(fd) }
            let (bytes, last) = Self.readAll(sender, file, fd, capacity: 4096)
            #expect(bytes == data)
            guard case .end = last else { throw Failure("ended with \(last)") }
            #expect(!file.changed)

            // Its mtime is not what it was at its open: stored as read, and the sender warns.
            let (fd2, touched) = try Self.opened(root + "/f", mtimeOff: 1)
            defer { close(fd2) }
            let (again, _) = Self.readAll(sender, touched, fd2, capacity: 65536)
            #expect(again == data)
            #expect(touched.changed)

            let (fd3, empty) = try Self.opened(root + "/empty")
            defer { close(fd3) }
            let (none, end) = Self.readAll(sender, empty, fd3, capacity: 4096)
            #expect(none.isEmpty)
            guard case .end = end else { throw Failure("the empty file ended with \(end)") }
            #expect(!empty.changed)

            #expect(sender.opens.loopReads.whole == 3)
            #expect(sender.opens.loopReads.missed == 0)
        }
    }

    @Test("A file that shrank since its open goes to a worker at the cut, to be told as shrunk there")
    func shrunkFileGoesToTheWorker() throws {
        try withTemporaryDirectory { root in
            let data = randomBytes(5000, seed: 53)
            try writeFile(root + "/f", data)
            let sender = try TransferSender(sources: [.path(root)], options: TransferSendOptions())
            let (fd, file) = try Self.opened(root + "/f", claimedSize: 6000)
            defer { close(fd) }
            let (bytes, last) = Self.readAll(sender, file, fd, capacity: 4096)
            #expect(bytes == data)
            guard case .worker = last else { throw Failure("ended with \(last)") }
            // Not a miss of the cache: the next files are still read on the loop.
            #expect(sender.opens.loopReads.missed == 0)
            #expect(sender.opens.loopReads.next() == .onLoop)
        }
    }

    @Test("A tree of cached small files is sent with their bytes read on the loop")
    func cachedTreeReadOnLoop() throws {
        try withTemporaryDirectory { root in
            let source = root + "/src"
            try FileManager.default.createDirectory(atPath: source + "/d", withIntermediateDirectories: true)
            var paths = (0..<40).map { source + "/d/s\($0)" }
            for (i, path) in paths.enumerated() { try writeFile(path, randomBytes(i * 1700, seed: UInt64(i))) }
            paths += [source + "/limit", source + "/big"]
            try writeFile(paths[40], randomBytes(Int(Wire.wholeLimit), seed: 98))
            try writeFile(paths[41], randomBytes(Int(Wire.wholeLimit) + 1, seed: 99))
            try Self.writtenBack(paths)
            let reads = try Self.send(source, into: root + "/dst")
            // The 41 small files (the one of `wholeLimit` bytes included), not the big one.
            #expect(reads.whole == 41, "\(reads)")
            #expect(reads.missed == 0)
        }
    }

    @Test("Each file of a tree is opened once: opening ahead never opens again what is being opened")
    func eachFileOpenedOnce() throws {
        try withTemporaryDirectory { root in
            let source = root + "/src"
            try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: true)
            for i in 0..<300 { try writeFile(source + "/f\(1000 + i)", randomBytes(100 + i, seed: UInt64(i))) }
            var opened = 0
            _ = try Self.send(source, into: root + "/dst") { opened = $0.opens.handedOut }
            // (When the entry waited for was still being opened, what followed it was opened
            // again: 303 here in a debug build, 198 opens for 100 files in a release one.)
            #expect(opened == 300)
        }
    }

    /// Sends the tree `source` into `dst` (made here) and checks it arrived whole: what the
    /// sender's reads on the loop counted.
    private static func send(
        _ source: String, into dst: String, sent: (TransferSender) -> Void = { _ in }
    ) throws -> LoopReads {
        try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
        let harness = try TransferHarness(directory: dst)
        let (sender, box) = try harness.startSender([.path(source)])
        runLoop(harness.loop, for: .seconds(30)) { box.summary != nil && !harness.reports.isEmpty }
        let summary = try #require(box.summary)
        #expect(summary.error == nil)
        #expect(summary.results.allSatisfy { $0.outcome == .stored })
        #expect(treeDifferences(source, dst + "/src").isEmpty, "\(treeDifferences(source, dst + "/src"))")
        sent(sender)
        return sender.opens.loopReads
    }

    /// Sends a tree of 100 small files, those of `evicted` (indices) dropped from the page cache
    /// first, and checks it arrived whole: what the sender's reads on the loop counted.
    private static func sendTree(evicting evicted: Range<Int>) throws -> LoopReads {
        try withTemporaryDirectory { root in
            let source = root + "/src"
            try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: true)
            var paths: [String] = []
            for i in 0..<100 {
                paths.append(source + "/f\(String(1000 + i))")
                try writeFile(paths[i], randomBytes(3000 + i * 300, seed: UInt64(i)))
            }
            try Self.writtenBack(paths)
            // Dropped from the page cache (checked: none of their pages left; a page still on a
            // CPU's list of pages being added is dropped by a later call).
            for path in paths[evicted] {
                let fd = open(path, O_RDONLY | O_CLOEXEC)
                try #require(fd >= 0)
                var attempts = 0
                repeat {
                    #expect(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0)
                    attempts += 1
                } while Self.residentPages(fd) != 0 && attempts < 1000
                #expect(Self.residentPages(fd) == 0, "\(path) is still cached")
                close(fd)
            }
            return try Self.send(source, into: root + "/dst")
        }
    }

    @Test("Files not in the page cache are read on workers, and arrive whole")
    func uncachedFilesGoToWorkers() throws {
        let reads = try Self.sendTree(evicting: 0..<100)
        // The first file missed the cache, and those opened ahead for the loop with it; most of
        // the next `workerTurnsAfterMiss` were read whole on their workers, not tried first.
        let tried = reads.whole + reads.missed
        #expect(reads.missed >= 1 && tried <= 100 - LoopReads.workerTurnsAfterMiss / 2, "\(reads)")
    }

    @Test("One file dropped from the cache: a worker reads it, and the loop reads the others again soon")
    func oneUncachedFile() throws {
        let reads = try Self.sendTree(evicting: 0..<1)
        // Those opened with it for the loop and one job's files on their worker are not read on
        // the loop; the worker found the latter cached, and the loop takes the rest.
        #expect(reads.missed >= 1, "\(reads)")
        #expect(reads.whole >= 100 - 1 - TransferSender.opensAheadLimit - TransferSender.opensPerJob, "\(reads)")
    }

    /// Writes back the files at `paths`: a page being written back is locked for a moment, and
    /// a read that does not wait finds it so (a miss of the cache, `EAGAIN`).
    private static func writtenBack(_ paths: [String]) throws {
        for path in paths {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            try #require(fd >= 0)
            #expect(fsync(fd) == 0)
            close(fd)
        }
    }

    /// How many of `fd`'s pages the page cache holds (`mincore` of a mapping of it).
    private static func residentPages(_ fd: Int32) -> Int {
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_size > 0 else { return 0 }
        let length = Int(st.st_size)
        guard let map = mmap(nil, length, PROT_READ, MAP_SHARED, fd, 0), map != MAP_FAILED else { return -1 }
        defer { munmap(map, length) }
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        var vector = [UInt8](repeating: 0, count: (length + page - 1) / page)
        guard mincore(map, length, &vector) == 0 else { return -1 }
        return vector.filter { $0 & 1 != 0 }.count
    }

    private struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }
}
