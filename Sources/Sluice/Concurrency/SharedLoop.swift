import FoundationEssentials
import Synchronization

extension EventLoop {
    /// The loop the async API runs streams and pipelines on when they are not scheduled on a
    /// loop of their own: one loop on one thread for the whole process, started on first use
    /// and never stopped, so `Pipeline.run()`, `chunks()` and `AsyncByteWriter` cost no thread
    /// per call. Throws only if the loop cannot be created (out of descriptors).
    public static var shared: EventLoop {
        get throws(SluiceError) { try SharedLoop.instance.get() }
    }
}

/// Creates the shared loop once and runs it on a thread of its own.
enum SharedLoop {
    static let instance: Result<EventLoop, SluiceError> = {
        let loop: EventLoop
        do {
            loop = try EventLoop()
        } catch let error as SluiceError {
            return .failure(error)
        } catch {
            return .failure(SluiceError(.system(.ioError), operation: "event loop", detail: "\(error)"))
        }
        // Held forever: `run()` returns only when nothing is left to serve.
        loop.retainSource()
        startThread(name: "sluice.loop") {
            while true { loop.run() }
        }
        return .success(loop)
    }()
}

/// The loop a stream's async face runs on: its own loop if it is scheduled on one, else the
/// shared loop.
func asyncLoop(for stream: ByteStream) throws(SluiceError) -> EventLoop {
    if let loop = stream.loop { return loop }
    return try EventLoop.shared
}

/// The loop side of an async face (`ByteChunks`, `AsyncByteWriter`): owns its stream on the
/// loop's thread, from `adopt()` to `shutdown()`.
class StreamPump {
    let loop: EventLoop
    private let base: ByteStream
    /// Set by `shutdown()`: the stream is closed and let go.
    private(set) var done = false

    init(stream: ByteStream, loop: EventLoop) {
        base = stream
        self.loop = loop
    }

    /// Takes the stream: events to `handle`, scheduled on the loop, opened if it is not yet.
    /// Returns its status; an open stream (read or written before, its last readiness event
    /// perhaps spent) is asked for its next readiness event.
    func adopt() -> StreamStatus {
        // The handler holds the pump (a delegate would be held weakly); `shutdown` breaks the cycle.
        base.eventHandler = { [self] _, event in handle(event) }
        base.schedule(on: loop)
        if base.streamStatus == .notOpen { base.open() }
        let status = base.streamStatus
        if base.isOpenish { base.rearm() }
        return status
    }

    /// An event of the stream (overridden).
    func handle(_ event: StreamEvent) {}

    /// Closes the stream and lets go of it (the pump's last act).
    func shutdown() {
        done = true
        base.eventHandler = nil
        base.close()
        base.remove(from: loop)
    }
}
