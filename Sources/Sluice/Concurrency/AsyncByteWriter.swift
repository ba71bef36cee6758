import FoundationEssentials
import Synchronization

/// Writes to a `WriteStream` from async code:
///
/// ```swift
/// let writer = AsyncByteWriter(WriteStream.file(atPath: "out.bin"))
/// for try await chunk in ReadStream.file(atPath: "in.bin").chunks() {
///     try await writer.write(chunk)
/// }
/// try await writer.finish()
/// ```
///
/// The stream is written on its loop (the shared loop unless it is scheduled on one) under the
/// backpressure rule: `write(_:)` queues the bytes and returns at once while fewer than
/// `bufferLimit` bytes are queued, and suspends until the stream has taken them down to that
/// otherwise. Memory is bounded by `bufferLimit` plus the chunk being queued.
///
/// - `finish()` waits until every queued byte is written, then closes the stream — for a
///   socket, that shuts down the sending direction only (the peer reads the end while the
///   connection's read stream keeps working).
/// - A write failure (disk full, connection reset) is thrown by the next `write` or `finish`.
///   `write` after `finish()` throws `.closed`; a second `finish()` returns at once. Cancelling a
///   task suspended in `write` or `finish` closes the stream and throws `CancellationError`.
/// - After `init` the stream belongs to the writer (it is taken as `sending`).
public final class AsyncByteWriter: Sendable {
    private struct State {
        var queue = ChunkFIFO()
        /// Bytes of `queue.first` already written.
        var offset = 0
        var queuedBytes: Int { queue.bytes }
        /// The loop side was offered space with nothing to write (the pending-write flag).
        var sinkIdle = false
        var started = false
        var finishing = false
        var closed = false
        var failure: (any Error)?
        var spaceWaiters: [UInt64: CheckedContinuation<Void, any Error>] = [:]
        var finishWaiters: [UInt64: CheckedContinuation<Void, any Error>] = [:]
        var nextWaiter: UInt64 = 0
        var pump: UncheckedBox<WritePump>?
        var memoryContents: Data?
    }

    private let state = Mutex(State())
    private let stream: UncheckedBox<WriteStream>
    let bufferLimit: Int
    let name: String
    let nameIsPath: Bool

    /// A writer for `stream`, which it opens if need be; at most `bufferLimit` bytes (default
    /// 4 MiB) are queued before `write` suspends.
    public init(_ stream: sending WriteStream, bufferLimit: Int = 4 << 20) {
        self.stream = UncheckedBox(stream)
        self.bufferLimit = Swift.max(1, bufferLimit)
        name = stream.name
        nameIsPath = stream.nameIsPath
    }

    /// For tests: the bytes queued, and the writes suspended for want of space.
    var queuedBytes: Int { state.withLock { $0.queuedBytes } }
    var writesWaitingForSpace: Int { state.withLock { $0.spaceWaiters.count } }

    /// Queues `bytes`; suspends while the queue holds `bufferLimit` bytes or more.
    public func write(_ bytes: [UInt8]) async throws {
        try start()
        let kick = try state.withLock { state throws -> UncheckedBox<WritePump>? in
            if let failure = state.failure { throw failure }
            if state.finishing || state.closed {
                throw SluiceError(
                    .closed, operation: "write", streamName: name, isPath: nameIsPath, detail: "the writer is finished")
            }
            guard !bytes.isEmpty else { return nil }
            state.queue.append(bytes)
            return Self.takeKick(&state)
        }
        if let kick { kick.value.loop.execute { kick.value.drain() } }
        try await waitFor(\.spaceWaiters) { $0.queuedBytes < self.bufferLimit }
    }

    /// Queues `data`; as `write(_:)` with its bytes.
    public func write(_ data: Data) async throws {
        try await write([UInt8](data))
    }

    /// Writes every chunk of `chunks` in order (for example another stream's `chunks()`).
    public func write<Chunks: AsyncSequence>(contentsOf chunks: Chunks) async throws
    where Chunks.Element == [UInt8] {
        for try await chunk in chunks {
            try await write(chunk)
        }
    }

    /// Waits until every queued byte is written, then closes the stream (a socket: half-close).
    /// Throws the stream's error if a write failed.
    public func finish() async throws {
        try start()
        let kick = try state.withLock { state throws -> UncheckedBox<WritePump>? in
            if let failure = state.failure { throw failure }
            if state.finishing { return nil }
            state.finishing = true
            return Self.takeKick(&state)
        }
        if let kick { kick.value.loop.execute { kick.value.drain() } }
        try await waitFor(\.finishWaiters) { $0.closed }
    }

    /// The loop side is idle (offered space, nothing to write): take the flag and return the
    /// pump to wake.
    private static func takeKick(_ state: inout State) -> UncheckedBox<WritePump>? {
        guard state.sinkIdle, let pump = state.pump else { return nil }
        state.sinkIdle = false
        return pump
    }

