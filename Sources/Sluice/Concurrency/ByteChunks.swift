import FoundationEssentials
import Synchronization

/// A read stream's bytes as an `AsyncSequence` of chunks, with backpressure in bytes:
///
/// ```swift
/// for try await chunk in ReadStream.file(atPath: "big.iso").chunks(ofAtMost: 1 << 20) {
///     hash.update(chunk)
/// }
/// ```
///
/// The stream is read on its loop (the shared loop, `EventLoop.shared`, unless it is scheduled
/// on one) while fewer than `bufferLimit` bytes wait for the consumer; reading stops — for a
/// socket, read interest is dropped and the TCP window closes — until the consumer has taken
/// them down to half. Memory is bounded by `bufferLimit + 3 × chunkSize` (the buffer, the arrays
/// kept for reuse, the read in progress), whatever the input size.
///
/// - The sequence ends (`nil`) after the last byte, and throws the stream's `SluiceError` if
///   it fails. The stream is opened if need be, and closed when the sequence ends, fails, is
///   abandoned (the iterator dropped, as by `break`), or its task is cancelled — cancellation
///   ends iteration with `CancellationError`.
/// - One iterator: a second one's `next()` throws `.invalidArgument`, and so does calling
///   `next()` from two tasks at once.
/// - After `chunks()` the stream belongs to the sequence: it is used on its loop's thread, and
///   the caller must not touch it again. `ByteChunks(_:chunkSize:bufferLimit:)` takes the stream
///   as a `sending` argument, so the compiler checks that.
public struct ByteChunks: AsyncSequence, Sendable {
    /// A chunk: at most `chunkSize` bytes, never empty.
    public typealias Element = [UInt8]

    let core: ChunkReaderCore

    /// Chunks of `stream`, read at most `chunkSize` bytes at a time, with at most `bufferLimit`
    /// bytes (default: 4 chunks) read ahead of the consumer.
    public init(_ stream: sending ReadStream, chunkSize: Int = 65536, bufferLimit: Int? = nil) {
        core = ChunkReaderCore(
            stream: UncheckedBox(stream), chunkSize: Swift.max(1, chunkSize),
            bufferLimit: Swift.max(1, bufferLimit ?? 4 * Swift.max(1, chunkSize)))
    }

    /// Starts reading; the only iterator (see the type's notes).
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(consumer: core.attachConsumer())
    }

    /// Hands out the chunks. Not to be shared between tasks.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let consumer: ChunkConsumer

        /// The next chunk; nil at the end. Throws the stream's error, `CancellationError`, or
        /// `.invalidArgument` for a second iterator.
        public mutating func next() async throws -> [UInt8]? {
            try await consumer.next()
        }
    }
}

extension ReadStream {
    /// This stream's bytes as an `AsyncSequence` of chunks of at most `chunkSize` bytes, with
    /// at most `bufferLimit` bytes (default: 4 chunks) read ahead; see `ByteChunks`. The stream
    /// belongs to the sequence from now on: do not use it again.
    public func chunks(ofAtMost chunkSize: Int = 65536, bufferLimit: Int? = nil) -> ByteChunks {
        nonisolated(unsafe) let handedOver = self
        return ByteChunks(handedOver, chunkSize: chunkSize, bufferLimit: bufferLimit)
    }
}

/// The iterator's handle: when the iterator is gone, the reading stops and the stream closes.
final class ChunkConsumer: Sendable {
    let core: ChunkReaderCore
    let isFirst: Bool

    init(core: ChunkReaderCore, isFirst: Bool) {
        self.core = core
        self.isFirst = isFirst
    }

    func next() async throws -> [UInt8]? {
        guard isFirst else {
            throw SluiceError(
                .invalidArgument, operation: "chunks", streamName: core.name, isPath: core.nameIsPath,
                detail: "a second iterator")
        }
        return try await core.next()
    }

    deinit {
        if isFirst { core.terminate(with: nil) }
    }
}

