import Foundation
import TestThreads
import Testing

@testable import Sluice

/// A stage that writes every byte twice: output grows faster than input, so the pipeline must
/// offer it output space chunk by chunk.
final class DoublingStage: Stage {
    let name = "double"
    func process(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws(SluiceError)
        -> StageProgress
    {
        let n = min(input.count, output.count / 2)
        for i in 0..<n {
            output[2 * i] = input[i]
            output[2 * i + 1] = input[i]
        }
        return StageProgress(consumed: n, produced: 2 * n)
    }
    func finish(into output: UnsafeMutableRawBufferPointer) throws(SluiceError) -> StageProgress {
        StageProgress(consumed: 0, produced: 0, finished: true)
    }
}

/// A stage that fails after `limit` bytes, as corrupt input would make a decoder fail.
final class FailingStage: Stage {
    let name = "failing"
    var seen = 0
    let limit: Int
    init(after limit: Int) { self.limit = limit }
    func process(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws(SluiceError)
        -> StageProgress
    {
        seen += input.count
        if seen > limit { throw SluiceError(.corruptData, operation: "failing", detail: "scripted failure") }
        let n = min(input.count, output.count)
        output.baseAddress!.copyMemory(from: input.baseAddress!, byteCount: n)
        return StageProgress(consumed: n, produced: n)
    }
    func finish(into output: UnsafeMutableRawBufferPointer) throws(SluiceError) -> StageProgress {
        StageProgress(consumed: 0, produced: 0, finished: true)
    }
}

/// A sink that plays the kernel: accepts at most `perWrite` bytes per write and says
/// "would block" every other call, so partial writes and re-arming are exercised.
final class ScriptedSink: WriteStream {
    var received: [UInt8] = []
    let perWrite: Int
    var calls = 0
    init(perWrite: Int) {
        self.perWrite = perWrite
        super.init(name: "scripted")
    }
    override func writePrimitive(_ buffer: UnsafeRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        calls += 1
        if calls % 2 == 0 { return .wouldBlock }
        let n = min(perWrite, buffer.count)
        received += buffer[0..<n]
        return .processed(n)
    }
}

func runPipeline(_ pipeline: Pipeline, timeout: Duration = .seconds(30)) throws -> PipelineResult {
    let loop = try EventLoop()
    var result: PipelineResult?
    pipeline.start(on: loop) { result = $0 }
    loop.run(for: timeout)
    return try #require(result, "pipeline did not finish in time")
}

@Suite(.ownThreads) struct PipelineTests {
    @Test(arguments: ["512", "4K", "64K", "64KiB", "1M", "4M", "4MiB", "4194304"])
    func chunkSizesParse(text: String) throws {
        let size = try ChunkSize(parsing: text)
        #expect(ChunkSize.range.contains(size.bytes))
    }

    @Test(arguments: ["511", "4194305", "12Q", "", "K", "-1", "1.5M", "8M", "0"])
    func badChunkSizesNameTheRange(text: String) {
        #expect {
            _ = try ChunkSize(parsing: text)
        } throws: { error in
            let e = error as! SluiceError
            return e.code == .invalidArgument && e.description.contains("512 to 4M (4194304) bytes")
        }
    }

    @Test func chunkSizeValuesAndNames() throws {
        #expect(try ChunkSize(parsing: "64KiB").bytes == 65536)
        #expect(try ChunkSize(parsing: "4MiB").bytes == 4_194_304)
        #expect(try ChunkSize(parsing: "512").description == "512")
        #expect(try ChunkSize(1 << 20).description == "1M")
    }

    @Test(arguments: [512, 4096, 65536, 1 << 20, 4 << 20])
    func fileToFileAtEveryChunkSize(chunk: Int) throws {
        try withTemporaryDirectory { dir in
            let data = Data(randomBytes(5_000_000, seed: UInt64(chunk)))
            try data.write(to: URL(fileURLWithPath: dir + "/src"))
            let pipeline = Pipeline(
                source: .file(atPath: dir + "/src"), sink: .file(atPath: dir + "/dst"),
                options: PipelineOptions(chunkSize: try ChunkSize(chunk)))
            let result = try runPipeline(pipeline)
            #expect(result.succeeded)
            #expect(result.bytesRead == 5_000_000)
            #expect(result.bytesWritten == 5_000_000)
            #expect(result.peakInFlightBytes <= result.inFlightLimit)
            #expect(try Data(contentsOf: URL(fileURLWithPath: dir + "/dst")) == data)
            #expect(pipeline.source.streamStatus == .closed)
            #expect(pipeline.sink.streamStatus == .closed)
        }
    }

