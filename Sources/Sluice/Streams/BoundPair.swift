import FoundationEssentials

/// The buffer between the two ends of a bound pair. Each end may live on its own thread
/// (scheduled on its own loop, or polling): the state is guarded by a condition lock, and an
/// end on another loop is woken through that loop's `execute`.
final class BoundBuffer: @unchecked Sendable {
    let condition = ConditionLock()
    let capacity: Int
    private let storage: UnsafeMutableRawBufferPointer
    private var head = 0
    private(set) var count = 0
    var writerClosed = false
    var readerClosed = false
    weak var reader: BoundReadStream?
    weak var writer: BoundWriteStream?
    var readerLoop: EventLoop?
    var writerLoop: EventLoop?

    init(capacity: Int) {
        self.capacity = capacity
        storage = .allocate(byteCount: capacity, alignment: 16)
    }

    deinit { storage.deallocate() }

    /// Copies up to `buffer.count` bytes out. Call with the lock held.
    func take(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let n = min(buffer.count, count)
        var copied = 0
        while copied < n {
            let run = min(n - copied, capacity - head)
            (buffer.baseAddress! + copied).copyMemory(from: storage.baseAddress! + head, byteCount: run)
            head = (head + run) % capacity
            copied += run
        }
        count -= n
        if count == 0 { head = 0 }
        return n
    }

    /// Copies up to the free space in. Call with the lock held.
    func put(from buffer: UnsafeRawBufferPointer) -> Int {
        let n = min(buffer.count, capacity - count)
        var copied = 0
        while copied < n {
            let tail = (head + count) % capacity
            let run = min(n - copied, capacity - tail)
            (storage.baseAddress! + tail).copyMemory(from: buffer.baseAddress! + copied, byteCount: run)
            count += run
            copied += run
        }
        return n
    }

    /// Runs `move` (a `take` or a `put`) for `stream`, the `side` end, under the lock; wakes the
    /// other end when it moved bytes. Returns the count moved and whether the other end had
    /// closed, as seen under the same lock.
    func transfer(
        for stream: ByteStream, side: StreamSide, _ move: (BoundBuffer) -> Int
    ) -> (count: Int, peerClosed: Bool) {
        condition.lock()
        let n = move(self)
        let peerClosed = side == .reader ? writerClosed : readerClosed
        let (peer, peerLoop) = self.peer(of: side)
        if n > 0 { condition.broadcast() }
        condition.unlock()
        if n > 0 { Self.wake(peer, peerLoop: peerLoop, from: stream.loop) }
        return (n, peerClosed)
    }

    /// The other end and its loop. Call with the lock held.
    private func peer(of side: StreamSide) -> (ByteStream?, EventLoop?) {
        side == .reader ? (writer, writerLoop) : (reader, readerLoop)
    }

    /// Wakes the other end: directly on the same loop, through `execute` on another loop, and
    /// through the condition for an end blocked in polling mode.
    static func wake(_ peer: ByteStream?, peerLoop: EventLoop?, from myLoop: EventLoop?) {
        guard let peer, let peerLoop else { return }
        if peerLoop === myLoop {
            peer.signal()
        } else {
            let box = UncheckedBox(peer)
            peerLoop.execute { box.value.signal() }
        }
    }
}

/// Carries a loop-confined object to its own loop's thread through `execute`.
package struct UncheckedBox<T>: @unchecked Sendable {
    package let value: T
    package init(_ value: T) { self.value = value }
}

/// The buffer is the core of its two ends: each side's loop, closing, waiting and readiness.
extension BoundBuffer: StreamCore {
    func attach(_ stream: ByteStream, side: StreamSide, to loop: EventLoop) { setLoop(loop, of: side) }
    func detach(_ stream: ByteStream, side: StreamSide) { setLoop(nil, of: side) }

