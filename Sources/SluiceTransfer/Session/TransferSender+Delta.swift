import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// A file sent as a delta: the receiver's signatures, then what the match found to send.
final class OutgoingDelta {
    /// The receiver's signatures, as they come (`take`).
    private(set) var basis: DeltaBasis?
    /// From the match: the operations, the next one, how far into a literal, and the digest.
    private(set) var ops: [DeltaOp] = []
    private(set) var next = 0
    private(set) var doneInOp: UInt64 = 0
    private(set) var digest: [UInt8] = []
    /// The match is done: `ops` is complete and `digest` set.
    private(set) var matched = false
    /// Compressed: literal bytes went into the deflate stream since its last sync flush.
    private(set) var unflushed = false

    /// The operation to send next, or nil while the match has found none more.
    var nextOp: DeltaOp? { next < ops.count ? ops[next] : nil }
    /// Every operation the match found is out, and it found them all: END may go.
    var allSent: Bool { matched && next == ops.count }

    /// A batch of SIGS: kept when it is the next of the basis it announces (the first makes
    /// the basis); false when out of order or not of that basis.
    func take(_ batch: SignatureBatch) -> Bool {
        var basis = self.basis ?? DeltaBasis(blockSize: batch.blockSize, size: batch.size)
        guard basis.takes(batch) else { return false }
        basis.add(batch.signatures)
        self.basis = basis
        return true
    }

    /// More operations from the match.
    func found(_ more: [DeltaOp]) {
        ops += more
    }

    /// The match is done: every operation found, and the digest of the whole file.
    func matchDone(digest: [UInt8]) {
        self.digest = digest
        matched = true
    }

    /// The operation at hand (a COPY) went out.
    func copied() {
        next += 1
        doneInOp = 0
    }

    /// `count` more bytes of the literal at hand (of `length`) went out; the next operation
    /// comes once all of it did. Compressed, they went into the deflate stream.
    func tookLiteral(_ count: Int, of length: UInt64, compressed: Bool) {
        doneInOp += UInt64(count)
        if compressed { unflushed = true }
        if doneInOp == length {
            next += 1
            doneInOp = 0
        }
    }

    /// The deflate stream was cut with a sync flush (before a COPY): true when literal bytes
    /// went in since the last cut, so a flush was needed.
    func cut() -> Bool {
        defer { unflushed = false }
        return unflushed
    }

    /// The literal bytes to read next (on the worker, ahead of their frames): which operation,
    /// and how far into it.
    private var readOp = 0
    private var readInOp: UInt64 = 0

    /// The next piece of literal bytes to read, of at most `chunk` bytes, in the order their
    /// DATA frames go: (offset, count), or nil while the match has found none more.
    func nextLiteral(chunk: Int) -> (UInt64, Int)? {
        while readOp < ops.count {
            guard case .literal(let offset, let length) = ops[readOp] else {
                readOp += 1
                continue
            }
            let count = Int(min(UInt64(chunk), length - readInOp))
            let piece = (offset + readInOp, count)
            readInOp += UInt64(count)
            if readInOp >= length {
                readOp += 1
                readInOp = 0
            }
            return piece
        }
        return nil
    }
}

extension TransferSender {
    /// SIGS for the file announced as a delta: kept, in order, within the basis's blocks.
    func takeSignatures(_ index: Int, _ batch: SignatureBatch) {
        guard let file = current, file.index == index else { return }
        guard file.deltaForSignatures().take(batch) else {
            perform(machine.violated("SIGS out of order, or not of the basis announced"))
            return
        }
    }

