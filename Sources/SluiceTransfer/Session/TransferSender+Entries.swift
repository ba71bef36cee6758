import Sluice

extension TransferSender {
    /// Opens entry `index` (a file by path, or a stream) and tells the machine what it found.
    func openEntry(_ index: Int) {
        if machine.announcedAgain.contains(index) {
            tally.announcedAgain(index)
        }
        // Read in place: a copy of the entry would retain and release its strings.
        switch entries[index].kind {
        case .directory, .symlink, .special:
            perform(machine.handle(.entryOpened(index, .failure(LocalFailure("a directory or link has no data")))))
        case .file:
            openFileEntry(index)
        case .stream(let slot):
            let stream = streams[slot]
            current = OutgoingFile(index: index, fd: nil, stream: stream, size: nil, digest: machine.digest)
            stream.delegate = sourceWatcher
            if let loop { stream.schedule(on: loop) }
            if stream.streamStatus == .notOpen { stream.open() }
            let entry = entries[index]
            let info = OpenedEntry(
                size: nil, mode: entry.mode, mtimeSeconds: entry.mtimeSeconds, mtimeNanoseconds: entry.mtimeNanoseconds)
            perform(machine.handle(.entryOpened(index, .success(info))))
        }
    }

    /// Entry `index`'s file is open (on a worker, `TransferSender+Reading`): to the machine.
    func fileOpened(_ index: Int, _ result: Result<OpenedSource, LocalFailure>) {
        switch result {
        case .failure(let failure):
            perform(machine.handle(.entryOpened(index, .failure(failure))))
        case .success(let opened):
            tally.sized(index, opened.size)
            let file = OutgoingFile(
                index: index, fd: opened.fd, stream: nil, size: opened.size, digest: machine.digest,
                openedMtime: opened.mtime, preloaded: opened.bytes, changed: opened.changed,
                readsOnLoop: opened.readsOnLoop)
            current = file
            let info = OpenedEntry(
                size: opened.size, mode: opened.mode, mtimeSeconds: Int64(opened.mtime.tv_sec),
                mtimeNanoseconds: UInt32(opened.mtime.tv_nsec))
            perform(machine.handle(.entryOpened(index, .success(info))))
        }
    }

    /// ACCEPT arrived: hash the prefix the receiver holds (on a worker), then send the rest.
    func startData(_ index: Int, offset: UInt64, compressed: Bool, range: ByteRange?) {
        guard let file = current, file.index == index, let hasher else { return }
        if machine.sendingDelta, startDelta(file, compressed: compressed, offset: offset) { return }
        let sparse = machine.sendingSparse && range == nil && file.fd != nil
        if let range, let fd = file.fd {
            file.accepted(compressed: compressed, sparse: sparse, range: range)
            file.resumes(holding: offset)
            tally.resumes(index, offset: offset, range: true)
            guard offset > 0 else {
                proceed(file, .start)
                return
            }
            if startHeldCheck(file, fd: fd, from: range.start, length: offset) { return }
            guard step(file, .hashPrefix) != nil else { return }
            hasher.hashRange(file.digest, of: fd, from: range.start, length: offset) { [weak self] ok in
                self?.prefixHashed(file, ok)
            }
            return
        }
        file.accepted(compressed: compressed, sparse: sparse, range: nil)
        if compressed, !startCompression(file) { return }
        guard offset > 0, let fd = file.fd else {
            proceed(file, .start)
            return
        }
        file.resumes(holding: offset)
        tally.resumes(index, offset: offset, range: false)
        if startHeldCheck(file, fd: fd, from: 0, length: offset) { return }
        guard step(file, .hashPrefix) != nil else { return }
        hasher.hashPrefix(file.digest, of: fd, length: offset) { [weak self] ok in
            self?.prefixHashed(file, ok)
        }
    }

    /// A compressed file's one raw deflate stream, compressed in blocks on the workers: false
    /// when it cannot be made (the file has failed then).
    func startCompression(_ file: OutgoingFile) -> Bool {
        let made = Result { () throws(SluiceError) in
            try ParallelDeflate(format: .deflate, level: options.compressionLevel, threads: options.threads)
        }
        switch made {
        case .success(let stage):
            let driver = StageDriver(stage)
            if let loop {
                driver.attach(to: loop) { [weak self, weak file] in
                    guard let self, let file, self.current === file else { return }
                    self.produce()
                }
            }
            deflate = driver
        case .failure(let error):
            perform(machine.handle(.readFailed(error.description)))
            advance()
            return false
        }
        if rawBuffer == nil { rawBuffer = ByteBuffer(capacity: options.chunkSize.bytes) }
        return true
    }

    /// With `held-sha256`: hashes the bytes the receiver holds with SHA-256 beside the rest,
    /// which may go out at once (the agreed digest covers only the rest); not at all when the
    /// receiver said they were written under this file's TOKEN. False without `held-sha256`.
    private func startHeldCheck(_ file: OutgoingFile, fd: Int32, from start: UInt64, length: UInt64) -> Bool {
        guard checkHeldApart(file, fd: fd, from: start, length: length) else { return false }
        proceed(file, .start)
        return true
    }

    /// With `held-sha256`: has the held bytes hashed with SHA-256 apart (`file.heldCheck`), or
    /// counts them vouched for; false (nothing done) without `held-sha256`.
    func checkHeldApart(_ file: OutgoingFile, fd: Int32, from start: UInt64, length: UInt64) -> Bool {
        guard machine.checksHeld, let heldHasher else { return false }
        if machine.heldVouched {
            tally.vouched(length)
        } else {
            file.checksHeld(HeldCheck(worker: heldHasher, fd: fd, from: start, length: length))
        }
        return true
    }

    /// The held part is hashed: the rest may go out.
    private func prefixHashed(_ file: OutgoingFile, _ ok: Bool) {
        guard current === file, !ended else { return }
        guard ok else {
            perform(machine.handle(.readFailed("read \(quoted(localPath(file))): \(Errno.current)")))
            advance()
            return
        }
        proceed(file, .prefixHashed)
    }

    /// Hands `file`'s lifecycle `event`, one that may let its data go: produces if it does.
    func proceed(_ file: OutgoingFile, _ event: SendLifecycle.Event) {
        if step(file, event) == .produce { produce() }
    }

    func localPath(_ file: OutgoingFile) -> String {
        if case .file(let path) = entries[file.index].kind { return path }
        return entries[file.index].relative
    }
}
