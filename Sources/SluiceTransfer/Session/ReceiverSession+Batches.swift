import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The bytes of the small files received whole and not yet handed to the job that stores them:
/// one buffer for many files (a BATCH's) where each file had an allocation of its own size,
/// released on the worker (a tenth of the receiver's user time on a tree of small files went
/// to those allocations and the buffer's growth). Loop thread only.
final class WholeBytes {
    /// What the buffer holds at first for a BATCH's files: its target, and a file of the
    /// largest size sent whole that may run past it.
    static let batchCapacity = Wire.batchTarget + Int(Wire.wholeLimit)

    private(set) var bytes: [UInt8] = []
    /// Buffers handed over, stored and given back (`recycle`), for the next BATCHes: their
    /// pages are mapped and warm, where a fresh 1.5 MiB one came from a heap trimmed and grown
    /// again for most BATCHes (84 `brk` for tree a), its first touch in the copy of the DATA (a
    /// fifth of the receiving loop's samples). As many as a BATCH's jobs on the lane overlap
    /// the next BATCHes' arrival, `spares` at most.
    private var spare: [[UInt8]] = []
    /// Spare buffers kept at most: 4.5 MiB.
    static let spares = 3
    /// Bytes handed over as a copy, the buffer kept (`take`).
    static let copiedHandOver = 64 << 10
    /// Buffers made (not given back), for the tests.
    private(set) var made = 0

    var count: Int { bytes.count }

    /// A file of `size` bytes is to follow: a buffer is made (or the spare taken) to hold a
    /// BATCH's files when it is `batched`, else that file (each is handed over on its own then).
    func prepare(for size: Int, batched: Bool) {
        guard bytes.capacity == 0 else { return }
        reserve(batched ? max(size, Self.batchCapacity) : size)
    }

    /// An empty buffer of `capacity` bytes at least in `bytes`: the spare if it is large
    /// enough (and no longer shared with the job it was handed to), else a new one.
    private func reserve(_ capacity: Int) {
        if let last = spare.indices.last, spare[last].capacity >= capacity {
            bytes = spare.removeLast()
            bytes.removeAll(keepingCapacity: true)
            return
        }
        made += 1
        bytes.reserveCapacity(capacity)
    }

    /// A buffer `take` handed over, its files stored: kept as a spare if it is the size of a
    /// BATCH's (a larger one, for a file near `Wire.wholeLimit`, or a small one is let go) and
    /// fewer than `spares` are kept.
    func recycle(_ buffer: [UInt8]) {
        guard buffer.capacity >= Self.batchCapacity, buffer.capacity <= 2 * Self.batchCapacity,
            spare.count < Self.spares
        else { return }
        spare.append(buffer)
    }

    func append(_ piece: UnsafeRawBufferPointer) {
        bytes.append(contentsOf: piece)
    }

    func appendZeros(_ length: Int) {
        bytes.append(contentsOf: repeatElement(0, count: length))
    }

    /// Forgets the bytes from `count` on (a file dropped before its end).
    func truncate(to count: Int) {
        bytes.removeSubrange(min(count, bytes.count)...)
    }

    /// The bytes before `end`, handed over; those after it (a file still arriving) stay, at the
    /// start of a new buffer. A few (up to `copiedHandOver`) are handed over as a copy, and the
    /// buffer stays: most BATCHes of a tree of small files hold far less than their 1.5 MiB
    /// (half of tree a's under 40 KiB: the sender closes one at the end of its loop's turn),
    /// and a copy of what was just written costs less than a buffer made for each.
    func take(upTo end: Int) -> [UInt8] {
        if end <= Self.copiedHandOver, bytes.capacity >= Self.batchCapacity {
            // From the memory, not the slice: an array of a slice that spans the whole buffer
            // shares it, and the buffer would go with it after all.
            let taken = bytes.withUnsafeBufferPointer { Array($0[..<end]) }
            bytes.removeSubrange(..<end)
            return taken
        }
        var taken: [UInt8] = []
        swap(&taken, &bytes)
        if end < taken.count {
            reserve(Self.batchCapacity)
            bytes.append(contentsOf: taken[end...])
            taken.removeSubrange(end...)
        }
        return taken
    }
}

/// A small file received whole into memory before anything of it touches the disk; its digest
/// is checked by the job that stores it, off the loop (up to 1 MiB of hashing a file). Its bytes
/// are those of `buffer` from `start` on while it arrives — or, when all of them came in one
/// piece, that piece of the inbound buffer, lent (`lent`).
final class WholeFile {
    let request: EntryRequest
    /// Its announced size.
    let size: Int
    private let buffer: WholeBytes
    /// Where its bytes begin in `buffer`.
    private(set) var start: Int
    /// All its bytes, lent from the connection's inbound buffer (nothing in `buffer` then).
    private(set) var lent: LentBytes?
    /// Where its HOLEs lie in its bytes (zeros there): hashed as the protocol hashes a hole.
    private(set) var holes: [ReceivedWhole.Hole] = []

