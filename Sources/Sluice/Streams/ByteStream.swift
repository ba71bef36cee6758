#if canImport(Glibc)
    import Glibc
#endif

/// Events a stream reports to its delegate, as NSStream's `NSStreamEvent`.
public struct StreamEvent: OptionSet, Hashable, Sendable, CustomStringConvertible {
    /// The events as bits.
    public let rawValue: UInt8
    /// The events whose bits are set in `rawValue`.
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// The stream is open (a socket: connected).
    public static let openCompleted = StreamEvent(rawValue: 1 << 0)
    /// A read will not block. Delivered once per readiness: not again until the delegate reads.
    public static let hasBytesAvailable = StreamEvent(rawValue: 1 << 1)
    /// A write will not block. Delivered once per readiness: not again until the delegate writes.
    public static let hasSpaceAvailable = StreamEvent(rawValue: 1 << 2)
    /// The stream failed; `streamError` says why. At most once, and then no more events.
    public static let errorOccurred = StreamEvent(rawValue: 1 << 3)
    /// The last byte has been read (a fixed-capacity memory writer: it is full).
    public static let endEncountered = StreamEvent(rawValue: 1 << 4)

    /// The events' names joined with `|`, e.g. `openCompleted|hasBytesAvailable`.
    public var description: String {
        var names: [String] = []
        if contains(.openCompleted) { names.append("openCompleted") }
        if contains(.hasBytesAvailable) { names.append("hasBytesAvailable") }
        if contains(.hasSpaceAvailable) { names.append("hasSpaceAvailable") }
        if contains(.errorOccurred) { names.append("errorOccurred") }
        if contains(.endEncountered) { names.append("endEncountered") }
        return names.joined(separator: "|")
    }
}

/// Where a stream is in its life, as NSStream's `NSStreamStatus`.
public enum StreamStatus: Hashable, Sendable {
    /// Created, not opened yet.
    case notOpen
    /// `open()` was called and completes later (a socket connecting).
    case opening
    /// Open: reads or writes may be made.
    case open
    /// Inside a read (seen only by code the read calls).
    case reading
    /// Inside a write (seen only by code the write calls).
    case writing
    /// The end was read, or a fixed-capacity stream is full.
    case atEnd
    /// Closed by `close()`.
    case closed
    /// Failed; `streamError` says why.
    case error
}

/// Receives a stream's events, as NSStream's `NSStreamDelegate`.
public protocol ByteStreamDelegate: AnyObject {
    /// `event` happened on `stream`; called on the thread of the loop the stream is scheduled on.
    func stream(_ stream: ByteStream, handle event: StreamEvent)
}

/// Keys for `property(forKey:)`, as NSStream's property keys.
public struct StreamPropertyKey: RawRepresentable, Hashable, Sendable {
    /// The key's name.
    public let rawValue: String
    /// A key named `rawValue`.
    public init(rawValue: String) { self.rawValue = rawValue }

    /// A memory write stream's contents, as `Data`.
    public static let dataWrittenToMemory = StreamPropertyKey(rawValue: "dataWrittenToMemory")
    /// A file stream's offset, as `UInt64`; settable on a read stream before it is opened.
    public static let fileCurrentOffset = StreamPropertyKey(rawValue: "fileCurrentOffset")
    /// The descriptor under a stream, as `Int32`, where it has one.
    public static let fileDescriptor = StreamPropertyKey(rawValue: "fileDescriptor")
}

