import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// The one way a file is hashed from disk (`FileDigest.update(readingFrom:)`), and the system
/// calls beneath it: `retryingOnInterrupt` and `preadFully`, against real files.
@Suite("Hashing a file from disk, and the EINTR loop beneath it", .ownThreads)
struct FileHashingTests {
    /// Runs `body` with a temporary file holding `bytes`, open read-only, and its directory.
    private static func withFile(_ bytes: [UInt8], _ body: (Int32, String) throws -> Void) throws {
        try withTemporaryDirectory { root in
            let path = root + "/file"
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
            #expect(fd >= 0)
            defer { close(fd) }
            try body(fd, root)
        }
    }

    @Test(
        "Any range of a file, or up to its end, hashes as its bytes do, whatever the buffer; the file offset is left alone",
        arguments: TransferDigest.offered, [4093, 65_537, 1 << 20])
    func ranges(algorithm: TransferDigest, bufferSize: Int) throws {
        let bytes = randomBytes(300_001, seed: 3)
        try Self.withFile(bytes) { fd, _ in
            #expect(lseek(fd, 7, SEEK_SET) == 7)
            for (start, end) in [(0, bytes.count), (0, 0), (1, 65_538), (299_999, bytes.count), (12_345, 200_000)] {
                let digest = FileDigest(algorithm)
                let read = digest.update(
                    readingFrom: fd, from: UInt64(start), to: UInt64(end), bufferSize: bufferSize)
                #expect(read)
                #expect(digest.finalize() == FileDigest.hash(algorithm, bytes[start..<end]), "\(start)..<\(end)")
            }
            let toEnd = FileDigest(algorithm)
            #expect(toEnd.update(readingFrom: fd, from: 100, to: nil, bufferSize: bufferSize))
            #expect(toEnd.finalize() == FileDigest.hash(algorithm, bytes[100...]))
            #expect(FileDigest.hash(algorithm, of: fd, to: nil) == FileDigest.hash(algorithm, bytes))
            #expect(lseek(fd, 0, SEEK_CUR) == 7, "pread leaves the descriptor's offset")
        }
    }

    @Test("A range past the end of the file, an unreadable descriptor, or an offset past off_t: false or nil")
    func shortOrUnreadable() throws {
        let bytes = randomBytes(10_000, seed: 4)
        try Self.withFile(bytes) { fd, root in
            #expect(!FileDigest(.sha256).update(readingFrom: fd, to: UInt64(bytes.count) + 1))
            #expect(FileDigest.hash(.sha256, of: fd, to: UInt64(bytes.count) + 1) == nil)
            #expect(FileDigest.hash(.sha256, of: fd, from: UInt64(Int64.max) + 1, to: nil) == nil)
            // A directory's descriptor opens, but its bytes cannot be read (EISDIR).
            let directory = Glibc.open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            #expect(directory >= 0)
            defer { close(directory) }
            #expect(FileDigest.hash(.sha256, of: directory, to: nil) == nil)
            #expect(FileDigest.hash(.sha256, of: directory, to: 1) == nil)
        }
    }

    @Test(
        "A sparse file hashed skipping its holes hashes as when every byte is read", arguments: TransferDigest.offered)
    func sparse(algorithm: TransferDigest) throws {
        try withTemporaryDirectory { root in
            let path = root + "/sparse"
            let data = randomBytes(5_000, seed: 5)
            let fd = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            #expect(fd >= 0)
            defer { close(fd) }
            // Data, a hole of 3 MiB, data, a hole to the end.
            let size = 8 << 20
            #expect(ftruncate(fd, off_t(size)) == 0)
            for at in [0, 3 << 20] {
                #expect(data.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(at)) } == data.count)
            }
            var whole = [UInt8](repeating: 0, count: size)
            whole.replaceSubrange(0..<data.count, with: data)
            whole.replaceSubrange((3 << 20)..<(3 << 20) + data.count, with: data)
            for (start, end) in [(0, size), (4_000, (3 << 20) + 100), ((1 << 20), size - 1)] {
                let skipping = FileDigest(algorithm)
                let read = skipping.update(
                    readingFrom: fd, from: UInt64(start), to: UInt64(end), sparseSize: UInt64(size))
                #expect(read)
                let reading = FileDigest(algorithm)
                #expect(reading.update(readingFrom: fd, from: UInt64(start), to: UInt64(end)))
                let expected = FileDigest.hash(algorithm, whole[start..<end])
                #expect(skipping.finalize() == expected)
                #expect(reading.finalize() == expected)
            }
        }
    }

    @Test("preadFully fills the buffer from the offset, or says it could not")
    func readFully() throws {
        let bytes = randomBytes(70_000, seed: 6)
        try Self.withFile(bytes) { fd, _ in
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 16)
            defer { buffer.deallocate() }
            #expect(preadFully(fd, into: buffer, at: 4_464))
            #expect(Array(buffer) == Array(bytes[4_464...]))
            #expect(!preadFully(fd, into: buffer, at: 4_465), "the file ends a byte short")
            #expect(preadFully(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<0]), at: 1 << 40))
        }
    }

    @Test("retryingOnInterrupt calls again after EINTR, and only then; errno stays what the last call set")
    func interrupted() {
        var calls = 0
        let result = retryingOnInterrupt { () -> Int in
            calls += 1
            if calls < 3 {
                errno = EINTR
                return -1
            }
            return 42
        }
        #expect(result == 42 && calls == 3)

        calls = 0
        let failed = retryingOnInterrupt { () -> Int32 in
            calls += 1
            errno = EAGAIN
            return -1
        }
        #expect(failed == -1 && calls == 1 && errno == EAGAIN)

        calls = 0
        let other = retryingOnInterrupt { () -> Int in
            calls += 1
            errno = EINTR  // left over from an earlier call: a result other than -1 is final
            return 0
        }
        #expect(other == 0 && calls == 1)
    }
}
