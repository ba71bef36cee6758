import Foundation
import Synchronization
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// Feeds `bytes` to `worker` in steps of `step`, as a session does: only what `room` allows,
/// running the loop (never blocking it) until `onRoom` says a slot is free again.
private func feed(
    _ worker: DigestWorker, _ digest: FileDigest, _ bytes: [UInt8], step: Int, loop: EventLoop,
    writingTo target: WriteTarget? = nil, at start: UInt64 = 0
) {
    var offset = 0
    var roomCame = false
    worker.onRoom = { roomCame = true }
    bytes.withUnsafeBytes { all in
        while offset < all.count {
            let want = min(step, all.count - offset)
            guard worker.hasRoom(for: 1) else {
                roomCame = false
                while !roomCame { _ = loop.run(for: .milliseconds(100)) }
                continue
            }
            let n = min(want, worker.room)
            worker.update(
                digest, UnsafeRawBufferPointer(rebasing: all[offset..<offset + n]), writingTo: target,
                at: start + UInt64(offset))
            offset += n
        }
    }
}

/// The digest, once the worker has finished it and said so on the loop.
private func finish(_ worker: DigestWorker, _ digest: FileDigest, loop: EventLoop) -> [UInt8]? {
    var result: [UInt8]?
    worker.finalize(digest) { result = $0 }
    let deadline = ContinuousClock.now.advanced(by: .seconds(60))
    while result == nil && ContinuousClock.now < deadline { _ = loop.run(for: .milliseconds(100)) }
    return result
}

