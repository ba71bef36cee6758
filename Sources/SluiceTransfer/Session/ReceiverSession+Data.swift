import Sluice

#if canImport(Glibc)
    import Glibc
#endif

extension ReceiverSession {
    // MARK: Data

    /// Passes DATA bytes through the file's data path: decompress, check with the machine,
    /// write, hash — by lending them to the hasher's worker (a whole file, a range, a
    /// compressed file decompressed there), or in memory (a small file received whole).
    /// Returns how many it took: fewer when the hasher is full (the rest waits in the inbound
    /// buffer, and reading stops, until `onRoom`).
    func deliver(_ piece: UnsafeRawBufferPointer) -> Int {
        if let wholeFile {
            let (allowed, actions) = machine.decoded(piece.count)
            guard allowed else {
                perform(actions)
                return piece.count
            }
            if wholeFile.count == 0, piece.count == wholeFile.size {
                // All of it in one piece (a BATCH's files mostly are): lent where it lies in the
                // inbound buffer to the job that stores it, not copied.
                wholeFile.lend(lendOut(piece))
            } else {
                wholeFile.append(piece)
            }
            bytesStored += UInt64(piece.count)
            return piece.count
        }
        guard let file else { return piece.count }
        if let inflater = file.workerInflate { return inflate(piece, of: file, with: inflater) }
        // Not when bytes are written directly: the disk is written from the hasher's aligned
        // slots, by its worker.
        if file.lends, !file.target.wantsAlignedWrites {
            return lend(piece, to: file, file.target)
        }
        guard hasher.hasRoom(for: 1) else {
            _ = advance(file, .hasherFull)
            return 0
        }
        let n = min(piece.count, hasher.room)
        store(UnsafeRawBufferPointer(rebasing: piece[0..<n]), to: file)
        return n
    }

    /// A HOLE the machine allowed: the file's next `length` bytes are zeros, left unwritten
    /// (the file is given its full size when it is settled) and hashed as a hole
    /// (`Wire.holeDigestInput`).
    func deliverHole(_ length: UInt64) {
        if let wholeFile {
            // The machine counted it within the file's size, which a file held whole keeps small.
            wholeFile.appendHole(Int(clamping: length))
            return
        }
        guard let file else { return }
        hasher.updateHole(file.digest, length: length)
        file.written += length
    }

    static func rejection(inflating error: SluiceError) -> EntryRejection {
        error.code == .limitExceeded
            ? .failed(.data, "more data than announced") : .failed(.data, "compressed data: \(error.reason)")
    }

    /// Bytes not lent (to be written past the page cache, or a range's, when its descriptor
    /// could not be duplicated): if the machine allows them, written at the file's end and
    /// hashed — by the hasher's worker from its aligned slots, or here.
    func store(_ bytes: UnsafeRawBufferPointer, to file: ActiveFile) {
        let (allowed, actions) = machine.decoded(bytes.count)
        guard allowed else {
            perform(actions)
            return
        }
        let target = file.target
        if target.wantsAlignedWrites {
            // To be written past the page cache (from aligned memory, which can wait for the
            // disk on the worker): copied for the worker.
            hasher.update(file.digest, bytes, writingTo: target, at: file.position)
        } else {
            // Written here: no piece of it is lent then, so the worker does not hold it.
            guard target.write(bytes, at: file.position) == .written else {
                let reason = target.failure?.description ?? "write \(quoted(file.opened.display)): failed"
                perform(machine.handle(.dataFailed(.failed(.io, reason))))
                return
            }
            hasher.update(file.digest, bytes)
            file.confirmed += UInt64(bytes.count)
        }
        file.written += UInt64(bytes.count)
        bytesStored += UInt64(bytes.count)
    }

