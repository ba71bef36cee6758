import Foundation
import TestThreads
import Testing

@testable import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The chunk sizes every zero-copy path is checked at.
let zeroCopyChunkSizes = [512, 4096, 65536, 1 << 20, 4 << 20]

/// A source of `size` random bytes in `dir`, not a multiple of any chunk size.
func writeSource(_ dir: String, size: Int = 9 * 1_048_576 + 123, seed: UInt64 = 15) throws -> Data {
    let data = Data(randomBytes(size, seed: seed))
    try data.write(to: URL(fileURLWithPath: dir + "/src"))
    return data
}

func contentsOf(_ path: String) throws -> Data { try Data(contentsOf: URL(fileURLWithPath: path)) }

/// Runs pipelines on one loop until every one has finished (or `limit` passes).
func runPipelines(_ pipelines: [Pipeline], on loop: EventLoop? = nil, limit: Duration = .seconds(60)) throws
    -> [PipelineResult]
{
    let loop = try loop ?? EventLoop()
    var results: [Int: PipelineResult] = [:]
    for (index, pipeline) in pipelines.enumerated() {
        pipeline.start(on: loop) { results[index] = $0 }
    }
    runLoop(loop, for: limit) { results.count == pipelines.count }
    return try pipelines.indices.map { try #require(results[$0], "pipeline \($0) did not finish") }
}

/// A TCP (or Unix-domain) connection on one loop: `send` is the pipeline that writes to it,
/// made from the connecting side's write stream; `receive`, made when the connection is
/// accepted, reads from it. Runs both to their ends.
/// With `segmentSize`, the listener asks its peer for segments of at most that.
func throughSocket(
    unixPath: String? = nil,
    segmentSize: Int32? = nil,
    send: (WriteStream) -> Pipeline,
    receive: @escaping (ReadStream) -> Pipeline
) throws -> (sent: PipelineResult, received: PipelineResult) {
    let loop = try EventLoop()
    let listener = try unixPath.map { try Socket.listen(unixPath: $0) } ?? Socket.listen(host: "127.0.0.1", port: 0)
    defer { listener.close() }
    if let segmentSize { try listener.limitSegmentSize(to: segmentSize) }
    var received: PipelineResult?
    try listener.accept(on: loop) { input, output, _ in
        listener.close()
        output.close()
        receive(input).start(on: loop) { received = $0 }
    }
    let (input, output) =
        unixPath.map { Socket.connect(unixPath: $0) } ?? Socket.connect(host: "127.0.0.1", port: listener.port)
    input.close()
    var sent: PipelineResult?
    send(output).start(on: loop) { sent = $0 }
    runLoop(loop, for: .seconds(60)) { sent != nil && received != nil }
    return (try #require(sent, "the sender did not finish"), try #require(received, "the receiver did not finish"))
}

/// Whether `a` and `b` are on different file systems (so copy_file_range between them is
/// refused with EXDEV on a kernel since 5.19).
func onDifferentFileSystems(_ a: String, _ b: String) -> Bool {
    var first = stat()
    var second = stat()
    return stat(a, &first) == 0 && stat(b, &second) == 0 && first.st_dev != second.st_dev
}

@Suite(.ownThreads) struct ZeroCopyTests {
    // MARK: The choice of call

    @Test func planTable() {
        let file = DescriptorKind.regularFile(size: 10, appending: false)
        let appending = DescriptorKind.regularFile(size: 10, appending: true)
        func calls(_ source: DescriptorKind, _ sink: DescriptorKind) -> [CopyPath]? {
            if case .kernel(let route) = ZeroCopyPlan(source: source, sink: sink) { return route.calls }
            return nil
        }
        #expect(calls(file, file) == [.copyFileRange, .sendfile])
        #expect(calls(file, appending) == [.sendfile])
        #expect(calls(file, .socket) == [.sendfile])
        #expect(calls(file, .null) == [.sendfile])
        #expect(calls(file, .pipe) == [.splice])
        #expect(calls(.pipe, file) == [.splice])
        #expect(calls(.pipe, .socket) == [.splice])
        #expect(calls(.socket, file) == [.splice])
        #expect(calls(.socket, .null) == [.splice])
        if case .kernel(let route) = ZeroCopyPlan(source: .socket, sink: .pipe) {
            #expect(route.throughPipe)
        } else {
            Issue.record("socket to pipe is spliced")
        }
        #expect(
            ZeroCopyPlan(source: .regularFile(size: 0, appending: false), sink: file)
                == .readWrite(because: "the source file's size is 0"))
        #expect(
            ZeroCopyPlan(source: file, sink: .other("a terminal or device"))
                == .readWrite(because: "the destination is a terminal or device"))
        #expect(ZeroCopyPlan(source: .null, sink: file) == .readWrite(because: "the source is a device"))
    }

    @Test func readWriteWhereSomethingSeesTheBytes() throws {
        try withTemporaryDirectory { dir in
            let data = try writeSource(dir, size: 100_000)
            let cases: [(PipelineOptions, [any Stage], String)] = [
                (PipelineOptions(zeroCopy: false), [], "zero-copy turned off"),
                (PipelineOptions(rateLimit: 1 << 30), [], "a rate limit meters the bytes"),
                (PipelineOptions(), [DoublingStage()], "a stage transforms the bytes"),
            ]
            for (index, (options, stages, note)) in cases.enumerated() {
                let pipeline = Pipeline(
                    source: .file(atPath: dir + "/src"), stages: stages, sink: .file(atPath: dir + "/out\(index)"),
                    options: options)
                let result = try runPipeline(pipeline)
                #expect(result.succeeded)
                #expect(result.path == .readWrite)
                #expect(result.pathNote == note)
            }
            let memory = Pipeline(source: .memory(Array(data)), sink: .file(atPath: dir + "/fromMemory"))
            #expect(try runPipeline(memory).pathNote == "an end is not a file, pipe or socket")
            #expect(try contentsOf(dir + "/out0") == data)
        }
    }

    // MARK: Identical bytes, zero-copy and plain, at every chunk size

    @Test(arguments: zeroCopyChunkSizes, [true, false])
    func fileToFile(chunk: Int, zeroCopy: Bool) throws {
        try withTemporaryDirectory { dir in
            let data = try writeSource(dir, seed: UInt64(chunk))
            let options = PipelineOptions(chunkSize: try ChunkSize(chunk), zeroCopy: zeroCopy)
            let pipeline = Pipeline(
                source: .file(atPath: dir + "/src"), sink: .file(atPath: dir + "/dst"), options: options)
            let result = try runPipeline(pipeline)
            #expect(result.succeeded)
            #expect(result.path == (zeroCopy ? .copyFileRange : .readWrite))
            #expect(result.fallbacks.isEmpty)
            #expect(result.bytesRead == UInt64(data.count))
            #expect(result.bytesWritten == UInt64(data.count))
            #expect(result.peakInFlightBytes <= min(chunk * options.depth, result.inFlightLimit))
            #expect(try contentsOf(dir + "/dst") == data)
            #expect(pipeline.source.streamStatus == .closed)
            #expect(pipeline.sink.streamStatus == .closed)
        }
    }

    /// file → pipe and pipe → file: two pipelines on one loop, one at each end of a pipe.
    @Test(arguments: zeroCopyChunkSizes, [true, false])
    func fileToPipeToFile(chunk: Int, zeroCopy: Bool) throws {
        try withTemporaryDirectory { dir in
            let data = try writeSource(dir, seed: UInt64(chunk) + 1)
            var ends: [Int32] = [-1, -1]
            #expect(pipe(&ends) == 0)
            let options = PipelineOptions(chunkSize: try ChunkSize(chunk), zeroCopy: zeroCopy)
            let writer = Pipeline(
                source: .file(atPath: dir + "/src"), sink: .descriptor(ends[1], closeWhenDone: true), options: options)
            let reader = Pipeline(
                source: .descriptor(ends[0], closeWhenDone: true), sink: .file(atPath: dir + "/dst"), options: options)
            let results = try runPipelines([writer, reader])
            for result in results {
                #expect(result.succeeded, "\(String(describing: result.error))")
                #expect(result.path == (zeroCopy ? .splice : .readWrite))
                #expect(result.bytesWritten == UInt64(data.count))
                #expect(result.peakInFlightBytes <= result.inFlightLimit)
            }
            #expect(try contentsOf(dir + "/dst") == data)
        }
    }

    @Test(arguments: zeroCopyChunkSizes, [true, false])
    func fileToSocketToFile(chunk: Int, zeroCopy: Bool) throws {
        try withTemporaryDirectory { dir in
            let data = try writeSource(dir, seed: UInt64(chunk) + 2)
            let options = PipelineOptions(chunkSize: try ChunkSize(chunk), zeroCopy: zeroCopy)
            let (sent, received) = try throughSocket(
                send: { Pipeline(source: .file(atPath: dir + "/src"), sink: $0, options: options) },
                receive: { Pipeline(source: $0, sink: .file(atPath: dir + "/dst"), options: options) })
            #expect(sent.succeeded && received.succeeded, "\(String(describing: sent.error ?? received.error))")
            #expect(sent.path == (zeroCopy ? .sendfile : .readWrite))
            #expect(received.path == (zeroCopy ? .splice : .readWrite))
            #expect(received.bytesRead == UInt64(data.count))
            #expect(received.bytesWritten == UInt64(data.count))
            // The pipe between the socket and the file holds at most the pipeline's bound.
            #expect(received.peakInFlightBytes <= received.inFlightLimit)
            #expect(try contentsOf(dir + "/dst") == data)
        }
    }

    @Test(arguments: [4096, 1 << 20])
    func fileToUnixSocketToFile(chunk: Int) throws {
        try withUnixSocketDirectory { dir in
            let data = try writeSource(dir, size: 3_000_001, seed: 9)
            let options = PipelineOptions(chunkSize: try ChunkSize(chunk))
            let (sent, received) = try throughSocket(
                unixPath: dir + "/s",
                send: { Pipeline(source: .file(atPath: dir + "/src"), sink: $0, options: options) },
                receive: { Pipeline(source: $0, sink: .file(atPath: dir + "/dst"), options: options) })
            #expect(sent.succeeded && received.succeeded)
            #expect(sent.path == .sendfile)
            #expect(received.path == .splice)
            #expect(try contentsOf(dir + "/dst") == data)
        }
    }

    @Test(arguments: zeroCopyChunkSizes, [true, false])
    func socketToDevNull(chunk: Int, zeroCopy: Bool) throws {
        try withTemporaryDirectory { dir in
            let data = try writeSource(dir, seed: UInt64(chunk) + 3)
            let options = PipelineOptions(chunkSize: try ChunkSize(chunk), zeroCopy: zeroCopy)
            let (sent, received) = try throughSocket(
                send: { Pipeline(source: .file(atPath: dir + "/src"), sink: $0, options: options) },
                receive: { Pipeline(source: $0, sink: .file(atPath: "/dev/null"), options: options) })
            #expect(sent.succeeded && received.succeeded)
            #expect(received.path == (zeroCopy ? .splice : .readWrite))
            #expect(received.bytesWritten == UInt64(data.count))
        }
    }

    // MARK: Falling back

    /// A destination on a file system that refuses copy_file_range part-way (scripted): sendfile
    /// goes on from the refused byte.
    @Test(arguments: zeroCopyChunkSizes)
    func copyFileRangeRefusedPartWay(chunk: Int) throws {
        try withTemporaryDirectory { dir in
            let data = try writeSource(dir, seed: UInt64(chunk) + 4)
            let refusedAt = UInt64(2 * chunk + 100)
            var options = PipelineOptions(chunkSize: try ChunkSize(chunk))
            options.zeroCopyFault = ZeroCopyFault(
                call: .copyFileRange, afterBytes: refusedAt, errno: Errno(rawValue: EXDEV))
            let pipeline = Pipeline(
                source: .file(atPath: dir + "/src"), sink: .file(atPath: dir + "/dst"), options: options)
            let result = try runPipeline(pipeline)
            #expect(result.succeeded)
            #expect(result.path == .sendfile)
            #expect(
                result.fallbacks == [
                    CopyFallback(
                        refused: .copyFileRange, next: .sendfile, afterBytes: refusedAt, reason: Errno(rawValue: EXDEV))
                ])
            #expect(result.bytesWritten == UInt64(data.count))
            #expect(try contentsOf(dir + "/dst") == data)
        }
    }

    /// sendfile refused part-way to a socket (scripted): read/write goes on from that byte.
    @Test(arguments: [512, 65536, 4 << 20])
    func sendfileRefusedPartWay(chunk: Int) throws {
        try withTemporaryDirectory { dir in
            let data = try writeSource(dir, seed: UInt64(chunk) + 5)
            let refusedAt = UInt64(min(3 * chunk + 1, data.count / 2))
            var options = PipelineOptions(chunkSize: try ChunkSize(chunk))
            options.zeroCopyFault = ZeroCopyFault(
                call: .sendfile, afterBytes: refusedAt, errno: Errno(rawValue: EOPNOTSUPP))
            let (sent, received) = try throughSocket(
                send: { Pipeline(source: .file(atPath: dir + "/src"), sink: $0, options: options) },
                receive: { Pipeline(source: $0, sink: .file(atPath: dir + "/dst")) })
            #expect(sent.succeeded && received.succeeded)
            #expect(sent.path == .readWrite)
            #expect(sent.fallbacks.map(\.afterBytes) == [refusedAt])
            #expect(try contentsOf(dir + "/dst") == data)
        }
    }

    /// A splice out of the pipeline's pipe refused part-way (scripted) while bytes sit in the
    /// pipe, or a splice into it: those bytes go on through read/write first, in order.
    @Test(arguments: [512, 65536, 1 << 20], [PipelineLocation.sink, .source])
    func spliceRefusedWithBytesInThePipe(chunk: Int, side: PipelineLocation) throws {
        try withTemporaryDirectory { dir in
            let data = try writeSource(dir, seed: UInt64(chunk) + 6)
            let refusedAt = UInt64(5 * chunk + 7)
            var options = PipelineOptions(chunkSize: try ChunkSize(chunk))
            options.zeroCopyFault = ZeroCopyFault(
                call: .splice, afterBytes: refusedAt, errno: Errno(rawValue: EINVAL), side: side)
            let (sent, received) = try throughSocket(
                send: { Pipeline(source: .file(atPath: dir + "/src"), sink: $0) },
                receive: { Pipeline(source: $0, sink: .file(atPath: dir + "/dst"), options: options) })
            #expect(sent.succeeded && received.succeeded, "\(String(describing: received.error))")
            #expect(received.path == .readWrite)
            #expect(received.fallbacks.count == 1)
            if side == .sink { #expect(received.fallbacks.first?.afterBytes == refusedAt) }
            #expect(received.bytesRead == UInt64(data.count))
            #expect(received.bytesWritten == UInt64(data.count))
            #expect(try contentsOf(dir + "/dst") == data)
        }
    }

    /// The real thing where the machine has it: /tmp and /dev/shm on different file systems,
    /// where copy_file_range says EXDEV and sendfile takes over.
    @Test(.enabled(if: onDifferentFileSystems(NSTemporaryDirectory(), "/dev/shm")))
    func copyFileRangeAcrossFileSystems() throws {
        try withTemporaryDirectory { dir in
            let data = try writeSource(dir, size: 5_000_000, seed: 11)
            let destination = "/dev/shm/sluice-test-\(UUID().uuidString)"
            defer { unlink(destination) }
            let pipeline = Pipeline(source: .file(atPath: dir + "/src"), sink: .file(atPath: destination))
            let result = try runPipeline(pipeline)
            #expect(result.succeeded)
            #expect(result.path == .sendfile)
            #expect(result.fallbacks.first?.refused == .copyFileRange)
            #expect(result.fallbacks.first?.reason == Errno(rawValue: EXDEV))
            #expect(try contentsOf(destination) == data)
        }
    }

    /// An appending destination: the kernel refuses sendfile and splice into it (EINVAL), and
    /// read/write appends, after what was there.
    @Test func appendingDestinationFallsBack() throws {
        try withTemporaryDirectory { dir in
            let data = try writeSource(dir, size: 2_000_000, seed: 12)
            let head = Data("head-".utf8)
            try head.write(to: URL(fileURLWithPath: dir + "/dst"))
            let fromFile = Pipeline(
                source: .file(atPath: dir + "/src"), sink: .file(atPath: dir + "/dst", mode: .append))
            let result = try runPipeline(fromFile)
            #expect(result.succeeded)
            #expect(result.path == .readWrite)
            #expect(result.fallbacks.map(\.refused) == [.sendfile])
            #expect(result.fallbacks.first?.reason == .invalidArgument)
            #expect(try contentsOf(dir + "/dst") == head + data)

            // From a socket, the refusal comes with bytes already spliced into the pipe.
            let (sent, received) = try throughSocket(
                send: { Pipeline(source: .file(atPath: dir + "/src"), sink: $0) },
                receive: { Pipeline(source: $0, sink: .file(atPath: dir + "/dst", mode: .append)) })
            #expect(sent.succeeded && received.succeeded)
            #expect(received.fallbacks.map(\.refused) == [.splice])
            #expect(try contentsOf(dir + "/dst") == head + data + data)
        }
    }

    // MARK: Failures

    /// The peer resets the connection mid-copy: the splicing receiver fails at its source with
    /// the reset, as read/write would say it, and removes the file it created.
    @Test func resetMidCopyRemovesTheCreatedFile() throws {
        try withTemporaryDirectory { dir in
            let loop = try EventLoop()
            let listener = try Socket.listen(host: "127.0.0.1", port: 0)
            defer { listener.close() }
            var received: PipelineResult?
            try listener.accept(on: loop) { input, output, _ in
                output.close()
                Pipeline(source: input, sink: .file(atPath: dir + "/dst")).start(on: loop) { received = $0 }
            }
            // A client that sends 200 KB, then resets (SO_LINGER 0 makes close send RST).
            let (input, output) = Socket.connect(host: "127.0.0.1", port: listener.port)
            input.close()
            let payload = randomBytes(200_000, seed: 13)
            var sent = 0
            output.eventHandler = { stream, event in
                guard event == .hasSpaceAvailable, let out = stream as? WriteStream else { return }
                sent += max(
                    0, payload.withUnsafeBytes { out.write(from: UnsafeRawBufferPointer(rebasing: $0[sent...])) })
                guard sent == payload.count, let fd = out.fileDescriptor else { return }
                var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
                out.close()
            }
            output.schedule(on: loop)
            output.open()
            runLoop(loop) { received != nil }
            let result = try #require(received)
            let error = try #require(result.error)
            #expect(error.location == .source)
            #expect(error.underlying.errno == .connectionReset, "\(error)")
            #expect(error.underlying.operation == "recv")
            #expect(!FileManager.default.fileExists(atPath: dir + "/dst"))
        }
    }

    /// The receiver goes away mid-copy: sendfile's EPIPE or reset fails the sink, named as a
    /// send, and no SIGPIPE ends the process.
    @Test func peerGoneMidCopyFailsTheSink() throws {
        try withTemporaryDirectory { dir in
            _ = try writeSource(dir, size: 64 << 20, seed: 14)
            let loop = try EventLoop()
            let listener = try Socket.listen(host: "127.0.0.1", port: 0)
            defer { listener.close() }
            var accepted: [ByteStream] = []
            try listener.accept(on: loop) { input, output, _ in
                accepted = [input, output]
                input.eventHandler = { _, event in
                    guard event == .hasBytesAvailable else { return }
                    var chunk = [UInt8](repeating: 0, count: 1024)
                    _ = chunk.withUnsafeMutableBytes { input.read(into: $0) }
                    input.close()
                    output.close()
                }
                input.schedule(on: loop)
                input.open()
            }
            let (input, output) = Socket.connect(host: "127.0.0.1", port: listener.port)
            input.close()
            let sender = Pipeline(source: .file(atPath: dir + "/src"), sink: output)
            let result = try runPipelines([sender], on: loop).first
            let error = try #require(result?.error)
            #expect(error.location == .sink)
            #expect([Errno.connectionReset, .brokenPipe].contains(error.underlying.errno ?? .ioError), "\(error)")
            #expect(error.underlying.operation == "send")
            #expect(result?.path == .sendfile)
            #expect(accepted.count == 2)
        }
    }
}
