import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The signatures of a basis being computed and sent: jobs in flight, and what is done but
/// waits for an earlier batch to go first.
final class SignatureWork {
    /// Jobs at once, and blocks per job.
    static let jobs = 2
    static let blocksPerJob = 2048
    let file: ActiveFile
    let basis: BasisFile
    var nextToCompute: UInt64 = 0
    var nextToSend: UInt64 = 0
    var running = 0
    var done: [UInt64: [Delta.Signature]] = [:]

    init(file: ActiveFile, basis: BasisFile) {
        self.file = file
        self.basis = basis
    }
}

/// The receiver's copy of a file sent as a delta (its basis), open for reading while the new
/// file is rebuilt: closed once the last job that copies from it has run.
final class BasisFile: @unchecked Sendable {
    let fd: Int32
    let size: UInt64
    let blockSize: Int

    init(fd: Int32, size: UInt64) {
        self.fd = fd
        self.size = size
        blockSize = Delta.blockSize(forBasis: size)
    }

    deinit { closeDescriptor(fd) }

    var blockCount: UInt64 { Delta.blockCount(size, blockSize) }
}

extension ReceiverStore {
    /// The file at `request`'s final name, open for reading, when it can be a basis: a regular
    /// file of at most `Delta.maximumBlocks` blocks, opened without waiting
    /// (`EntryHandle.openRegular`). Nil where there is none (nothing there, an empty file, one
    /// too large or unreadable): the new file comes whole. A link, FIFO, socket, device or
    /// directory at the name fails the file ("not a regular file"): it is never opened, so no
    /// FIFO holds a disk worker.
    func openBasis(_ request: EntryRequest) -> Result<BasisFile?, EntryRejection> {
        guard let name = request.components.last else { return .success(nil) }
        let path = request.components.dropLast().joined(separator: "/")
        let parent = path.isEmpty ? dup(destination.fd) : Destination.openBeneath(destination.fd, path)
        guard parent >= 0 else { return .success(nil) }
        defer { closeDescriptor(parent) }
        let fd: Int32
        let size: UInt64
        switch EntryHandle.openRegular(
            parent, name, flags: O_RDONLY, display: destination.display(request.relative))
        {
        case .success(let (descriptor, status)): (fd, size) = (descriptor, UInt64(clamping: status.st_size))
        case .failure(.notRegular(let rejection)): return .failure(rejection)
        case .failure(.missing), .failure(.failed): return .success(nil)
        }
        guard size > 0, Delta.blockCount(size, Delta.blockSize(forBasis: size)) <= Delta.maximumBlocks else {
            closeDescriptor(fd)
            return .success(nil)
        }
        return .success(BasisFile(fd: fd, size: size))
    }
}

extension ReceiverSession {
    /// FILE flagged delta: opens the temporary file and the basis, sends the basis's signatures
    /// (SIGS, a batch at a time as the connection takes them), then tells the machine, which
    /// answers ACCEPT. Flagged resumable, the file goes on from what an interrupted delta
    /// rebuilt at its temporary name (where its resume mark is the new file's): those bytes
    /// are a prefix of the new file whatever basis they came from, and are checked as a
    /// resumed file's held bytes are; the partial is kept when the delta is interrupted again.
    func openDelta(_ request: EntryRequest) {
        let store = self.store
        let (resume, continueHeld) = (options.resume, machine.continuesHeld)
        store.pool.submit(
            { () -> (Result<OpenedFile, EntryRejection>, BasisFile?) in
                let opened = store.openFile(request, overwrite: true, resume: resume, continueHeld: continueHeld)
                guard case .success(let file) = opened else { return (opened, nil) }
                switch store.openBasis(request) {
                case .success(let basis): return (opened, basis)
                case .failure(let rejection):
                    // Not a file to rebuild from: this file fails, its partial kept for a resume.
                    store.abandon(file, keep: true)
                    return (.failure(rejection), nil)
                }
            }, completingOn: loop
        ) { [self] opened, basis in
            switch opened {
            case .failure(let rejection):
                perform(machine.handle(.deltaOpened(.failure(rejection))))
            case .success(let file):
                logStartedOver(file)
                guard !ended else {
                    store.pool.submit { store.abandon(file, keep: true) }
                    return
                }
                let inflate = makeInflate(request.header, after: file.offset)
                guard inflate != nil || !request.header.compressed else {
                    store.pool.submit { store.abandon(file, keep: true) }
                    perform(machine.handle(.deltaOpened(.failure(.failed(.io, "inflate: cannot initialise zlib")))))
                    pump()
                    return
                }
                let active = ActiveFile(
                    opened: file, request: request, digest: machine.digest, inflate: inflate,
                    writebackWindow: writeback)
                active.basis = basis
                // Rebuilt into a new file, or one resumed at its size, each byte written once:
                // the basis's holes, and zeros sent, stay holes.
                active.target.keepsHoles = true
                self.file = active
                connection.inbound.resize(to: inboundShare)
                guard file.offset > 0 else {
                    sendSignatures(of: active)
                    break
                }
                checkHeldPrefix(active) { [self] failure in
                    if let failure {
                        perform(machine.handle(.deltaOpened(.failure(failure))))
                    } else {
                        sendSignatures(of: active)
                    }
                }
            }
            pump()
        }
    }

