import Dispatch
import FoundationEssentials
import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The paths the local matrix measures, each through the real pipeline.
enum BenchPath: String, CaseIterable, Sendable {
    case memory = "memory"
    case file = "file"
    case fileZeroCopy = "file-zero-copy"
    case fileBare = "file-bare"
    case tcp = "tcp"
    case tcpGzip = "tcp-gzip1"
    case tcpZstd = "tcp-zstd3"
    case gunzip = "gunzip"

    /// The paths this build and machine can measure: zstd's only where it is present.
    static var available: [BenchPath] {
        allCases.filter { $0 != .tcpZstd || CompressionEngine.zstd.isAvailable }
    }

    /// The row's title; compression rows name their engine and thread count.
    func title(threads: Int) -> String {
        switch self {
        case .memory: return "memory → memory"
        case .file: return "file → file"
        case .fileZeroCopy: return "file → file, zero-copy"
        case .fileBare: return "file → file, bare loop"
        case .tcp: return "memory → tcp → discard"
        case .tcpGzip:
            return "tcp, gzip:1 (\(ParallelDeflate.defaultEngine(level: 1)), \(threads)T) → gunzip"
        case .tcpZstd: return "tcp, zstd:3 (\(threads)T) → unzstd"
        case .gunzip: return "gzip -d (memory)"
        }
    }

    /// The compression stage of a loopback row, on `threads` workers.
    func compressor(threads: Int) throws -> [any Stage] {
        switch self {
        case .tcpGzip: return [try ParallelDeflate(format: .gzip, level: 1, threads: threads)]
        case .tcpZstd: return [OffloadedStage(try ZstdCompress(level: 3, threads: threads))]
        default: return []
        }
    }

    /// The decompression stage of a row's receiving end.
    var decompressor: [any Stage] {
        get throws {
            switch self {
            case .tcpGzip, .tcpZstd, .gunzip: return [OffloadedStage(try Decompressor())]
            default: return []
            }
        }
    }
}

/// One measured cell of the matrix.
struct BenchCell: Sendable {
    var path: BenchPath
    var chunkSize: ChunkSize
    var bytes: UInt64
    var seconds: Double
    var sourceBoundSeconds: Double
    var sinkBoundSeconds: Double
    /// The CPU time the whole process used for the cell (both ends of a loopback row, and the
    /// worker threads of a compression row).
    var cpu = CPUTime.zero

    var bytesPerSecond: Double { seconds > 0 ? Double(bytes) / seconds : 0 }
}

struct BenchFailure: Error, CustomStringConvertible {
    var description: String
    /// The library error behind it, when there is one (for its exit status).
    var error: SluiceError?
}

/// Runs the local matrix: every path at every chunk size, `size` bytes each.
struct LocalBench {
    var paths: [BenchPath] = BenchPath.available
    var chunkSizes: [ChunkSize]
    var size: Int
    /// Compression threads of the compression rows.
    var threads = WorkerPool.shared.threadCount
    var progress: ((String) -> Void)?

    static let defaultChunkSizes: [ChunkSize] = [512, 4096, 65536, 1 << 20, 4 << 20].map {
        try! ChunkSize($0)
    }

    func run() throws -> [BenchCell] {
        let dir = temporaryDirectory() + "sluice-bench-\(getpid())"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }

        let random = BenchData.random(min(size, 4 << 20))
        let text = BenchData.text(min(size, 4 << 20))
        var cells: [BenchCell] = []
        var sourceFile: String?
        var gzipped: [UInt8]?
        for path in paths {
            for chunk in chunkSizes {
                progress?("\(path.title(threads: threads)) at \(chunk)")
                let cell: BenchCell
                switch path {
                case .memory:
                    cell = try measured {
                        try runLocal(
                            path, chunk, source: .repeating(random, count: UInt64(size)), stages: [],
                            sink: .toScratch(capacity: chunk.bytes))
                    }
                case .file, .fileZeroCopy, .fileBare:
                    // File I/O here is at the mercy of the page cache's writeback: best of three.
                    if sourceFile == nil { sourceFile = try makeFile(dir + "/source", pattern: random) }
                    let destination = dir + "/copy"
                    var best: BenchCell?
                    for _ in 0..<3 {
                        let attempt = try measured {
                            if path != .fileBare {
                                // `file → file` reads and writes, as the bare loop it is compared
                                // with does; the zero-copy row lets the kernel copy.
                                return try runLocal(
                                    path, chunk, source: .file(atPath: sourceFile!), stages: [],
                                    sink: .file(atPath: destination), zeroCopy: path == .fileZeroCopy)
                            }
                            return try runBareLoop(chunk, from: sourceFile!, to: destination)
                        }
                        Self.flushAndRemove(destination)
                        if best == nil || attempt.seconds < best!.seconds { best = attempt }
                    }
                    cell = best!
                case .tcp:
                    cell = try measured { try runLoopback(path, chunk, pattern: random) }
                case .tcpGzip, .tcpZstd:
                    cell = try measured { try runLoopback(path, chunk, pattern: text) }
                case .gunzip:
                    // One gzip member of the text, repeated: concatenated members are one gzip
                    // stream, so any size decompresses from bounded memory.
                    if gzipped == nil { gzipped = try compress(text, count: text.count) }
                    let members = UInt64(max(1, size / text.count))
                    let input = gzipped!
                    cell = try measured {
                        try runLocal(
                            path, chunk, source: .repeating(input, count: UInt64(input.count) * members),
                            stages: try path.decompressor, sink: .discard(), countWritten: true)
                    }
                }
                cells.append(cell)
            }
        }
        return cells
    }

    /// The cell `body` measures, with the CPU time it took.
    private func measured(_ body: () throws -> BenchCell) throws -> BenchCell {
        var (cell, cpu) = try CPUTime.measure(body)
        cell.cpu = cpu
        return cell
    }

    private func makeFile(_ path: String, pattern: [UInt8]) throws -> String {
        let sink = WriteStream.file(atPath: path)
        sink.open()
        var left = size
        while left > 0 {
            let n = min(left, pattern.count)
            guard sink.write(all: pattern[0..<n]) else {
                throw BenchFailure(description: "\(sink.streamError.map { "\($0)" } ?? "write \(path) failed")")
            }
            left -= n
        }
        // Written back before the first cell, so no cell pays for the source's writeback.
        if let fd = sink.fileDescriptor { fsync(fd) }
        sink.close()
        return path
    }

    /// Writes a cell's output back (untimed) before removing it, so its dirty pages do not slow
    /// the next cell down.
    private static func flushAndRemove(_ path: String) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd >= 0 {
            fsync(fd)
            close(fd)
        }
        unlink(path)
    }

    /// The reference for the pipeline's overhead: a plain read(2)/write(2) loop over one buffer
    /// allocated as the pipeline allocates its chunks, no loop, no queue.
    private func runBareLoop(_ chunk: ChunkSize, from source: String, to destination: String) throws -> BenchCell {
        let start = monotonicNanoseconds()
        let input = open(source, O_RDONLY | O_CLOEXEC)
        let output = open(destination, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        defer {
            if input >= 0 { close(input) }
            if output >= 0 { close(output) }
        }
        guard input >= 0, output >= 0 else {
            throw BenchFailure(description: "file-bare: \(String(cString: strerror(errno)))")
        }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk.bytes, alignment: 64)
        defer { buffer.deallocate() }
        var total: UInt64 = 0
        while true {
            let n = retryingOnInterrupt { read(input, buffer.baseAddress, buffer.count) }
            guard n >= 0 else {
                throw BenchFailure(description: "file-bare: read: \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            var written = 0
            while written < n {
                let w = retryingOnInterrupt { write(output, buffer.baseAddress! + written, n - written) }
                guard w > 0 else {
                    throw BenchFailure(description: "file-bare: write: \(String(cString: strerror(errno)))")
                }
                written += w
            }
            total += UInt64(n)
        }
        return BenchCell(
            path: .fileBare, chunkSize: chunk, bytes: total, seconds: Double(monotonicNanoseconds() - start) / 1e9,
            sourceBoundSeconds: 0, sinkBoundSeconds: 0)
    }

    private func compress(_ pattern: [UInt8], count: Int) throws -> [UInt8] {
        let sink = WriteStream.toMemory()
        let pipeline = Pipeline(
            source: .repeating(pattern, count: UInt64(count)), stages: [try Deflate(format: .gzip, level: 6)],
            sink: sink)
        let loop = try EventLoop()
        var failure: PipelineError?
        pipeline.start(on: loop) { failure = $0.error }
        loop.run()
        if let failure { throw BenchFailure(description: "\(failure)") }
        return [UInt8](sink.dataWrittenToMemory ?? Data())
    }

    private func runLocal(
        _ path: BenchPath, _ chunk: ChunkSize, source: ReadStream, stages: [any Stage], sink: WriteStream,
        countWritten: Bool = false, zeroCopy: Bool = false
    ) throws -> BenchCell {
        let loop = try EventLoop()
        let pipeline = Pipeline(
            source: source, stages: stages, sink: sink, options: PipelineOptions(chunkSize: chunk, zeroCopy: zeroCopy))
        var result: PipelineResult?
        pipeline.start(on: loop) { result = $0 }
        loop.run()
        guard let result else { throw BenchFailure(description: "\(path.rawValue): pipeline did not finish") }
        if let error = result.error { throw BenchFailure(description: "\(path.rawValue): \(error)") }
        return BenchCell(
            path: path, chunkSize: chunk, bytes: countWritten ? result.bytesWritten : result.bytesRead,
            seconds: result.elapsedSeconds, sourceBoundSeconds: result.sourceBoundSeconds,
            sinkBoundSeconds: result.sinkBoundSeconds)
    }

    /// Memory → (gzip -1 or zstd -3) → TCP on 127.0.0.1 → (decompression) → discard, the
    /// receiving side on a thread and loop of its own, as a separate receiver would be.
    private func runLoopback(_ path: BenchPath, _ chunk: ChunkSize, pattern: [UInt8]) throws -> BenchCell {
        let compress = path != .tcp
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        let port = listener.port
        let server = BenchServerThread(listener: listener, chunk: chunk, stages: try path.decompressor)
        server.start()
        let loop = try EventLoop()
        let (_, writer) = Socket.connect(host: "127.0.0.1", port: port)
        let stages = try path.compressor(threads: threads)
        let pipeline = Pipeline(
            source: .repeating(pattern, count: UInt64(size)), stages: stages, sink: writer,
            options: PipelineOptions(chunkSize: chunk))
        var sent: PipelineResult?
        let start = monotonicNanoseconds()
        pipeline.start(on: loop) { sent = $0 }
        loop.run()
        let received = server.wait()
        let seconds = Double(monotonicNanoseconds() - start) / 1e9
        if let error = sent?.error { throw BenchFailure(description: "\(path.rawValue) sender: \(error)") }
        guard let received else { throw BenchFailure(description: "\(path.rawValue): receiver failed") }
        if let error = received.error { throw BenchFailure(description: "\(path.rawValue) receiver: \(error)") }
        let bytes = compress ? received.bytesWritten : received.bytesRead
        guard bytes == UInt64(size) else {
            throw BenchFailure(description: "\(path.rawValue): received \(bytes) of \(size) bytes")
        }
        return BenchCell(
            path: path, chunkSize: chunk, bytes: bytes, seconds: seconds,
            sourceBoundSeconds: sent?.sourceBoundSeconds ?? 0, sinkBoundSeconds: sent?.sinkBoundSeconds ?? 0)
    }
}

/// The receiving end of a loopback cell: accepts one connection on its own thread and loop,
/// and pipes it (through a decompressor if asked) into a discard sink.
final class BenchServerThread: @unchecked Sendable {
    private let listener: SocketListener
    private let chunk: ChunkSize
    private let stages: [any Stage]
    private let done = DispatchSemaphore(value: 0)
    private var result: PipelineResult?

    init(listener: SocketListener, chunk: ChunkSize, stages: [any Stage]) {
        self.listener = listener
        self.chunk = chunk
        self.stages = stages
    }

    func start() {
        DispatchQueue(label: "sluice-bench-server").async { [self] in
            defer { done.signal() }
            guard let loop = try? EventLoop() else { return }
            do {
                try listener.accept(on: loop) { [self] reader, writer, _ in
                    listener.close()
                    writer.close()
                    let pipeline = Pipeline(
                        source: reader, stages: stages, sink: .discard(), options: PipelineOptions(chunkSize: chunk))
                    pipeline.start(on: loop) { self.result = $0 }
                }
            } catch {
                return
            }
            loop.run()
        }
    }

    /// Waits for the connection to end; nil if the server could not run.
    func wait() -> PipelineResult? {
        done.wait()
        return result
    }
}

/// `$TMPDIR` or `/tmp`, ending in a slash (as Foundation's `NSTemporaryDirectory()`).
func temporaryDirectory() -> String {
    guard let value = getenv("TMPDIR"), value.pointee != 0 else { return "/tmp/" }
    let path = String(cString: value)
    return path.hasSuffix("/") ? path : path + "/"
}
