import Foundation
import TestThreads
import Testing

@testable import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// `DirectFileWriteStream`: whole blocks with O_DIRECT, the rest through the page cache, the
/// same bytes as a plain write whatever the pieces. (Write errors, in the middle and in the
/// tail, are tested through the command: `DirectCopyCommandTests.writeFailure`.)
@Suite(.ownThreads) struct DirectFileWriteStreamTests {
    /// Whether the temporary directory's file system takes O_DIRECT.
    static let direct: Bool = {
        let path = NSTemporaryDirectory() + "/.sluice-direct-probe-\(UUID().uuidString)"
        defer { unlink(path) }
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return WriteTarget(fd: fd, display: path, writebackWindow: nil, start: 0).writeDirectly()
    }()

    /// Writes `bytes` in pieces of `step` in polling mode, from the descriptor's offset `at`.
    func written(
        _ bytes: [UInt8], step: Int, at start: Int, useDirect: Bool = true, in dir: String
    ) throws -> (file: [UInt8], direct: UInt64, offsetAfter: off_t) {
        let path = dir + "/f"
        let prefix = [UInt8](repeating: 0xAB, count: start)
        try Data(prefix).write(to: URL(fileURLWithPath: path))
        let fd = open(path, O_WRONLY)
        try #require(fd >= 0)
        defer { close(fd) }
        try #require(lseek(fd, off_t(start), SEEK_SET) == off_t(start))
        let stream = DirectFileWriteStream(fd: fd, closeWhenDone: false, name: path, direct: useDirect)
        stream.open()
        try #require(stream.streamStatus == .open)
        var offset = 0
        while offset < bytes.count {
            let end = min(bytes.count, offset + step)
            #expect(stream.write(all: bytes[offset..<end]))
            offset = end
        }
        try stream.finishWriting()
        let after = lseek(fd, 0, SEEK_CUR)
        let direct = stream.bytesWrittenDirectly
        stream.close()
        return (Array(try Data(contentsOf: URL(fileURLWithPath: path))).dropFirst(start).map { $0 }, direct, after)
    }

    @Test(arguments: [0, 1, 4095, 4096, 4097, 1 << 20, (1 << 20) + 1, (3 << 20) + 5000], [1000, 65536, 1 << 22])
    func sameBytes(size: Int, step: Int) throws {
        try withTemporaryDirectory { dir in
            let bytes = randomBytes(size, seed: UInt64(size ^ step))
            let (file, direct, after) = try written(bytes, step: step, at: 0, in: dir)
            #expect(file == bytes)
            #expect(after == off_t(size))
            #expect(direct == (Self.direct ? UInt64(size - size % 4096) : 0))
        }
    }

    /// A start inside a block: its head goes through the page cache, then whole blocks direct.
    @Test(arguments: [1, 904, 4095, 4096, 12_345])
    func startInsideABlock(start: Int) throws {
        try withTemporaryDirectory { dir in
            let bytes = randomBytes((2 << 20) + 333, seed: UInt64(start))
            let (file, direct, after) = try written(bytes, step: 100_000, at: start, in: dir)
            #expect(file == bytes)
            #expect(after == off_t(start + bytes.count))
            let first = (start + 4095) / 4096 * 4096
            let last = (start + bytes.count) / 4096 * 4096
            #expect(direct == (Self.direct ? UInt64(last - first) : 0))
        }
    }

    /// Without the direct descriptor (a file system without O_DIRECT): the same bytes.
    @Test func bufferedOnly() throws {
        try withTemporaryDirectory { dir in
            let bytes = randomBytes((2 << 20) + 17, seed: 9)
            let (file, direct, _) = try written(bytes, step: 300_000, at: 10, useDirect: false, in: dir)
            #expect(file == bytes)
            #expect(direct == 0)
        }
    }

    /// Through a pipeline on a loop, the tail written when the pipeline closes the sink: from
    /// memory the source lends (written with a copy), and from a file read straight into the
    /// sink's buffer.
    @Test(arguments: [512, 1 << 20, 4 << 20], [false, true])
    func throughAPipeline(chunk: Int, fromFile: Bool) throws {
        try withTemporaryDirectory { dir in
            let bytes = randomBytes((5 << 20) + 4097, seed: UInt64(chunk))
            try Data(bytes).write(to: URL(fileURLWithPath: dir + "/in"))
            let fd = open(dir + "/out", O_WRONLY | O_CREAT | O_EXCL, 0o644)
            try #require(fd >= 0)
            let sink = DirectFileWriteStream(fd: fd, closeWhenDone: true, name: "out")
            let source: ReadStream = fromFile ? .file(atPath: dir + "/in") : .memory(bytes)
            let pipeline = Pipeline(
                source: source, sink: sink, options: PipelineOptions(chunkSize: try ChunkSize(chunk)))
            let result = try runPipeline(pipeline)
            #expect(result.error == nil)
            #expect(result.bytesWritten == UInt64(bytes.count))
            #expect(sink.streamStatus == .closed)
            try sink.finishWriting()
            #expect(try Array(Data(contentsOf: URL(fileURLWithPath: dir + "/out"))) == bytes)
            #expect(sink.bytesWrittenDirectly == (Self.direct ? UInt64(bytes.count - bytes.count % 4096) : 0))
        }
    }

