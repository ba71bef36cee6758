/// Follows the structure of a zstd stream (RFC 8878: frames, their headers, blocks and
/// checksums, and skippable frames) over the bytes libzstd consumed, counting lengths without
/// holding the data, so that `ZstdDecompress` can give a verdict that does not depend on how
/// its input and output were split.
///
/// libzstd itself does not: it refuses a compressed block whose size is 0 (a compressed block
/// holds at least its literals section's header) when it decodes a frame at once, in a large
/// enough output buffer, and accepts it as an empty block when it streams the same frame
/// (`zstd -d` says "Data corruption detected"). The walker finds such a block wherever the
/// pieces fall. It also refuses an RLE block of size 0 in a single-segment frame that declares
/// no content (libzstd reads it when the whole frame arrives at once and calls it corrupt when
/// it comes in pieces), and the pre-1.0 (legacy) frame formats, which libzstd reads only when
/// their magic number arrives in one piece. Anything it does not know (a magic number that is
/// neither a zstd nor a skippable frame, a reserved block type) is left to libzstd, which
/// refuses it: the walker stops following and never refuses a stream libzstd decodes the same
/// way whatever the split.
struct ZstdFrameWalker {
    /// Where the walk is, with the bytes still to skip or collect.
    private enum Place {
        /// Collecting a frame's 4-byte magic number.
        case magic
        /// Collecting the frame header after the magic number: its first byte (the frame header
        /// descriptor) says how long the rest is.
        case frameHeader
        /// Collecting a 3-byte block header.
        case blockHeader
        /// Skipping a block's content; `last` says whether the frame's checksum or end follows.
        case blockContent(remaining: Int, last: Bool)
        /// Skipping the 4-byte content checksum that ends a frame.
        case checksum(remaining: Int)
        /// Collecting a skippable frame's 4-byte size.
        case skippableSize
        /// Skipping a skippable frame's content.
        case skippableContent(remaining: UInt64)
        /// Something libzstd refuses (or a legacy frame): no longer followed.
        case lost
    }

    private var place = Place.magic
    /// The bytes of the field being collected (at most 14: the largest frame header).
    private var field: [UInt8] = []
    private var fieldLength = 4
    /// Whether the frame being walked ends with a content checksum.
    private var hasChecksum = false
    /// Whether the frame being walked is a single segment declaring no content: its window
    /// holds no bytes.
    private var windowIsEmpty = false
    /// Bytes walked so far: the offset in the compressed input.
    private(set) var offset = 0

    /// What the walk found wrong, at most once; nil while the stream looks well formed.
    private(set) var problem: String?

    /// Whether the walk stands between two frames (or is no longer following).
    var betweenFrames: Bool {
        switch place {
        case .magic: return field.isEmpty
        case .lost: return true
        default: return false
        }
    }

    /// Whether the walk stopped following (a magic number or block type it does not know).
    var isLost: Bool {
        if case .lost = place { return true }
        return false
    }

