import FoundationEssentials
import Sluice

/// What one side of a network measurement saw, on one connection.
struct NetworkReport: Sendable {
    var bytes: UInt64
    var seconds: Double
    var intervals: [Interval]
    /// The other side's byte count, when it was told.
    var peerBytes: UInt64?
    var sourceBoundSeconds: Double
    var sinkBoundSeconds: Double
    /// The TLS protocol and cipher negotiated, with `--tls`.
    var tls: (protocol: String, cipher: String)? = nil
    /// The process's CPU time over the session (the server's report of a lone client).
    var cpu: CPUTime? = nil

    struct Interval: Sendable {
        var start: Double
        var end: Double
        var bytes: UInt64
        var bytesPerSecond: Double { end > start ? Double(bytes) / (end - start) : 0 }
    }

    var bytesPerSecond: Double { seconds > 0 ? Double(bytes) / seconds : 0 }
}

/// What a client saw of a whole run: each of its streams (one without `-P`) and their sum.
struct NetworkRunReport: Sendable {
    var streams: [NetworkReport]
    /// The sum of the streams' bytes in each interval.
    var intervals: [NetworkReport.Interval]
    /// The client process's CPU time over the run.
    var cpu: CPUTime
    var tls: (protocol: String, cipher: String)?

    var bytes: UInt64 { streams.reduce(0) { $0 + $1.bytes } }
    /// The longest stream's time: the streams start together, so this is the run's.
    var seconds: Double { streams.map(\.seconds).max() ?? 0 }
    var bytesPerSecond: Double { seconds > 0 ? Double(bytes) / seconds : 0 }
    /// The server's count, when every stream was told it.
    var peerBytes: UInt64? {
        streams.reduce(UInt64(0) as UInt64?) { sum, stream in stream.peerBytes.flatMap { peer in sum.map { $0 + peer } }
        }
    }
    /// Source- and sink-bound time, averaged over the streams.
    var sourceBoundSeconds: Double { streams.map(\.sourceBoundSeconds).reduce(0, +) / Double(max(1, streams.count)) }
    var sinkBoundSeconds: Double { streams.map(\.sinkBoundSeconds).reduce(0, +) / Double(max(1, streams.count)) }
}

/// One interval of a run: each stream's slice and their sum, over the same span of time.
struct IntervalTick: Sendable {
    var streams: [NetworkReport.Interval]
    var sum: NetworkReport.Interval
}

/// Samples the byte counts of a run's streams every `interval` seconds, all at the same instant,
/// and reports each stream's slice and their sum.
final class IntervalSampler {
    private var timer: LoopTimer?
    private var last: [UInt64]
    private var lastTime: Double = 0
    private let started = monotonicNanoseconds()
    /// Each stream's intervals.
    private(set) var intervals: [[NetworkReport.Interval]]
    /// The sum's intervals.
    private(set) var sums: [NetworkReport.Interval] = []

    init(streams: Int) {
        last = Array(repeating: 0, count: streams)
        intervals = Array(repeating: [], count: streams)
    }

    func start(
        on loop: EventLoop, every seconds: Double, counts: @escaping () -> [UInt64],
        report: @escaping (IntervalTick) -> Void
    ) {
        let period = Duration.milliseconds(Int64(seconds * 1000))
        timer = loop.schedule(after: period, repeating: period) { [self] in
            sample(counts(), report)
        }
    }

    /// Closes the last, possibly shorter, interval.
    func finish(totals: [UInt64], report: (IntervalTick) -> Void) {
        timer?.cancel()
        timer = nil
        if zip(totals, last).contains(where: { $0 > $1 }) { sample(totals, report) }
    }

    private func sample(_ now: [UInt64], _ report: (IntervalTick) -> Void) {
        let t = Double(monotonicNanoseconds() - started) / 1e9
        let slices = now.indices.map { i in
            NetworkReport.Interval(start: lastTime, end: t, bytes: now[i] &- (i < last.count ? last[i] : 0))
        }
        let sum = NetworkReport.Interval(start: lastTime, end: t, bytes: slices.reduce(0) { $0 + $1.bytes })
        last = now
        lastTime = t
        for (i, slice) in slices.enumerated() where i < intervals.count { intervals[i].append(slice) }
        sums.append(sum)
        report(IntervalTick(streams: slices, sum: sum))
    }
}

