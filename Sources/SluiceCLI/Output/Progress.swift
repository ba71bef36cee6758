import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// Which side a pipeline waits on, from the growth of its source-bound and sink-bound time
/// (see `Pipeline.sourceBoundSeconds` and `sinkBoundSeconds`).
enum Bottleneck: Hashable, Sendable {
    /// The sink waited for data: the source is slower.
    case source
    /// The source waited for room: the sink is slower.
    case sink
    /// The sink waited for the rate limit.
    case rateLimit
    /// Both ends waited for the stage between them (compression is the slow part).
    case stage(String)

    var label: String {
        switch self {
        case .source: return "source"
        case .sink: return "sink"
        case .rateLimit: return "rate limit"
        case .stage(let name): return name
        }
    }

    /// The bottleneck over an interval of `seconds` in which the sink waited `sourceBound`
    /// seconds for data and the source waited `sinkBound` seconds for room. When neither side
    /// waited for a quarter of the interval, the work between them is the limit: the stage if
    /// there is one (compression is the CPU's work), otherwise nothing to point at.
    static func judge(
        seconds: Double, sourceBound: Double, sinkBound: Double, stage: String?, rateLimited: Bool
    ) -> Bottleneck? {
        guard seconds > 0 else { return nil }
        let source = sourceBound / seconds
        let sink = sinkBound / seconds
        if let stage, source > 0.5, sink > 0.5 { return .stage(stage) }
        guard max(source, sink) >= 0.25 else { return stage.map { .stage($0) } }
        if sink >= source { return rateLimited ? .rateLimit : .sink }
        return .source
    }
}

/// What the progress line shows at one moment.
struct ProgressSnapshot: Sendable {
    /// A stage's counters: its name, whether the source carries the raw bytes, bytes in and out.
    struct StageCounts: Sendable {
        var name: String
        var sourceIsRaw: Bool
        var bytesIn: UInt64
        var bytesOut: UInt64

        var raw: UInt64 { sourceIsRaw ? bytesIn : bytesOut }
        var compressed: UInt64 { sourceIsRaw ? bytesOut : bytesIn }
    }

    /// Source bytes that have gone through: written to the sink, or taken by the stage. (Bytes
    /// read but still queued are not counted: with a slow sink they would run ahead.)
    var sourceBytes: UInt64
    var elapsedSeconds: Double
    /// Source bytes per second, recently (at the end: on average).
    var rate: Double
    /// The bytes the source holds, when known (a regular file).
    var sourceSize: UInt64?
    var stage: StageCounts?
    var bottleneck: Bottleneck?
    var finished: Bool

    /// The source bytes through `pipeline` (or its `result`): see `sourceBytes`.
    static func sourceBytes(written: UInt64, stages: [StageStatistics]) -> UInt64 {
        stages.first?.bytesIn ?? written
    }
}

/// Draws `ProgressSnapshot`s as one line, like pv: bytes, elapsed time, rate; with a known size
/// a bar, percent and ETA; with a stage raw and compressed bytes and the ratio; the bottleneck.
enum ProgressLine {
    static func render(_ s: ProgressSnapshot, width: Int) -> String {
        var head: [String] = []
        if let stage = s.stage {
            head.append("raw \(Format.bytes(stage.raw))")
            head.append("\(stage.name) \(Format.bytes(stage.compressed))")
            let ratio = stage.compressed > 0 ? Format.fixed(Double(stage.raw) / Double(stage.compressed), 2) : "-"
            head.append("ratio \(ratio)")
        } else {
            head.append(Format.bytes(s.sourceBytes))
        }
        head.append(Format.duration(s.elapsedSeconds))
        head.append("[\(Format.rate(s.rate))]")

        var tail: [String] = []
        var fraction: Double?
        if let size = s.sourceSize {
            let f = size == 0 ? (s.finished ? 1 : 0) : min(1, Double(s.sourceBytes) / Double(size))
            fraction = f
            tail.append("\(Int((f * 100).rounded(.down)))%")
            if !s.finished {
                let left = Double(size) - Double(s.sourceBytes)
                let eta = s.rate > 0 ? Format.duration((max(0, left) / s.rate).rounded(.up)) : "-:--:--"
                tail.append("ETA \(eta)")
            }
        }
        if let bottleneck = s.bottleneck {
            tail.append("bottleneck: \(bottleneck.label)")
        }

        let headText = head.joined(separator: " ")
        let usable = max(20, width - 1)  // never the last column: the cursor would wrap
        // Too narrow: the bottleneck goes first, then the ETA, then the percent.
        while !tail.isEmpty && headText.count + 1 + tail.joined(separator: " ").count > usable {
            tail.removeLast()
        }
        let tailText = tail.joined(separator: " ")
        var line = headText
        if let fraction {
            let room = usable - headText.count - tailText.count - 4  // spaces and brackets
            if room >= 10 {
                line += " " + bar(fraction, width: room)
            }
        }
        if !tailText.isEmpty { line += " " + tailText }
        if line.count > usable { line = String(line.prefix(usable)) }
        return line
    }

