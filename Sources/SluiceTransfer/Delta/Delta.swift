import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The rsync algorithm, for a changed file the receiver has an older copy of (`send --sync`):
/// the receiver cuts its copy (the basis) into blocks and sends each block's signature, a
/// rolling weak checksum and a strong hash; the sender slides a window over its file, looks each
/// window's weak checksum up, confirms a hit with the strong hash, and sends references to the
/// blocks it found (COPY) and the bytes between them (DATA). The receiver rebuilds the file from
/// both into a temporary file and checks the whole file's digest before it replaces the old one.
enum Delta {
    /// Files of at least this many bytes are sent as a delta against the receiver's copy.
    static let minimumSize: UInt64 = 1 << 20
    /// Block lengths: rsync's rule, the square root of the basis's size rounded up to a
    /// multiple of 8, at least 700 bytes and at most 128 KiB.
    static let minimumBlock = 700
    static let maximumBlock = 128 << 10
    /// The most blocks a basis may have: a receiver's signatures of a file this large, or a
    /// sender's table of them, stay within 16 MiB (12 bytes a block).
    static let maximumBlocks: UInt64 = (16 << 20) / 12
    /// Signatures per SIGS message (6,164 bytes: a receiver's connection buffer holds one).
    static let signaturesPerMessage = 512
    /// The bytes of one signature on the wire: weak (4) and strong (8).
    static let signatureBytes = 12

    /// The block length for a basis of `size` bytes.
    static func blockSize(forBasis size: UInt64) -> Int {
        guard size > UInt64(minimumBlock * minimumBlock) else { return minimumBlock }
        var length = Int(Double(size).squareRoot().rounded(.up))
        length = (length + 7) / 8 * 8
        return min(max(length, minimumBlock), maximumBlock)
    }

    /// The number of blocks of a basis of `size` bytes cut into `blockSize` ones (the last may
    /// be shorter).
    static func blockCount(_ size: UInt64, _ blockSize: Int) -> UInt64 {
        // Without `size + blockSize - 1`, which overflows for a size a peer may claim.
        let block = UInt64(max(blockSize, 1))
        return size / block + (size % block == 0 ? 0 : 1)
    }

    /// One block's signature.
    struct Signature: Equatable, Sendable {
        var weak: UInt32
        var strong: UInt64
    }

    /// rsync's rolling checksum of `bytes`: `a` the sum of the bytes, `b` the sum of each byte
    /// times its distance from the end, both modulo 2^16; `a | b << 16`.
    static func weak(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        // `a += x; b += a` for each byte gives `b` as defined. Sixteen bytes at a time, in
        // vector lanes: `b` gains 16 × `a` and each byte times its distance from the end of the
        // sixteen, `a` their sum (2.8 times the speed of the four at a time it did before;
        // both ends compute it over every block of a delta's file).
        var a: UInt32 = 0
        var b: UInt32 = 0
        let count = bytes.count
        var i = 0
        while i + 16 <= count {
            let x = SIMD16<UInt16>(truncatingIfNeeded: bytes.loadUnaligned(fromByteOffset: i, as: SIMD16<UInt8>.self))
            // At most 16 × 255 × 16 = 65,280: the weighted sum fits the lanes' 16 bits.
            b &+= 16 &* a &+ UInt32((x &* Self.distances).wrappedSum())
            a &+= UInt32(x.wrappedSum())
            i += 16
        }
        while i < count {
            a &+= UInt32(bytes[i])
            b &+= a
            i += 1
        }
        return (a & 0xFFFF) | (b & 0xFFFF) << 16
    }

    /// Each of sixteen bytes' distance from their end, counting the last as 1 (`weak`).
    private static let distances = SIMD16<UInt16>(16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)

    /// The weak checksum of the window moved one byte on: `out` leaves, `in` enters, the window
    /// `length` bytes long.
    @inline(__always)
    static func roll(_ sum: UInt32, out: UInt8, in new: UInt8, length: Int) -> UInt32 {
        var a = sum & 0xFFFF
        var b = sum >> 16
        a = (a &- UInt32(out) &+ UInt32(new)) & 0xFFFF
        b = (b &- UInt32(truncatingIfNeeded: length) &* UInt32(out) &+ a) & 0xFFFF
        return a | b << 16
    }