    /// ACCEPT for a delta: the match runs on a worker over the file from ACCEPT's `offset`
    /// (reading it once, and hashing it); the operations go out as it settles them, END once it
    /// is done. The bytes before `offset`, which the receiver rebuilt in an interrupted delta,
    /// are checked as a resumed file's held bytes: with `held-sha256` apart (HELD, unless
    /// vouched for), else within the match's digest of the whole file. Without every signature
    /// (no basis at the receiver), the file goes whole.
    func startDelta(_ file: OutgoingFile, compressed: Bool, offset: UInt64) -> Bool {
        guard let delta = file.delta, let basis = delta.basis, basis.received == basis.blockCount,
            let fd = file.fd, let size = file.size, let loop
        else { return false }
        let copy = dup(fd)
        guard copy >= 0 else { return false }
        if compressed {
            guard startCompression(file) else {
                closeDescriptor(copy)
                return true
            }
            file.compressesDelta()
        }
        if offset > 0 {
            file.resumes(holding: offset)
            tally.resumes(file.index, offset: offset, range: false)
        }
        let wholeDigest = offset == 0 || !checkHeldApart(file, fd: fd, from: 0, length: offset)
        guard step(file, .match) != nil else {
            closeDescriptor(copy)
            return true
        }
        let algorithm = machine.digest
        let sender = UncheckedBox((self, file, delta))
        WorkerPool.shared.submit(
            { () -> ([DeltaOp], [UInt8])? in
                defer { closeDescriptor(copy) }
                return DeltaMatcher.match(
                    fd: copy, size: size, from: offset, wholeDigest: wholeDigest, basis: basis, digest: algorithm
                ) { ops in
                    loop.execute { sender.value.0.found(ops, sender.value.1, sender.value.2) }
                }
            }, completingOn: loop
        ) { [weak self] result in
            guard let self, self.current === file, !self.ended else { return }
            guard let (ops, digest) = result else {
                self.readFailed("read \(quoted(self.localPath(file))): cannot read it to find what changed")
                return
            }
            delta.matchDone(digest: digest)
            self.tally.sentDelta(file.index)
            self.found(ops, file, delta)
        }
        return true
    }

    /// The reads of a delta's literal bytes, in the order of its operations.
    private func makeDeltaReader(_ file: OutgoingFile, _ delta: OutgoingDelta, _ fd: Int32) -> SourceReader? {
        guard let loop else { return nil }
        let chunk = options.chunkSize.bytes
        let cursor = ReadCursor(fd: fd, path: localPath(file), from: 0, to: 0, sparse: false, opened: nil)
        let reader = SourceReader(
            cursor: cursor, lane: readLane, loop: loop, stock: readBuffers, depth: Self.readAhead, bytesToEnd: nil)
        reader.plan = { delta.nextLiteral(chunk: chunk) }
        reader.onPiece = { [weak self, weak file] in
            guard let self, let file, self.current === file else { return }
            self.produce()
        }
        file.reads(through: reader)
        return reader
    }

    /// More operations from the match: out they go.
    private func found(_ ops: [DeltaOp], _ file: OutgoingFile, _ delta: OutgoingDelta) {
        guard current === file, !ended else { return }
        delta.found(ops)
        proceed(file, .opsFound)
    }

    /// Sends the delta's operations while the connection has room: DATA for literal bytes
    /// (read ahead on the worker, `SourceReader`), COPY for blocks; then, once the match is
    /// done, END with its digest.
    func produceDelta(_ file: OutgoingFile, _ delta: OutgoingDelta, _ connection: WireConnection) {
        guard let fd = file.fd, let basis = delta.basis else { return }
        let chunk = options.chunkSize.bytes
        guard let reader = file.reader ?? makeDeltaReader(file, delta, fd) else { return }
        reader.fill()  // the literals of operations just found
        if file.compressed, let deflate {
            produceCompressedDelta(file, delta, basis, reader, deflate, connection)
            return
        }
        while current === file, file.lifecycle.phase == .sending, let op = delta.nextOp,
            connection.pendingBytes < chunk, connection.outbound.reserve(chunk + Wire.frameHeaderSize + 64)
        {
            // State moves on before anything is written: a write may call back into `produce`.
            switch op {
            case .copy(let index, let count):
                sendCopy(index, count, file, delta, basis, connection)
            case .literal(_, let length):
                let want = Int(min(UInt64(chunk), length - delta.doneInOp))
                let payload = connection.outbound.framePayload(want)
                guard readLiteral(reader, into: payload, file) == true else { return }  // `onPiece` calls again
                connection.outbound.commitFrame(.data, length: want)
                tookLiteral(want, of: length, file, delta)
                connection.flush()
            }
        }
        guard current === file, file.lifecycle.phase == .sending, delta.allSent else { return }
        endDelta(file, delta)
    }

