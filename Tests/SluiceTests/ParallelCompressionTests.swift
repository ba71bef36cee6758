import CSluiceEngines
import Foundation
import TestThreads
import Testing

@testable import Sluice

/// Runs `stages` over `input` in a pipeline on a loop of its own, into memory.
func pipe(_ input: [UInt8], _ stages: [any Stage], chunk: Int = 64 * 1024) throws -> (PipelineResult, [UInt8]) {
    let sink = WriteStream.toMemory()
    let pipeline = Pipeline(
        source: .memory(input), stages: stages, sink: sink,
        options: PipelineOptions(chunkSize: try ChunkSize(chunk), closesStreams: false))
    let result = try runPipeline(pipeline)
    let data = sink.property(forKey: .dataWrittenToMemory) as? Data ?? Data()
    return (result, [UInt8](data))
}

private func installed(_ path: String) -> Bool { FileManager.default.isExecutableFile(atPath: path) }

/// Text-like bytes (compressible) followed by random ones, `count` in all.
func mixed(_ count: Int) -> [UInt8] {
    let text = Array(
        (0..<(count / 40 + 1)).map { "record \($0 % 977): the quick brown fox \($0 * 31 % 1013)\n" }.joined().utf8)
    let half = count / 2
    return Array(text.prefix(half)) + randomBytes(count - min(half, text.count), seed: UInt64(count) + 7)
}

/// Parallel deflate (pigz-style blocks on worker threads), zstd, and stages run off the loop.
@Suite(.ownThreads) struct ParallelCompressionTests {
    static let block = ParallelDeflate.smallBlockSize
    static let sizes = [0, 1, block, block + 1, 10 * block + 17]

    /// The first offset at which `a` and `b` differ (the shorter one's length if one is a prefix).
    static func firstDifference(_ a: [UInt8], _ b: [UInt8]) -> Int {
        zip(a, b).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(a.count, b.count)
    }

    /// The engines that write deflate on this machine, and the levels of 1, 6 and 9 each serves.
    static let deflateEngines = [CompressionEngine.zlib, .isal, .libdeflate].filter(\.isAvailable)
    static func levels(of engine: CompressionEngine) -> [Int] {
        switch engine {
        case .isal: return [1, 6, 9].filter { ParallelDeflate.isalLevels[$0] != nil }
        case .libdeflate: return [1, 6, 9].filter { ParallelDeflate.libdeflateLevels.contains($0) }
        case .zlib, .zstd: return [1, 6, 9]
        }
    }

    /// Every format × engine × level 1/6/9 × threads 1/2/4 × the sizes around a block (128 KiB
    /// here for every engine, zlib's and libdeflate's too; their own 1 MiB default is tried below).
    @Test(arguments: CompressionFormat.allCases, deflateEngines)
    func blocksRoundTripAndAreIdenticalForAnyThreadCount(format: CompressionFormat, engine: CompressionEngine) throws {
        for level in Self.levels(of: engine) {
            try roundTrip(format: format, engine: engine, level: level)
        }
    }

