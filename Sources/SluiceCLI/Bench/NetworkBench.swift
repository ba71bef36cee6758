import Foundation
import Sluice

/// The first bytes a bench client sends: magic, flags, and how long to run.
struct BenchHello {
    static let magic = Array("SLBENCH1".utf8)
    static let size = 16

    var reverse: Bool
    var compress: Bool
    var milliseconds: UInt32

    var bytes: [UInt8] {
        var out = Self.magic
        out.appendBigEndian(UInt32((reverse ? 1 : 0) | (compress ? 2 : 0)))
        out.appendBigEndian(milliseconds)
        return out
    }

    init(reverse: Bool, compress: Bool, milliseconds: UInt32) {
        self.reverse = reverse
        self.compress = compress
        self.milliseconds = milliseconds
    }

    init?(_ bytes: [UInt8]) {
        guard bytes.count == Self.size, Array(bytes[0..<8]) == Self.magic else { return nil }
        let flags = bytes.readBigEndian(UInt32.self, at: 8)
        guard flags & ~3 == 0 else { return nil }
        reverse = flags & 1 != 0
        compress = flags & 2 != 0
        milliseconds = bytes.readBigEndian(UInt32.self, at: 12)
        guard milliseconds <= 3_600_000 else { return nil }
    }
}

/// What one side of a network measurement saw.
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

    struct Interval: Sendable {
        var start: Double
        var end: Double
        var bytes: UInt64
        var bytesPerSecond: Double { end > start ? Double(bytes) / (end - start) : 0 }
    }

    var bytesPerSecond: Double { seconds > 0 ? Double(bytes) / seconds : 0 }
}

/// Samples a pipeline's byte count every `interval` seconds and reports each slice.
final class IntervalSampler {
    private var timer: LoopTimer?
    private var last: UInt64 = 0
    private var lastTime: Double = 0
    private let started = monotonicNanoseconds()
    private(set) var intervals: [NetworkReport.Interval] = []

    func start(
        on loop: EventLoop, every seconds: Double, count: @escaping () -> UInt64,
        report: @escaping (NetworkReport.Interval) -> Void
    ) {
        let period = Duration.milliseconds(Int64(seconds * 1000))
        timer = loop.schedule(after: period, repeating: period) { [self] in
            sample(count(), report)
        }
    }

    /// Closes the last, possibly shorter, interval.
    func finish(total: UInt64, report: (NetworkReport.Interval) -> Void) {
        timer?.cancel()
        timer = nil
        if total > last { sample(total, report) }
    }

    private func sample(_ now: UInt64, _ report: (NetworkReport.Interval) -> Void) {
        let t = Double(monotonicNanoseconds() - started) / 1e9
        let slice = NetworkReport.Interval(start: lastTime, end: t, bytes: now - last)
        last = now
        lastTime = t
        intervals.append(slice)
        report(slice)
    }
}

/// The bench client: connects, says what it wants, then sends (or with `reverse` receives)
/// for the given time, reporting every interval.
struct NetworkBenchClient {
    var host: String
    var port: UInt16
    var seconds: Double
    var chunkSize: ChunkSize
    var compress: Bool
    var reverse: Bool
    var interval: Double
    var timeout: Duration?
    /// TLS 1.3 with this (client) context; plain TCP when nil.
    var tls: TLSContext?
    var onInterval: (NetworkReport.Interval) -> Void

