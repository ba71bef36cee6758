// libFuzzer target: `Inflate` (gzip/zlib/raw deflate, auto-detection, concatenated gzip
// members, the bomb limit) fed arbitrary bytes in arbitrary pieces into output buffers of
// arbitrary sizes. It must never crash, never report more than it was given or had room for,
// never stall, never exceed its output limit, and decode the same bytes the same way however
// they are split (compared with one call over the whole input).
import FuzzDriver
import FuzzSupport
import Sluice

/// The bomb limit: large enough for the seeds, small enough to keep one run fast.
let outputLimit = 256 << 10

struct Decoded: Equatable {
    var output: [UInt8] = []
    var error: SluiceError.Code?
    var format: CompressionFormat?
}

/// Decodes `data` in the pieces and buffer sizes `choices` picks (or in one piece into one
/// buffer), checking the stage's contract on every call.
func decode(_ data: UnsafeRawBufferPointer, _ format: DecompressionFormat, _ choices: inout Choices?) -> Decoded {
    var result = Decoded()
    let inflate: Inflate
    do {
        inflate = try Inflate(format: format, limit: InflateLimit(maxOutputBytes: outputLimit))
    } catch {
        expect(false, "Inflate.init failed: \(error)")
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
                let p = try inflate.process(piece, into: out)
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
            let p = try inflate.finish(into: out)
            expect(p.consumed == 0, "finish consumed \(p.consumed)")
            expect(p.produced >= 0 && p.produced <= room, "finish produced \(p.produced) into \(room)")
            result.output.append(contentsOf: out[0..<p.produced])
            if p.finished { break }
            expect(p.produced > 0, "finish neither finished nor produced")
            rounds += 1
            expect(rounds <= outputLimit + 1, "finish never finishes")
        }
    } catch {
        result.error = error.code
        // Once failed, it stays failed.
        let again = Result { () throws(SluiceError) in try inflate.finish(into: buffer) }
        if case .success = again { expect(false, "finish succeeded after \(error)") }
    }
    expect(result.output.count <= outputLimit, "\(result.output.count) bytes out, the limit is \(outputLimit)")
    expect(inflate.totalOut <= outputLimit + 1, "totalOut \(inflate.totalOut)")
    expect(inflate.totalIn <= data.count, "totalIn \(inflate.totalIn) of \(data.count)")
    result.format = inflate.detectedFormat
    if result.error != nil { result.output = [] }
    return result
}

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
    var whole: Choices? = nil
    let reference = decode(data, format, &whole)
    let pieces = decode(data, format, &choices)
    expect(
        reference == pieces,
        "split decoding differs: whole \(reference.error.map { "\($0)" } ?? "ok") \(reference.output.count) bytes"
            + " \(reference.format.map { "\($0)" } ?? "-"), split \(pieces.error.map { "\($0)" } ?? "ok")"
            + " \(pieces.output.count) bytes \(pieces.format.map { "\($0)" } ?? "-")")
    return 0
}

runLibFuzzer(fuzzInflate)
