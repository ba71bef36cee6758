import Sluice

/// The final report of `--stats`: what was copied, how fast, and which side was waited on.
struct StatsReport: Sendable {
    var source: String
    var destination: String
    var bytesRead: UInt64
    var bytesWritten: UInt64
    var seconds: Double
    var chunkSize: ChunkSize
    var sourceBoundSeconds: Double
    var sinkBoundSeconds: Double
    /// With a stage: its name, settings, and whether the source carries the raw bytes.
    var stage: (name: String, settings: String, sourceIsRaw: Bool)?
    var rateLimit: Int?
    var peakInFlightBytes: Int
    /// The TLS protocol and cipher negotiated by a `tls:`/`tls-listen:` endpoint.
    var tls: (protocol: String, cipher: String)?
    /// How the bytes moved: a zero-copy call or read/write, the refusals on the way, and why
    /// read/write was chosen from the start, when it was.
    var path: CopyPath
    var fallbacks: [CopyFallback]
    var pathNote: String?
    /// The CPU time the copy used, when measured.
    var cpu: CPUTime?
    /// With `--direct`: the bytes that went to the file with O_DIRECT.
    var directBytes: UInt64?

    init(result: PipelineResult, options: CopyOptions, stageName: String?, cpu: CPUTime? = nil) {
        source = options.source.displayName(as: .source)
        destination = options.destination.displayName(as: .destination)
        bytesRead = result.bytesRead
        bytesWritten = result.bytesWritten
        seconds = result.elapsedSeconds
        chunkSize = options.chunkSize
        sourceBoundSeconds = result.sourceBoundSeconds
        sinkBoundSeconds = result.sinkBoundSeconds
        rateLimit = options.rateLimit
        peakInFlightBytes = result.peakInFlightBytes
        path = result.path
        fallbacks = result.fallbacks
        pathNote = result.pathNote
        self.cpu = cpu
        switch options.transform {
        case .compress(let spec)?: stage = (stageName ?? spec.format.rawValue, spec.description, true)
        case .decompress(let spec)?: stage = (stageName ?? "inflate", spec.description, false)
        case nil: stage = nil
        }
    }

    var readRate: Double { seconds > 0 ? Double(bytesRead) / seconds : 0 }
    var writeRate: Double { seconds > 0 ? Double(bytesWritten) / seconds : 0 }

    /// Raw bytes over compressed bytes, with a stage.
    var ratio: Double? {
        guard let stage else { return nil }
        let (raw, compressed) = stage.sourceIsRaw ? (bytesRead, bytesWritten) : (bytesWritten, bytesRead)
        return compressed > 0 ? Double(raw) / Double(compressed) : 0
    }

    /// The raw (uncompressed) bytes: what CPU seconds per GiB are counted against.
    var rawBytes: UInt64 {
        guard let stage else { return bytesRead }
        return stage.sourceIsRaw ? bytesRead : bytesWritten
    }

    var cpuReport: CPUReport? { cpu.map { CPUReport(cpu: $0, bytes: rawBytes) } }

    /// `zero-copy (sendfile); copy_file_range refused after 0 bytes: Invalid cross-device link
    /// (errno 18)`, `read/write (a stage transforms the bytes)`.
    var pathText: String {
        var text = path.isZeroCopy ? "zero-copy (\(path))" : "read/write"
        if let pathNote, fallbacks.isEmpty { text += " (\(pathNote))" }
        for fallback in fallbacks {
            text += "; \(fallback.refused) refused after \(fallback.afterBytes) bytes: \(fallback.reason)"
        }
        return text
    }

    /// The fallbacks as a JSON array of objects.
    private var fallbacksJSON: String {
        let objects = fallbacks.map { fallback in
            "{\"refused\":\(Format.jsonString(fallback.refused.rawValue)),\"next\":\(Format.jsonString(fallback.next.rawValue)),"
                + "\"after_bytes\":\(fallback.afterBytes),\"errno\":\(fallback.reason.rawValue),"
                + "\"reason\":\(Format.jsonString(fallback.reason.message))}"
        }
        return "[" + objects.joined(separator: ",") + "]"
    }

