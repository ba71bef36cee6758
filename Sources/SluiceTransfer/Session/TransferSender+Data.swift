import Sluice

extension TransferSender {
    private enum ReadResult {
        case bytes(Int)
        /// A hole of this many bytes (a sparse file's).
        case hole(UInt64)
        case end
        case wait
        case failed(String)
    }

    /// Reads the next bytes of the current file into `buffer`.
    /// A file's bytes come from what was read with its open (a small file), from the page
    /// cache on the loop (a small file read there) or from its reads on the worker (`.wait`
    /// until the next is back); a stream's from the stream.
    private func readSource(_ file: OutgoingFile, into buffer: UnsafeMutableRawBufferPointer) -> ReadResult {
        if let fd = file.fd {
            if let bytes = file.preloaded, file.range == nil {
                let position = Int(clamping: file.position)
                guard position < bytes.count else { return .end }
                let n = min(buffer.count, bytes.count - position)
                bytes.withUnsafeBytes { whole in
                    UnsafeMutableRawBufferPointer(rebasing: buffer[0..<n])
                        .copyMemory(from: UnsafeRawBufferPointer(rebasing: whole[position..<position + n]))
                }
                return .bytes(n)
            }
            if file.readsOnLoop, file.reader == nil, file.range == nil, !file.sparse {
                switch readOnLoop(file, fd, into: buffer) {
                case .bytes(let n): return .bytes(n)
                case .end: return .end
                case .worker: break
                }
            }
            guard let reader = file.reader ?? makeReader(file, fd) else { return .failed("internal: no loop") }
            switch reader.take(into: buffer) {
            case .bytes(let n): return .bytes(n)
            case .hole(let length): return .hole(length)
            case .end: return .end
            case .wait: return .wait
            case .failed(let reason): return .failed(reason)
            }
        }
        guard let stream = file.stream else { return .end }
        // Read only when the stream said so: that is taken now.
        guard step(file, .streamRead) == .read else { return .wait }
        switch stream.tryRead(into: buffer) {
        case .processed(let n) where n > 0: return .bytes(n)
        case .processed(0): return .end
        case .processed:
            let error = stream.streamError ?? SluiceError(.system(.ioError), operation: "read", subject: stream.name)
            return .failed(error.description)
        case .wouldBlock: return .wait
        }
    }

    /// Appends DATA frames of the current file until about a chunk waits to be written (so
    /// reads and socket writes alternate chunk by chunk, as in a copy pipeline, rather than in
    /// bursts that leave the receiver idle), while the hasher has room for another chunk; at
    /// the end of the file, has the digest finished on the worker, then END goes out.
    func produce() {
        loop?.preconditionInLoop("TransferSender.produce")
        guard let file = current, file.lifecycle.isProducing, machine.sendingIndex == file.index, let connection,
            let hasher
        else { return }
        if let delta = file.delta, delta.basis != nil, file.fd != nil, machine.sendingDelta {
            produceDelta(file, delta, connection)
            return
        }
        let chunk = options.chunkSize.bytes
        while current === file, file.lifecycle.isProducing, connection.pendingBytes < chunk,
            connection.outbound.reserve(chunk + Wire.frameHeaderSize + 64)
        {
            guard hasher.hasRoom(for: chunk) else { return }  // `onRoom` calls again
            if !file.compressed, lendRead(file, connection) { continue }
            let payload = connection.outbound.framePayload(chunk)
            var produced = 0
            if file.compressed, let deflate, let raw = rawBuffer {
                if raw.isEmpty && file.lifecycle.phase == .sending {
                    let target = raw.tail
                    switch readSource(file, into: target) {
                    case .bytes(let n):
                        raw.produced(n)
                        noteRead(file, UnsafeRawBufferPointer(rebasing: target[0..<n]))
                    case .end, .hole:  // no holes in compressed data
                        guard step(file, .sourceEnded) != nil else { return }
                    case .wait:
                        return
                    case .failed(let reason):
                        readFailed(reason)
                        return
                    }
                }
                guard let progress = compress(deflate, raw, ending: raw.isEmpty, into: payload) else { return }
                produced = progress.produced
                if progress.finished, step(file, .compressionFinished) == nil { return }
                // The blocks are on the workers: the driver's wake handler calls again.
                if deflate.isWaitingForWorkers { return }
            } else {
                switch readSource(file, into: payload) {
                case .bytes(let n):
                    produced = n
                    noteRead(file, UnsafeRawBufferPointer(rebasing: payload[0..<n]))
                case .hole(let length):
                    // HOLE: the hole's length, a big-endian UInt64.
                    withUnsafeBytes(of: length.bigEndian) { payload.copyMemory(from: $0) }
                    connection.outbound.commitFrame(.hole, length: 8)
                    hasher.updateHole(file.digest, length: length)
                    file.advance(length)
                    tally.hole(file.index, length)
                case .end:
                    dataEnded(file)
                    return
                case .wait:
                    return
                case .failed(let reason):
                    readFailed(reason)
                    return
                }
            }
            if produced > 0 {
                connection.outbound.commitFrame(.data, length: produced)
                connection.flush()
            }
            if file.lifecycle.phase == .compressionDrained {
                dataEnded(file)
                return
            }
        }
    }

