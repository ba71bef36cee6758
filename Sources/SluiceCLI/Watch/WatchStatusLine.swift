import Sluice
import SluiceTransfer

/// `send --watch` on a terminal: one status line on standard error, redrawn twice a second —
/// how many directories are watched, the changes waiting, the last change sent and how long
/// it took from its event to the receiver's answer. Cleared before any other line is written
/// (`clearLine`) and when the watch ends.
final class WatchStatusLine {
    private weak var watch: TransferWatch?
    private var timer: LoopTimer?
    private var open = false
    private let output: (String) -> Void

    init(_ watch: TransferWatch, output: @escaping (String) -> Void) {
        self.watch = watch
        self.output = output
    }

    /// Starts redrawing on `loop`.
    func start(on loop: EventLoop) {
        timer = loop.schedule(after: .milliseconds(500), repeating: .milliseconds(500)) { [weak self] in
            self?.draw()
        }
    }

    /// The line as it stands now.
    static func render(_ watch: TransferWatch) -> String {
        var line = "watching \(watch.directoriesWatched) directories, \(watch.queued) queued"
        if watch.reconnections > 0 { line += ", \(watch.reconnections) reconnections" }
        if let last = watch.lastChange {
            line += ", last: \(PeerText.sanitized(last.path)) in \(Int((last.seconds * 1000).rounded())) ms"
        }
        return line
    }

    private func draw() {
        guard let watch, !watch.stopping else { return finish() }
        output("\r" + Self.render(watch) + "\u{1B}[K")
        open = true
    }

    /// Clears the line (before another is written); the next tick draws it again.
    func clearLine() {
        guard open else { return }
        output("\r\u{1B}[K")
        open = false
    }

    /// Stops redrawing and clears the line.
    func finish() {
        timer?.cancel()
        timer = nil
        clearLine()
    }
}
