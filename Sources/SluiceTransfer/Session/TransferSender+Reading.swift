import CSluiceLinux
import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// A file opened on a worker: its descriptor and status, and a small file's whole contents.
struct OpenedSource: Sendable {
    let fd: Int32
    let size: UInt64
    let mode: UInt32
    let mtime: timespec
    /// A small file (at most `Wire.wholeLimit` bytes, not sparse, sent whole) read with its
    /// open, all of it (`WholeRead.onWorker`); nil otherwise (or when it could not be read
    /// whole: then its reads say why, in their turn).
    var bytes: [UInt8]?
    /// Read whole with its open: whether it changed meanwhile.
    var changed = false
    /// Read whole with its open: all of it was in the page cache (the loop could have read it).
    var cached = false
    /// A small file left to the loop (`WholeRead.onLoop`): read from the page cache straight
    /// into the connection's buffer as its data goes out (`TransferSender.readOnLoop`).
    var readsOnLoop = false
}

/// Where a small file's bytes (at most `Wire.wholeLimit`, not sparse, sent whole) are read.
enum WholeRead: Sendable {
    /// Not a small file sent whole: its reads go to the worker, a chunk at a time.
    case no
    /// On the worker that opens it, into an array of its own, copied into the connection's
    /// buffer on the loop: for files not in the page cache (the disk is waited for there).
    case onWorker
    /// On the loop, from the page cache straight into the connection's buffer, without waiting
    /// for the disk (`RWF_NOWAIT`): no copy and no array. What the cache does not hold is read
    /// on a worker after all (`SourceReader`), and the next files on their worker.
    case onLoop
}

/// Whether a sender reads small files on its loop (`WholeRead.onLoop`) or on its workers, and
/// how many were read each way. Loop thread only; changed only by its methods.
struct LoopReads {
    /// Files opened on a worker that reads them whole too, after a read on the loop found a
    /// file's bytes not in the page cache: a tree read from the disk is read there, where the
    /// wait for it overlaps the loop's work, and the loop tries again after these — or as soon
    /// as a worker finds a file it read all in the cache (a few files dropped from the cache of
    /// a tree that is in it otherwise).
    static let workerTurnsAfterMiss = 64
    /// False once the file system said it cannot read without waiting (`EOPNOTSUPP`).
    private(set) var possible = true
    /// Files still to be read whole on their worker before the loop tries again.
    private(set) var workerTurns = 0
    /// Files whose bytes were all read on the loop.
    private(set) var whole = 0
    /// Reads on the loop that found the bytes not in the page cache (or not readable there):
    /// the file's reads went to a worker.
    private(set) var missed = 0

    /// Where the next small file opened is read (and one of the worker's turns is taken).
    mutating func next() -> WholeRead {
        guard possible else { return .onWorker }
        guard workerTurns == 0 else {
            workerTurns -= 1
            return .onWorker
        }
        return .onLoop
    }

    /// A file's bytes were all read on the loop.
    mutating func readWhole() {
        whole += 1
    }

    /// A read on the loop found a file's bytes not in the page cache (`unsupported`: the file
    /// system cannot read without waiting, and never will).
    mutating func miss(unsupported: Bool) {
        missed += 1
        workerTurns = Self.workerTurnsAfterMiss
        if unsupported { possible = false }
    }

    /// A worker read a small file whole, and found all of it in the page cache: the next files
    /// are read on the loop again.
    mutating func cachedOnWorker() {
        workerTurns = 0
    }
}

/// An entry opened ahead of its turn, or being opened. Loop thread only.
final class OpenAhead {
    let index: Int
    let path: String
    /// Where it is read, if small.
    let read: WholeRead
    private(set) var result: Result<OpenedSource, LocalFailure>?
    /// Not wanted any more (skipped, or the session ended): its descriptor is closed.
    private var abandoned = false

    init(index: Int, path: String, read: WholeRead) {
        self.index = index
        self.path = path
        self.read = read
    }

    func settle(_ result: Result<OpenedSource, LocalFailure>) {
        self.result = result
        if abandoned { discard() }
    }

    func discard() {
        abandoned = true
        if case .success(let opened) = result { closeDescriptor(opened.fd) }
        result = nil
    }
}