/// What the loop side and the consumer share, under one lock.
final class ChunkReaderCore: Sendable {
    private struct State {
        var chunks = ChunkFIFO()
        var bufferedBytes: Int { chunks.bytes }
        /// The end was read (`nil` once the buffer is drained).
        var ended = false
        /// The stream failed, or the consumer cancelled: thrown once the buffer is drained
        /// (a cancellation at once).
        var failure: (any Error)?
        /// The loop side stopped reading because the buffer was full.
        var paused = false
        var waiter: CheckedContinuation<[UInt8]?, any Error>?
        var consumerAttached = false
        var started = false
        var terminated = false
        var pump: UncheckedBox<ChunkPump>?
    }

    private let state = Mutex(State())
    let stream: UncheckedBox<ReadStream>
    let chunkSize: Int
    let bufferLimit: Int
    let name: String
    let nameIsPath: Bool

    init(stream: UncheckedBox<ReadStream>, chunkSize: Int, bufferLimit: Int) {
        self.stream = stream
        self.chunkSize = chunkSize
        self.bufferLimit = bufferLimit
        name = stream.value.name
        nameIsPath = stream.value.nameIsPath
    }

    func attachConsumer() -> ChunkConsumer {
        let first = state.withLock { state in
            defer { state.consumerAttached = true }
            return !state.consumerAttached
        }
        return ChunkConsumer(core: self, isFirst: first)
    }

    /// Starts the loop side once, on the first `next()`.
    func startIfNeeded() throws {
        if let (loop, job) = try startJob() { loop.execute(job) }
    }

    /// The first call returns the loop side's start (create the pump, adopt and open the
    /// stream) and the loop to run it on, for the caller to run there; later calls return nil.
    func startJob() throws -> (EventLoop, @Sendable () -> Void)? {
        let start = state.withLock { state in
            defer { state.started = true }
            return !state.started
        }
        guard start else { return nil }
        let loop = try asyncLoop(for: stream.value)
        let stream = self.stream
        return (
            loop,
            { [self] in
                let pump = ChunkPump(core: self, stream: stream.value, loop: loop)
                let keep = state.withLock { state -> Bool in
                    guard !state.terminated else { return false }
                    state.pump = UncheckedBox(pump)
                    return true
                }
                if keep { pump.start() } else { pump.shutdown() }
            }
        )
    }

