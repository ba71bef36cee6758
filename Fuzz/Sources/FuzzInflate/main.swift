// libFuzzer target: the decompressors of bytes from outside. `Inflate` (gzip/zlib/raw deflate,
// auto-detection, concatenated gzip members, zero padding, the bomb limit) with each engine
// (zlib, and ISA-L where it is installed), and `Decompressor` (zstd detection in front of
// Inflate; zstd where installed), fed arbitrary bytes in arbitrary pieces into output buffers
// of arbitrary sizes. It must never crash, never report more than it was given or had room
// for, never stall, never exceed its output limit, and decode the same bytes the same way
// however they are split (compared with one call over the whole input), and whichever engine
// Inflate uses (zlib and ISA-L must agree on success and output, and both refuse the same
// inputs).
import FuzzDriver
import FuzzSupport
import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The bomb limit: large enough for the seeds, small enough to keep one run fast.
let outputLimit = 256 << 10

struct Decoded: Equatable {
    var output: [UInt8] = []
    var error: SluiceError.Code?
    var format: String?
}

/// A decompressor under test, made fresh for each decoding.
enum Subject {
    case inflate(DecompressionFormat, CompressionEngine)
    case decompressor(DecompressionFormat)

    func make() throws(SluiceError) -> any Stage {
        let limit = InflateLimit(maxOutputBytes: outputLimit)
        switch self {
        case .inflate(let format, let engine): return try Inflate(format: format, limit: limit, engine: engine)
        case .decompressor(let format): return try Decompressor(format: format, limit: limit)
        }
    }

    static func detected(_ stage: any Stage) -> String? {
        switch stage {
        case let inflate as Inflate: return inflate.detectedFormat?.rawValue
        case let decompressor as Decompressor: return decompressor.detectedFormat
        default: return nil
        }
    }
}

/// Decodes `data` in the pieces and buffer sizes `choices` picks (or in one piece into one
/// buffer), checking the stage's contract on every call.
func decode(_ data: UnsafeRawBufferPointer, _ subject: Subject, _ choices: inout Choices?) -> Decoded {
    var result = Decoded()
    let stage: any Stage
    do {
        stage = try subject.make()
    } catch {
        expect(false, "\(subject): \(error)")
        return result
    }
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: outputLimit + 1, alignment: 1)
    defer { buffer.deallocate() }
    func outputRoom() -> Int {
        guard var c = choices else { return buffer.count }
        defer { choices = c }
        switch c.below(8) {
        case 0: return 1 + c.below(16)
        case 1, 2, 3: return 1 + c.below(4096)
        default: return 65536
        }
    }
    do {
        var offset = 0
        var ended = false
        while offset < data.count {
            var length = data.count - offset
            if var c = choices {
                length = c.pieceLength(max: length)
                choices = c
            }
            var piece = UnsafeRawBufferPointer(rebasing: data[offset..<offset + length])
            offset += length
            while !piece.isEmpty {
                let room = outputRoom()
                let out = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<room])
                if trace { note("inflate: process \(Array(piece)) into \(room)") }
                let p = try stage.process(piece, into: out)
                if trace { note("inflate: \(p)") }
                // After the end of a zlib or deflate stream, any byte is trailing garbage.
                expect(!ended, "input after the end of the stream was accepted")
                expect(p.consumed >= 0 && p.consumed <= piece.count, "consumed \(p.consumed) of \(piece.count)")
                expect(p.produced >= 0 && p.produced <= room, "produced \(p.produced) into \(room)")
                expect(p.consumed > 0 || p.produced > 0 || p.finished, "no progress with input and room")
                result.output.append(contentsOf: out[0..<p.produced])
                piece = UnsafeRawBufferPointer(rebasing: piece[p.consumed...])
                if p.finished {
                    ended = true
                    expect(piece.isEmpty, "finished with \(piece.count) bytes left and no error")
                }
            }
        }
        var rounds = 0
        while true {
            let room = outputRoom()
            let out = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<room])
            if trace { note("inflate: finish into \(room)") }
            let p = try stage.finish(into: out)
            if trace { note("inflate: \(p)") }
            expect(p.consumed == 0, "finish consumed \(p.consumed)")
            expect(p.produced >= 0 && p.produced <= room, "finish produced \(p.produced) into \(room)")
            result.output.append(contentsOf: out[0..<p.produced])
            if p.finished { break }
            expect(p.produced > 0, "finish neither finished nor produced")
            rounds += 1
            expect(rounds <= outputLimit + 1, "finish never finishes")
        }
    } catch {
        if trace { note("inflate: \(error)") }
        // Input that is both cut short and invalid may be reported either way, depending on
        // how far the decoder read before it ended (ISA-L rejects a stored block whose lengths
        // disagree before their last byte arrives): the two count as one verdict here.
        result.error = error.code == .truncatedData ? .corruptData : error.code
        // Once failed, it stays failed.
        let again = Result { () throws(SluiceError) in try stage.finish(into: buffer) }
        if case .success = again { expect(false, "finish succeeded after \(error)") }
    }
    expect(result.output.count <= outputLimit, "\(result.output.count) bytes out, the limit is \(outputLimit)")
    if let inflate = stage as? Inflate {
        expect(inflate.totalOut <= outputLimit + 1, "totalOut \(inflate.totalOut)")
        expect(inflate.totalIn <= data.count, "totalIn \(inflate.totalIn) of \(data.count)")
    }
    result.format = Subject.detected(stage)
    if result.error != nil { result.output = [] }
    return result
}

func describe(_ d: Decoded) -> String {
    "\(d.error.map { "\($0)" } ?? "ok") \(d.output.count) bytes \(d.format ?? "-")"
}

/// `SLUICE_FUZZ_TRACE=1 FuzzInflate INPUT` prints every call (to read a finding).
let trace = getenv("SLUICE_FUZZ_TRACE") != nil
let isal = CompressionEngine.isal.isAvailable
let zstd = CompressionEngine.zstd.isAvailable

/// One fuzz input (libFuzzer's `LLVMFuzzerTestOneInput`).
func fuzzInflate(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    guard let (first, data) = FuzzInput.split(start, count) else { return 0 }
    var seed = first
    var choices: Choices? = seed
    let format: DecompressionFormat
    switch seed.below(8) {
    case 5: format = .gzip
    case 6: format = .zlib
    case 7: format = .deflate
    default: format = .auto
    }
    // A quarter through Decompressor (zstd detection first), the rest through Inflate, with
    // ISA-L two times in three where it is installed.
    let subject: Subject
    let pick = seed.below(4)
    if pick == 0 && zstd {
        subject = .decompressor(format == .auto ? .auto : .zstd)
    } else if pick != 3 && isal {
        subject = .inflate(format, .isal)
    } else {
        subject = .inflate(format, .zlib)
    }
    var whole: Choices? = nil
    let reference = decode(data, subject, &whole)
    let pieces = decode(data, subject, &choices)
    expect(
        reference == pieces,
        "\(subject): split decoding differs: whole \(describe(reference)), split \(describe(pieces))")
    if isal, case .inflate(let format, let engine) = subject {
        let other = decode(data, .inflate(format, engine == .zlib ? .isal : .zlib), &whole)
        expect(
            (reference.error == nil) == (other.error == nil) && reference.output == other.output,
            "\(format): \(engine) \(describe(reference)), the other engine \(describe(other))")
    }
    return 0
}

runLibFuzzer(fuzzInflate)