    @Test func expandingStageStaysWithinTheBound() throws {
        let input = randomBytes(300_000)
        let sink = WriteStream.toMemory()
        let options = PipelineOptions(chunkSize: try ChunkSize(4096), depth: 2)
        let pipeline = Pipeline(source: .memory(input), stages: [DoublingStage()], sink: sink, options: options)
        let result = try runPipeline(pipeline)
        #expect(result.succeeded)
        let out = [UInt8](sink.property(forKey: .dataWrittenToMemory) as! Data)
        #expect(out.count == 600_000)
        #expect(out.enumerated().allSatisfy { $0.element == input[$0.offset / 2] })
        #expect(result.stages.first?.bytesIn == 300_000)
        #expect(result.stages.first?.bytesOut == 600_000)
        #expect(result.peakInFlightBytes <= 2 * 2 * 4096)
        #expect(result.inFlightLimit == 2 * 2 * 4096)
    }

    @Test func partialWritesAndWouldBlockKeepEveryByteInOrder() throws {
        let input = randomBytes(200_000, seed: 3)
        let sink = ScriptedSink(perWrite: 777)
        let options = PipelineOptions(chunkSize: try ChunkSize(4096), depth: 3)
        let pipeline = Pipeline(source: .memory(input), sink: sink, options: options)
        let result = try runPipeline(pipeline)
        #expect(result.succeeded)
        #expect(sink.received.elementsEqual(input))
        #expect(result.peakInFlightBytes <= 3 * 4096)
        // The source outran the sink: it found its queue full and waited for the sink.
        #expect(result.sinkBoundSeconds > 0)
    }

    @Test func pendingWriteFlagWhenTheSourceIsSlow() throws {
        // The source is a bound pair fed by a timer: the sink is offered space with nothing to
        // write, sets the flag, and each arriving chunk is written at once. The timer paces on
        // events, not ticks: a spell of the flag begins when the test sees it up with every
        // byte sent already written, and the next chunk goes only once the test has seen that
        // spell stand for 5 ms (on the pipeline's clock). However late a loaded machine serves
        // the loop, the flag then stood at least as long as the test saw it.
        let loop = try EventLoop()
        let (reader, feeder) = boundPair(bufferSize: 65536)
        let sink = WriteStream.toMemory()
        let pipeline = Pipeline(source: reader, sink: sink, options: PipelineOptions(chunkSize: try ChunkSize(4096)))
        var result: PipelineResult?
        var pendingSeen = 0
        var seenSince: UInt64?
        var witnessed: UInt64 = 0
        feeder.open()
        var sent = 0
        var timer: LoopTimer?
        timer = loop.schedule(after: .milliseconds(1), repeating: .milliseconds(1)) {
            guard pipeline.isWritePending, pipeline.bytesWritten == UInt64(sent * 1000) else { return }
            let now = monotonicNanoseconds()
            guard let since = seenSince else {
                seenSince = now
                pendingSeen += 1
                return
            }
            guard now - since >= 5_000_000 else { return }
            if sent == 20 {
                timer?.cancel()
                feeder.close()
                return
            }
            witnessed += now - since
            seenSince = nil
            #expect(feeder.write(all: [UInt8](repeating: UInt8(sent), count: 1000)))
            sent += 1
        }
        pipeline.start(on: loop) { result = $0 }
        loop.run(for: .seconds(20))
        let r = try #require(result)
        #expect(r.succeeded)
        #expect(r.bytesWritten == 20_000)
        #expect(pendingSeen == 21)  // before each chunk, and before the end
        #expect(r.sourceBoundSeconds > r.sinkBoundSeconds)
        // The flag stood at least through each spell the test saw before it sent a chunk: 20
        // spells of at least 5 ms.
        #expect(witnessed >= 20 * 5_000_000)
        #expect(r.sourceBoundSeconds >= Double(witnessed) / 1e9, "\(r.sourceBoundSeconds) s, saw \(witnessed) ns")
    }