    /// A file received whole, uncompressed: its bytes are written and hashed where they lie in
    /// the inbound buffer, by the hasher's worker, so that the loop goes on receiving meanwhile
    /// (the page-cache copy and the hash are most of a receiver's work). The buffer keeps lent
    /// bytes in place until they come back, reading into the space after them only; when that
    /// is full, this session reads nothing more until they are back. Returns the bytes taken:
    /// all of them.
    private func lend(_ piece: UnsafeRawBufferPointer, to file: ActiveFile, _ target: WriteTarget) -> Int {
        let (allowed, actions) = machine.decoded(piece.count)
        guard allowed else {
            perform(actions)
            return piece.count
        }
        let position = file.position
        file.written += UInt64(piece.count)
        bytesStored += UInt64(piece.count)
        let loan = lendOut(piece)
        hasher.writeLent(file.digest, loan, to: target, at: position) { [self] written in
            if written && file.confirmed == position - file.base { file.confirmed += UInt64(loan.bytes.count) }
            returned(loan)
            if !written { writeFailed(target) }
            pump()
        }
        return piece.count
    }

    /// Lends `piece` of the inbound buffer to a worker's job (`returned` when it is done).
    func lendOut(_ piece: UnsafeRawBufferPointer) -> LentBytes {
        piecesLent += 1
        receiver?.piecesLent += 1
        return connection.inbound.lend(piece)
    }

    /// A loan came back from the worker: the inbound buffer may move its bytes once all are.
    func returned(_ loan: LentBytes) {
        piecesLent -= 1
        loan.giveBack()
        if piecesLent == 0 { connection.fitInbound() }
    }

    /// Compressed DATA of a file decompressed on the worker: the piece is lent to a job that
    /// decompresses, writes and hashes it (`WorkerInflate`); what came out is counted with the
    /// machine when the job is done. Returns the bytes taken: all of them.
    private func inflate(_ piece: UnsafeRawBufferPointer, of file: ActiveFile, with inflater: WorkerInflate) -> Int {
        let loan = lendOut(piece)
        hasher.run({ inflater.take(loan.bytes) }) { [self] outcome in
            returned(loan)
            inflated(file, outcome)
            pump()
        }
        return piece.count
    }

    /// A worker's decompression of `file` came back: its bytes are counted with the machine
    /// (which may find them more than announced), and a failure fails the file — unless the
    /// file was let go meanwhile. With `ending` (END's flush, the stream finished): the data is
    /// complete.
    private func inflated(_ file: ActiveFile, _ outcome: WorkerInflate.Outcome, ending: Bool = false) {
        guard self.file === file, file.lifecycle.isOpenForData else { return }
        if outcome.produced > 0 {
            let (allowed, actions) = machine.decodedBytes(outcome.produced)
            guard allowed else { return perform(actions) }
            file.written += outcome.produced
            file.confirmed += outcome.produced
            bytesStored += outcome.produced
        }
        if let failure = outcome.failure {
            guard advance(file, .writeFailed) == .failWrite else { return }
            return perform(machine.handle(.dataFailed(failure)))
        }
        if ending && outcome.finished { perform(machine.handle(.dataFinished)) }
    }

    /// The hasher's worker could not write to the file: the file fails (unless its commit,
    /// already waiting for the worker, reports it).
    func writeFailed(_ target: WriteTarget) {
        guard let file, file.target === target, advance(file, .writeFailed) == .failWrite else { return }
        let reason = target.failure?.description ?? "write \(quoted(file.opened.display)): failed"
        perform(machine.handle(.dataFailed(.failed(.io, reason))))
        pump()
    }

    /// END arrived: flush the decompressor (when there is one) into the file.
    func finishData() {
        if wholeFile != nil {
            perform(machine.handle(.dataFinished))
            return
        }
        guard let file else { return }
        if let inflater = file.workerInflate {
            guard advance(file, .endArrived) != nil else { return }
            hasher.run({ inflater.finish() }) { [self] outcome in
                inflated(file, outcome, ending: true)
                pump()
            }
            return
        }
        perform(machine.handle(.dataFinished))
    }

    func roomForHashing() {
        guard !ended else { return }
        if let file { _ = advance(file, .room) }
        pump()
    }

    /// Hands `file`'s lifecycle `event` and returns what to do. An event its phase cannot take
    /// is this session's fault: the session ends with the message, and the file is forgotten
    /// as it stands (nil).
    func advance(_ file: ActiveFile, _ event: FileLifecycle.Event) -> FileLifecycle.Effect? {
        do {
            return try file.handle(event)
        } catch {
            if self.file === file { self.file = nil }
            let fault = SluiceError(.closed, operation: "receive", subject: peer, detail: error.description)
            perform(machine.handle(.connectionFailed(fault)))
            return nil
        }
    }

