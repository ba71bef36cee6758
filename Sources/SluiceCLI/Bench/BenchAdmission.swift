import Sluice

/// Which connections the server serves, on its loop's thread: with `once`, the first client
/// run only (one connection, or the N of a `-P N` run), after which it stops listening and
/// drops connections that have not said what they want; and, for runs of several connections,
/// the sums it reports when they end.
///
/// Everything here comes from strangers: runs are keyed by the peer's host and the run's id,
/// a run holds at most `BenchHello.maxStreams` connections, and at most `maxRuns` runs are
/// open at once (runs whose connections have all ended are dropped first).
final class BenchAdmission {
    /// A connection from accept to its end.
    typealias Ticket = Int

    static let maxRuns = 64

    private struct Run {
        var expected: Int
        let peer: SocketAddress
        var joined: Set<Int> = []
        var live = 0
        var ended = 0
        var bytes: UInt64 = 0
        var served = 0
        /// No more connections are awaited: those that never came are not waited for.
        var closed = false
        let started = monotonicNanoseconds()
        let cpu = CPUTime.process()
        var complete: Bool { closed || joined.count == expected }
    }

    private let once: Bool
    private let listener: SocketListener
    private let loop: EventLoop
    private let joinTimeout: Duration
    /// With `once`: the deadline for the rest of the run's connections.
    private var joinTimer: LoopTimer?
    /// A run's sum, when its last connection ended after the deadline passed (otherwise the
    /// sum is what `ended` returns).
    var onGroup: ((NetworkGroupReport, SocketAddress) -> Void)?
    /// With `once`: the deadline passed before every connection of the run arrived.
    var onIncomplete: ((_ arrived: Int, _ expected: Int, SocketAddress) -> Void)?
    /// With `once`: the run being served, once its first connection has said so.
    private var onceRun: String??
    private var runs: [String: Run] = [:]
    /// Connections that have not said what they want yet, with how to drop them.
    private var waiting: [Ticket: () -> Void] = [:]
    private var nextTicket = 0

    init(once: Bool, listener: SocketListener, loop: EventLoop, joinTimeout: Duration = .seconds(10)) {
        self.once = once
        self.listener = listener
        self.loop = loop
        self.joinTimeout = joinTimeout
    }

    /// A connection was accepted; `drop` closes it if the server stops waiting for it.
    func connected(drop: @escaping () -> Void) -> Ticket {
        nextTicket += 1
        waiting[nextTicket] = drop
        return nextTicket
    }

    /// The connection was refused before it was served.
    func refused(_ ticket: Ticket) {
        waiting[ticket] = nil
    }

    /// Decides whether to serve a connection that has said `hello`: nil to serve it, or why not.
    func admit(_ ticket: Ticket, _ hello: BenchHello, peer: SocketAddress) -> String? {
        waiting[ticket] = nil
        let key = hello.group.map { "\(peer.host ?? peer.description)#\($0.id)" }
        if once, let served = onceRun {
            guard let key, served == key else { return "the server (--once) is serving another client" }
        }
        if let group = hello.group, let key {
            var run = runs[key] ?? Run(expected: group.count, peer: peer)
            guard run.expected == group.count, !run.joined.contains(group.index) else {
                return "not a connection of its run (stream \(group.index + 1) of \(group.count))"
            }
            if runs[key] == nil {
                if runs.count >= Self.maxRuns { runs = runs.filter { $0.value.live > 0 } }
                guard runs.count < Self.maxRuns else { return "too many runs at once" }
            }
            run.joined.insert(group.index)
            run.live += 1
            runs[key] = run
            if once {
                onceRun = key
                if run.complete {
                    joinTimer?.cancel()
                    joinTimer = nil
                    stopListening()
                } else if joinTimer == nil {
                    joinTimer = loop.schedule(after: joinTimeout) { [weak self] in self?.joinTimedOut(key) }
                }
            }
        } else if once {
            onceRun = .some(nil)
            stopListening()
        }
        return nil
    }

    /// A served connection of a run has ended; the run's sum once the last one has.
    func ended(_ group: BenchHello.Group, peer: SocketAddress, report: NetworkReport?) -> NetworkGroupReport? {
        let key = "\(peer.host ?? peer.description)#\(group.id)"
        guard var run = runs[key] else { return nil }
        run.live -= 1
        run.ended += 1
        if let report {
            run.bytes += report.bytes
            run.served += 1
        }
        guard run.complete, run.ended == run.joined.count else {
            runs[key] = run
            return nil
        }
        runs[key] = nil
        return Self.sum(run)
    }

    private static func sum(_ run: Run) -> NetworkGroupReport {
        NetworkGroupReport(
            streams: run.served, expected: run.expected, bytes: run.bytes,
            seconds: Double(monotonicNanoseconds() - run.started) / 1e9, cpu: CPUTime.process() - run.cpu)
    }

    /// With `once`, the rest of the run did not come in time: serve those that came, then end.
    private func joinTimedOut(_ key: String) {
        joinTimer = nil
        guard var run = runs[key], !run.complete else { return }
        run.closed = true
        stopListening()
        onIncomplete?(run.joined.count, run.expected, run.peer)
        if run.ended == run.joined.count {
            runs[key] = nil
            onGroup?(Self.sum(run), run.peer)
        } else {
            runs[key] = run
        }
    }

    /// With `once`, the run is all here: accept no more, and drop whoever has not spoken.
    private func stopListening() {
        listener.close()
        let drops = waiting.values
        waiting = [:]
        for drop in drops { drop() }
    }
}