/// The bench client: opens `streams` connections, says on each what it wants, then, once every
/// connection has said so, sends on all at once (or with `reverse` receives) for the given
/// time, reporting every interval. The streams share one loop and thread, as iperf3's did.
struct NetworkBenchClient {
    var host: String
    var port: UInt16
    var seconds: Double
    var chunkSize: ChunkSize
    var compress: Bool
    var reverse: Bool
    var interval: Double
    var timeout: Duration?
    /// TLS 1.3 with this (client) context, a handshake per connection; plain TCP when nil.
    var tls: TLSContext?
    /// Connections (`-P`): 1 to `BenchHello.maxStreams`.
    var streams = 1
    var onInterval: (IntervalTick) -> Void

    func run() throws -> NetworkRunReport {
        let (run, cpu) = try CPUTime.measure {
            let run = try ClientRun(self)
            run.run()
            return run
        }
        if let failure = run.failure { throw BenchFailure(description: failure, error: run.failureError) }
        var reports = run.reports.compactMap { $0 }
        guard reports.count == streams else {
            throw BenchFailure(description: "tcp:\(host):\(port): connection ended early")
        }
        // Each stream's intervals, the last one included (closed when the last stream ended).
        let intervals = run.sampler?.intervals ?? []
        for i in reports.indices where i < intervals.count { reports[i].intervals = intervals[i] }
        var tls: (String, String)?
        if let writer = run.connections.first?.writer, let version = writer.property(forKey: .tlsProtocol) as? String,
            let cipher = writer.property(forKey: .tlsCipher) as? String
        {
            tls = (version, cipher)
        }
        return NetworkRunReport(streams: reports, intervals: run.sampler?.sums ?? [], cpu: cpu, tls: tls)
    }
}

/// One run of the client, on its loop's thread.
private final class ClientRun {
    let config: NetworkBenchClient
    let loop: EventLoop
    let connections: [(reader: ReadStream, writer: WriteStream)]
    /// Made when the streams start.
    private(set) var sampler: IntervalSampler?
    var pipelines: [Pipeline?]
    /// Each pipeline's final count, once it has ended.
    var totals: [UInt64?]
    var reports: [NetworkReport?]
    var failure: String?
    var failureError: SluiceError?
    private var greeted = 0
    private let options: PipelineOptions
    /// What a sending client sends, made before connecting so that no stream waits for it:
    /// one pattern for every stream (`-P 128` of a 4 MiB pattern each would be half a gigabyte).
    private let pattern: [UInt8]

    init(_ config: NetworkBenchClient) throws {
        self.config = config
        loop = try EventLoop()
        let n = config.streams
        pipelines = Array(repeating: nil, count: n)
        totals = Array(repeating: nil, count: n)
        reports = Array(repeating: nil, count: n)
        options = PipelineOptions(chunkSize: config.chunkSize, closesStreams: false)
        pattern =
            config.reverse ? [] : config.compress ? BenchData.text(4 << 20) : BenchData.random(config.chunkSize.bytes)
        connections = (0..<n).map { _ in
            let plain = Socket.connect(host: config.host, port: config.port, timeout: config.timeout)
            return config.tls.map { TLS.secure(plain, context: $0) } ?? plain
        }
    }

    var milliseconds: UInt32 { UInt32(min(config.seconds, 3600) * 1000) }

    func run() {
        let group = config.streams > 1 ? UInt32.random(in: .min ... .max) : nil
        for (index, connection) in connections.enumerated() {
            connection.reader.schedule(on: loop)
            connection.writer.schedule(on: loop)
            connection.reader.open()
            connection.writer.open()
            let hello = BenchHello(
                reverse: config.reverse, compress: config.compress, milliseconds: milliseconds,
                group: group.map { BenchHello.Group(id: $0, count: config.streams, index: index) })
            _ = AllWriter(connection.writer, bytes: hello.bytes) { [self] ok in
                guard ok else {
                    return fail(
                        connection.writer.streamError.map { "\($0)" } ?? "connect \(config.host):\(config.port) failed",
                        index)
                }
                greeted += 1
                // Every connection is up and has said what it wants: all start at once.
                if greeted == connections.count { startAll() }
            }
        }
        loop.run()
    }

    private func fail(_ text: String, _ index: Int) {
        if failure == nil {
            failureError = connections[index].writer.streamError ?? connections[index].reader.streamError
        }
        failure = failure ?? text
        for connection in connections {
            connection.reader.close()
            connection.writer.close()
        }
        loop.stop()
    }

    private func startAll() {
        guard failure == nil else { return }
        let sampler = IntervalSampler(streams: connections.count)
        self.sampler = sampler
        for index in connections.indices {
            do {
                try start(index)
            } catch {
                return fail("\(error)", index)
            }
        }
        sampler.start(
            on: loop, every: config.interval,
            counts: { [self] in
                pipelines.indices.map { i in
                    totals[i] ?? pipelines[i].map { config.reverse ? $0.bytesWritten : $0.bytesRead } ?? 0
                }
            }, report: config.onInterval)
    }