    private func waitFor(
        _ list: WritableKeyPath<State, [UInt64: CheckedContinuation<Void, any Error>]>,
        until done: @escaping @Sendable (State) -> Bool
    ) async throws {
        // The fast path: nothing to wait for, so no suspension (and no hop between threads).
        let id = try state.withLock { state throws -> UInt64? in
            if let failure = state.failure { throw failure }
            if done(state) { return nil }
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        guard let id else { return }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome = state.withLock { state -> Result<Void, any Error>? in
                    if let failure = state.failure { return .failure(failure) }
                    if done(state) { return .success(()) }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    state[keyPath: list][id] = continuation
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            fail(CancellationError())
        }
    }

    /// Starts the loop side once.
    func start() throws {
        if let (loop, job) = try startJob() { loop.execute(job) }
    }

    /// The first call returns the loop side's start (create the pump, adopt and open the
    /// stream) and the loop to run it on, for the caller to run there; later calls return nil.
    func startJob() throws -> (EventLoop, @Sendable () -> Void)? {
        let first = state.withLock { state in
            defer { state.started = true }
            return !state.started
        }
        guard first else { return nil }
        let loop = try asyncLoop(for: stream.value)
        let stream = self.stream
        return (
            loop,
            { [self] in
                let pump = WritePump(writer: self, stream: stream.value, loop: loop)
                let keep = state.withLock { state -> Bool in
                    guard state.failure == nil else { return false }
                    state.pump = UncheckedBox(pump)
                    return true
                }
                if keep { pump.start() } else { pump.shutdown() }
            }
        )
    }

    // MARK: Loop side

    /// The next bytes to write (the rest of the first queued chunk), or nil with the idle flag
    /// set when nothing is queued. `finishNow` is true when the queue is empty and `finish()`
    /// was called.
    func nextBytes() -> (chunk: [UInt8], offset: Int)? {
        state.withLock { state in
            guard let first = state.queue.first else {
                state.sinkIdle = true
                return nil
            }
            return (first, state.offset)
        }
    }

    var finishRequested: Bool { state.withLock { $0.finishing && $0.queue.isEmpty } }

    /// `n` bytes of the first chunk were written.
    func wrote(_ n: Int) {
        let ready = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            state.offset += n
            if state.offset == state.queue.first?.count {
                // The whole chunk is written. Its earlier partial writes were already taken off
                // the count: give them back, since taking the chunk out takes off all of it.
                state.queue.consumed(-(state.offset - n))
                _ = state.queue.popFirst()
                state.offset = 0
            } else {
                state.queue.consumed(n)
            }
            guard state.queuedBytes < bufferLimit, !state.spaceWaiters.isEmpty else { return [] }
            defer { state.spaceWaiters = [:] }
            return Array(state.spaceWaiters.values)
        }
        for waiter in ready { waiter.resume() }
    }

    /// For a memory stream (`WriteStream.toMemory()`, `toBuffer(capacity:)`), what it holds,
    /// once `finish()` has returned; nil before, and for other kinds. (The stream itself
    /// belongs to the writer's loop: this is how its bytes come back.)
    public var dataWrittenToMemory: Data? { state.withLock { $0.memoryContents } }

    /// The stream is closed: after `finish()` (error nil) or on failure.
    func closed(error: (any Error)?, memoryContents: Data? = nil) {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            state.memoryContents = memoryContents
            state.closed = true
            state.pump = nil
            if let error, state.failure == nil { state.failure = error }
            defer {
                state.spaceWaiters = [:]
                state.finishWaiters = [:]
            }
            return Array(state.spaceWaiters.values) + Array(state.finishWaiters.values)
        }
        for waiter in waiters {
            if let error { waiter.resume(throwing: error) } else { waiter.resume() }
        }
    }

    /// Fails the writer (cancellation): every waiter throws, the stream is closed.
    func fail(_ error: any Error) {
        let (waiters, pump) = state.withLock {
            state -> ([CheckedContinuation<Void, any Error>], UncheckedBox<WritePump>?) in
            guard state.failure == nil, !state.closed else { return ([], nil) }
            state.failure = error
            state.queue.removeAll()
            state.offset = 0
            defer {
                state.spaceWaiters = [:]
                state.finishWaiters = [:]
                state.pump = nil
            }
            return (Array(state.spaceWaiters.values) + Array(state.finishWaiters.values), state.pump)
        }
        for waiter in waiters { waiter.resume(throwing: error) }
        if let pump { pump.value.loop.execute { pump.value.shutdown() } }
    }
}

/// The loop side of an `AsyncByteWriter`: writes queued chunks on `hasSpaceAvailable`.
final class WritePump: StreamPump {
    let writer: AsyncByteWriter
    let stream: WriteStream

    init(writer: AsyncByteWriter, stream: WriteStream, loop: EventLoop) {
        self.writer = writer
        self.stream = stream
        super.init(stream: stream, loop: loop)
    }

    func start() {
        switch adopt() {
        case .error: fail(stream.streamError)
        case .closed, .atEnd: fail(stream.error(.closed, operation: "write"))
        case .notOpen, .opening, .open, .reading, .writing: break
        }
    }

    override func handle(_ event: StreamEvent) {
        switch event {
        case .hasSpaceAvailable: drain()
        case .errorOccurred: fail(stream.streamError)
        case .endEncountered:
            fail(stream.error(.system(.noSpace), operation: "write", detail: "the stream is full"))
        default: break
        }
    }

    /// Writes while there are bytes and space (bounded: stops at would-block or an empty queue).
    func drain() {
        while !done {
            guard let (chunk, offset) = writer.nextBytes() else {
                if writer.finishRequested { close() }
                return
            }
            let result = chunk.withUnsafeBytes {
                stream.tryWrite(from: UnsafeRawBufferPointer(rebasing: $0[offset...]))
            }
            switch result {
            case .wouldBlock:
                return
            case .processed(let n) where n > 0:
                writer.wrote(n)
            case .processed(0):
                fail(
                    stream.error(
                        .system(.noSpace), operation: "write", detail: "the stream is full"))
                return
            case .processed:
                fail(stream.streamError)
                return
            }
        }
    }

    private func close() {
        let contents = stream.dataWrittenToMemory
        shutdown()
        writer.closed(error: nil, memoryContents: contents)
    }

    private func fail(_ error: SluiceError?) {
        guard !done else { return }
        shutdown()
        writer.closed(error: error ?? stream.error(.system(.ioError), operation: "write"))
    }
}
