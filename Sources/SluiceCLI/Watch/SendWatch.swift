import Sluice
import SluiceTransfer

/// `sluice send --watch`: the `TransferWatch` a send session runs instead of a one-shot
/// sender, made with the session's options and told where to report.
enum SendWatch {
    /// A watch of the options' paths, its warnings and answers to `warning` and `result`,
    /// its MOVEs and REMOVEs (with `--itemize`) as lines on standard output.
    static func make(
        _ options: SendOptions, library: TransferSendOptions, listingWarning: @escaping (String) -> Void,
        warning: @escaping (String) -> Void, result: @escaping (TransferFileResult) -> Void,
        removed: @escaping (String) -> Void
    ) -> Result<TransferWatch, SluiceError> {
        let made = Result { () throws(SluiceError) in
            try TransferWatch(
                paths: options.paths, options: library, settle: .milliseconds(Int64(options.settleMilliseconds)),
                warning: listingWarning)
        }
        guard case .success(let watch) = made else { return made }
        // On a terminal, a status line (cleared before each other line, and at the end).
        var status: WatchStatusLine?
        if CopySession.showsProgress(options.progress, stderrIsTerminal: Terminal.isTerminal(2)) {
            status = WatchStatusLine(watch) { Terminal.write($0, to: 2) }
        }
        let warning = { [status] (text: String) in
            status?.clearLine()
            warning(text)
        }
        watch.sender.onWarning = warning
        watch.sender.onFileResult = { [status] in
            status?.clearLine()
            result($0)
        }
        watch.sender.onRemoved = { [status] in
            status?.clearLine()
            removed($0)
        }
        watch.onWarning = warning
        watch.onStarted = { [status] loop in status?.start(on: loop) }
        watch.onEnded = { [status] in status?.finish() }
        watch.onReconnecting = { reason, delay in
            let seconds = Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18
            warning("connection lost (\(reason)): connecting again in \(Format.seconds(seconds)) s, then a --sync pass")
        }
        let itemize = options.itemize
        watch.onMoved = { from, to, outcome in
            guard let to else { return }
            switch outcome {
            case .stored:
                if itemize {
                    status?.clearLine()
                    Terminal.write(
                        "*moving     \(PeerText.sanitized(from)) -> \(PeerText.sanitized(to))\n", to: 1)
                }
            case .refused(let reason), .failed(let reason, _):
                if !options.quiet {
                    warning("\(from): not moved (\(reason)): sent again under its new name")
                }
            }
        }
        return .success(watch)
    }
}