    @Test func rateLimitedSinkIsReportedAsSinkBound() throws {
        // 64 KiB at 256 KiB/s: about a quarter of a second, nearly all of it waiting on the sink.
        let sink = WriteStream.toMemory()
        let options = PipelineOptions(chunkSize: try ChunkSize(4096), depth: 2, rateLimit: 256 * 1024)
        let pipeline = Pipeline(source: .memory(randomBytes(65536)), sink: sink, options: options)
        let result = try runPipeline(pipeline)
        #expect(result.succeeded)
        #expect(result.bytesWritten == 65536)
        #expect(result.elapsedSeconds >= 0.15)
        #expect(result.sinkBoundSeconds > result.sourceBoundSeconds)
        #expect(result.sinkBoundSeconds > result.elapsedSeconds / 2)
    }

    @Test func missingSourceFailsAtTheSourceAndCreatesNothing() throws {
        try withTemporaryDirectory { dir in
            let pipeline = Pipeline(source: .file(atPath: dir + "/missing"), sink: .file(atPath: dir + "/dst"))
            let result = try runPipeline(pipeline)
            #expect(result.error?.location == .source)
            #expect(result.error?.underlying.errno == .noSuchFile)
            #expect(result.error?.description.contains(dir + "/missing") == true)
            #expect(!FileManager.default.fileExists(atPath: dir + "/dst"))
        }
    }

    @Test func failingStageRemovesTheSinkItCreatedButNeverAnExistingFile() throws {
        try withTemporaryDirectory { dir in
            let input = randomBytes(1_000_000)
            let created = Pipeline(
                source: .memory(input), stages: [FailingStage(after: 300_000)], sink: .file(atPath: dir + "/new"),
                options: PipelineOptions(chunkSize: try ChunkSize(65536)))
            let r1 = try runPipeline(created)
            #expect(r1.error?.location == .stage(index: 0, name: "failing"))
            #expect(r1.error?.underlying.code == .corruptData)
            #expect(!FileManager.default.fileExists(atPath: dir + "/new"))

            try Data("keep".utf8).write(to: URL(fileURLWithPath: dir + "/old"))
            let appended = Pipeline(
                source: .memory(input), stages: [FailingStage(after: 300_000)],
                sink: .file(atPath: dir + "/old", mode: .append),
                options: PipelineOptions(chunkSize: try ChunkSize(65536)))
            let r2 = try runPipeline(appended)
            #expect(r2.error != nil)
            #expect(FileManager.default.fileExists(atPath: dir + "/old"))
        }
    }

    @Test func cancelClosesBothEnds() throws {
        try withTemporaryDirectory { dir in
            let loop = try EventLoop()
            let (reader, feeder) = boundPair(bufferSize: 1024)
            feeder.open()
            _ = feeder.write(all: [UInt8](repeating: 1, count: 1000))
            let pipeline = Pipeline(source: reader, sink: .file(atPath: dir + "/partial"))
            var result: PipelineResult?
            pipeline.start(on: loop) { result = $0 }
            // Cancelled while it runs: its bytes are in the file and it waits for more.
            #expect(runLoop(loop) { pipeline.bytesWritten == 1000 })
            pipeline.cancel()
            #expect(runLoop(loop) { result != nil })
            let r = try #require(result)
            #expect(r.error?.underlying.code == .cancelled)
            #expect(reader.streamStatus == .closed)
            #expect(pipeline.sink.streamStatus == .closed)
            #expect(!FileManager.default.fileExists(atPath: dir + "/partial"))
            feeder.close()
        }
    }

    @Test func asyncEntryPoint() async throws {
        let input = randomBytes(2_000_000, seed: 11)
        let sink = WriteStream.toMemory()
        let meter = Meter()
        let pipeline = Pipeline(source: .memory(input), sink: sink, sinkTaps: [meter])
        let result = try await pipeline.run()
        #expect(result.succeeded)
        #expect(meter.bytes == 2_000_000)
        #expect((sink.property(forKey: .dataWrittenToMemory) as? Data) == Data(input))
    }