    func run() throws -> NetworkReport {
        let loop = try EventLoop()
        let plain = Socket.connect(host: host, port: port, timeout: timeout)
        let (reader, writer) = tls.map { TLS.secure(plain, context: $0) } ?? plain
        reader.schedule(on: loop)
        writer.schedule(on: loop)
        reader.open()
        writer.open()
        var report: NetworkReport?
        var failure: String?
        var failureError: SluiceError?
        let hello = BenchHello(
            reverse: reverse, compress: compress, milliseconds: UInt32(min(seconds, 3600) * 1000))
        let sampler = IntervalSampler()
        let options = PipelineOptions(chunkSize: chunkSize, closesStreams: false)

        func fail(_ text: String) {
            if failure == nil { failureError = writer.streamError ?? reader.streamError }
            failure = failure ?? text
            reader.close()
            writer.close()
            loop.stop()
        }

        _ = AllWriter(writer, bytes: hello.bytes) { ok in
            guard ok else { return fail(writer.streamError.map { "\($0)" } ?? "connect \(host):\(port) failed") }
            if reverse {
                let stages: [any Stage] = compress ? [OffloadedStage(try! Inflate(format: .gzip))] : []
                let pipeline = Pipeline(source: reader, stages: stages, sink: .discard(), options: options)
                sampler.start(on: loop, every: interval, count: { pipeline.bytesWritten }, report: onInterval)
                pipeline.start(on: loop) { result in
                    sampler.finish(total: result.bytesWritten, report: onInterval)
                    if let error = result.error { return fail("\(error)") }
                    report = NetworkReport(
                        bytes: result.bytesWritten, seconds: result.elapsedSeconds, intervals: sampler.intervals,
                        peerBytes: nil, sourceBoundSeconds: result.sourceBoundSeconds,
                        sinkBoundSeconds: result.sinkBoundSeconds)
                    reader.close()
                    writer.close()
                }
            } else {
                let pattern = compress ? BenchData.text(4 << 20) : BenchData.random(chunkSize.bytes)
                let stages: [any Stage] = compress ? [try! ParallelDeflate(format: .gzip, level: 1)] : []
                let pipeline = Pipeline(
                    source: .repeating(pattern, for: .milliseconds(Int64(hello.milliseconds))), stages: stages,
                    sink: writer, options: options)
                sampler.start(on: loop, every: interval, count: { pipeline.bytesRead }, report: onInterval)
                pipeline.start(on: loop) { result in
                    sampler.finish(total: result.bytesRead, report: onInterval)
                    if let error = result.error { return fail("\(error)") }
                    writer.close()  // half-close: the server sees the end and answers with its count
                    _ = ExactReader(reader, count: 16) { answer in
                        report = NetworkReport(
                            bytes: result.bytesRead, seconds: result.elapsedSeconds, intervals: sampler.intervals,
                            peerBytes: answer.map { $0.readBigEndian(UInt64.self, at: 0) },
                            sourceBoundSeconds: result.sourceBoundSeconds, sinkBoundSeconds: result.sinkBoundSeconds)
                        reader.close()
                    }
                }
            }
        }
        loop.run()
        if let failure { throw BenchFailure(description: failure, error: failureError) }
        guard var report else { throw BenchFailure(description: "tcp:\(host):\(port): connection ended early") }
        if let version = writer.property(forKey: .tlsProtocol) as? String,
            let cipher = writer.property(forKey: .tlsCipher) as? String
        {
            report.tls = (version, cipher)
        }
        return report
    }
}

/// The bench server: accepts clients on one loop; for each, discards what it sends (or sends
/// for the asked time with `reverse`) and reports the bytes and seconds.
struct NetworkBenchServer {
    var listener: SocketListener
    var chunkSize: ChunkSize
    var once: Bool
    /// TLS 1.3 with this (server) context; plain TCP when nil.
    var tls: TLSContext?
    var onSession: (NetworkReport, SocketAddress) -> Void
    var onError: (String) -> Void

    func run() throws {
        let loop = try EventLoop()
        let options = PipelineOptions(chunkSize: chunkSize, closesStreams: false)
        let handler: Socket.ConnectionHandler = { reader, writer, peer in
            if once { listener.close() }
            reader.schedule(on: loop)
            writer.schedule(on: loop)
            reader.open()
            writer.open()
            func end(_ report: NetworkReport?, _ error: String?) {
                reader.close()
                writer.close()
                if let report { onSession(report, peer) }
                if let error { onError("\(peer): \(error)") }
            }
            _ = ExactReader(reader, count: BenchHello.size) { bytes in
                guard let bytes, let hello = BenchHello(bytes) else {
                    return end(nil, "not a sluice bench client")
                }
                if hello.reverse {
                    let pattern = hello.compress ? BenchData.text(4 << 20) : BenchData.random(chunkSize.bytes)
                    let stages: [any Stage] = hello.compress ? [try! ParallelDeflate(format: .gzip, level: 1)] : []
                    let pipeline = Pipeline(
                        source: .repeating(pattern, for: .milliseconds(Int64(hello.milliseconds))), stages: stages,
                        sink: writer, options: options)
                    pipeline.start(on: loop) { result in
                        end(Self.report(result, bytes: result.bytesRead), result.error.map { "\($0)" })
                    }
                } else {
                    let stages: [any Stage] = hello.compress ? [OffloadedStage(try! Inflate(format: .gzip))] : []
                    let pipeline = Pipeline(source: reader, stages: stages, sink: .discard(), options: options)
                    pipeline.start(on: loop) { result in
                        let report = Self.report(result, bytes: result.bytesWritten)
                        var answer: [UInt8] = []
                        answer.appendBigEndian(report.bytes)
                        answer.appendBigEndian(UInt64(report.seconds * 1e9))
                        _ = AllWriter(writer, bytes: answer) { _ in end(report, result.error.map { "\($0)" }) }
                    }
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

    private static func report(_ result: PipelineResult, bytes: UInt64) -> NetworkReport {
        NetworkReport(
            bytes: bytes, seconds: result.elapsedSeconds, intervals: [], peerBytes: nil,
            sourceBoundSeconds: result.sourceBoundSeconds, sinkBoundSeconds: result.sinkBoundSeconds)
    }
}
