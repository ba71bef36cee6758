import Sluice

/// Whether a sender puts small files in BATCHes, and the timer that closes the open one at the
/// end of the loop's turn. Changed only by its methods.
struct SenderBatching {
    /// Small files go in BATCHes to a receiver that offers `batch` (off only in tests, to play
    /// a sender published before it).
    private(set) var enabled = true
    /// Closes the open BATCH at the end of the loop's turn.
    private(set) var timer: LoopTimer?

    /// Turns BATCHes on or off (`TransferSender.batches`).
    mutating func enable(_ enabled: Bool) {
        self.enabled = enabled
    }

    /// A BATCH opened: `timer` closes it.
    mutating func opened(closingAt timer: LoopTimer) {
        self.timer = timer
    }

    /// The timer fired: it closes the BATCH now.
    mutating func timerFired() {
        timer = nil
    }

    /// The BATCH closes: its timer is not needed any more.
    mutating func closing() {
        timer?.cancel()
        timer = nil
    }
}

/// BATCH (`batch`): small files sent whole go out many to a frame, which the receiver stores
/// together. The frame's header goes first, its length written in place once the frame is
/// closed; meanwhile the connection holds its bytes back (`WireConnection.hold`).
extension TransferSender {
    /// Small files go in BATCHes to a receiver that offers `batch` (off only in tests, to play
    /// a sender published before it).
    var batches: Bool {
        get { batching.enabled }
        set { batching.enable(newValue) }
    }

    /// Whether `frame` starts a BATCH: a FILE it may hold, to a receiver that takes them.
    func opensBatch(_ frame: Frame) -> Bool {
        guard batching.enabled, case .file(let header) = frame, header.sentWhole else { return false }
        return inspect { $0.offers.batch }
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
        let timer = loop.schedule(after: .zero) { [weak self] in
            guard let self else { return }
            batching.timerFired()
            closeBatch()
        }
        batching.opened(closingAt: timer)
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
        batching.closing()
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