@Suite("DigestWorker", .ownThreads)
struct DigestWorkerTests {
    /// The known SHA-256 of "abc" (FIPS 180-2, appendix B.1), and XXH3-128's of "" and "abc"
    /// (xxHash 0.8's reference values).
    @Test(
        "Matches known vectors through the worker",
        arguments: [
            (TransferDigest.sha256, "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
            (.xxh128, "", "99aa06d3014798d86001c324468d497f"),
            (.xxh128, "abc", "06b05ab6733a618578af5f94892f3950"),
        ])
    func knownVector(algorithm: TransferDigest, input: String, hex: String) throws {
        guard algorithm.isAvailable else { return }  // XXH3-128 without libxxhash: SHA-256 only
        let loop = try EventLoop()
        let worker = DigestWorker(loop: loop, slotSize: 2, slotCount: 2)
        let digest = FileDigest(algorithm)
        feed(worker, digest, Array(input.utf8), step: 3, loop: loop)
        let got = try #require(finish(worker, digest, loop: loop))
        #expect(got.count == algorithm.byteCount)
        #expect(SHA256Digest.hex(got) == hex)
        #expect(FileDigest.hash(algorithm, Array(input.utf8)) == got)
    }

    @Test(
        "finalizeNow gives a small digest at once, and declines more than its limit waiting in the slot",
        arguments: TransferDigest.offered)
    func finalizeNow(algorithm: TransferDigest) throws {
        let loop = try EventLoop()
        let small = randomBytes(5000, seed: 3)
        let worker = DigestWorker(loop: loop, slotSize: 65536, slotCount: 2)
        let digest = FileDigest(algorithm)
        feed(worker, digest, small, step: 1000, loop: loop)
        #expect(worker.finalizeNow(digest) == FileDigest.hash(algorithm, small))
        // The slot went back: the whole room is there for the next file.
        #expect(worker.room == worker.capacity)
        // More than the limit waiting in the slot: hashed on the worker instead.
        let large = FileDigest(algorithm)
        feed(worker, large, small, step: 1000, loop: loop)
        if algorithm == .sha256 {
            #expect(worker.finalizeNow(large, limit: 4096) == nil)
        }
        #expect(finish(worker, large, loop: loop) == FileDigest.hash(algorithm, small))
    }

    @Test(
        "Any update sizes against any slot sizes give the one-shot digest, never past the room",
        arguments: TransferDigest.offered, [(512, 1), (4096, 3), (1 << 20, 4), (65536, 2)])
    func updateSizes(algorithm: TransferDigest, slots: (Int, Int)) throws {
        let (slotSize, slotCount) = slots
        let loop = try EventLoop()
        let bytes = randomBytes(1_000_003)
        let expected = FileDigest.hash(algorithm, bytes)
        for step in [7, 511, 512, 65_536, 1_048_576, 1_000_003] {
            let worker = DigestWorker(loop: loop, slotSize: slotSize, slotCount: slotCount)
            #expect(worker.capacity == slotSize * slotCount)
            let digest = FileDigest(algorithm)
            feed(worker, digest, bytes, step: step, loop: loop)
            #expect(finish(worker, digest, loop: loop) == expected, "step \(step), slots \(slotCount) × \(slotSize)")
        }
    }

    @Test(
        "Digests that follow one another on one worker stay apart; the slots are reused",
        arguments: TransferDigest.offered)
    func manyDigests(algorithm: TransferDigest) throws {
        let loop = try EventLoop()
        let worker = DigestWorker(loop: loop, slotSize: 8192, slotCount: 2)
        for size in [0, 1, 8191, 8192, 8193, 100_000, 5] {
            let bytes = randomBytes(size)
            let digest = FileDigest(algorithm)
            feed(worker, digest, bytes, step: 4096, loop: loop)
            #expect(finish(worker, digest, loop: loop) == FileDigest.hash(algorithm, bytes), "size \(size)")
        }
    }

    @Test(
        "A file's prefix hashed on the worker, then more bytes; an unreadable prefix says so",
        arguments: TransferDigest.offered)
    func prefixThenBytes(algorithm: TransferDigest) throws {
        try withTemporaryDirectory { root in
            let loop = try EventLoop()
            let path = root + "/partial"
            let prefix = randomBytes(300_000)
            let rest = randomBytes(70_000)
            try Data(prefix).write(to: URL(fileURLWithPath: path))
            let fd = open(path, O_RDONLY)
            #expect(fd >= 0)
            defer { close(fd) }
            let worker = DigestWorker(loop: loop, slotSize: 65536, slotCount: 3)
            let digest = FileDigest(algorithm)
            var read: Bool?
            worker.hashPrefix(digest, of: fd, length: UInt64(prefix.count)) { read = $0 }
            feed(worker, digest, rest, step: 10_000, loop: loop)
            #expect(finish(worker, digest, loop: loop) == FileDigest.hash(algorithm, prefix + rest))
            #expect(read == true)
            // A prefix longer than the file cannot be read: false, and the worker goes on.
            let other = FileDigest(algorithm)
            var readOther: Bool?
            worker.hashPrefix(other, of: fd, length: UInt64(prefix.count) + 1) { readOther = $0 }
            let again = FileDigest(algorithm)
            feed(worker, again, rest, step: 70_000, loop: loop)
            #expect(finish(worker, again, loop: loop) == FileDigest.hash(algorithm, rest))
            #expect(readOther == false)
        }
    }

    @Test(
        "Writes what it hashes at the target's offsets, after the held bytes; afterQueued waits for the writes",
        arguments: TransferDigest.offered, [(4096, 1), (65536, 3), (1 << 20, 4)])
    func writesToTarget(algorithm: TransferDigest, slots: (Int, Int)) throws {
        try withTemporaryDirectory { root in
            let loop = try EventLoop()
            let path = root + "/file"
            let held = randomBytes(12_345, seed: 7)
            let bytes = randomBytes(1_000_003)
            for (index, step) in [1000, 65_536, 1_000_003].enumerated() {
                try Data(held).write(to: URL(fileURLWithPath: path))
                let fd = open(path, O_WRONLY)
                #expect(fd >= 0)
                defer { close(fd) }
                // A small writeback window: sync_file_range runs on the worker too.
                let target = WriteTarget(
                    fd: fd, display: path, writebackWindow: index == 1 ? 8192 : nil, start: UInt64(held.count))
                let worker = DigestWorker(loop: loop, slotSize: slots.0, slotCount: slots.1)
                var failed = false
                worker.onWriteFailed = { _ in failed = true }
                let digest = FileDigest(algorithm)
                feed(worker, digest, bytes, step: step, loop: loop, writingTo: target, at: UInt64(held.count))
                let sizeWhenIdle = Mutex<Int?>(nil)
                let idle = DispatchSemaphore(value: 0)
                worker.afterQueued {
                    var info = stat()
                    sizeWhenIdle.withLock { $0 = fstat(fd, &info) == 0 ? Int(info.st_size) : -1 }
                    idle.signal()
                }
                // On the worker, without the loop running: it needs nothing from the loop.
                #expect(idle.wait(timeout: .now() + 60) == .success)
                #expect(sizeWhenIdle.withLock { $0 } == held.count + bytes.count, "step \(step)")
                #expect(finish(worker, digest, loop: loop) == FileDigest.hash(algorithm, bytes), "step \(step)")
                #expect(try Array(Data(contentsOf: URL(fileURLWithPath: path))) == held + bytes, "step \(step)")
                #expect(!failed && target.failure == nil)
            }
        }
    }

    @Test(
        "Direct writes: whole blocks past the page cache, a tail through it, the same bytes; unaligned, all through it",
        arguments: [0, 8192, 12_345])
    func directWrites(held: Int) throws {
        try withTemporaryDirectory { root in
            let loop = try EventLoop()
            let path = root + "/file"
            let prefix = randomBytes(held, seed: 3)
            let bytes = randomBytes((3 << 20) + 1001, seed: 4)
            try Data(prefix).write(to: URL(fileURLWithPath: path))
            let fd = open(path, O_RDWR)
            try #require(fd >= 0)
            defer { close(fd) }
            let target = WriteTarget(fd: fd, display: path, writebackWindow: nil, start: UInt64(held))
            let direct = target.writeDirectly()
            let worker = DigestWorker(loop: loop, slotSize: 1 << 20, slotCount: 2)
            let digest = FileDigest(.xxh128)
            feed(worker, digest, bytes, step: 100_000, loop: loop, writingTo: target, at: UInt64(held))
            #expect(finish(worker, digest, loop: loop) == FileDigest.hash(.xxh128, bytes))
            #expect(target.failure == nil)
            // Where the file system takes O_DIRECT (ext4, xfs, btrfs), it stays on, and the
            // blocks written through it are not in the page cache (a start within a block
            // leaves the slots' memory out of step with the offsets: all buffered, the same bytes).
            if direct, held % WriteTarget.directAlignment == 0 {
                #expect(target.writesDirect)
                let size = held + bytes.count
                let page = Int(sysconf(Int32(_SC_PAGESIZE)))
                let map = mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0)
                try #require(map != MAP_FAILED)
                defer { munmap(map, size) }
                var resident = [UInt8](repeating: 0, count: (size + page - 1) / page)
                try #require(mincore(map, size, &resident) == 0)
                let cached = resident.filter { $0 & 1 != 0 }.count
                #expect(cached <= 4, "\(cached) of \(resident.count) pages cached")
            }
            #expect(try Array(Data(contentsOf: URL(fileURLWithPath: path))) == prefix + bytes)
        }
    }

    @Test("A failed write is reported once; nothing more is written or hashed for it; the worker goes on")
    func failedWrite() throws {
        let loop = try EventLoop()
        let fd = open("/dev/full", O_WRONLY)
        try #require(fd >= 0)
        defer { close(fd) }
        let target = WriteTarget(fd: fd, display: "/dev/full", writebackWindow: nil, start: 0)
        let worker = DigestWorker(loop: loop, slotSize: 4096, slotCount: 2)
        var reports = 0
        worker.onWriteFailed = { failed in
            #expect(failed === target)
            reports += 1
        }
        let digest = FileDigest(.sha256)
        feed(worker, digest, randomBytes(50_000), step: 3000, loop: loop, writingTo: target)
        #expect(finish(worker, digest, loop: loop) == FileDigest.hash(.sha256, []))
        #expect(reports == 1)
        #expect(target.failure?.code == .system(.noSpace))
        // The next file of the session is hashed as before.
        let next = FileDigest(.sha256)
        let bytes = randomBytes(10_000)
        feed(worker, next, bytes, step: 3000, loop: loop)
        #expect(finish(worker, next, loop: loop) == FileDigest.hash(.sha256, bytes))
    }
}
