import Foundation
import TestThreads
import Testing

@testable import Sluice

// MARK: - Helpers

/// Drives `stage` over `input` the way a pipeline does: input offered in pieces of at most
/// `piece` bytes, output taken through a buffer of `outputSize` bytes, then `finish` until it
/// reports `finished`. Records an issue if a call makes no progress when it must.
func drive(_ stage: any Stage, _ input: [UInt8], piece: Int, outputSize: Int) throws -> [UInt8] {
    let source = UnsafeMutableRawBufferPointer.allocate(byteCount: input.count, alignment: 1)
    defer { source.deallocate() }
    source.copyMemory(from: input.withUnsafeBytes { $0 })
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: outputSize, alignment: 1)
    defer { buffer.deallocate() }

    var output: [UInt8] = []
    var offset = 0
    while offset < input.count {
        let end = min(offset + piece, input.count)
        while offset < end {
            // After a decoder reports `finished`, input that is left is still offered: the stage
            // must reject it (trailing garbage), as a pipeline expects.
            let p = try stage.process(UnsafeRawBufferPointer(rebasing: source[offset..<end]), into: buffer)
            output.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[0..<p.produced]))
            offset += p.consumed
            guard p.consumed > 0 || p.produced > 0 else {
                Issue.record("\(stage.name): process made no progress (finished: \(p.finished))")
                return output
            }
        }
    }
    while true {
        let p = try stage.finish(into: buffer)
        output.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[0..<p.produced]))
        if p.finished { break }
        guard p.produced > 0 else {
            Issue.record("\(stage.name): finish made no progress")
            return output
        }
    }
    return output
}

/// Compresses `data` with a Deflate stage.
func compress(_ data: [UInt8], _ format: CompressionFormat, level: Int = 6, piece: Int = 65536, outputSize: Int = 65536)
    throws -> [UInt8]
{
    try drive(Deflate(format: format, level: level), data, piece: piece, outputSize: outputSize)
}

/// Decompresses `data` with an Inflate stage.
func decompress(
    _ data: [UInt8], _ format: DecompressionFormat = .auto, limit: InflateLimit = .default, piece: Int = 65536,
    outputSize: Int = 65536
) throws -> [UInt8] {
    try drive(Inflate(format: format, limit: limit), data, piece: piece, outputSize: outputSize)
}

/// The error decompressing `data` throws, or nil (recording an issue) if it succeeds.
func decompressError(
    _ data: [UInt8], _ format: DecompressionFormat = .auto, limit: InflateLimit = .default, piece: Int = 65536,
    outputSize: Int = 65536
) -> SluiceError? {
    do {
        _ = try decompress(data, format, limit: limit, piece: piece, outputSize: outputSize)
        Issue.record("decompression succeeded where it should fail")
        return nil
    } catch let error as SluiceError {
        return error
    } catch {
        Issue.record("unexpected error \(error)")
        return nil
    }
}

/// Text-like bytes that compress about 3:1: words from a small vocabulary in a seeded order.
func compressibleBytes(_ count: Int, seed: UInt64 = 7) -> [UInt8] {
    let words = ["stream", "sluice", "gate", "water", "flows", "the", "a", "of", "chunk", "bytes", "\n", "pipeline"]
        .map { Array($0.utf8) + [0x20] }
    let picks = randomBytes(count / 2 + 16, seed: seed)
    var out: [UInt8] = []
    out.reserveCapacity(count + 16)
    var i = 0
    while out.count < count {
        out.append(contentsOf: words[Int(picks[i % picks.count]) % words.count])
        if picks[(i * 7) % picks.count] < 8 { out.append(picks[(i * 3) % picks.count]) }
        i += 1
    }
    return Array(out.prefix(count))
}

/// The path of an executable found on PATH or in the usual places, or nil.
func executable(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
    let dirs = path.split(separator: ":").map(String.init) + ["/usr/bin", "/usr/local/bin", "/bin"]
    return dirs.map { $0 + "/" + name }.first { FileManager.default.isExecutableFile(atPath: $0) }
}

