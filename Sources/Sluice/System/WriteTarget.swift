import CSluiceLinux

#if canImport(Glibc)
    import Glibc
#endif

/// Where a file being received is written: a whole file, or a range of one, at increasing
/// offsets. With `writebackWindow`, writeback of what was written is started (not
/// waited for) each time that much more was written, so that the fsync at the end of the file
/// finds little left to write.
///
/// Its state changes on one thread at a time: in the worker's jobs, which run one after another
/// (the chain's lock orders them), or on the loop (a range, or a file being received alone) — a
/// session writes in place only while none of its writes is queued. The loop reads it after such a job
/// completed through `loop.execute`: hence `@unchecked Sendable`.
package final class WriteTarget: @unchecked Sendable {
    package enum Outcome {
        case written
        /// This write failed: the first failure, to be reported.
        case failedNow
        /// An earlier write failed: nothing more is written.
        case failedBefore
    }

    let fd: Int32
    package let display: String
    let writebackWindow: UInt64?
    private var writebackStarted: UInt64
    /// The first write's failure, if any.
    package private(set) var failure: SluiceError?
    /// A second descriptor of the file, opened with `O_DIRECT` by `writeDirectly()`, or -1.
    /// Whole aligned blocks go through it, from memory to the disk without a page-cache copy;
    /// the rest (a head or tail that is not a whole block) through `fd`.
    private var directFD: Int32 = -1

    /// Offsets, lengths and addresses of direct writes are multiples of this: the logical
    /// block size of common disks (512 or 4096 bytes) and the page size. Where a file system
    /// asks for more, its `EINVAL` turns direct writes off for the file.
    package static let directAlignment = 4096

    /// Whether whole blocks go past the page cache: read on the worker, or after its jobs
    /// completed (a fallback after `EINVAL` clears it on the worker).
    var writesDirect: Bool { directFD >= 0 }
    /// Set by `writeDirectly()` on the loop before the first write, never changed after: the
    /// session then hands every byte to the worker in aligned slots (the loop reads this, never
    /// `writesDirect`, which the worker may change under it).
    package private(set) var wantsAlignedWrites = false
    /// Bytes that went through the direct descriptor so far (on the thread that writes).
    private(set) var directBytes: UInt64 = 0

    /// Whether `fd` is this target's own (a range's duplicate), closed with it.
    private let ownsDescriptor: Bool

    /// `fd` stays open until every job that writes to it has run (`DigestWorker.afterQueued`),
    /// or, when `owned`, is closed by the target once the last job holding it let it go.
    package init(fd: Int32, display: String, writebackWindow: UInt64?, start: UInt64, owned: Bool = false) {
        self.fd = fd
        ownsDescriptor = owned
        self.display = display
        self.writebackWindow = writebackWindow
        writebackStarted = start
    }

    deinit {
        if directFD >= 0 { closeDescriptor(directFD) }
        if ownsDescriptor { closeDescriptor(fd) }
    }

    /// Opens the file a second time with `O_DIRECT` (through `/proc/self/fd`, so that it is
    /// the same file whatever happened to its name), for `write` to send whole blocks through.
    /// Returns false, and leaves every write buffered, where that cannot be done (no
    /// `/proc`, or a file system without direct I/O). Before the first write.
    @discardableResult
    package func writeDirectly() -> Bool {
        let flag = sluice_o_direct()
        guard directFD < 0, flag != 0 else { return directFD >= 0 }
        let path = "/proc/self/fd/\(fd)"
        directFD = (try? openFile(path, flags: O_WRONLY | O_CLOEXEC | flag, permissions: 0).get()) ?? -1
        wantsAlignedWrites = directFD >= 0
        return wantsAlignedWrites
    }

    /// The next piece of a write of `count` bytes from `address` at `position`: through the
    /// direct descriptor when it is whole blocks at aligned offsets and memory, else through
    /// the page cache (a head up to the next block boundary, or everything when the memory is
    /// not aligned as the offset is).
    private func piece(_ address: UnsafeRawPointer, at position: UInt64, count: Int) -> (Int, direct: Bool) {
        let align = Self.directAlignment
        guard directFD >= 0 else { return (PageCacheWrites.piece(count), false) }
        let head = (align - Int(position % UInt64(align))) % align
        if head > 0 { return (min(head, count), false) }
        guard Int(bitPattern: address) % align == 0, count >= align else {
            return (PageCacheWrites.piece(count), false)
        }
        return (count - count % align, true)
    }

    /// What `spliceDirectly` did.
    enum SpliceOutcome {
        case moved(Int)
        /// The kernel will not splice into the direct descriptor (`EINVAL`: the pipe's pages
        /// are not aligned as direct I/O needs; `EOPNOTSUPP`, `ENOSYS`): nothing was taken from
        /// the pipe, and the bytes are to be written some other way. Direct writes stay on.
        case refused(Errno)
        /// The write failed (no space, an I/O error, the file size limit): the target's failure.
        case failed
    }

    /// `splice(2)` of `count` bytes (a multiple of `directAlignment`) from the pipe `pipe` into
    /// the file at `position` (aligned) through the direct descriptor: the pipe's pages go to the
    /// disk without a copy. On the thread that writes, with direct writes on.
    func spliceDirectly(from pipe: Int32, count: Int, at position: UInt64) -> SpliceOutcome {
        precondition(
            directFD >= 0 && count > 0 && count % Self.directAlignment == 0
                && position % UInt64(Self.directAlignment) == 0,
            "a direct splice of whole blocks at a block boundary")
        guard fileOffset(position, plus: UInt64(count)) != nil, var offset = fileOffset(position) else {
            failure = Self.tooLarge(display)
            return .failed
        }
        // Non-blocking on the pipe's side: it holds the bytes asked for, and if it ever did not,
        // EAGAIN fails the write instead of the loop waiting on a pipe only it writes to.
        let flags = UInt32(SPLICE_F_NONBLOCK)
        let n = retryingOnInterrupt { CSluiceLinux.splice(pipe, nil, directFD, &offset, count, flags) }
        if n > 0 {
            directBytes += UInt64(n)
            return .moved(n)
        }
        let code = n < 0 ? errno : EIO
        if [EINVAL, EOPNOTSUPP, ENOSYS].contains(code) { return .refused(Errno(rawValue: code)) }
        failure = SluiceError(.system(Errno(rawValue: code)), operation: "write", subject: display)
        return .failed
    }

    /// Set on the loop before the first write, for a file whose bytes are each written once
    /// at most, all past its size when it was opened (a delta rebuilt into a new or truncated
    /// file, or resumed at its size): a byte not written reads as zero. Runs of zeros are then
    /// not written (`write`, `writeZeros`) and stay holes; the file is given its size when it
    /// is settled.
    package var keepsHoles = false

    /// On the worker: writes all of `bytes` at `offset`; in a file that `keepsHoles`, every
    /// block-aligned piece of `directAlignment` bytes that is all zeros is left a hole instead.
    package func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) -> Outcome {
        guard keepsHoles, let base = bytes.baseAddress else { return writeAll(bytes, at: offset) }
        let align = UInt64(Self.directAlignment)
        var (start, at) = (0, 0)  // the data not written yet: start ..< at
        while at < bytes.count {
            let next = min(bytes.count, at + Int(align - (offset + UInt64(at)) % align))
            if Self.isZero(base + at, count: next - at) {
                if start < at {
                    let outcome = writeAll(
                        UnsafeRawBufferPointer(rebasing: bytes[start..<at]), at: offset + UInt64(start))
                    guard outcome == .written else { return outcome }
                }
                start = next
            }
            at = next
        }
        // Zeros at the end are left to whatever comes next, or to the file's size being set
        // when it is settled: this may run on the loop, which does no disk work but writes.
        guard start < bytes.count else { return .written }
        return writeAll(UnsafeRawBufferPointer(rebasing: bytes[start...]), at: offset + UInt64(start))
    }

    /// On the worker: `zeros` (all zero bytes) at `offset`, not written in a file that
    /// `keepsHoles`, written otherwise. Its size is not grown over them here: the loop may
    /// write later bytes meanwhile (DATA after a COPY), and a size read then set could cut
    /// them off; a resume finds the file rebuilt up to its last data, and goes on from there.
    package func writeZeros(_ zeros: UnsafeRawBufferPointer, at offset: UInt64) -> Outcome {
        keepsHoles ? (failure == nil ? .written : .failedBefore) : writeAll(zeros, at: offset)
    }

    /// Whether the `count` bytes at `address` are all zero: the first is, and each equals the
    /// one after it (`memcmp`, as fast as memory).
    private static func isZero(_ address: UnsafeRawPointer, count: Int) -> Bool {
        guard count > 0 else { return true }
        guard address.load(as: UInt8.self) == 0 else { return false }
        return count == 1 || memcmp(address, address + 1, count - 1) == 0
    }

    /// The failure of a write past `Wire.maxFileSize` (`EFBIG`, as the kernel says of a write
    /// past the largest file a file system holds).
    private static func tooLarge(_ display: String) -> SluiceError {
        SluiceError(.system(Errno(rawValue: EFBIG)), operation: "write", subject: display)
    }

    /// On the worker: writes all of `bytes` at `offset`.
    private func writeAll(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) -> Outcome {
        guard failure == nil else { return .failedBefore }
        guard let base = bytes.baseAddress else { return .written }
        // Every position below is before this end: each becomes an `off_t` without a trap.
        guard fileOffset(offset, plus: UInt64(bytes.count)) != nil else {
            failure = Self.tooLarge(display)
            return .failedNow
        }
        var done = 0
        while done < bytes.count {
            let position = offset + UInt64(done)
            let (piece, direct) = piece(base + done, at: position, count: bytes.count - done)
            if direct {
                // errno read here, not `syscallValue` in a `catch where`: that pattern crashes
                // the Swift 6.3.1 optimizer (CopyPropagation) in the fuzzers' release build.
                let n = retryingOnInterrupt { pwrite(directFD, base + done, piece, off_t(position)) }
                if n > 0 {
                    done += n
                    directBytes += UInt64(n)
                    continue
                }
                if n < 0 && errno == EINVAL {
                    // The file system wants another alignment, or has no direct I/O after
                    // all: the rest of the file goes through the page cache.
                    closeDescriptor(directFD)
                    directFD = -1
                    continue
                }
                // Any other failure (no space, an I/O error) is the buffered write's to report.
            }
            let fd = fd
            do {
                let n = try syscallValue("write", display) { pwrite(fd, base + done, piece, off_t(position)) }
                guard n > 0 else {
                    failure = SluiceError(.system(.noSpace), operation: "write", subject: display)
                    return .failedNow
                }
                done += n
            } catch {
                failure = error
                return .failedNow
            }
        }
        let end = offset + UInt64(bytes.count)
        if let window = writebackWindow, end >= writebackStarted, end - writebackStarted >= window {
            _ = sync_file_range(
                fd, off_t(writebackStarted), off_t(end - writebackStarted), UInt32(SYNC_FILE_RANGE_WRITE))
            writebackStarted = end
        }
        return .written
    }
}