/// What read and write streams share: the delegate, status, error, scheduling on a loop, and
/// the event machinery that delivers each readiness event once per readiness.
///
/// Streams are used on one thread: the thread of the loop they are scheduled on, or any one
/// thread in polling mode.
public class ByteStream: ReadyClient {
    /// The delegate receives events while the stream is scheduled on a loop. Held weakly, as
    /// NSStream holds its delegate.
    ///
    /// - Important: Keep a strong reference to the delegate for as long as the stream runs.
    ///   `stream.delegate = Printer()` frees the new object at once: the stream's events then go
    ///   nowhere, nothing reads or closes it, and `loop.run()` never returns. Debug builds say so
    ///   on standard error at the first event that finds the delegate gone.
    public var delegate: (any ByteStreamDelegate)? {
        get { machine.pointee.delegate }
        set {
            machine.pointee.delegate = newValue
            machine.pointee.delegateWasSet = newValue != nil
        }
    }
    /// The closure alternative to a delegate; called after the delegate, if both are set.
    public var eventHandler: ((ByteStream, StreamEvent) -> Void)? {
        get { machine.pointee.eventHandler }
        set { machine.pointee.eventHandler = newValue }
    }

    /// Where the stream is in its life, as NSStream's `streamStatus`.
    public internal(set) var streamStatus: StreamStatus {
        get { machine.pointee.status }
        set { machine.pointee.status = newValue }
    }
    /// Why the last operation failed (set with status `.error`, or by misuse such as reading
    /// a closed stream, which leaves the status as it was).
    public internal(set) var streamError: SluiceError? {
        didSet {
            // A file stream's errors name its path, which messages quote however it is spelled.
            if nameIsPath, streamError?.subject == name, streamError?.subjectIsPath == false {
                streamError?.subjectIsPath = true
            }
        }
    }

    /// The loop the stream is scheduled on, if any.
    public private(set) var loop: EventLoop? {
        get { machine.pointee.loop }
        set { machine.pointee.loop = newValue }
    }

    /// The event machinery's state, at a stable address: touched on every event, and reached
    /// through a pointer it needs no dynamic exclusivity checks.
    struct Machine {
        var status: StreamStatus = .notOpen
        var isQueued = false
        /// A readiness event may be delivered (re-armed by each read or write).
        var armed = true
        /// Non-readiness events waiting for the next turn of the loop.
        var pendingEvents: StreamEvent = []
        var errorDelivered = false
        var holdsSource = false
        weak var delegate: (any ByteStreamDelegate)?
        /// A delegate was assigned (and not cleared): finding it gone is the weak-delegate trap.
        var delegateWasSet = false
        var eventHandler: ((ByteStream, StreamEvent) -> Void)?
        var loop: EventLoop?
        /// Readiness comes from the kernel (epoll) rather than the loop's ready queue.
        var kernelWatched = false
    }
    let machine: UnsafeMutablePointer<Machine> = {
        let pointer = UnsafeMutablePointer<Machine>.allocate(capacity: 1)
        pointer.initialize(to: Machine())
        return pointer
    }()

    var isQueued: Bool {
        get { machine.pointee.isQueued }
        set { machine.pointee.isQueued = newValue }
    }
    var armed: Bool {
        get { machine.pointee.armed }
        set { machine.pointee.armed = newValue }
    }
    var pendingEvents: StreamEvent {
        _read { yield machine.pointee.pendingEvents }
        _modify { yield &machine.pointee.pendingEvents }
    }
    private var errorDelivered: Bool {
        get { machine.pointee.errorDelivered }
        set { machine.pointee.errorDelivered = newValue }
    }
    private var holdsSource: Bool {
        get { machine.pointee.holdsSource }
        set { machine.pointee.holdsSource = newValue }
    }

    /// What the stream is, for messages: a path, an address, `fd 0`, `memory`.
    public let name: String
    /// The name is a file's path: errors about the stream quote it (`open "in": …`).
    public let nameIsPath: Bool

    /// What this stream's family shares between its halves (see `StreamCore`): the hooks
    /// below forward to it. nil for kinds that override the hooks themselves.
    var streamCore: (any StreamCore)?
    /// Which half this stream is, for its core: a reader unless it is a `WriteStream`.
    var side: StreamSide { .reader }

    init(name: String, nameIsPath: Bool = false, core: (any StreamCore)? = nil) {
        self.name = name
        self.nameIsPath = nameIsPath
        streamCore = core
    }

