import Sluice

#if canImport(Glibc)
    import Glibc
#endif

extension TransferSender {
    /// Digests computed at once (`--checksum`): one job per core of a small machine.
    static let checksumJobs = 2

    /// Once the receiver said HELLO and offers sync: the digests of the files to CHECK, in
    /// their order, on the pool; each CHECK goes when its digest is in.
    func startChecksums() {
        checksumsStarted = true
        checksumQueue = machine.checksumsToCompute
        checksumQueue.reverse()
        computeChecksums()
    }

    /// Entries arrived while the digests are computed (the walk goes on): those of the files
    /// among their CHECKs (from `start` in the machine's `checks`) are computed too.
    func checksumsArrived(from start: Int) {
        guard checksumsStarted, machine.settings.checksum, machine.syncing, start < machine.checks.count else {
            return
        }
        let files = machine.checks[start...].filter(machine.isFile)
        checksumQueue.insert(contentsOf: files.reversed(), at: 0)
        computeChecksums()
    }

    /// Files a job hashes, one after another: fewer hand-overs between the loop and the pool.
    static let checksumsPerJob = 32

    private func computeChecksums() {
        guard let loop, !ended else { return }
        let algorithm = machine.digest
        while checksumsRunning < Self.checksumJobs, !checksumQueue.isEmpty {
            var batch: [(Int, String?)] = []
            while batch.count < Self.checksumsPerJob, let index = checksumQueue.popLast() {
                if case .file(let path) = entries[index].kind {
                    batch.append((index, path))
                } else {
                    batch.append((index, nil))
                }
            }
            checksumsRunning += 1
            let files = batch
            WorkerPool.shared.submit(
                { files.map { index, path in (index, path.flatMap { Self.digest(of: $0, algorithm) }) } },
                completingOn: loop
            ) { [weak self] digests in
                guard let self, !self.ended else { return }
                self.checksumsRunning -= 1
                for (index, digest) in digests { self.machine.checksumComputed(index, digest) }
                self.computeChecksums()
                self.advance()
            }
        }
    }

    /// The digest of the file at `path` (not following a link), or nil when it cannot be read.
    static func digest(of path: String, _ algorithm: TransferDigest) -> [UInt8]? {
        guard case .success(let fd) = Sluice.openFile(path, flags: O_RDONLY | O_NOFOLLOW | O_CLOEXEC, permissions: 0)
        else { return nil }
        defer { closeDescriptor(fd) }
        return FileDigest.hash(algorithm, of: fd, to: nil)
    }
}
