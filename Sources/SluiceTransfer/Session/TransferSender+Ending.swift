import Sluice

extension TransferSender {
    func end(_ how: SessionEnd) {
        guard !ended else { return }
        let cleanUp = {
            self.closeCurrent()
            self.discardOpensAhead()
        }
        if let session {
            session.end(how, cleanUp: cleanUp)
        } else {
            endedUnstarted = true
            cleanUp()
        }
        let error = how.error(operation: "send", subject: connection?.output.name, peer: "receiver")
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
        summary.pruneRefused = pruneRefused
        let done = completion
        completion = nil
        done?(summary)
    }
}
