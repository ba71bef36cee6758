/// The byte engine: the source is read into queue 0, each stage moves bytes from its input
/// queue to its output queue, and the sink is written from the last queue, under the
/// backpressure described on `Pipeline`. Chunk buffers come from a pool and go back to it.
extension Pipeline {

    func takeChunk() -> Chunk {
        if let chunk = hot.pool.popLast() { return chunk }
        hot.allocatedChunks += 1
        precondition(hot.allocatedChunks <= (stages.count + 1) * options.depth + 1, "chunk hot.pool overflow")
        return Chunk(capacity: options.chunkSize.bytes)
    }

    func recycle(_ chunk: Chunk) {
        chunk.reset()
        if chunk.isLent {
            hot.lentPool.append(chunk)
        } else {
            hot.pool.append(chunk)
        }
    }

    func notePeak() {
        let now = inFlightBytes
        if now > hot.peakInFlightBytes {
            hot.peakInFlightBytes = now
            assert(now <= inFlightLimit, "in flight \(now) exceeds \(inFlightLimit)")
        }
    }

    /// Reads chunks into queue 0 while it has room, up to `depth` reads for one readiness (as
    /// a delegate may read repeatedly on one `hasBytesAvailable`); stops at a short read, which
    /// means the kernel had no more for now.
    func readSource() {
        for _ in 0..<options.depth {
            guard hot.queues[0].hasRoom, !hot.isFinished, readChunk() else { return }
        }
    }

    /// One read; true when it filled a whole chunk, so another read may find more.
    private func readChunk() -> Bool {
        guard !hot.queues[0].producerDone else { return false }
        // A source whose bytes are already in memory lends them: no copy into a chunk buffer.
        if let lent = source.lend(upTo: options.chunkSize.bytes) {
            guard !lent.isEmpty else {
                hot.queues[0].producerDone = true
                hot.pumpAgain = true
                return false
            }
            let chunk: Chunk
            if let header = hot.lentPool.popLast() {
                header.relend(lent)
                chunk = header
            } else {
                chunk = Chunk(lent: lent)
            }
            hot.bytesRead += UInt64(lent.count)
            for tap in sourceTaps { tap.observe(lent) }
            hot.queues[0].pushSealed(chunk)
            notePeak()
            hot.pumpAgain = true
            return true
        }
        // Nothing between the ends and nothing queued: a sink that copies into memory of its
        // own lends it, and the source is read straight into it.
        if stages.isEmpty, sinkTaps.isEmpty, hot.limiter == nil, hot.queues[0].isEmpty, sink.streamStatus == .open,
            let space = sink.lendSpace(upTo: options.chunkSize.bytes)
        {
            return readIntoSink(space)
        }
        let chunk = takeChunk()
        switch source.tryReadFilling(into: chunk.storage) {
        case .processed(let n) where n > 0:
            chunk.end = n
            hot.bytesRead += UInt64(n)
            for tap in sourceTaps { tap.observe(chunk.bytes) }
            hot.queues[0].pushSealed(chunk)
            notePeak()
            hot.pumpAgain = true
            return n == chunk.storage.count
        case .processed(0):
            recycle(chunk)
            hot.queues[0].producerDone = true
            hot.pumpAgain = true
        case .processed:
            recycle(chunk)
            fail(.source, source.streamError ?? source.error(.system(.ioError), operation: "read"))
        case .wouldBlock:
            recycle(chunk)
        }
        return false
    }

    /// One read into the space the sink lent; true when it filled the space.
    private func readIntoSink(_ space: UnsafeMutableRawBufferPointer) -> Bool {
        switch source.tryReadFilling(into: space) {
        case .processed(let n) where n > 0:
            hot.bytesRead += UInt64(n)
            for tap in sourceTaps { tap.observe(UnsafeRawBufferPointer(rebasing: space[..<n])) }
            do {
                try sink.takeLentSpace(n)
            } catch {
                fail(.sink, error)
                return false
            }
            hot.bytesWritten += UInt64(n)
            hot.peakInFlightBytes = max(hot.peakInFlightBytes, n)
            hot.pumpAgain = true
            return n == space.count
        case .processed(0):
            hot.queues[0].producerDone = true
            hot.pumpAgain = true
        case .processed:
            fail(.source, source.streamError ?? source.error(.system(.ioError), operation: "read"))
        case .wouldBlock:
            break
        }
        return false
    }