    /// A 64-bit hash of `bytes` (a multiply-rotate over 8-byte words, with xxHash64's final
    /// mixing): the strong hash of a block. Not cryptographic: a collision, by chance or made,
    /// only makes the rebuilt file fail its whole-file digest, which is.
    static func strong(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        let prime1: UInt64 = 0x9E37_79B1_85EB_CA87
        let prime2: UInt64 = 0xC2B2_AE3D_27D4_EB4F
        var h: UInt64 = prime2 ^ UInt64(truncatingIfNeeded: bytes.count)
        var index = 0
        let count = bytes.count
        while index + 8 <= count {
            let word = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self))
            let mixed = h ^ (word &* prime2)
            h = (mixed << 31 | mixed >> 33) &* prime1
            index += 8
        }
        while index < count {
            h = ((h ^ UInt64(bytes[index]) &* prime1) << 11 | (h ^ UInt64(bytes[index]) &* prime1) >> 53) &* prime2
            index += 1
        }
        h ^= h >> 33
        h &*= prime2
        h ^= h >> 29
        h &*= 0x1656_67B1_9E37_79F9
        h ^= h >> 32
        return h
    }

    /// The signatures of blocks `first ..< first + count` of the file `fd` of `size` bytes, read
    /// with `pread` a few MiB at a time; nil when it cannot be read (or a read meets its end
    /// first: it is shorter than `size` now). Whole blocks within a hole of a sparse file
    /// (`nextData`) are not read: they are zeros, and all have the signature of a block of zeros.
    static func signatures(of fd: Int32, size: UInt64, blockSize: Int, first: UInt64, count: Int) -> [Signature]? {
        let perRead = max(1, (4 << 20) / blockSize)
        let pages = PageBuffer(byteCount: perRead * blockSize)
        defer { pages.release() }
        let buffer = pages.bytes
        var out: [Signature] = []
        out.reserveCapacity(count)
        var zeros: Signature?
        var index = first
        let end = first + UInt64(count)
        while index < end {
            let offset = index * UInt64(blockSize)
            guard offset < size else { break }
            let inHole = min((nextData(fd, from: offset, size: size) - offset) / UInt64(blockSize), end - index)
            if inHole > 0 {
                if zeros == nil {
                    let block = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<blockSize])
                    block.initializeMemory(as: UInt8.self, repeating: 0)
                    zeros = Signature(
                        weak: weak(UnsafeRawBufferPointer(block)), strong: strong(UnsafeRawBufferPointer(block)))
                }
                if let zeros { out.append(contentsOf: repeatElement(zeros, count: Int(inHole))) }
                index += inHole
                continue
            }
            let blocks = Int(min(UInt64(perRead), end - index))
            let want = Int(min(UInt64(blocks * blockSize), size - offset))
            let piece = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want])
            guard readSparse(fd, into: piece, at: offset, size: size) else {
                return nil
            }
            var start = 0
            while start < want {
                let block = UnsafeRawBufferPointer(rebasing: buffer[start..<min(want, start + blockSize)])
                out.append(Signature(weak: weak(block), strong: strong(block)))
                start += blockSize
                index += 1
            }
        }
        return out
    }

    /// Memory of its own pages (`mmap`), given back to the kernel by `release`. A job's buffer
    /// of a MiB or more from `malloc` stays, once freed, in the heap of the thread that ran the
    /// job, where other allocations then split it: a receiver's memory grew by a MiB per GiB
    /// of a delta's COPYs (24 GiB: 26 MiB with one heap, 41 MiB with a heap per thread).
    struct PageBuffer {
        let bytes: UnsafeMutableRawBufferPointer
        private let mapped: Bool

        /// Page-aligned (at least `WriteTarget.directAlignment`).
        init(byteCount: Int) {
            let pages = mmap(nil, byteCount, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
            if let pages, pages != UnsafeMutableRawPointer(bitPattern: -1) {
                (bytes, mapped) = (UnsafeMutableRawBufferPointer(start: pages, count: byteCount), true)
            } else {
                (bytes, mapped) = (.allocate(byteCount: byteCount, alignment: 4096), false)
            }
        }

        func release() {
            if mapped { munmap(bytes.baseAddress, bytes.count) } else { bytes.deallocate() }
        }
    }

    /// A MiB of zeros, never written, for hashing the zeros of holes: its pages read as the
    /// kernel's zero page, which no process's memory counts.
    static let zeros = UncheckedBox(UnsafeRawBufferPointer(PageBuffer(byteCount: 1 << 20).bytes))

    /// `SEEK_DATA` and `SEEK_HOLE` (Linux's 3 and 4; Glibc's macros need `_GNU_SOURCE`).
    static let (seekData, seekHole): (Int32, Int32) = (3, 4)

    /// The first offset at or after `offset` (below `size`) where the file `fd` may hold data:
    /// `offset` itself unless the file system says a hole is there (`SEEK_DATA`), `size` when
    /// only a hole follows. Bytes before it read as zeros. It moves the descriptor's file
    /// offset, which `pread` does not use: jobs reading the same descriptor may ask at once.
    static func nextData(_ fd: Int32, from offset: UInt64, size: UInt64) -> UInt64 {
        guard offset < size, let at = fileOffset(offset) else { return offset }
        let found = lseek(fd, at, seekData)
        if found >= 0 { return min(max(UInt64(found), offset), size) }
        // ENXIO: no data from `offset` to the end; anything else (no SEEK_DATA): data, maybe.
        return errno == ENXIO ? size : offset
    }

    /// The first offset after `offset` (which holds data) where a hole starts, or `size`.
    static func nextHole(_ fd: Int32, from offset: UInt64, size: UInt64) -> UInt64 {
        guard offset < size, let at = fileOffset(offset) else { return offset }
        let found = lseek(fd, at, seekHole)
        return found > at ? min(UInt64(found), size) : size
    }

    /// `preadFully` of the file `fd` of `size` bytes, where what `nextData` says is a hole is
    /// zeroed, not read: each page of a hole read costs the kernel a zeroed page in the page
    /// cache (3 s of system time per GiB of holes on the test VM, the whole of a sparse
    /// file's delta).
    static func readSparse(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64, size: UInt64)
        -> Bool
    {
        let end = offset + UInt64(buffer.count)
        var at = offset
        while at < end {
            let data = min(nextData(fd, from: at, size: size), end)
            let stop = data > at ? data : at < size ? min(nextHole(fd, from: at, size: size), end) : end
            let piece = UnsafeMutableRawBufferPointer(rebasing: buffer[Int(at - offset)..<Int(stop - offset)])
            if data > at {
                piece.initializeMemory(as: UInt8.self, repeating: 0)
            } else if !preadFully(fd, into: piece, at: at) {
                return false
            }
            at = stop
        }
        return true
    }
}