/// Runs `tool` with `arguments`, standard input from the file `stdin`, returning its exit status
/// and standard output.
func runTool(_ tool: String, _ arguments: [String], stdin: String, in dir: String) throws -> (Int32, [UInt8]) {
    let outPath = dir + "/tool-output-" + UUID().uuidString
    _ = FileManager.default.createFile(atPath: outPath, contents: nil)
    let input = try FileHandle(forReadingFrom: URL(fileURLWithPath: stdin))
    let output = try FileHandle(forWritingTo: URL(fileURLWithPath: outPath))
    defer {
        try? input.close()
        try? output.close()
    }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: tool)
    process.arguments = arguments
    process.standardInput = input
    process.standardOutput = output
    try process.run()
    process.waitUntilExit()
    return (process.terminationStatus, Array(try Data(contentsOf: URL(fileURLWithPath: outPath))))
}

/// gzip's output for `data` at `level`, from the real tool at `tool` (gzip or pigz).
func peerCompress(_ tool: String, _ data: [UInt8], level: Int = 6, in dir: String) throws -> [UInt8] {
    let inPath = dir + "/peer-input-" + UUID().uuidString
    try Data(data).write(to: URL(fileURLWithPath: inPath))
    let (status, out) = try runTool(tool, ["-\(level)", "-c"], stdin: inPath, in: dir)
    #expect(status == 0, "\(tool) -\(level) -c exited \(status)")
    return out
}

/// pigz's path; records a failure (CI installs pigz) when it is missing.
func pigzPath() -> String? {
    guard let path = executable("pigz") else {
        Issue.record("pigz is not installed: install it (apt-get install pigz) to run the peer tests")
        return nil
    }
    return path
}

/// Chunk sizes a pipeline may use, as (input piece, output buffer) pairs.
let chunkShapes: [(Int, Int)] = [(512, 512), (4096, 65536), (65536, 4096), (1 << 20, 1 << 20), (4 << 20, 4 << 20)]

// MARK: - Formats and arguments

@Test(.ownThreads) func formatsParseFromTheirNames() {
    #expect(CompressionFormat(rawValue: "gzip") == .gzip)
    #expect(CompressionFormat(rawValue: "zlib") == .zlib)
    #expect(CompressionFormat(rawValue: "deflate") == .deflate)
    #expect(CompressionFormat(rawValue: "auto") == nil)
    #expect(DecompressionFormat(rawValue: "auto") == .auto)
    #expect(DecompressionFormat(rawValue: "gzip") == .gzip)
    #expect(DecompressionFormat(rawValue: "zlib") == .zlib)
    #expect(DecompressionFormat(rawValue: "deflate") == .deflate)
    #expect(DecompressionFormat(rawValue: "bzip2") == nil)
    for format in CompressionFormat.allCases {
        #expect(DecompressionFormat(format).rawValue == format.rawValue)
    }
}

@Test(.ownThreads, arguments: [-1, 10, 99])
func deflateRejectsLevelsOutOfRange(level: Int) {
    let error = #expect(throws: SluiceError.self) { try Deflate(format: .gzip, level: level) }
    #expect(error?.code == .invalidArgument)
    #expect(error?.operation == "deflate")
    #expect(error?.detail?.contains("0...9") == true)
}

// MARK: - Round trips