    /// Sends the file's next chunk read by a worker as a DATA frame from the buffer it was read
    /// into (its header in the room before it): hashed there, then written to the socket or
    /// sealed into TLS records from there, with no copy into the outbound buffer. False when
    /// the next is not a whole chunk read and waiting (`readSource` then says what it is).
    private func lendRead(_ file: OutgoingFile, _ connection: WireConnection) -> Bool {
        guard file.fd != nil, file.preloaded == nil || file.range != nil, let reader = file.reader,
            let (buffer, count) = reader.takeWhole()
        else { return false }
        let bytes = UnsafeRawBufferPointer(rebasing: buffer.bytes[0..<count])
        noteRead(file, bytes)
        let frame = buffer.frame(.data, count: count)
        if !connection.sendLent(frame, done: { reader.giveBack(buffer) }) {
            // Bytes are held for a BATCH: this frame goes after them, copied.
            connection.outbound.framePayload(count).copyMemory(from: bytes)
            connection.outbound.commitFrame(.data, length: count)
            reader.giveBack(buffer)
        }
        connection.flush()
        return true
    }

    /// One step of the file's deflate stream: `raw`'s bytes in (none when `ending`: the stream
    /// is finished), its output into `payload`; `raw` keeps what is left. Nil when it failed
    /// (the file has failed then).
    func compress(
        _ deflate: StageDriver, _ raw: ByteBuffer, ending: Bool, into payload: UnsafeMutableRawBufferPointer
    ) -> StageProgress? {
        let input: UnsafeRawBufferPointer? = ending ? nil : raw.readable
        let step = Result { () throws(SluiceError) in try deflate.step(input: input, output: payload) }
        guard case .success(let progress) = step else {
            if case .failure(let error) = step { readFailed(error.description) }
            return nil
        }
        raw.consume(progress.consumed)
        return progress
    }

    private func noteRead(_ file: OutgoingFile, _ bytes: UnsafeRawBufferPointer) {
        if file.reader?.hashes != true { hasher?.update(file.digest, bytes) }
        file.advance(UInt64(bytes.count))
        tally.sent(file.index, UInt64(bytes.count))
    }

    func readFailed(_ reason: String) {
        perform(machine.handle(.readFailed(reason)))
        advance()
    }

    /// The file's bytes are all out: once it is known whether it changed meanwhile (asked on
    /// the worker that read it, unless its last read just told) and its digest is final (here
    /// when little of it is left to hash and nothing queued, else on the worker), END goes out
    /// with the size and digest, and the next entry is announced.
    private func dataEnded(_ file: OutgoingFile) {
        var checkChange = false
        if let reader = file.reader, file.range == nil, file.delta == nil {
            if let changed = reader.changedAtEnd {
                file.changeFound(changed)
            } else {
                checkChange = true
            }
        }
        // Once: a flush within `produce` can write, call back and reach the end first.
        switch step(file, .dataOut(checkChange: checkChange)) {
        case .checkChange?:
            file.reader?.checkChanged { [weak self] changed in
                file.changeFound(changed)
                guard let self, self.current === file, !self.ended else { return }
                if self.step(file, .changeChecked) == .finishDigest { self.finishDigest(file) }
            }
        case .finishDigest?: finishDigest(file)
        case .nothing?, .ignore?, .produce?, .read?, .discardDigest?, nil: break
        }
    }