/// The entries a `TransferSender` opens ahead of their turn (`TransferSender+Reading`): those
/// handed out, in the order of the work, how many jobs run, the entry the machine waits for, and
/// whether a job waits for the pool's room. Loop thread only; changed only by its methods.
struct SenderOpens {
    /// Opened or being opened, in the order of the work.
    private(set) var ahead: [OpenAhead] = []
    /// Jobs opening some of them on the pool.
    private(set) var jobs = 0
    /// The entry the machine asked for and waits for.
    private(set) var waiting: Int?
    /// A job waits for the pool's room.
    private(set) var waitingForRoom = false
    /// Where small files are read: on the loop or on their worker.
    var loopReads = LoopReads()
    /// Entries handed to open jobs so far: each file once (for tests).
    private(set) var handedOut = 0

    /// The machine asks for entry `index`: those opened ahead of it are not wanted any more (all
    /// of them, if it was not opened ahead).
    mutating func ask(_ index: Int) {
        if let position = ahead.firstIndex(where: { $0.index == index }) {
            for skipped in ahead[..<position] { skipped.discard() }
            ahead.removeFirst(position)
        } else {
            discardAll()
        }
        waiting = index
    }

    /// The entry waited for and its open's result, taken, once its open is done; nil before.
    mutating func takeOpened() -> (Int, Result<OpenedSource, LocalFailure>)? {
        guard let index = waiting, let first = ahead.first, first.index == index, let result = first.result else {
            return nil
        }
        waiting = nil
        ahead.removeFirst()
        return (index, result)
    }

    /// Closes what was opened ahead and not taken; nothing is waited for.
    mutating func discardAll() {
        for item in ahead { item.discard() }
        ahead.removeAll()
        waiting = nil
    }

    /// A job of `batch` goes to the pool.
    mutating func submitted(_ batch: [OpenAhead]) {
        jobs += 1
        ahead += batch
        handedOut += batch.count
    }

    /// A job is done.
    mutating func jobDone() {
        jobs -= 1
    }

    /// The next job waits for the pool's room, or has it.
    mutating func waitForRoom(_ waiting: Bool) {
        waitingForRoom = waiting
    }
}

extension TransferSender {
    /// Chunks of a file read ahead of its frames, on a worker (`SourceReader`): reads and
    /// socket writes overlap, within this many chunks of memory.
    static let readAhead = 3
    /// Entries opened ahead of their turn at most; per job; and jobs at once. A job opens a
    /// batch (and reads the small files whole) for one hand-over between the loop and the
    /// pool, where one per file would cost a tree of small files more than their reads.
    static let opensAheadLimit = 32
    static let opensPerJob = 16
    static let openJobs = 2

    /// The machine asks for file entry `index`: taken from what was opened ahead, or opened
    /// now on the worker (with the entries that follow); the machine hears once it is open.
    func openFileEntry(_ index: Int) {
        loop?.preconditionInLoop("TransferSender.openFileEntry")
        opens.ask(index)
        takeOpened()
    }

    /// Hands the machine the entry it waits for, if its open is done; opens more ahead.
    private func takeOpened() {
        guard let (index, result) = opens.takeOpened() else {
            queueOpens()
            return
        }
        queueOpens()
        fileOpened(index, result)
    }

    /// Closes what was opened ahead and not taken.
    func discardOpensAhead() {
        opens.discardAll()
    }