    /// A stream's pipeline has ended: the last one closes the sampler's last interval.
    private func ended(_ index: Int, total: UInt64) {
        totals[index] = total
        let done = totals.compactMap { $0 }
        if done.count == totals.count { sampler?.finish(totals: done, report: config.onInterval) }
    }

    private func start(_ index: Int) throws {
        let (reader, writer) = connections[index]
        if config.reverse {
            let stages: [any Stage] = config.compress ? [OffloadedStage(try Inflate(format: .gzip))] : []
            let pipeline = Pipeline(source: reader, stages: stages, sink: .discard(), options: options)
            pipelines[index] = pipeline
            pipeline.start(on: loop) { [self] result in
                ended(index, total: result.bytesWritten)
                if let error = result.error { return fail("\(error)", index) }
                reports[index] = NetworkReport(
                    bytes: result.bytesWritten, seconds: result.elapsedSeconds, intervals: [],
                    peerBytes: nil, sourceBoundSeconds: result.sourceBoundSeconds,
                    sinkBoundSeconds: result.sinkBoundSeconds)
                reader.close()
                writer.close()
            }
        } else {
            let stages: [any Stage] = config.compress ? [try ParallelDeflate(format: .gzip, level: 1)] : []
            let pipeline = Pipeline(
                source: .repeating(pattern, for: .milliseconds(Int64(milliseconds))), stages: stages, sink: writer,
                options: options)
            pipelines[index] = pipeline
            pipeline.start(on: loop) { [self] result in
                ended(index, total: result.bytesRead)
                if let error = result.error { return fail("\(error)", index) }
                writer.close()  // half-close: the server sees the end and answers with its count
                _ = ExactReader(reader, count: BenchAnswer.size) { [self] answer in
                    reports[index] = NetworkReport(
                        bytes: result.bytesRead, seconds: result.elapsedSeconds, intervals: [],
                        peerBytes: answer.flatMap(BenchAnswer.init)?.bytes,
                        sourceBoundSeconds: result.sourceBoundSeconds, sinkBoundSeconds: result.sinkBoundSeconds)
                    reader.close()
                }
            }
        }
    }
}

/// What the server answers a sending client once it has seen the end: its byte count and
/// seconds (16 bytes).
struct BenchAnswer {
    static let size = 16
    var bytes: UInt64
    var nanoseconds: UInt64

    init(bytes: UInt64, seconds: Double) {
        self.bytes = bytes
        nanoseconds = seconds.isFinite && seconds > 0 ? UInt64(min(seconds, 1e9) * 1e9) : 0
    }

    init?(_ bytes: [UInt8]) {
        guard bytes.count == Self.size else { return nil }
        self.bytes = bytes.readBigEndian(UInt64.self, at: 0)
        nanoseconds = bytes.readBigEndian(UInt64.self, at: 8)
    }

    var encoded: [UInt8] {
        var out: [UInt8] = []
        out.appendBigEndian(bytes)
        out.appendBigEndian(nanoseconds)
        return out
    }
}

/// The sum a server reports for a run of several connections (`-P`) once all have ended.
struct NetworkGroupReport: Sendable {
    /// Connections of the run that were served to the end.
    var streams: Int
    /// Connections the client said the run has.
    var expected: Int
    var bytes: UInt64
    /// From the first connection's hello to the last one's end.
    var seconds: Double
    /// The server process's CPU time over that span.
    var cpu: CPUTime

    var bytesPerSecond: Double { seconds > 0 ? Double(bytes) / seconds : 0 }
}

/// The bench server: accepts clients on one loop; for each connection, discards what it sends
/// (or sends for the asked time with `reverse`) and reports the bytes and seconds; for a run of
/// several connections (`bench -P`), also their sum once all have ended. With `once` it serves
/// one client run — one connection, or the N connections of a `-P N` run — and then ends; the
/// connections of a run have `joinTimeout` after the first to arrive, and if some never do the
/// server serves those that came (the sum says how many of how many) and ends all the same.
struct NetworkBenchServer {
    var listener: SocketListener
    var chunkSize: ChunkSize
    var once: Bool
    var joinTimeout: Duration = .seconds(10)
    /// TLS 1.3 with this (server) context; plain TCP when nil.
    var tls: TLSContext?
    /// Each connection's report, with its place in a run of several.
    var onSession: (NetworkReport, SocketAddress, BenchHello.Group?) -> Void
    /// A run of several connections, once they have all ended.
    var onGroup: (NetworkGroupReport, SocketAddress) -> Void
    var onError: (String) -> Void

