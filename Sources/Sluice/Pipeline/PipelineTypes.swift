/// How a pipeline runs.
public struct PipelineOptions: Sendable {
    public var chunkSize: ChunkSize
    /// Chunks each queue holds at most. In flight never exceeds `(stages + 1) × depth × chunkSize`.
    public var depth: Int

    /// The default depth for a chunk size: 4 chunks, or more small ones — up to 64 KiB of them,
    /// at most 128 — so that one readiness event moves enough bytes to pay for itself.
    public static func defaultDepth(for chunkSize: ChunkSize) -> Int {
        max(4, min(128, 65536 / chunkSize.bytes))
    }
    /// Caps the bytes written to the sink per second (a token bucket on the loop's timers).
    public var rateLimit: Int?
    /// On failure, remove a sink file that this pipeline's sink created (never one that existed).
    public var removeCreatedSinkOnFailure: Bool
    /// Close the source and sink when done (a socket sink is shut down for writing, so the peer
    /// sees end of stream).
    public var closesStreams: Bool
    /// Move the bytes inside the kernel where nothing needs to see them: with no stage, no tap
    /// and no rate limit, between plain descriptors (files, pipes, TCP and Unix-domain sockets,
    /// `/dev/null`), with `copy_file_range`, `sendfile` or `splice` (see `CopyPath`), falling
    /// back to read/write where the kernel refuses. On by default; the bytes are the same.
    public var zeroCopy: Bool
    /// For tests: a refusal to script into the zero-copy calls.
    var zeroCopyFault: ZeroCopyFault?

    public init(
        chunkSize: ChunkSize = .default,
        depth: Int? = nil,
        rateLimit: Int? = nil,
        removeCreatedSinkOnFailure: Bool = true,
        closesStreams: Bool = true,
        zeroCopy: Bool = true
    ) {
        let depth = depth ?? Self.defaultDepth(for: chunkSize)
        precondition(depth >= 1, "pipeline depth must be at least 1")
        precondition(rateLimit.map { $0 > 0 } ?? true, "rate limit must be positive")
        self.chunkSize = chunkSize
        self.depth = depth
        self.rateLimit = rateLimit
        self.removeCreatedSinkOnFailure = removeCreatedSinkOnFailure
        self.closesStreams = closesStreams
        self.zeroCopy = zeroCopy
    }
}

/// Where a pipeline failed.
public enum PipelineLocation: Hashable, Sendable, CustomStringConvertible {
    case source
    case stage(index: Int, name: String)
    case sink

    public var description: String {
        switch self {
        case .source: return "source"
        case .stage(_, let name): return "stage \(name)"
        case .sink: return "sink"
        }
    }
}

/// A pipeline failure: where, and the underlying error (which names the path or address).
public struct PipelineError: Error, Hashable, Sendable, CustomStringConvertible {
    public var location: PipelineLocation
    public var underlying: SluiceError

    public var description: String { underlying.description }
}

/// Bytes and waiting time of one stage.
public struct StageStatistics: Hashable, Sendable {
    public var name: String
    public var bytesIn: UInt64
    public var bytesOut: UInt64
    /// Time the stage had output space but no input: bound by what is upstream of it.
    public var inputWaitSeconds: Double
    /// Time the stage had input but its output queue was full: bound by what is downstream.
    public var outputWaitSeconds: Double
}

/// What a pipeline did.
public struct PipelineResult: Sendable {
    public var bytesRead: UInt64
    public var bytesWritten: UInt64
    public var stages: [StageStatistics]
    public var elapsedSeconds: Double
    /// Time the sink waited with the pending-write flag set: the source (or a stage) was slower.
    public var sourceBoundSeconds: Double
    /// Time the source waited because its queue was full: the sink (or a stage) was slower.
    public var sinkBoundSeconds: Double
    /// The most bytes held in the pipeline's queues at once.
    public var peakInFlightBytes: Int
    /// The bound that `peakInFlightBytes` never exceeds: `(stages + 1) × depth × chunkSize`.
    public var inFlightLimit: Int
    public var error: PipelineError?
    /// How the bytes moved: the zero-copy call in use at the end, or read/write.
    public var path: CopyPath = .readWrite
    /// The zero-copy calls the kernel refused on the way, in order (each says what came next).
    public var fallbacks: [CopyFallback] = []
    /// Why the pipeline chose read/write from the start, when it did: `zero-copy turned off`,
    /// `a stage transforms the bytes`, `the destination is a terminal or device`, …
    public var pathNote: String?

    public var succeeded: Bool { error == nil }
}