/// What the sender sends of a file as a delta: bytes of its own, or blocks of the basis.
enum DeltaOp: Equatable, Sendable {
    /// Bytes `offset ..< offset + length` of the sender's file, as DATA.
    case literal(offset: UInt64, length: UInt64)
    /// Blocks `index ..< index + count` of the basis, as COPY.
    case copy(index: UInt64, count: UInt32)
}

/// The receiver's signatures as the sender keeps them: by weak checksum.
struct DeltaBasis: Sendable {
    let blockSize: Int
    let size: UInt64
    /// Block indices by weak checksum, and each block's strong hash.
    private(set) var byWeak: [UInt32: [UInt32]] = [:]
    private(set) var strong: [UInt64] = []
    /// One bit per value of a weak checksum's 20-bit tag: most windows miss, and a bit says so
    /// without hashing the checksum for the dictionary (rsync keeps a 16-bit tag table).
    private var tags = [UInt64](repeating: 0, count: (1 << 20) / 64)

    @inline(__always)
    private static func tag(_ weak: UInt32) -> Int { Int((weak ^ (weak >> 12) &* 0x9E37) & 0xF_FFFF) }

    init(blockSize: Int, size: UInt64) {
        self.blockSize = blockSize
        self.size = size
    }

    /// Blocks the basis has.
    var blockCount: UInt64 { Delta.blockCount(size, blockSize) }
    /// Signatures taken so far (the next block's index).
    var received: UInt64 { UInt64(strong.count) }

    /// Whether `batch` (SIGS from the receiver) holds the next signatures of this basis: of
    /// its size and the block size that size has, from the next block on, within its blocks,
    /// and of a basis of no more than `Delta.maximumBlocks`. Checked before `add`: a receiver's
    /// numbers, whatever they are, then only describe a basis that the sender can hold.
    func takes(_ batch: SignatureBatch) -> Bool {
        batch.blockSize == blockSize && blockSize == Delta.blockSize(forBasis: size) && batch.size == size
            && batch.first == received && blockCount <= Delta.maximumBlocks
            && UInt64(batch.signatures.count) <= blockCount - received
    }

