import CSluiceLinux
import Sluice
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Hashes a session's bytes on the worker pool, and writes them to the file being received
/// when it is given a `WriteTarget`, so that its event loop moves bytes while another core
/// hashes and copies them into the page cache, and never waits for either (nor for a disk
/// that holds a `pwrite` up).
///
/// `update` copies bytes into the slot being filled; a full slot becomes a job. Jobs of one
/// worker run one after another, in order, on `WorkerPool.shared`. Memory is `slotCount ×
/// slotSize`: `room` says how many bytes `update` takes now, and a session with more to hash
/// than that stops reading (its socket's window closes) until `onRoom` is called back on its
/// loop. `finalize` and `hashPrefix` complete through the loop too, and `afterQueued` on the
/// worker, after every job queued before them: a file's descriptor stays open, and its commit
/// waits, until the writes queued for it are done.
final class DigestWorker: @unchecked Sendable {
    private let loop: EventLoop
    private let pool: WorkerPool
    private let slotSize: Int
    private let slotCount: Int

    /// A slot's memory, handed between the loop and the jobs under the lock.
    private struct Slot: @unchecked Sendable {
        let buffer: UnsafeMutableRawBufferPointer
    }

    /// Shared with the jobs.
    private struct Shared {
        var freeSlots: [Slot] = []
        var allocated = 0
        var chain: [@Sendable () -> Void] = []
        var running = false
        var wantsRoom = false
        var closed = false
    }
    private let shared = Mutex(Shared())

    /// Loop thread only: the slot being filled, how much it holds and for which digest.
    private var filling: UnsafeMutableRawBufferPointer?
    private var filled = 0
    private var fillingDigest: FileDigest?
    /// Where the slot being filled is written, and at which offset of it the slot starts.
    private var fillingTarget: WriteTarget?
    private var fillingOffset: UInt64 = 0

    /// Called on the loop's thread when room came back after `room` was found short.
    var onRoom: (() -> Void)?
    /// Called on the loop's thread, once per target, when a write to it failed: from then on
    /// nothing more is written to it or hashed for it.
    var onWriteFailed: ((WriteTarget) -> Void)?

    /// Two slots by default: one filled on the loop while the other is written and hashed on
    /// the worker. More did not make one transfer faster, and each session touches its slots'
    /// memory afresh: with 16 sessions at once, four slots each made the receiver fault in
    /// 84 MiB (21,600 minor faults against 13,400 with two) and spend half again the system
    /// time (Benchmarks/RESULTS.md, "Two hashing slots per session").
    init(
        loop: EventLoop, pool: WorkerPool = .shared, slotSize: Int = DigestWorker.defaultSlotSize, slotCount: Int = 2
    ) {
        precondition(slotSize > 0 && slotCount > 0, "DigestWorker: slots must be non-empty")
        self.loop = loop
        self.pool = pool
        self.slotSize = slotSize
        self.slotCount = slotCount
    }

    deinit {
        // Jobs still queued hold a reference to this worker, so none is left: every slot is
        // free or being filled.
        if let filling { filling.deallocate() }
        shared.withLock { state in
            for slot in state.freeSlots { slot.buffer.deallocate() }
            state.freeSlots.removeAll()
        }
    }

    /// Bytes `update` accepts now without waiting for a job to finish.
    var room: Int {
        let free = shared.withLock { state in (state.freeSlots.count + slotCount - state.allocated) * slotSize }
        return free + (filling == nil ? 0 : slotSize - filled)
    }

    /// True when `update` takes `count` bytes now; when not, `onRoom` is called once a job
    /// frees a slot (checked and asked for under one lock, so no wake-up is lost).
    func hasRoom(for count: Int) -> Bool {
        let inFilling = filling == nil ? 0 : slotSize - filled
        return shared.withLock { state in
            let room = (state.freeSlots.count + slotCount - state.allocated) * slotSize + inFilling
            if room >= count { return true }
            state.wantsRoom = true
            return false
        }
    }

    /// Nothing is being filled, queued or hashed: a digest may be updated elsewhere (in order,
    /// on one thread at a time) until the next call here.
    var isIdle: Bool {
        filling == nil && shared.withLock { $0.chain.isEmpty && !$0.running }
    }