    func run() throws {
        let loop = try EventLoop()
        let admission = BenchAdmission(once: once, listener: listener, loop: loop, joinTimeout: joinTimeout)
        admission.onIncomplete = { arrived, expected, peer in
            onError(
                "\(peer.host ?? peer.description): \(arrived) of the run's \(expected) connections arrived "
                    + "within \(joinTimeout); serving those")
        }
        admission.onGroup = onGroup
        let patterns = BenchPatterns(chunkSize: chunkSize)
        let options = PipelineOptions(chunkSize: chunkSize, closesStreams: false)
        let handler: Socket.ConnectionHandler = { reader, writer, peer in
            reader.schedule(on: loop)
            writer.schedule(on: loop)
            reader.open()
            writer.open()
            let ticket = admission.connected {
                reader.close()
                writer.close()
            }
            var cpuAtStart = CPUTime.zero
            func end(_ report: NetworkReport?, _ error: String?, _ group: BenchHello.Group?) {
                reader.close()
                writer.close()
                if var report {
                    if group == nil { report.cpu = CPUTime.process() - cpuAtStart }
                    onSession(report, peer, group)
                }
                if let error { onError("\(peer): \(error)") }
                if let group, let sum = admission.ended(group, peer: peer, report: report) { onGroup(sum, peer) }
            }
            func refuse(_ why: String) {
                admission.refused(ticket)
                end(nil, why, nil)
            }
            func serve(_ hello: BenchHello) {
                if let why = admission.admit(ticket, hello, peer: peer) { return refuse(why) }
                cpuAtStart = CPUTime.process()
                do {
                    try Self.serve(
                        hello, reader: reader, writer: writer, patterns: patterns, options: options, on: loop
                    ) {
                        end($0, $1, hello.group)
                    }
                } catch {
                    end(nil, "\(error)", hello.group)
                }
            }
            _ = ExactReader(reader, count: BenchHello.size) { bytes in
                guard let bytes, var hello = BenchHello(header: bytes) else {
                    return refuse("not a sluice bench client")
                }
                guard hello.expectsGroup else { return serve(hello) }
                _ = ExactReader(reader, count: BenchHello.groupSize) { bytes in
                    guard let bytes, hello.readGroup(bytes) else { return refuse("not a sluice bench client") }
                    serve(hello)
                }
            }
        }
        if let tls {
            try listener.accept(on: loop, context: tls, handler: handler)
        } else {
            try listener.accept(on: loop, handler: handler)
        }
        loop.run()
    }

    /// Discards what the client sends and answers with the count, or with `reverse` sends for
    /// the asked time; `done` gets the report or why it failed.
    private static func serve(
        _ hello: BenchHello, reader: ReadStream, writer: WriteStream, patterns: BenchPatterns, options: PipelineOptions,
        on loop: EventLoop, done: @escaping (NetworkReport?, String?) -> Void
    ) throws {
        if hello.reverse {
            let pattern = hello.compress ? patterns.text : patterns.random
            let stages: [any Stage] = hello.compress ? [try ParallelDeflate(format: .gzip, level: 1)] : []
            let pipeline = Pipeline(
                source: .repeating(pattern, for: .milliseconds(Int64(hello.milliseconds))), stages: stages,
                sink: writer, options: options)
            pipeline.start(on: loop) { result in
                done(report(result, bytes: result.bytesRead), result.error.map { "\($0)" })
            }
        } else {
            let stages: [any Stage] = hello.compress ? [OffloadedStage(try Inflate(format: .gzip))] : []
            let pipeline = Pipeline(source: reader, stages: stages, sink: .discard(), options: options)
            pipeline.start(on: loop) { result in
                let report = report(result, bytes: result.bytesWritten)
                let answer = BenchAnswer(bytes: report.bytes, seconds: report.seconds)
                _ = AllWriter(writer, bytes: answer.encoded) { _ in done(report, result.error.map { "\($0)" }) }
            }
        }
    }

    private static func report(_ result: PipelineResult, bytes: UInt64) -> NetworkReport {
        NetworkReport(
            bytes: bytes, seconds: result.elapsedSeconds, intervals: [], peerBytes: nil,
            sourceBoundSeconds: result.sourceBoundSeconds, sinkBoundSeconds: result.sinkBoundSeconds)
    }
}

/// What the server sends with `reverse`, made once (on first use) for all its clients: making
/// 4 MiB of text for each connection of a `-P` run would hold up the loop each time.
final class BenchPatterns {
    private let chunkSize: ChunkSize
    init(chunkSize: ChunkSize) { self.chunkSize = chunkSize }
    private(set) lazy var text = BenchData.text(4 << 20)
    private(set) lazy var random = BenchData.random(chunkSize.bytes)
}

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