    private func roundTrip(format: CompressionFormat, engine: CompressionEngine, level: Int) throws {
        for size in Self.sizes {
            let input = mixed(size)
            var outputs: [[UInt8]] = []
            for threads in [1, 2, 4] {
                let stage = try ParallelDeflate(
                    format: format, level: level, threads: threads, blockSize: Self.block, engine: engine)
                let (result, out) = try pipe(input, [stage], chunk: 16 * 1024)
                #expect(result.succeeded, "\(String(describing: result.error))")
                #expect(result.peakInFlightBytes <= result.inFlightLimit)
                outputs.append(out)
            }
            for (index, threads) in [(1, 2), (2, 4)] {
                // Compared as one Bool: a failure says where and keeps both outputs in files,
                // rather than printing 150 KB of bytes.
                let same = outputs[index] == outputs[0]
                var kept = ""
                if !same {
                    let stem = NSTemporaryDirectory() + "sluice-deflate-\(format)-\(level)-\(size)-\(getpid())"
                    let files = FileManager.default
                    _ = files.createFile(atPath: stem + "-1thread", contents: Data(outputs[0]))
                    _ = files.createFile(atPath: stem + "-\(threads)threads", contents: Data(outputs[index]))
                    kept = "; kept in \(stem)-*"
                }
                let at = Self.firstDifference(outputs[index], outputs[0])
                let counts = "\(outputs[index].count) bytes against \(outputs[0].count)"
                let what = "\(format):\(level) (\(engine)), \(size) bytes"
                #expect(same, "\(threads) threads differ from 1 (\(what)): \(counts), first at offset \(at)\(kept)")
            }
            let (back, decoded) = try pipe(outputs[0], [try Inflate(format: DecompressionFormat(format))])
            #expect(back.succeeded, "\(String(describing: back.error))")
            #expect(decoded == input, "\(format):\(level) (\(engine)), \(size) bytes")
        }
    }

    /// zlib's and libdeflate's default blocks (1 MiB; ISA-L keeps pigz's 128 KiB): one member,
    /// the same for 1 and 4 threads, read by the peers.
    @Test(arguments: [CompressionEngine.zlib, .libdeflate].filter(\.isAvailable))
    func largeDefaultBlocksAreOneMemberThatThePeersRead(engine: CompressionEngine) throws {
        #expect(ParallelDeflate.defaultBlockSize(engine: .isal) == ParallelDeflate.smallBlockSize)
        let size = 2 * ParallelDeflate.largeBlockSize + 17
        let input = mixed(size)
        let one = try ParallelDeflate(format: .gzip, level: 6, threads: 1, engine: engine)
        #expect(one.blockSize == ParallelDeflate.largeBlockSize)
        let (_, gz) = try pipe(input, [one])
        let (_, four) = try pipe(input, [try ParallelDeflate(format: .gzip, level: 6, threads: 4, engine: engine)])
        #expect(gz == four)
        // One member: the header once, and the whole input's CRC-32 and size in the one trailer.
        #expect(gz.prefix(3) == [0x1f, 0x8b, 8])
        let crc = gz.suffix(8).prefix(4).reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        #expect(crc == Checksum.compute(.crc32, over: input))
        for peer in ["/usr/bin/gzip", "/usr/bin/pigz", "/usr/bin/igzip"] where installed(peer) {
            let (status, out, err) = try runProcess(peer, ["-dc"], stdin: Data(gz))
            #expect(status == 0, "\(peer): \(String(decoding: err, as: UTF8.self))")
            #expect([UInt8](out) == input, "\(peer)")
        }
        if installed("/usr/bin/gzip") {
            // gzip -l reads the one trailer: the whole input's size.
            let (_, listing, _) = try runProcess("/usr/bin/gzip", ["-l"], stdin: Data(gz))
            #expect(String(decoding: listing, as: UTF8.self).contains(" \(size) "))
        }
    }

