import Sluice

/// Why the receiver does not store an entry: the answer it sends.
enum EntryRejection: Error, Equatable, Sendable {
    case refused(Wire.RefusalCode, String)
    case failed(Wire.FailureCode, String)

    var frame: Frame {
        switch self {
        case .refused(let code, let reason): return .refused(code: code, reason: reason)
        case .failed(let code, let reason): return .failed(code: code, reason: reason)
        }
    }

    var outcome: TransferOutcome {
        switch self {
        case .refused(_, let reason): return .refused(reason: reason)
        case .failed(let code, let reason): return .failed(reason: reason, kind: code == .data ? .data : .io)
        }
    }
}

/// An entry the receiver's store is asked to create: its checked path and its header.
struct EntryRequest: Equatable, Sendable {
    /// The path's components, each checked by `PathCheck` (no `.`, `..`, empty or over-long one).
    var components: [String]
    /// The components joined with `/`.
    var relative: String
    var header: EntryHeader
    /// What XATTR and OWNER messages before it said.
    var attributes = EntryAttributes()
}

/// How a receiver session ended.
enum SessionEnd: Equatable, Sendable {
    /// The sender said goodbye after every entry was answered.
    case goodbye
    /// The peer broke the protocol (the reason was sent to it in an ERROR message).
    case violation(String)
    /// The peer sent ERROR.
    case peerError(String)
    /// The connection closed before the sender said goodbye.
    case closedEarly(String)
    case timedOut
    case connectionFailed(SluiceError)
    case cancelled
    /// The receiver was serving all the sessions it allows when the peer said HELLO: it was
    /// told so (`busy: …` in an ERROR message) and may try again later.
    case turnedAway(String)
}

extension SessionEnd {
    /// What a session's end means to its user, at either end: nil after a goodbye, else the
    /// error of `operation` (`send` or `receive`) on `subject` (the connection), the peer's
    /// own reasons shown as its (`peer`: `sender` or `receiver`).
    func error(operation: String, subject: String?, peer: String) -> SluiceError? {
        switch self {
        case .goodbye:
            return nil
        case .violation(let reason):
            return SluiceError(.protocolViolation, operation: operation, subject: subject, detail: reason)
        case .turnedAway(let reason):
            return SluiceError(.unavailable, operation: operation, subject: subject, detail: reason)
        case .peerError(let reason) where reason.hasPrefix(Wire.expiredPrefix):
            // The key authenticated, but the code it came from has served its transfers.
            return SluiceError(
                .authenticationFailed, operation: operation, subject: subject, detail: "\(peer): \(reason)")
        case .peerError(let reason) where reason.hasPrefix(Wire.busyPrefix):
            // Serving all the sessions it allows: nothing was refused, try again later.
            return SluiceError(.unavailable, operation: operation, subject: subject, detail: "\(peer): \(reason)")
        case .peerError(let reason):
            return SluiceError(.refused, operation: operation, subject: subject, detail: "\(peer): \(reason)")
        case .closedEarly(let detail):
            return SluiceError(.truncatedData, operation: operation, subject: subject, detail: detail)
        case .timedOut:
            return SluiceError(.timedOut, operation: operation, subject: subject, detail: "idle")
        case .connectionFailed(let failure):
            return failure
        case .cancelled:
            return SluiceError(.cancelled, operation: operation, subject: subject)
        }
    }

    /// Whether the connection is closed once what is queued has been written (the peer then
    /// reads the last message: a goodbye, the ERROR of a violation or a turning away), rather
    /// than at once.
    var closesAfterFlush: Bool {
        switch self {
        case .goodbye, .violation, .turnedAway: return true
        case .peerError, .closedEarly, .timedOut, .connectionFailed, .cancelled: return false
        }
    }
}

