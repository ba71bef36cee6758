import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

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
    private let sourceTaps: [any Tap]
    private let sinkTaps: [any Tap]
    /// One driver per stage: runs it (inline, or on workers), counts its bytes and waits.
    private let drivers: [StageDriver]

    // The backpressure state.

    /// The mutable state of the hot path, at a stable address: reached through a pointer, it
    /// needs no dynamic exclusivity checks, which cost more than the copying itself at 512-byte
    /// chunks (class stored properties modified in place are checked at run time).
    private struct State {
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
    private var hot: State {
        _read { yield state.pointee }
        _modify { yield &state.pointee }
    }

    public var bytesRead: UInt64 { state.pointee.bytesRead }
    public var bytesWritten: UInt64 { state.pointee.bytesWritten }
    public var peakInFlightBytes: Int { state.pointee.peakInFlightBytes }
    // Rate limiting at the sink.

    private var loop: EventLoop?
    private var started: UInt64 = 0
    private var completion: ((PipelineResult) -> Void)?
    private var result: PipelineResult?
    /// A running pipeline keeps itself alive (its streams hold it only weakly, as their delegate).
    private var retainedWhileRunning: Pipeline?

    /// The zero-copy side: `.undecided` until both ends are open (a socket may still be
    /// connecting), then `.active` with the driver that makes the kernel's calls; nil while
    /// (and once) the bytes go through read/write.
    private enum ZeroCopyState {
        case undecided
        case active(ZeroCopyDriver)
    }
    private var zeroCopy: ZeroCopyState?
    /// How the bytes move now: a zero-copy call, or read/write.
    public private(set) var path: CopyPath = .readWrite
    private var fallbacks: [CopyFallback] = []
    private var pathNote: String?

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

    private var kernelHeldBytes: Int {
        if case .active(let driver) = zeroCopy { return driver.held }
        return 0
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
            fail(location, stream.streamError!)
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

    // MARK: The machine

    private func takeChunk() -> Chunk {
        if let chunk = hot.pool.popLast() { return chunk }
        hot.allocatedChunks += 1
        precondition(hot.allocatedChunks <= (stages.count + 1) * options.depth + 1, "chunk hot.pool overflow")
        return Chunk(capacity: options.chunkSize.bytes)
    }

    private func recycle(_ chunk: Chunk) {
        chunk.reset()
        if chunk.isLent {
            hot.lentPool.append(chunk)
        } else {
            hot.pool.append(chunk)
        }
    }

    private func notePeak() {
        let now = inFlightBytes
        if now > hot.peakInFlightBytes {
            hot.peakInFlightBytes = now
            assert(now <= inFlightLimit, "in flight \(now) exceeds \(inFlightLimit)")
        }
    }

    /// Reads one chunk from the source into queue 0.
    /// Reads chunks into queue 0 while it has room, up to `depth` reads for one readiness (as
    /// a delegate may read repeatedly on one `hasBytesAvailable`); stops at a short read, which
    /// means the kernel had no more for now.
    private func readSource() {
        for _ in 0..<options.depth {
            guard hot.queues[0].hasRoom, !hot.isFinished, readChunk() else { return }
        }
    }

    /// One read; true when it filled a whole chunk, so another read may find more.
    private func readChunk() -> Bool {
        guard !hot.queues[0].producerDone else { return false }
        // A source whose bytes are already in memory lends them: no copy into a chunk buffer.
        if let lent = source.lend(upTo: options.chunkSize.bytes) {
            guard !lent.isEmpty else {
                hot.queues[0].producerDone = true
                hot.pumpAgain = true
                return false
            }
            let chunk: Chunk
            if let header = hot.lentPool.popLast() {
                header.relend(lent)
                chunk = header
            } else {
                chunk = Chunk(lent: lent)
            }
            hot.bytesRead += UInt64(lent.count)
            for tap in sourceTaps { tap.observe(lent) }
            hot.queues[0].pushSealed(chunk)
            notePeak()
            hot.pumpAgain = true
            return true
        }
        // Nothing between the ends and nothing queued: a sink that copies into memory of its
        // own lends it, and the source is read straight into it.
        if stages.isEmpty, sinkTaps.isEmpty, hot.limiter == nil, hot.queues[0].isEmpty, sink.streamStatus == .open,
            let space = sink.lendSpace(upTo: options.chunkSize.bytes)
        {
            return readIntoSink(space)
        }
        let chunk = takeChunk()
        switch source.tryReadFilling(into: chunk.storage) {
        case .processed(let n) where n > 0:
            chunk.end = n
            hot.bytesRead += UInt64(n)
            for tap in sourceTaps { tap.observe(chunk.bytes) }
            hot.queues[0].pushSealed(chunk)
            notePeak()
            hot.pumpAgain = true
            return n == chunk.storage.count
        case .processed(0):
            recycle(chunk)
            hot.queues[0].producerDone = true
            hot.pumpAgain = true
        case .processed:
            recycle(chunk)
            fail(.source, source.streamError ?? source.error(.system(.ioError), operation: "read"))
        case .wouldBlock:
            recycle(chunk)
        }
        return false
    }

    /// One read into the space the sink lent; true when it filled the space.
    private func readIntoSink(_ space: UnsafeMutableRawBufferPointer) -> Bool {
        switch source.tryReadFilling(into: space) {
        case .processed(let n) where n > 0:
            hot.bytesRead += UInt64(n)
            for tap in sourceTaps { tap.observe(UnsafeRawBufferPointer(rebasing: space[..<n])) }
            do {
                try sink.takeLentSpace(n)
            } catch {
                fail(.sink, error)
                return false
            }
            hot.bytesWritten += UInt64(n)
            hot.peakInFlightBytes = max(hot.peakInFlightBytes, n)
            hot.pumpAgain = true
            return n == space.count
        case .processed(0):
            hot.queues[0].producerDone = true
            hot.pumpAgain = true
        case .processed:
            fail(.source, source.streamError ?? source.error(.system(.ioError), operation: "read"))
        case .wouldBlock:
            break
        }
        return false
    }

    /// Writes ready chunks to the sink until it would block, a write is partial, or the rate
    /// limit says wait.
    private func writeSink() {
        let last = stages.count
        var writes = 0
        while hot.queues[last].hasReady, writes < options.depth, !hot.isFinished {
            let chunk = hot.queues[last].front
            let available = chunk.count
            var allowed = available
            if let limiter = hot.limiter {
                allowed = min(allowed, limiter.take(wanted: available))
                if allowed == 0 { return }
            }
            let outcome = sink.tryWrite(from: UnsafeRawBufferPointer(rebasing: chunk.bytes[..<allowed]))
            switch outcome {
            case .processed(let n) where n > 0:
                for tap in sinkTaps { tap.observe(UnsafeRawBufferPointer(rebasing: chunk.bytes[..<n])) }
                hot.limiter?.spend(n)
                hot.bytesWritten += UInt64(n)
                hot.queues[last].consumed(n)
                if chunk.count == 0 {
                    recycle(hot.queues[last].popFront())
                    hot.pumpAgain = true
                }
                if n < available { return }  // partial (kernel buffer full) or throttled
                writes += 1
            case .processed(0):
                return  // the endEncountered event reports a full fixed-capacity sink
            case .processed:
                fail(.sink, sink.streamError ?? sink.error(.system(.ioError), operation: "write"))
                return
            case .wouldBlock:
                return
            }
        }
    }

    /// Moves bytes as far as they can go: through the stages, into the sink if the
    /// pending-write flag is set, and out of the source if it is waiting for room.
    private func pump() {
        if hot.pumping {
            hot.pumpAgain = true
            return
        }
        hot.pumping = true
        defer { hot.pumping = false }
        repeat {
            hot.pumpAgain = false
            for index in stages.indices { runStage(index) }
            guard !hot.isFinished else { return }
            let last = stages.count
            if hot.pendingWrite.isSet && hot.queues[last].hasReady && hot.limiter?.isWaiting != true {
                hot.pendingWrite.take()
                writeSink()
            }
            if hot.sourceWaiting.isSet && hot.queues[0].hasRoom {
                hot.sourceWaiting.take()
                readSource()
            }
            guard !hot.isFinished else { return }
            if hot.queues[last].finished {
                succeed()
                return
            }
        } while hot.pumpAgain
    }

    /// Runs stage `index` (through its driver) while it has input and output room.
    private func runStage(_ index: Int) {
        let driver = drivers[index]
        guard !driver.isFinished else { return }
        let inputIndex = index
        let outputIndex = index + 1
        while !hot.isFinished {
            let haveInput = hot.queues[inputIndex].hasReady
            let atEnd = hot.queues[inputIndex].finished
            guard haveInput || atEnd else {
                // Starved: hand on what is held so nothing waits behind an empty input.
                hot.queues[outputIndex].sealTail(recycle: recycle)
                driver.noteStarved()
                return
            }
            guard hot.queues[outputIndex].hasRoom else {
                driver.noteBlocked()
                return
            }
            let out = hot.queues[outputIndex].openTail(takeChunk)
            let progress: StageProgress
            do {
                progress = try driver.step(
                    input: haveInput ? hot.queues[inputIndex].front.bytes : nil, output: out.free)
            } catch {
                fail(.stage(index: index, name: driver.stage.name), error)
                return
            }
            out.end += progress.produced
            hot.queues[outputIndex].produced(progress.produced)
            if progress.consumed > 0 {
                hot.queues[inputIndex].consumed(progress.consumed)
                if hot.queues[inputIndex].front.count == 0 {
                    recycle(hot.queues[inputIndex].popFront())
                    hot.pumpAgain = true
                }
            }
            notePeak()
            if driver.isFinished {
                hot.queues[outputIndex].sealTail(recycle: recycle)
                hot.queues[outputIndex].producerDone = true
                hot.pumpAgain = true
                return
            }
            if driver.isWaitingForWorkers {
                // The stage's workers hold what it can take: hand on what is ready, and run
                // again when its wake-up comes.
                hot.queues[outputIndex].sealTail(recycle: recycle)
                return
            }
            if out.freeSpace == 0 { hot.pumpAgain = true }
        }
    }

    // MARK: Zero-copy

    /// Whether the bytes may move inside the kernel: nothing needs to see them, and both ends
    /// are plain descriptors. Otherwise notes why not.
    private func mayMoveInKernel() -> Bool {
        if !options.zeroCopy {
            pathNote = "zero-copy turned off"
        } else if !stages.isEmpty {
            pathNote = "a stage transforms the bytes"
        } else if options.rateLimit != nil {
            pathNote = "a rate limit meters the bytes"
        } else if !sourceTaps.isEmpty || !sinkTaps.isEmpty {
            pathNote = "a tap sees the bytes"
        } else if !source.offersKernelCopy || !(sink.offersKernelCopy || sink is DirectFileWriteStream) {
            pathNote = "an end is not a file, pipe or socket"
        } else {
            pathNote = nil
        }
        return pathNote == nil
    }

    /// Both ends are open: chooses the kernel's calls for what they are, or read/write.
    private func decideZeroCopy() {
        zeroCopy = nil
        if let direct = sink as? DirectFileWriteStream {
            decideDirectSplice(into: direct)
            return
        }
        guard source.streamStatus == .open, sink.streamStatus == .open,
            let sourceFD = source.kernelCopyDescriptor, let sinkFD = sink.kernelCopyDescriptor
        else {
            pathNote = "an end is not open"
            return
        }
        let sourceEnd = (fd: sourceFD, name: source.name, kind: DescriptorKind(of: sourceFD))
        let sinkEnd = (fd: sinkFD, name: sink.name, kind: DescriptorKind(of: sinkFD))
        switch ZeroCopyPlan(source: sourceEnd.kind, sink: sinkEnd.kind) {
        case .readWrite(let because):
            pathNote = because
        case .kernel(let route):
            startKernelMoves(
                ZeroCopyDriverSetup(
                    route: route, source: sourceEnd, sink: sinkEnd,
                    pipeCapacity: options.depth * options.chunkSize.bytes,
                    fault: options.zeroCopyFault, directSink: nil))
        }
    }

    private struct ZeroCopyDriverSetup {
        var route: KernelRoute
        var source: (fd: Int32, name: String, kind: DescriptorKind)
        var sink: (fd: Int32, name: String, kind: DescriptorKind)
        var pipeCapacity: Int
        var fault: ZeroCopyFault?
        var directSink: DirectFileWriteStream?
    }

    /// Makes the driver of the kernel's calls (and its pipe, on a route through one), or notes
    /// why there is none and leaves the bytes to read/write.
    private func startKernelMoves(_ setup: ZeroCopyDriverSetup) {
        let made = Result { () throws(SluiceError) in
            try ZeroCopyDriver(
                route: setup.route, source: setup.source, sink: setup.sink, pipeCapacity: setup.pipeCapacity,
                fault: setup.fault, directSink: setup.directSink)
        }
        switch made {
        case .success(let driver):
            zeroCopy = .active(driver)
            path = driver.path
        case .failure(let error):
            pathNote = "no pipe to splice through (\(error.reason))"
        }
    }

    /// A sink writing past the page cache: a socket source is spliced into the pipeline's pipe
    /// and from there into the file's `O_DIRECT` descriptor, no byte copied (where the socket's
    /// pages are aligned as direct I/O needs: else the first splice out is refused, and
    /// read/write goes on). Any other source is read straight into the sink's buffer.
    private func decideDirectSplice(into direct: DirectFileWriteStream) {
        guard source.streamStatus == .open, direct.splicesFromPipes, let sourceFD = source.kernelCopyDescriptor,
            DescriptorKind(of: sourceFD) == .socket
        else {
            pathNote = "the destination is written with O_DIRECT from the pipeline's buffer"
            return
        }
        let fileFD = direct.bufferedDescriptor
        // The pipe holds `inFlightLimit`: at least the sink's 1 MiB, for whole 1 MiB writes.
        startKernelMoves(
            ZeroCopyDriverSetup(
                route: KernelRoute(calls: [.splice], throughPipe: true, blockingEnd: nil),
                source: (sourceFD, source.name, .socket), sink: (fileFD, sink.name, DescriptorKind(of: fileFD)),
                pipeCapacity: inFlightLimit, fault: nil, directSink: direct))
    }

    private func isActive(_ driver: ZeroCopyDriver) -> Bool {
        if case .active(let current) = zeroCopy, current === driver { return true }
        return false
    }

    /// Handles `event` while the bytes move (or may yet move) inside the kernel; false when it
    /// is read/write's to handle. The offers are kept in the backpressure flags, as read/write
    /// keeps them: the source's while it waits for the sink (sink-bound time), the sink's while
    /// it waits for the source (source-bound time). Every offer is either kept or answered by a
    /// call, after which its stream is re-armed, so read/write can take over at any point.
    private func zeroCopyEvent(_ stream: ByteStream, _ event: StreamEvent) -> Bool {
        if case .undecided = zeroCopy {
            if source.streamStatus == .opening || sink.streamStatus == .opening {
                // An end is still connecting: keep the offer for whichever path it will be.
                switch event {
                case .hasBytesAvailable where stream === source:
                    hot.sourceWaiting.set()
                    return true
                case .hasSpaceAvailable where stream === sink:
                    hot.pendingWrite.set()
                    return true
                default:
                    return false
                }
            }
            decideZeroCopy()
            if zeroCopy == nil { pump() }  // read/write: act on the offers kept meanwhile
        }
        guard case .active(let driver) = zeroCopy else { return false }
        switch event {
        case .hasBytesAvailable where stream === source:
            hot.sourceWaiting.set()
        case .hasSpaceAvailable where stream === sink:
            hot.pendingWrite.set()
        case .errorOccurred:
            return false
        case .endEncountered where stream === sink:
            return false
        default:
            break  // openCompleted
        }
        kernelPump(driver)
        return true
    }

    /// Moves bytes inside the kernel while the offers allow: on a direct route when both ends
    /// have one; through the pipe when the sink has one and the pipe bytes, or the source has
    /// one and the pipe room.
    private func kernelPump(_ driver: ZeroCopyDriver) {
        var again = true
        while again && !hot.isFinished && isActive(driver) {
            again = false
            if !driver.route.throughPipe {
                guard hot.sourceWaiting.isSet && hot.pendingWrite.isSet else { break }
                hot.sourceWaiting.take()
                hot.pendingWrite.take()
                moveDirect(driver)
                continue
            }
            if hot.pendingWrite.isSet && driver.sinkCanTake {
                hot.pendingWrite.take()
                spliceOut(driver)
                again = true
            }
            if !hot.isFinished, isActive(driver), hot.sourceWaiting.isSet, !driver.sourceDone, !driver.pipeFull,
                driver.room > 0
            {
                hot.sourceWaiting.take()
                spliceIn(driver)
                again = true
            }
            if !hot.isFinished, isActive(driver), driver.sourceDone, driver.held == 0 {
                succeed()
                return
            }
        }
        // Fell back: read/write goes on with the offers kept and the bytes drained.
        if zeroCopy == nil && !hot.isFinished { pump() }
    }

    /// Source to sink in one call per chunk, up to `depth` calls while each moves a whole chunk.
    private func moveDirect(_ driver: ZeroCopyDriver) {
        let chunk = options.chunkSize.bytes
        moving: for _ in 0..<options.depth {
            let outcome = driver.moveDirect(upTo: chunk, written: hot.bytesWritten)
            switch outcome {
            case .moved(let n):
                hot.bytesRead += UInt64(n)
                hot.bytesWritten += UInt64(n)
                hot.peakInFlightBytes = max(hot.peakInFlightBytes, n)
                path = driver.path
                if n < chunk { break moving }
            case .end:
                source.reachedEnd()
                succeed()
                return
            case .wouldBlock:
                // The end that would block waits for its event; the other keeps its offer.
                switch driver.route.blockingEnd {
                case .source?:
                    source.rearm()
                    hot.pendingWrite.set()
                case .sink?:
                    sink.rearm()
                    hot.sourceWaiting.set()
                case nil, .stage?:
                    source.rearm()
                    sink.rearm()
                }
                return
            case .fellBack, .failed:
                stopKernelMoves(driver, outcome, keepingSourceOffer: true, keepingSinkOffer: true)
                return
            }
        }
        source.rearm()
        sink.rearm()
    }

    /// Socket into the pipe, up to `depth` calls while each fills what it asked; the pipe is
    /// spliced on to the sink in between whenever the sink has an offer.
    private func spliceIn(_ driver: ZeroCopyDriver) {
        let chunk = options.chunkSize.bytes
        reading: for _ in 0..<options.depth {
            guard driver.room > 0 else { break reading }
            let ask = min(chunk, driver.room)
            let outcome = driver.spliceIn(upTo: ask, read: hot.bytesRead, written: hot.bytesWritten)
            switch outcome {
            case .moved(let n):
                hot.bytesRead += UInt64(n)
                hot.peakInFlightBytes = max(hot.peakInFlightBytes, driver.held)
                if hot.pendingWrite.isSet && driver.sinkCanTake {
                    hot.pendingWrite.take()
                    spliceOut(driver)
                    guard !hot.isFinished, isActive(driver) else {
                        if !hot.isFinished { source.rearm() }  // this offer was answered
                        return
                    }
                }
                if n < ask { break reading }
            case .end:
                source.reachedEnd()
                return
            case .wouldBlock:
                if driver.held == 0 {
                    source.rearm()  // nothing to read now
                } else if !driver.sinkCanTake {
                    // A direct sink, less than a block held, and the socket dry (or the pipe's
                    // slots full of small pieces): into its buffer with them, and wait for more.
                    guard finalSpliceOut(driver) else { return }
                    source.rearm()
                } else {
                    // The socket is drained, or the pipe's slots are full: wait for a splice out.
                    driver.pipeFull = true
                    hot.sourceWaiting.set()
                }
                return
            case .fellBack, .failed:
                stopKernelMoves(driver, outcome, keepingSourceOffer: true, keepingSinkOffer: false)
                return
            }
        }
        source.rearm()
    }

    /// The pipe into the sink, up to `depth` calls while each moves what it asked.
    private func spliceOut(_ driver: ZeroCopyDriver) {
        let chunk = options.chunkSize.bytes
        writing: for _ in 0..<options.depth {
            guard driver.held > 0 else { break writing }
            let ask = min(chunk, driver.held)
            let outcome = driver.spliceOut(upTo: ask, written: hot.bytesWritten)
            switch outcome {
            case .moved(let n):
                hot.bytesWritten += UInt64(n)
                if n < ask { break writing }  // the sink took less: it may be full
            case .wouldBlock, .end:
                break writing
            case .fellBack, .failed:
                stopKernelMoves(driver, outcome, keepingSourceOffer: false, keepingSinkOffer: true)
                return
            }
        }
        sink.rearm()
    }

    /// Everything held in the pipe into a direct sink (its buffer takes what is not a whole
    /// block). False when that ended the kernel's moves (a failure, or a fallback).
    private func finalSpliceOut(_ driver: ZeroCopyDriver) -> Bool {
        while driver.held > 0 {
            let outcome = driver.spliceOut(upTo: driver.held, written: hot.bytesWritten, final: true)
            switch outcome {
            case .moved(let n):
                hot.bytesWritten += UInt64(n)
            case .wouldBlock, .end:
                return true
            case .fellBack, .failed:
                stopKernelMoves(driver, outcome, keepingSourceOffer: false, keepingSinkOffer: false)
                return false
            }
        }
        return true
    }

    /// A call ended the kernel's moves: an end failed, or the kernel refused every call and
    /// read/write takes over, with the offers the call was answering kept for it.
    private func stopKernelMoves(
        _ driver: ZeroCopyDriver, _ outcome: ZeroCopyDriver.Outcome, keepingSourceOffer: Bool,
        keepingSinkOffer: Bool
    ) {
        if case .failed(let location, let error) = outcome {
            fail(location, error)
            return
        }
        if keepingSourceOffer { hot.sourceWaiting.set() }
        if keepingSinkOffer { hot.pendingWrite.set() }
        fallBack(driver)
    }

    /// The kernel refused every call: read/write takes over where it stopped, with the bytes
    /// still in the pipeline's pipe queued first.
    private func fallBack(_ driver: ZeroCopyDriver) {
        fallbacks = driver.fallbacks
        path = .readWrite
        zeroCopy = nil
        defer { driver.close() }
        while driver.held > 0 {
            let chunk = takeChunk()
            switch driver.drain(into: chunk.storage) {
            case .success(let n) where n > 0:
                chunk.end = n
                hot.queues[0].pushSealed(chunk)
            case .success:
                recycle(chunk)
                fail(
                    .source,
                    source.error(
                        .system(.ioError), operation: "read",
                        detail: "the splice pipe came up short"
                    ))
                return
            case .failure(let error):
                recycle(chunk)
                fail(.source, error)
                return
            }
        }
        if driver.sourceDone { hot.queues[0].producerDone = true }
        notePeak()
    }

    // MARK: Ending

    private func succeed() {
        finish(error: nil)
    }

    private func fail(_ location: PipelineLocation, _ error: any Error) {
        guard !hot.isFinished else { return }
        let e =
            error as? SluiceError
            ?? SluiceError(.system(.ioError), operation: location.description, detail: "\(error)")
        finish(error: PipelineError(location: location, underlying: e))
    }

    private func failedBeforeStart(_ error: SluiceError) -> PipelineResult {
        finish(error: PipelineError(location: .source, underlying: error))
        return result!
    }

    private func finish(error: PipelineError?) {
        guard !hot.isFinished else { return }
        let now = monotonicNanoseconds()
        hot.pendingWrite.take()
        hot.sourceWaiting.take()
        for driver in drivers {
            if error == nil { driver.noteMoving() } else { driver.cancel() }
        }
        hot.limiter?.cancel()
        for tap in sourceTaps { tap.finish() }
        for tap in sinkTaps { tap.finish() }
        hot.isFinished = true
        if case .active(let driver) = zeroCopy {
            path = driver.path
            fallbacks = driver.fallbacks
            driver.close()
        }
        zeroCopy = nil
        result = PipelineResult(
            bytesRead: hot.bytesRead, bytesWritten: hot.bytesWritten, stages: drivers.map(\.statistics),
            elapsedSeconds: started == 0 ? 0 : Double(now - started) / 1e9,
            sourceBoundSeconds: Double(hot.pendingWrite.totalNanoseconds) / 1e9,
            sinkBoundSeconds: Double(hot.sourceWaiting.totalNanoseconds) / 1e9,
            peakInFlightBytes: hot.peakInFlightBytes, inFlightLimit: inFlightLimit, error: error,
            path: path, fallbacks: fallbacks, pathNote: pathNote)
        source.delegate = nil
        sink.delegate = nil
        if options.closesStreams || error != nil {
            source.close()
            sink.close()
        }
        if let loop {
            source.remove(from: loop)
            sink.remove(from: loop)
        }
        if error != nil, options.removeCreatedSinkOnFailure, let file = sink as? DescriptorWriteStream,
            file.createdFile, let path = file.path
        {
            unlink(path)
        }
        for index in hot.queues.indices {
            while !hot.queues[index].isEmpty { recycle(hot.queues[index].popFront()) }
        }
        hot.pool.removeAll()
        hot.lentPool.removeAll()
        let done = completion
        completion = nil
        retainedWhileRunning = nil
        done?(result!)
    }
}