    /// An error about this stream, for its kinds and for code that reports on its behalf (a
    /// bridge, a custom driver): its name is the subject, quoted in the message if it is a path.
    public func error(_ code: SluiceError.Code, operation: String, detail: String? = nil) -> SluiceError {
        var error = SluiceError(code, operation: operation, subject: name, detail: detail)
        if nameIsPath { error.subjectIsPath = true }
        return error
    }

    /// A stream dropped without `close()` is closed here, as NSStream closes on dealloc: its
    /// descriptor is closed (or its direction shut down), it stops being watched, and it no
    /// longer keeps its loop's `run()` going. No event is delivered. Like every other use, the
    /// last reference goes on the stream's own thread (its loop's). (The kinds' stored
    /// properties are still alive here: Swift destroys them after every `deinit` body has run.)
    deinit {
        if streamStatus != .closed { close() }
        machine.deinitialize(count: 1)
        machine.deallocate()
    }

    // MARK: Life cycle

    /// Schedules the stream on `loop`: its events are delivered there. Before or after `open()`.
    public func schedule(on loop: EventLoop) {
        guard self.loop == nil else {
            precondition(self.loop === loop, "\(name): scheduled on two loops")
            return
        }
        self.loop = loop
        updateSourceHold()
        if isOpenish { attach(to: loop) }
        if !pendingEvents.isEmpty || (isOpenish && armed) { signal() }
    }

    /// Removes the stream from `loop`: no more events; it keeps working in polling mode.
    public func remove(from loop: EventLoop) {
        defer { streamCore?.left(self, loop: loop) }
        guard self.loop === loop else { return }
        detach(from: loop)
        self.loop = nil
        updateSourceHold()
    }

    /// Opens the stream. Failure is reported through `streamStatus == .error`, `streamError`
    /// and, on a loop, an `errorOccurred` event.
    public func open() {
        guard streamStatus == .notOpen else { return }
        streamStatus = .opening
        do {
            let ready = try openPrimitive()
            if let loop { attach(to: loop) }
            if ready { didOpen() }
        } catch {
            fail(error)
        }
        updateSourceHold()
    }

    /// Closes the stream. Idempotent; no events are delivered after it.
    public func close() {
        loop?.preconditionInLoop("\(name): close")
        guard streamStatus != .closed else { return }
        let wasOpen = streamStatus != .notOpen
        if let loop { detach(from: loop) }
        streamStatus = .closed
        pendingEvents = []
        if wasOpen { closePrimitive() }
        updateSourceHold()
    }

    /// A stream property; see `StreamPropertyKey`.
    public func property(forKey key: StreamPropertyKey) -> Any? { streamCore?.property(key, of: self) }

    /// Sets a property; returns false if the stream does not support it (now).
    @discardableResult
    public func setProperty(_ value: Any?, forKey key: StreamPropertyKey) -> Bool {
        streamCore?.setProperty(value, key) ?? false
    }

    // MARK: For kinds of stream

    var isOpenish: Bool {
        switch streamStatus {
        case .opening, .open, .reading, .writing, .atEnd: return true
        case .notOpen, .closed, .error: return false
        }
    }

    /// Called by a kind whose open completes later (a connecting socket).
    func didOpen() {
        guard streamStatus == .opening else { return }
        streamStatus = .open
        pendingEvents.insert(.openCompleted)
        signal()
        interestChanged()
    }

    /// Puts the stream in the error state and queues `errorOccurred` (once).
    func fail(_ error: any Error) {
        guard streamStatus != .closed, streamStatus != .error else { return }
        let e =
            (error as? SluiceError)
            ?? SluiceError(.system(.ioError), operation: "stream", subject: name, detail: "\(error)")
        streamError = e
        streamStatus = .error
        if let loop { detach(from: loop) }
        pendingEvents = [.errorOccurred]
        signal()
        updateSourceHold()
    }