    /// Files received this way: eager (their data follows at once), of a known size of at most
    /// `Wire.eagerLimit` bytes, uncompressed; with `batch` offered, up to `Wire.wholeLimit`
    /// bytes when neither resumable (part of it may be here: it is opened) nor linked (a LINK
    /// may name it right after: it is answered before the next entry).
    static func takes(_ header: EntryHeader, batch: Bool) -> Bool {
        guard header.eager && header.sizeKnown && !header.compressed else { return false }
        return header.size <= Wire.eagerLimit
            || (batch && !header.resumable && !header.linked && header.size <= Wire.wholeLimit)
    }

    /// A file whose bytes follow those in `buffer`; `batched`: in a BATCH.
    init(_ request: EntryRequest, into buffer: WholeBytes, batched: Bool) {
        self.request = request
        size = Int(clamping: request.header.size)
        self.buffer = buffer
        start = buffer.count
        buffer.prepare(for: Int(clamping: request.header.size), batched: batched)
    }

    /// Its bytes so far.
    var count: Int { lent?.bytes.count ?? buffer.count - start }

    func append(_ piece: UnsafeRawBufferPointer) {
        buffer.append(piece)
    }

    /// All its bytes, lent where they arrived (it had none before).
    func lend(_ loan: LentBytes) {
        lent = loan
    }

    /// A HOLE in a small file: written as zeros (the machine checked it fits the size).
    func appendHole(_ length: Int) {
        holes.append(ReceivedWhole.Hole(at: count, length: length))
        buffer.appendZeros(length)
    }

    /// The bytes before it were handed over (`WholeBytes.take`): its own now begin `by` earlier.
    func moved(by offset: Int) {
        start -= offset
    }
}

/// A small file received whole, with the digest its END announced, for the job that checks and
/// stores it.
struct ReceivedWhole: Sendable {
    struct Hole: Sendable {
        var at: Int
        var length: Int
    }

    let request: EntryRequest
    /// Where its bytes lie in the buffer a job's files share (when copied there).
    let range: Range<Int>
    /// Its bytes where they arrived, lent from the connection's inbound buffer, instead.
    let lent: LentBytes?
    let holes: [Hole]
    let expected: [UInt8]

    /// How many bytes it has.
    var count: Int { lent?.bytes.count ?? range.count }

    /// Its bytes: lent, or those of `buffer` (the job's shared buffer, its memory).
    func bytes(in buffer: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
        lent?.bytes ?? UnsafeRawBufferPointer(rebasing: buffer[range])
    }

    /// Whether `all`, its bytes (holes hashed as holes), have the announced digest.
    func matches(_ algorithm: TransferDigest, _ all: UnsafeRawBufferPointer) -> Bool {
        let digest = FileDigest(algorithm)
        var done = 0
        for hole in holes {
            if hole.at > done { digest.update(UnsafeRawBufferPointer(rebasing: all[done..<hole.at])) }
            if hole.length > 0 {
                Wire.holeDigestInput(UInt64(hole.length)).withUnsafeBytes { digest.update($0) }
            }
            done = hole.at + hole.length
        }
        if all.count > done { digest.update(UnsafeRawBufferPointer(rebasing: all[done...])) }
        return digest.finalize() == expected
    }
}

/// A verified file set aside for a batch, or one whose answer waits its turn among them.
enum StagedSlot {
    case file(ReceiverStore.StagedFile)
    case failed(EntryRejection)
}

extension ReceiverSession {
    // MARK: Staging and batched commits

    /// Sets the verified file's mode and mtime on a worker and sets it aside, to be flushed and
    /// renamed with others; the machine goes on with the next entry.
    func stage(_ file: ActiveFile) {
        let store = self.store
        let (request, opened) = (file.request, file.opened)
        laneJobs += 1
        lane.submit(
            { store.stage(opened, header: request.header, attributes: request.attributes) }, completingOn: loop
        ) { [self] rejection in
            laneJobs -= 1
            _ = advance(file, .stored)
            if self.file === file { self.file = nil }
            if let rejection {
                perform(machine.handle(.committed(rejection)))
                pump()
                return
            }
            setAside(.file(ReceiverStore.StagedFile(opened: opened, request: request)), bytes: file.position)
            perform(machine.handle(.staged))
            if batchFull { commitStaged() }
            pump()
        }
    }

