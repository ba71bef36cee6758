import Sluice

/// Frames written in place into an outbound buffer (the bulk of a transfer: DATA, HOLE): the
/// payload is produced straight into the buffer, after room for the header, which is laid out
/// before it once the payload's length is known.
extension ByteBuffer {
    /// Where the next frame's payload goes, at most `count` bytes, after room for its header.
    /// The caller reserved room for both (`reserve`).
    func framePayload(_ count: Int) -> UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(rebasing: tail[Wire.frameHeaderSize..<Wire.frameHeaderSize + count])
    }

    /// Ends the frame whose first `length` payload bytes were written into `framePayload`: its
    /// header goes before them (`Wire.putFrameHeader`), and the frame becomes readable.
    func commitFrame(_ type: Wire.MessageType, length: Int) {
        Wire.putFrameHeader(type, length: length, into: tail)
        produced(Wire.frameHeaderSize + length)
    }
}
