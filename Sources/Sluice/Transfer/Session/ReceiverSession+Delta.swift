#if canImport(Glibc)
    import Glibc
#endif

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
    /// file (not a link), of at most `Delta.maximumBlocks` blocks. Nil otherwise.
    func openBasis(_ request: EntryRequest) -> BasisFile? {
        guard let name = request.components.last else { return nil }
        let path = request.components.dropLast().joined(separator: "/")
        let parent = path.isEmpty ? dup(destination.fd) : Destination.openBeneath(destination.fd, path)
        guard parent >= 0 else { return nil }
        defer { closeDescriptor(parent) }
        let fd = openat(parent, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_size > 0,
            Delta.blockCount(UInt64(st.st_size), Delta.blockSize(forBasis: UInt64(st.st_size))) <= Delta.maximumBlocks
        else {
            closeDescriptor(fd)
            return nil
        }
        return BasisFile(fd: fd, size: UInt64(st.st_size))
    }
}

extension ReceiverSession {
    /// FILE flagged delta: opens the temporary file and the basis, sends the basis's signatures
    /// (SIGS, a batch at a time as the connection takes them), then tells the machine, which
    /// answers ACCEPT.
    func openDelta(_ request: EntryRequest) {
        let store = self.store
        let (resume, continueHeld) = (false, machine.continuesHeld)
        store.pool.submit(
            { () -> (Result<OpenedFile, EntryRejection>, BasisFile?) in
                let opened = store.openFile(request, overwrite: true, resume: resume, continueHeld: continueHeld)
                guard case .success = opened else { return (opened, nil) }
                return (opened, store.openBasis(request))
            }, completingOn: loop
        ) { [self] opened, basis in
            switch opened {
            case .failure(let rejection):
                perform(machine.handle(.deltaOpened(.failure(rejection))))
            case .success(let file):
                guard !ended else {
                    store.pool.submit { store.abandon(file, keep: false) }
                    return
                }
                let active = ActiveFile(
                    opened: file, request: request, digest: machine.digest, inflate: nil, writebackWindow: writeback)
                active.basis = basis
                self.file = active
                connection.inbound.resize(to: inboundShare)
                sendSignatures(of: active, from: 0)
            }
            pump()
        }
    }

    /// Sends the signatures of blocks `first…` of `file`'s basis, a message's worth per job on
    /// the pool, each once the connection has room; then the machine hears the file is open.
    private func sendSignatures(of file: ActiveFile, from first: UInt64) {
        guard !ended, self.file === file else { return }
        guard let basis = file.basis, first < basis.blockCount else {
            perform(machine.handle(.deltaOpened(.success(file.basis?.size))))
            return
        }
        guard outbox.isEmpty else {
            // The sender reads slowly: the next batch when the connection has sent these.
            afterSent = { [weak self] in self?.sendSignatures(of: file, from: first) }
            return
        }
        let count = Int(min(UInt64(Delta.signaturesPerMessage), basis.blockCount - first))
        store.pool.submit(
            {
                Delta.signatures(of: basis.fd, size: basis.size, blockSize: basis.blockSize, first: first, count: count)
            },
            completingOn: loop
        ) { [self] signatures in
            guard !ended, self.file === file else { return }
            guard let signatures, signatures.count == count else {
                // The old file cannot be read as it was: the new one comes whole.
                file.basis = nil
                perform(machine.handle(.deltaOpened(.success(nil))))
                pump()
                return
            }
            let batch = SignatureBatch(
                blockSize: basis.blockSize, size: basis.size, first: first, signatures: signatures)
            sendOrdered(Frame.signatures(batch).encoded)
            sendSignatures(of: file, from: first + UInt64(count))
            pump()
        }
    }

    /// COPY the machine allowed: the basis's bytes `offset ..< offset + length` become the
    /// file's next ones, copied and hashed by the hasher's worker in order with its writes.
    func deliverCopy(offset: UInt64, length: UInt64) {
        guard let file, let basis = file.basis else { return }
        hasher.copy(file.digest, from: basis, at: offset, length: length, to: file.target, position: file.position)
        file.written += length
        bytesStored += length
    }
}