    var bottleneck: Bottleneck? {
        Bottleneck.judge(
            seconds: seconds, sourceBound: sourceBoundSeconds, sinkBound: sinkBoundSeconds, stage: stage?.name,
            rateLimited: rateLimit != nil)
    }

    /// One JSON object on one line.
    var json: String {
        var fields: [(String, String)] = [
            ("source", Format.jsonString(source)),
            ("destination", Format.jsonString(destination)),
            ("bytes_read", "\(bytesRead)"),
            ("bytes_written", "\(bytesWritten)"),
            ("seconds", Format.jsonNumber(seconds)),
            ("chunk_size", "\(chunkSize.bytes)"),
            ("read_rate", Format.jsonNumber(readRate)),
            ("write_rate", Format.jsonNumber(writeRate)),
            ("path", Format.jsonString(path.rawValue)),
            ("zero_copy", path.isZeroCopy ? "true" : "false"),
            ("fallbacks", fallbacksJSON),
        ]
        if let pathNote { fields.append(("path_note", Format.jsonString(pathNote))) }
        if let directBytes { fields.append(("direct_bytes", "\(directBytes)")) }
        if let stage, let ratio {
            fields.append(("stage", Format.jsonString(stage.name)))
            fields.append(("stage_settings", Format.jsonString(stage.settings)))
            fields.append(("ratio", Format.jsonNumber(ratio)))
        }
        fields += [
            ("source_bound_seconds", Format.jsonNumber(sourceBoundSeconds)),
            ("sink_bound_seconds", Format.jsonNumber(sinkBoundSeconds)),
            ("bottleneck", bottleneck.map { Format.jsonString($0.label) } ?? "null"),
            ("peak_in_flight_bytes", "\(peakInFlightBytes)"),
        ]
        if let rateLimit { fields.append(("rate_limit", "\(rateLimit)")) }
        if let tls {
            fields.append(("tls_protocol", Format.jsonString(tls.protocol)))
            fields.append(("tls_cipher", Format.jsonString(tls.cipher)))
        }
        if let cpuReport { fields += cpuReport.jsonFields }
        return "{" + fields.map { "\(Format.jsonString($0.0)):\($0.1)" }.joined(separator: ",") + "}"
    }

    /// A block of aligned `name  value` lines.
    var text: String {
        var rows: [(String, String)] = [
            ("source", source),
            ("destination", destination),
            ("bytes read", "\(bytesRead) (\(Format.bytes(bytesRead)))"),
            ("bytes written", "\(bytesWritten) (\(Format.bytes(bytesWritten)))"),
            ("seconds", Format.fixed(seconds, 3)),
            ("chunk size", "\(chunkSize) (\(chunkSize.bytes) bytes)"),
            ("read rate", Format.rate(readRate)),
            ("write rate", Format.rate(writeRate)),
            ("path", pathText),
        ]
        if let directBytes { rows.append(("direct bytes", "\(directBytes) (\(Format.bytes(directBytes)), O_DIRECT)")) }
        if let stage, let ratio {
            rows.append(("stage", "\(stage.name) (\(stage.settings))"))
            rows.append(("ratio", Format.fixed(ratio, 2) + " (raw / compressed)"))
        }
        rows += [
            ("source-bound seconds", Format.fixed(sourceBoundSeconds, 3) + " (the sink waited for data)"),
            ("sink-bound seconds", Format.fixed(sinkBoundSeconds, 3) + " (the source waited for room)"),
            ("bottleneck", bottleneck?.label ?? "none"),
        ]
        if let rateLimit { rows.append(("rate limit", Format.rate(Double(rateLimit)))) }
        if let tls { rows.append(("tls", "\(tls.protocol) \(tls.cipher)")) }
        if let cpuReport { rows.append(("cpu seconds", cpuReport.text)) }
        let width = rows.map(\.0.count).max()! + 2
        return rows.map { $0.0 + String(repeating: " ", count: width - $0.0.count) + $0.1 + "\n" }.joined()
    }
}