    /// A libdeflate piece made continuable, for many small pieces (so that its last deflate
    /// block ends at every bit position of a byte, and is stored, fixed or dynamic): followed by
    /// another piece and a final empty block, zlib decodes both, in order.
    @Test(.enabled(if: CompressionEngine.libdeflate.isAvailable))
    func aContinuablePieceIsFollowedByTheNext() throws {
        let deflater = try #require(sluice_libdeflate_deflate_create(6))
        defer { sluice_libdeflate_deflate_free(deflater) }
        var out = [UInt8](repeating: 0, count: 256 * 1024)
        func piece(_ bytes: [UInt8], last: Bool) -> [UInt8]? {
            let n = bytes.withUnsafeBufferPointer { input in
                out.withUnsafeMutableBufferPointer {
                    sluice_libdeflate_deflate_block(
                        deflater, input.baseAddress, UInt32(input.count), last ? 1 : 0, $0.baseAddress,
                        UInt32($0.count))
                }
            }
            return n < 0 ? nil : Array(out[..<n])
        }
        var endings = Set<UInt8>()
        for n in 1...300 {
            let input = n % 3 == 0 ? randomBytes(n, seed: UInt64(n)) : mixed(n * 7)
            let first = try #require(piece(input, last: false), "\(input.count) bytes")
            #expect(first.suffix(4) == [0, 0, 0xff, 0xff], "\(input.count) bytes")
            endings.insert(first[first.count - 5])
            let tail = Array("and the next piece \(n)".utf8)
            let second = try #require(piece(tail, last: true))
            let (result, decoded) = try pipe(first + second, [try Inflate(format: .deflate)])
            #expect(result.succeeded, "\(input.count) bytes: \(String(describing: result.error))")
            #expect(decoded == input + tail, "\(input.count) bytes")
        }
        #expect(endings.count > 8, "the pieces ended in only \(endings.count) ways")
        // A piece larger than the space its blocks are walked through (64 KiB), then the
        // final empty block zlib writes (fixed Huffman, BFINAL set: 03 00).
        let large = mixed(300_000)
        let continuable = try #require(piece(large, last: false))
        let (result, decoded) = try pipe(continuable + [3, 0], [try Inflate(format: .deflate)])
        #expect(result.succeeded, "\(String(describing: result.error))")
        #expect(decoded == large)
        // Too little room for the piece: refused, nothing overrun.
        #expect(piece(randomBytes(out.count, seed: 9), last: false) == nil)
    }

    @Test(arguments: ["/usr/bin/gzip", "/usr/bin/pigz", "/usr/bin/igzip"], deflateEngines)
    func gzipBlocksAreReadByThePeers(peer: String, engine: CompressionEngine) throws {
        guard installed(peer) else { return }
        for level in Self.levels(of: engine) {
            for size in Self.sizes {
                let input = mixed(size)
                let stage = try ParallelDeflate(
                    format: .gzip, level: level, threads: 2, blockSize: Self.block, engine: engine)
                let (_, gz) = try pipe(input, [stage])
                let (status, out, err) = try runProcess(peer, ["-dc"], stdin: Data(gz))
                #expect(status == 0, "\(peer): \(String(decoding: err, as: UTF8.self))")
                #expect([UInt8](out) == input, "\(peer), gzip:\(level) (\(engine)), \(size) bytes")
            }
        }
    }

    @Test func zlibStreamMatchesTheChecksumOfTheWholeInput() throws {
        let input = mixed(3 * Self.block + 5)
        let (_, z) = try pipe(input, [try ParallelDeflate(format: .zlib, level: 6, threads: 2)])
        let adler = z.suffix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        #expect(adler == Checksum.compute(.adler32, over: input))
    }

    @Test func withoutALoopTheStageWorksInlineWithTheSameOutput() throws {
        let input = mixed(3 * Self.block + 99)
        let (_, viaLoop) = try pipe(input, [try ParallelDeflate(format: .gzip, level: 6, threads: 2)])
        let out = try Self.feed(try ParallelDeflate(format: .gzip, level: 6, threads: 2), input, piece: 5000)
        #expect(out == viaLoop)
    }

    @Test func stageDriverDrivesAWorkerStageFromItsOwnBuffers() throws {
        let loop = try EventLoop()
        let input = mixed(4 * Self.block + 3)
        let driver = StageDriver(try ParallelDeflate(format: .gzip, level: 1, threads: 2))
        var out: [UInt8] = []
        var offset = 0
        var space = [UInt8](repeating: 0, count: 4096)
        func step() {
            while !driver.isFinished {
                let progress: StageProgress
                do {
                    progress = try space.withUnsafeMutableBytes { space in
                        try input.withUnsafeBytes { bytes in
                            try driver.step(
                                input: offset < input.count ? UnsafeRawBufferPointer(rebasing: bytes[offset...]) : nil,
                                output: space)
                        }
                    }
                } catch {
                    Issue.record("\(error)")
                    return
                }
                offset += progress.consumed
                out += space[..<progress.produced]
                if driver.isWaitingForWorkers { return }  // the wake-up steps again
            }
        }
        driver.attach(to: loop) { step() }
        step()  // on this thread, which runs the loop next
        loop.run(for: .seconds(30))
        #expect(driver.isFinished)
        #expect(driver.statistics.bytesIn == UInt64(input.count))
        #expect(driver.statistics.bytesOut == UInt64(out.count))
        let (status, decoded, _) = try runProcess("/usr/bin/gzip", ["-dc"], stdin: Data(out))
        #expect(status == 0)
        #expect([UInt8](decoded) == input)
    }

