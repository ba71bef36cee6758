import Sluice

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
