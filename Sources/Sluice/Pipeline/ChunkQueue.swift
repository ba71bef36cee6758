/// One reusable chunk buffer: bytes `start..<end` of `storage` are in flight.
final class Chunk {
    let storage: UnsafeMutableRawBufferPointer
    var start = 0
    var end = 0

    init(capacity: Int) {
        storage = .allocate(byteCount: capacity, alignment: 64)
    }

    deinit { storage.deallocate() }

    var count: Int { end - start }
    var freeSpace: Int { storage.count - end }
    var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: storage[start..<end]) }
    var free: UnsafeMutableRawBufferPointer { UnsafeMutableRawBufferPointer(rebasing: storage[end...]) }

    func reset() {
        start = 0
        end = 0
    }
}

/// The bounded queue of chunks between two nodes of a pipeline (source, stages, sink).
///
/// Holds at most `depth` chunks, so at most `depth × chunkSize` bytes. The last chunk may be
/// open (its producer is still filling it); only sealed chunks are handed downstream.
struct ChunkQueue {
    let depth: Int
    private(set) var chunks: [Chunk] = []
    private(set) var tailOpen = false
    /// The producer has delivered its last byte.
    var producerDone = false
    /// Bytes held, for the in-flight bound.
    private(set) var bytes = 0

    init(depth: Int) {
        self.depth = depth
        chunks.reserveCapacity(depth)
    }

    var isEmpty: Bool { chunks.isEmpty }
    /// A sealed chunk is ready for the consumer.
    var hasReady: Bool { chunks.count > (tailOpen ? 1 : 0) }
    var front: Chunk { chunks[0] }
    /// The producer can add bytes (to the open tail or a new chunk).
    var hasRoom: Bool { chunks.count < depth || (tailOpen && chunks[chunks.count - 1].freeSpace > 0) }
    var isFull: Bool { !hasRoom }
    var finished: Bool { producerDone && chunks.isEmpty }

    /// Appends a sealed chunk.
    mutating func pushSealed(_ chunk: Chunk) {
        precondition(!tailOpen && chunks.count < depth, "chunk queue overflow")
        chunks.append(chunk)
        bytes += chunk.count
    }

    /// The chunk the producer fills: the open tail, or `fresh()` appended as a new open tail.
    mutating func openTail(_ fresh: () -> Chunk) -> Chunk {
        if tailOpen, let tail = chunks.last, tail.freeSpace > 0 { return tail }
        if tailOpen { tailOpen = false }
        precondition(chunks.count < depth, "chunk queue overflow")
        let chunk = fresh()
        chunks.append(chunk)
        tailOpen = true
        return chunk
    }

    /// The producer added `n` bytes to the open tail.
    mutating func produced(_ n: Int) {
        bytes += n
        if let tail = chunks.last, tail.freeSpace == 0 { tailOpen = false }
    }

    /// Hands the open tail downstream if it holds anything (and drops it if it is empty).
    mutating func sealTail(recycle: (Chunk) -> Void) {
        guard tailOpen, let tail = chunks.last else { return }
        tailOpen = false
        if tail.count == 0 {
            chunks.removeLast()
            recycle(tail)
        }
    }

    /// The consumer took `n` bytes from the front chunk.
    mutating func consumed(_ n: Int) {
        chunks[0].start += n
        bytes -= n
    }

    /// Removes the (fully consumed) front chunk.
    mutating func popFront() -> Chunk {
        bytes -= chunks[0].count
        if chunks.count == 1 { tailOpen = false }
        return chunks.removeFirst()
    }
}
