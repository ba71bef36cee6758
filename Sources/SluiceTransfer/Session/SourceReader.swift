import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// A chunk's worth of memory that a read job fills on a worker and the loop then takes from;
/// freed with its last owner (a job still running on a file given up holds it until it ends,
/// a connection writing it as a frame until it is written).
final class ReadBuffer: @unchecked Sendable {
    /// Room before `bytes` for a frame's header, so that a chunk read whole goes out as a
    /// frame from here (`frame`); the bytes stay 64-byte aligned after it.
    static let headroom = 64
    private let storage: UnsafeMutableRawBufferPointer
    /// Where reads go: the chunk.
    let bytes: UnsafeMutableRawBufferPointer

    init(capacity: Int) {
        storage = .allocate(byteCount: Self.headroom + max(1, capacity), alignment: 64)
        bytes = UnsafeMutableRawBufferPointer(rebasing: storage[Self.headroom...])
    }

    /// The first `count` bytes of the chunk as a frame of `type`: its header written into the
    /// room before them, the whole frame returned.
    func frame(_ type: Wire.MessageType, count: Int) -> UnsafeRawBufferPointer {
        let start = Self.headroom - Wire.frameHeaderSize
        let whole = UnsafeMutableRawBufferPointer(rebasing: storage[start..<Self.headroom + count])
        Wire.putFrameHeader(type, length: count, into: whole)
        return UnsafeRawBufferPointer(whole)
    }

    deinit { storage.deallocate() }
}

/// A sender's spare read buffers, used again file after file. Loop thread only.
final class ReadBufferStock {
    let capacity: Int
    private let keep: Int
    private var free: [ReadBuffer] = []

    /// Buffers of `capacity` bytes (the chunk size); at most `keep` kept spare.
    init(capacity: Int, keep: Int) {
        self.capacity = capacity
        self.keep = keep
    }

    func take() -> ReadBuffer { free.popLast() ?? ReadBuffer(capacity: capacity) }

    func give(_ buffer: ReadBuffer) {
        if free.count < keep { free.append(buffer) }
    }
}

/// What one read job found.
enum ReadPiece: Sendable {
    /// Bytes at the start of the job's buffer; `last` when they end the file. `changed`: for
    /// a file read whole by this one job, whether it changed since it was opened (checked
    /// right after the read, as its frame goes out at once: no second job for it).
    case data(Int, last: Bool, changed: Bool? = nil)
    /// A hole of this many bytes (a sparse file's).
    case hole(UInt64)
    /// Nothing more: the file's end.
    case end
    case failed(String)
}

/// Where a file being sent is read next, and the reads themselves (`pread`, and `lseek` for
/// a sparse file's holes): touched only by its read jobs, which run one at a time and in
/// order on the sender's read lane (`SerialLane`), never on the loop.
final class ReadCursor: @unchecked Sendable {
    private let fd: Int32
    private let path: String
    private var position: UInt64
    private let end: UInt64
    private let sparse: Bool
    /// The data run being read (sparse files) ends here.
    private var dataEnd: UInt64 = 0
    /// The size and mtime at open, for a whole file: whether it changed is checked at its end.
    private let opened: (size: UInt64, mtime: timespec)?
    private var failure: String?
    private var reads = 0
    /// The file's digest, updated with each read's bytes as they are read (see `init`).
    private let digest: FileDigest?

    /// With `digest` (XXH3-128, of a file read whole and in order: not sparse, no range, no
    /// delta), each read's bytes are hashed here, on the read lane, right after they are read
    /// (in pieces of `hashPiece`, read and hashed in turn): the loop thread, which seals and
    /// sends and so bounds a connection's rate, no longer hashes them (13–20 % of a sender's
    /// samples when it did; Benchmarks/RESULTS.md, 2026-12-07). The reads run in order, one at
    /// a time, so the digest sees the file's bytes in order; the loop finalizes it after the
    /// last read came back.
    init(
        fd: Int32, path: String, from start: UInt64, to end: UInt64, sparse: Bool, opened: (UInt64, timespec)?,
        digest: FileDigest? = nil
    ) {
        self.fd = fd
        self.path = path
        position = start
        self.end = end
        self.sparse = sparse
        self.opened = opened
        self.digest = sparse ? nil : digest
    }

