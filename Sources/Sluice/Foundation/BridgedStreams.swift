import Foundation

/// A sluice `ReadStream` seen as a Foundation `InputStream`, for code that speaks Foundation:
/// `URLRequest.httpBodyStream`, parsers, archivers.
///
/// It keeps the blocking contract such code relies on (URLSession's body reader among them):
/// after `open()`, `hasBytesAvailable` is true until the end has been read; `read` blocks until
/// at least one byte is ready, returns 0 only at the end, and -1 on failure with `streamError`
/// set (a `SluiceError` naming the path or address). Reading before `open()` or after `close()`
/// returns -1 with an error; it never traps.
///
/// The wrapped stream is used in polling mode on whichever thread calls `read`: it must not be
/// scheduled on a loop (opening then fails with `.invalidArgument`), and nothing else should
/// use it while the bridge does. One thread at a time, as with any Foundation stream.
public final class BridgedInputStream: InputStream {
    /// The sluice stream underneath.
    public let stream: ReadStream
    private var failure: SluiceError?

    /// Wraps `stream`, which should not be open yet (an open one is read from where it is).
    public init(_ stream: ReadStream) {
        self.stream = stream
        super.init(data: Data())
    }

    /// Opens the sluice stream (in polling mode); a failure shows in `streamStatus`.
    public override func open() { failure = bridgeOpen(stream, as: "InputStream") }

    /// Closes the sluice stream (a socket's write side: a half-close).
    public override func close() { stream.close() }

    /// Reads up to `len` bytes: the count, 0 only at the end, -1 on failure (see `streamError`).
    public override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength len: Int) -> Int {
        if let refusal = bridgeRefusal(stream, failure, "read") {
            failure = refusal
            return -1
        }
        guard len > 0 else { return 0 }
        return stream.read(buffer, maxLength: len)
    }

    /// Foundation's `getBuffer`: not offered (the caller falls back to `read`), as most
    /// `InputStream` kinds do.
    public override func getBuffer(
        _ buffer: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>, length len: UnsafeMutablePointer<Int>
    ) -> Bool { false }

    /// True from `open()` until the end has been read (a read may still block until bytes
    /// arrive, which is what URLSession's reader expects of a body stream).
    public override var hasBytesAvailable: Bool {
        switch stream.streamStatus {
        case .open, .reading: return failure == nil
        case .notOpen, .opening, .writing, .atEnd, .closed, .error: return false
        }
    }

    /// The sluice stream's status in Foundation's terms (`.error` after a bridge failure).
    public override var streamStatus: Stream.Status {
        failure != nil ? .error : Stream.Status(stream.streamStatus)
    }

    /// The failure, as a `SluiceError`.
    public override var streamError: (any Error)? { failure ?? stream.streamError }

    /// `fileCurrentOffsetKey`, as an `NSNumber`.
    public override func property(forKey key: Stream.PropertyKey) -> AnyObject? {
        key == .fileCurrentOffsetKey ? stream.fileCurrentOffset.map { NSNumber(value: $0) } : nil
    }

    /// No property can be set through the bridge: false.
    public override func setProperty(_ property: AnyObject?, forKey key: Stream.PropertyKey) -> Bool { false }
}

/// A sluice `WriteStream` seen as a Foundation `OutputStream`.
///
/// `write` blocks until at least one byte is accepted and returns the count (possibly fewer
/// than given), 0 when a fixed-capacity stream is full, -1 on failure with `streamError` set.
/// Writing before `open()` or after `close()` returns -1 with an error. Polling mode, one thread
/// at a time, the stream not scheduled on a loop — as `BridgedInputStream`.
public final class BridgedOutputStream: OutputStream {
    /// The sluice stream underneath.
    public let stream: WriteStream
    private var failure: SluiceError?

    /// Wraps `stream`, which should not be open yet.
    public init(_ stream: WriteStream) {
        self.stream = stream
        super.init(toMemory: ())
    }

    /// A bridge over a growable memory stream (`WriteStream.toMemory()`), as
    /// `OutputStream(toMemory:)`; its bytes are in `dataWrittenToMemoryStreamKey`.
    public required convenience init(toMemory: ()) {
        self.init(WriteStream.toMemory())
    }

    /// Opens the sluice stream (in polling mode); a failure shows in `streamStatus`.
    public override func open() { failure = bridgeOpen(stream, as: "OutputStream") }

    /// Closes the sluice stream (a socket's write side: a half-close).
    public override func close() { stream.close() }

    /// Writes up to `len` bytes: the count accepted, 0 when a fixed-capacity stream is full,
    /// -1 on failure (see `streamError`).
    public override func write(_ buffer: UnsafePointer<UInt8>, maxLength len: Int) -> Int {
        if let refusal = bridgeRefusal(stream, failure, "write") {
            failure = refusal
            return -1
        }
        guard len > 0 else { return 0 }
        return stream.write(buffer, maxLength: len)
    }

    /// True while a write would accept bytes without blocking.
    public override var hasSpaceAvailable: Bool { failure == nil && stream.hasSpaceAvailable }

    /// The sluice stream's status in Foundation's terms (`.error` after a bridge failure).
    public override var streamStatus: Stream.Status {
        failure != nil ? .error : Stream.Status(stream.streamStatus)
    }

    /// The failure, as a `SluiceError`.
    public override var streamError: (any Error)? { failure ?? stream.streamError }

    /// `dataWrittenToMemoryStreamKey` (a memory stream's `Data`) and `fileCurrentOffsetKey`.
    public override func property(forKey key: Stream.PropertyKey) -> AnyObject? {
        switch key {
        case .dataWrittenToMemoryStreamKey: return stream.dataWrittenToMemory.map { NSData(data: $0) }
        case .fileCurrentOffsetKey: return stream.fileCurrentOffset.map { NSNumber(value: $0) }
        default: return nil
        }
    }

    /// No property can be set through the bridge: false.
    public override func setProperty(_ property: AnyObject?, forKey key: Stream.PropertyKey) -> Bool { false }
}

/// Opens a bridged stream: nil, or the error of a stream scheduled on a loop (which must stay
/// on its loop's thread, while a Foundation stream is read on whatever thread calls it).
private func bridgeOpen(_ stream: ByteStream, as kind: String) -> SluiceError? {
    guard stream.loop == nil else {
        return stream.error(
            .invalidArgument, operation: "open",
            detail: "a stream scheduled on a loop cannot be bridged to \(kind)")
    }
    stream.open()
    return nil
}

/// Why a read or write through a bridge must fail at once: an earlier bridge failure, or a
/// stream never opened. Nil when the call may go ahead.
private func bridgeRefusal(_ stream: ByteStream, _ failure: SluiceError?, _ operation: String) -> SluiceError? {
    if let failure { return failure }
    if stream.streamStatus == .notOpen { return stream.error(.notOpen, operation: operation) }
    return nil
}

extension Stream.Status {
    /// Foundation's status for a sluice status.
    init(_ status: StreamStatus) {
        switch status {
        case .notOpen: self = .notOpen
        case .opening: self = .opening
        case .open: self = .open
        case .reading: self = .reading
        case .writing: self = .writing
        case .atEnd: self = .atEnd
        case .closed: self = .closed
        case .error: self = .error
        }
    }
}

extension ReadStream {
    /// This stream as a Foundation `InputStream` (see `BridgedInputStream`).
    public func asInputStream() -> InputStream { BridgedInputStream(self) }
}

extension WriteStream {
    /// This stream as a Foundation `OutputStream` (see `BridgedOutputStream`).
    public func asOutputStream() -> OutputStream { BridgedOutputStream(self) }
}
