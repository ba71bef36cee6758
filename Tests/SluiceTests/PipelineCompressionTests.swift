import Foundation
import TestThreads
import Testing

@testable import Sluice

/// Compression stages inside real pipelines: memory → Deflate → bound pair → Inflate → file,
/// both pipelines on one loop.
@Suite(.ownThreads) struct PipelineCompressionTests {
    static let compressible: [UInt8] = Array(
        (0..<6000).map { "line \($0): the quick brown fox jumps over the lazy dog\n" }.joined().utf8.prefix(200_000))
    static let random = randomBytes(200_000, seed: 99)

    static let cases: [(CompressionFormat, Int)] = CompressionFormat.allCases.flatMap { f in
        [0, 1, 6, 9].map { (f, $0) }
    }

    @Test(arguments: cases, [512, 4096, 65536, 1 << 20, 4 << 20])
    func roundTripThroughBoundPairAndFile(format: (CompressionFormat, Int), chunk: Int) throws {
        for input in [Self.compressible, Self.random] {
            try withTemporaryDirectory { dir in
                let loop = try EventLoop()
                let (wireIn, wireOut) = boundPair(bufferSize: 64 * 1024)
                let options = PipelineOptions(chunkSize: try ChunkSize(chunk), depth: 2)
                let compress = Pipeline(
                    source: .memory(input), stages: [try Deflate(format: format.0, level: format.1)], sink: wireOut,
                    options: options)
                let decompress = Pipeline(
                    source: wireIn, stages: [try Inflate(format: DecompressionFormat(format.0))],
                    sink: .file(atPath: dir + "/out"), options: options)
                var results: [PipelineResult] = []
                compress.start(on: loop) { results.append($0) }
                decompress.start(on: loop) { results.append($0) }
                loop.run(for: .seconds(60))
                #expect(results.count == 2)
                let errors = results.compactMap(\.error)
                #expect(errors.isEmpty, "\(errors)")
                let out = try Data(contentsOf: URL(fileURLWithPath: dir + "/out"))
                #expect(out.elementsEqual(input))
                #expect(results.allSatisfy { $0.peakInFlightBytes <= $0.inFlightLimit })
            }
        }
    }

    @Test func gzipOutputOfAPipelineIsReadByTheSystemGzip() throws {
        try withTemporaryDirectory { dir in
            let pipeline = Pipeline(
                source: .memory(Self.compressible), stages: [try Deflate(format: .gzip, level: 6)],
                sink: .file(atPath: dir + "/out.gz"))
            let result = try runPipeline(pipeline)
            #expect(result.succeeded)
            #expect(result.stages[0].bytesIn == UInt64(Self.compressible.count))
            #expect(result.stages[0].bytesOut == result.bytesWritten)
            let (status, out, _) = try runProcess("/usr/bin/gzip", ["-dc", dir + "/out.gz"])
            #expect(status == 0)
            #expect(out.elementsEqual(Self.compressible))
        }
    }

    @Test func corruptInputFailsTheInflateStageWithADataError() throws {
        var gz = [UInt8](try runProcess("/usr/bin/gzip", ["-c"], stdin: Data(Self.compressible)).stdout)
        gz[gz.count / 2] ^= 0x55
        try withTemporaryDirectory { dir in
            let pipeline = Pipeline(
                source: .memory(gz), stages: [try Inflate()], sink: .file(atPath: dir + "/out"),
                options: PipelineOptions(chunkSize: try ChunkSize(4096)))
            let result = try runPipeline(pipeline)
            #expect(result.error?.location == .stage(index: 0, name: "inflate"))
            #expect(result.error?.underlying.code == .corruptData)
            #expect(!FileManager.default.fileExists(atPath: dir + "/out"))
        }
    }

    @Test func truncatedInputIsATruncatedDataError() throws {
        let gz = [UInt8](try runProcess("/usr/bin/gzip", ["-c"], stdin: Data(Self.compressible)).stdout)
        let pipeline = Pipeline(
            source: .memory(Array(gz.prefix(gz.count - 20))), stages: [try Inflate()], sink: .toMemory())
        let result = try runPipeline(pipeline)
        #expect(result.error?.underlying.code == .truncatedData)
    }

    @Test func bombLimitStopsThePipelineWithAClearError() throws {
        let zeros = Data(count: 16 << 20)
        let gz = [UInt8](try runProcess("/usr/bin/gzip", ["-c"], stdin: zeros).stdout)
        let pipeline = Pipeline(
            source: .memory(gz), stages: [try Inflate(limit: InflateLimit(maxOutputBytes: 1 << 20))],
            sink: .toMemory())
        let result = try runPipeline(pipeline)
        #expect(result.error?.underlying.code == .limitExceeded)
        #expect(result.bytesWritten <= 1 << 20)
        #expect(result.error?.description.isEmpty == false)
    }
}
