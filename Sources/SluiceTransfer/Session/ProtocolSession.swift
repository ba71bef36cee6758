import Sluice

/// What a `ProtocolSession` asks of the protocol machine it drives: the sender's and the
/// receiver's machines both take decoded messages and the connection's events, and answer
/// with actions for their session to perform.
protocol ProtocolMachine {
    associatedtype Action: Equatable
    /// The actions that open the conversation (the sender's HELLO; nothing for the receiver).
    func start() -> [Action]
    /// A decoded message (or a piece of DATA).
    mutating func received(_ item: FrameDecoder.Item) -> [Action]
    /// The decoder found bytes that break the protocol.
    mutating func violated(_ reason: String) -> [Action]
    /// The connection's side of the conversation ended or failed, or the user cancelled.
    mutating func connectionEnded(_ event: ConnectionEvent) -> [Action]
}

/// What happens to a connection outside the protocol, told to its machine.
enum ConnectionEvent: Equatable, Sendable {
    /// The peer closed its sending direction, and everything it sent was parsed.
    case peerClosed
    /// A stream failed (reset, refused, timed out).
    case failed(SluiceError)
    /// The user stopped the session.
    case cancelled
    /// The peer was silent for the session's idle timeout.
    case timedOut
}

extension SenderMachine: ProtocolMachine {
    mutating func connectionEnded(_ event: ConnectionEvent) -> [SenderAction] {
        switch event {
        case .peerClosed: return handle(.peerClosed)
        case .failed(let error): return handle(.connectionFailed(error))
        case .cancelled: return handle(.cancelled)
        case .timedOut:
            return handle(.connectionFailed(SluiceError(.timedOut, operation: "send", detail: "idle")))
        }
    }
}

extension ReceiverMachine: ProtocolMachine {
    mutating func connectionEnded(_ event: ConnectionEvent) -> [ReceiverAction] {
        switch event {
        case .peerClosed: return handle(.peerClosed)
        case .failed(let error): return handle(.connectionFailed(error))
        case .cancelled: return handle(.cancelled)
        case .timedOut: return handle(.timedOut)
        }
    }
}

/// What differs between the two ends of a `ProtocolSession`: the machine, what is done with
/// its actions (the sender reads files, the receiver stores them), and when it can take the
/// next message. Called on the session's loop only.
protocol ProtocolRole: AnyObject {
    associatedtype Machine: ProtocolMachine
    var machine: Machine { get set }
    /// Performs the machine's actions, in order.
    func perform(_ actions: [Machine.Action])
    /// Whether the next message may be taken now: there is room for its answers and for the
    /// work it starts. When this turns true again, the role calls `ProtocolSession.pump()`.
    var takesMessages: Bool { get }
    /// What to do with a decoded message: by default, hand it to the machine.
    func take(_ item: FrameDecoder.Item) -> Taken<Machine.Action>
    /// A piece of DATA the machine allowed (`Taken.deliver`): how many of its bytes were used.
    /// The rest is decoded again once the role calls `pump()`.
    func deliver(_ piece: UnsafeRawBufferPointer) -> Int
    /// After a message's actions were performed.
    func tookMessage()
    /// Everything buffered was parsed; more is needed.
    func caughtUp()
    /// The parse loop stopped (for any reason).
    func parsed()
    /// The connection's outbound buffer has room and its socket space: send more.
    func connectionHasRoom()
    /// The inbound buffer's size wanted now, or nil to leave it.
    var inboundCapacity: Int? { get }
    /// Whether the session waits for its own work (disk, workers) rather than for the peer:
    /// that time is not the peer's silence.
    var waitsOnItself: Bool { get }
}

/// How a role takes a decoded message.
enum Taken<Action> {
    /// Consumed: perform these.
    case perform([Action])
    /// Consumed: perform these, and parse no further (the session ended or turns the peer away).
    case stop([Action])
    /// DATA for the role's `deliver`.
    case deliver(UnsafeRawBufferPointer)
}

extension ProtocolRole {
    func take(_ item: FrameDecoder.Item) -> Taken<Machine.Action> { .perform(machine.received(item)) }
    func deliver(_ piece: UnsafeRawBufferPointer) -> Int { piece.count }
    var takesMessages: Bool { true }
    func tookMessage() {}
    func caughtUp() {}
    func parsed() {}
    var inboundCapacity: Int? { nil }
    var waitsOnItself: Bool { false }
}

/// One end of a transfer-protocol connection, whichever it is: owns the `WireConnection`
/// (buffers, backpressure, rate limit), the `FrameDecoder`, the loop that hands decoded
/// messages to the role's machine and performs its actions, the idle timeout, and how the
/// session's end closes the connection and reads as an error. `TransferSender` and
/// `ReceiverSession` are its roles: they bring their machine and what they do with files.
final class ProtocolSession<Role: ProtocolRole>: WireConnectionOwner {
    let connection: WireConnection
    let loop: EventLoop
    /// Held until the session ends, then let go (no cycle outlives the session): a failing
    /// connection closes before its owner hears why, and closing may make the role's other
    /// holders let go of it (a receiver forgets a closed session), yet the role must hear it.
    private(set) var role: Role?
    private var decoder: FrameDecoder
    /// True once `end` ran: nothing is parsed or performed after it.
    private(set) var ended = false
    /// `send` or `receive`: the operation an error names.
    private let operation: String
    /// What the other end is called in errors (`receiver`, `sender`).
    private let peerName: String
    /// Ends the session when the peer has been silent this long (nil: never).
    private let idleTimeout: Duration?
    private var idleTimer: LoopTimer?
    /// The last time the idle check found the role waiting for its own work.
    private var lastWaitedHere: UInt64 = 0

