import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The receiver's state of the file being received: its temporary file, digest, decoder.
final class ActiveFile {
    let opened: OpenedFile
    let request: EntryRequest
    /// The digest agreed with the sender, of what the file holds.
    let digest: FileDigest
    /// Decompresses the file's data on the hasher's worker, when it comes compressed.
    let workerInflate: WorkerInflate?
    /// Bytes written to the temporary file (after the held prefix), or handed to the worker
    /// that writes them.
    var written: UInt64 = 0
    /// Of those, the bytes known to be in the file: a prefix, as the worker writes in order.
    /// What a range let go holds for a resume.
    var confirmed: UInt64 = 0
    /// Its writes, with their writeback: by the session's `DigestWorker`, from the inbound
    /// buffer's lent bytes or its own slots; on the loop only for a range whose descriptor
    /// could not be duplicated (`lends` false).
    let target: WriteTarget
    /// Whether its bytes may be lent to the worker to write. A range's are only through a
    /// descriptor of its own: the transfer closes the shared one when its last session leaves,
    /// which may be before this session's worker is done.
    let lends: Bool
    /// Where it is in its life: what its session may do with it (`FileLifecycle`), changed only
    /// by `handle(_:)`.
    private(set) var lifecycle = FileLifecycle()
    /// For a range: the file shared with the other connections of the transfer, the range,
    /// and the bytes of it held from an interrupted transfer.
    let shared: SharedFile?
    let range: ByteRange?
    let held: UInt64
    /// With `held-sha256`: the SHA-256 of the held bytes, computed beside the data.
    var heldCheck: HeldCheck?
    /// Where this session's bytes start in the file.
    let base: UInt64
    /// Sent as a delta: the receiver's old copy its COPYs read from.
    var basis: BasisFile?

    /// With `writebackWindow`, writeback of what was written is started each time that much
    /// more has arrived (receive with fsync).
    init(
        opened: OpenedFile, request: EntryRequest, digest: TransferDigest, inflate: StageDriver?,
        writebackWindow: UInt64?, shared: SharedFile? = nil, range: ByteRange? = nil, held: UInt64 = 0
    ) {
        let fileDigest = FileDigest(digest)
        self.digest = fileDigest
        self.opened = opened
        self.request = request
        self.shared = shared
        self.range = range
        self.held = held
        let base = range.map { $0.start + held } ?? opened.offset
        self.base = base
        let own = shared == nil ? -1 : fcntl(opened.fd, F_DUPFD_CLOEXEC, 0)
        lends = shared == nil || own >= 0
        target = WriteTarget(
            fd: own >= 0 ? own : opened.fd, display: opened.display, writebackWindow: writebackWindow, start: base,
            owned: own >= 0)
        let target = self.target
        workerInflate = inflate.map { WorkerInflate($0, writingTo: target, at: base, hashing: fileDigest) }
    }

    var position: UInt64 { base + written }

    /// Hands `event` to its lifecycle (`FileLifecycle.handle(_:)`): the one way its phase changes.
    func handle(_ event: FileLifecycle.Event) throws(FileLifecycle.IllegalTransition) -> FileLifecycle.Effect {
        try lifecycle.handle(event)
    }
}