    /// `produceDelta` for a compressed file: the literal bytes go through the file's one raw
    /// deflate stream (in blocks on the workers, as any compressed file's), cut with a sync flush
    /// before a COPY that follows literal bytes, and COPY goes once all of the stream before it
    /// is out, so the receiver has decoded them when it comes; the stream ends before END.
    private func produceCompressedDelta(
        _ file: OutgoingFile, _ delta: OutgoingDelta, _ basis: DeltaBasis, _ reader: SourceReader,
        _ deflate: StageDriver, _ connection: WireConnection
    ) {
        let chunk = options.chunkSize.bytes
        while current === file, file.lifecycle.phase == .sending, connection.pendingBytes < chunk,
            connection.outbound.reserve(chunk + Wire.frameHeaderSize + 64), let raw = rawBuffer
        {
            let op = delta.nextOp
            if raw.isEmpty, case .literal(_, let length) = op {
                let want = Int(min(UInt64(raw.tailSpace), length - delta.doneInOp))
                // Not read yet: what the stream has done goes out meanwhile, and `onPiece` calls again.
                switch readLiteral(reader, into: UnsafeMutableRawBufferPointer(rebasing: raw.tail[0..<want]), file) {
                case true?:
                    raw.produced(want)
                    tookLiteral(want, of: length, file, delta)
                case false?: break
                case nil: return
                }
            }
            var atCopy = false
            if raw.isEmpty, case .copy = op {
                atCopy = true
                if delta.cut() { (deflate.stage as? ParallelDeflate)?.flush() }
            }
            let ending = op == nil && delta.matched && raw.isEmpty
            let payload = connection.outbound.framePayload(chunk)
            guard let progress = compress(deflate, raw, ending: ending, into: payload) else { return }
            if progress.produced > 0 {
                connection.outbound.commitFrame(.data, length: progress.produced)
                // The write may call back into `produce`: look again from the top.
                connection.flush()
                continue
            }
            if ending && progress.finished {
                endDelta(file, delta)
                return
            }
            if atCopy, deflate.heldBytes == 0, case .copy(let index, let count) = op {
                sendCopy(index, count, file, delta, basis, connection)
                continue
            }
            // Nothing moved: the workers, the reads or the match call again.
            if progress.consumed == 0 && progress.produced == 0 { return }
        }
    }

    /// Takes the literal bytes that fill `target` from the reads: true; false while they are not
    /// read yet; nil when the read failed or came short (the file has failed then).
    private func readLiteral(_ reader: SourceReader, into target: UnsafeMutableRawBufferPointer, _ file: OutgoingFile)
        -> Bool?
    {
        switch reader.take(into: target) {
        case .bytes(let n) where n == target.count: return true
        case .wait: return false
        case .failed(let reason): readFailed(reason)
        case .bytes, .hole, .end: readFailed("read \(quoted(localPath(file))): the file shrank while being sent")
        }
        return nil
    }

    /// COPY of `count` blocks from block `index` of the basis: their bytes count as matched.
    private func sendCopy(
        _ index: UInt64, _ count: UInt32, _ file: OutgoingFile, _ delta: OutgoingDelta, _ basis: DeltaBasis,
        _ connection: WireConnection
    ) {
        // State moves on before anything is written: a write may call back into `produce`.
        let start = index * UInt64(basis.blockSize)
        let bytes = min(UInt64(count) * UInt64(basis.blockSize), basis.size - min(start, basis.size))
        tally.matched(file.index, bytes)
        file.advance(bytes)
        delta.copied()
        connection.send(Frame.copy(index: index, count: count).encoded)
    }

    /// `count` more literal bytes of the operation at hand (of `length`) were taken.
    private func tookLiteral(_ count: Int, of length: UInt64, _ file: OutgoingFile, _ delta: OutgoingDelta) {
        tally.sent(file.index, UInt64(count))
        file.advance(UInt64(count))
        delta.tookLiteral(count, of: length, compressed: file.compressed)
    }

    /// The delta is all out: END with the size and the match's digest (with HELD before it
    /// when the bytes the receiver held are checked apart, once they are hashed).
    private func endDelta(_ file: OutgoingFile, _ delta: OutgoingDelta) {
        guard step(file, .dataOut(checkChange: false)) == .finishDigest else { return }
        HeldCheck.outcome(of: file.heldCheck) { [weak self] outcome in
            self?.digestsReady(file, delta.digest, outcome)
        }
    }
}