    private func setLoop(_ loop: EventLoop?, of side: StreamSide) {
        condition.lock()
        switch side {
        case .reader: readerLoop = loop
        case .writer: writerLoop = loop
        }
        condition.unlock()
    }

    /// An end closed: the other is woken, to read the end (or to fail its write).
    func streamClosed(_ stream: ByteStream, side: StreamSide) {
        condition.lock()
        switch side {
        case .reader: readerClosed = true
        case .writer: writerClosed = true
        }
        let (peer, peerLoop) = self.peer(of: side)
        condition.broadcast()
        condition.unlock()
        Self.wake(peer, peerLoop: peerLoop, from: stream.loop)
    }

    func waitUntilReady(_ stream: ByteStream, side: StreamSide) throws(SluiceError) {
        condition.lock()
        while !isReadyLocked(side) { condition.wait() }
        condition.unlock()
    }

    func isReady(_ stream: ByteStream, side: StreamSide) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        return isReadyLocked(side)
    }

    /// Bytes to read (or the end), or room to write (or no reader left). Call with the lock held.
    private func isReadyLocked(_ side: StreamSide) -> Bool {
        switch side {
        case .reader: return count > 0 || writerClosed
        case .writer: return count < capacity || readerClosed
        }
    }
}

/// The read end of a bound pair. The rest is the buffer's (its `StreamCore`).
final class BoundReadStream: ReadStream {
    let shared: BoundBuffer

    init(shared: BoundBuffer) {
        self.shared = shared
        super.init(name: "bound pair", core: shared)
    }

    override func readPrimitive(_ buffer: UnsafeMutableRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        let (n, writerClosed) = shared.transfer(for: self, side: .reader) { $0.take(into: buffer) }
        if n > 0 { return .processed(n) }
        return writerClosed ? .processed(0) : .wouldBlock
    }

    override var isReadyWithoutKernel: Bool { bytesAvailablePrimitive }
    override var isAtEndWithoutReading: Bool {
        shared.condition.lock()
        defer { shared.condition.unlock() }
        return shared.count == 0 && shared.writerClosed
    }
}

/// The write end of a bound pair: accepts bytes while the buffer has room. The rest is the
/// buffer's (its `StreamCore`).
final class BoundWriteStream: WriteStream {
    let shared: BoundBuffer

    init(shared: BoundBuffer) {
        self.shared = shared
        super.init(name: "bound pair", core: shared)
    }

    override func writePrimitive(_ buffer: UnsafeRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        let (n, readerClosed) = shared.transfer(for: self, side: .writer) { $0.readerClosed ? 0 : $0.put(from: buffer) }
        if readerClosed { throw SluiceError(.system(.brokenPipe), operation: "write", subject: name) }
        return n > 0 ? .processed(n) : .wouldBlock
    }

    override var isReadyWithoutKernel: Bool { spaceAvailablePrimitive }
}

/// A connected pair of streams, as `Stream.getBoundStreams(withBufferSize:)`: bytes written to
/// the write end come out of the read end. The buffer holds at most `bufferSize` bytes, so a
/// writer stops getting `hasSpaceAvailable` when it is full and gets it again after a read.
///
/// Each end may be used on a thread of its own (scheduled on its own loop, or in polling mode,
/// where `read` and `write` block). The ends come back as one tuple, which Swift 6 treats as one
/// region: to hand one end to another thread, declare the pair `nonisolated(unsafe)` and use
/// each end on one thread only — `nonisolated(unsafe) let (reader, writer) = boundPair(…)`,
/// then `Thread { writer.write(all: bytes); writer.close() }`.
public func boundPair(bufferSize: Int) -> (ReadStream, WriteStream) {
    precondition(bufferSize > 0, "bound pair buffer size must be positive")
    let shared = BoundBuffer(capacity: bufferSize)
    let reader = BoundReadStream(shared: shared)
    let writer = BoundWriteStream(shared: shared)
    shared.reader = reader
    shared.writer = writer
    return (reader, writer)
}