    /// Takes the next signatures, in order. A last block shorter than the others is not looked
    /// up (a window of the full length cannot be it).
    mutating func add(_ signatures: [Delta.Signature]) {
        for signature in signatures {
            let index = UInt64(strong.count)
            strong.append(signature.strong)
            let short = (index + 1) * UInt64(blockSize) > size
            if !short {
                byWeak[signature.weak, default: []].append(UInt32(truncatingIfNeeded: index))
                let tag = Self.tag(signature.weak)
                tags[tag >> 6] |= 1 << UInt64(tag & 63)
            }
        }
    }

    /// The block whose signature the window has, preferring `preferred` (the one after the last
    /// found, so runs of blocks stay runs).
    func find(weak: UInt32, window: UnsafeRawBufferPointer, preferred: UInt64?) -> UInt64? {
        let tag = Self.tag(weak)
        guard tags[tag >> 6] & (1 << UInt64(tag & 63)) != 0, let candidates = byWeak[weak] else { return nil }
        let hash = Delta.strong(window)
        if let preferred, preferred < received, strong[Int(preferred)] == hash,
            Self.holds(candidates, UInt32(truncatingIfNeeded: preferred))
        {
            return preferred
        }
        return candidates.first { strong[Int($0)] == hash }.map(UInt64.init)
    }

    /// Whether `candidates` (block indices, ascending as `add` appends them) holds `index`: by
    /// halves, since one weak checksum may have most of the blocks (a sparse file's holes, all
    /// zeros, 819,200 of them in 100 GiB), where a scan per window made the match quadratic.
    private static func holds(_ candidates: [UInt32], _ index: UInt32) -> Bool {
        var (low, high) = (0, candidates.count)
        while low < high {
            let middle = (low + high) / 2
            if candidates[middle] < index { low = middle + 1 } else { high = middle }
        }
        return low < candidates.count && candidates[low] == index
    }
}

