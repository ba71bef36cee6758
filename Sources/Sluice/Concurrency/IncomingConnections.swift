import Synchronization

/// A listener's connections for async code:
///
/// ```swift
/// let incoming = IncomingConnections(try Socket.listen(host: "127.0.0.1", port: 0))
/// while let connection = try await incoming.next() {
///     try await withStreams(connection) { input, output in
///         try await output.write(contentsOf: input)   // an echo server
///     }
/// }
/// ```
///
/// The listener accepts on the shared loop from the first `next()` on. Accepted connections wait
/// for `next()` in a queue of at most `maximumQueued`; a connection that finds the queue full is
/// closed at once (the peer sees the end), so a flood of connects holds bounded memory. `close()`
/// (or dropping the last reference) stops listening and closes what is still queued; `next()`
/// then returns nil. An accept failure other than a transient one is thrown by `next()`.
public final class IncomingConnections: Sendable {
    private struct State {
        var queue: [UncheckedBox<StreamPair>] = []
        var waiter: CheckedContinuation<UncheckedBox<StreamPair>?, any Error>?
        var failure: SluiceError?
        var started = false
        var closed = false
    }

    private let state = Mutex(State())
    private let listener: UncheckedBox<SocketListener>
    /// The address the listener is bound to (with the port the kernel picked, for port 0).
    public let address: SocketAddress
    /// Accepted connections waiting for `next()` before further ones are closed at once.
    public let maximumQueued: Int

    /// Takes over `listener` (which must not be accepting on a loop already).
    public init(_ listener: sending SocketListener, maximumQueued: Int = 16) {
        address = listener.address
        self.listener = UncheckedBox(listener)
        self.maximumQueued = Swift.max(1, maximumQueued)
    }

    deinit { shutDown() }

    /// The next connection, its streams not yet opened; nil once `close()` was called. Throws
    /// the listener's failure, or `CancellationError` if the task is cancelled while waiting
    /// (the listener keeps listening).
    public func next() async throws -> sending StreamPair? {
        try start()
        let box: UncheckedBox<StreamPair>? = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let outcome = state.withLock { state -> Result<UncheckedBox<StreamPair>?, any Error>? in
                    if !state.queue.isEmpty { return .success(state.queue.removeFirst()) }
                    if let failure = state.failure { return .failure(failure) }
                    if state.closed { return .success(nil) }
                    if state.waiter != nil {
                        return .failure(
                            SluiceError(
                                .invalidArgument, operation: "accept", subject: address.description,
                                detail: "next() called from two tasks at once"))
                    }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    state.waiter = continuation
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            let waiter = state.withLock { state in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume(throwing: CancellationError())
        }
        // Handed over whole: the two halves of one socket, used by nobody else.
        nonisolated(unsafe) let pair = box?.value
        return pair
    }

    /// Stops listening; queued connections are closed, and `next()` returns nil. Idempotent.
    public func close() { shutDown() }

    /// Whether a `next()` is waiting for a connection now (for tests that act on a waiting call).
    var hasWaiter: Bool { state.withLock { $0.waiter != nil } }

    /// How many accepted connections wait in the queue for a `next()` (for tests that wait for
    /// the queue to fill).
    var queuedCount: Int { state.withLock { $0.queue.count } }

    /// The first call closes the listener, on the loop once it accepts there; later calls (a
    /// `close()` again, or the deinit after a `close()`) do nothing. A second close from another
    /// thread would race the loop's and close the descriptor twice.
    private func shutDown() {
        let taken = state.withLock {
            state -> ([UncheckedBox<StreamPair>], CheckedContinuation<UncheckedBox<StreamPair>?, any Error>?, Bool)? in
            guard !state.closed else { return nil }
            state.closed = true
            defer {
                state.queue = []
                state.waiter = nil
            }
            return (state.queue, state.waiter, state.started)
        }
        guard let (queued, waiter, started) = taken else { return }
        waiter?.resume(returning: nil)
        let listener = self.listener
        let closeAll: @Sendable () -> Void = {
            listener.value.close()
            for pair in queued { Self.discard(pair.value) }
        }
        if started, let loop = try? EventLoop.shared {
            loop.execute { closeAll() }
        } else {
            closeAll()
        }
    }

    private func start() throws {
        let first = state.withLock { state in
            defer { state.started = true }
            return !state.started && !state.closed
        }
        guard first else { return }
        let loop = try EventLoop.shared
        let listener = self.listener
        loop.execute { [self] in
            listener.value.errorHandler = { [weak self] error in self?.failed(error) }
            do throws(SluiceError) {
                try listener.value.accept(on: loop) { [weak self] input, output, _ in
                    guard let self else {
                        Self.discard(StreamPair(input, output))
                        return
                    }
                    self.accepted(UncheckedBox(StreamPair(input, output)))
                }
            } catch {
                failed(error)
            }
        }
    }

    /// On the loop: a connection came in.
    private func accepted(_ pair: UncheckedBox<StreamPair>) {
        let (waiter, keep) = state.withLock {
            state -> (CheckedContinuation<UncheckedBox<StreamPair>?, any Error>?, Bool) in
            if state.closed { return (nil, false) }
            if let waiter = state.waiter {
                state.waiter = nil
                return (waiter, true)
            }
            guard state.queue.count < maximumQueued else { return (nil, false) }
            state.queue.append(pair)
            return (nil, true)
        }
        if let waiter {
            waiter.resume(returning: pair)
        } else if !keep {
            Self.discard(pair.value)
        }
    }

    /// Closes a connection nobody will serve. Its streams were never opened, and a socket is
    /// closed when its last opened stream closes: open both, then close both.
    private static func discard(_ pair: StreamPair) {
        pair.input.open()
        pair.output.open()
        pair.output.close()
        pair.input.close()
    }

    /// On the loop: the listener failed.
    private func failed(_ error: SluiceError) {
        let waiter = state.withLock { state -> CheckedContinuation<UncheckedBox<StreamPair>?, any Error>? in
            state.failure = state.failure ?? error
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(throwing: error)
    }
}