/// What the receiving side does next: the receiver machine's output, performed by its session.
enum ReceiverAction: Equatable, Sendable {
    /// Queue this message for the sender.
    case send(Frame)
    /// Create the directory (and missing parents); answer with `.directoryMade`.
    case makeDirectory(EntryRequest)
    /// Create the symbolic link, or the hard link to a file this session stored (its checked
    /// relative path in `target`), at the request's path; answer with `.linkMade`.
    case makeLink(EntryRequest, LinkHeader)
    /// Create the device, FIFO or socket at the request's path (with the request's mode,
    /// mtime and owner); answer with `.specialMade`.
    case makeSpecial(EntryRequest, SpecialHeader)
    /// The next `length` bytes of the file are a hole: advance past them unwritten, hashing
    /// it as a hole (no answer).
    case deliverHole(UInt64)
    /// Compare what is at the request's path with the CHECK (nil components: an invalid path,
    /// absent), and with the XATTRs and OWNER before it (`sync-attributes`), and send HAVE — in
    /// the order CHECKs came, which the session keeps; the machine goes on meanwhile.
    case checkEntry([String]?, CheckHeader, EntryAttributes = EntryAttributes())
    /// Copy `length` bytes of the file's basis from `offset` to the file's next bytes, hashing
    /// them (a delta's COPY; no answer).
    case deliverCopy(offset: UInt64, length: UInt64)
    /// Remove what is under the directory that no CHECK of the transfer named (or, on a dry
    /// run, only find it), never following a link; answer `.pruned`.
    case prune([String], dryRun: Bool)
    /// MOVE (`watch`): rename `from` to `to` inside the directory (creating `to`'s missing
    /// parents), never following a link on the way, never over a directory, over anything
    /// else only with `replace`; answer `.pruned` (nothing removed).
    case move(from: [String], to: [String], replace: Bool)
    /// REMOVE (`watch` with `delete`): remove the path, a directory with what it holds, never
    /// following a link; answer `.pruned` with what was removed.
    case remove([String])
    /// Open the file's temporary file, finding how much a partial holds; answer `.fileOpened`.
    case openFile(EntryRequest)
    /// Pass the DATA bytes just decoded into the file's data path: decompress if compressed,
    /// ask `decoded(_:)` before writing each piece, write it, hash it.
    case deliverData
    /// The file's data ended: flush the decompressor; answer `.dataFinished` or `.dataFailed`.
    case finishData
    /// Check the digest against `digest` (and the held bytes' SHA-256 against `held`, when
    /// HELD came), set mode and mtime, flush, rename into place; answer `.committed`, or
    /// `.staged` when the file waits to be flushed and renamed with others (then
    /// `.stagedCommitted` later, in the order files were staged).
    case commitFile(digest: [UInt8], held: [UInt8]? = nil)
    /// Join the transfer of several connections `join` names (create it for index 0); answer
    /// `.transferJoined`.
    case joinTransfer(TransferJoin)
    /// Open (or share) the temporary file of a range's file, checking the range against the
    /// other ranges of the file in the transfer; answer `.fileOpened` with the offset within
    /// the range that is held.
    case openRange(EntryRequest, ByteRange)
    /// Check the range's digest against `digest` (and its held bytes' against `held`); when it
    /// completes the file, the whole file's against `fileDigest`, then commit it as
    /// `commitFile` does; answer `.rangeCommitted`.
    case commitRange(digest: [UInt8], fileDigest: [UInt8], held: [UInt8]? = nil)
    /// Forget the file being received: its partial data stays for a resume when `keep`.
    case dropFile(keep: Bool)
    /// An entry was answered.
    case report(TransferFileResult)
    /// A BATCH ended: store the small files it held, received whole, together (each answered
    /// as `.stagedCommitted`, in order).
    case storeBatch
    /// Move the staged files into place now (answering `.stagedCommitted` for each): an answer
    /// the sender waits for is queued behind theirs.
    case commitStaged
    /// Move every staged file into place (answering `.stagedCommitted` for each), then set the
    /// attributes of the directories created by this session and flush; answer
    /// `.directoriesSettled`.
    case settleDirectories
    /// The session is over: close the connection (after what is queued, unless it failed).
    case end(SessionEnd)
}

/// The outcome of an action the session performed for the machine.
enum ReceiverOutcome: Equatable, Sendable {
    /// Created or already there (nil), or why not.
    case directoryMade(EntryRejection?)
    /// The link was made (nil), or why not.
    case linkMade(EntryRejection?)
    /// The device, FIFO or socket was made (nil), or why not.
    case specialMade(EntryRejection?)
    /// A FILE flagged delta was opened (after its basis's signatures went out): the basis's
    /// size, nil when there is no usable basis (the file then comes whole), or why not. `held`:
    /// the bytes of the new file an interrupted delta rebuilt (flagged resumable; checked as a
    /// resumed file's), the offset the delta goes on from; `vouched` as for `fileOpened`.
    case deltaOpened(Result<UInt64?, EntryRejection>, held: UInt64 = 0, vouched: Bool = false)
    /// What PRUNE or REMOVE removed (relative paths), and why it stopped if it did; for a MOVE,
    /// nothing removed, and why it was not renamed if it was not.
    case pruned(gone: [String], EntryRejection?)
    /// The offset to resume from (0 for a new file), or why the file cannot be received.
    /// `vouched`: the bytes held were written under the entry's TOKEN (`resume-token`).
    case fileOpened(Result<UInt64, EntryRejection>, vouched: Bool = false)
    /// Decompressing or writing failed: the file fails with this answer.
    case dataFailed(EntryRejection)
    case dataFinished
    /// Verified and moved into place (nil), or why not.
    case committed(EntryRejection?)
    /// Verified and set aside to be moved into place with others after one flush: the machine
    /// goes on, and the file's answer waits for `.stagedCommitted`.
    case staged
    /// The oldest staged file was moved into place (nil), or why not.
    case stagedCommitted(EntryRejection?)
    /// Joined the transfer (nil), or why not (the reason goes to the sender in ERROR).
    case transferJoined(String?)
    /// The range verified (nil) — and the file stored when `fileStored` (it was the last
    /// range in), `resumed` bytes of it held from an interrupted transfer — or why not.
    case rangeCommitted(EntryRejection?, fileStored: Bool, resumed: UInt64? = nil)
    case directoriesSettled
    /// The flush before goodbye failed: files answered stored may not be on disk.
    case flushFailed(SluiceError)
    case timedOut
    /// The peer closed its sending direction.
    case peerClosed
    case connectionFailed(SluiceError)
    case cancelled
}
