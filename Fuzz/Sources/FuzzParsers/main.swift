// libFuzzer target: the parsers of sizes a user or a script types (`--chunk-size`,
// `--rate-limit`: `ChunkSize(parsing:)` and `ChunkSize.parseBytes`). Any text must give a value
// or a clean error: never a crash or an overflow; an accepted chunk size lies in the range and
// reads back the same from its own description. (The CLI's endpoint parser lives in the
// executable target, which another package cannot import: it has no target here.)
import FuzzDriver
import FuzzSupport
import Sluice

/// One fuzz input (libFuzzer's `LLVMFuzzerTestOneInput`).
func fuzzParsers(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    guard let (_, bytes) = FuzzInput.split(start, count) else { return 0 }
    let text = String(decoding: bytes, as: UTF8.self)
    if let value = ChunkSize.parseBytes(text) {
        expect(value >= 0, "parseBytes(\(text.debugDescription)) = \(value)")
    }
    let parsed = Result { () throws(SluiceError) in try ChunkSize(parsing: text) }
    switch parsed {
    case .success(let size):
        expect(ChunkSize.range.contains(size.bytes), "\(text.debugDescription) parsed as \(size.bytes) bytes")
        expect(
            ChunkSize.parseBytes(text) == size.bytes, "ChunkSize and parseBytes disagree on \(text.debugDescription)")
        let again = try? ChunkSize(parsing: size.description)
        expect(again == size, "\(size.description) does not read back as \(size.bytes) bytes")
    case .failure(let error):
        expect(error.code == .invalidArgument, "\(text.debugDescription): \(error)")
    }
    return 0
}

runLibFuzzer(fuzzParsers)