    /// A small file received whole: its digest checked, then created, written and settled on
    /// the lane with the files received whole before it and not yet stored (those of a BATCH
    /// are stored together at its end, `storeWholes`). The machine goes on at once (`.staged`);
    /// the file's answer follows its job (without fsync) or its batch (with).
    func storeWhole(_ whole: WholeFile, expecting digest: [UInt8]) {
        let range = whole.lent == nil ? whole.start..<whole.start + whole.count : whole.start..<whole.start
        wholesWaiting.append(
            ReceivedWhole(request: whole.request, range: range, lent: whole.lent, holes: whole.holes, expected: digest))
        wholesWaitingBytes += whole.count
        if whole.lent != nil { wholesWaitingLent += 1 }
        perform(machine.handle(.staged))
        if !machine.inBatch || wholesWaitingBytes >= Wire.batchTarget { storeWholes() }
    }

    /// Checks and stores the small files received whole and waiting, in order, with one job on
    /// the lane; each is answered in its turn when the job is done.
    func storeWholes() {
        guard !wholesWaiting.isEmpty else { return }
        // The bytes of the files waiting, handed over; those of one still arriving stay.
        let cut = wholeFile?.start ?? wholeBytes.count
        let buffer = wholeBytes.take(upTo: cut)
        wholeFile?.moved(by: cut)
        // Handed over as they are: the array moves to the job, nothing of a file is copied.
        let files = wholesWaiting
        wholesWaiting = []
        let bytes = wholesWaitingBytes
        // The answers need the sizes only, and the loans to give back: the files stay with the
        // job, so that the buffer is the spare's alone once the job is done
        // (`WholeBytes.recycle`).
        let sizes = files.map { UInt64($0.count) }
        let loans = files.compactMap(\.lent)
        wholesWaitingBytes = 0
        wholesWaitingLent = 0
        let (store, overwrite, fsync, algorithm) = (self.store, options.overwrite, options.fsync, machine.digest)
        laneJobs += 1
        laneBytes += bytes
        lane.submit(
            { Self.checkAndStore(files, of: buffer, in: store, algorithm, overwrite: overwrite, fsync: fsync) },
            completingOn: loop
        ) {
            [self] outcomes in
            laneJobs -= 1
            laneBytes -= bytes
            for loan in loans { returned(loan) }
            for (outcome, size) in zip(outcomes, sizes) {
                switch outcome {
                case .stored:
                    perform(machine.handle(.stagedCommitted(nil)))
                case .rejected(let rejection) where !fsync:
                    perform(machine.handle(.stagedCommitted(rejection)))
                case .rejected(let rejection):
                    // Answered in its turn among the batch's files.
                    setAside(.failed(rejection), bytes: 0)
                case .staged(let staged):
                    setAside(.file(staged), bytes: size)
                }
            }
            if ended {
                commitStagedAfterEnd()
            } else if batchFull || !afterStaged.isEmpty {
                commitStaged()
            } else {
                commitWhenQuiet()
            }
            wholeBytes.recycle(buffer)
            pump()
        }
    }

    /// `files`' outcomes in order: a file whose digest does not match fails; the others are
    /// stored (`ReceiverStore.storeWholes`).
    private static func checkAndStore(
        _ files: [ReceivedWhole], of buffer: [UInt8], in store: ReceiverStore, _ algorithm: TransferDigest,
        overwrite: Bool, fsync: Bool
    ) -> [ReceiverStore.WholeOutcome] {
        var matching: [Bool] = []
        let stored = buffer.withUnsafeBytes { all in
            let bytes = files.map { $0.bytes(in: all) }
            matching = files.indices.map { files[$0].matches(algorithm, bytes[$0]) }
            // Each verified file's request and bytes, taken where they lie (no copy of each file).
            var verified: [(request: EntryRequest, bytes: UnsafeRawBufferPointer)] = []
            verified.reserveCapacity(files.count)
            for index in files.indices where matching[index] {
                verified.append((request: files[index].request, bytes: bytes[index]))
            }
            return store.storeWholes(verified, overwrite: overwrite, fsync: fsync)
        }
        var outcomes = stored[...]
        return matching.map { matches in
            guard matches else { return .rejected(.failed(.data, "\(algorithm) mismatch (data altered in transit)")) }
            return outcomes.popFirst() ?? .rejected(.failed(.io, "internal: a file without an outcome"))
        }
    }

    /// Adds to the batch; after the session's end, what is verified takes its name all the
    /// same (nobody hears of it).
    private func setAside(_ slot: StagedSlot, bytes: UInt64) {
        staged.append(slot)
        stagedBytes += bytes
        if ended { commitStagedAfterEnd() }
    }

    /// The staged files make a batch: this session's limits, or the receiver's budget of
    /// descriptors for staged files.
    private var batchFull: Bool {
        staged.count >= Self.stagedFiles || stagedBytes >= Self.stagedBytes
            || (receiver?.filesStaged ?? 0) >= TransferReceiver.stagedBudget
    }

    /// A full batch is staged while the one before is being committed: stop reading.
    var stagedFull: Bool { committingStaged && batchFull }