    /// Records a misuse (read on a closed stream, …): the error is set, the status kept.
    func misuse(_ code: SluiceError.Code, _ operation: String) -> Int {
        streamError = SluiceError(code, operation: operation, subject: name)
        return -1
    }

    /// Reports end of stream: status `.atEnd` and one `endEncountered`.
    func reachedEnd() {
        guard isOpenish, streamStatus != .atEnd else { return }
        streamStatus = .atEnd
        pendingEvents.insert(.endEncountered)
        signal()
        updateSourceHold()
    }

    /// The delegate consumed the last readiness event (read or wrote): arm for the next one.
    @inline(__always)
    func rearm() {
        if armed { return }
        armed = true
        interestChanged()
    }

    /// Asks the loop to serve this stream at its next turn.
    @inline(__always)
    func signal() {
        loop?.enqueue(self)
    }

    /// The readiness event of this kind: `hasBytesAvailable` or `hasSpaceAvailable`.
    var readinessEvent: StreamEvent { [] }

    /// Called by the kernel-watching channel when the fd is ready for this stream's direction.
    /// Returns whether the stream still wants to hear about readiness.
    func kernelReady() -> Bool {
        guard armed, loop != nil else { return false }
        switch streamStatus {
        case .open, .reading, .writing: break
        default: return false
        }
        armed = false
        deliver(readinessEvent)
        return armed
    }

    func serviceReady() {
        guard loop != nil else { return }
        if streamStatus == .error {
            if !errorDelivered && pendingEvents.contains(.errorOccurred) {
                errorDelivered = true
                pendingEvents = []
                deliver(.errorOccurred)
                updateSourceHold()
            }
            return
        }
        if pendingEvents.contains(.openCompleted) {
            pendingEvents.remove(.openCompleted)
            deliver(.openCompleted)
            guard loop != nil else { return }
        }
        if armed, servedByReadyQueue, streamStatus == .open || streamStatus == .atEnd {
            if isAtEndWithoutReading {
                reachedEnd()
            } else if streamStatus == .open && isReadyWithoutKernel {
                armed = false
                deliver(readinessEvent)
                guard loop != nil else { return }
            }
        }
        if pendingEvents.contains(.endEncountered) && streamStatus == .atEnd {
            pendingEvents.remove(.endEncountered)
            deliver(.endEncountered)
            updateSourceHold()
        }
    }

    @inline(__always)
    private func deliver(_ event: StreamEvent) {
        if let delegate = machine.pointee.delegate {
            delegate.stream(self, handle: event)
        } else if machine.pointee.delegateWasSet {
            delegateWasFreed(event)
        }
        machine.pointee.eventHandler?(self, event)
    }