    init(
        role: Role, connection: WireConnection, loop: EventLoop, decoding direction: FrameDirection,
        operation: String, peerName: String, idleTimeout: Duration? = nil
    ) {
        self.role = role
        self.connection = connection
        self.loop = loop
        decoder = FrameDecoder(direction: direction)
        self.operation = operation
        self.peerName = peerName
        self.idleTimeout = idleTimeout
        connection.owner = self
    }

    /// Queues the protocol's magic and the machine's first actions, then opens the connection
    /// on the loop. Returns false when the session ended meanwhile (a stream failed to open).
    @discardableResult
    func start() -> Bool {
        guard let role else { return false }
        connection.outbound.append(Wire.magic)
        role.perform(role.machine.start())
        guard !ended else { return false }
        connection.start(on: loop)
        guard !ended, !connection.isClosed else { return false }
        scheduleIdleCheck()
        return true
    }

    /// The user stops the session.
    func cancel() { tell(.cancelled) }

    /// Tells the machine what happened to the connection, unless the session has ended.
    func tell(_ event: ConnectionEvent) {
        guard !ended, let role else { return }
        role.perform(role.machine.connectionEnded(event))
    }

    /// Parses what is buffered and reads more, as far as both can go.
    func pump() {
        connection.deliver()
    }

    // MARK: WireConnectionOwner

    func wireReceived(_ connection: WireConnection) { parse() }

    func wireCanSend(_ connection: WireConnection) { role?.connectionHasRoom() }

    /// The peer closed: what it sent is parsed, and the machine told once the decoder needs
    /// more (`connection.peerHasClosed`).
    func wirePeerClosed(_ connection: WireConnection) {
        pump()
    }

    func wireFailed(_ connection: WireConnection, _ error: SluiceError) { tell(.failed(error)) }

    func wireInboundCapacity(_ connection: WireConnection) -> Int? { role?.inboundCapacity }

    // MARK: Parsing

    /// Hands the machine what the decoder finds while the role takes messages; DATA the machine
    /// allowed goes to the role, and what it did not use is decoded again later.
    private func parse() {
        guard let role else { return }
        defer { role.parsed() }
        while !ended, role.takesMessages {
            switch decoder.next(connection.inbound.readable) {
            case .needMore:
                if connection.peerHasClosed { tell(.peerClosed) }
                if !ended { role.caughtUp() }
                return
            case .violation(let reason):
                role.perform(role.machine.violated(reason))
                return
            case .item(let item, let consumed):
                switch role.take(item) {
                case .perform(let actions):
                    connection.inbound.consume(consumed)
                    role.perform(actions)
                    role.tookMessage()
                case .stop(let actions):
                    connection.inbound.consume(consumed)
                    role.perform(actions)
                    return
                case .deliver(let piece):
                    let unused = piece.count - role.deliver(piece)
                    decoder.unread(unused)
                    connection.inbound.consume(consumed - unused)
                }
            }
        }
    }

    // MARK: Idle

    /// Ends the session once the peer has been silent for the idle timeout. Waiting for the
    /// role's own work (its disk, its workers) is not the peer's silence: the peer's time
    /// starts again when that ends, and a session that waits long is looked at once per
    /// timeout, not at every turn.
    private func scheduleIdleCheck() {
        guard let timeout = idleTimeout, !ended else { return }
        let limit = timeout.nanoseconds
        let idle = monotonicNanoseconds() - max(connection.lastActivity, lastWaitedHere)
        let wait = idle >= limit ? 0 : limit - idle
        idleTimer = loop.schedule(after: .nanoseconds(Int64(clamping: wait))) { [weak self] in
            guard let self, !self.ended, let role = self.role else { return }
            let now = monotonicNanoseconds()
            if role.waitsOnItself {
                self.lastWaitedHere = now
            } else if now - max(self.connection.lastActivity, self.lastWaitedHere) >= limit {
                self.tell(.timedOut)
                return
            }
            self.scheduleIdleCheck()
        }
    }

    // MARK: Ending

    /// What the session's end `how` means to its user: nil after a goodbye, else an error of
    /// this end's operation on `subject`, the peer's own reasons shown as its.
    func error(_ how: SessionEnd, subject: String?) -> SluiceError? {
        how.error(operation: operation, subject: subject, peer: peerName)
    }

    /// Ends the session (false when it had ended already): nothing is parsed after this, the
    /// role's `cleanUp` runs, and the connection closes as `how` asks. After a goodbye, the ERROR of a violation or a
    /// turning away, what is queued is written first; a peer that may have pipelined more is
    /// read and dropped meanwhile (not reset under the last message) and, should it not read,
    /// cut off after 5 seconds. Otherwise the connection closes at once.
    @discardableResult
    func end(_ how: SessionEnd, cleanUp: () -> Void = {}) -> Bool {
        guard !ended else { return false }
        ended = true
        idleTimer?.cancel()
        idleTimer = nil
        cleanUp()
        defer { role = nil }
        guard how.closesAfterFlush, !connection.isClosed else {
            connection.close()
            return true
        }
        connection.closeAfterFlush(drainingInput: how != .goodbye)
        if !connection.isClosed {
            let timer = loop.schedule(after: .seconds(5)) { [connection] in connection.close() }
            let previous = connection.onClose
            connection.onClose = {
                timer.cancel()
                previous?()
            }
        }
        return true
    }
}
