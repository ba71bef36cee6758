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
    var compressed = false
    /// For a range: only these bytes are sent.
    var range: ByteRange?
    /// With `held-sha256`: the SHA-256 of the bytes the receiver holds, computed beside the rest.
    var heldCheck: HeldCheck?
    /// Where it stands: announced, sending, finishing… (`handle(_:)` changes it).
    private(set) var lifecycle = SendLifecycle()
    /// Bytes read from the source (the resumed prefix included).
    var position: UInt64 = 0
    /// For a file: its mtime when it was opened (and announced).
    var openedMtime = timespec()
    /// Sent as a delta: the receiver's signatures and the match.
    var delta: OutgoingDelta?
    /// Sent as data and holes (its reads find them).
    var sparse = false
    /// The reads of a file's data, on workers, once its data goes out.
    var reader: SourceReader?
    /// A small file's whole contents, read with its open on a worker: taken from here.
    var preloaded: [UInt8]?
    /// The file was written to while it was sent (its mtime or size changed since it was
    /// opened): known at the end of its data, checked on the worker for a file read there
    /// (`SendLifecycle.Phase.checkingChange`).
    var changed = false

    init(index: Int, fd: Int32?, stream: ReadStream?, size: UInt64?, digest: TransferDigest) {
        self.digest = FileDigest(digest)
        self.index = index
        self.fd = fd
        self.stream = stream
        self.size = size
    }

    /// Hands `event` to its lifecycle (`SendLifecycle.handle(_:)`): the one way its phase changes.
    func handle(_ event: SendLifecycle.Event) throws(SendLifecycle.IllegalTransition) -> SendLifecycle.Effect {
        try lifecycle.handle(event)
    }
}