    @Test func aPipelineNobodyHoldsStillFinishes() throws {
        // Streams hold their delegate weakly; a running pipeline must keep itself alive, as one
        // started inside an accept handler and then forgotten does.
        let loop = try EventLoop()
        let sink = WriteStream.toMemory()
        var result: PipelineResult?
        do {
            Pipeline(source: .memory(randomBytes(100_000)), sink: sink).start(on: loop) { result = $0 }
        }
        loop.run(for: .seconds(10))
        #expect(result?.succeeded == true)
        #expect((sink.property(forKey: .dataWrittenToMemory) as? Data)?.count == 100_000)
    }

    @Test func aSinkUsedBeforeIsReArmed() throws {
        // The sink's first hasSpaceAvailable goes to another handler that writes nothing; a
        // pipeline started afterwards must still be offered space.
        let loop = try EventLoop()
        let sink = WriteStream.toMemory()
        var offered = false
        sink.eventHandler = { _, event in if event == .hasSpaceAvailable { offered = true } }
        sink.schedule(on: loop)
        sink.open()
        #expect(runLoop(loop) { offered })
        sink.eventHandler = nil
        let pipeline = Pipeline(source: .memory([1, 2, 3]), sink: sink)
        var result: PipelineResult?
        pipeline.start(on: loop) { result = $0 }
        loop.run(for: .seconds(10))
        #expect(result?.bytesWritten == 3)
    }

    @Test func meterAndChecksumTapsSeeEveryByte() throws {
        let input = randomBytes(3_000_000, seed: 5)
        let meter = Meter()
        let crc = Checksum(.crc32)
        let options = PipelineOptions(chunkSize: try ChunkSize(65536), rateLimit: 12_000_000)
        let pipeline = Pipeline(
            source: .memory(input), sink: .discard(), options: options, sourceTaps: [crc], sinkTaps: [meter])
        let start = ContinuousClock.now
        let result = try runPipeline(pipeline)
        let (seconds, attoseconds) = start.duration(to: .now).components
        let wall = Double(seconds) + Double(attoseconds) / 1e18
        #expect(result.succeeded)
        #expect(meter.bytes == 3_000_000)
        #expect(crc.value == input.withUnsafeBytes { Checksum.compute(.crc32, over: $0) })
        // Rate-limited to 12 MB/s (after a 0.6 MB burst), 3 MB take at least about 0.2 s. A
        // loaded machine only makes that longer, and may delay the first byte the meter sees
        // (its clock starts there), so the bounds that always hold are these: the run took that
        // long, the meter's time lies within the run, and its rate is at least bytes over the run.
        #expect(wall >= 0.15)
        #expect(meter.elapsedSeconds > 0 && meter.elapsedSeconds <= wall)
        #expect(meter.averageRate >= 3_000_000 / wall * 0.999)
        #expect(meter.recentRate > 0)
    }

    @Test func tokenBucketPlaysOutOnScriptedTime() {
        // 100 kB/s: a 5 kB initial burst, a 10 kB cap, 2 kB worth waiting for.
        let t0: UInt64 = 1_000_000_000
        var bucket = TokenBucket(bytesPerSecond: 100_000, now: t0)
        let first = bucket.allowance(wanted: 50_000, now: t0)
        #expect(first.bytes == 5000)
        bucket.spend(5000)
        let empty = bucket.allowance(wanted: 50_000, now: t0)
        #expect(empty.bytes == 0)
        #expect(empty.waitNanoseconds == 20_000_001)  // 2000 bytes at 100 kB/s, rounded up
        #expect(bucket.allowance(wanted: 50_000, now: t0 + 20_000_001).bytes == 2000)
        // Idle for a long time, the bucket holds at most a tenth of a second.
        #expect(bucket.allowance(wanted: 50_000, now: t0 + 60_000_000_000).bytes == 10_000)
        // A small want is served as soon as it is covered.
        var small = TokenBucket(bytesPerSecond: 100_000, now: t0)
        small.spend(5000)
        #expect(small.allowance(wanted: 100, now: t0 + 1_000_000).bytes == 100)
    }
}