    /// Queues a job opening the entry the machine waits for, when none does, and those that
    /// follow it in the work while fewer than `opensAheadLimit` are open or opening — once the
    /// pool has room for it.
    private func queueOpens() {
        guard let loop, !ended, !opens.waitingForRoom else { return }
        let opensAhead = opens.ahead
        let first = opens.waiting.flatMap { index in opensAhead.contains { $0.index == index } ? nil : index }
        guard first != nil || opens.jobs < Self.openJobs else { return }
        // Room for less than half a job ahead: none is queued (see below) unless the work ends
        // within the window, so the window is not walked again for each file taken (it was, 32
        // entries a file: 5% of a tree of small files' time on the loop).
        if first == nil, Self.opensAheadLimit - opensAhead.count < Self.opensPerJob / 2,
            machine.work.endIndex - machine.next > 2 * Self.opensAheadLimit
        {
            return
        }
        var batch: [OpenAhead] = []
        if let first, case .file(let path) = entries[first].kind {
            let asked = machine.next > machine.work.startIndex ? machine.work[machine.next - 1] : .entry(first)
            batch.append(OpenAhead(index: first, path: path, read: wholeRead(asked)))
        }
        // What is opened ahead lines up with the work from `machine.next` on, after the entry
        // waited for (asked, so before `next`) when its open is still out: counted as matched, or
        // every file after it was opened a second time.
        var matched = opensAhead.first.map { $0.index == opens.waiting } == true ? 1 : 0
        var position = machine.next
        while opensAhead.count + batch.count < Self.opensAheadLimit, batch.count < Self.opensPerJob,
            position < machine.work.endIndex
        {
            let item = machine.work[position]
            position += 1
            guard let opens = willOpen(item) else { break }
            guard opens, case .file(let path) = entries[item.index].kind else { continue }
            if matched < opensAhead.count, opensAhead[matched].index == item.index {
                matched += 1
                continue
            }
            batch.append(OpenAhead(index: item.index, path: path, read: wholeRead(item)))
        }
        guard !batch.isEmpty else { return }
        // Opening ahead waits until it makes a batch worth the hand-over (unless the work ends
        // within it): not one job per file as the files are taken one by one.
        if first == nil, batch.count < Self.opensPerJob / 2, position < machine.work.endIndex { return }
        guard openLane.workers.hasRoom else {
            opens.waitForRoom(true)
            openLane.workers.whenRoom(on: loop) { [weak self] in
                guard let self else { return }
                self.opens.waitForRoom(false)
                self.queueOpens()
            }
            return
        }
        let requests = batch.map { ($0.path, $0.read) }
        opens.submitted(batch)
        openLane.submit({ requests.map { Self.openSource($0.0, read: $0.1) } }, completingOn: loop) {
            [weak self] results in
            for (item, result) in zip(batch, results) { item.settle(result) }
            guard let self else { return }
            self.opens.jobDone()
            if results.contains(where: { (try? $0.get())?.cached == true }) { self.opens.loopReads.cachedOnWorker() }
            guard !self.ended else { return }
            if self.opens.waiting != nil {
                self.takeOpened()
                self.advance()
            } else {
                self.queueOpens()
            }
        }
    }

    /// Whether the machine will ask to open work `item` when its turn comes: nil when it
    /// cannot be told yet (its HAVE is not in), and nothing after it is opened ahead.
    private func willOpen(_ item: SenderMachine.Work) -> Bool? {
        guard case .entry(let index) = item else { return true }
        // The entry's fields read in place: a copy of it would retain and release its strings.
        guard case .file = entries[index].kind else { return false }
        if entries[index].hardLinkTo != nil && inspect({ $0.offers.links }) { return false }
        guard inspect({ $0.syncing }) else { return !machine.settings.dryRun }
        guard let have = machine.haves[index] else { return nil }
        return have.status != .same && !machine.settings.dryRun
    }

    /// A whole, non-sparse file is read whole if it is small: on the loop, or with its open
    /// (`LoopReads`).
    private func wholeRead(_ item: SenderMachine.Work) -> WholeRead {
        guard case .entry(let index) = item, !entries[index].sparse else { return .no }
        return opens.loopReads.next()
    }

    /// Opens `path` (not following a link) on a worker; a regular file only. A file of at most
    /// `Wire.wholeLimit` bytes is read whole too with `WholeRead.onWorker` (at most
    /// `opensAheadLimit` of them are held), and left to the loop with `.onLoop`.
    static func openSource(_ path: String, read: WholeRead) -> Result<OpenedSource, LocalFailure> {
        let fd: Int32
        switch Sluice.openFile(path, flags: O_RDONLY | O_NOFOLLOW | O_CLOEXEC, permissions: 0) {
        case .success(let descriptor): fd = descriptor
        case .failure(let error): return .failure(LocalFailure(error.description))
        }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else {
            closeDescriptor(fd)
            return .failure(LocalFailure("open \(quoted(path)): not a regular file any more"))
        }
        let size = UInt64(st.st_size)
        var opened = OpenedSource(fd: fd, size: size, mode: UInt32(st.st_mode & 0o7777), mtime: st.st_mtim)
        guard read != .no, size <= Wire.wholeLimit else { return .success(opened) }
        guard read == .onWorker else {
            opened.readsOnLoop = true
            return .success(opened)
        }
        guard let (bytes, cached) = readWhole(fd, count: Int(size)) else { return .success(opened) }
        opened.bytes = bytes
        opened.cached = cached
        opened.changed = ReadCursor.changed(fd, since: (size, st.st_mtim))
        return .success(opened)
    }

