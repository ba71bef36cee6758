import FoundationEssentials
import Sluice

/// Data for measurements, made here so nothing is downloaded: incompressible bytes
/// (xorshift) and text-like compressible bytes (words drawn at random from a small lexicon,
/// which gzip -6 shrinks about 3:1, like source code and documentation).
enum BenchData {
    static func random(_ count: Int, seed: UInt64 = 0x2545_F491_4F6C_DD1D) -> [UInt8] {
        var state = seed
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { raw in
            var i = 0
            while i + 8 <= count {
                state ^= state << 13
                state ^= state >> 7
                state ^= state << 17
                raw.storeBytes(of: state, toByteOffset: i, as: UInt64.self)
                i += 8
            }
            while i < count {
                raw[i] = UInt8(truncatingIfNeeded: state >> (8 * (i % 8)))
                i += 1
            }
        }
        return out
    }

    static func text(_ count: Int, seed: UInt64 = 0x9E37_79B9_7F4A_7C15) -> [UInt8] {
        let lexicon = [
            "the", "stream", "event", "loop", "chunk", "queue", "write", "read", "space", "bytes",
            "available", "delegate", "schedule", "open", "close", "error", "end", "socket", "file",
            "memory", "pipeline", "stage", "deflate", "inflate", "gzip", "buffer", "pending", "flag",
            "return", "let", "var", "func", "if", "else", "for", "while", "switch", "case", "struct",
            "class", "{", "}", "(", ")", "=", "==", "+", "0", "1", "4096", "\n", "\n    ", ";", ",",
        ].map { Array($0.utf8) }
        var state = seed
        var out: [UInt8] = []
        out.reserveCapacity(count + 16)
        while out.count < count {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            out += lexicon[Int(state % UInt64(lexicon.count))]
            if state & 3 != 0 { out.append(0x20) }
        }
        return Array(out.prefix(count))
    }
}