/// The sender's side of the algorithm: one pass over its file against the basis's signatures,
/// giving the operations to send and the whole file's digest.
enum DeltaMatcher {
    /// The operations for file `fd` of `size` bytes against `basis`, and the file's digest;
    /// nil when the file cannot be read. Reads the file once, sequentially (its holes zeroed,
    /// not read). `emit` hears the operations settled so far as the scan goes on (each once;
    /// the rest are returned), so that they can go out while the scan runs.
    ///
    /// A delta resumed where an interrupted one stopped covers the bytes from `start` on (the
    /// receiver holds those before it): the scan starts there, against the same signatures.
    /// The digest is of the whole file when `wholeDigest` (the bytes before `start` are read
    /// and hashed first), else of the bytes from `start` on (`held-sha256`).
    static func match(
        fd: Int32, size: UInt64, from start: UInt64 = 0, wholeDigest: Bool = true, basis: DeltaBasis,
        digest algorithm: TransferDigest, emit: ([DeltaOp]) -> Void = { _ in }
    ) -> ([DeltaOp], [UInt8])? {
        let digest = FileDigest(algorithm)
        let blockSize = basis.blockSize
        let chunk = max(4 << 20, 4 * blockSize)
        let start = min(start, size)
        // The file is read straight into the window's buffer (not through a scratch buffer
        // appended to it: a copy of every byte).
        let buffer = ScanBuffer(capacity: chunk + blockSize)
        var bufferStart = start  // the file offset of buffer[0]
        var readTo = start  // bytes read (and hashed) so far
        var ops: [DeltaOp] = []
        var literalStart = start
        var position = start  // the window's start
        var sum: UInt32 = 0
        var sumValid = false
        var preferred: UInt64?
        if wholeDigest {
            guard digest.update(readingFrom: fd, to: start, sparseSize: size) else { return nil }
        }

        /// Reads more so the buffer holds `through` (a file offset) if the file has it.
        func fill(through end: UInt64) -> Bool {
            while readTo < min(end, size) {
                let want = Int(min(UInt64(chunk), size - readTo))
                // Bytes before the window are not needed again: literals are read at sending.
                let keepFrom = Int(position - bufferStart)
                if keepFrom > 0 {
                    buffer.removeFirst(keepFrom)
                    bufferStart = position
                }
                let target = buffer.space(for: want)
                guard Delta.readSparse(fd, into: target, at: readTo, size: size) else { return false }
                digest.update(UnsafeRawBufferPointer(target))
                buffer.added(want)
                readTo += UInt64(want)
            }
            return true
        }

        func addLiteral(upTo end: UInt64) {
            guard end > literalStart else { return }
            if case .literal(let offset, let length)? = ops.last, offset + length == literalStart {
                ops[ops.count - 1] = .literal(offset: offset, length: length + end - literalStart)
            } else {
                ops.append(.literal(offset: literalStart, length: end - literalStart))
            }
        }

        func addCopy(_ index: UInt64) {
            if case .copy(let first, let count)? = ops.last, first + UInt64(count) == index, count < UInt32.max {
                ops[ops.count - 1] = .copy(index: first, count: count + 1)
            } else {
                ops.append(.copy(index: index, count: 1))
            }
        }

        let bs = UInt64(blockSize)
        while position + bs <= size {
            // As much as a chunk past the window is buffered; the scan runs through it in one go.
            guard fill(through: position + bs + UInt64(chunk) / 2) else { return nil }
            let bufferEnd = bufferStart + UInt64(buffer.count)
            position = { (bytes: UnsafeRawBufferPointer) -> UInt64 in
                var at = position
                while at + bs <= bufferEnd {
                    let start = Int(at - bufferStart)
                    let window = UnsafeRawBufferPointer(rebasing: bytes[start..<start + blockSize])
                    if !sumValid {
                        sum = Delta.weak(window)
                        sumValid = true
                    }
                    if let index = basis.find(weak: sum, window: window, preferred: preferred) {
                        addLiteral(upTo: at)
                        addCopy(index)
                        at += bs
                        literalStart = at
                        preferred = index + 1
                        sumValid = false
                        continue
                    }
                    preferred = nil
                    // The window moves a byte on, while the byte it takes in is buffered.
                    guard at + bs < bufferEnd else { break }
                    sum = Delta.roll(sum, out: bytes[start], in: bytes[start + blockSize], length: blockSize)
                    at += 1
                }
                return at
            }(buffer.bytes)
            // The end of the file within a block of the window: the rest is literal.
            if position + bs > size || (position + bs == bufferEnd && bufferEnd == size) { break }
            // All but the last operation are settled (the last may still grow).
            if ops.count > 1 {
                emit(Array(ops.dropLast()))
                ops.removeFirst(ops.count - 1)
            }
        }
        guard fill(through: size) else { return nil }
        addLiteral(upTo: size)
        return (ops, digest.finalize())
    }
}

/// The bytes a delta's scan holds (`DeltaMatcher.match`): the window and what was read past it,
/// read into place; the bytes before the window are dropped as it moves on. Grows (as an array
/// would) should it need more than it was made with.
final class ScanBuffer {
    private var storage: UnsafeMutableRawBufferPointer
    /// Bytes held, from the start of `storage`.
    private(set) var count = 0

    init(capacity: Int) {
        storage = UnsafeMutableRawBufferPointer.allocate(byteCount: max(capacity, 1), alignment: 64)
    }

    deinit { storage.deallocate() }

    /// The bytes held.
    var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: storage[0..<count]) }

    /// Drops the first `n` bytes held (all of them, if fewer).
    func removeFirst(_ n: Int) {
        let n = min(n, count)
        guard n > 0, let base = storage.baseAddress else { return }
        if count > n { base.copyMemory(from: base + n, byteCount: count - n) }
        count -= n
    }

    /// Room for `n` more bytes after those held, to be filled and then `added`.
    func space(for n: Int) -> UnsafeMutableRawBufferPointer {
        if count + n > storage.count {
            let larger = UnsafeMutableRawBufferPointer.allocate(
                byteCount: max(count + n, 2 * storage.count), alignment: 64)
            larger.copyMemory(from: bytes)
            storage.deallocate()
            storage = larger
        }
        return UnsafeMutableRawBufferPointer(rebasing: storage[count..<count + n])
    }

    /// The `n` bytes put in `space(for:)` are held now.
    func added(_ n: Int) {
        count += n
    }
}
