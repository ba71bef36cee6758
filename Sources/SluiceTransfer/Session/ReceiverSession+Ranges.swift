import Sluice

#if canImport(Glibc)
    import Glibc
#endif

// MARK: Ranges of a transfer over several connections

extension ReceiverSession {
    /// JOIN: admitted to the transfer (JOINED), or refused (ERROR, and the connection closes).
    func joinTransfer(_ join: TransferJoin) {
        guard let receiver else {
            perform(machine.handle(.transferJoined("the receiver is shutting down")))
            return
        }
        switch receiver.join(join, session: id) {
        case .success(let group):
            self.group = group
            perform(machine.handle(.transferJoined(nil)))
        case .failure(let refusal):
            perform(machine.handle(.transferJoined(refusal.reason)))
        }
    }

    /// RANGE: admitted against the file's other ranges, then received into the file the
    /// transfer shares (opened by the first of its ranges to arrive).
    func openRange(_ request: EntryRequest, _ range: ByteRange) {
        guard let group else { return }
        let shared: SharedFile
        if let found = group.files[request.relative] {
            shared = found
        } else {
            guard group.openFiles < TransferGroup.maxOpenFiles else {
                let reason = "busy: \(TransferGroup.maxOpenFiles) files of this transfer are being received in ranges"
                perform(machine.handle(.fileOpened(.failure(.refused(.busy, reason)))))
                return
            }
            shared = SharedFile(
                relative: request.relative, header: request.header, token: request.attributes.resumeToken)
            shared.readmits = group.isTaskGroup
            group.files[request.relative] = shared
            let store = self.store
            let (overwrite, resume, continueHeld) = (
                options.overwrite || request.header.replaces, options.resume, machine.continuesHeld
            )
            store.pool.submit(
                {
                    store.openRangedFile(
                        request, overwrite: overwrite, resume: resume, continueHeld: continueHeld)
                }, completingOn: loop
            ) { [self] result in
                if case .success(let (opened, _)) = result { logStartedOver(opened) }
                shared.didOpen(result)
            }
        }
        if let refusal = shared.admit(range, of: request.header) {
            perform(machine.handle(.fileOpened(.failure(refusal))))
            return
        }
        shared.whenOpen { [self] in
            guard !ended else {
                shared.note(range, holds: shared.heldBytes(of: range))
                return
            }
            guard let opened = shared.opened else {
                perform(machine.handle(.fileOpened(.failure(shared.failure ?? .failed(.io, "cannot open the file")))))
                pump()
                return
            }
            let held = shared.heldBytes(of: range)
            let file = ActiveFile(
                opened: opened, request: request, digest: machine.digest, inflate: nil, writebackWindow: writeback,
                shared: shared, range: range, held: held)
            self.file = file
            connection.inbound.resize(to: inboundShare)
            guard held > 0 else {
                perform(machine.handle(.fileOpened(.success(0))))
                pump()
                return
            }
            if machine.checksHeld {
                let vouched =
                    opened.vouched && shared.token != nil && request.attributes.resumeToken == shared.token
                    && shared.mayVouch(range)
                if !vouched {
                    file.heldCheck = HeldCheck(worker: heldHasher, fd: opened.fd, from: range.start, length: held)
                }
                perform(machine.handle(.fileOpened(.success(held), vouched: vouched)))
                pump()
                return
            }
            guard advance(file, .checkPrefix) != nil else { return }
            hasher.hashRange(file.digest, of: opened.fd, from: range.start, length: held) { [self] ok in
                switch advance(file, ok ? .prefixChecked : .failed) {
                case .abandon:
                    guard !ok, !ended, self.file === file else {
                        releaseRange(file)  // let go while it was hashed: it keeps what it holds
                        return
                    }
                    self.file = nil
                    releaseRange(file, holding: 0)
                    let reason = "read \(quoted(opened.display)): cannot read the held part of the range"
                    perform(machine.handle(.fileOpened(.failure(.failed(.io, reason)))))
                case .proceed:
                    perform(machine.handle(.fileOpened(.success(held))))
                case .nothing, .ignore, .failWrite, nil:
                    return
                }
                pump()
            }
        }
    }

