@testable import Sluice
@testable import SluiceTransfer

/// Feeds a peer's bytes to a protocol machine the way a session does: shown to a
/// `FrameDecoder` in the pieces `choices` picks (each appended to what is left of the last),
/// every item handed to `item` (which returns how many bytes of a DATA piece it gave back, to be
/// shown again), a violation to `violated`; when the bytes run out, `closed` ends the session.
/// Stops as soon as `ended` says so. (Internal: the targets import this module `@testable`,
/// since the decoder's types are internal to Sluice.)
func feed(
    _ bytes: UnsafeRawBufferPointer, as direction: FrameDirection, _ choices: inout Choices, ended: () -> Bool,
    item: (FrameDecoder.Item) -> Int, violated: (String) -> Void, closed: (inout Choices) -> Void
) {
    var decoder = FrameDecoder(direction: direction)
    var buffer: [UInt8] = []
    var offset = 0
    while !ended() {
        if offset < bytes.count {
            let length = choices.pieceLength(max: bytes.count - offset)
            buffer.append(contentsOf: bytes[offset..<offset + length])
            offset += length
        }
        var stalled = false
        while !stalled && !ended() {
            let step = buffer.withUnsafeBytes { view -> (consumed: Int, violation: String?) in
                switch decoder.next(view) {
                case .needMore:
                    return (0, nil)
                case .violation(let reason):
                    return (0, reason)
                case .item(let decoded, let consumed):
                    let unused = item(decoded)
                    if unused > 0 { decoder.unread(unused) }
                    return (consumed - unused, nil)
                }
            }
            if let reason = step.violation {
                violated(reason)
                expect(ended(), "a protocol violation did not end the session")
            }
            if step.consumed == 0 { stalled = true } else { buffer.removeFirst(step.consumed) }
        }
        if offset == bytes.count && !ended() {
            closed(&choices)
            expect(ended(), "the connection ended and the session goes on")
        }
    }
}

/// The peer's view of what a machine sends: a decoder for `direction` that has seen the magic.
func peerDecoder(_ direction: FrameDirection) -> FrameDecoder {
    var decoder = FrameDecoder(direction: direction)
    _ = Wire.magic.withUnsafeBytes { decoder.next($0) }
    return decoder
}

/// Checks that `frame`, sent by `side`, is one the peer accepts and decodes whole, as itself.
func expectDecodes(_ frame: Frame, by peer: inout FrameDecoder, side: String) {
    expect(peer.direction.allows(frame.type), "the \(side) sends \(frame.type.name)")
    let bytes = frame.encoded
    let step = bytes.withUnsafeBytes { peer.next($0) }
    guard case .item(.frame(let decoded), let consumed) = step, consumed == bytes.count else {
        expect(false, "the \(side)'s \(frame.type.name) does not decode: \(step)")
        return
    }
    expect(decoded.type == frame.type, "\(frame.type.name) decodes as \(decoded.type.name)")
}