    /// What `readOnLoop` found.
    enum LoopRead {
        /// This many bytes, at the start of the buffer.
        case bytes(Int)
        /// All of it is out (whether it changed since its open is known now).
        case end
        /// The page cache does not hold the next bytes (or they cannot be read without waiting):
        /// the file's reads go to a worker from here on.
        case worker
    }

    /// Reads the next bytes of small file `file` (`OpenedSource.readsOnLoop`) on the loop, from
    /// the page cache straight into `buffer` (the connection's, where its frame goes out), and
    /// never waits for the disk: what is not cached is left to a worker (`SourceReader`), which
    /// also says why when a read fails or the file shrank. At its end, whether it changed since
    /// its open (its mtime or size), as a worker would tell at the end of its reads.
    func readOnLoop(_ file: OutgoingFile, _ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> LoopRead {
        let size = file.size ?? 0
        guard file.position < size else {
            file.changeFound(ReadCursor.changed(fd, since: (size, file.openedMtime)))
            opens.loopReads.readWhole()
            return .end
        }
        let want = Int(min(UInt64(buffer.count), size - file.position))
        guard want > 0, let base = buffer.baseAddress else { return .worker }
        let n = retryingOnInterrupt { sluice_pread_nowait(fd, base, want, Int64(clamping: file.position)) }
        guard n > 0 else {
            // EAGAIN: not in the cache; EOPNOTSUPP: never without waiting here; 0: the file
            // shrank, and an error: the worker's read tells.
            if n < 0 && (errno == EAGAIN || errno == EOPNOTSUPP) {
                opens.loopReads.miss(unsupported: errno == EOPNOTSUPP)
            }
            return .worker
        }
        return .bytes(n)
    }

    /// The first `count` bytes of `fd`, and whether they were all in the page cache (read
    /// without waiting first); nil when they cannot all be read.
    private static func readWhole(_ fd: Int32, count: Int) -> ([UInt8], cached: Bool)? {
        var complete = true
        var cached = false
        let bytes = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            let raw = UnsafeMutableRawBufferPointer(buffer)
            var done = 0
            if let base = raw.baseAddress, count > 0 {
                done = max(0, retryingOnInterrupt { sluice_pread_nowait(fd, base, count, 0) })
                cached = done == count
            }
            complete = preadFully(fd, into: UnsafeMutableRawBufferPointer(rebasing: raw[done...]), at: UInt64(done))
            initialized = complete ? count : 0
        }
        return complete ? (bytes, cached) : nil
    }

    /// The reads of the current file's data from where it stands, on `readLane`.
    func makeReader(_ file: OutgoingFile, _ fd: Int32) -> SourceReader? {
        guard let loop else { return nil }
        let end = file.range?.end ?? file.size ?? 0
        // XXH3-128 of a file read whole, in order, with nothing of it left to the hasher's
        // jobs: hashed by the reads (`ReadCursor`).
        let hashedByReads =
            file.range == nil && file.delta == nil && file.digest.algorithm == .xxh128 && hasher?.isIdle == true
        let cursor = ReadCursor(
            fd: fd, path: localPath(file), from: file.position, to: end, sparse: file.sparse,
            opened: file.range == nil ? (file.size ?? 0, file.openedMtime) : nil,
            digest: hashedByReads ? file.digest : nil)
        let reader = SourceReader(
            cursor: cursor, lane: readLane, loop: loop, stock: readBuffers, depth: Self.readAhead,
            bytesToEnd: file.sparse ? nil : end - min(end, file.position))
        reader.onPiece = { [weak self, weak file] in
            guard let self, let file, self.current === file else { return }
            self.produce()
        }
        file.reads(through: reader)
        reader.fill()
        return reader
    }
}