    /// Whether the reads hash what they read (`init`'s `digest`).
    var hashes: Bool { digest != nil }

    /// 256 KiB: each piece is hashed while in the core's cache (half of a Zen 3 core's L2).
    static let hashPiece = 256 << 10

    /// Reads the next bytes from where the last read stopped (a chunk at most), or finds the
    /// hole there.
    func next(into buffer: ReadBuffer) -> ReadPiece {
        if let failure { return .failed(failure) }
        guard position < end else { return .end }
        let hole = holeHere()
        if hole > 0 {
            position += hole
            return .hole(hole)
        }
        let limit = sparse ? min(end, dataEnd) : end
        let want = Int(min(UInt64(buffer.bytes.count), limit - position))
        let result = digest.map { readHashing(want, into: buffer, $0) } ?? readOnce(want, into: buffer, at: 0)
        switch result {
        case .success(0):
            return failed("read \(quoted(path)): the file shrank while being sent")
        case .success(let n):
            position += UInt64(n)
            reads += 1
            let last = position >= end
            return .data(n, last: last, changed: last && reads == 1 ? changedSinceOpened() : nil)
        case .failure(let error):
            return failed(error.description)
        }
    }

    /// One `pread` of up to `count` bytes at `position + skip` into the buffer from `skip` on.
    private func readOnce(_ count: Int, into buffer: ReadBuffer, at skip: Int) -> Result<Int, SluiceError> {
        let at = off_t(clamping: position + UInt64(skip))
        return Result { () throws(SluiceError) in
            try syscallValue("read", path) { pread(fd, buffer.bytes.baseAddress.map { $0 + skip }, count, at) }
        }
    }

    /// Reads up to `count` bytes in pieces of `hashPiece`, each hashed right after its read;
    /// stops at a short read (the caller reads on from there), or at a failure, which counts
    /// only when nothing was read before it (the next read meets it again).
    private func readHashing(_ count: Int, into buffer: ReadBuffer, _ digest: FileDigest) -> Result<Int, SluiceError> {
        var got = 0
        while got < count {
            let asked = min(Self.hashPiece, count - got)
            switch readOnce(asked, into: buffer, at: got) {
            case .success(let n):
                digest.update(UnsafeRawBufferPointer(rebasing: buffer.bytes[got..<got + n]))
                got += n
                if n < asked { return .success(got) }
            case .failure(let error):
                return got > 0 ? .success(got) : .failure(error)
            }
        }
        return .success(got)
    }

    /// Reads `count` bytes at `offset` (a delta's literal bytes): all of them, or a failure.
    func read(at offset: UInt64, count: Int, into buffer: ReadBuffer) -> ReadPiece {
        if let failure { return .failed(failure) }
        let target = UnsafeMutableRawBufferPointer(rebasing: buffer.bytes[0..<min(count, buffer.bytes.count)])
        guard preadFully(fd, into: target, at: offset) else {
            return failed("read \(quoted(path)): the file shrank while being sent")
        }
        return .data(target.count, last: false)
    }

    private func failed(_ reason: String) -> ReadPiece {
        failure = reason
        return .failed(reason)
    }

    /// A whole file written to while it was sent is stored as read: whether its mtime or size
    /// is not what it was at open now (then the sender warns, as tar does).
    func changedSinceOpened() -> Bool {
        guard let opened else { return false }
        return Self.changed(fd, since: opened)
    }

