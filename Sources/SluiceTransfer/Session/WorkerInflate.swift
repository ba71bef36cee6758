import Sluice

/// A compressed file's decompression, done by its session's hasher worker rather than on the
/// loop: the DATA bytes lent to a job are decompressed into this object's own buffer, written
/// to the file and hashed there, and the job hands back what came of it (`Outcome`), which the
/// session then tells its machine. So the loop only parses and lends, and the sessions of a
/// receiver decompress on as many cores as the pool has.
///
/// Only the worker's jobs touch it after creation, and they run one after another, in order
/// (the worker's chain): hence `@unchecked Sendable`. Its memory is the output buffer, freed
/// with it once the last job holding it is done.
final class WorkerInflate: @unchecked Sendable {
    /// What a job did: the bytes decompressed and written, why the file fails (the first
    /// failure; after it nothing more is written), and whether the compressed stream ended.
    struct Outcome: Sendable, Equatable {
        var produced: UInt64 = 0
        var failure: EntryRejection?
        var finished = false
    }

    private static let outputSize = 1 << 18

    private let driver: StageDriver
    private let target: WriteTarget
    private let digest: FileDigest
    /// Where the next decompressed byte goes (a delta's COPYs move it on too).
    private(set) var position: UInt64
    private var failure: EntryRejection?
    /// Bytes written by `settle` (before a COPY), told with the next outcome.
    private var unreported: UInt64 = 0
    private let output: UnsafeMutableRawBufferPointer

    /// Decompresses with `driver` into `target` from `position`, hashing for `digest`.
    init(_ driver: StageDriver, writingTo target: WriteTarget, at position: UInt64, hashing digest: FileDigest) {
        self.driver = driver
        self.target = target
        self.digest = digest
        self.position = position
        output = .allocate(byteCount: Self.outputSize, alignment: WriteTarget.directAlignment)
    }

    deinit { output.deallocate() }

    /// Decompresses all of `input` (a piece of DATA), writing and hashing what comes out.
    func take(_ input: UnsafeRawBufferPointer) -> Outcome {
        var outcome = Outcome(produced: unreported)
        unreported = 0
        var rest = input
        while failure == nil, !rest.isEmpty {
            guard let progress = step(rest, &outcome) else { break }
            rest = UnsafeRawBufferPointer(rebasing: rest[progress.consumed...])
            if progress.consumed == 0 && progress.produced == 0 {
                fail(.failed(.data, "compressed data: \(progress.finished ? "bytes after the end" : "no progress")"))
            }
        }
        outcome.failure = failure
        return outcome
    }

    /// At END: writes what the decompressor still holds; the compressed stream must end here.
    func finish() -> Outcome {
        var outcome = Outcome(produced: unreported)
        unreported = 0
        while failure == nil {
            guard let progress = step(nil, &outcome) else { break }
            if progress.finished {
                outcome.finished = true
                break
            }
            if progress.produced == 0 { fail(.failed(.data, "compressed data: truncated")) }
        }
        outcome.failure = failure
        return outcome
    }

    /// Before a delta's COPY: writes what the decompressor still holds back of the literal
    /// bytes before it (zlib keeps output back when its output and input ran out together),
    /// and checks that they ended where the sender's sync flush leaves the stream; the COPY's
    /// bytes then go at `position`, and `skip` moves past them. False when the file failed (the
    /// reason goes with the next outcome, the COPY is not made).
    func settle() -> Bool {
        guard failure == nil else { return false }
        guard let inflate = driver.stage as? Inflate else { return true }
        let held = UnsafeMutableRawBufferPointer(rebasing: output[0..<Self.heldMost])
        let produced: Int
        do {
            let (count, settled) = try inflate.flushPending(into: held)
            guard settled else {
                fail(.failed(.data, "compressed data: a COPY where the literal bytes before it were not flushed"))
                return false
            }
            produced = count
        } catch {
            fail(ReceiverSession.rejection(inflating: error))
            return false
        }
        guard produced > 0 else { return true }
        var outcome = Outcome()
        guard write(UnsafeRawBufferPointer(rebasing: held[0..<produced]), &outcome) else { return false }
        unreported += outcome.produced
        return true
    }

    /// A COPY of `length` bytes was made at `position`.
    func skip(_ length: UInt64) {
        position += length
    }

    /// The most output zlib holds back once its input is used up (a match of 258 bytes), with
    /// margin.
    static let heldMost = 512

    /// One step of the decompressor, its output written and hashed; nil when the file failed.
    private func step(_ input: UnsafeRawBufferPointer?, _ outcome: inout Outcome) -> StageProgress? {
        let progress: StageProgress
        do {
            progress = try driver.step(input: input, output: output)
        } catch {
            fail(ReceiverSession.rejection(inflating: error))
            return nil
        }
        guard progress.produced > 0 else { return progress }
        return write(UnsafeRawBufferPointer(rebasing: output[0..<progress.produced]), &outcome) ? progress : nil
    }

    /// Writes and hashes decompressed `bytes` at `position`; false when the write failed.
    private func write(_ bytes: UnsafeRawBufferPointer, _ outcome: inout Outcome) -> Bool {
        guard target.write(bytes, at: position) == .written else {
            fail(.failed(.io, target.failure?.description ?? "write \(quoted(target.display)): failed"))
            return false
        }
        digest.update(bytes)
        position += UInt64(bytes.count)
        outcome.produced += UInt64(bytes.count)
        return true
    }

    private func fail(_ rejection: EntryRejection) {
        if failure == nil { failure = rejection }
    }
}