    func next() async throws -> [UInt8]? {
        try startIfNeeded()
        if Task.isCancelled {
            terminate(with: CancellationError())
            throw CancellationError()
        }
        // The fast path: a chunk is waiting, so no suspension (and no hop between threads).
        let (ready, resume) = state.withLock { state -> ([UInt8]?, UncheckedBox<ChunkPump>?) in
            guard state.waiter == nil, !state.chunks.isEmpty else { return (nil, nil) }
            return (Self.take(&state, lowWater: bufferLimit / 2), Self.resumeIfPaused(&state, bufferLimit))
        }
        if let resume { resume.value.loop.execute { resume.value.resumeReading() } }
        if let ready { return ready }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[UInt8]?, any Error>) in
                let (result, resume) = state.withLock {
                    state -> (Result<[UInt8]?, any Error>?, UncheckedBox<ChunkPump>?) in
                    if state.waiter != nil {
                        return (
                            .failure(
                                SluiceError(
                                    .invalidArgument, operation: "chunks", streamName: name, isPath: nameIsPath,
                                    detail: "next() called from two tasks at once")), nil
                        )
                    }
                    if !state.chunks.isEmpty {
                        return (
                            .success(Self.take(&state, lowWater: bufferLimit / 2)),
                            Self.resumeIfPaused(&state, bufferLimit)
                        )
                    }
                    if let failure = state.failure { return (.failure(failure), nil) }
                    if state.ended || state.terminated { return (.success(nil), nil) }
                    state.waiter = continuation
                    return (nil, Self.resumeIfPaused(&state, bufferLimit))
                }
                if let resume { resume.value.loop.execute { resume.value.resumeReading() } }
                if let result { continuation.resume(with: result) }
            }
        } onCancel: {
            terminate(with: CancellationError())
        }
    }

    private static func take(_ state: inout State, lowWater: Int) -> [UInt8] {
        state.chunks.popFirst() ?? []
    }

    /// If the loop side paused and the buffer is down to half, un-pause it (the caller asks the
    /// loop to read again).
    private static func resumeIfPaused(_ state: inout State, _ limit: Int) -> UncheckedBox<ChunkPump>? {
        guard state.paused, state.bufferedBytes <= limit / 2, let pump = state.pump else { return nil }
        state.paused = false
        return pump
    }

    // MARK: Loop side

    /// The loop side stopped reading because the buffer is full.
    var isPaused: Bool { state.withLock { $0.paused } }

    /// A chunk was read. Returns false when the buffer is now full: the pump stops reading.
    func deliver(_ chunk: [UInt8]) -> Bool {
        let (waiter, first, more) = state.withLock {
            state -> (CheckedContinuation<[UInt8]?, any Error>?, [UInt8]?, Bool) in
            state.chunks.append(chunk)
            let more = state.bufferedBytes < bufferLimit
            if !more { state.paused = true }
            // A waiting consumer is woken once half the buffer is filled (or the burst of reads
            // ends: `wakeConsumer()`), not for every chunk: each wake is a thread switch.
            guard state.bufferedBytes >= bufferLimit / 2 || !more else { return (nil, nil, more) }
            guard let waiter = state.waiter else { return (nil, nil, more) }
            state.waiter = nil
            return (waiter, state.chunks.popFirst(), more)
        }
        if let waiter, let first { waiter.resume(returning: first) }
        return more
    }

    /// A burst of reads ended (the stream would block, or the buffer is full): hand a waiting
    /// consumer what has been read.
    func wakeConsumer() {
        let (waiter, first) = state.withLock { state -> (CheckedContinuation<[UInt8]?, any Error>?, [UInt8]?) in
            guard let waiter = state.waiter, let first = state.chunks.popFirst() else { return (nil, nil) }
            state.waiter = nil
            return (waiter, first)
        }
        if let waiter, let first { waiter.resume(returning: first) }
    }

    /// The stream ended (error nil) or failed. A waiting consumer gets what is still buffered
    /// first; the end or the error comes after the last chunk.
    func finish(error: (any Error)?) {
        let (waiter, first) = state.withLock {
            state -> (CheckedContinuation<[UInt8]?, any Error>?, [UInt8]?) in
            if let error { state.failure = state.failure ?? error } else { state.ended = true }
            state.pump = nil
            guard let waiter = state.waiter else { return (nil, nil) }
            state.waiter = nil
            return (waiter, state.chunks.popFirst())
        }
        guard let waiter else { return }
        if let first {
            waiter.resume(returning: first)
        } else if let error {
            waiter.resume(throwing: error)
        } else {
            waiter.resume(returning: nil)
        }
    }

    /// The consumer is gone or cancelled: stop reading and close the stream.
    func terminate(with error: (any Error)?) {
        let (waiter, pump) = state.withLock {
            state -> (CheckedContinuation<[UInt8]?, any Error>?, UncheckedBox<ChunkPump>?) in
            guard !state.terminated else { return (nil, nil) }
            state.terminated = true
            if let error { state.failure = error }
            state.chunks.removeAll()
            defer {
                state.waiter = nil
                state.pump = nil
            }
            return (state.waiter, state.pump)
        }
        if let waiter {
            if let error { waiter.resume(throwing: error) } else { waiter.resume(returning: nil) }
        }
        if let pump { pump.value.loop.execute { pump.value.shutdown() } }
    }
}

