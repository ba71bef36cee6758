import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The file being sent: its life (`SendLifecycle`, changed only by `handle(_:)`) and the data
/// that goes with it (where its reads stand, its digest, its range, its delta).
final class OutgoingFile {
    let index: Int
    let fd: Int32?
    let stream: ReadStream?
    let size: UInt64?
    /// The digest agreed with the receiver, of the bytes read.
    let digest: FileDigest
    /// For a file: its mtime when it was opened (and announced).
    let openedMtime: timespec
    /// A small file's whole contents, read with its open on a worker: taken from here.
    let preloaded: [UInt8]?
    /// A small file read on the loop from the page cache, straight into the connection's
    /// buffer (`TransferSender.readOnLoop`), until its bytes are not there (then its reads go
    /// to a worker, `reader`).
    let readsOnLoop: Bool
    /// Its data goes through the deflate stream.
    private(set) var compressed = false
    /// For a range: only these bytes are sent.
    private(set) var range: ByteRange?
    /// With `held-sha256`: the SHA-256 of the bytes the receiver holds, computed beside the rest.
    private(set) var heldCheck: HeldCheck?
    /// Where it stands: announced, sending, finishing… (`handle(_:)` changes it).
    private(set) var lifecycle = SendLifecycle()
    /// Bytes read from the source (the resumed prefix included).
    private(set) var position: UInt64 = 0
    /// Sent as a delta: the receiver's signatures and the match.
    private(set) var delta: OutgoingDelta?
    /// Sent as data and holes (its reads find them).
    private(set) var sparse = false
    /// The reads of a file's data, on workers, once its data goes out.
    private(set) var reader: SourceReader?
    /// The file was written to while it was sent (its mtime or size changed since it was
    /// opened): known at the end of its data, checked on the worker for a file read there
    /// (`SendLifecycle.Phase.checkingChange`).
    private(set) var changed = false

    /// A file opened (on a worker: with its mtime, a small file's contents and whether it changed
    /// while they were read, or whether it is read on the loop), or a stream (`fd` nil).
    init(
        index: Int, fd: Int32?, stream: ReadStream?, size: UInt64?, digest: TransferDigest,
        openedMtime: timespec = timespec(), preloaded: [UInt8]? = nil, changed: Bool = false,
        readsOnLoop: Bool = false
    ) {
        self.digest = FileDigest(digest)
        self.index = index
        self.fd = fd
        self.stream = stream
        self.size = size
        self.openedMtime = openedMtime
        self.preloaded = preloaded
        self.changed = changed
        self.readsOnLoop = readsOnLoop
    }

    /// ACCEPT, for data sent as it is (not a delta): compressed or not, as data and holes or
    /// not, the whole file or `range` (whose reads start at its start).
    func accepted(compressed: Bool, sparse: Bool, range: ByteRange?) {
        delta = nil
        self.compressed = compressed
        self.sparse = sparse
        if let range {
            self.range = range
            position = range.start
        }
    }

    /// The receiver's signatures are coming: the file goes as a delta (made on the first SIGS).
    func deltaForSignatures() -> OutgoingDelta {
        if let delta { return delta }
        let made = OutgoingDelta()
        delta = made
        return made
    }

    /// A delta's literal bytes go through the deflate stream.
    func compressesDelta() {
        compressed = true
    }

    /// The receiver holds `count` bytes already (a resume): the reads start after them.
    func resumes(holding count: UInt64) {
        position += count
    }

    /// `count` more bytes of it are out (read, a hole, or matched by a delta's COPY).
    func advance(_ count: UInt64) {
        position += count
    }

    /// The held bytes are hashed apart with SHA-256 (`held-sha256`).
    func checksHeld(_ check: HeldCheck) {
        heldCheck = check
    }

    /// Its data is read through `reader` from now on.
    func reads(through reader: SourceReader) {
        self.reader = reader
    }

    /// Whether it changed while it was sent, as its reads or a worker found.
    func changeFound(_ changed: Bool) {
        self.changed = changed
    }

    /// Hands `event` to its lifecycle (`SendLifecycle.handle(_:)`): the one way its phase changes.
    func handle(_ event: SendLifecycle.Event) throws(SendLifecycle.IllegalTransition) -> SendLifecycle.Effect {
        try lifecycle.handle(event)
    }
}
