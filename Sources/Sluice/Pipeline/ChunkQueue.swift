/// One reusable chunk buffer: bytes `start..<end` of `storage` are in flight. A lent chunk
/// points into a source's own memory instead (never written, never freed here).
final class Chunk {
    private(set) var storage: UnsafeMutableRawBufferPointer
    let isLent: Bool
    var start = 0
    var end = 0

    init(capacity: Int) {
        storage = .allocate(byteCount: capacity, alignment: 64)
        isLent = false
    }

    /// A chunk header for bytes lent by a source.
    init(lent bytes: UnsafeRawBufferPointer) {
        storage = UnsafeMutableRawBufferPointer(mutating: bytes)
        isLent = true
        end = bytes.count
    }

    /// Points a lent chunk header at new lent bytes.
    func relend(_ bytes: UnsafeRawBufferPointer) {
        precondition(isLent, "only a lent chunk is re-pointed")
        storage = UnsafeMutableRawBufferPointer(mutating: bytes)
        start = 0
        end = bytes.count
    }

    deinit {
        if !isLent { storage.deallocate() }
    }

    var count: Int { end - start }
    var freeSpace: Int { storage.count - end }
    var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: storage[start..<end]) }
    var free: UnsafeMutableRawBufferPointer { UnsafeMutableRawBufferPointer(rebasing: storage[end...]) }

    func reset() {
        start = 0
        end = 0
    }
}

/// The bounded queue of chunks between two nodes of a pipeline (source, stages, sink): a ring
/// of at most `depth` chunks, so at most `depth × chunkSize` bytes. The last chunk may be open
/// (its producer is still filling it); only sealed chunks are handed downstream.
struct ChunkQueue {
    let depth: Int
    private var ring: [Chunk?]
    private var head = 0
    private(set) var count = 0
    private(set) var tailOpen = false
    /// The producer has delivered its last byte.
    var producerDone = false
    /// Bytes held, for the in-flight bound.
    private(set) var bytes = 0

    init(depth: Int) {
        self.depth = depth
        ring = Array(repeating: nil, count: depth)
    }

    var isEmpty: Bool { count == 0 }
    /// A sealed chunk is ready for the consumer.
    var hasReady: Bool { count > (tailOpen ? 1 : 0) }
    var front: Chunk { ring[head]! }
    private var tail: Chunk? { count == 0 ? nil : ring[(head + count - 1) % depth] }
    /// The producer can add bytes (to the open tail or a new chunk).
    var hasRoom: Bool { count < depth || (tailOpen && tail!.freeSpace > 0) }
    var isFull: Bool { !hasRoom }
    var finished: Bool { producerDone && count == 0 }

    private mutating func append(_ chunk: Chunk) {
        precondition(count < depth, "chunk queue overflow")
        ring[(head + count) % depth] = chunk
        count += 1
    }

    /// Appends a sealed chunk.
    mutating func pushSealed(_ chunk: Chunk) {
        precondition(!tailOpen, "a sealed chunk after an open one")
        append(chunk)
        bytes += chunk.count
    }

    /// The chunk the producer fills: the open tail, or `fresh()` appended as a new open tail.
    mutating func openTail(_ fresh: () -> Chunk) -> Chunk {
        if tailOpen, let tail, tail.freeSpace > 0 { return tail }
        tailOpen = false
        let chunk = fresh()
        append(chunk)
        tailOpen = true
        return chunk
    }

    /// The producer added `n` bytes to the open tail.
    mutating func produced(_ n: Int) {
        bytes += n
        if let tail, tail.freeSpace == 0 { tailOpen = false }
    }

    /// Hands the open tail downstream if it holds anything (and drops it if it is empty).
    mutating func sealTail(recycle: (Chunk) -> Void) {
        guard tailOpen, let chunk = tail else { return }
        tailOpen = false
        if chunk.count == 0 {
            ring[(head + count - 1) % depth] = nil
            count -= 1
            recycle(chunk)
        }
    }

    /// The consumer took `n` bytes from the front chunk.
    mutating func consumed(_ n: Int) {
        front.start += n
        bytes -= n
    }

    /// Removes the front chunk (fully consumed, or dropped at the end).
    mutating func popFront() -> Chunk {
        let chunk = ring[head]!
        ring[head] = nil
        bytes -= chunk.count
        head = (head + 1) % depth
        count -= 1
        if count == 0 { tailOpen = false }
        return chunk
    }
}