    /// Finishes the digest of a file whose data is all out (`SendLifecycle.Phase.finishing`).
    private func finishDigest(_ file: OutgoingFile) {
        guard let hasher else { return }
        warnIfChanged(file)
        if file.size == nil { tally.sized(file.index, file.position) }
        if file.range == nil, file.heldCheck == nil, let digest = hasher.finalizeNow(file.digest) {
            // A small file: its digest here and now, END at once.
            perform(machine.handle(.dataEnded(size: file.position, digest: digest)))
            advance()
            return
        }
        hasher.finalize(file.digest) { [weak self] digest in
            HeldCheck.outcome(of: file.heldCheck) { [weak self] outcome in
                self?.digestsReady(file, digest, outcome)
            }
        }
    }

    /// The file's digest, and its held bytes' SHA-256 when they are checked apart, are ready:
    /// END (or RANGE-END, after the whole file's digest) goes out.
    func digestsReady(_ file: OutgoingFile, _ digest: [UInt8], _ outcome: HeldCheck.Outcome) {
        guard current === file, !ended else { return }
        let held: [UInt8]?
        switch outcome {
        case .none: held = nil
        case .digest(let value): held = value
        case .unreadable:
            readFailed("read \(quoted(localPath(file))): cannot read the part the receiver holds")
            return
        }
        guard let range = file.range else {
            perform(machine.handle(.dataEnded(size: file.position, digest: digest, held: held)))
            advance()
            return
        }
        // A range: its END carries the whole file's digest too, computed once for all.
        guard let fileDigest = self.fileDigest else {
            // Ranges come only from a ParallelTransferSender, which sets it.
            perform(machine.handle(.readFailed("internal: no whole-file digest for a range")))
            advance()
            return
        }
        fileDigest(file.index, self.machine.digest) { [weak self] whole in
            guard let self, self.current === file, !self.ended else { return }
            if let whole {
                let length = file.position - range.start
                self.perform(
                    self.machine.handle(.rangeEnded(length: length, digest: digest, fileDigest: whole, held: held)))
            } else {
                self.perform(
                    self.machine.handle(.readFailed("read \(quoted(self.localPath(file))): cannot hash it")))
            }
            self.advance()
        }
    }

    /// A whole file written to while it was read is stored as read, which may mix old and new
    /// bytes (its digest is of what was sent, so the receiver cannot tell): say so, as tar does.
    /// Ranges are not warned about: the whole file is hashed apart from them, and a change
    /// usually makes that check fail.
    /// (Its end was checked by the last read, on the worker.)
    private func warnIfChanged(_ file: OutgoingFile) {
        guard file.fd != nil, file.range == nil, file.changed else { return }
        warn(
            "\(quoted(localPath(file))) changed while it was being sent: the copy stored holds the bytes as they were "
                + "read, \(file.position) of them")
    }

    func closeCurrent() {
        guard let file = current else { return }
        current = nil
        if let fd = file.fd {
            if let reader = file.reader {
                reader.close(fd)  // once its reads have run
            } else {
                closeDescriptor(fd)
            }
        }
        if let stream = file.stream {
            stream.delegate = nil
            stream.close()
            if let loop { stream.remove(from: loop) }
        }
        if let raw = rawBuffer { raw.consume(raw.readableBytes) }
        deflate?.cancel()
        deflate = nil
        if step(file, .close) == .discardDigest { hasher?.discardFilling() }
    }

    /// Hands `file`'s lifecycle `event` and returns what to do. An event its phase cannot take
    /// is this sender's fault: the session ends with the message (and nil is returned).
    func step(_ file: OutgoingFile, _ event: SendLifecycle.Event) -> SendLifecycle.Effect? {
        do {
            return try file.handle(event)
        } catch {
            let subject = connection?.output.name
            let fault = SluiceError(.closed, operation: "send", subject: subject, detail: error.description)
            perform(machine.connectionEnded(.failed(fault)))
            return nil
        }
    }

    /// The stream being sent has bytes (or its end, or an error).
    func sourceReady(_ stream: ByteStream, _ event: StreamEvent) {
        guard let file = current, file.stream === stream else { return }
        switch event {
        case .hasBytesAvailable, .endEncountered, .errorOccurred:
            guard step(file, .sourceReadable) == .produce else { return }
            connection?.flush()
            produce()
        default:
            break  // openCompleted, hasSpaceAvailable: nothing to read yet
        }
    }
}

/// Receives the events of a stream being sent, for its sender.
final class SourceWatcher: ByteStreamDelegate {
    weak var sender: TransferSender?

    init(_ sender: TransferSender) { self.sender = sender }

    func stream(_ stream: ByteStream, handle event: StreamEvent) {
        sender?.sourceReady(stream, event)
    }
}
