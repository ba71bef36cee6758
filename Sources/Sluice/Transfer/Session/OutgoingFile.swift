#if canImport(Glibc)
    import Glibc
#endif

/// The state of the file being sent.
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
    /// ACCEPT arrived and the held prefix is hashed: data may go out.
    var ready = false
    /// Bytes read from the source (the resumed prefix included).
    var position: UInt64 = 0
    var sourceEnded = false
    var compressionFinished = false
    /// The digest is being finished: nothing more goes out for this file.
    var finalizing = false
    /// For a stream: `hasBytesAvailable` came and no read has answered it yet.
    var streamReadable = false
    /// For a file: its mtime when it was opened (and announced).
    var openedMtime = timespec()
    /// Sent as a delta: the receiver's signatures and the match.
    var delta: OutgoingDelta?
    /// Sent as data and holes; the data run being read ends at `dataEnd`.
    var sparse = false
    var dataEnd: UInt64 = 0

    /// For a sparse file: the length of the hole at `position` (0 in data), finding where the
    /// data run from there ends (`SEEK_DATA`, `SEEK_HOLE`). Where the file system cannot say,
    /// the rest is data.
    func holeHere() -> UInt64 {
        guard sparse, let fd, position >= dataEnd else { return 0 }
        let size = self.size ?? 0
        // SEEK_DATA and SEEK_HOLE (Linux's 3 and 4; Glibc's macros need _GNU_SOURCE).
        var data = lseek(fd, off_t(clamping: position), 3)
        if data < 0 {
            guard errno == ENXIO else {
                dataEnd = size
                return 0
            }
            data = off_t(clamping: size)
        }
        let start = max(position, min(UInt64(data), size))
        if start < size {
            let hole = lseek(fd, off_t(clamping: start), 4)
            dataEnd = hole < 0 ? size : max(start, min(UInt64(hole), size))
            if dataEnd == start { dataEnd = size }
        } else {
            dataEnd = size
        }
        return start - position
    }

    init(index: Int, fd: Int32?, stream: ReadStream?, size: UInt64?, digest: TransferDigest) {
        self.digest = FileDigest(digest)
        self.index = index
        self.fd = fd
        self.stream = stream
        self.size = size
    }
}
