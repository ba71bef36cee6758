#if canImport(Glibc)
    import Glibc
#endif

/// A file sent as a delta: the receiver's signatures, then what the match found to send.
final class OutgoingDelta {
    var basis: DeltaBasis?
    /// From the match: the operations, the next one, how far into a literal, and the digest.
    var ops: [DeltaOp] = []
    var next = 0
    var doneInOp: UInt64 = 0
    var digest: [UInt8] = []
    /// The match is done: `ops` is complete and `digest` set.
    var matched = false
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
        let delta = file.delta ?? OutgoingDelta()
        file.delta = delta
        var basis = delta.basis ?? DeltaBasis(blockSize: batch.blockSize, size: batch.size)
        guard batch.blockSize == Delta.blockSize(forBasis: batch.size), batch.size == basis.size,
            batch.first == basis.received, basis.received + UInt64(batch.signatures.count) <= basis.blockCount,
            basis.blockCount <= Delta.maximumBlocks
        else {
            perform(machine.violated("SIGS out of order, or not of the basis announced"))
            return
        }
        basis.add(batch.signatures)
        delta.basis = basis
    }

    /// ACCEPT for a delta: the match runs on a worker over the whole file (reading it once,
    /// and hashing it); the operations go out as it settles them, END once it is done. Without
    /// every signature (no basis at the receiver), the file goes whole.
    func startDelta(_ file: OutgoingFile) -> Bool {
        guard let delta = file.delta, let basis = delta.basis, basis.received == basis.blockCount,
            let fd = file.fd, let size = file.size, let loop
        else { return false }
        let copy = dup(fd)
        guard copy >= 0 else { return false }
        let algorithm = machine.digest
        let sender = UncheckedBox((self, file, delta))
        WorkerPool.shared.submit(
            { () -> ([DeltaOp], [UInt8])? in
                defer { closeDescriptor(copy) }
                return DeltaMatcher.match(fd: copy, size: size, basis: basis, digest: algorithm) { ops in
                    loop.execute { sender.value.0.found(ops, sender.value.1, sender.value.2) }
                }
            }, completingOn: loop
        ) { [weak self] result in
            guard let self, self.current === file, !self.ended else { return }
            guard let (ops, digest) = result else {
                self.readFailed("read \(quoted(self.localPath(file))): cannot read it to find what changed")
                return
            }
            delta.digest = digest
            delta.matched = true
            self.sentAsDelta.insert(file.index)
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
        file.reader = reader
        return reader
    }

    /// More operations from the match: out they go.
    private func found(_ ops: [DeltaOp], _ file: OutgoingFile, _ delta: OutgoingDelta) {
        guard current === file, !ended else { return }
        delta.ops += ops
        file.ready = true
        produce()
    }

    /// Sends the delta's operations while the connection has room: DATA for literal bytes
    /// (read ahead on the worker, `SourceReader`), COPY for blocks; then, once the match is
    /// done, END with its digest.
    func produceDelta(_ file: OutgoingFile, _ delta: OutgoingDelta, _ connection: WireConnection) {
        guard let fd = file.fd, let basis = delta.basis else { return }
        let chunk = options.chunkSize.bytes
        guard let reader = file.reader ?? makeDeltaReader(file, delta, fd) else { return }
        reader.fill()  // the literals of operations just found
        while current === file, !file.finalizing, delta.next < delta.ops.count,
            connection.outbound.readableBytes < chunk, connection.outbound.reserve(chunk + Wire.frameHeaderSize + 64)
        {
            // State moves on before anything is written: a write may call back into `produce`.
            switch delta.ops[delta.next] {
            case .copy(let index, let count):
                let start = index * UInt64(basis.blockSize)
                let bytes = min(UInt64(count) * UInt64(basis.blockSize), basis.size - min(start, basis.size))
                bytesDone += bytes
                counted[file.index] += bytes
                matchedBytes += bytes
                file.position += bytes
                delta.next += 1
                connection.send(Frame.copy(index: index, count: count).encoded)
            case .literal(_, let length):
                let want = Int(min(UInt64(chunk), length - delta.doneInOp))
                let frameStart = connection.outbound.writeIndex
                let payload = UnsafeMutableRawBufferPointer(
                    rebasing: connection.outbound.tail[Wire.frameHeaderSize..<Wire.frameHeaderSize + want])
                switch reader.take(into: payload) {
                case .bytes(let n) where n == want:
                    break
                case .wait:
                    return  // `onPiece` calls again
                case .failed(let reason):
                    readFailed(reason)
                    return
                case .bytes, .hole, .end:
                    readFailed("read \(quoted(localPath(file))): the file shrank while being sent")
                    return
                }
                connection.outbound.setUInt8(Wire.MessageType.data.rawValue, at: frameStart)
                connection.outbound.setUInt32(UInt32(want), at: frameStart + 1)
                connection.outbound.produced(Wire.frameHeaderSize + want)
                bytesDone += UInt64(want)
                counted[file.index] += UInt64(want)
                bytesSentOfFiles += UInt64(want)
                file.position += UInt64(want)
                delta.doneInOp += UInt64(want)
                if delta.doneInOp == length {
                    delta.next += 1
                    delta.doneInOp = 0
                }
                connection.flush()
            }
        }
        guard current === file, !file.finalizing, delta.matched, delta.next == delta.ops.count else { return }
        file.finalizing = true
        perform(machine.handle(.dataEnded(size: file.position, digest: delta.digest)))
        advance()
    }
}
