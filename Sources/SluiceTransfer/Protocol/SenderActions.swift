import Sluice

/// What the sender knows of a file once it is open: what FILE announces.
struct OpenedEntry: Equatable, Sendable {
    var size: UInt64?
    var mode: UInt32
    var mtimeSeconds: Int64
    var mtimeNanoseconds: UInt32
}

/// What the sending side does next: the sender machine's output, performed by its session.
enum SenderAction: Equatable, Sendable {
    /// Queue this message for the receiver.
    case send(Frame)
    /// Open entry `index` (a file or stream) to learn its size, mode and mtime; answer with
    /// `.entryOpened`.
    case openEntry(Int)
    /// Send entry `index`'s data from `offset` (hashing the held prefix first), compressed or
    /// not; answer with `.dataEnded` or `.readFailed`. For a range, `offset` counts from the
    /// range's start, only the range is sent, and the answer is `.rangeEnded`.
    case startData(index: Int, offset: UInt64, compressed: Bool, range: ByteRange?)
    /// The receiver does not offer `streams`: this connection sends every entry alone, and no
    /// other connection is to be opened.
    case streamsDeclined
    /// The receiver admitted this connection to the transfer (JOINED).
    case joined
    /// Stop sending entry `index`'s data and close it (answered before its end, or aborted).
    case stopData(Int)
    /// Entry `index` has its outcome.
    case settle(Int, TransferOutcome)
    /// Signatures of the receiver's copy of entry `index`, sent as a delta: keep them for the
    /// match once ACCEPT comes.
    case takeSignatures(Int, SignatureBatch)
    /// PRUNE of directory entry `index` removed `path` (or would, on a dry run).
    case gone(Int, String)
    /// PRUNE of the directory at this path (a directory entry's, as sent) was answered: stored
    /// (done), or why not.
    case pruned(String, TransferOutcome)
    /// A MOVE or REMOVE (`watch`) was answered: stored (done), or why not.
    case operated(TreeOperation, TransferOutcome)
    /// The REMOVE sent removed `path`.
    case removed(String)
    /// The transfer is over: every entry answered (`.goodbye`), or why not.
    case end(SessionEnd)
}

/// The outcome of an action the session performed for the sender machine.
enum SenderOutcome: Equatable, Sendable {
    case entryOpened(Int, Result<OpenedEntry, LocalFailure>)
    /// All of the current file's bytes went out, with their size and digest (of the whole file,
    /// or with `held-sha256` of the bytes after the held ones), and the SHA-256 of the bytes the
    /// receiver held when `checksHeld` and it held some.
    case dataEnded(size: UInt64, digest: [UInt8], held: [UInt8]? = nil)
    /// All of the current range's bytes went out: its length and digest (as for a file), the
    /// whole file's digest, and the held bytes' SHA-256 as for a file.
    case rangeEnded(length: UInt64, digest: [UInt8], fileDigest: [UInt8], held: [UInt8]? = nil)
    /// The current file could not be read further.
    case readFailed(String)
    case peerClosed
    case connectionFailed(SluiceError)
    case cancelled
}

/// A local failure's text (`open "x": Permission denied (errno 13)`).
struct LocalFailure: Error, Equatable, Sendable {
    var reason: String
    init(_ reason: String) { self.reason = reason }
}
