import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// A machine that notes what its session tells it and ends as the real ones do: on the peer's
/// close, a failure, a violation, a cancel or a timeout.
private struct NotingMachine: ProtocolMachine {
    enum Action: Equatable {
        case noted
        case end(SessionEnd)
    }

    var items: [String] = []
    var events: [ConnectionEvent] = []
    var violations: [String] = []

    func start() -> [Action] { [] }

    mutating func received(_ item: FrameDecoder.Item) -> [Action] {
        switch item {
        case .magic: items.append("magic")
        case .batchEnd: items.append("batch end")
        case .frame(let frame): items.append("\(frame.type)")
        case .data(let piece, _): items.append("data \(piece.count)")
        }
        return [.noted]
    }

    mutating func violated(_ reason: String) -> [Action] {
        violations.append(reason)
        return [.end(.violation(reason))]
    }

    mutating func connectionEnded(_ event: ConnectionEvent) -> [Action] {
        events.append(event)
        switch event {
        case .peerClosed: return [.end(.closedEarly("closed in the middle of a message"))]
        case .failed(let error): return [.end(.connectionFailed(error))]
        case .cancelled: return [.end(.cancelled)]
        case .timedOut: return [.end(.timedOut)]
        }
    }
}

/// The role: performs the machine's ends on its session, and waits on itself when told to.
private final class NotingRole: ProtocolRole {
    var machine = NotingMachine()
    var session: ProtocolSession<NotingRole>?
    var waitsOnItself = false
    var ends: [SessionEnd] = []
    var errors: [SluiceError?] = []

    func perform(_ actions: [NotingMachine.Action]) {
        for case .end(let how) in actions {
            guard let session, session.end(how) else { continue }
            ends.append(how)
            errors.append(session.error(how, subject: "peer"))
        }
    }

    func connectionHasRoom() {}

    /// With `lends`: DATA is lent out of the inbound buffer (as a receiver lends it to the
    /// worker that writes it), and kept until `giveBack()`.
    var lends = false
    var loans: [LentBytes] = []
    var dataBytes = 0

    func take(_ item: FrameDecoder.Item) -> Taken<NotingMachine.Action> {
        if lends, case .data(let piece, _) = item { return .deliver(piece) }
        return .perform(machine.received(item))
    }

    func deliver(_ piece: UnsafeRawBufferPointer) -> Int {
        if let session { loans.append(session.connection.inbound.lend(piece)) }
        dataBytes += piece.count
        return piece.count
    }

    func giveBack() {
        for loan in loans { loan.giveBack() }
        loans.removeAll()
        session?.pump()
    }
}

/// `ProtocolSession`, the loop both ends of a transfer run, driven over real loopback sockets
/// by a peer played on a blocking socket.
@Suite("Protocol session", .ownThreads)
struct ProtocolSessionTests {
    /// A session on `loop` connected to a peer this test plays (its descriptor, accepted).
    private static func connected(
        on loop: EventLoop, idleTimeout: Duration? = nil
    ) throws -> (role: NotingRole, session: ProtocolSession<NotingRole>, peer: Int32) {
        let (listener, port) = try listenOnLoopback()
        defer { close(listener) }
        let (input, output) = Socket.connect(host: "127.0.0.1", port: port)
        let connection = WireConnection(
            input: input, output: output, inboundCapacity: 1 << 16, outboundCapacity: 1 << 16)
        let role = NotingRole()
        let session = ProtocolSession(
            role: role, connection: connection, loop: loop, decoding: .toReceiver, operation: "receive",
            peerName: "sender", idleTimeout: idleTimeout)
        role.session = session
        session.start()
        let peer = accept(listener, nil, nil)
        #expect(peer >= 0)
        return (role, session, peer)
    }

    private static func write(_ fd: Int32, _ bytes: [UInt8]) {
        let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        #expect(n == bytes.count)
    }

    /// The peer's close is told once, after everything it sent before it was parsed, and the
    /// session then lets its role go.
    @Test func aPeerClosingMidMessageIsToldOnceAfterWhatCameBefore() throws {
        let loop = try EventLoop()
        weak var released: NotingRole?
        do {
            let (role, session, peer) = try Self.connected(on: loop)
            defer { close(peer) }
            released = role
            let bye = Frame.bye.encoded
            Self.write(peer, Wire.magic + bye + bye + Array(bye.prefix(bye.count - 1)))
            shutdown(peer, Int32(SHUT_WR))
            #expect(runLoop(loop) { !role.ends.isEmpty })
            #expect(role.machine.items == ["magic", "\(Frame.bye.type)", "\(Frame.bye.type)"])
            #expect(role.machine.events == [.peerClosed])
            #expect(role.ends == [.closedEarly("closed in the middle of a message")])
            #expect(role.errors.first??.description.contains("truncated") == true, "\(role.errors)")
            #expect(session.ended && session.connection.isClosed && session.role == nil)
            // Nothing more is told once it has ended.
            session.cancel()
            session.tell(.timedOut)
            #expect(role.machine.events == [.peerClosed])
        }
        #expect(released == nil, "the session held its role after its end")
    }

