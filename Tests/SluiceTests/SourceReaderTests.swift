import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// The sender's reads of a file on its read lane: hashed as they are read, and taken whole as
/// frames the connection writes from where they were read.
@Suite("Source reads", .ownThreads)
struct SourceReaderTests {
    /// A file of `count` pseudo-random bytes in `directory`; its path and bytes.
    private static func file(_ count: Int, in directory: String) throws -> (path: String, bytes: [UInt8]) {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        let bytes = (0..<count).map { _ -> UInt8 in
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: state >> 33)
        }
        let path = directory + "/f"
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return (path, bytes)
    }

    @Test(
        "Reads that hash as they read give the whole file's XXH3-128, whatever the chunk against the hashing piece",
        arguments: [1 << 20, 700_001, 4096])
    func readsHashTheFileInOrder(chunk: Int) throws {
        guard TransferDigest.xxh128.isAvailable else { return }
        try withTemporaryDirectory { try readsHashTheFileInOrder(chunk: chunk, in: $0) }
    }

    private func readsHashTheFileInOrder(chunk: Int, in directory: String) throws {
        let count = 3 * ReadCursor.hashPiece + 12_345
        let (path, bytes) = try Self.file(count, in: directory)
        let fd = open(path, O_RDONLY)
        #expect(fd >= 0)
        defer { close(fd) }
        let digest = FileDigest(.xxh128)
        let cursor = ReadCursor(
            fd: fd, path: path, from: 0, to: UInt64(count), sparse: false, opened: nil, digest: digest)
        #expect(cursor.hashes)
        let buffer = ReadBuffer(capacity: chunk)
        var read: [UInt8] = []
        reading: while true {
            switch cursor.next(into: buffer) {
            case .data(let n, _, _): read += buffer.bytes[0..<n]
            case .end: break reading
            case .hole, .failed: Issue.record("not data or the end")
            }
        }
        #expect(read == bytes)
        #expect(digest.finalize() == FileDigest.hash(.xxh128, bytes))
        // A sparse file's reads never hash: its holes are hashed as HOLE messages, on the loop.
        let sparse = ReadCursor(
            fd: fd, path: path, from: 0, to: UInt64(count), sparse: true, opened: nil, digest: FileDigest(.xxh128))
        #expect(!sparse.hashes)
    }

    @Test("A chunk taken whole is a DATA frame in place: its header in the room before the bytes read")
    func chunksTakenWholeAreFrames() throws {
        try withTemporaryDirectory { try chunksTakenWholeAreFrames(in: $0) }
    }

    private func chunksTakenWholeAreFrames(in directory: String) throws {
        let chunk = 64 << 10
        let count = 5 * chunk + 777
        let (path, bytes) = try Self.file(count, in: directory)
        let fd = open(path, O_RDONLY)
        #expect(fd >= 0)
        let loop = try EventLoop()
        let stock = ReadBufferStock(capacity: chunk, keep: 5)
        let cursor = ReadCursor(fd: fd, path: path, from: 0, to: UInt64(count), sparse: false, opened: nil)
        let reader = SourceReader(
            cursor: cursor, lane: SerialLane(pool: .shared), loop: loop, stock: stock, depth: 3,
            bytesToEnd: UInt64(count))
        var payload: [UInt8] = []
        var frames: [[UInt8]] = []
        var ended = false
        reader.fill()
        let done = runLoop(loop) {
            while let (buffer, n) = reader.takeWhole() {
                frames.append(Array(buffer.frame(.data, count: n)))
                reader.giveBack(buffer)
            }
            var none: [UInt8] = []
            if case .end = none.withUnsafeMutableBytes({ reader.take(into: $0) }) { ended = true }
            return ended
        }
        #expect(done)
        for frame in frames {
            let length = frame[1..<Wire.frameHeaderSize].reduce(0) { $0 << 8 | Int($1) }
            #expect(frame[0] == Wire.MessageType.data.rawValue && length == frame.count - Wire.frameHeaderSize)
            payload += frame[Wire.frameHeaderSize...]
        }
        #expect(payload == bytes && frames.count == 6)
        reader.close(fd)
    }
}