    /// Closes `file`'s descriptors on a worker once the writes queued for it are done (even
    /// when the loop stops meanwhile: `finishDiskWork` waits for the hand-over), keeping the
    /// partial when `keep`.
    func abandonAfterQueuedWrites(_ file: ActiveFile, keep: Bool) {
        let store = self.store
        let abandoned = file.opened
        store.handingOn.enter()
        hasher.afterQueued {
            store.pool.submit { store.abandon(abandoned, keep: keep) }
            store.handingOn.leave()
        }
    }

    // MARK: Opening and committing files

    func openFile(_ request: EntryRequest) {
        if WholeFile.takes(request.header, batch: machine.settings.eager && machine.settings.batch) {
            // Nothing touches the disk until the file is here and verified: then one job on
            // the lane creates, writes and settles it, while the next file arrives.
            wholeFile = WholeFile(request, into: wholeBytes, batched: machine.inBatch)
            perform(machine.handle(.fileOpened(.success(0))))
            return
        }
        let store = self.store
        let (overwrite, resume, continueHeld) = (
            options.overwrite || request.header.replaces, options.resume, machine.continuesHeld
        )
        store.pool.submit(
            { store.openFile(request, overwrite: overwrite, resume: resume, continueHeld: continueHeld) },
            completingOn: loop
        ) {
            [self] result in
            switch result {
            case .failure(let rejection):
                perform(machine.handle(.fileOpened(.failure(rejection))))
            case .success(let opened):
                logStartedOver(opened)
                guard !ended else {
                    store.pool.submit { store.abandon(opened, keep: true) }
                    return
                }
                didOpen(opened, request)
            }
            pump()
        }
    }

    /// Logs why a partial found at the file's temporary name was not continued, if it was not.
    func logStartedOver(_ opened: OpenedFile) {
        if let notice = opened.startedOver { warn(notice) }
    }

    private func didOpen(_ opened: OpenedFile, _ request: EntryRequest) {
        let header = request.header
        let inflate = makeInflate(header, after: opened.offset)
        if header.compressed {
            guard inflate != nil else {
                store.pool.submit { [store] in store.abandon(opened, keep: true) }
                perform(machine.handle(.fileOpened(.failure(.failed(.io, "inflate: cannot initialise zlib")))))
                return
            }
        }
        let direct =
            options.directIO
            && (!header.sizeKnown || header.size - min(opened.offset, header.size) >= Self.directMinimum)
        // Direct writes need block-aligned offsets: a partial is continued from its last whole
        // block (the few bytes after it come again, and are written over themselves).
        let block = UInt64(WriteTarget.directAlignment)
        let opened = direct ? opened.continued(at: opened.offset - opened.offset % block) : opened
        let file = ActiveFile(
            opened: opened, request: request, digest: machine.digest, inflate: inflate, writebackWindow: writeback)
        if direct { file.target.writeDirectly() }
        self.file = file
        connection.inbound.resize(to: inboundShare)
        guard opened.offset > 0, !header.eager else {
            // An eager file with held bytes is not continued here: the machine tells the
            // sender how many, drops the file (keeping the partial), and skips the data.
            perform(machine.handle(.fileOpened(.success(opened.offset))))
            return
        }
        checkHeldPrefix(file) { [self] failure in
            if let failure {
                perform(machine.handle(.fileOpened(.failure(failure))))
            } else {
                perform(
                    machine.handle(.fileOpened(.success(opened.offset), vouched: machine.checksHeld && opened.vouched)))
            }
        }
    }