    /// RANGE-END and the data checked by the machine: verify the range's SHA-256; when it was
    /// the last range of the file, read the whole file back and verify its SHA-256, then move
    /// it into place.
    func commitRange(expecting digest: [UInt8], file fileDigest: [UInt8], held: [UInt8]?) {
        guard let file, advance(file, .verify) != nil else { return }
        hasher.finalize(file.digest) { [self] computed in
            checkHeld(file, against: held) { [self] heldFailure in
                commitRange(file, digest: digest, computed: computed, fileDigest: fileDigest, heldFailure: heldFailure)
            }
        }
    }

    func commitRange(
        _ file: ActiveFile, digest: [UInt8], computed: [UInt8], fileDigest: [UInt8], heldFailure: EntryRejection?
    ) {
        guard let shared = file.shared, let range = file.range else { return }
        guard !ended, file.lifecycle.phase == .verifying else { return }
        // A write that failed (no space, past what the file system holds) is said as such, not
        // as the digest it left wrong.
        let writeFailure = file.target.failure.map { EntryRejection.failed(.io, $0.description) }
        let mismatch = computed == digest ? nil : EntryRejection.failed(.data, "\(machine.digest) mismatch (\(range))")
        // Every range of the file must carry the same digest of the whole file: ranges sent by
        // different tasks that read different contents never make one file.
        var failure = writeFailure ?? heldFailure ?? mismatch
        if failure == nil && !shared.agree(on: fileDigest) {
            failure = .failed(.data, "\(range): another range of the file carried another digest of the whole file")
        }
        if let rejection = failure {
            guard advance(file, .failed) != nil else { return }
            self.file = nil
            releaseRange(file, holding: 0)
            perform(machine.handle(.rangeCommitted(rejection, fileStored: false)))
            pump()
            return
        }
        if let group, let task = group.taskOfSession[id] { group.rangeTasks.insert(task) }
        guard shared.verify(range) else {
            guard advance(file, .stored) != nil else { return }
            self.file = nil
            perform(machine.handle(.rangeCommitted(nil, fileStored: false)))
            pump()
            return
        }
        // Every range is in: the whole file, read back, must match the sender's digest.
        // From here this session owns the file's descriptors (the transfer leaves it be).
        shared.finished = true
        let whole = FileDigest(machine.digest)
        guard advance(file, .commit) != nil else { return }
        hasher.hashRange(whole, of: file.opened.fd, from: 0, length: shared.header.size) { _ in }
        hasher.finalize(whole) { [self] computed in
            guard computed == fileDigest else {
                _ = advance(file, .failed)
                if self.file === file { self.file = nil }
                // A task group's next attempt starts the file over, rather than finding it failed.
                if let group, group.files[shared.relative] === shared { group.files[shared.relative] = nil }
                let opened = file.opened
                store.pool.submit { [store] in store.abandon(opened, keep: false) }
                guard !ended else { return }
                perform(
                    machine.handle(
                        .rangeCommitted(
                            .failed(.data, "\(machine.digest) mismatch (whole file)"), fileStored: false)))
                pump()
                return
            }
            let store = self.store
            let (request, opened, header) = (file.request, file.opened, shared.header)
            let (overwrite, fsync) = (options.overwrite || header.replaces, options.fsync)
            store.pool.submit(
                {
                    store.commitRanged(
                        opened, header: header, relative: request.relative, overwrite: overwrite, fsync: fsync,
                        attributes: request.attributes)
                },
                completingOn: loop
            ) { [self] rejection in
                _ = advance(file, .stored)
                if self.file === file { self.file = nil }
                guard !ended else { return }
                perform(
                    machine.handle(
                        .rangeCommitted(rejection, fileStored: rejection == nil, resumed: shared.heldTotal)))
                pump()
            }
        }
    }

    /// The range is let go (the connection ended, or the range failed): the shared file
    /// keeps what the range holds, for a resume; the transfer closes it when it ends.
    func releaseRange(_ file: ActiveFile, holding bytes: UInt64? = nil) {
        guard let shared = file.shared, let range = file.range, !shared.finished else { return }
        shared.note(range, holds: bytes ?? (file.held + file.confirmed))
    }
}
