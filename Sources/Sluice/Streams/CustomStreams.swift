import FoundationEssentials
import Synchronization

/// The bytes behind a stream kind of your own: implement this and wrap it with
/// `ReadStream.custom(_:name:)`, and the result is a `ReadStream` like any other — delegate
/// events on a loop, polling mode, pipelines, `chunks()`, the Foundation bridges.
///
/// The stream calls these methods on the thread that uses it (its loop's thread when scheduled).
/// `read(into:)` must not block: return `.wouldBlock` when nothing is ready, and call
/// `readiness.signal()` (from any thread) once something is. Return `.processed(0)` at the end;
/// throw to fail the stream (its `streamError` is the error thrown).
public protocol ByteSource: AnyObject {
    /// Called once by `open()`, with the handle to signal readiness through. Throwing fails the
    /// open: the stream's status becomes `.error`.
    func open(readiness: StreamReadiness) throws(SluiceError)
    /// Copies up to `buffer.count` bytes into `buffer`: the count, `.processed(0)` at the end,
    /// or `.wouldBlock`.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws(SluiceError) -> IOResult<Int>
    /// True when `read(into:)` would not return `.wouldBlock`.
    var hasBytesAvailable: Bool { get }
    /// Called once by `close()` if the stream was opened.
    func close()
}

/// The other direction: the bytes' destination behind a write stream of your own, wrapped with
/// `WriteStream.custom(_:name:)`. Same rules as `ByteSource`: never block, return
/// `.wouldBlock` when full and signal `readiness` once there is space; `.processed(0)` means
/// full for good (the stream ends, as a fixed-capacity memory stream does).
public protocol ByteSink: AnyObject {
    /// Called once by `open()`; throwing fails the open.
    func open(readiness: StreamReadiness) throws(SluiceError)
    /// Takes up to `buffer.count` bytes from `buffer`: the count accepted, or `.wouldBlock`.
    func write(from buffer: UnsafeRawBufferPointer) throws(SluiceError) -> IOResult<Int>
    /// True when `write(from:)` would not return `.wouldBlock`.
    var hasSpaceAvailable: Bool { get }
    /// Called once by `close()` if the stream was opened.
    func close()
}

extension ByteSource {
    /// Nothing to do on open.
    public func open(readiness: StreamReadiness) throws(SluiceError) {}
    /// Always ready (a source that never returns `.wouldBlock`).
    public var hasBytesAvailable: Bool { true }
    /// Nothing to release.
    public func close() {}
}

extension ByteSink {
    /// Nothing to do on open.
    public func open(readiness: StreamReadiness) throws(SluiceError) {}
    /// Always ready (a sink that never returns `.wouldBlock`).
    public var hasSpaceAvailable: Bool { true }
    /// Nothing to release.
    public func close() {}
}

/// How a custom `ByteSource` or `ByteSink` says "ready again" after it returned `.wouldBlock`.
/// `signal()` may be called from any thread: it wakes a stream blocked in polling mode, and
/// queues a readiness turn for a stream scheduled on a loop.
public final class StreamReadiness: Sendable {
    private struct State {
        var signalled = false
        var loop: EventLoop?
        var stream: UncheckedBox<Weak>?
    }
    private final class Weak {
        weak var stream: ByteStream?
        init(_ stream: ByteStream) { self.stream = stream }
    }
    private let state = Mutex(State())
    private let condition = UncheckedBox(ConditionLock())

    init() {}

    /// Something is ready: a read (write) will make progress. Any thread.
    public func signal() {
        let target = state.withLock { state -> (EventLoop, UncheckedBox<Weak>)? in
            state.signalled = true
            guard let loop = state.loop, let stream = state.stream else { return nil }
            return (loop, stream)
        }
        condition.value.lock()
        condition.value.broadcast()
        condition.value.unlock()
        if let (loop, box) = target {
            loop.execute { box.value.stream?.signal() }
        }
    }

    /// Polling mode: blocks until `signal()` has been called since the last wait.
    func wait() {
        condition.value.lock()
        while !state.withLock({ state in
            defer { state.signalled = false }
            return state.signalled
        }) {
            condition.value.wait()
        }
        condition.value.unlock()
    }

    func attach(_ stream: ByteStream, to loop: EventLoop?) {
        let box = loop == nil ? nil : UncheckedBox(Weak(stream))
        state.withLock {
            $0.loop = loop
            $0.stream = box
        }
    }
}

/// The core of a custom stream: the user's source or sink behind it, and the readiness it
/// signals through.
final class CustomStreamCore: StreamCore {
    /// The user's object: a read stream's source, or a write stream's sink.
    enum End {
        case source(any ByteSource)
        case sink(any ByteSink)
    }
    let end: End
    let readiness = StreamReadiness()

    init(_ end: End) { self.end = end }

    func open(_ stream: ByteStream, side: StreamSide) throws(SluiceError) -> Bool {
        switch end {
        case .source(let source): try source.open(readiness: readiness)
        case .sink(let sink): try sink.open(readiness: readiness)
        }
        return true
    }

    func streamClosed(_ stream: ByteStream, side: StreamSide) {
        switch end {
        case .source(let source): source.close()
        case .sink(let sink): sink.close()
        }
    }

    func attach(_ stream: ByteStream, side: StreamSide, to loop: EventLoop) { readiness.attach(stream, to: loop) }
    func detach(_ stream: ByteStream, side: StreamSide) { readiness.attach(stream, to: nil) }
    func waitUntilReady(_ stream: ByteStream, side: StreamSide) throws(SluiceError) { readiness.wait() }

    func isReady(_ stream: ByteStream, side: StreamSide) -> Bool {
        switch end {
        case .source(let source): return source.hasBytesAvailable
        case .sink(let sink): return sink.hasSpaceAvailable
        }
    }
}

/// A read stream over a user's `ByteSource`, served from the loop's ready queue.
final class CustomReadStream: ReadStream {
    let source: any ByteSource

    init(source: any ByteSource, name: String) {
        self.source = source
        super.init(name: name, core: CustomStreamCore(.source(source)))
    }

    override func readPrimitive(_ buffer: UnsafeMutableRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        try source.read(into: buffer)
    }
    override var isReadyWithoutKernel: Bool { source.hasBytesAvailable }
}

/// A write stream over a user's `ByteSink`, served from the loop's ready queue.
final class CustomWriteStream: WriteStream {
    let sink: any ByteSink

    init(sink: any ByteSink, name: String) {
        self.sink = sink
        super.init(name: name, core: CustomStreamCore(.sink(sink)))
    }

    override func writePrimitive(_ buffer: UnsafeRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        try sink.write(from: buffer)
    }
    override var isReadyWithoutKernel: Bool { sink.hasSpaceAvailable }
}

extension ReadStream {
    /// A stream of a kind of your own: `source` supplies the bytes (see `ByteSource`); the
    /// stream supplies the event model. `name` appears in errors.
    public static func custom(_ source: any ByteSource, name: String) -> ReadStream {
        CustomReadStream(source: source, name: name)
    }
}

extension WriteStream {
    /// A stream of a kind of your own: `sink` takes the bytes (see `ByteSink`); the stream
    /// supplies the event model. `name` appears in errors.
    public static func custom(_ sink: any ByteSink, name: String) -> WriteStream {
        CustomWriteStream(sink: sink, name: name)
    }
}
