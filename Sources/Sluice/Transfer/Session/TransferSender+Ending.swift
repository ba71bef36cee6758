extension TransferSender {
    func end(_ how: SessionEnd) {
        guard !ended else { return }
        ended = true
        closeCurrent()
        discardOpensAhead()
        let name = connection?.output.name
        let error: SluiceError?
        switch how {
        case .goodbye:
            error = nil
        case .violation(let reason):
            error = SluiceError(.protocolViolation, operation: "send", subject: name, detail: reason)
        case .turnedAway(let reason):
            // The receiver's end alone (its machine turns a sender away): not met here.
            error = SluiceError(.unavailable, operation: "send", subject: name, detail: reason)
        case .peerError(let reason) where reason.hasPrefix(Wire.expiredPrefix):
            // The key authenticated, but the code it came from has served its transfers.
            error = SluiceError(.authenticationFailed, operation: "send", subject: name, detail: "receiver: \(reason)")
        case .peerError(let reason) where reason.hasPrefix(Wire.busyPrefix):
            // Serving all the sessions it allows: nothing was refused, try again later.
            error = SluiceError(.unavailable, operation: "send", subject: name, detail: "receiver: \(reason)")
        case .peerError(let reason):
            error = SluiceError(.refused, operation: "send", subject: name, detail: "receiver: \(reason)")
        case .closedEarly(let detail):
            error = SluiceError(.truncatedData, operation: "send", subject: name, detail: detail)
        case .timedOut:
            error = SluiceError(.timedOut, operation: "send", subject: name)
        case .connectionFailed(let failure):
            error = failure
        case .cancelled:
            error = SluiceError(.cancelled, operation: "send", subject: name)
        }
        if let connection {
            let graceful: Bool
            switch how {
            case .goodbye, .violation: graceful = true
            case .peerError, .closedEarly, .timedOut, .connectionFailed, .cancelled, .turnedAway: graceful = false
            }
            if graceful && !connection.outbound.isEmpty {
                connection.closeAfterFlush()
            } else {
                connection.close()
            }
        }
        for index in entries.indices where outcomes[index] == nil {
            let reason = "not transferred: " + (error?.description ?? "no answer")
            outcomes[index] = .failed(reason: reason, kind: .io)
        }
        let stored = entries.indices.filter { outcomes[$0] == .stored }
        var summary = TransferSummary(
            files: stored.filter { !entries[$0].isDirectory }.count,
            directories: stored.filter { entries[$0].isDirectory }.count,
            bytes: bytesSentOfFiles, bytesSent: connection?.bytesWritten ?? 0, resumedBytes: resumedBytes,
            seconds: started == 0 ? 0 : Double(monotonicNanoseconds() - started) / 1e9,
            results: entries.indices.map(result), error: error,
            digest: machine.peerCapabilities.isEmpty ? nil : machine.digest)
        summary.holeBytes = holeBytes
        summary.vouchedBytes = vouchedBytes
        summary.bytesReceived = connection?.bytesRead ?? 0
        summary.matchedBytes = matchedBytes
        summary.removed = removed
        summary.pruneFailures = pruneFailures
        let done = completion
        completion = nil
        done?(summary)
    }
}