/// The loop side: reads the stream on its loop's thread while the buffer has room.
final class ChunkPump: StreamPump {
    let core: ChunkReaderCore
    let stream: ReadStream

    init(core: ChunkReaderCore, stream: ReadStream, loop: EventLoop) {
        self.core = core
        self.stream = stream
        super.init(stream: stream, loop: loop)
    }

    func start() {
        switch adopt() {
        case .error: finish(error: stream.streamError)
        case .closed: finish(error: stream.error(.closed, operation: "chunks"))
        case .atEnd: finish(error: nil)
        case .notOpen, .opening, .open, .reading, .writing: break
        }
    }

    override func handle(_ event: StreamEvent) {
        switch event {
        case .hasBytesAvailable: readWhileRoom()
        case .endEncountered: finish(error: nil)
        case .errorOccurred: finish(error: stream.streamError)
        default: break
        }
    }

    /// Called through `execute` when the consumer drained the buffer after a pause.
    func resumeReading() {
        guard !done else { return }
        readWhileRoom()
    }

    /// Chunk arrays handed out before, oldest first, to read into again once the consumer has
    /// let go of them: a fresh 1 MiB array per chunk costs page faults that a reused one does
    /// not. An array the consumer still holds is copied on write (Swift's value semantics), so
    /// reuse is always safe; once a reuse has had to copy — the consumer keeps its chunks —
    /// the pool is switched off.
    private var pool: [[UInt8]] = []
    private var poolHead = 0
    private var pooling = true
    /// Arrays in the pool: those that may sit in the buffer, plus two.
    private var poolDepth: Int { core.bufferLimit / core.chunkSize + 2 }

    /// An array of `chunkSize` bytes to read into: a pooled one if it is old enough, else new.
    private func takeBuffer() -> [UInt8] {
        guard pooling, pool.count - poolHead >= poolDepth else {
            return [UInt8](unsafeUninitializedCapacity: core.chunkSize) { _, initialized in
                initialized = core.chunkSize
            }
        }
        var buffer = pool[poolHead]
        pool[poolHead] = []
        poolHead += 1
        if poolHead >= 64 {
            pool.removeFirst(poolHead)
            poolHead = 0
        }
        let before = buffer.withUnsafeBytes { $0.baseAddress }
        if buffer.count < core.chunkSize {
            buffer.append(contentsOf: repeatElement(0, count: core.chunkSize - buffer.count))
        }
        // Mutable access copies the array if the consumer still holds it: then stop pooling.
        if buffer.withUnsafeMutableBytes({ UnsafeRawPointer($0.baseAddress) }) != before { pooling = false }
        return buffer
    }

    private func readWhileRoom() {
        defer { core.wakeConsumer() }
        var spare: [UInt8]?
        // Paused (the buffer is full): no read, so no further event until the consumer resumes us.
        while !done && !core.isPaused {
            var chunk = spare.take() ?? takeBuffer()
            let result = chunk.withUnsafeMutableBytes { stream.tryReadFilling(into: $0) }
            switch result {
            case .wouldBlock:
                if pooling { pool.append(chunk) }
                return  // re-armed: the next hasBytesAvailable reads on
            case .processed(let n) where n > 0:
                if n < core.chunkSize / 2 {
                    // A short read: hand out a copy of its size, keep the big array for the next.
                    spare = chunk
                    if !core.deliver(Array(chunk[0..<n])) { break }
                    continue
                }
                chunk.removeLast(chunk.count - n)
                if pooling { pool.append(chunk) }
                if !core.deliver(chunk) { return }  // full: no read, so no event, until resumed
            case .processed(0):
                finish(error: nil)
                return
            case .processed:
                finish(
                    error: stream.streamError ?? stream.error(.system(.ioError), operation: "read")
                )
                return
            }
        }
        if let spare, pooling { pool.append(spare) }
    }

    private func finish(error: (any Error)?) {
        guard !done else { return }
        core.finish(error: error)
        shutdown()
    }
}
