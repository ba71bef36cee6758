import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The digests a sync with `--checksum` computes before its CHECKs (`TransferSender+Checksum`):
/// whether they started, the files waiting, and how many jobs run. Changed only by its methods.
struct SenderChecksums {
    /// The receiver said HELLO and offers sync: the digests are computed.
    private(set) var started = false
    /// How many jobs run on the pool.
    private(set) var running = 0
    /// The entries waiting for their digest, the next last.
    private var queue: [Int] = []

    /// The digests start, of `files` (entry indices, in their CHECKs' order).
    mutating func start(_ files: [Int]) {
        started = true
        queue = files.reversed()
    }

    /// More `files` to hash (entries listed while the digests are computed), after those waiting.
    mutating func add(_ files: [Int]) {
        queue.insert(contentsOf: files.reversed(), at: 0)
    }

    /// The files of the next job (at most `perJob`), counted as running, when fewer than `jobs`
    /// run and some wait; nil otherwise.
    mutating func nextJob(jobs: Int, perJob: Int) -> [Int]? {
        guard running < jobs, !queue.isEmpty else { return nil }
        var files: [Int] = []
        while files.count < perJob, let index = queue.popLast() { files.append(index) }
        running += 1
        return files
    }

    /// A job is done.
    mutating func jobDone() {
        running -= 1
    }
}

extension TransferSender {
    /// Digests computed at once (`--checksum`): one job per core of a small machine.
    static let checksumJobs = 2

    /// Once the receiver said HELLO and offers sync: the digests of the files to CHECK, in
    /// their order, on the pool; each CHECK goes when its digest is in.
    func startChecksums() {
        checksums.start(machine.checksumsToCompute)
        computeChecksums()
    }

    /// Entries arrived while the digests are computed (the walk goes on): those of the files
    /// among their CHECKs (from `start` in the machine's `checks`) are computed too.
    func checksumsArrived(from start: Int) {
        guard checksums.started, machine.settings.checksum, inspect({ $0.syncing }), start < machine.checks.endIndex
        else {
            return
        }
        let files = machine.checks[start...].filter(machine.isFile)
        checksums.add(files)
        computeChecksums()
    }

    /// Files a job hashes, one after another: fewer hand-overs between the loop and the pool.
    static let checksumsPerJob = 32

    private func computeChecksums() {
        guard let loop, !ended else { return }
        let algorithm = machine.digest
        while let job = checksums.nextJob(jobs: Self.checksumJobs, perJob: Self.checksumsPerJob) {
            let files = job.map { index -> (Int, String?) in
                if case .file(let path) = entries[index].kind { return (index, path) }
                return (index, nil)
            }
            WorkerPool.shared.submit(
                { files.map { index, path in (index, path.flatMap { Self.digest(of: $0, algorithm) }) } },
                completingOn: loop
            ) { [weak self] digests in
                guard let self, !self.ended else { return }
                self.checksums.jobDone()
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
