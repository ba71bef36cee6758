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