    /// Whether the file open as `fd` has another mtime or size now than `opened` (false when
    /// `fstat` fails: its reads say why, if anything is wrong).
    static func changed(_ fd: Int32, since opened: (size: UInt64, mtime: timespec)) -> Bool {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return false }
        let sameTime = st.st_mtim.tv_sec == opened.mtime.tv_sec && st.st_mtim.tv_nsec == opened.mtime.tv_nsec
        return !sameTime || UInt64(st.st_size) != opened.size
    }

    /// For a sparse file: the length of the hole at `position` (0 in data), finding where the
    /// data run from there ends (`SEEK_DATA`, `SEEK_HOLE`). Where the file system cannot say,
    /// the rest is data.
    private func holeHere() -> UInt64 {
        guard sparse, position >= dataEnd else { return 0 }
        let size = end
        // SEEK_DATA and SEEK_HOLE (Linux's 3 and 4; Glibc's macros need _GNU_SOURCE).
        var data = lseek(fd, off_t(clamping: position), 3)
        if data < 0 {
            guard errno == ENXIO else {
                dataEnd = size
                return 0
            }
            data = off_t(clamping: size)
        }
        let start = max(position, min(UInt64(data), size))
        if start < size {
            let hole = lseek(fd, off_t(clamping: start), 4)
            dataEnd = hole < 0 ? size : max(start, min(UInt64(hole), size))
            if dataEnd == start { dataEnd = size }
        } else {
            dataEnd = size
        }
        return start - position
    }
}

/// Reads a file being sent ahead of its frames, on workers: a fixed number of chunk-sized
/// reads (`depth`) in flight or waiting to be taken, run in order on the sender's read lane,
/// so that a slow disk (or a file whose reads block) holds up this file alone and never the
/// loop, and memory stays within `depth` chunks whatever the file's size. The loop hands out
/// the jobs and takes the filled buffers, in order (`take`). Loop thread only.
final class SourceReader {
    /// What `take` found.
    enum Taken {
        case bytes(Int)
        case hole(UInt64)
        case end
        /// Nothing read yet: `onPiece` calls when something is.
        case wait
        case failed(String)
    }

    private let lane: SerialLane
    private let loop: EventLoop
    private let cursor: ReadCursor
    private let stock: ReadBufferStock
    private let depth: Int
    /// For a delta: the next literal piece to read (offset, count); nil while none is known.
    var plan: (() -> (UInt64, Int)?)?
    /// Called on the loop as a read comes back.
    var onPiece: (() -> Void)?
    /// Read and not yet taken, in order; a hole's or an end's buffer is nil.
    private var ready: [(buffer: ReadBuffer?, piece: ReadPiece)] = []
    /// Bytes of the first piece already taken.
    private var taken = 0
    private var inFlight = 0
    /// Bytes not yet asked for, when the reads of the file are known to be whole chunks up to
    /// its end (not sparse): the last read then says the end, and none is asked past it.
    private var unrequested: UInt64?
    private var submitted = 0
    /// An end or a failure was read: nothing more is asked.
    private var finished = false
    private var closed = false
    private var waitingForRoom = false
    /// For a file read whole by its first read: whether it changed since it was opened.
    private(set) var changedAtEnd: Bool?
    /// The reads hash the file's bytes as they read them (`ReadCursor.init`): the taker does not.
    var hashes: Bool { cursor.hashes }

    /// The reads of `cursor`'s file, `depth` at most at once, into `stock`'s buffers.
    init(
        cursor: ReadCursor, lane: SerialLane, loop: EventLoop, stock: ReadBufferStock, depth: Int,
        bytesToEnd: UInt64?
    ) {
        self.cursor = cursor
        self.lane = lane
        self.loop = loop
        self.stock = stock
        self.depth = max(1, depth)
        unrequested = bytesToEnd
    }

