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
        tally.unanswered("not transferred: " + (error?.description ?? "no answer"))
        let stored = entries.indices.filter { tally.outcomes[$0] == .stored }
        var summary = TransferSummary(
            files: watch.forgotten.files + stored.filter { !entries[$0].isDirectory }.count,
            directories: watch.forgotten.directories + stored.filter { entries[$0].isDirectory }.count,
            bytes: tally.bytesSentOfFiles, bytesSent: connection?.bytesWritten ?? 0, resumedBytes: tally.resumedBytes,
            seconds: started == 0 ? 0 : Double(monotonicNanoseconds() - started) / 1e9,
            results: watch.forgottenResults + entries.indices.map(result), error: error,
            digest: machine.peerCapabilities.isEmpty ? nil : machine.digest)
        summary.holeBytes = tally.holeBytes
        summary.vouchedBytes = tally.vouchedBytes
        summary.bytesReceived = connection?.bytesRead ?? 0
        summary.matchedBytes = tally.matchedBytes
        summary.removed = tally.removed
        summary.pruneFailures = tally.pruneFailures
        summary.pruneRefused = tally.pruneRefused
        summary.forgotten = watch.forgotten
        let done = completion
        completion = nil
        done?(summary)
    }
}