    /// Writes ready chunks to the sink until it would block, a write is partial, or the rate
    /// limit says wait.
    func writeSink() {
        let last = stages.count
        var writes = 0
        while hot.queues[last].hasReady, writes < options.depth, !hot.isFinished {
            let chunk = hot.queues[last].front
            let available = chunk.count
            var allowed = available
            if let limiter = hot.limiter {
                allowed = min(allowed, limiter.take(wanted: available))
                if allowed == 0 { return }
            }
            let outcome = sink.tryWrite(from: UnsafeRawBufferPointer(rebasing: chunk.bytes[..<allowed]))
            switch outcome {
            case .processed(let n) where n > 0:
                for tap in sinkTaps { tap.observe(UnsafeRawBufferPointer(rebasing: chunk.bytes[..<n])) }
                hot.limiter?.spend(n)
                hot.bytesWritten += UInt64(n)
                hot.queues[last].consumed(n)
                if chunk.count == 0 {
                    recycle(hot.queues[last].popFront())
                    hot.pumpAgain = true
                }
                if n < available { return }  // partial (kernel buffer full) or throttled
                writes += 1
            case .processed(0):
                return  // the endEncountered event reports a full fixed-capacity sink
            case .processed:
                fail(.sink, sink.streamError ?? sink.error(.system(.ioError), operation: "write"))
                return
            case .wouldBlock:
                return
            }
        }
    }

    /// Moves bytes as far as they can go: through the stages, into the sink if the
    /// pending-write flag is set, and out of the source if it is waiting for room.
    func pump() {
        if hot.pumping {
            hot.pumpAgain = true
            return
        }
        hot.pumping = true
        defer { hot.pumping = false }
        repeat {
            hot.pumpAgain = false
            for index in stages.indices { runStage(index) }
            guard !hot.isFinished else { return }
            let last = stages.count
            if hot.pendingWrite.isSet && hot.queues[last].hasReady && hot.limiter?.isWaiting != true {
                hot.pendingWrite.take()
                writeSink()
            }
            if hot.sourceWaiting.isSet && hot.queues[0].hasRoom {
                hot.sourceWaiting.take()
                readSource()
            }
            guard !hot.isFinished else { return }
            if hot.queues[last].finished {
                succeed()
                return
            }
        } while hot.pumpAgain
    }

    /// Runs stage `index` (through its driver) while it has input and output room.
    private func runStage(_ index: Int) {
        let driver = drivers[index]
        guard !driver.isFinished else { return }
        let inputIndex = index
        let outputIndex = index + 1
        while !hot.isFinished {
            let haveInput = hot.queues[inputIndex].hasReady
            let atEnd = hot.queues[inputIndex].finished
            guard haveInput || atEnd else {
                // Starved: hand on what is held so nothing waits behind an empty input.
                hot.queues[outputIndex].sealTail(recycle: recycle)
                driver.noteStarved()
                return
            }
            guard hot.queues[outputIndex].hasRoom else {
                driver.noteBlocked()
                return
            }
            let out = hot.queues[outputIndex].openTail(takeChunk)
            let progress: StageProgress
            do {
                progress = try driver.step(
                    input: haveInput ? hot.queues[inputIndex].front.bytes : nil, output: out.free)
            } catch {
                fail(.stage(index: index, name: driver.stage.name), error)
                return
            }
            out.end += progress.produced
            hot.queues[outputIndex].produced(progress.produced)
            if progress.consumed > 0 {
                hot.queues[inputIndex].consumed(progress.consumed)
                if hot.queues[inputIndex].front.count == 0 {
                    recycle(hot.queues[inputIndex].popFront())
                    hot.pumpAgain = true
                }
            }
            notePeak()
            if driver.isFinished {
                hot.queues[outputIndex].sealTail(recycle: recycle)
                hot.queues[outputIndex].producerDone = true
                hot.pumpAgain = true
                return
            }
            if driver.isWaitingForWorkers {
                // The stage's workers hold what it can take: hand on what is ready, and run
                // again when its wake-up comes.
                hot.queues[outputIndex].sealTail(recycle: recycle)
                return
            }
            if out.freeSpace == 0 { hot.pumpAgain = true }
        }
    }
}
