import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

/// How a connection ends (`ConnectionLifecycle`), driven without sockets; and the connection
/// itself over in-memory streams.
@Suite("A connection's lifecycle", .ownThreads)
struct ConnectionLifecycleTests {
    typealias Phase = ConnectionLifecycle.Phase
    typealias Event = ConnectionLifecycle.Event
    typealias Effect = ConnectionLifecycle.Effect

    static let phases: [Phase] = [.open, .peerClosed, .closingWhenFlushed, .flushingBeforeDrain, .draining, .closed]
    static let events: [Event] = [
        .peerEnded, .closeAfterFlush(drainingInput: false), .closeAfterFlush(drainingInput: true), .flushed, .close,
    ]

    /// A lifecycle in `phase`, reached by the events a connection sends.
    static func lifecycle(in phase: Phase) -> ConnectionLifecycle {
        var life = ConnectionLifecycle()
        let path: [Event]
        switch phase {
        case .open: path = []
        case .peerClosed: path = [.peerEnded]
        case .closingWhenFlushed: path = [.closeAfterFlush(drainingInput: false)]
        case .flushingBeforeDrain: path = [.closeAfterFlush(drainingInput: true)]
        case .draining: path = [.closeAfterFlush(drainingInput: true), .flushed]
        case .closed: path = [.close]
        }
        for event in path { _ = life.handle(event) }
        #expect(life.phase == phase)
        return life
    }

    /// Every pair, and what it does: none is refused.
    static let table: TransitionTable<Phase, Event, Effect> = {
        var table = TransitionTable<Phase, Event, Effect>()
        let closing = [Phase.closingWhenFlushed, .flushingBeforeDrain, .draining]
        table.add(.open, .peerEnded, to: .peerClosed, .reportPeerClosed)
        table.add(.open, .flushed, stays: .nothing)
        table.add(.peerClosed, .peerEnded, stays: .ignore)
        table.add(.peerClosed, .flushed, stays: .nothing)
        table.add(.closingWhenFlushed, .flushed, to: .closed, .closeStreams)
        table.add(.flushingBeforeDrain, .flushed, to: .draining, .shutOutputAndDrain)
        table.add(.draining, .flushed, stays: .drain)
        for open in [Phase.open, .peerClosed] {
            table.add(open, .closeAfterFlush(drainingInput: false), to: .closingWhenFlushed, .flush)
            table.add(open, .closeAfterFlush(drainingInput: true), to: .flushingBeforeDrain, .flush)
        }
        for phase in closing {
            for event in [
                Event.peerEnded, .closeAfterFlush(drainingInput: false), .closeAfterFlush(drainingInput: true),
            ] {
                table.add(phase, event, stays: .ignore)
            }
        }
        for phase in [Phase.open, .peerClosed] + closing {
            table.add(phase, .close, to: .closed, .closeStreams)
        }
        for event in events {
            table.add(.closed, event, stays: .ignore)
        }
        return table
    }()

    @Test("Every event in every phase does what the table says")
    func everyPairAsTabled() {
        for phase in Self.phases {
            for event in Self.events {
                var life = Self.lifecycle(in: phase)
                let (expected, rows) = Self.table.transition(phase, event)
                #expect(rows == 1, "\(phase), \(event) is in the table \(rows) times")
                #expect(life.handle(event) == expected?.effect, "\(phase), \(event)")
                #expect(life.phase == expected?.next, "\(phase), \(event)")
            }
        }
    }

    @Test("What each phase allows: reading only while open, dropping input only while draining")
    func queries() {
        for phase in Self.phases {
            let life = Self.lifecycle(in: phase)
            #expect(life.reads == (phase == .open), "\(phase)")
            #expect(life.peerHasClosed == (phase == .peerClosed), "\(phase)")
            #expect(life.drainsInput == (phase == .flushingBeforeDrain || phase == .draining), "\(phase)")
            #expect(life.isClosed == (phase == .closed), "\(phase)")
        }
    }

