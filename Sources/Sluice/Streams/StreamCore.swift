#if canImport(Glibc)
    import Glibc
#endif

/// Which half of a stream family a stream is.
enum StreamSide: Sendable {
    case reader
    case writer

    /// What `poll` waits for on this side's descriptor.
    var pollEvents: Int16 { Int16(self == .reader ? POLLIN : POLLOUT) }
}

/// What the read and write halves of a stream family share and forward to: a descriptor's
/// channel, a socket, a TLS connection, a bound pair's buffer.
///
/// A stream given a core (`ByteStream.streamCore`) forwards its life-cycle hooks to it —
/// opening, closing, joining and leaving a loop, a change of interest, waiting and readiness
/// in polling mode, the descriptor for kernel copies, properties — naming itself and its side.
/// The halves then write only what differs between reading and writing (`readPrimitive`,
/// `writePrimitive`, …), and a family forwards in this one way. The defaults are what a stream
/// with no core does.
protocol StreamCore: AnyObject {
    /// `openPrimitive`: true when open now, false while opening (the core calls `didOpen()`).
    func open(_ stream: ByteStream, side: StreamSide) throws(SluiceError) -> Bool
    /// `closePrimitive`: the stream closed (it names its side: a stream closing in its
    /// `deinit` can no longer be found through the core's weak references).
    func streamClosed(_ stream: ByteStream, side: StreamSide)
    /// The stream is scheduled on `loop` (it signals itself afterwards).
    func attach(_ stream: ByteStream, side: StreamSide, to loop: EventLoop)
    /// The stream is leaving its loop.
    func detach(_ stream: ByteStream, side: StreamSide)
    /// The stream has left `loop` (`remove(from:)`).
    func left(_ stream: ByteStream, loop: EventLoop)
    /// The stream's armed state changed.
    func interestChanged(_ stream: ByteStream)
    /// Polling mode, after `.wouldBlock`: waits until the stream's side can make progress.
    func waitUntilReady(_ stream: ByteStream, side: StreamSide) throws(SluiceError)
    /// Whether a read (a write) would return at once: `hasBytesAvailable`, `hasSpaceAvailable`.
    func isReady(_ stream: ByteStream, side: StreamSide) -> Bool
    /// The plain descriptor a pipeline may move bytes through inside the kernel, while open.
    var kernelCopyDescriptor: Int32? { get }
    /// `property(forKey:)` of `stream`.
    func property(_ key: StreamPropertyKey, of stream: ByteStream) -> Any?
    /// `setProperty(_:forKey:)`.
    func setProperty(_ value: Any?, _ key: StreamPropertyKey) -> Bool
}

extension StreamCore {
    func open(_ stream: ByteStream, side: StreamSide) throws(SluiceError) -> Bool { true }
    func left(_ stream: ByteStream, loop: EventLoop) {}
    func interestChanged(_ stream: ByteStream) {
        if stream.armed { stream.signal() }
    }
    var kernelCopyDescriptor: Int32? { nil }
    func property(_ key: StreamPropertyKey, of stream: ByteStream) -> Any? { nil }
    func setProperty(_ value: Any?, _ key: StreamPropertyKey) -> Bool { false }
}
