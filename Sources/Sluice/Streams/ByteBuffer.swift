/// A fixed-capacity byte buffer with a read and a write index: what has been received and not
/// yet parsed, or what is to be sent and not yet written.
///
/// A class with one owner (a connection's two buffers, a sender's uncompressed input): its
/// memory is freed when the owner lets it go, never by hand, and what changes it is seen by
/// everyone holding it, so no copy is ever written back.
package final class ByteBuffer {
    private(set) var storage: UnsafeMutableRawBufferPointer
    private(set) var readIndex = 0
    private(set) var writeIndex = 0
    /// Consumed bytes lent out (to a worker) and not yet returned: while any are out, nothing
    /// before the read index is overwritten — no compaction, no rewind to the start — so reads
    /// go on into the tail space only.
    package private(set) var lent = 0

    package init(capacity: Int) {
        storage = .allocate(byteCount: capacity, alignment: 16)
    }

    deinit { storage.deallocate() }

    /// Moves the unconsumed bytes into a new storage of `capacity` bytes, larger or smaller.
    /// Nothing happens while bytes are lent, or when the unconsumed bytes would not fit.
    /// No pointer into the old storage may be held across it.
    package func resize(to capacity: Int) {
        guard capacity != self.capacity, capacity > 0, lent == 0, readableBytes <= capacity else { return }
        let count = readableBytes
        let replacement = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 16)
        if count > 0 {
            replacement.baseAddress!.copyMemory(from: storage.baseAddress! + readIndex, byteCount: count)
        }
        storage.deallocate()
        storage = replacement
        readIndex = 0
        writeIndex = count
    }

    package var capacity: Int { storage.count }
    package var readableBytes: Int { writeIndex - readIndex }
    package var isEmpty: Bool { readIndex == writeIndex }
    /// Space after the write index.
    package var tailSpace: Int { capacity - writeIndex }
    /// Space after the write index once compacted.
    package var freeSpace: Int { capacity - readableBytes }

    /// The bytes not yet consumed.
    package var readable: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: storage[readIndex..<writeIndex])
    }

    /// The unconsumed bytes from `offset` on, to be rewritten in place (a frame header whose
    /// length was not known when it was appended).
    package func readable(from offset: Int) -> UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(rebasing: storage[(readIndex + offset)..<writeIndex])
    }

    /// Takes back the last `count` bytes appended (not yet consumed).
    package func dropLast(_ count: Int) {
        writeIndex -= min(count, readableBytes)
    }

    /// The space after the write index.
    package var tail: UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(rebasing: storage[writeIndex..<capacity])
    }

    /// Moves the unconsumed bytes to the start.
    func compact() {
        if readIndex == 0 || lent > 0 { return }
        let count = readableBytes
        if count > 0 {
            storage.baseAddress!.copyMemory(from: storage.baseAddress! + readIndex, byteCount: count)
        }
        readIndex = 0
        writeIndex = count
    }

    /// Makes at least `count` bytes of tail space, compacting if needed; false if it cannot.
    package func reserve(_ count: Int) -> Bool {
        if tailSpace >= count { return true }
        compact()
        return tailSpace >= count
    }

    /// Makes tail space for a read: compacts only when the bytes moved are no more than the
    /// space gained, or fewer than `partial` (the most an owner may hold of a message it needs
    /// the rest of), so that a buffer full of unparsed messages is not moved whole for each
    /// small message consumed (which cost a MiB of copying per small file received). False when
    /// there is no tail space and compacting would not pay: the owner has whole messages to
    /// parse first, and calls again once it has.
    package func reserveForRead(partial: Int) -> Bool {
        if tailSpace > 0 { return true }
        guard readableBytes <= readIndex || readableBytes < partial else { return false }
        compact()
        return tailSpace > 0
    }

    package func consume(_ count: Int) {
        precondition(count <= readableBytes, "ByteBuffer: consumed more than readable")
        readIndex += count
        if readIndex == writeIndex && lent == 0 {
            readIndex = 0
            writeIndex = 0
        }
    }

    /// Lends `piece`, bytes of this buffer about to be consumed: they stay where they are, and
    /// the buffer's memory stays alive, until the loan is given back (`LentBytes.giveBack()`).
    package func lend(_ piece: UnsafeRawBufferPointer) -> LentBytes {
        lent += 1
        return LentBytes(piece, of: self)
    }

    /// One lent piece came back; once all are back, the buffer may compact again.
    fileprivate func returned() {
        precondition(lent > 0, "ByteBuffer: returned more than lent")
        lent -= 1
        if lent == 0 && readIndex == writeIndex {
            readIndex = 0
            writeIndex = 0
        }
    }

    package func produced(_ count: Int) {
        precondition(count <= tailSpace, "ByteBuffer: produced more than the tail holds")
        writeIndex += count
    }

    /// Appends `bytes` if they fit (compacting if needed); false, with nothing appended, if not.
    @discardableResult
    package func append(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { append($0) }
    }

    /// Appends `bytes` if they fit (compacting if needed); false, with nothing appended, if not.
    @discardableResult
    package func append(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return true }
        guard reserve(bytes.count), let tail = tail.baseAddress else { return false }
        tail.copyMemory(from: base, byteCount: bytes.count)
        writeIndex += bytes.count
        return true
    }
}

/// Bytes of a `ByteBuffer` lent to a worker (which writes and hashes them): the loan holds the
/// buffer, so its memory outlives whoever owned it until the loan is given back, and while any
/// loan is out the buffer moves nothing (no compaction, no resize). The worker only reads
/// `bytes`; `giveBack()` runs once, on the owner's thread.
package final class LentBytes: @unchecked Sendable {
    package let bytes: UnsafeRawBufferPointer
    private var buffer: ByteBuffer?

    fileprivate init(_ bytes: UnsafeRawBufferPointer, of buffer: ByteBuffer) {
        self.bytes = bytes
        self.buffer = buffer
    }

    /// Ends the loan: the buffer may move these bytes again once every loan is back.
    package func giveBack() {
        buffer?.returned()
        buffer = nil
    }
}
