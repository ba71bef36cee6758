import CCrypto
import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// An incremental SHA-256 digest, wrapping libcrypto's EVP interface (`EVP_DigestInit_ex`,
/// `EVP_DigestUpdate`, `EVP_DigestFinal_ex` with `EVP_sha256()`).
public final class SHA256Digest {
    /// The size of a digest in bytes.
    public static let byteCount = 32

    private let context: OpaquePointer
    /// Set (on the owner's thread) once a `DigestWorker` has queued a job for this digest.
    var hasQueuedJobs = false

    /// A digest of no bytes yet.
    public init() {
        guard let context = EVP_MD_CTX_new() else { preconditionFailure("EVP_MD_CTX_new: out of memory") }
        self.context = context
        let rc = EVP_DigestInit_ex(context, EVP_sha256(), nil)
        precondition(rc == 1, "EVP_DigestInit_ex(sha256) failed")
    }

    deinit { EVP_MD_CTX_free(context) }

    /// Adds `bytes` to the digest.
    public func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        let rc = EVP_DigestUpdate(context, base, bytes.count)
        precondition(rc == 1, "EVP_DigestUpdate failed")
    }

    /// Adds `bytes` to the digest.
    public func update<Bytes: Collection<UInt8>>(_ bytes: Bytes) {
        let array = Array(bytes)
        array.withUnsafeBytes { update($0) }
    }

    /// The 32-byte digest of everything added. The digest cannot be updated afterwards.
    public func finalize() -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Self.byteCount)
        var length: UInt32 = 0
        let rc = out.withUnsafeMutableBufferPointer { EVP_DigestFinal_ex(context, $0.baseAddress, &length) }
        precondition(rc == 1 && length == UInt32(Self.byteCount), "EVP_DigestFinal_ex failed")
        return out
    }

    /// The SHA-256 of `bytes`.
    public static func hash<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> [UInt8] {
        let digest = SHA256Digest()
        digest.update(bytes)
        return digest.finalize()
    }

    /// Lower-case hexadecimal.
    public static func hex<Bytes: Collection<UInt8>>(_ digest: Bytes) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(digest.count * 2)
        for byte in digest {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// Hashes on a background queue, so that a transfer's event loop moves bytes while another
/// core computes their SHA-256 (about half the CPU time of a transfer otherwise).
///
/// `update` copies the bytes into the slot being filled; a full slot is queued for hashing and
/// the next one filled. When every slot is still queued it waits for the oldest, so memory
/// stays at `slotCount × slotSize` and the caller never runs more than that far ahead of the
/// hash. Small updates (512-byte chunks) share a slot, so a job is always sizeable. Jobs run
/// in the order given, on one serial queue per worker; one worker serves one session.
final class DigestWorker: @unchecked Sendable {
    private let queue = DispatchQueue(label: "sluice.digest")
    private let free: DispatchSemaphore
    private let slotSize: Int
    private let slotCount: Int
    /// Allocated on first use; touched only by the owning thread, except a queued slot's bytes,
    /// which its job reads and nothing writes until the job signals `free`.
    private var slots: [UnsafeMutableRawBufferPointer] = []
    private var next = 0
    /// The slot being filled (taken from `free`), how much it holds and for which digest.
    private var filling: UnsafeMutableRawBufferPointer?
    private var filled = 0
    private var fillingDigest: SHA256Digest?

    init(slotSize: Int = 1 << 20, slotCount: Int = 4) {
        precondition(slotSize > 0 && slotCount > 0)
        self.slotSize = slotSize
        self.slotCount = slotCount
        free = DispatchSemaphore(value: slotCount)
    }

    deinit {
        // Queued jobs read the slots: let them finish; the slot being filled goes back.
        if filling != nil { free.signal() }
        queue.sync {}
        for slot in slots { slot.deallocate() }
    }

    /// Queues `bytes` (copied) for `digest`.
    func update(_ digest: SHA256Digest, _ bytes: UnsafeRawBufferPointer) {
        if fillingDigest !== digest { submitFilling() }
        var rest = bytes
        while !rest.isEmpty {
            let slot = filling ?? takeSlot()
            filling = slot
            fillingDigest = digest
            let n = min(slot.count - filled, rest.count)
            (slot.baseAddress! + filled).copyMemory(from: rest.baseAddress!, byteCount: n)
            filled += n
            rest = UnsafeRawBufferPointer(rebasing: rest[n...])
            if filled == slot.count { submitFilling() }
        }
    }

    /// Reads `length` bytes of `fd` from offset 0 straight into slots and queues them for
    /// `digest` (a resumed file's prefix). False if they cannot all be read.
    func update(_ digest: SHA256Digest, readingPrefixOf fd: Int32, length: UInt64) -> Bool {
        submitFilling()
        var position: UInt64 = 0
        while position < length {
            let slot = takeSlot()
            let want = Int(min(UInt64(slot.count), length - position))
            var n = -1
            repeat { n = pread(fd, slot.baseAddress, want, off_t(position)) } while n < 0 && errno == EINTR
            if n <= 0 {
                giveBackLastSlot()
                return false
            }
            submit(digest, UnsafeRawBufferPointer(rebasing: slot[0..<n]))
            position += UInt64(n)
        }
        return true
    }

    /// The digest of everything queued for it, once its jobs have run.
    func finalize(_ digest: SHA256Digest) -> [UInt8] {
        if !digest.hasQueuedJobs {
            // A small file, all in the slot being filled: hashing it here is cheaper than a
            // hand-over to the queue and back.
            if fillingDigest === digest, let slot = filling {
                digest.update(UnsafeRawBufferPointer(rebasing: slot[0..<filled]))
                filling = nil
                fillingDigest = nil
                filled = 0
                giveBackLastSlot()
            }
            return digest.finalize()
        }
        if fillingDigest === digest { submitFilling() }
        let job = Job(digest: digest, bytes: UnsafeRawBufferPointer(start: nil, count: 0))
        return queue.sync { job.digest.finalize() }
    }

    /// The next slot once it is free (slots are handed out and freed in the same order).
    private func takeSlot() -> UnsafeMutableRawBufferPointer {
        free.wait()
        if slots.count < slotCount {
            slots.append(.allocate(byteCount: slotSize, alignment: 64))
        }
        let slot = slots[next]
        next = (next + 1) % slotCount
        return slot
    }

    /// Queues what the slot being filled holds.
    private func submitFilling() {
        guard let slot = filling, let digest = fillingDigest else { return }
        filling = nil
        fillingDigest = nil
        if filled > 0 {
            submit(digest, UnsafeRawBufferPointer(rebasing: slot[0..<filled]))
        } else {
            giveBackLastSlot()
        }
        filled = 0
    }

    /// Returns the slot taken last, unused, where it was taken: slots still go out oldest first.
    private func giveBackLastSlot() {
        next = (next + slotCount - 1) % slotCount
        free.signal()
    }

    private func submit(_ digest: SHA256Digest, _ bytes: UnsafeRawBufferPointer) {
        digest.hasQueuedJobs = true
        let job = Job(digest: digest, bytes: bytes)
        let free = self.free
        queue.async {
            job.digest.update(job.bytes)
            free.signal()
        }
    }

    /// What one queued job hashes: the worker keeps the slot untouched until `free` is signalled.
    private struct Job: @unchecked Sendable {
        let digest: SHA256Digest
        let bytes: UnsafeRawBufferPointer
    }
}