    @Test(arguments: [false, true])
    func cancellingWithJobsOnTheWorkersEndsCleanly(decompressing: Bool) throws {
        let loop = try EventLoop()
        let stage: any Stage =
            decompressing
            ? OffloadedStage(try Decompressor()) : try ParallelDeflate(format: .gzip, level: 9, threads: 2)
        let gzipHeader: [UInt8] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3]
        // Stored blocks of 65535 bytes: 0x00, LEN, NLEN, data, forever.
        let stored: [UInt8] = [0, 0xff, 0xff, 0, 0] + [UInt8](repeating: 65, count: 65535)
        var unfinished = gzipHeader
        for _ in 0..<400 { unfinished += stored }
        let source: ReadStream = decompressing ? .memory(unfinished) : .repeating(mixed(1 << 20))
        let pipeline = Pipeline(source: source, stages: [stage], sink: .discard())
        var result: PipelineResult?
        var poll: LoopTimer?
        pipeline.start(on: loop) {
            result = $0
            poll?.cancel()
        }
        poll = loop.schedule(after: .milliseconds(1), repeating: .milliseconds(1)) {
            if pipeline.bytesWritten > 0 { pipeline.cancel() }
        }
        _ = loop.run(for: .seconds(30))
        let ended = try #require(result)
        // Cancelled with jobs out; a fast machine may reach the end of the (unfinished) stream first.
        #expect([.cancelled, .truncatedData].contains(ended.error?.underlying.code))
        #expect(ended.inFlightLimit > 0)
    }

    @Test func memoryStaysBoundedWhateverTheInputSize() throws {
        let small = try ParallelDeflate(format: .gzip, level: 1, threads: 4)
        let (r1, _) = try pipe(randomBytes(2 << 20), [small])
        let large = try ParallelDeflate(format: .gzip, level: 1, threads: 4)
        let (r2, _) = try pipe(randomBytes(24 << 20), [large])
        #expect(r1.inFlightLimit == r2.inFlightLimit)
        #expect(r2.peakInFlightBytes <= r2.inFlightLimit)
        #expect(r2.inFlightLimit < 16 << 20)
    }

    @Test func levelsThreadsAndBlockSizesOutOfRangeAreRefused() {
        #expect(throws: SluiceError.self) { try ParallelDeflate(level: 10) }
        #expect(throws: SluiceError.self) { try ParallelDeflate(threads: 0) }
        #expect(throws: SluiceError.self) { try ParallelDeflate(blockSize: 4096) }
        #expect(throws: SluiceError.self) { try ZstdCompress(level: 20) }
    }

    // MARK: Decompression of what the peers write

    @Test(arguments: [
        ["/usr/bin/pigz", "-c", "-i"], ["/usr/bin/pigz", "-c", "--rsyncable"],
        ["/usr/bin/pigz", "-c", "-p", "2", "-9"],
        ["/usr/bin/igzip", "-c", "-0"], ["/usr/bin/igzip", "-c", "-1"], ["/usr/bin/igzip", "-c", "-2"],
        ["/usr/bin/igzip", "-c", "-3"], ["/usr/bin/gzip", "-c", "-1"],
    ])
    func peersOutputIsDecompressedOffTheLoop(command: [String]) throws {
        guard installed(command[0]) else { return }
        let input = mixed(3 << 20)
        let (status, compressed, _) = try runProcess(command[0], Array(command.dropFirst()), stdin: Data(input))
        #expect(status == 0)
        let (result, out) = try pipe([UInt8](compressed), [OffloadedStage(try Decompressor())])
        #expect(result.succeeded, "\(String(describing: result.error))")
        #expect(out == input)
        #expect(result.peakInFlightBytes <= result.inFlightLimit)
    }

    @Test func corruptAndTruncatedGzipFailOffTheLoopAsOnIt() throws {
        let input = mixed(1 << 20)
        let (_, gz) = try pipe(input, [try ParallelDeflate(format: .gzip, level: 6, threads: 2)])
        var corrupt = gz
        corrupt[gz.count - 6] ^= 0xff  // the CRC
        let (r1, _) = try pipe(corrupt, [OffloadedStage(try Decompressor())])
        #expect(r1.error?.underlying.code == .corruptData)
        let (r2, _) = try pipe(Array(gz.prefix(gz.count / 2)), [OffloadedStage(try Decompressor())])
        #expect(r2.error?.underlying.code == .truncatedData)
    }

    static let inflateEngines = [CompressionEngine.zlib, .isal].filter(\.isAvailable)

    /// Feeds `input` to `stage` `piece` bytes at a time with small output buffers.
    /// `afterEachCall` gets the output there was before each call.
    static func feed(
        _ stage: any Stage, _ input: [UInt8], piece: Int, afterEachCall: (Int) -> Void = { _ in }
    ) throws -> [UInt8] {
        var out: [UInt8] = []
        var space = [UInt8](repeating: 0, count: 977)
        var offset = 0
        var finished = false
        while !finished {
            let p = try space.withUnsafeMutableBytes { space in
                try input.withUnsafeBytes { bytes in
                    offset < input.count
                        ? try stage.process(
                            UnsafeRawBufferPointer(rebasing: bytes[offset..<min(input.count, offset + piece)]),
                            into: space)
                        : try stage.finish(into: space)
                }
            }
            offset += p.consumed
            out += space[..<p.produced]
            afterEachCall(out.count - p.produced)
            finished = offset == input.count && p.finished
            if offset < input.count && p.consumed == 0 && p.produced == 0 {
                throw SluiceError(.invalidArgument, operation: "feed")
            }
        }
        return out
    }

    @Test(arguments: inflateEngines, [1, 7, 4096])
    func membersPaddingAndGarbageAreHandledByEachInflateEngine(engine: CompressionEngine, piece: Int) throws {
        let a = mixed(70_000)
        let b = mixed(3_001)
        let gzA = [UInt8](try runProcess("/usr/bin/gzip", ["-c", "-6"], stdin: Data(a)).stdout)
        let gzB = [UInt8](try runProcess("/usr/bin/gzip", ["-c", "-1"], stdin: Data(b)).stdout)
        let members = gzA + gzB + gzA + [0, 0, 0, 0]
        #expect(try Self.feed(try Inflate(format: .gzip, engine: engine), members, piece: piece) == a + b + a)
        #expect(try Self.feed(try Inflate(engine: engine), members, piece: piece) == a + b + a)
        #expect(throws: SluiceError.self) {
            try Self.feed(try Inflate(engine: engine), gzA + [0x1f, 0x8b, 0x08], piece: piece)
        }
        #expect(throws: SluiceError.self) { try Self.feed(try Inflate(engine: engine), gzA + [0x41], piece: piece) }
        let (_, z) = try pipe(a, [try ParallelDeflate(format: .zlib, level: 6, threads: 1)])
        #expect(try Self.feed(try Inflate(engine: engine), z, piece: piece) == a)
        #expect(throws: SluiceError.self) { try Self.feed(try Inflate(engine: engine), z + [7], piece: piece) }
        let (_, raw) = try pipe(a, [try ParallelDeflate(format: .deflate, level: 6, threads: 1)])
        #expect(try Self.feed(try Inflate(format: .deflate, engine: engine), raw, piece: piece) == a)
        var corrupt = gzA
        corrupt[gzA.count - 5] ^= 1
        #expect(throws: SluiceError.self) { try Self.feed(try Inflate(engine: engine), corrupt, piece: piece) }
    }

    // MARK: zstd

    static let zstdPresent = CompressionEngine.zstd.isAvailable

    @Test(.enabled(if: zstdPresent), arguments: [1, 3, 19])
    func zstdRoundTripsAndIsReadByZstd(level: Int) throws {
        for size in Self.sizes {
            let input = mixed(size)
            var outputs: [[UInt8]] = []
            for threads in [1, 4] {
                let (result, out) = try pipe(input, [OffloadedStage(try ZstdCompress(level: level, threads: threads))])
                #expect(result.succeeded, "\(String(describing: result.error))")
                outputs.append(out)
            }
            #expect(outputs[0] == outputs[1], "zstd:\(level) differs between 1 and 4 threads")
            let (back, decoded) = try pipe(outputs[0], [OffloadedStage(try Decompressor())])
            #expect(back.succeeded, "\(String(describing: back.error))")
            #expect(decoded == input)
            if installed("/usr/bin/zstd") {
                let (status, out, _) = try runProcess("/usr/bin/zstd", ["-dc"], stdin: Data(outputs[0]))
                #expect(status == 0)
                #expect([UInt8](out) == input)
            }
        }
    }

    @Test(.enabled(if: zstdPresent && installed("/usr/bin/zstd")))
    func zstdMultiFrameSkippableAndLongInputIsDecoded() throws {
        let a = mixed(300_000)
        let b = mixed(200_001)
        let frameA = [UInt8](try runProcess("/usr/bin/zstd", ["-c", "-3"], stdin: Data(a)).stdout)
        let frameB = [UInt8](try runProcess("/usr/bin/zstd", ["-c", "--long", "-19"], stdin: Data(b)).stdout)
        let skippable: [UInt8] = [0x50, 0x2a, 0x4d, 0x18, 5, 0, 0, 0, 1, 2, 3, 4, 5]
        let (result, out) = try pipe(skippable + frameA + skippable + frameB, [try Decompressor()], chunk: 4096)
        #expect(result.succeeded, "\(String(describing: result.error))")
        #expect(out == a + b)
    }

    @Test(.enabled(if: zstdPresent))
    func zstdCorruptTruncatedTrailingAndBombInputIsRefused() throws {
        let input = mixed(1 << 20)
        let (_, z) = try pipe(input, [try ZstdCompress(level: 3, threads: 1)])
        var corrupt = z
        corrupt[z.count - 2] ^= 0xff  // the content checksum
        #expect(try pipe(corrupt, [try Decompressor()]).0.error?.underlying.code == .corruptData)
        #expect(try pipe(Array(z.prefix(z.count - 9)), [try Decompressor()]).0.error?.underlying.code == .truncatedData)
        #expect(try pipe(z + [1, 2, 3, 4, 5], [try Decompressor()]).0.error?.underlying.code == .corruptData)
        let zeros = [UInt8](repeating: 0, count: 8 << 20)
        let (_, bomb) = try pipe(zeros, [try ZstdCompress(level: 3, threads: 1)])
        let limited = try Decompressor(limit: InflateLimit(maxOutputBytes: 1 << 20))
        let (result, _) = try pipe(bomb, [OffloadedStage(limited)])
        #expect(result.error?.underlying.code == .limitExceeded)
        #expect(result.bytesWritten <= 1 << 20)
    }

    @Test func theEnginesOfThisBuildAreListed() {
        #expect(CompressionEngine.available.first == .zlib)
        #expect(CompressionEngine.zlib.version?.isEmpty == false)
        for engine in CompressionEngine.allCases where !engine.isAvailable {
            #expect(engine.unavailableReason?.contains(engine.description) == true)
        }
    }
}