    /// Seeded random sequences from every phase: the peer's close is reported at most once and
    /// never once closing was asked for; the streams close at most once, and nothing but
    /// `ignore` follows; reading never comes back; draining only after a draining close.
    @Test("Random event sequences: one report of the peer's close, one close, nothing after it")
    func randomSequences() {
        var generator = SeededRandom(state: 0xC0FF_EE49)
        for _ in 0..<20_000 {
            let start = Self.phases.randomElement(using: &generator) ?? .open
            var life = Self.lifecycle(in: start)
            var reports = start == .peerClosed ? 1 : 0
            var closes = start == .closed ? 1 : 0
            var closeAsked = [Phase.closingWhenFlushed, .flushingBeforeDrain, .draining].contains(start)
            var drainAsked = start == .flushingBeforeDrain || start == .draining
            for _ in 0..<12 {
                let event = Self.events.randomElement(using: &generator) ?? .close
                let before = life.phase
                let effect = life.handle(event)
                if case .closeAfterFlush(let draining) = event, !closeAsked, before != .closed {
                    closeAsked = true
                    drainAsked = draining
                }
                switch effect {
                case .reportPeerClosed:
                    reports += 1
                    #expect(!closeAsked, "the peer's close reported after closing was asked for")
                case .closeStreams:
                    closes += 1
                case .shutOutputAndDrain, .drain:
                    #expect(drainAsked)
                case .nothing, .ignore, .flush:
                    break
                }
                if before == .closed { #expect(effect == .ignore && life.phase == .closed) }
                if before != .open { #expect(!life.reads, "reading came back after \(before)") }
                if life.drainsInput { #expect(drainAsked) }
            }
            #expect(reports <= 1 && closes <= 1, "from \(start)")
            #expect(life.isClosed == (closes == 1))
        }
    }

    // MARK: The connection over in-memory streams

    /// Notes what a connection tells its owner.
    private final class Owner: WireConnectionOwner {
        var received: [UInt8] = []
        var peerClosed = 0
        var failures: [SluiceError] = []
        /// Times the connection's `onClose` ran.
        var closes = 0

        func wireReceived(_ connection: WireConnection) {
            received += connection.inbound.readable
            connection.inbound.consume(connection.inbound.readableBytes)
        }
        func wireCanSend(_ connection: WireConnection) {}
        func wirePeerClosed(_ connection: WireConnection) { peerClosed += 1 }
        func wireFailed(_ connection: WireConnection, _ error: SluiceError) { failures.append(error) }
    }

    /// A connection reading from one in-memory pair and writing to another, on `loop`; the
    /// peer's ends of both.
    private static func connection(
        on loop: EventLoop
    ) -> (connection: WireConnection, owner: Owner, peerWriter: WriteStream, peerReader: ReadStream) {
        let (input, peerWriter) = boundPair(bufferSize: 1 << 12)
        let (peerReader, output) = boundPair(bufferSize: 1 << 12)
        let connection = WireConnection(
            input: input, output: output, inboundCapacity: 1 << 12, outboundCapacity: 1 << 12)
        let owner = Owner()
        connection.owner = owner
        connection.onClose = { [owner] in owner.closes += 1 }
        connection.start(on: loop)
        peerWriter.open()
        peerReader.open()
        return (connection, owner, peerWriter, peerReader)
    }

    /// What the peer reads from the connection, gathered as the loop runs.
    private final class PeerReader {
        let stream: ReadStream
        private(set) var bytes: [UInt8] = []
        private(set) var ended = false

        init(_ stream: ReadStream) { self.stream = stream }

        /// Reads what has come, without waiting; returns self, for a loop's condition.
        func poll() -> PeerReader {
            var buffer = [UInt8](repeating: 0, count: 1 << 12)
            while !ended {
                switch buffer.withUnsafeMutableBytes({ stream.tryRead(into: $0) }) {
                case .processed(let n) where n > 0: bytes += buffer[..<n]
                case .processed: ended = true
                case .wouldBlock: return self
                }
            }
            return self
        }
    }

    @Test("Messages sent while corked are only appended, and go out together when the outermost cork comes out")
    func corkedSendsGoOutTogether() throws {
        let loop = try EventLoop()
        let (connection, _, _, peerReader) = Self.connection(on: loop)
        let peer = PeerReader(peerReader)
        // A first message written and read: the socket has said it takes bytes.
        connection.send([0])
        #expect(runLoop(loop) { peer.poll().bytes.count == 1 })
        let before = connection.bytesWritten
        connection.corking {
            connection.send([1, 2, 3])
            connection.corking { connection.send([4, 5]) }
            // The inner cork came out: still nothing written.
            #expect(connection.bytesWritten == before)
            connection.send([6])
            #expect(connection.bytesWritten == before)
        }
        #expect(connection.bytesWritten == before + 6)
        #expect(runLoop(loop) { peer.poll().bytes.count == 7 })
        #expect(peer.bytes == [0, 1, 2, 3, 4, 5, 6])
    }

    /// Memory lent to a connection (`sendLent`): bytes of one value, freed when given back.
    private final class Loan {
        let bytes: UnsafeMutableRawBufferPointer
        private(set) var returns = 0

        init(_ value: UInt8, count: Int) {
            bytes = .allocate(byteCount: count, alignment: 16)
            bytes.initializeMemory(as: UInt8.self, repeating: value)
        }

        func giveBack() { returns += 1 }

        deinit { bytes.deallocate() }
    }

    @Test("Lent frames go out in their place among the messages, each given back once all of it is written")
    func lentFramesGoOutInOrder() throws {
        let loop = try EventLoop()
        let (connection, _, _, peerReader) = Self.connection(on: loop)
        let peer = PeerReader(peerReader)
        let (first, second) = (Loan(0xAA, count: 10_000), Loan(0xBB, count: 100))
        connection.send([1, 2, 3])
        #expect(connection.sendLent(UnsafeRawBufferPointer(first.bytes), done: first.giveBack))
        connection.send([4])
        #expect(connection.sendLent(UnsafeRawBufferPointer(second.bytes), done: second.giveBack))
        connection.send([5, 6])
        #expect(connection.pendingBytes == 6 + 10_100)
        connection.flush()
        #expect(first.returns == 0, "given back before the peer read it")
        #expect(runLoop(loop) { peer.poll().bytes.count == 10_106 })
        let expected: [UInt8] =
            [1, 2, 3] + [UInt8](repeating: 0xAA, count: 10_000) + [4] + [UInt8](repeating: 0xBB, count: 100) + [5, 6]
        #expect(peer.bytes == expected)
        #expect(first.returns == 1 && second.returns == 1)
        #expect(connection.isFlushed && connection.pendingBytes == 0 && connection.bytesWritten == 10_106)
    }

    @Test("A loan is refused while bytes are held for a BATCH; one unwritten at the close is given back, once")
    func lentFramesOnHoldAndClose() throws {
        let loop = try EventLoop()
        let (connection, owner, _, peerReader) = Self.connection(on: loop)
        let (held, big) = (Loan(1, count: 10), Loan(2, count: 1 << 16))
        connection.hold()
        #expect(!connection.sendLent(UnsafeRawBufferPointer(held.bytes), done: held.giveBack))
        connection.release()
        #expect(held.returns == 0 && connection.isFlushed)
        // The peer never reads: the pair takes 4 KiB, the rest stays lent.
        #expect(connection.sendLent(UnsafeRawBufferPointer(big.bytes), done: big.giveBack))
        connection.flush()
        #expect(runLoop(loop) { connection.bytesWritten > 0 })
        #expect(big.returns == 0 && !connection.isFlushed)
        connection.close()
        #expect(big.returns == 1 && connection.pendingBytes == 0 && owner.closes == 1)
        connection.close()
        #expect(big.returns == 1)
        #expect(!connection.sendLent(UnsafeRawBufferPointer(held.bytes), done: held.giveBack), "lent after the close")
        let peer = PeerReader(peerReader)
        #expect(peer.poll().bytes.allSatisfy { $0 == 2 })
    }

    @Test("The peer's close is told once after its bytes; a closed connection writes nothing and closes once")
    func peerClosesThenConnectionCloses() throws {
        let loop = try EventLoop()
        let (connection, owner, peerWriter, peerReader) = Self.connection(on: loop)
        _ = [UInt8]([1, 2, 3]).withUnsafeBytes { peerWriter.tryWrite(from: $0) }
        peerWriter.close()
        #expect(runLoop(loop) { owner.peerClosed > 0 })
        #expect(owner.received == [1, 2, 3] && owner.peerClosed == 1)
        #expect(connection.peerHasClosed && !connection.isClosed)
        // Writing goes on after the peer's close.
        connection.send([9, 8])
        let peer = PeerReader(peerReader)
        #expect(runLoop(loop) { peer.poll().bytes == [9, 8] })
        connection.close()
        connection.close()
        #expect(owner.closes == 1 && connection.isClosed && !connection.peerHasClosed)
        connection.send([7])
        connection.flush()
        connection.closeAfterFlush()
        #expect(peer.poll().ended && peer.bytes == [9, 8], "written after the close")
        #expect(owner.peerClosed == 1 && owner.failures.isEmpty && owner.closes == 1)
    }

    @Test("Closing after a flush writes what is buffered first, then closes; the peer's end is not reported")
    func closeAfterFlushWritesFirst() throws {
        let loop = try EventLoop()
        let (connection, owner, peerWriter, peerReader) = Self.connection(on: loop)
        connection.send([UInt8](repeating: 5, count: 100))
        connection.closeAfterFlush()
        peerWriter.close()
        let peer = PeerReader(peerReader)
        #expect(runLoop(loop) { peer.poll().ended })
        #expect(peer.bytes == [UInt8](repeating: 5, count: 100))
        #expect(runLoop(loop) { connection.isClosed })
        #expect(owner.closes == 1 && owner.peerClosed == 0)
    }

    @Test("Closing after a flush with a drain: the sending side ends, the input is dropped until the peer's end")
    func closeAfterFlushDrains() throws {
        let loop = try EventLoop()
        let (connection, owner, peerWriter, peerReader) = Self.connection(on: loop)
        connection.send([1, 2])
        connection.closeAfterFlush(drainingInput: true)
        let peer = PeerReader(peerReader)
        #expect(runLoop(loop) { peer.poll().ended })
        #expect(peer.bytes == [1, 2])
        #expect(connection.lifecycle.phase == .draining)
        _ = [UInt8](repeating: 3, count: 500).withUnsafeBytes { peerWriter.tryWrite(from: $0) }
        #expect(runLoop(loop) { connection.bytesRead == 500 })
        #expect(!connection.isClosed, "closed before the peer did")
        peerWriter.close()
        #expect(runLoop(loop) { connection.isClosed })
        #expect(owner.received.isEmpty && owner.peerClosed == 0, "drained bytes reached the owner")
    }
}
