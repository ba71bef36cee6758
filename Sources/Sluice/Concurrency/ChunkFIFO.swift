/// A first-in-first-out queue of byte chunks with a byte count, for the async faces' buffers.
/// A taken chunk is released at once (the queue keeps no reference to it: a consumer that drops
/// it frees it, and the reader can reuse its array), and the storage is compacted as it drains,
/// so what the queue holds is bounded by what is in it.
struct ChunkFIFO {
    private var chunks = FIFO<[UInt8]>()
    /// Bytes in the queued chunks.
    private(set) var bytes = 0

    var isEmpty: Bool { chunks.isEmpty }

    /// The oldest chunk, still queued.
    var first: [UInt8]? { chunks.first }

    mutating func append(_ chunk: [UInt8]) {
        chunks.append(chunk)
        bytes += chunk.count
    }

    /// Takes the oldest chunk out.
    mutating func popFirst() -> [UInt8]? {
        guard let chunk = chunks.removeFirst() else { return nil }
        bytes -= chunk.count
        return chunk
    }

    /// `n` bytes of the oldest chunk were consumed without taking it out (a partial write).
    mutating func consumed(_ n: Int) { bytes -= n }

    /// Drops everything.
    mutating func removeAll() {
        chunks = FIFO()
        bytes = 0
    }
}
