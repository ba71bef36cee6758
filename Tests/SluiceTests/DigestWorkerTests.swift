import Foundation
import Testing

@testable import Sluice

#if canImport(Glibc)
    import Glibc
#endif

@Suite("DigestWorker")
struct DigestWorkerTests {
    /// The known SHA-256 of "abc" (FIPS 180-2, appendix B.1).
    @Test("Matches the FIPS 180-2 test vector, small and through the queue")
    func knownVector() {
        let worker = DigestWorker(slotSize: 2, slotCount: 2)
        let digest = SHA256Digest()
        Array("abc".utf8).withUnsafeBytes { worker.update(digest, $0) }
        #expect(
            SHA256Digest.hex(worker.finalize(digest))
                == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test(
        "Any update sizes against any slot sizes give the one-shot digest",
        arguments: [(512, 1), (4096, 3), (1 << 20, 4), (65536, 2)])
    func updateSizes(slotSize: Int, slotCount: Int) {
        let bytes = randomBytes(1_000_003)
        let expected = SHA256Digest.hash(bytes)
        for step in [7, 511, 512, 65_536, 1_048_576, 1_000_003] {
            let worker = DigestWorker(slotSize: slotSize, slotCount: slotCount)
            let digest = SHA256Digest()
            bytes.withUnsafeBytes { all in
                var offset = 0
                while offset < all.count {
                    let end = min(offset + step, all.count)
                    worker.update(digest, UnsafeRawBufferPointer(rebasing: all[offset..<end]))
                    offset = end
                }
            }
            let got = worker.finalize(digest)
            #expect(got == expected, "step \(step), slots \(slotCount) × \(slotSize)")
        }
    }

    @Test("Digests that follow one another on one worker stay apart; the slots are reused")
    func manyDigests() {
        let worker = DigestWorker(slotSize: 8192, slotCount: 2)
        for size in [0, 1, 8191, 8192, 8193, 100_000, 5] {
            let bytes = randomBytes(size)
            let digest = SHA256Digest()
            bytes.withUnsafeBytes { worker.update(digest, $0) }
            #expect(worker.finalize(digest) == SHA256Digest.hash(bytes), "size \(size)")
        }
    }

    @Test("A file's prefix read straight into the slots, then more bytes")
    func prefixThenBytes() throws {
        try withTemporaryDirectory { root in
            let path = root + "/partial"
            let prefix = randomBytes(300_000)
            let rest = randomBytes(70_000)
            try Data(prefix).write(to: URL(fileURLWithPath: path))
            let fd = open(path, O_RDONLY)
            #expect(fd >= 0)
            defer { close(fd) }
            let worker = DigestWorker(slotSize: 65536, slotCount: 3)
            let digest = SHA256Digest()
            #expect(worker.update(digest, readingPrefixOf: fd, length: UInt64(prefix.count)))
            rest.withUnsafeBytes { worker.update(digest, $0) }
            #expect(worker.finalize(digest) == SHA256Digest.hash(prefix + rest))
            // A prefix longer than the file cannot be read: false, and the worker goes on.
            let other = SHA256Digest()
            #expect(!worker.update(other, readingPrefixOf: fd, length: UInt64(prefix.count) + 1))
            let again = SHA256Digest()
            rest.withUnsafeBytes { worker.update(again, $0) }
            #expect(worker.finalize(again) == SHA256Digest.hash(rest))
        }
    }
}
