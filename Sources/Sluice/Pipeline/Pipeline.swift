import FoundationEssentials

// The pipeline's work, by file: this one holds its state, start, cancel and events;
// PipelineEngine.swift moves the bytes through the stages (read, stages, write, backpressure);
// PipelineZeroCopy.swift schedules the kernel's zero-copy calls (ZeroCopy.swift makes them);
// PipelineTeardown.swift ends it; PipelineTypes.swift has its options and result.

/// Copies a source stream to a sink stream through zero or more stages on an `EventLoop`,
/// under backpressure:
///
/// 1. The source is read (one chunk per `hasBytesAvailable`) while its queue has room; when
///    the queue is full it is not read, so it gets no further event (a socket's read interest
///    is dropped and the TCP window closes) until the queue drains and the pipeline reads again.
/// 2. On `hasSpaceAvailable` the sink is written from the first ready chunk; a partial write
///    advances an index into the chunk. With no chunk ready, the pending-write flag is set.
/// 3. When a chunk becomes ready and the flag is set, it is written at once and the flag cleared.
/// 4. Chunk buffers are allocated once and reused; bytes in flight never exceed
///    `(stages + 1) × depth × chunkSize`.
/// 5. Time with the flag set is source-bound time; time with the source's queue full is
///    sink-bound time. Both are in the result.
public final class Pipeline: ByteStreamDelegate {
    public let source: ReadStream
    public let sink: WriteStream
    public let stages: [any Stage]
    public let options: PipelineOptions
    let sourceTaps: [any Tap]
    let sinkTaps: [any Tap]
    /// One driver per stage: runs it (inline, or on workers), counts its bytes and waits.
    let drivers: [StageDriver]

    // The backpressure state.

    /// The mutable state of the hot path, at a stable address: reached through a pointer, it
    /// needs no dynamic exclusivity checks, which cost more than the copying itself at 512-byte
    /// chunks (class stored properties modified in place are checked at run time).
    struct State {
        var queues: UnsafeMutableBufferPointer<ChunkQueue>
        var pool: [Chunk] = []
        /// Headers of lent chunks (no buffer of their own), reused.
        var lentPool: [Chunk] = []
        var allocatedChunks: Int = 0
        /// The pending-write flag: the sink was offered space with nothing to write. Its time
        /// is source-bound time.
        var pendingWrite = BackpressureFlag()
        /// The full-queue flag: the source was offered bytes with no room to read them into.
        /// Its time is sink-bound time.
        var sourceWaiting = BackpressureFlag()
        var limiter: RateLimiter?
        var pumping: Bool = false
        var pumpAgain: Bool = false
        /// The result is set: nothing moves any more. (A flag, so the hot path does not copy
        /// the optional result to test it.)
        var isFinished: Bool = false
        var bytesRead: UInt64 = 0
        var bytesWritten: UInt64 = 0
        var peakInFlightBytes: Int = 0
    }
    private let state: UnsafeMutablePointer<State>

    /// The state, in place: one accessor instead of one per field.
    var hot: State {
        _read { yield state.pointee }
        _modify { yield &state.pointee }
    }

    public var bytesRead: UInt64 { state.pointee.bytesRead }
    public var bytesWritten: UInt64 { state.pointee.bytesWritten }
    public var peakInFlightBytes: Int { state.pointee.peakInFlightBytes }
    // Rate limiting at the sink.

    var loop: EventLoop?
    var started: UInt64 = 0
    var completion: ((PipelineResult) -> Void)?
    /// A running pipeline keeps itself alive (its streams hold it only weakly, as their delegate).
    var retainedWhileRunning: Pipeline?

    /// The zero-copy side (see `ZeroCopyState`); nil while (and once) the bytes go through
    /// read/write.
    var zeroCopy: ZeroCopyState?
    /// How the bytes move now: a zero-copy call, or read/write.
    public internal(set) var path: CopyPath = .readWrite
    var fallbacks: [CopyFallback] = []
    var pathNote: String?

    /// A pipeline from `source` through `stages` to `sink`. `sourceTaps` see the bytes read,
    /// `sinkTaps` the bytes written.
    public init(
        source: ReadStream,
        stages: [any Stage] = [],
        sink: WriteStream,
        options: PipelineOptions = PipelineOptions(),
        sourceTaps: [any Tap] = [],
        sinkTaps: [any Tap] = []
    ) {
        self.source = source
        self.sink = sink
        self.stages = stages
        self.options = options
        self.sourceTaps = sourceTaps
        self.sinkTaps = sinkTaps
        state = .allocate(capacity: 1)
        state.initialize(
            to: State(
                queues: {
                    let buffer = UnsafeMutableBufferPointer<ChunkQueue>.allocate(capacity: stages.count + 1)
                    buffer.initialize(repeating: ChunkQueue(depth: options.depth))
                    return buffer
                }()))
        drivers = stages.map { StageDriver($0) }
    }

    deinit {
        state.pointee.queues.deinitialize()
        state.pointee.queues.deallocate()
        state.deinitialize(count: 1)
        state.deallocate()
    }