@Test(.ownThreads, arguments: CompressionFormat.allCases, [0, 1, 6, 9])
func roundTrip(format: CompressionFormat, level: Int) throws {
    let inputs = [randomBytes(200_000, seed: UInt64(level) + 1), compressibleBytes(300_000, seed: UInt64(level) + 2)]
    for (index, data) in inputs.enumerated() {
        let (deflatePiece, deflateOut) = chunkShapes[(index + level) % chunkShapes.count]
        let compressed = try compress(data, format, level: level, piece: deflatePiece, outputSize: deflateOut)
        if index == 1 && level > 0 { #expect(compressed.count < data.count / 2) }
        for (piece, outputSize) in chunkShapes {
            let restored = try decompress(compressed, DecompressionFormat(format), piece: piece, outputSize: outputSize)
            #expect(restored == data, "\(format) level \(level) input \(index) chunks \(piece)/\(outputSize)")
        }
    }
}

@Test(.ownThreads, arguments: CompressionFormat.allCases)
func roundTripThroughOneByteBuffers(format: CompressionFormat) throws {
    let data = compressibleBytes(12_000) + randomBytes(3_000)
    let compressed = try compress(data, format, level: 6, piece: 1, outputSize: 1)
    #expect(compressed == (try compress(data, format, level: 6)))
    #expect(try decompress(compressed, DecompressionFormat(format), piece: 1, outputSize: 1) == data)
    #expect(try decompress(compressed, .auto, piece: 1, outputSize: 1) == data)
    #expect(try decompress(compressed, .auto, piece: 3, outputSize: 65536) == data)
}

@Test(.ownThreads, arguments: CompressionFormat.allCases)
func emptyInputRoundTrips(format: CompressionFormat) throws {
    let compressed = try compress([], format)
    #expect(!compressed.isEmpty)
    #expect(try decompress(compressed, DecompressionFormat(format)) == [])
    #expect(try decompress(compressed, .auto) == [])
}

@Test(.ownThreads) func deflateResetStartsANewStream() throws {
    let deflate = try Deflate(format: .zlib, level: 1)
    let first = try drive(deflate, Array("first".utf8), piece: 512, outputSize: 512)
    deflate.reset()
    let second = try drive(deflate, Array("second".utf8), piece: 512, outputSize: 512)
    #expect(try decompress(first) == Array("first".utf8))
    #expect(try decompress(second) == Array("second".utf8))
}

@Test(.ownThreads) func inflateResetStartsANewStream() throws {
    let inflate = try Inflate()
    let data = compressibleBytes(5_000)
    #expect(try drive(inflate, try compress(data, .zlib), piece: 512, outputSize: 512) == data)
    #expect(inflate.detectedFormat == .zlib)
    inflate.reset()
    #expect(inflate.detectedFormat == nil)
    #expect(inflate.totalIn == 0)
    #expect(try drive(inflate, try compress(data, .gzip), piece: 1, outputSize: 512) == data)
    #expect(inflate.detectedFormat == .gzip)
}

// MARK: - Auto-detection

@Test(.ownThreads, arguments: CompressionFormat.allCases, [0, 6])
func autoDetectsFormat(format: CompressionFormat, level: Int) throws {
    let data = compressibleBytes(50_000)
    let compressed = try compress(data, format, level: level)
    for piece in [1, 2, 512] {
        let inflate = try Inflate()
        #expect(try drive(inflate, compressed, piece: piece, outputSize: 4096) == data)
        #expect(inflate.detectedFormat == format)
        #expect(inflate.totalIn == compressed.count)
        #expect(inflate.totalOut == data.count)
    }
}

@Test(.ownThreads) func autoAcceptsEmptyInputAsEmptyStream() throws {
    #expect(try decompress([], .auto) == [])
}

@Test(.ownThreads, arguments: [DecompressionFormat.gzip, .zlib, .deflate])
func fixedFormatRejectsEmptyInputAsTruncated(format: DecompressionFormat) {
    #expect(decompressError([], format)?.code == .truncatedData)
}

@Test(.ownThreads) func zlibReportsFinishedAtTheEndOfTheStream() throws {
    let compressed = try compress(Array("hello".utf8), .zlib)
    let inflate = try Inflate(format: .zlib)
    var out = [UInt8](repeating: 0, count: 64)
    let p = try compressed.withUnsafeBytes { input in
        try out.withUnsafeMutableBytes { try inflate.process(input, into: $0) }
    }
    #expect(p == StageProgress(consumed: compressed.count, produced: 5, finished: true))
}

// MARK: - Real peers

@Test(.ownThreads) func gzipAndPigzReadOurGzip() throws {
    try withTemporaryDirectory { dir in
        let data = compressibleBytes(400_000) + randomBytes(100_000)
        for level in [1, 9] {
            let path = dir + "/ours-\(level).gz"
            try Data(try compress(data, .gzip, level: level)).write(to: URL(fileURLWithPath: path))
            let (status, out) = try runTool("/usr/bin/gzip", ["-dc"], stdin: path, in: dir)
            #expect(status == 0)
            #expect(out == data)
            if let pigz = pigzPath() {
                let (pigzStatus, pigzOut) = try runTool(pigz, ["-dc"], stdin: path, in: dir)
                #expect(pigzStatus == 0)
                #expect(pigzOut == data)
            }
        }
    }
}

@Test(.ownThreads) func inflateReadsGzipAndPigz() throws {
    try withTemporaryDirectory { dir in
        let data = compressibleBytes(300_000, seed: 11) + randomBytes(200_000, seed: 12)
        var tools = ["/usr/bin/gzip"]
        if let pigz = pigzPath() { tools.append(pigz) }
        for tool in tools {
            for level in [1, 6, 9] {
                let compressed = try peerCompress(tool, data, level: level, in: dir)
                #expect(try decompress(compressed, .gzip) == data, "\(tool) -\(level)")
                #expect(try decompress(compressed, .auto, piece: 4096, outputSize: 512) == data, "\(tool) -\(level)")
            }
        }
    }
}

@Test(.ownThreads) func concatenatedGzipMembersDecodeAsOne() throws {
    try withTemporaryDirectory { dir in
        guard let pigz = pigzPath() else { return }
        let a = compressibleBytes(100_000, seed: 21)
        let b = randomBytes(70_000, seed: 22)
        let joined = try peerCompress("/usr/bin/gzip", a, in: dir) + (try peerCompress(pigz, b, in: dir))
        for (piece, outputSize) in [(1, 1), (1, 4096), (512, 512), (65536, 1 << 20)] {
            #expect(try decompress(joined, .gzip, piece: piece, outputSize: outputSize) == a + b)
            #expect(try decompress(joined, .auto, piece: piece, outputSize: outputSize) == a + b)
        }
        // Ours after theirs, and an empty member in between.
        let three = joined + (try compress([], .gzip)) + (try compress(a, .gzip, level: 1))
        #expect(try decompress(three) == a + b + a)
    }
}

@Test(.ownThreads) func zeroPaddingAfterTheLastGzipMemberIsIgnored() throws {
    let data = compressibleBytes(10_000)
    let padded = try compress(data, .gzip) + [UInt8](repeating: 0, count: 1000)
    #expect(try decompress(padded, piece: 7, outputSize: 512) == data)
}

// MARK: - Bad input

@Test(.ownThreads, arguments: [CompressionFormat.gzip, .zlib])
func corruptByteIsCorruptData(format: CompressionFormat) throws {
    let data = randomBytes(100_000, seed: 31)
    var compressed = try compress(data, format, level: 6)
    compressed[compressed.count / 2] ^= 0x55
    let error = decompressError(compressed, DecompressionFormat(format))
    #expect(error?.code == .corruptData)
    #expect(error?.operation == "inflate")
    #expect(error?.subject == format.rawValue)
    #expect(error?.detail != nil)
}

/// Detection reads anything without a gzip, zlib or zstd header as raw deflate: plain text
/// given to `-d` fails there, and the message says why deflate was tried. Asked for by name,
/// or with a header found, it does not.
@Test(.ownThreads)
func plainInputNamesTheGuess() throws {
    let text = Array("hello, this file was never compressed\n".utf8)
    let guessed = decompressError(text, .auto)
    #expect(guessed?.code == .corruptData)
    #expect(guessed?.subject == "deflate")
    #expect(guessed?.detail?.contains("no gzip, zlib or zstd header, so it was read as raw deflate") == true)
    let named = decompressError(text, .deflate)
    #expect(named?.code == .corruptData)
    #expect(named?.detail?.contains("header") == false)
    var gzip = try compress(randomBytes(10_000, seed: 5), .gzip, level: 6)
    gzip.removeLast(20)
    let truncated = decompressError(gzip, .auto)
    #expect(truncated?.code == .truncatedData)
    #expect(truncated?.detail?.contains("raw deflate") == false)
}

@Test(.ownThreads, arguments: [CompressionFormat.gzip, .zlib])
func corruptChecksumIsCorruptData(format: CompressionFormat) throws {
    var compressed = try compress(compressibleBytes(50_000), format)
    // The first byte of the CRC-32 (gzip, followed by ISIZE) or of the Adler-32 (zlib).
    compressed[compressed.count - (format == .gzip ? 8 : 4)] ^= 0x01
    let error = decompressError(compressed, .auto)
    #expect(error?.code == .corruptData)
    #expect(error?.detail?.contains("check") == true)
}

@Test(.ownThreads, arguments: CompressionFormat.allCases)
func truncatedStreamIsTruncatedData(format: CompressionFormat) throws {
    let data = compressibleBytes(100_000, seed: 41)
    let compressed = try compress(data, format)
    for cut in [1, 4, compressed.count / 2, compressed.count - 1] {
        let error = decompressError(Array(compressed.prefix(cut)), .auto, piece: 512, outputSize: 512)
        #expect(error?.code == .truncatedData, "\(format) cut at \(cut)")
    }
    let fixed = decompressError(Array(compressed.dropLast(1)), DecompressionFormat(format))
    #expect(fixed?.code == .truncatedData)
    #expect(fixed?.subject == format.rawValue)
}

@Test(.ownThreads) func truncatedSecondGzipMemberIsTruncatedData() throws {
    let member = try compress(compressibleBytes(10_000), .gzip)
    #expect(decompressError(member + [0x1f])?.code == .truncatedData)
    #expect(decompressError(member + [0x1f, 0x8b, 0x08])?.code == .truncatedData)
    #expect(decompressError(member + member.dropLast(3), piece: 1, outputSize: 1)?.code == .truncatedData)
}

@Test(.ownThreads, arguments: CompressionFormat.allCases)
func trailingGarbageIsCorruptData(format: CompressionFormat) throws {
    let compressed = try compress(compressibleBytes(20_000), format)
    for garbage: [UInt8] in [[0x41], Array("garbage".utf8), [0x1f, 0x00]] {
        for piece in [1, 65536] {
            let error = decompressError(compressed + garbage, DecompressionFormat(format), piece: piece)
            #expect(error?.code == .corruptData)
            #expect(error?.detail?.contains("trailing garbage") == true, "\(error?.description ?? "")")
        }
    }
    #expect(decompressError(compressed + [0, 0, 0x41])?.code == .corruptData)
}

@Test(.ownThreads) func wrongFormatIsAnError() throws {
    let data = compressibleBytes(10_000)
    let zlib = try compress(data, .zlib)
    let gzip = try compress(data, .gzip)
    #expect(decompressError(zlib, .gzip)?.code == .corruptData)
    #expect(decompressError(gzip, .zlib)?.code == .corruptData)
    #expect(decompressError(Array("plain text, not compressed".utf8), .gzip)?.code == .corruptData)
}

@Test(.ownThreads) func errorsAreStickyAfterFailure() throws {
    let inflate = try Inflate(format: .gzip)
    let junk: [UInt8] = Array("not gzip at all".utf8)
    #expect(throws: SluiceError.self) { try drive(inflate, junk, piece: 512, outputSize: 512) }
    var out = [UInt8](repeating: 0, count: 16)
    let error = #expect(throws: SluiceError.self) { try out.withUnsafeMutableBytes { try inflate.finish(into: $0) } }
    #expect(error?.code == .corruptData)
}

// MARK: - Decompression bomb guard

@Test(.ownThreads) func outputLimitStopsABomb() throws {
    let zeros = [UInt8](repeating: 0, count: 64 << 20)
    let bomb = try compress(zeros, .gzip, level: 9, piece: 1 << 20, outputSize: 1 << 20)
    #expect(bomb.count < 100_000)
    let limit = InflateLimit(maxOutputBytes: 1 << 20)
    let inflate = try Inflate(limit: limit)
    let error = #expect(throws: SluiceError.self) { try drive(inflate, bomb, piece: 65536, outputSize: 4 << 20) }
    #expect(error?.code == .limitExceeded)
    #expect(error?.detail?.contains("1048576") == true)
    #expect(inflate.totalOut <= (1 << 20) + 1)
}

@Test(.ownThreads) func ratioLimitStopsABombButNotSmallInputs() throws {
    let zeros = [UInt8](repeating: 0, count: 8 << 20)
    let bomb = try compress(zeros, .zlib, level: 6, piece: 1 << 20, outputSize: 1 << 20)
    let error = decompressError(bomb, limit: InflateLimit(maxRatio: 100))
    #expect(error?.code == .limitExceeded)
    #expect(error?.detail == "output exceeds 100x the input (decompression bomb guard)")
    // Below the floor the ratio is not checked.
    let small = try compress([UInt8](repeating: 0, count: 500_000), .zlib)
    #expect(try decompress(small, limit: InflateLimit(maxRatio: 100)).count == 500_000)
    // The default has no limits: a legitimate run of zeros decodes.
    #expect(try decompress(bomb, piece: 1 << 20, outputSize: 1 << 20) == zeros)
}

@Test(.ownThreads) func outputExactlyAtTheLimitIsAllowed() throws {
    let data = compressibleBytes(100_000)
    for format in CompressionFormat.allCases {
        let compressed = try compress(data, format)
        #expect(try decompress(compressed, limit: InflateLimit(maxOutputBytes: 100_000)) == data)
        #expect(try decompress(compressed, limit: InflateLimit(maxOutputBytes: .max, maxRatio: .max)) == data)
        let error = decompressError(compressed, limit: InflateLimit(maxOutputBytes: 99_999))
        #expect(error?.code == .limitExceeded)
    }
}

// MARK: - Checksums

@Test(.ownThreads) func checksumTestVectors() {
    let check = Array("123456789".utf8)
    #expect(Checksum.compute(.crc32, over: check) == 0xCBF4_3926)
    #expect(Checksum.compute(.adler32, over: check) == 0x091E_01DE)
    #expect(Checksum.compute(.crc32, over: []) == 0)
    #expect(Checksum.compute(.adler32, over: []) == 1)
    #expect(Checksum.compute(.crc32, over: Array("The quick brown fox jumps over the lazy dog".utf8)) == 0x414F_A339)
    #expect(Checksum.compute(.adler32, over: Array("Wikipedia".utf8)) == 0x11E6_0398)
}

@Test(.ownThreads, arguments: Checksum.Kind.allCases)
func checksumIsIncremental(kind: Checksum.Kind) {
    let data = randomBytes(100_003, seed: 51)
    let tap = Checksum(kind)
    data.withUnsafeBytes { all in
        var offset = 0
        var size = 1
        while offset < all.count {
            let end = min(offset + size, all.count)
            tap.observe(UnsafeRawBufferPointer(rebasing: all[offset..<end]))
            offset = end
            size = size * 3 + 1
        }
    }
    tap.finish()
    #expect(tap.isFinished)
    #expect(tap.count == data.count)
    #expect(tap.value == Checksum.compute(kind, over: data))
    tap.reset()
    #expect(tap.value == Checksum.compute(kind, over: []))
}

@Test(.ownThreads, arguments: Checksum.Kind.allCases)
func checksumSplitsBuffersLargerThanOneZlibCall(kind: Checksum.Kind) {
    // Buffers past UInt32.max bytes are fed to zlib in pieces; the same path with tiny pieces.
    let data = randomBytes(10_007, seed: 52)
    let whole = Checksum.compute(kind, over: data)
    for maxPiece in [1, 7, 4096] {
        let split = data.withUnsafeBytes { Checksum.update(kind, Checksum(kind).value, $0, maxPiece: maxPiece) }
        #expect(split == whole)
    }
}

@Test(.ownThreads) func checksumMatchesTheGzipAndZlibTrailers() throws {
    let data = compressibleBytes(30_000)
    let gzip = try compress(data, .gzip)
    let crc = gzip.suffix(8).prefix(4).reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
    #expect(crc == Checksum.compute(.crc32, over: data))
    let zlib = try compress(data, .zlib)
    let adler = zlib.suffix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
    #expect(adler == Checksum.compute(.adler32, over: data))
}