    /// The delegate assigned to the stream has been freed (a stream holds it weakly): debug
    /// builds say so once, since the stream will otherwise sit open and keep `run()` going.
    private func delegateWasFreed(_ event: StreamEvent) {
        machine.pointee.delegateWasSet = false
        #if DEBUG
            guard machine.pointee.eventHandler == nil else { return }
            let message =
                "sluice: warning: the delegate of stream \(nameIsPath ? "\"\(name)\"" : name) was freed before "
                + "its \(event) event; a stream holds its delegate weakly (as NSStream does): keep a "
                + "strong reference to it while the stream runs\n"
            var text = message
            text.withUTF8 { _ = Glibc.write(2, $0.baseAddress, $0.count) }
        #endif
    }

    /// A scheduled stream keeps its loop running while it can still deliver events.
    private func updateSourceHold() {
        let wants: Bool
        if loop == nil {
            wants = false
        } else {
            switch streamStatus {
            case .opening, .open, .reading, .writing: wants = true
            case .atEnd: wants = pendingEvents.contains(.endEncountered)
            case .error: wants = !errorDelivered
            case .notOpen, .closed: wants = false
            }
        }
        if wants != holdsSource, let loop = loop ?? (holdsSource ? heldLoop : nil) {
            if wants { loop.retainSource() } else { loop.releaseSource() }
            holdsSource = wants
            heldLoop = wants ? loop : nil
        }
    }
    private var heldLoop: EventLoop?

    // MARK: Reading and writing

    /// One read or write that does not block (`tryRead`, `tryWrite`): refused unless the
    /// stream is open, then `primitive`, with the status `busy` while it runs; after it, the
    /// end (0 bytes, or a fixed-capacity stream's last write), a re-arm, or the failure.
    @inline(__always)
    final func attempt(
        _ operation: String, bytes: Int, during busy: StreamStatus,
        _ primitive: () throws(SluiceError) -> IOResult<Int>
    ) -> IOResult<Int> {
        loop?.preconditionInLoop("\(name): \(operation)")
        switch streamStatus {
        case .open: break
        case .atEnd: return .processed(0)
        case .notOpen, .opening: return .processed(misuse(.notOpen, operation))
        case .closed: return .processed(misuse(.closed, operation))
        case .error: return .processed(-1)
        case .reading, .writing: return .processed(misuse(.invalidArgument, operation))
        }
        if bytes == 0 { return .processed(0) }
        streamStatus = busy
        do {
            let result = try primitive()
            if streamStatus == busy { streamStatus = .open }
            switch result {
            case .processed(0):
                reachedEnd()
                return .processed(0)
            case .processed(let n):
                if isFullForever { reachedEnd() } else { rearm() }
                return .processed(n)
            case .wouldBlock:
                rearm()
                return .wouldBlock
            }
        } catch {
            if streamStatus == busy { streamStatus = .open }
            fail(error)
            return .processed(-1)
        }
    }

    /// A read or write in polling mode: `attempt` again after each wait until it is processed.
    final func blocking(
        _ attempt: () -> IOResult<Int>, waitingWith wait: () throws(SluiceError) -> Void
    ) -> Int {
        while true {
            switch attempt() {
            case .processed(let n):
                return n
            case .wouldBlock:
                do {
                    try wait()
                } catch {
                    fail(error)
                    return -1
                }
            }
        }
    }

    // MARK: Hooks for kinds (overridden)

    /// Opens the underlying resource. Returns true when open now, false when opening
    /// (the kind calls `didOpen()` later).
    func openPrimitive() throws(SluiceError) -> Bool { try streamCore?.open(self, side: side) ?? true }
    func closePrimitive() { streamCore?.streamClosed(self, side: side) }
    /// Starts delivering readiness through `loop` (watch the fd, or use the ready queue).
    func attach(to loop: EventLoop) {
        streamCore?.attach(self, side: side, to: loop)
        signal()
    }
    func detach(from loop: EventLoop) { streamCore?.detach(self, side: side) }
    /// The armed state changed: watch (or stop watching) the kernel, or queue a ready-queue turn.
    func interestChanged() {
        if let streamCore {
            streamCore.interestChanged(self)
        } else if armed {
            signal()
        }
    }
    /// True when readiness comes from the ready queue rather than the kernel.
    final var servedByReadyQueue: Bool {
        get { !machine.pointee.kernelWatched }
        set { machine.pointee.kernelWatched = !newValue }
    }
    /// For ready-queue kinds: a read/write would not block now.
    var isReadyWithoutKernel: Bool { true }
    /// For ready-queue read kinds: the end is known without a read (memory, bound pair).
    var isAtEndWithoutReading: Bool { false }
    /// For write kinds: a fixed-capacity stream that is full, whose last write ends it.
    var isFullForever: Bool { false }
    /// A plain descriptor underneath (a file, pipe or socket: not memory, TLS or a custom
    /// stream), whose bytes a pipeline may move inside the kernel instead of through `read`
    /// and `write` (see `CopyPath`).
    var offersKernelCopy: Bool { false }
    /// That descriptor, while the stream is open.
    var kernelCopyDescriptor: Int32? { streamCore?.kernelCopyDescriptor }
}
