import Foundation
import Testing

@testable import Sluice

/// `ZstdFrameWalker` follows real zstd streams to their end, in any pieces, without finding
/// fault with them, and finds the one thing it looks for (a compressed block of size 0).
@Suite struct ZstdFrameWalkerTests {
    /// Walks `stream` in pieces of `piece` bytes.
    static func walked(_ stream: [UInt8], piece: Int) -> ZstdFrameWalker {
        var walker = ZstdFrameWalker()
        stream.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let end = min(offset + piece, bytes.count)
                walker.walk(UnsafeRawBufferPointer(rebasing: bytes[offset..<end]))
                offset = end
            }
        }
        return walker
    }

    static let zstdTool = "/usr/bin/zstd"
    static let pzstdTool = "/usr/bin/pzstd"

    /// What zstd and pzstd write: frames with and without content size and checksum, raw, RLE
    /// and compressed blocks, long windows, several frames, pzstd's skippable frames.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: zstdTool)))
    func realStreamsAreFollowedToTheirEnd() throws {
        let text = mixed(700_001)
        let zeros = [UInt8](repeating: 0, count: 300_000)
        let random = randomBytes(200_000, seed: 11)
        var streams: [(String, [UInt8])] = []
        for (name, arguments) in [
            ("-1", ["-1"]), ("-19 --long", ["-19", "--long"]), ("--no-check", ["--no-check", "-3"]),
            ("-3 --content-size", ["-3"]),
        ] {
            for (kind, input) in [("text", text), ("zeros", zeros), ("random", random), ("empty", [])] {
                let out = try runProcess(Self.zstdTool, ["-c", "-q"] + arguments, stdin: Data(input))
                #expect(out.status == 0)
                streams.append(("zstd \(name) of \(kind)", [UInt8](out.stdout)))
            }
        }
        if FileManager.default.isExecutableFile(atPath: Self.pzstdTool) {
            let out = try runProcess(Self.pzstdTool, ["-c", "-q", "-p", "2", "-3"], stdin: Data(text + zeros + text))
            #expect(out.status == 0)
            streams.append(("pzstd -p 2", [UInt8](out.stdout)))
        }
        let skippable: [UInt8] = [0x5f, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 1, 2, 3, 0x50, 0x2a, 0x4d, 0x18, 0, 0, 0, 0]
        streams.append(("skippable frames and two zstd frames", skippable + streams[0].1 + skippable + streams[5].1))
        for (name, stream) in streams {
            for piece in [1, 2, 3, 7, 4096, max(stream.count, 1)] {
                let walker = Self.walked(stream, piece: piece)
                #expect(walker.problem == nil, "\(name), pieces of \(piece): \(walker.problem ?? "")")
                #expect(!walker.isLost, "\(name), pieces of \(piece): lost")
                #expect(walker.betweenFrames, "\(name), pieces of \(piece): not between frames at the end")
                #expect(walker.offset == stream.count, "\(name), pieces of \(piece)")
            }
            // Cut anywhere inside, the walk is never between frames there unless a frame ends.
            if stream.count > 20 {
                let cut = Self.walked(Array(stream.prefix(stream.count - 1)), piece: 5)
                #expect(!cut.betweenFrames, "\(name): cut one byte short, yet between frames")
            }
        }
    }

    /// A compressed block of size 0, first or after data, last or not, is found at once,
    /// in any pieces, and so is an RLE block of size 0 in a single segment of no content; a
    /// legacy magic number is refused, an unknown one left to libzstd.
    @Test func aCompressedBlockOfSizeZeroIsFoundAndUnknownFramesAreLeftAlone() {
        let magic: [UInt8] = [0x28, 0xb5, 0x2f, 0xfd]
        let empty: [UInt8] = magic + [0x24, 0x00, 0x05, 0x00, 0x00, 0x99, 0xe9, 0xd8, 0x51]
        let afterData: [UInt8] = magic + [0x00, 0x00, 0x18, 0x00, 0x00, 0x61, 0x62, 0x63, 0x04, 0x00, 0x00]
        for stream in [empty, afterData] {
            for piece in [1, 2, 5, stream.count] {
                let walker = Self.walked(stream, piece: piece)
                #expect(walker.problem?.contains("compressed block of size 0") == true, "pieces of \(piece)")
            }
        }
        // An RLE block of size 0 and a raw block of size 0 are allowed, but for an RLE block of
        // size 0 in a single segment of no content (a window of no bytes).
        let zeroRaw: [UInt8] = magic + [0x00, 0x00, 0x01, 0x00, 0x00]
        let zeroRLE: [UInt8] = magic + [0x00, 0x00, 0x03, 0x00, 0x00, 0x41]
        let zeroRawNoContent: [UInt8] = magic + [0x20, 0x00, 0x01, 0x00, 0x00]
        let zeroRLEInThreeBytes: [UInt8] =
            magic + [0x20, 0x03, 0x02, 0x00, 0x00, 0x41, 0x19, 0x00, 0x00, 0x61, 0x62, 0x63]
        for stream in [zeroRaw, zeroRLE, zeroRawNoContent, zeroRLEInThreeBytes] {
            let walker = Self.walked(stream, piece: 1)
            #expect(walker.problem == nil)
            #expect(walker.betweenFrames)
            #expect(walker.offset == stream.count)
        }
        let oneByteNoContent: [UInt8] = magic + [0x20, 0x00, 0x02, 0x00, 0x00, 0x41, 0x01, 0x00, 0x00]
        let fourBytesNoContent: [UInt8] = magic + [0xa0, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x41]
        for stream in [oneByteNoContent, fourBytesNoContent] {
            for piece in [1, 2, 5, stream.count] {
                let walker = Self.walked(stream, piece: piece)
                #expect(walker.problem?.contains("RLE block of size 0") == true, "pieces of \(piece)")
            }
        }
        // An unknown magic number is left to libzstd (which refuses it); a legacy (pre-1.0)
        // frame is refused, in any pieces.
        let unknown: [UInt8] = [0x29, 0xb5, 0x2f, 0xfd, 0x05, 0x00, 0x00, 0x00]
        let walker = Self.walked(unknown + empty, piece: 3)
        #expect(walker.isLost)
        #expect(walker.problem == nil)
        #expect(walker.offset == unknown.count + empty.count)
        let legacy: [UInt8] = [0x27, 0xb5, 0x2f, 0xfd, 0x00, 0x00, 0x00, 0x00, 0x00]
        for piece in [1, 2, 3, legacy.count] {
            #expect(
                Self.walked(legacy, piece: piece).problem?.contains("legacy zstd frame") == true, "pieces of \(piece)")
        }
    }
}
