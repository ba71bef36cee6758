// libFuzzer target: the transfer protocol's frame codec (`FrameDecoder`, both directions).
// Arbitrary bytes in arbitrary pieces must give frames or one clean protocol violation, never
// a crash; the items must not depend on how the bytes were split (compared with decoding the
// whole input at once); DATA pieces are never empty and lie inside the bytes shown; giving back
// part of a DATA piece (as the receiver does when its hasher is full) loses nothing; and a
// decoded header or number re-encodes to the same frame.
import FuzzDriver
import FuzzSupport

@testable import Sluice
@testable import SluiceTransfer

/// What a decoder made of a byte stream, DATA pieces joined per frame.
enum Event: Equatable {
    case magic
    case frame(Frame)
    case data([UInt8])
    case batchEnd
    case violation(String)
}

func decode(_ bytes: UnsafeRawBufferPointer, _ direction: FrameDirection, _ choices: inout Choices?) -> [Event] {
    var decoder = FrameDecoder(direction: direction)
    var events: [Event] = []
    var data: [UInt8] = []
    var buffer: [UInt8] = []
    var offset = 0
    while true {
        // Show the decoder one more piece of the input (all of it without choices).
        var length = bytes.count - offset
        if var c = choices, length > 0 {
            length = c.pieceLength(max: length)
            choices = c
        }
        buffer.append(contentsOf: bytes[offset..<offset + length])
        offset += length
        var stalled = false
        while !stalled {
            let step = buffer.withUnsafeBytes { view in
                let step = decoder.next(view)
                if case .item(.data(let piece, _), let consumed) = step {
                    // The piece is the tail of what was consumed, inside the bytes shown.
                    expect(!piece.isEmpty, "an empty DATA piece")
                    let base = view.baseAddress.map { UnsafeRawPointer($0) }
                    expect(
                        piece.baseAddress == base.map { $0 + consumed - piece.count },
                        "a DATA piece that is not the end of the bytes consumed")
                }
                return step
            }
            switch step {
            case .needMore:
                stalled = true
            case .violation(let reason):
                events.append(.violation(reason))
                let again = buffer.withUnsafeBytes { decoder.next($0) }
                expect(again != .needMore && !isItem(again), "the decoder went on after a violation")
                return events
            case .item(let item, let consumed):
                // Only the end of a BATCH takes no bytes (it says where the last message ended).
                expect(
                    (consumed > 0 || item == .batchEnd) && consumed <= buffer.count,
                    "consumed \(consumed) of \(buffer.count)")
                switch item {
                case .batchEnd:
                    expect(consumed == 0, "the end of a BATCH consumed \(consumed) bytes")
                    events.append(.batchEnd)
                case .frame(.batch(let length)):
                    // Its header only: the messages it holds follow as items of their own.
                    expect(consumed == Wire.frameHeaderSize, "BATCH consumed more than its header")
                    expect(length == payloadLength(buffer), "BATCH's length is not its header's")
                    events.append(.frame(.batch(length: length)))
                    buffer.removeFirst(consumed)
                case .magic:
                    events.append(.magic)
                    buffer.removeFirst(consumed)
                case .frame(let frame):
                    expect(direction.allows(frame.type), "\(frame.type.name) decoded against its direction")
                    expect(consumed == Wire.frameHeaderSize + payloadLength(buffer), "consumed is not the frame")
                    roundTrip(frame, direction)
                    events.append(.frame(frame))
                    buffer.removeFirst(consumed)
                case .data(let piece, let endsFrame):
                    // Sometimes take only part of the piece and give the rest back.
                    var kept = piece.count
                    if var c = choices, piece.count > 1, c.below(4) == 0 {
                        kept = 1 + c.below(piece.count - 1)
                        choices = c
                    }
                    data.append(contentsOf: piece[0..<kept])
                    if kept < piece.count {
                        decoder.unread(piece.count - kept)
                        expect(decoder.inData, "unread bytes of a DATA frame but not in DATA")
                        buffer.removeFirst(consumed - (piece.count - kept))
                    } else {
                        buffer.removeFirst(consumed)
                        if endsFrame {
                            expect(!decoder.inData, "the last piece of a DATA frame, still in DATA")
                            events.append(.data(data))
                            data = []
                        }
                    }
                }
            }
        }
        if offset == bytes.count { break }
    }
    expect(buffer.count < bytes.count + 1, "the decoder kept more than it was given")
    if !data.isEmpty { events.append(.data(data)) }
    return events
}

func isItem(_ step: FrameDecoder.Step) -> Bool {
    if case .item = step { return true }
    return false
}

func payloadLength(_ header: [UInt8]) -> Int {
    Int(header[1]) << 24 | Int(header[2]) << 16 | Int(header[3]) << 8 | Int(header[4])
}

/// A decoded header, size, offset or digest must come back unchanged through the encoder.
/// (Text is sanitized on the way in (`PeerText`), so only its encoding is checked.)
func roundTrip(_ frame: Frame, _ direction: FrameDirection) {
    switch frame {
    case .hello, .batch:
        // Nobody re-encodes a peer's HELLO (capability names are not validated text); a BATCH
        // is a header alone, checked where it is decoded.
        return
    case .file, .directory, .end, .bye, .accept, .stored, .abort, .refused, .failed, .error, .join, .range, .rangeEnd,
        .joined, .held, .link, .hole, .xattr, .owner, .check, .have, .prune, .gone, .signatures, .copy, .token,
        .special, .move, .remove:
        break
    }
    var decoder = FrameDecoder(direction: direction)
    let stream = Wire.magic + frame.encoded
    let steps = stream.withUnsafeBytes { view -> [FrameDecoder.Step] in
        var steps: [FrameDecoder.Step] = []
        var rest = view
        while !rest.isEmpty {
            let step = decoder.next(rest)
            steps.append(step)
            guard case .item(_, let consumed) = step else { break }
            rest = UnsafeRawBufferPointer(rebasing: rest[consumed...])
        }
        return steps
    }
    expect(
        steps.count == 2 && steps[0] == .item(.magic, consumed: Wire.magic.count),
        "re-encoded \(frame.type.name) does not decode")
    guard case .item(.frame(let again), let consumed) = steps[1], consumed == stream.count - Wire.magic.count else {
        expect(false, "re-encoded \(frame.type.name) does not decode to one frame: \(steps)")
        return
    }
    switch frame {
    case .file, .directory, .end, .bye, .accept, .stored, .join, .range, .rangeEnd, .joined, .held, .link, .hole,
        .xattr, .owner, .check, .have, .prune, .gone, .signatures, .copy, .token, .special, .batch, .move, .remove:
        expect(again == frame, "\(frame) re-encodes as \(again)")
    case .hello, .abort, .refused, .failed, .error:
        expect(again.type == frame.type, "\(frame) re-encodes as \(again)")
    }
}

/// One fuzz input (libFuzzer's `LLVMFuzzerTestOneInput`).
func fuzzFrames(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    guard let (first, bytes) = FuzzInput.split(start, count) else { return 0 }
    var seed = first
    let direction: FrameDirection = seed.below(4) == 0 ? .toSender : .toReceiver
    var whole: Choices? = nil
    var choices: Choices? = seed
    let reference = decode(bytes, direction, &whole)
    let pieces = decode(bytes, direction, &choices)
    expect(reference == pieces, "split decoding differs:\n whole \(reference)\n split \(pieces)")
    return 0
}

runLibFuzzer(fuzzFrames)
