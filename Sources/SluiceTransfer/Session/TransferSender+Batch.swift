import Sluice

/// BATCH (`batch`): small files sent whole go out many to a frame, which the receiver stores
/// together. The frame's header goes first, its length written in place once the frame is
/// closed; meanwhile the connection holds its bytes back (`WireConnection.hold`).
extension TransferSender {
    /// Whether `frame` starts a BATCH: a FILE it may hold, to a receiver that takes them.
    func opensBatch(_ frame: Frame) -> Bool {
        guard batches, case .file(let header) = frame, header.sentWhole else { return false }
        return machine.peerOffers(Wire.Capability.batch)
    }

    /// Whether `frame` goes in the open BATCH: another FILE it may hold, or the END or ABORT of
    /// the file in it (its DATA is written in place by `produce`).
    func batchHolds(_ frame: Frame) -> Bool {
        switch frame {
        case .file(let header): return header.sentWhole
        case .end, .abort: return true
        default: return false
        }
    }

    /// Writes a BATCH's header, its length to come, and holds the connection's bytes from it
    /// on; the frame closes at the end of this turn of the loop at the latest.
    func openBatch() {
        guard let connection, let loop else { return }
        connection.hold()
        guard connection.outbound.append(Frame.batch(length: 0).encoded) else {
            connection.release()
            return
        }
        batchTimer = loop.schedule(after: .zero) { [weak self] in
            guard let self else { return }
            batchTimer = nil
            closeBatch()
        }
    }

    /// Closes the BATCH once it holds `Wire.batchTarget` bytes (or a chunk, when chunks are
    /// smaller): the receiver stores each BATCH's files as they come.
    func closeBatchIfFull() {
        guard let connection, let start = connection.heldFrom else { return }
        let payload = connection.outbound.readableBytes - start - Wire.frameHeaderSize
        if payload >= min(Wire.batchTarget, options.chunkSize.bytes) { closeBatch() }
    }

    /// Writes the open BATCH's length into its header and lets its bytes go.
    func closeBatch() {
        batchTimer?.cancel()
        batchTimer = nil
        guard let connection, let start = connection.heldFrom else { return }
        let payload = connection.outbound.readableBytes - start - Wire.frameHeaderSize
        if payload > 0 {
            Wire.putFrameHeader(.batch, length: payload, into: connection.outbound.readable(from: start))
        } else {
            // Nothing went in it: its header goes too (an empty BATCH breaks the protocol).
            connection.outbound.dropLast(Wire.frameHeaderSize)
        }
        connection.release()
    }
}