    /// Walks `bytes`, the next bytes of the stream (those libzstd consumed).
    mutating func walk(_ bytes: UnsafeRawBufferPointer) {
        var index = 0
        while index < bytes.count, problem == nil {
            switch place {
            case .lost:
                offset += bytes.count - index
                return
            case .blockContent(let remaining, let last):
                let step = min(remaining, bytes.count - index)
                index += step
                offset += step
                if step == remaining {
                    endBlock(last: last)
                } else {
                    place = .blockContent(remaining: remaining - step, last: last)
                }
            case .checksum(let remaining):
                let step = min(remaining, bytes.count - index)
                index += step
                offset += step
                if step == remaining {
                    place = .magic
                    startField(4)
                } else {
                    place = .checksum(remaining: remaining - step)
                }
            case .skippableContent(let remaining):
                let step = Int(min(remaining, UInt64(bytes.count - index)))
                index += step
                offset += step
                if UInt64(step) == remaining {
                    place = .magic
                    startField(4)
                } else {
                    place = .skippableContent(remaining: remaining - UInt64(step))
                }
            case .magic, .frameHeader, .blockHeader, .skippableSize:
                let step = min(fieldLength - field.count, bytes.count - index)
                field.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[index..<index + step]))
                index += step
                offset += step
                if field.count == fieldLength { fieldComplete() }
            }
        }
    }

    private mutating func startField(_ length: Int) {
        field.removeAll(keepingCapacity: true)
        fieldLength = length
    }

    private mutating func endBlock(last: Bool) {
        if !last {
            place = .blockHeader
            startField(3)
        } else if hasChecksum {
            place = .checksum(remaining: 4)
        } else {
            place = .magic
            startField(4)
        }
    }

    private var littleEndian: UInt64 {
        field.reversed().reduce(0) { $0 << 8 | UInt64($1) }
    }

    /// The field being collected is whole: decide what follows.
    private mutating func fieldComplete() {
        switch place {
        case .magic:
            let magic = littleEndian
            if magic == 0xFD2F_B528 {
                place = .frameHeader
                startField(1)
            } else if magic & 0xFFFF_FFF0 == 0x184D_2A50 {
                place = .skippableSize
                startField(4)
            } else if (0xFD2F_B522...0xFD2F_B527).contains(magic) || magic == 0x1EB5_2FFD {
                // libzstd reads the pre-1.0 formats (v0.1–v0.7) only when it is given the whole
                // magic number at once: streamed in smaller pieces it calls the same frame an
                // unknown prefix. Refused whatever the split.
                problem = "a legacy zstd frame (a format from before zstd 1.0) is not read, near offset \(offset)"
            } else {
                place = .lost
            }
        case .frameHeader where field.count == 1:
            // Frame_Header_Descriptor: FCS flag (bits 7-6), Single_Segment (5), Content_Checksum
            // (2), Dictionary_ID flag (1-0); then Window_Descriptor, Dictionary_ID and
            // Frame_Content_Size, whose lengths it gives.
            let descriptor = field[0]
            let fcsFlag = Int(descriptor >> 6)
            let singleSegment = descriptor & 0x20 != 0
            hasChecksum = descriptor & 0x04 != 0
            let dictionaryLength = [0, 1, 2, 4][Int(descriptor & 0x03)]
            let contentSizeLength = [singleSegment ? 1 : 0, 2, 4, 8][fcsFlag]
            // At least one byte follows: a Window_Descriptor, or a content size in one byte.
            fieldLength = 1 + (singleSegment ? 0 : 1) + dictionaryLength + contentSizeLength
        case .frameHeader:
            // A single-segment frame's window is its content size (the last field; with a
            // 2-byte field the size is 256 more than its value, so never 0).
            let descriptor = field[0]
            let fcsFlag = Int(descriptor >> 6)
            windowIsEmpty =
                descriptor & 0x20 != 0 && fcsFlag != 1 && field.suffix([1, 2, 4, 8][fcsFlag]).allSatisfy { $0 == 0 }
            place = .blockHeader
            startField(3)
        case .blockHeader:
            let header = littleEndian
            let last = header & 1 != 0
            let type = (header >> 1) & 3
            let size = Int(header >> 3)
            switch type {
            case 0:  // raw
                startBlock(size, last: last)
            case 1:  // RLE: one byte, repeated
                if size == 0 && windowIsEmpty {
                    // libzstd streams such a frame through a window of no bytes, and calls an
                    // RLE block of size 0 in it corrupt unless the whole frame arrives at once.
                    problem = "an RLE block of size 0 in a frame of no content near offset \(offset)"
                } else {
                    startBlock(1, last: last)
                }
            case 2:  // compressed
                if size == 0 {
                    problem =
                        "a compressed block of size 0 (it must hold at least its literals header) near offset \(offset)"
                } else {
                    startBlock(size, last: last)
                }
            default:  // reserved: libzstd refuses it
                place = .lost
            }
        case .skippableSize:
            let size = littleEndian
            if size == 0 {
                place = .magic
                startField(4)
            } else {
                place = .skippableContent(remaining: size)
            }
        case .blockContent, .checksum, .skippableContent, .lost:
            break  // no field is collected in these places
        }
    }

    private mutating func startBlock(_ size: Int, last: Bool) {
        if size == 0 {
            endBlock(last: last)
        } else {
            place = .blockContent(remaining: size, last: last)
        }
    }
}