    /// `(stages + 1) × depth × chunkSize`, plus what stages running on workers hold at most
    /// (`AsynchronousStage.heldLimit`: their blocks and jobs). Into a `DirectFileWriteStream`,
    /// at least its buffer's size: the pipe a socket is spliced through holds that much, for
    /// whole 1 MiB writes.
    public var inFlightLimit: Int {
        let queues = (stages.count + 1) * options.depth * options.chunkSize.bytes
        let direct = sink is DirectFileWriteStream ? DirectFileWriteStream.bufferSize : 0
        return max(queues, direct) + drivers.reduce(0) { $0 + $1.heldLimit }
    }

    /// Bytes held in the queues and in the stages' jobs now (on the zero-copy path: in the
    /// pipeline's pipe).
    public var inFlightBytes: Int {
        hot.queues.reduce(0) { $0 + $1.bytes } + drivers.reduce(0) { $0 + $1.heldBytes } + kernelHeldBytes
    }

    /// True while the sink has been offered space with nothing to write.
    public var isWritePending: Bool { hot.pendingWrite.isSet }

    /// Seconds since start; source- and sink-bound time so far (for progress displays).
    public var elapsedSeconds: Double { started == 0 ? 0 : Double(monotonicNanoseconds() - started) / 1e9 }
    public var sourceBoundSeconds: Double {
        Double(hot.pendingWrite.elapsedNanoseconds)
            / 1e9
    }
    public var sinkBoundSeconds: Double {
        Double(hot.sourceWaiting.elapsedNanoseconds)
            / 1e9
    }
    public var stageStatistics: [StageStatistics] { drivers.map(\.statistics) }

    /// Starts the pipeline on `loop` (call on the loop's thread, before or inside `run`):
    /// schedules and opens both streams if they are not open yet. `completion` runs once.
    public func start(on loop: EventLoop, completion: @escaping (PipelineResult) -> Void) {
        precondition(self.loop == nil, "a pipeline runs once")
        self.loop = loop
        self.completion = completion
        retainedWhileRunning = self
        started = monotonicNanoseconds()
        hot.limiter = options.rateLimit.map { rate in
            RateLimiter(bytesPerSecond: rate, now: started, loop: { [weak self] in self?.loop }) { [weak self] in
                self?.writeSink()
                self?.pump()
            }
        }
        zeroCopy = mayMoveInKernel() ? .undecided : nil
        for driver in drivers {
            driver.attach(to: loop) { [weak self] in self?.pump() }
        }
        source.delegate = self
        sink.delegate = self
        source.schedule(on: loop)
        sink.schedule(on: loop)
        if source.streamStatus == .notOpen { source.open() }
        if sink.streamStatus == .notOpen { sink.open() }
        // Streams opened and used before: their last readiness event may have gone to another
        // delegate, and none comes until someone reads or writes. Ask for the next one.
        source.rearm()
        sink.rearm()
        for (stream, location) in [(source as ByteStream, PipelineLocation.source), (sink, .sink)]
        where stream.streamStatus == .error {
            fail(location, stream.streamError ?? stream.error(.system(.ioError), operation: "open"))
            return
        }
        if case .undecided = zeroCopy, source.streamStatus == .open, sink.streamStatus == .open {
            decideZeroCopy()
        }
    }

    /// Stops the pipeline: both ends are closed and the result carries a `.cancelled` error.
    /// Call on the loop's thread. From another thread, through the loop: the pipeline is not
    /// `Sendable`, so the closure given to `execute` captures it as a `nonisolated(unsafe)`
    /// constant, sound because only the loop's thread runs that closure:
    ///
    /// ```swift
    /// nonisolated(unsafe) let running = pipeline  // touched on the loop's thread only
    /// let cancel: @Sendable () -> Void = { loop.execute { running.cancel() } }
    /// ```
    ///
    /// From async code, cancel the task that awaits `run()` instead.
    public func cancel() {
        fail(.sink, sink.error(.cancelled, operation: "copy"))
    }

    // MARK: Events

    public func stream(_ stream: ByteStream, handle event: StreamEvent) {
        guard !hot.isFinished else { return }
        if zeroCopy != nil, zeroCopyEvent(stream, event) { return }
        if stream === source {
            switch event {
            case .hasBytesAvailable:
                if hot.queues[0].hasRoom {
                    readSource()
                } else {
                    hot.sourceWaiting.set()
                }
                pump()
            case .endEncountered:
                hot.queues[0].producerDone = true
                pump()
            case .errorOccurred:
                fail(
                    .source,
                    source.streamError ?? source.error(.system(.ioError), operation: "read"))
            default:
                break
            }
        } else if stream === sink {
            switch event {
            case .hasSpaceAvailable:
                if hot.limiter?.isWaiting == true {
                    break  // the rate limit's timer writes next: this wait is the sink's
                } else if hot.queues[stages.count].hasReady {
                    writeSink()
                    pump()
                } else {
                    hot.pendingWrite.set()
                }
            case .errorOccurred:
                fail(.sink, sink.streamError ?? sink.error(.system(.ioError), operation: "write"))
            case .endEncountered:
                fail(
                    .sink,
                    sink.error(.system(.noSpace), operation: "write", detail: "sink is full"))
            default:
                break
            }
        }
    }
}