    /// Checks the bytes `file` holds from an interrupted transfer (its `opened.offset`, more
    /// than none), as a resumed file's are: with `held-sha256`, apart with SHA-256 (HELD) while
    /// the rest arrives, or not at all when vouched for by the sender's token (the agreed digest
    /// covering only the rest); else hashed into the file's digest first, on the hasher's
    /// worker. `then` hears nil once the rest may come (at once, or when the hash is done), or
    /// why the file fails (the file is let go then).
    func checkHeldPrefix(_ file: ActiveFile, then: @escaping (EntryRejection?) -> Void) {
        let opened = file.opened
        if machine.checksHeld {
            if !opened.vouched {
                file.heldCheck = HeldCheck(worker: heldHasher, fd: opened.fd, from: 0, length: opened.offset)
            }
            then(nil)
            return
        }
        guard advance(file, .checkPrefix) != nil else { return }
        hasher.hashPrefix(file.digest, of: opened.fd, length: opened.offset) { [self] ok in
            switch advance(file, ok ? .prefixChecked : .failed) {
            case .abandon(let keep):
                // Let go while it was hashed (`keep` as the machine said), or unreadable.
                store.pool.submit { [store] in store.abandon(opened, keep: keep) }
                guard !ok, !ended, self.file === file else { return }
                self.file = nil
                then(.failed(.io, "read \(quoted(opened.display)): cannot read the held partial"))
            case .proceed:
                then(nil)
            case .nothing, .ignore, .failWrite, nil:
                return
            }
            pump()
        }
    }

    /// Nil when `file` held no bytes to check apart, or their SHA-256 is the sender's (HELD);
    /// else why the file fails. On the loop.
    func checkHeld(_ file: ActiveFile, against expected: [UInt8]?, _ then: @escaping (EntryRejection?) -> Void) {
        HeldCheck.outcome(of: file.heldCheck) { outcome in
            switch outcome {
            case .none:
                then(nil)
            case .digest(let computed):
                then(
                    computed == expected
                        ? nil : .failed(.data, "SHA-256 mismatch (held partial data differs from the sender's file)"))
            case .unreadable:
                then(.failed(.io, "read \(quoted(file.opened.display)): cannot read the held partial"))
            }
        }
    }

    func commitFile(expecting digest: [UInt8], held: [UInt8]?) {
        if let whole = wholeFile {
            wholeFile = nil
            storeWhole(whole, expecting: digest)
            return
        }
        guard let file, advance(file, .verify) != nil else { return }
        hasher.finalize(file.digest) { [self] computed in
            checkHeld(file, against: held) { [self] heldFailure in
                commitFile(file, digest: digest, computed: computed, heldFailure: heldFailure)
            }
        }
    }

    func commitFile(_ file: ActiveFile, digest: [UInt8], computed: [UInt8], heldFailure: EntryRejection?) {
        guard !ended, file.lifecycle.phase == .verifying else { return }
        var rejection: EntryRejection?
        if let failure = file.target.failure {
            rejection = .failed(.io, failure.description)
        } else if let heldFailure {
            rejection = heldFailure
        } else if computed != digest {
            let what =
                file.opened.offset > 0 && file.heldCheck == nil
                ? " (held partial data or data in transit altered)" : " (data altered in transit)"
            rejection = .failed(.data, "\(machine.digest) mismatch\(what)")
        }
        if let rejection {
            guard advance(file, .failed) != nil else { return }
            self.file = nil
            let abandoned = file.opened
            store.pool.submit { [store] in store.abandon(abandoned, keep: false) }
            perform(machine.handle(.committed(rejection)))
            pump()
            return
        }
        let store = self.store
        let (request, opened) = (file.request, file.opened)
        let (overwrite, fsync) = (options.overwrite || request.header.replaces, options.fsync)
        // The commit closes the descriptors, whatever becomes of the session meanwhile.
        guard advance(file, .commit) != nil else { return }
        if fsync {
            stage(file)
            return
        }
        store.pool.submit(
            {
                store.commit(
                    opened, header: request.header, relative: request.relative, overwrite: overwrite, fsync: fsync,
                    attributes: request.attributes)
            }, completingOn: loop
        ) { [self] rejection in
            _ = advance(file, .stored)
            if self.file === file { self.file = nil }
            perform(machine.handle(.committed(rejection)))
            pump()
        }
    }

    /// The machine lets the file go: abandoned now, or (while a worker holds its
    /// descriptors) by that work when it is done; a range keeps what it holds for its transfer.
    func dropFile(keep: Bool) {
        if let wholeFile {
            wholeBytes.truncate(to: wholeFile.start)
            if let loan = wholeFile.lent { returned(loan) }
        }
        wholeFile = nil
        guard let file else { return }
        self.file = nil
        hasher.discardFilling()
        guard case .abandon(let keep) = advance(file, .drop(keep: keep)) else { return }
        if file.shared != nil {
            releaseRange(file)
        } else {
            abandonAfterQueuedWrites(file, keep: keep)
        }
    }
}
