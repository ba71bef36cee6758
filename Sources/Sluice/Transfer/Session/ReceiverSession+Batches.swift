#if canImport(Glibc)
    import Glibc
#endif

/// A small file received whole into memory before anything of it touches the disk.
final class WholeFile {
    let request: EntryRequest
    let digest: FileDigest
    private(set) var bytes: [UInt8] = []

    /// Files received this way: eager (their data follows at once), of a known size of at most
    /// `Wire.eagerLimit` bytes, uncompressed; with `batch` offered, up to `Wire.wholeLimit`
    /// bytes when neither resumable (part of it may be here: it is opened) nor linked (a LINK
    /// may name it right after: it is answered before the next entry).
    static func takes(_ header: EntryHeader, batch: Bool) -> Bool {
        guard header.eager && header.sizeKnown && !header.compressed else { return false }
        return header.size <= Wire.eagerLimit
            || (batch && !header.resumable && !header.linked && header.size <= Wire.wholeLimit)
    }

    init(_ request: EntryRequest, digest: TransferDigest) {
        self.request = request
        self.digest = FileDigest(digest)
        bytes.reserveCapacity(Int(request.header.size))
    }

    func append(_ piece: UnsafeRawBufferPointer) {
        digest.update(piece)
        bytes.append(contentsOf: piece)
    }

    /// A HOLE in a small file: written as zeros (the machine checked it fits the size), hashed
    /// as the protocol hashes a hole.
    func appendHole(_ length: Int) {
        Wire.holeDigestInput(UInt64(length)).withUnsafeBytes { digest.update($0) }
        bytes.append(contentsOf: repeatElement(0, count: length))
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

    /// A small file received whole: its digest checked here, then created, written and
    /// settled on the lane with the files received whole before it and not yet stored (those
    /// of a BATCH are stored together at its end, `storeWholes`). The machine goes on at once
    /// (`.staged`); the file's answer follows its job (without fsync) or its batch (with).
    func storeWhole(_ whole: WholeFile, expecting digest: [UInt8]) {
        guard whole.digest.finalize() == digest else {
            perform(machine.handle(.committed(.failed(.data, "\(machine.digest) mismatch (data altered in transit)"))))
            return
        }
        wholesWaiting.append((whole.request, whole.bytes))
        wholesWaitingBytes += whole.bytes.count
        perform(machine.handle(.staged))
        if !machine.inBatch || wholesWaitingBytes >= Wire.batchTarget { storeWholes() }
    }

    /// Stores the small files received whole and waiting, in order, with one job on the lane;
    /// each is answered in its turn when the job is done.
    func storeWholes() {
        guard !wholesWaiting.isEmpty else { return }
        let (files, bytes) = (wholesWaiting, wholesWaitingBytes)
        wholesWaiting.removeAll()
        wholesWaitingBytes = 0
        let (store, overwrite, fsync) = (self.store, options.overwrite, options.fsync)
        laneJobs += 1
        laneBytes += bytes
        lane.submit({ store.storeWholes(files, overwrite: overwrite, fsync: fsync) }, completingOn: loop) {
            [self] outcomes in
            laneJobs -= 1
            laneBytes -= bytes
            for (outcome, file) in zip(outcomes, files) {
                switch outcome {
                case .stored:
                    perform(machine.handle(.stagedCommitted(nil)))
                case .rejected(let rejection) where !fsync:
                    perform(machine.handle(.stagedCommitted(rejection)))
                case .rejected(let rejection):
                    // Answered in its turn among the batch's files.
                    setAside(.failed(rejection), bytes: 0)
                case .staged(let staged):
                    setAside(.file(staged), bytes: UInt64(file.bytes.count))
                }
            }
            if ended {
                commitStagedAfterEnd()
            } else if batchFull || !afterStaged.isEmpty {
                commitStaged()
            } else {
                commitWhenQuiet()
            }
            pump()
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

    /// Once every staged file is in place: sets the directories' attributes and, with fsync,
    /// flushes the file system once more, so that goodbye means every file stored is on disk
    /// under its name.
    func settleDirectories() {
        afterStaged.append { [self] in
            let store = self.store
            let directories = createdDirectories
            createdDirectories.removeAll()
            let box = UncheckedBox(directories)
            let fsync = options.fsync
            store.pool.submit(
                { (store.settleDirectories(box.value), fsync ? store.flushAll() : nil) }, completingOn: loop
            ) { [self] warnings, failure in
                for warning in warnings { receiver?.emit(.warning(sessionID: id, warning)) }
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
