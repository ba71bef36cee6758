import Sluice

/// The SHA-256 of the bytes a receiver held of a resumed file or range (`held-sha256`),
/// computed on a worker beside the data: the caller gives it a `DigestWorker` of its own, whose
/// jobs run apart from those that hash and write the rest of the file, so the rest flows while
/// the held bytes are read. The worker reads a duplicate of the file's descriptor
/// (`DigestWorker.hashRange`), so the file may be closed meanwhile.
final class HeldCheck {
    /// What the check came to.
    enum Outcome: Equatable {
        /// No bytes were held (or they are checked with the agreed digest): nothing to compare.
        case none
        case digest([UInt8])
        /// The held bytes could not be read.
        case unreadable
    }

    private let worker: DigestWorker
    private let digest = FileDigest(.sha256)
    /// Loop thread only: the read failed.
    private var failed = false

    /// Starts hashing `length` bytes of `fd` from `start` on `worker`.
    init(worker: DigestWorker, fd: Int32, from start: UInt64, length: UInt64) {
        self.worker = worker
        worker.hashRange(digest, of: fd, from: start, length: length) { [self] ok in
            if !ok { failed = true }
        }
    }

    /// `check`'s outcome, on the loop once its read is done (at once without a check).
    static func outcome(of check: HeldCheck?, _ completion: @escaping (Outcome) -> Void) {
        guard let check else { return completion(.none) }
        check.worker.finalize(check.digest) { value in
            // The read's own completion reached the loop before this one.
            completion(check.failed ? .unreadable : .digest(value))
        }
    }
}