    /// Hands out reads while fewer than `depth` are in flight or waiting, and the pool has room
    /// (else once it has: backpressure).
    func fill() {
        loop.preconditionInLoop("SourceReader.fill")
        while !closed, !finished, inFlight + ready.count < depth {
            if let rest = unrequested, rest == 0, submitted > 0 { return }
            guard lane.workers.hasRoom else {
                if !waitingForRoom {
                    waitingForRoom = true
                    lane.workers.whenRoom(on: loop) { [weak self] in
                        self?.waitingForRoom = false
                        self?.fill()
                    }
                }
                return
            }
            var planned: (UInt64, Int)?
            if let plan {
                guard let next = plan() else { return }
                planned = next
            }
            let request = planned
            if let rest = unrequested { unrequested = rest - min(rest, UInt64(stock.capacity)) }
            let (buffer, cursor) = (stock.take(), self.cursor)
            inFlight += 1
            submitted += 1
            lane.submit(
                {
                    if let (offset, count) = request { return cursor.read(at: offset, count: count, into: buffer) }
                    return cursor.next(into: buffer)
                }, completingOn: loop
            ) { [self] piece in
                inFlight -= 1
                arrived(buffer, piece)
            }
        }
    }

    private func arrived(_ buffer: ReadBuffer, _ piece: ReadPiece) {
        guard !closed else {
            stock.give(buffer)
            return
        }
        switch piece {
        case .data(let count, let last, let changed):
            if last { changedAtEnd = changed }
            ready.append((buffer, piece))
            if !last && count < stock.capacity && plan == nil {
                // A short read: the reads are no longer whole chunks, so ask on until the end.
                unrequested = nil
            }
            if last {
                finished = true
                ready.append((nil, .end))
            }
        case .hole:
            stock.give(buffer)
            ready.append((nil, piece))
        case .end, .failed:
            stock.give(buffer)
            guard !finished else { break }  // a read asked past the end: the end is queued
            finished = true
            ready.append((nil, piece))
        }
        onPiece?()
    }

    /// Takes the next bytes read (as many as fit `out`), hole, end or failure, in the file's
    /// order; `.wait` while the next read has not come back.
    func take(into out: UnsafeMutableRawBufferPointer) -> Taken {
        guard let (buffer, piece) = ready.first else {
            fill()
            return .wait
        }
        switch piece {
        case .data(let count, _, _):
            guard let buffer, let source = buffer.bytes.baseAddress, let target = out.baseAddress else {
                return .failed("read: no room to take the bytes read")
            }
            let n = min(count - taken, out.count)
            target.copyMemory(from: source + taken, byteCount: n)
            taken += n
            if taken == count {
                ready.removeFirst()
                taken = 0
                stock.give(buffer)
            }
            fill()
            return .bytes(n)
        case .hole(let length):
            ready.removeFirst()
            fill()
            return .hole(length)
        case .end:
            return .end
        case .failed(let reason):
            return .failed(reason)
        }
    }

    /// Takes the next read whole when it is one of bytes not yet taken from: its buffer and
    /// how many bytes it holds, the buffer the caller's until it gives it back (`giveBack`).
    /// Nil when the next is not that (nothing read yet, a hole, the end, a read begun by
    /// `take`): `take` then says what it is.
    func takeWhole() -> (buffer: ReadBuffer, count: Int)? {
        guard let (buffer, piece) = ready.first, let buffer, taken == 0, case .data(let count, _, _) = piece else {
            return nil
        }
        ready.removeFirst()
        fill()
        return (buffer, count)
    }

    /// A buffer from `takeWhole`, done with.
    func giveBack(_ buffer: ReadBuffer) {
        stock.give(buffer)
    }

    /// Whether the file changed since it was opened, checked on the worker after its reads
    /// (when its data is all out): `completion` on the loop.
    func checkChanged(_ completion: @escaping (Bool) -> Void) {
        let cursor = self.cursor
        inFlight += 1  // the descriptor stays open for it
        lane.submit({ cursor.changedSinceOpened() }, completingOn: loop) { [self] changed in
            inFlight -= 1
            completion(changed)
        }
    }

    /// The file is given up or done: no more reads, and its descriptor `fd` is closed once
    /// the reads handed out have run (a read never meets a descriptor closed, or reused).
    func close(_ fd: Int32) {
        closed = true
        for (buffer, _) in ready { if let buffer { stock.give(buffer) } }
        ready.removeAll()
        if inFlight > 0 {
            lane.submit({ closeDescriptor(fd) }, completingOn: loop) { _ in }
        } else {
            closeDescriptor(fd)
        }
    }
}