    /// From a socket whose peer sends a file with sendfile into a listener asking for
    /// `socketSegmentSize`: the pipeline splices the socket's pages from its pipe into the file
    /// with O_DIRECT (no byte copied), the tail through the buffer. From a start inside a
    /// block, the head goes through the buffer first; then the pages in the pipe sit at other
    /// offsets in memory than their bytes in the file, the kernel refuses the splice, and
    /// read/write goes on through the buffer — whole blocks direct either way.
    @Test(arguments: [0, 1, 4095, 4096, 4097, (1 << 20) + 5000, (5 << 20) + 4097], [512, 1 << 20])
    func fromASocket(size: Int, chunk: Int) throws {
        for start in [0, 1000] {
            let (file, result, sink) = try receivedFromASocket(
                size: size, chunk: chunk, start: start, segmentSize: DirectFileWriteStream.socketSegmentSize)
            #expect(file.bytes == file.sent)
            #expect(result.error == nil)
            #expect(result.bytesWritten == UInt64(size))
            guard Self.direct else { continue }
            let first = (start + 4095) / 4096 * 4096
            let last = (start + size) / 4096 * 4096
            #expect(sink.bytesWrittenDirectly == UInt64(max(0, last - first)))
            if start == 0 && chunk % 4096 == 0 {
                // Whole pages per sendfile call, so whole pages per segment. (Calls of 512 bytes
                // may be pushed in pieces of 512, which a disk of 4 KiB sectors refuses.)
                #expect(result.path == .splice)
                #expect(result.fallbacks.isEmpty, "\(result.fallbacks)")
            } else if start != 0 && size > 2 * 4096 {
                #expect(result.path == .readWrite)
                #expect(result.fallbacks.map(\.refused) == [.splice], "\(result.fallbacks)")
            }
        }
    }

    /// A sender whose pages sit at other offsets in memory than their bytes go to in the file
    /// (it sends a file from byte 100): direct I/O cannot take them, the kernel says EINVAL at
    /// the first splice out, and read/write goes on from that byte, reading into the sink's
    /// buffer — the same bytes, whole blocks still direct. Whatever the segments' sizes.
    @Test(arguments: [512, 1 << 20])
    func fromASocketWithUnalignedPages(chunk: Int) throws {
        let size = (3 << 20) + 5000
        let (file, result, sink) = try receivedFromASocket(
            size: size, chunk: chunk, start: 0, segmentSize: DirectFileWriteStream.socketSegmentSize, skip: 100)
        #expect(file.bytes == file.sent)
        #expect(result.error == nil)
        guard Self.direct else { return }
        #expect(result.path == .readWrite)
        #expect(result.fallbacks.map(\.refused) == [.splice])
        #expect(result.fallbacks.first?.reason == Errno(rawValue: EINVAL))
        #expect(result.fallbacks.first?.afterBytes == 0)
        let received = size - 100
        #expect(sink.bytesWrittenDirectly == UInt64(received - received % 4096))
    }

    /// `size` random bytes in a file, sent from byte `skip` with sendfile, received by a
    /// pipeline into a `DirectFileWriteStream` on a file whose first `start` bytes are there
    /// before; `sent` is what was sent.
    func receivedFromASocket(size: Int, chunk: Int, start: Int, segmentSize: Int32?, skip: Int = 0) throws
        -> (file: (bytes: [UInt8], sent: [UInt8]), result: PipelineResult, sink: DirectFileWriteStream)
    {
        try withTemporaryDirectory { dir in
            let bytes = randomBytes(size, seed: UInt64(size ^ chunk ^ start))
            try Data(bytes).write(to: URL(fileURLWithPath: dir + "/in"))
            let prefix = [UInt8](repeating: 0xCD, count: start)
            try Data(prefix).write(to: URL(fileURLWithPath: dir + "/out"))
            let fd = open(dir + "/out", O_WRONLY)
            try #require(fd >= 0 && lseek(fd, off_t(start), SEEK_SET) == off_t(start))
            let sink = DirectFileWriteStream(fd: fd, closeWhenDone: true, name: "out")
            let options = PipelineOptions(chunkSize: try ChunkSize(chunk))
            let (sent, received) = try throughSocket(
                segmentSize: segmentSize,
                send: { socket in
                    Pipeline(source: .file(atPath: dir + "/in", offset: UInt64(skip)), sink: socket, options: options)
                },
                receive: { Pipeline(source: $0, sink: sink, options: options) })
            #expect(sent.error == nil)
            #expect(sent.path == (size == 0 ? .readWrite : .sendfile))
            #expect(received.peakInFlightBytes <= received.inFlightLimit)
            try sink.finishWriting()
            let file = Array(try Data(contentsOf: URL(fileURLWithPath: dir + "/out")))
            #expect(file.prefix(start).elementsEqual(prefix))
            return ((Array(file.dropFirst(start)), Array(bytes.dropFirst(skip))), received, sink)
        }
    }

    /// Not a regular file: opening fails, and says why.
    @Test func pipeIsRefused() throws {
        var fds: [Int32] = [0, 0]
        try #require(pipe(&fds) == 0)
        defer {
            close(fds[0])
            close(fds[1])
        }
        let stream = DirectFileWriteStream(fd: fds[1], closeWhenDone: false, name: "pipe")
        stream.open()
        #expect(stream.streamStatus == .error)
        #expect(stream.streamError?.code == .system(.invalidArgument))
    }
}