    /// The machine hears the delta's file is open: the basis's size (nil: none), and the bytes
    /// held from an interrupted delta.
    private func deltaOpened(_ file: ActiveFile, basisSize: UInt64?) {
        let opened = file.opened
        perform(
            machine.handle(
                .deltaOpened(.success(basisSize), held: opened.offset, vouched: machine.checksHeld && opened.vouched)))
    }

    /// Sends the signatures of `file`'s basis: computed on the pool, `SignatureWork.jobs` jobs
    /// at once (one per core of a small machine), sent in order as SIGS while the connection
    /// takes them; then the machine hears the file is open (and answers ACCEPT).
    func sendSignatures(of file: ActiveFile) {
        guard let basis = file.basis else {
            deltaOpened(file, basisSize: nil)
            return
        }
        let work = SignatureWork(file: file, basis: basis)
        signing = work
        computeSignatures(work)
    }

    /// Starts jobs while fewer than `SignatureWork.jobs` run, blocks remain, and the connection
    /// keeps up.
    private func computeSignatures(_ work: SignatureWork) {
        guard !ended, signing === work, self.file === work.file else { return }
        guard outbox.isEmpty else {
            afterSent = { [weak self] in self?.computeSignatures(work) }
            return
        }
        let basis = work.basis
        while work.running < SignatureWork.jobs, work.nextToCompute < basis.blockCount {
            let first = work.nextToCompute
            let count = Int(min(UInt64(SignatureWork.blocksPerJob), basis.blockCount - first))
            work.nextToCompute += UInt64(count)
            work.running += 1
            store.pool.submit(
                {
                    Delta.signatures(
                        of: basis.fd, size: basis.size, blockSize: basis.blockSize, first: first, count: count)
                },
                completingOn: loop
            ) { [self] signatures in
                work.running -= 1
                guard !ended, signing === work, self.file === work.file else { return }
                guard let signatures, signatures.count == count else {
                    // The old file cannot be read as it was: the new one comes whole.
                    signing = nil
                    work.file.basis = nil
                    deltaOpened(work.file, basisSize: nil)
                    pump()
                    return
                }
                work.done[first] = signatures
                sendComputedSignatures(work)
                pump()
            }
        }
    }

    /// Sends what is computed, in order; then more, or the end.
    private func sendComputedSignatures(_ work: SignatureWork) {
        let basis = work.basis
        while let signatures = work.done.removeValue(forKey: work.nextToSend) {
            var offset = 0
            while offset < signatures.count {
                let part = Array(signatures[offset..<min(signatures.count, offset + Delta.signaturesPerMessage)])
                let batch = SignatureBatch(
                    blockSize: basis.blockSize, size: basis.size, first: work.nextToSend + UInt64(offset),
                    signatures: part)
                sendOrdered(Frame.signatures(batch).encoded)
                offset += part.count
            }
            work.nextToSend += UInt64(signatures.count)
        }
        if work.nextToSend == basis.blockCount {
            signing = nil
            deltaOpened(work.file, basisSize: basis.size)
            return
        }
        computeSignatures(work)
    }

    /// The decompressor of a file whose FILE says compressed (nil otherwise, or when zlib cannot
    /// start): raw deflate, bounded by the bytes still to come after `offset` and the size limit.
    func makeInflate(_ header: EntryHeader, after offset: UInt64) -> StageDriver? {
        guard header.compressed else { return nil }
        // Of unknown size, no more than a file can hold (`Wire.maxFileSize`): no byte it writes
        // lies where no offset reaches.
        let most = header.sizeKnown ? header.size : Wire.maxFileSize
        var maxOutput = most - min(offset, most)
        if let maxSize = options.maxSize { maxOutput = min(maxOutput, maxSize) }
        let limit = InflateLimit(maxOutputBytes: Int(clamping: maxOutput))
        return (try? Inflate(format: .deflate, limit: limit)).map { StageDriver($0) }
    }

    /// COPY the machine allowed: the basis's bytes `offset ..< offset + length` become the
    /// file's next ones, copied and hashed by the hasher's worker in order with its writes.
    /// In a compressed delta the literal bytes before it are all written first, by the same
    /// worker (`WorkerInflate.settle`).
    func deliverCopy(offset: UInt64, length: UInt64) {
        guard let file, let basis = file.basis else { return }
        hasher.copy(
            file.digest, from: basis, at: offset, length: length, to: file.target, position: file.position,
            after: file.workerInflate)
        file.written += length
        bytesStored += length
    }
}
