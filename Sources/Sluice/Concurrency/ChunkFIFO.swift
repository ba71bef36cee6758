/// A first-in-first-out queue of byte chunks with a byte count, for the async faces' buffers.
/// A taken chunk is released at once (the queue keeps no reference to it: a consumer that drops
/// it frees it, and the reader can reuse its array), and the storage is compacted as it drains,
/// so what the queue holds is bounded by what is in it.
struct ChunkFIFO {
    private var chunks: [[UInt8]] = []
    private var head = 0
    /// Bytes in the queued chunks.
    private(set) var bytes = 0

    var isEmpty: Bool { head == chunks.count }

    /// The oldest chunk, still queued.
    var first: [UInt8]? { isEmpty ? nil : chunks[head] }

    mutating func append(_ chunk: [UInt8]) {
        chunks.append(chunk)
        bytes += chunk.count
    }

    /// Takes the oldest chunk out.
    mutating func popFirst() -> [UInt8]? {
        guard !isEmpty else { return nil }
        let chunk = chunks[head]
        chunks[head] = []
        head += 1
        bytes -= chunk.count
        if head == chunks.count {
            chunks.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 16 && head * 2 >= chunks.count {
            chunks.removeFirst(head)
            head = 0
        }
        return chunk
    }

    /// `n` bytes of the oldest chunk were consumed without taking it out (a partial write).
    mutating func consumed(_ n: Int) { bytes -= n }

    /// Drops everything.
    mutating func removeAll() {
        chunks = []
        head = 0
        bytes = 0
    }
}