    /// The most bytes `hasRoom` can ever grant at once.
    var capacity: Int { slotSize * slotCount }

    /// 1 MiB: a direct write's worth, and far more than a chunk of most transfers.
    static let defaultSlotSize = 1 << 20

    /// The slots (of `slotSize`) for a worker whose caller asks room for `bytes` at once: as
    /// many as hold them, and one more to fill while those are written and hashed; two at least.
    static func slotsToHold(_ bytes: Int, slotSize: Int = defaultSlotSize) -> Int {
        max(2, (bytes + slotSize - 1) / slotSize + 1)
    }

    /// Queues `bytes` (copied) for `digest` and, with a `target`, to be written to it at
    /// `offset` before they are hashed. The caller has checked `room` (an internal invariant:
    /// a session never hands more).
    ///
    /// XXH3-128 runs at memory speed (tens of GB/s): when there is nothing to write, copying the
    /// bytes into a slot and handing it to another thread would cost more than hashing them,
    /// so while nothing of it is queued they are hashed here, at once (a MiB in tens of
    /// microseconds: no wait for the loop).
    func update(
        _ digest: FileDigest, _ bytes: UnsafeRawBufferPointer, writingTo target: WriteTarget? = nil,
        at offset: UInt64 = 0
    ) {
        if target == nil, digest.algorithm == .xxh128, filling == nil,
            shared.withLock({ $0.chain.isEmpty && !$0.running })
        {
            digest.update(bytes)
            return
        }
        if fillingDigest !== digest || fillingTarget !== target
            || (target != nil && fillingOffset + UInt64(filled) != offset)
        {
            submitFilling()
        }
        var rest = bytes
        while !rest.isEmpty {
            if filling == nil {
                guard let slot = takeSlot() else {
                    preconditionFailure("DigestWorker: update beyond room (an internal invariant)")
                }
                filling = slot
                fillingDigest = digest
                fillingTarget = target
                fillingOffset = offset + UInt64(bytes.count - rest.count)
            }
            guard let slot = filling else { break }
            let n = min(slot.count - filled, rest.count)
            (slot.baseAddress! + filled).copyMemory(from: rest.baseAddress!, byteCount: n)
            filled += n
            rest = UnsafeRawBufferPointer(rebasing: rest[n...])
            if filled == slot.count { submitFilling() }
        }
    }

    /// Adds a hole of `length` bytes to `digest` as the protocol hashes one (`Wire.holeDigestInput`:
    /// its HOLE message, not its zeros), on the worker in order with the other jobs.
    func updateHole(_ digest: FileDigest, length: UInt64) {
        submitFilling()
        enqueue { Wire.holeDigestInput(length).withUnsafeBytes { digest.update($0) } }
    }

