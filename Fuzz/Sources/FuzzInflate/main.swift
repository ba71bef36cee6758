// libFuzzer target: the decompressors of bytes from outside. `Inflate` (gzip/zlib/raw deflate,
// auto-detection, concatenated gzip members, zero padding, the bomb limit) with each engine
// (zlib, and ISA-L where it is installed), and `Decompressor` (zstd detection in front of
// Inflate; zstd where installed), fed arbitrary bytes in arbitrary pieces into output buffers
// of arbitrary sizes. It must never crash, never report more than it was given or had room
// for, never stall, never exceed its output limit, and decode the same bytes the same way
// however they are split (compared with one call over the whole input), and whichever engine
// Inflate uses (zlib and ISA-L must agree on success and output, and both refuse the same
// inputs). With the gzip CRC-32 checks deferred (`OutputCheckDeferring`, as `OffloadedStage`
// runs them on another core) the harness makes them as the runner does, and the verdict and
// output must be those of the stage checking in line.
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
    /// Inflate leaving its CRC-32 checks to the harness.
    case deferred(DecompressionFormat, CompressionEngine)
    case decompressor(DecompressionFormat)

    func make() throws(SluiceError) -> any Stage {
        let limit = InflateLimit(maxOutputBytes: outputLimit)
        switch self {
        case .inflate(let format, let engine): return try Inflate(format: format, limit: limit, engine: engine)
        case .deferred(let format, let engine):
            let inflate = try Inflate(format: format, limit: limit, engine: engine)
            inflate.deferOutputChecks()
            return inflate
        case .decompressor(let format): return try Decompressor(format: format, limit: limit)
        }
    }

    var defers: Bool {
        if case .deferred = self { return true }
        return false
    }

    static func detected(_ stage: any Stage) -> String? {
        switch stage {
        case let inflate as Inflate: return inflate.detectedFormat?.rawValue
        case let decompressor as Decompressor: return decompressor.detectedFormat
        default: return nil
        }
    }
}

/// The deferred checks made as a runner makes them: a CRC-32 of the output from each check's
/// start to its end, compared with the check's value.
struct Verifier {
    /// The stage defers its checks (otherwise the verifier does nothing).
    let active: Bool
    private let crc = Checksum(.crc32)
    private var position = 0
    private var pending: [OutputCheck] = []
    /// The first mismatch.
    private(set) var failure: SluiceError?

    init(active: Bool) { self.active = active }

    /// Takes the checks `stage` reported after a call that began with `before` bytes out, and
    /// makes those whose bytes are all out.
    mutating func take(from stage: any Stage, before: Int, output: [UInt8]) {
        guard active, let deferring = stage as? any OutputCheckDeferring else { return }
        let new = deferring.takeOutputChecks()
        // A check is reported no later than the call that makes the first byte after its end.
        expect(new.allSatisfy { $0.end >= before }, "a check reported after bytes beyond its end")
        pending += new
        while let check = pending.first, check.end <= output.count {
            pending.removeFirst()
            expect(check.end >= position, "a check ending at \(check.end) before \(position), checked already")
            guard check.end >= position else { return }
            output.withUnsafeBytes { crc.observe(UnsafeRawBufferPointer(rebasing: $0[position..<check.end])) }
            position = check.end
            if crc.value != check.crc32 && failure == nil { failure = check.mismatch }
            crc.reset()
        }
    }

    /// At the end of a successful decoding: every check made, and the output checked to its end.
    func finished(output: [UInt8], stage: any Stage) {
        guard active else { return }
        expect(pending.isEmpty, "\(pending.count) checks left at the end")
        if let inflate = stage as? Inflate, inflate.detectedFormat == .gzip, failure == nil {
            expect(position == output.count, "gzip output checked to \(position) of \(output.count)")
        }
    }
}

/// Decodes `data` in the pieces and buffer sizes `choices` picks (or in one piece into one
/// buffer), checking the stage's contract on every call.
func decode(_ data: UnsafeRawBufferPointer, _ subject: Subject, _ choices: inout Choices?) -> Decoded {
    var result = Decoded()
    var verifier = Verifier(active: subject.defers)
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
                verifier.take(from: stage, before: result.output.count - p.produced, output: result.output)
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
            verifier.take(from: stage, before: result.output.count - p.produced, output: result.output)
            if p.finished {
                verifier.finished(output: result.output, stage: stage)
                break
            }
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
    if result.error == nil, let failure = verifier.failure { result.error = failure.code }
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
    // Inflate defers its CRC-32 checks one time in two.
    let subject: Subject
    let pick = seed.below(4)
    let deferring = seed.below(2) == 0
    if pick == 0 && zstd {
        subject = .decompressor(format == .auto ? .auto : .zstd)
    } else {
        let engine: CompressionEngine = pick != 3 && isal ? .isal : .zlib
        subject = deferring ? .deferred(format, engine) : .inflate(format, engine)
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
    if case .deferred(let format, let engine) = subject {
        let inline = decode(data, .inflate(format, engine), &whole)
        expect(
            (reference.error == nil) == (inline.error == nil) && reference.output == inline.output,
            "\(format) \(engine): checks deferred \(describe(reference)), in line \(describe(inline))")
    }
    return 0
}

runLibFuzzer(fuzzInflate)
