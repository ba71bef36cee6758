import Foundation
import TestThreads
import Testing

@testable import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// Deltas with `-z`: literal bytes in one raw deflate stream per file, cut with a sync flush
/// before each COPY that follows them; over real sockets into a real directory.
@Suite("Deltas compressed", .ownThreads)
struct DeltaCompressionTests {
    /// Raw deflate of `pieces`, each ended with a sync flush (`ParallelDeflate.flush`), the
    /// stream finished after the last when `finish`.
    static func deflate(_ pieces: [[UInt8]], engine: CompressionEngine = .zlib, finish: Bool = true) throws -> [UInt8] {
        let level = engine == .isal ? 1 : 6
        let stage = try ParallelDeflate(format: .deflate, level: level, threads: 1, engine: engine)
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        func drain(_ input: [UInt8]?) throws {
            var offered = 0
            while true {
                let progress = try buffer.withUnsafeMutableBytes { output in
                    guard let input else { return try stage.finish(into: output) }
                    return try input.withUnsafeBytes {
                        try stage.process(UnsafeRawBufferPointer(rebasing: $0[offered...]), into: output)
                    }
                }
                offered += progress.consumed
                out += buffer[0..<progress.produced]
                if progress.finished || (input != nil && offered == input?.count && progress.produced == 0) { return }
            }
        }
        for piece in pieces {
            try drain(piece)
            stage.flush()
            try drain([])
        }
        if finish { try drain(nil) }
        return out
    }

    @Test("Inflate.flushPending: held-back output comes out, and only a sync flush settles the stream")
    func flushPendingSettlesOnlyAtAFlush() throws {
        let engines = [CompressionEngine.zlib, .libdeflate, .isal].filter(\.isAvailable)
        for engine in engines {
            let pieces = [
                compressibleBytes(70_000, seed: 1), [UInt8](repeating: 7, count: 100_000),
                compressibleBytes(3, seed: 2),
            ]
            let stream = try Self.deflate(pieces, engine: engine, finish: false)
            // Output space of every size: zlib stops with output held back now and then.
            for outputSize in [1, 7, 258, 4096, 65_537] {
                let inflate = try Inflate(format: .deflate)
                var output = [UInt8](repeating: 0, count: outputSize)
                var got: [UInt8] = []
                let settledAtStart = try output.withUnsafeMutableBytes { try inflate.flushPending(into: $0) }
                #expect(settledAtStart.settled && settledAtStart.produced == 0, "nothing taken, nothing held")
                var consumed = 0
                while consumed < stream.count {
                    let progress = try output.withUnsafeMutableBytes { out in
                        try stream.withUnsafeBytes {
                            try inflate.process(UnsafeRawBufferPointer(rebasing: $0[consumed...]), into: out)
                        }
                    }
                    consumed += progress.consumed
                    got += output[0..<progress.produced]
                }
                var held = [UInt8](repeating: 0, count: 512)  // ReceiverSession.inflateHeldMost
                let flushed = try held.withUnsafeMutableBytes { try inflate.flushPending(into: $0) }
                got += held[0..<flushed.produced]
                #expect(flushed.settled, "\(engine), output \(outputSize)")
                #expect(got == pieces.flatMap { $0 }, "\(engine), output \(outputSize)")
                let again = try held.withUnsafeMutableBytes { try inflate.flushPending(into: $0) }
                #expect(again.settled && again.produced == 0, "\(engine): a second look finds it settled still")
            }
        }
        // A stream cut inside a block does not settle.
        let whole = try Self.deflate([compressibleBytes(50_000, seed: 3)], finish: true)
        let inflate = try Inflate(format: .deflate)
        var output = [UInt8](repeating: 0, count: 1 << 20)
        _ = try output.withUnsafeMutableBytes { out in
            try whole.withUnsafeBytes {
                try inflate.process(UnsafeRawBufferPointer(rebasing: $0[0..<whole.count / 2]), into: out)
            }
        }
        let cut = try output.withUnsafeMutableBytes {
            try inflate.flushPending(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<512]))
        }
        #expect(!cut.settled)
    }
}