    /// Copies `length` bytes of `basis` from `offset` to `target` at `position`, hashing them
    /// for `digest`, on the worker in order with the other jobs (a delta's COPY). The basis's
    /// holes (`Delta.nextData`) are not read: they are hashed as the zeros they read as, and
    /// left holes in a target that `keepsHoles`. What is hashed is what the file holds: a basis
    /// changed meanwhile (a read failing short of `length` stops the copy short) makes it differ
    /// from the sender's, which the file's digest then shows.
    ///
    /// With `inflater` (a compressed delta, decompressed on this worker), the copy goes where
    /// its literal bytes ended, once it has written what it held back of them (`settle`); it is
    /// not made when that fails.
    func copy(
        _ digest: FileDigest, from basis: BasisFile, at offset: UInt64, length: UInt64, to target: WriteTarget,
        position: UInt64, after inflater: WorkerInflate? = nil
    ) {
        submitFilling()
        enqueue { [loop] in
            var position = position
            if let inflater {
                guard inflater.settle() else { return }
                position = inflater.position
            }
            defer { inflater?.skip(length) }
            let size = Int(min(length, 1 << 20))
            let pages = Delta.PageBuffer(byteCount: size)
            defer { pages.release() }
            let buffer = pages.bytes
            var done: UInt64 = 0
            // Where the basis's run at hand (a hole, or data) ends.
            var (runEnd, inHole): (UInt64, Bool) = (offset, false)
            while done < length {
                let at = offset + done
                if at >= runEnd {
                    let data = Delta.nextData(basis.fd, from: at, size: basis.size)
                    inHole = data > at
                    // Past the basis's end (it shrank), a byte: its read fails, the copy stops.
                    runEnd = inHole ? data : max(Delta.nextHole(basis.fd, from: at, size: basis.size), at + 1)
                }
                let want = Int(min(UInt64(size), length - done, runEnd - at))
                let outcome: WriteTarget.Outcome
                let bytes: UnsafeRawBufferPointer
                if inHole {
                    bytes = UnsafeRawBufferPointer(rebasing: Delta.zeros.value[0..<want])
                    outcome = target.writeZeros(bytes, at: position + done)
                } else {
                    let piece = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want])
                    guard preadFully(basis.fd, into: piece, at: at) else { return }
                    bytes = UnsafeRawBufferPointer(piece)
                    outcome = target.write(bytes, at: position + done)
                }
                switch outcome {
                case .written: digest.update(bytes)
                case .failedNow:
                    loop.execute { [self] in onWriteFailed?(target) }
                    return
                case .failedBefore: return
                }
                done += UInt64(bytes.count)
            }
        }
    }

    /// Writes `lent`'s bytes to `target` at `offset`, then hashes them for `digest`, on the
    /// worker in order with the other jobs, without copying them: the loan keeps them where they
    /// are (and their memory alive) until `completion` runs on the loop, saying whether they
    /// were written; the caller gives the loan back there.
    func writeLent(
        _ digest: FileDigest, _ lent: LentBytes, to target: WriteTarget, at offset: UInt64,
        _ completion: @escaping (Bool) -> Void
    ) {
        submitFilling()
        let done = UncheckedBox(completion)
        loop.retainSource()
        enqueue { [loop] in
            let written = target.write(lent.bytes, at: offset) == .written
            if written { digest.update(lent.bytes) }
            loop.execute {
                loop.releaseSource()
                done.value(written)
            }
        }
    }

    /// Runs `work` on the worker, in order with the other jobs; `completion` gets its result
    /// on the loop.
    func run<Result: Sendable>(_ work: @escaping @Sendable () -> Result, then completion: @escaping (Result) -> Void) {
        submitFilling()
        let done = UncheckedBox(completion)
        loop.retainSource()
        enqueue { [loop] in
            let result = work()
            loop.execute {
                loop.releaseSource()
                done.value(result)
            }
        }
    }

    /// Calls `completion` once every job queued so far has run: at once, on the caller's
    /// thread, when none is queued; else on the worker, after them — so it must only hand work
    /// on (to a pool), never touch the loop's state. What a file's writes need before its
    /// descriptor may be closed; it runs even when the loop has stopped meanwhile.
    func afterQueued(_ completion: @escaping @Sendable () -> Void) {
        submitFilling()
        if shared.withLock({ $0.chain.isEmpty && !$0.running }) {
            completion()
            return
        }
        enqueue(completion)
    }

    /// Reads `length` bytes of `fd` from offset 0 and adds them to `digest` (a resumed file's
    /// prefix), on the worker, in order with the other jobs; `completion` on the loop says
    /// whether they could all be read.
    func hashPrefix(_ digest: FileDigest, of fd: Int32, length: UInt64, _ completion: @escaping (Bool) -> Void) {
        hashRange(digest, of: fd, from: 0, length: length, completion)
    }

    /// Reads `length` bytes of `fd` from offset `start` and adds them to `digest` (a resumed
    /// range's held part, or a whole file read back), as `hashPrefix` does. It reads a
    /// duplicate of `fd`, made now and closed when the job is done: the caller may close its
    /// own meanwhile (a transfer cancelled while the held bytes are hashed) without the job
    /// reading a closed descriptor, or one reused for another file.
    func hashRange(
        _ digest: FileDigest, of fd: Int32, from start: UInt64, length: UInt64,
        _ completion: @escaping (Bool) -> Void
    ) {
        submitFilling()
        let size = slotSize
        let box = UncheckedBox(completion)
        let fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)
        guard fd >= 0 else {
            loop.execute { box.value(false) }
            return
        }
        enqueue { [loop] in
            defer { closeDescriptor(fd) }
            let (end, overflow) = start.addingReportingOverflow(length)
            let succeeded = !overflow && digest.update(readingFrom: fd, from: start, to: end, bufferSize: size)
            loop.execute { box.value(succeeded) }
        }
    }

    /// The digest of everything queued for it, on the loop once its jobs have run.
    func finalize(_ digest: FileDigest, _ completion: @escaping ([UInt8]) -> Void) {
        if fillingDigest === digest { submitFilling() }
        let box = UncheckedBox(completion)
        loop.retainSource()
        enqueue { [loop] in
            let value = digest.finalize()
            loop.execute {
                loop.releaseSource()
                box.value(value)
            }
        }
    }

    /// The digest at once, on the loop's thread, when none of its jobs is queued or running and
    /// at most `limit` bytes of it wait unwritten in the slot being filled (hashed here): a
    /// small file's digest without a round trip through a worker and the loop. Nil otherwise
    /// (call `finalize`).
    func finalizeNow(_ digest: FileDigest, limit: Int = Int(Wire.eagerLimit)) -> [UInt8]? {
        guard shared.withLock({ $0.chain.isEmpty && !$0.running }) else { return nil }
        if let slot = filling, fillingDigest === digest {
            guard fillingTarget == nil, filled <= limit else { return nil }
            digest.update(UnsafeRawBufferPointer(rebasing: slot[0..<filled]))
            discardFilling()
        }
        return digest.finalize()
    }

    /// Drops what is being filled (the file was abandoned).
    func discardFilling() {
        guard let slot = filling else { return }
        filling = nil
        fillingDigest = nil
        fillingTarget = nil
        filled = 0
        let free = Slot(buffer: slot)
        shared.withLock { $0.freeSlots.append(free) }
    }

    private func takeSlot() -> UnsafeMutableRawBufferPointer? {
        let size = slotSize
        let count = slotCount
        let taken = shared.withLock { state -> Slot? in
            if let slot = state.freeSlots.popLast() { return slot }
            guard state.allocated < count else { return nil }
            state.allocated += 1
            return Slot(buffer: .allocate(byteCount: size, alignment: WriteTarget.directAlignment))
        }
        return taken?.buffer
    }

    private func submitFilling() {
        guard let slot = filling, let digest = fillingDigest else { return }
        let (count, target, offset) = (filled, fillingTarget, fillingOffset)
        filling = nil
        fillingDigest = nil
        fillingTarget = nil
        filled = 0
        let free = Slot(buffer: slot)
        guard count > 0 else {
            shared.withLock { $0.freeSlots.append(free) }
            return
        }
        enqueue { [self] in
            let bytes = UnsafeRawBufferPointer(rebasing: free.buffer[0..<count])
            switch target?.write(bytes, at: offset) {
            case nil, .written?:
                digest.update(bytes)
            case .failedNow?:
                if let target { loop.execute { [self] in onWriteFailed?(target) } }
            case .failedBefore?:
                break
            }
            let wake = shared.withLock { state -> Bool in
                state.freeSlots.append(free)
                defer { state.wantsRoom = false }
                return state.wantsRoom
            }
            if wake { loop.execute { [self] in onRoom?() } }
        }
    }

    /// Runs `job` after every job queued before it.
    private func enqueue(_ job: @escaping @Sendable () -> Void) {
        let start = shared.withLock { state -> Bool in
            state.chain.append(job)
            if state.running { return false }
            state.running = true
            return true
        }
        if start { pool.submit { [self] in drain() } }
    }

    private func drain() {
        while true {
            let next = shared.withLock { state -> (@Sendable () -> Void)? in
                if state.chain.isEmpty {
                    state.running = false
                    return nil
                }
                return state.chain.removeFirst()
            }
            guard let next else { return }
            next()
        }
    }
}