    /// Silence counts only while the role does not wait on its own work: a role waiting for
    /// 3 idle timeouts is not timed out; once it stops waiting, it is, after a timeout.
    @Test func idleTimeIsThePeersSilenceNotTheRolesOwnWaiting() throws {
        let loop = try EventLoop()
        let (role, session, peer) = try Self.connected(on: loop, idleTimeout: .milliseconds(100))
        defer { close(peer) }
        // Waiting from the start (the idle check runs only while the loop runs).
        role.waitsOnItself = true
        Self.write(peer, Wire.magic)
        #expect(runLoop(loop) { role.machine.items == ["magic"] })
        _ = runLoop(loop, for: .milliseconds(300)) { !role.machine.events.isEmpty }
        #expect(role.machine.events.isEmpty, "timed out while the role waited on itself")
        role.waitsOnItself = false
        #expect(runLoop(loop) { !role.machine.events.isEmpty })
        #expect(role.machine.events == [.timedOut])
        #expect(role.errors.first??.description.contains("idle") == true, "\(role.errors)")
        #expect(session.connection.isClosed)
    }

    /// Bytes lent out of the inbound buffer stay in place until they come back; reading goes
    /// on meanwhile into a second buffer, and stops only when both hold loans: memory stays two
    /// buffers, and nothing is lost.
    @Test func lentBytesDoNotStopReadingUntilBothBuffersAreLent() throws {
        let loop = try EventLoop()
        let (role, session, peer) = try Self.connected(on: loop)
        defer { close(peer) }
        role.lends = true
        let capacity = session.connection.inbound.capacity
        let frames = 16
        let payload = 16 << 10
        var stream = Wire.magic
        for index in 0..<frames {
            stream += [Wire.MessageType.data.rawValue, 0, 0, UInt8(payload >> 8), 0]
            stream += [UInt8](repeating: UInt8(index), count: payload)
        }
        let total = frames * payload
        #expect(total >= 4 * capacity)
        let bytes = stream
        Thread.detachNewThread {
            _ = bytes.withUnsafeBytes { Glibc.write(peer, $0.baseAddress, $0.count) }
        }
        // More than one buffer's worth arrives while every loan is still out.
        #expect(runLoop(loop) { role.dataBytes > capacity + payload })
        // Both buffers hold loans: reading stops there.
        _ = runLoop(loop, for: .milliseconds(200)) { role.dataBytes == total }
        #expect(role.dataBytes <= 2 * capacity, "\(role.dataBytes) bytes held in buffers of \(capacity)")
        // Loans back: the rest arrives.
        #expect(
            runLoop(loop) {
                role.giveBack()
                return role.dataBytes == total
            })
        #expect(role.machine.violations.isEmpty && role.ends.isEmpty)
    }

    /// Bytes that break the protocol end the session as a violation; what the peer pipelined
    /// after them is read and dropped (no reset under the last message), the session's
    /// sending direction is shut, and the connection closes when the peer closes.
    @Test func aViolationDrainsThePeerThenCloses() throws {
        let loop = try EventLoop()
        let (role, session, peer) = try Self.connected(on: loop)
        defer { close(peer) }
        // A frame type no direction has, then more the peer had pipelined.
        Self.write(peer, Wire.magic + [0xEE, 0, 0, 0, 4, 1, 2, 3, 4] + [UInt8](repeating: 7, count: 50_000))
        #expect(runLoop(loop) { !role.ends.isEmpty })
        #expect(role.machine.violations.count == 1)
        guard case .violation = role.ends.first else {
            Issue.record("ended as \(role.ends), not as a violation")
            return
        }
        // The session shut its sending direction: past its magic, the peer reads an end of
        // file, not a reset.
        var buffer = [UInt8](repeating: 0, count: 64)
        var last = -1
        #expect(
            runLoop(loop) {
                last = buffer.withUnsafeMutableBytes { recv(peer, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
                return last == 0 || (last < 0 && errno != EAGAIN)
            })
        #expect(last == 0, "errno \(errno)")
        #expect(!session.connection.isClosed, "closed before the peer did")
        shutdown(peer, Int32(SHUT_WR))
        #expect(runLoop(loop) { session.connection.isClosed })
    }
}
