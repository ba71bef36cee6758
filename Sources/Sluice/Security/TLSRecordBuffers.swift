/// The ciphertext a TLS connection has received and not yet processed: one contiguous buffer the
/// socket reads into (`space`/`commit`), from which records are taken whole at `start`. While
/// OpenSSL runs the handshake, the engine hands it one record at a time from here; afterwards
/// the record layer opens records where they lie.
final class TLSInputBuffer {
    let capacity: Int
    let storage: UnsafeMutableRawPointer
    /// The first byte not yet processed.
    var start = 0
    /// The end of the bytes received.
    private(set) var end = 0
    /// While set, bytes before `start` are still in use (a record opened in place and handed
    /// out in pieces): the buffer does not move its contents.
    var pinned = false
    /// The socket's end was reached: no more bytes come.
    var ended = false

    init(capacity: Int) {
        self.capacity = capacity
        storage = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
    }

    deinit { storage.deallocate() }

    /// Bytes received and not yet processed.
    var count: Int { end - start }

    /// Where the socket can write (empty when full). Unprocessed bytes that are at most one
    /// record (a partial one, usually), or that leave the tail too short for a whole record,
    /// move to the front first, so that the socket's reads stay large.
    func space() -> UnsafeMutableRawBufferPointer {
        if !pinned {
            let short = capacity - end < TLSRecordLayer.maxRecord && count <= capacity / 4
            if start == end {
                start = 0
                end = 0
            } else if start > 0 && (count <= TLSRecordLayer.maxRecord || short) {
                storage.copyMemory(from: storage + start, byteCount: count)
                end = count
                start = 0
            }
        }
        return UnsafeMutableRawBufferPointer(start: storage + end, count: capacity - end)
    }

    /// Records that `n` bytes were written into `space()`.
    func commit(_ n: Int) {
        precondition(n >= 0 && end + n <= capacity, "TLS input commit past the buffer (internal invariant)")
        end += n
    }

    /// The byte at `offset` from `start` (which must be below `count`).
    func byte(_ offset: Int) -> UInt8 { storage.load(fromByteOffset: start + offset, as: UInt8.self) }

    /// The length of the record header's body at `start` (header bytes 3–4), once 5 bytes are in.
    var headerLength: Int? { count >= 5 ? Int(byte(3)) << 8 | Int(byte(4)) : nil }

    /// The whole length (header included) of the record at `start` if all of it is here.
    var completeRecord: Int? {
        guard let length = headerLength, count >= 5 + length else { return nil }
        return 5 + length
    }
}

/// The ciphertext waiting for the socket, in at most two contiguous regions (a bip buffer):
/// records are written whole where they fit, the older region is sent first, and nothing is
/// moved, whatever part of it the socket takes.
final class TLSOutputBuffer {
    let capacity: Int
    private let storage: UnsafeMutableRawPointer
    /// The region sent first.
    private var aStart = 0
    private var aEnd = 0
    /// The region at the front, filled once the tail is too short (`bEnd` > 0).
    private var bEnd = 0
    private var wrapped = false

    init(capacity: Int) {
        self.capacity = capacity
        storage = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
    }

    deinit { storage.deallocate() }

    /// Bytes waiting to be sent.
    var pending: Int { aEnd - aStart + bEnd }

    /// Where `n` bytes can be written contiguously (then `commit(n)`), or nil.
    func reserve(_ n: Int) -> UnsafeMutableRawPointer? {
        if wrapped { return bEnd + n <= aStart ? storage + bEnd : nil }
        if aEnd + n <= capacity { return storage + aEnd }
        if n <= aStart {
            wrapped = true
            return storage
        }
        return nil
    }

    /// Records that `n` bytes were written where `reserve` said.
    func commit(_ n: Int) {
        if wrapped { bEnd += n } else { aEnd += n }
    }

    /// Copies `bytes` in whole; false when they do not fit.
    func append(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return true }
        guard let target = reserve(bytes.count) else { return false }
        target.copyMemory(from: base, byteCount: bytes.count)
        commit(bytes.count)
        return true
    }

    /// The bytes to send next (a contiguous part of them).
    func readable() -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: storage + aStart, count: aEnd - aStart)
    }

    /// Records that `n` bytes of `readable()` were sent.
    func consume(_ n: Int) {
        precondition(n >= 0 && n <= aEnd - aStart, "TLS output consume past the buffer (internal invariant)")
        aStart += n
        guard aStart == aEnd else { return }
        if wrapped {
            aStart = 0
            aEnd = bEnd
            bEnd = 0
            wrapped = false
        } else {
            aStart = 0
            aEnd = 0
        }
    }
}