    /// Commits the staged files (one flush, then the renames) on a worker, and hands the
    /// machine their outcomes in order. One batch at a time: asked meanwhile, the next batch
    /// follows this one.
    func commitStaged() {
        guard !committingStaged else {
            commitAsked = true
            return
        }
        guard !staged.isEmpty else {
            runAfterStaged()
            return
        }
        let batch = staged
        staged.removeAll()
        stagedBytes = 0
        committingStaged = true
        commitAsked = false
        let (store, overwrite) = (self.store, options.overwrite)
        store.pool.submit({ Self.commit(batch, in: store, overwrite: overwrite) }, completingOn: loop) {
            [self] rejections in
            committingStaged = false
            for rejection in rejections { perform(machine.handle(.stagedCommitted(rejection))) }
            if ended {
                commitStagedAfterEnd()
                return
            }
            if commitAsked || !afterStaged.isEmpty || batchFull {
                commitStaged()
            } else {
                commitWhenQuiet()
            }
            pump()
        }
    }

    /// Commits the staged files if nothing more arrives for `quietCommit`: the sender may be
    /// waiting for their answers.
    func commitWhenQuiet() {
        guard quietTimer == nil, !staged.isEmpty, !ended else { return }
        let seen = connection.bytesRead
        quietTimer = loop.schedule(after: Self.quietCommit) { [weak self] in
            guard let self else { return }
            quietTimer = nil
            guard !ended else { return }
            if connection.bytesRead == seen {
                commitStaged()
            } else {
                commitWhenQuiet()
            }
        }
    }

    /// Commits a batch's files (`ReceiverStore.commitStaged`) and returns an outcome for each
    /// slot, in order.
    private static func commit(_ batch: [StagedSlot], in store: ReceiverStore, overwrite: Bool) -> [EntryRejection?] {
        let files = batch.compactMap { slot -> ReceiverStore.StagedFile? in
            if case .file(let file) = slot { return file }
            return nil
        }
        var committed = store.commitStaged(files, overwrite: overwrite)[...]
        return batch.map { slot in
            switch slot {
            case .file: return committed.popFirst() ?? nil
            case .failed(let rejection): return rejection
            }
        }
    }

    /// Runs what waits for every staged file to be committed, once none is left.
    func runAfterStaged() {
        guard staged.isEmpty, !committingStaged, laneJobs == 0 else { return }
        let waiting = afterStaged
        afterStaged.removeAll()
        for work in waiting { work() }
    }

    /// The session ended with files staged: they are committed all the same, in the background
    /// (`finishDiskWork` waits for them).
    func commitStagedAfterEnd() {
        guard !staged.isEmpty, !committingStaged else { return }
        let batch = staged
        staged.removeAll()
        let (store, overwrite) = (self.store, options.overwrite)
        store.handingOn.enter()
        store.pool.submit {
            _ = Self.commit(batch, in: store, overwrite: overwrite)
            store.handingOn.leave()
        }
    }

    /// `send --watch`: sets the attributes of the directories kept so far once every staged
    /// file is in place, without waiting for goodbye (the sender sends a directory's CHECK
    /// again after what changed in it, so a directory set too early is set again). One job at
    /// a time; what comes meanwhile waits for the next.
    func settleWatched() {
        guard !settlingWatched else { return }
        settlingWatched = true
        afterStaged.append { [self] in
            let store = self.store
            let directories = createdDirectories
            createdDirectories = DirectoriesToSettle()
            store.pool.submit({ store.settleDirectories(directories) }, completingOn: loop) { [self] settled in
                settlingWatched = false
                for warning in settled.warnings where !(movedOrRemoved && warning.hasPrefix("cannot reopen")) {
                    warn(warning)
                }
                warnings.hold(settled.more)
                if !ended, !createdDirectories.isEmpty { settleWatched() }
            }
        }
        commitStaged()
    }

    /// Once every staged file is in place: sets the directories' attributes and, with fsync,
    /// flushes the file system once more, so that goodbye means every file stored is on disk
    /// under its name.
    func settleDirectories() {
        afterStaged.append { [self] in
            let store = self.store
            let directories = createdDirectories
            createdDirectories = DirectoriesToSettle()
            let fsync = options.fsync
            store.pool.submit(
                { (store.settleDirectories(directories), fsync ? store.flushAll() : nil) }, completingOn: loop
            ) { [self] settled, failure in
                // A directory a MOVE or REMOVE took away (`send --watch`) is no longer there to
                // settle: not worth a warning.
                for warning in settled.warnings where !(movedOrRemoved && warning.hasPrefix("cannot reopen")) {
                    warn(warning)
                }
                warnings.hold(settled.more)
                if let failure {
                    perform(machine.handle(.flushFailed(failure)))
                    return
                }
                perform(machine.handle(.directoriesSettled))
            }
        }
        commitStaged()
    }
}
