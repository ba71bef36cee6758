import FoundationEssentials

/// Runs `body` (in the caller's isolation: it need not be `Sendable`) with the async faces of a read and a write stream — usually the two halves of a
/// connection — and closes both when `body` ends, however it ends (as swift-nio's
/// `executeThenClose`).
///
/// When `body` returns, the writer is finished (queued bytes written, then the sending side
/// closed) and the reader closed; when it throws (or its task is cancelled), both are closed
/// at once and the error is rethrown. `body` may call `finish()` itself to half-close early.
public func withStreams<Result>(
    reading input: sending ReadStream,
    writing output: sending WriteStream,
    chunkSize: Int = 65536,
    isolation: isolated (any Actor)? = #isolation,
    _ body: (ByteChunks, AsyncByteWriter) async throws -> Result
) async throws -> Result {
    try await runScoped(ByteChunks(input, chunkSize: chunkSize), AsyncByteWriter(output), body)
}

private func runScoped<Result>(
    _ chunks: ByteChunks,
    _ writer: AsyncByteWriter,
    isolation: isolated (any Actor)? = #isolation,
    _ body: (ByteChunks, AsyncByteWriter) async throws -> Result
) async throws -> Result {
    let result: Result
    do {
        // Both open now, the writer first, in one task on the loop: the two halves of a socket
        // must both be open before either closes, or closing the first (the reader meeting the
        // end, a finish() before the first read) would close the whole socket. Two tasks were
        // not enough: the loop could take the first alone, serve the writer's readiness before
        // the second, and find the body's finish() already requested (the socket closed with
        // the reader never opened). The writer holds its half open until finish(); the reader
        // may meet the end as soon as it starts.
        let writerStart = try writer.startJob()
        let readerStart: (EventLoop, @Sendable () -> Void)?
        do {
            readerStart = try chunks.core.startJob()
        } catch {
            // The writer's start still runs: it sees the abort below and closes its stream.
            if let (loop, job) = writerStart { loop.execute(job) }
            throw error
        }
        switch (writerStart, readerStart) {
        case (let (loop, first)?, let (other, second)?) where loop === other:
            loop.execute {
                first()
                second()
            }
        default:
            if let (loop, job) = writerStart { loop.execute(job) }
            if let (loop, job) = readerStart { loop.execute(job) }
        }
        result = try await body(chunks, writer)
    } catch {
        writer.abort()
        chunks.close()
        throw error
    }
    defer { chunks.close() }
    try await writer.finish()
    return result
}

/// The two streams of one connection (or any read and write stream that belong together),
/// handed over as one value: the halves of one socket are one region for the compiler, so they
/// cannot be sent one by one.
///
/// A socket is closed when its last *opened* stream closes: give both halves to
/// `withStreams(_:chunkSize:isolation:_:)`, which opens both before either can close, rather
/// than to a `ByteChunks` and an `AsyncByteWriter` started at different times.
public struct StreamPair {
    /// The read half.
    public var input: ReadStream
    /// The write half.
    public var output: WriteStream

    /// Pairs `input` and `output`.
    public init(_ input: ReadStream, _ output: WriteStream) {
        self.input = input
        self.output = output
    }
}

/// Runs `body` with the async faces of `streams`, closing both when `body` ends; as
/// `withStreams(reading:writing:chunkSize:isolation:_:)`, for the two halves of one connection
/// (`StreamPair(input, output)` from `accept` or `Socket.connect`).
public func withStreams<Result>(
    _ streams: sending StreamPair,
    chunkSize: Int = 65536,
    isolation: isolated (any Actor)? = #isolation,
    _ body: (ByteChunks, AsyncByteWriter) async throws -> Result
) async throws -> Result {
    // One region handed over whole; from here each half is used only on its loop.
    nonisolated(unsafe) let input = streams.input
    nonisolated(unsafe) let output = streams.output
    return try await runScoped(ByteChunks(input, chunkSize: chunkSize), AsyncByteWriter(output), body)
}

/// Connects to `host:port` on the shared loop and runs `body` with the connection's async
/// faces, closing the connection when `body` ends (see `withStreams(_:chunkSize:isolation:_:)`).
/// A failed connect is thrown by the first `next()` or `write`.
public func withConnection<Result>(
    host: String,
    port: UInt16,
    timeout: Duration? = nil,
    chunkSize: Int = 65536,
    isolation: isolated (any Actor)? = #isolation,
    _ body: (ByteChunks, AsyncByteWriter) async throws -> Result
) async throws -> Result {
    let (input, output) = Socket.connect(host: host, port: port, timeout: timeout)
    return try await withStreams(StreamPair(input, output), chunkSize: chunkSize, body)
}

extension ByteChunks {
    /// Stops reading and closes the stream now (what `withStreams` does when its body ends).
    /// Iteration afterwards ends at once (nil). Idempotent.
    public func close() { core.terminate(with: nil) }
}

extension AsyncByteWriter {
    /// Closes the stream now, dropping what is still queued: waiting writes throw
    /// `CancellationError`. Idempotent; does nothing after `finish()` completed.
    public func abort() { fail(CancellationError()) }
}