    /// `[=====>    ]` of `width` columns inside the brackets.
    static func bar(_ fraction: Double, width: Int) -> String {
        let filled = Int((fraction * Double(width)).rounded(.down))
        if filled >= width { return "[" + String(repeating: "=", count: width) + "]" }
        let body = String(repeating: "=", count: filled) + ">" + String(repeating: " ", count: width - filled - 1)
        return "[" + body + "]"
    }
}

/// The live progress display: a repeating timer on the pipeline's loop redraws one line on
/// stderr, in place, ten times a second; `finish` draws the last state and ends the line.
/// It reads the pipeline's counters, so it adds nothing to the path of the bytes.
final class ProgressDisplay {
    static let interval: Duration = .milliseconds(100)

    private let pipeline: Pipeline
    private let sourceSize: UInt64?
    private let stage: (name: String, sourceIsRaw: Bool)?
    private let rateLimited: Bool
    private let output: (String) -> Void
    private var timer: LoopTimer?
    /// Samples for the recent rate and the bottleneck: about two seconds of them.
    private var samples: [(time: Double, bytes: UInt64, sourceBound: Double, sinkBound: Double)] = []
    private var drawn = false

    init(pipeline: Pipeline, sourceSize: UInt64?, transform: Transform?, output: @escaping (String) -> Void) {
        self.pipeline = pipeline
        self.sourceSize = sourceSize
        self.stage = transform.map { (pipeline.stages.first?.name ?? "stage", $0.sourceIsRaw) }
        self.rateLimited = pipeline.options.rateLimit != nil
        self.output = output
    }

    /// Starts redrawing on `loop` (call on the loop's thread, after the pipeline started).
    func start(on loop: EventLoop) {
        timer = loop.schedule(after: Self.interval, repeating: Self.interval) { [weak self] in self?.draw() }
    }

    private func counts(_ stages: [StageStatistics]) -> ProgressSnapshot.StageCounts? {
        guard let stage, let statistics = stages.first else { return nil }
        return .init(
            name: stage.name, sourceIsRaw: stage.sourceIsRaw, bytesIn: statistics.bytesIn,
            bytesOut: statistics.bytesOut)
    }

    private func draw() {
        let now = pipeline.elapsedSeconds
        let stages = pipeline.stageStatistics
        let through = ProgressSnapshot.sourceBytes(written: pipeline.bytesWritten, stages: stages)
        samples.append((now, through, pipeline.sourceBoundSeconds, pipeline.sinkBoundSeconds))
        while let first = samples.first, now - first.time > 2, samples.count > 2 { samples.removeFirst() }
        let oldest = samples.count > 1 ? samples[0] : (time: 0, bytes: 0, sourceBound: 0, sinkBound: 0)
        let newest = samples[samples.count - 1]
        let span = newest.time - oldest.time
        let rate = span > 0 ? Double(newest.bytes - oldest.bytes) / span : 0
        // The bottleneck over the last second at most.
        let recent = samples.last { newest.time - $0.time >= 1 } ?? oldest
        var bottleneck = Bottleneck.judge(
            seconds: newest.time - recent.time, sourceBound: newest.sourceBound - recent.sourceBound,
            sinkBound: newest.sinkBound - recent.sinkBound, stage: stage?.name, rateLimited: rateLimited)
        if bottleneck == nil && pipeline.source.streamStatus == .atEnd && pipeline.inFlightBytes > 0 {
            // The source is done; what is left waits for the sink, which nobody times.
            bottleneck = rateLimited ? .rateLimit : .sink
        }
        let snapshot = ProgressSnapshot(
            sourceBytes: through, elapsedSeconds: now, rate: rate, sourceSize: sourceSize, stage: counts(stages),
            bottleneck: bottleneck, finished: false)
        show(ProgressLine.render(snapshot, width: Terminal.columns(of: 2)), final: false)
    }

    /// Stops redrawing. With `result`, draws the final state (average rate, the bottleneck over
    /// the whole copy); then ends the line so what follows starts clean.
    func finish(_ result: PipelineResult?) {
        timer?.cancel()
        timer = nil
        if let result {
            let seconds = result.elapsedSeconds
            let through = ProgressSnapshot.sourceBytes(written: result.bytesWritten, stages: result.stages)
            let snapshot = ProgressSnapshot(
                sourceBytes: through, elapsedSeconds: seconds, rate: seconds > 0 ? Double(through) / seconds : 0,
                sourceSize: result.succeeded ? sourceSize.map { max($0, through) } : sourceSize,
                stage: counts(result.stages),
                bottleneck: Bottleneck.judge(
                    seconds: seconds, sourceBound: result.sourceBoundSeconds, sinkBound: result.sinkBoundSeconds,
                    stage: stage?.name, rateLimited: rateLimited),
                finished: true)
            show(ProgressLine.render(snapshot, width: Terminal.columns(of: 2)), final: true)
        } else if drawn {
            output("\n")
        }
    }

    private func show(_ line: String, final: Bool) {
        drawn = true
        output("\r" + line + "\u{1B}[K" + (final ? "\n" : ""))
    }
}
