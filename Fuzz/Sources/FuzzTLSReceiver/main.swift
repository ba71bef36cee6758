// libFuzzer target: what a stranger sends to `sluice receive --key…` before, during and after
// its TLS handshake. A real `TransferReceiver` (TLS 1.3 with an external pre-shared key, the
// receiver the TLS server) serves one connection per input over bound pairs on an `EventLoop`
// turned one step at a time, storing into a scratch directory. The client is either raw bytes
// (garbage, a partial record, a ClientHello mutated), or a real client `TLSEngine` holding the
// key (or a wrong one) whose bytes pass through up to three edits at fuzzer-chosen offsets of
// its stream (insert, overwrite, cut), so the fuzzer reaches past a valid ClientHello into the
// rest of the handshake; once that client's handshake is done, the rest of the input goes to
// the receiver's protocol as plaintext through the engine. The invariants: no crash; the
// session ends once the client has closed; a client that did not finish a handshake with the
// key is never served (no entry answered, no byte stored), fails as an authentication failure
// or a protocol violation, and counts against its address in the throttle.
//
// The input: the seed byte of `Choices` (the pieces the bytes are written in), a control byte,
// then
//   raw mode (control & 3 == 0): the bytes the client sends; it closes after them.
//   client mode: (control >> 4) & 3 edits, each [kind, offset (2 bytes, big-endian), length,
//   length bytes (insert and overwrite)], kind % 3 being insert, overwrite, cut; then the
//   plaintext sent once the handshake is done. Control bit 2: the client has a wrong key;
//   bit 3: it ends with close_notify (else it just closes).
import Foundation
import FuzzDriver

@testable import FuzzSupport
@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// `SLUICE_FUZZ_TRACE=1 FuzzTLSReceiver INPUT` prints what the client does and how it ends.
let trace = getenv("SLUICE_FUZZ_TRACE") != nil

/// One edit of the client's byte stream, at an offset of the stream as the client made it.
enum Edit {
    case insert(Int, [UInt8])
    case overwrite(Int, [UInt8])
    case cut(Int)

    /// Reads the edits and returns the rest of `bytes` (the plaintext).
    static func parse(_ count: Int, from bytes: inout ArraySlice<UInt8>) -> [Edit] {
        var edits: [Edit] = []
        for _ in 0..<count {
            guard bytes.count >= 4 else { break }
            let kind = bytes[bytes.startIndex] % 3
            let offset = Int(bytes[bytes.startIndex + 1]) << 8 | Int(bytes[bytes.startIndex + 2])
            let length = Int(bytes[bytes.startIndex + 3])
            bytes = bytes.dropFirst(4)
            switch kind {
            case 0, 1:
                let patch = Array(bytes.prefix(length))
                bytes = bytes.dropFirst(patch.count)
                edits.append(kind == 0 ? .insert(offset, patch) : .overwrite(offset, patch))
            default:
                edits.append(.cut(offset))
            }
        }
        return edits
    }
}

/// The client's stream with the edits applied, as its bytes come out of the engine.
struct EditedStream {
    let edits: [Edit]
    /// Bytes of the client's own stream passed so far.
    private(set) var position = 0
    /// A cut was reached: nothing more goes out.
    private(set) var isCut = false

    init(_ edits: [Edit]) { self.edits = edits }

    mutating func pass(_ bytes: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        for byte in bytes {
            guard !isCut else { return }
            var value = byte
            for edit in edits {
                switch edit {
                case .insert(let offset, let patch) where offset == position:
                    out += patch
                case .overwrite(let offset, let patch) where position >= offset && position - offset < patch.count:
                    value = patch[position - offset]
                case .cut(let offset) where offset == position:
                    isCut = true
                default:
                    break
                }
            }
            guard !isCut else { return }
            out.append(value)
            position += 1
        }
    }
}

/// What the harness keeps for the whole run: the receiver, the client's contexts. (Each input
/// has a loop of its own: what it leaves scheduled goes with it, so libFuzzer's leak check
/// finds the input's allocations balanced rather than scanning the heap after every input.)
final class Harness {
    let receiver: TransferReceiver
    let directory: String
    let client: TLSContext
    let wrongClient: TLSContext
    let peer = SocketAddress(numericHost: "192.0.2.7", port: 40000)!
    var report: TransferSessionReport?
    /// The receiver's sessions refer to it weakly: its side table (where weak references
    /// point) is found by LeakSanitizer only through a weak reference that lives as long.
    private weak var weakReceiver: TransferReceiver?

    init() {
        let key = FuzzKeys.receiver
        let wrong = FuzzKeys.wrong
        var template = Array("/tmp/sluice-fuzz-tls.XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { fatalError("mkdtemp: \(errno)") }
        directory = String(cString: made)
        do {
            // A receiver that lets senders sync and remove: the most a keyed sender may reach.
            var options = TransferReceiveOptions(maxSize: 1 << 20, fsync: false)
            options.delete = true
            receiver = try TransferReceiver(directory: directory, options: options)
            try receiver.useTLS(preSharedKey: key)
            var settings = TLSSettings(role: .client)
            settings.preSharedKey = key
            client = try TLSContext(settings)
            settings.preSharedKey = wrong
            wrongClient = try TLSContext(settings)
        } catch {
            fatalError("FuzzTLSReceiver setup: \(error)")
        }
        weakReceiver = receiver
        receiver.onSessionEnd = { [unowned self] in self.report = $0 }
    }

    /// One turn of `loop`: what is ready now, and nothing that would wait.
    func turn(_ loop: EventLoop) {
        loop.execute { loop.stop() }
        loop.run()
    }

    /// Empties the scratch directory (after a session that may have stored something).
    func sweep() {
        let manager = FileManager.default
        for name in (try? manager.contentsOfDirectory(atPath: directory)) ?? [] {
            try? manager.removeItem(atPath: directory + "/" + name)
        }
    }
}

nonisolated(unsafe) let harness = Harness()
// The scratch directory goes when libFuzzer exits (after a finding too, but not after a crash).
atexit {
    harness.sweep()
    rmdir(harness.directory)
}

/// The client end of the connection: what it writes to the receiver and reads back.
class Client {
    let toReceiver: WriteStream
    let fromReceiver: ReadStream
    var choices: Choices
    /// Bytes made and not yet taken by the connection.
    var pending: [UInt8] = []
    /// Nothing more will be made: once `pending` is written, the client closes.
    var finishing = false
    private(set) var closed = false
    var receiverClosed = false
    let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 << 10, alignment: 1)

    init(toReceiver: WriteStream, fromReceiver: ReadStream, choices: Choices) {
        self.toReceiver = toReceiver
        self.fromReceiver = fromReceiver
        self.choices = choices
    }

    deinit { scratch.deallocate() }

    /// Writes what is pending, as far as the connection takes it; closes once finished.
    func flush() {
        while !pending.isEmpty && !closed {
            let length = choices.pieceLength(max: pending.count)
            let result = pending.withUnsafeBytes { toReceiver.tryWrite(from: .init(rebasing: $0[0..<length])) }
            guard case .processed(let n) = result else { return }
            guard n > 0 else {
                // The receiver closed its end: nothing more can go.
                pending.removeAll()
                break
            }
            pending.removeFirst(n)
        }
        if finishing && pending.isEmpty && !closed {
            closed = true
            toReceiver.close()
            if trace { note("client: closed") }
        }
    }

    /// Reads what the receiver sent into `space` (an engine's input, or scratch to drop).
    func receive(into space: UnsafeMutableRawBufferPointer) -> Int {
        guard !receiverClosed, !space.isEmpty else { return 0 }
        switch fromReceiver.tryRead(into: space) {
        case .processed(let n) where n > 0:
            return n
        case .processed:
            receiverClosed = true
            return 0
        case .wouldBlock:
            return 0
        }
    }

    /// One step: make bytes, write them, read what came back. Returns whether it did anything.
    func step() -> Bool {
        let before = pending.count
        flush()
        return pending.count != before || receive(into: scratch) > 0
    }
}

/// A client that sends the input as it is.
final class RawClient: Client {
    init(_ bytes: ArraySlice<UInt8>, toReceiver: WriteStream, fromReceiver: ReadStream, choices: Choices) {
        super.init(toReceiver: toReceiver, fromReceiver: fromReceiver, choices: choices)
        pending = Array(bytes)
        finishing = true
    }
}

/// A client with a real `TLSEngine`, its stream edited on the way out.
final class EngineClient: Client {
    let engine: TLSEngine
    var stream: EditedStream
    var plaintext: ArraySlice<UInt8>
    let closeNotify: Bool
    private(set) var handshakeDone = false
    private(set) var failure: SluiceError?

    init(
        context: TLSContext, edits: [Edit], plaintext: ArraySlice<UInt8>, closeNotify: Bool,
        toReceiver: WriteStream, fromReceiver: ReadStream, choices: Choices
    ) throws(SluiceError) {
        engine = try TLSEngine(context: context, name: "fuzz client")
        stream = EditedStream(edits)
        self.plaintext = plaintext
        self.closeNotify = closeNotify
        super.init(toReceiver: toReceiver, fromReceiver: fromReceiver, choices: choices)
    }

    override func step() -> Bool {
        var progress = false
        // The receiver's bytes into the engine.
        if !engine.inputEnded {
            let n = receive(into: engine.inputSpace())
            if n > 0 {
                engine.commitInput(n)
                progress = true
            } else if receiverClosed {
                engine.endInput()
                progress = true
            }
        }
        if !finishing {
            progress = advance() || progress
        }
        // Drop what the receiver says (its answers), so it never waits for room.
        if handshakeDone && failure == nil {
            while case .done(let n) = engine.read(into: scratch), n > 0 { progress = true }
        }
        // The engine's bytes out, edited.
        while true {
            let out = engine.output()
            if out.isEmpty { break }
            stream.pass(out, into: &pending)
            engine.consumeOutput(out.count)
            progress = true
        }
        if stream.isCut || engine.inputEnded { finishing = true }
        let before = pending.count
        flush()
        return progress || pending.count != before
    }

    /// The handshake, then the plaintext in pieces; then the end. Returns whether it moved.
    private func advance() -> Bool {
        guard handshakeDone else {
            let step = engine.handshake()
            switch step {
            case .done:
                handshakeDone = true
                if trace { note("client: handshake done") }
                return true
            case .wantInput, .wantOutput:
                return false
            case .closed, .failed:
                if case .failed(let error) = step { failure = error }
                if trace { note("client: handshake failed: \(failure.map { "\($0)" } ?? "closed")") }
                finishing = true
                return true
            }
        }
        guard plaintext.isEmpty else {
            let length = choices.pieceLength(max: plaintext.count)
            let step = plaintext.withUnsafeBytes { engine.write(from: .init(rebasing: $0[0..<length])) }
            switch step {
            case .done(let n):
                plaintext = plaintext.dropFirst(n)
                return n > 0
            case .wantInput, .wantOutput:
                return false
            case .closed, .failed:
                finishing = true
                return true
            }
        }
        if closeNotify { engine.shutdown() }
        finishing = true
        return true
    }
}

/// Runs one connection: the client's steps and the loop's turns, until the client has closed,
/// the session has ended and the receiver has closed the connection (`socket`: the end it
/// reads, as a socket it would close). Returns the session's report.
func run(_ client: Client, socket: ReadStream, on loop: EventLoop) -> TransferSessionReport {
    // Generous: a connection takes a few hundred turns and a millisecond or two.
    let deadline = monotonicNanoseconds() + 5_000_000_000
    var done: Bool { client.closed && harness.report != nil && socket.streamStatus == .closed }
    var idle = 0
    while !done && monotonicNanoseconds() < deadline {
        idle = client.step() ? 0 : idle + 1
        harness.turn(loop)
        // Nothing comes back (the receiver waits for the rest of a record the client will never
        // send, say): a stranger who stalls, then goes. (The receiver's handshake timeout
        // would end it too, 10 s later.)
        if idle == 2000 && !client.closed {
            if trace { note("client: stalled; it goes") }
            client.finishing = true
        }
    }
    expect(client.closed, "the client could not send its bytes and close within 5 s")
    guard let report = harness.report else {
        expect(false, "the client closed, and the session did not end within 5 s")
        fatalError("unreachable")
    }
    expect(
        socket.streamStatus == .closed,
        "the session ended, and its connection was not closed within 5 s (\(socket.streamStatus))")
    return report
}

/// One fuzz input (libFuzzer's `LLVMFuzzerTestOneInput`).
func fuzzTLSReceiver(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    guard let (choices, bytes) = FuzzInput.split(start, count), let control = bytes.first else { return 0 }
    var rest = ArraySlice(bytes.dropFirst())
    harness.report = nil
    // Only this input's failures count; one is enough to be refused.
    harness.receiver.throttle = HandshakeLimiter(maximumFailures: 1)
    let (input, toReceiver) = boundPair(bufferSize: 16 << 10)
    let (fromReceiver, output) = boundPair(bufferSize: 16 << 10)
    toReceiver.open()
    fromReceiver.open()
    let client: Client
    var keyed: EngineClient?
    if control & 3 == 0 {
        client = RawClient(rest, toReceiver: toReceiver, fromReceiver: fromReceiver, choices: choices)
    } else {
        let edits = Edit.parse(Int(control >> 4 & 3), from: &rest)
        do {
            let engine = try EngineClient(
                context: control & 4 == 0 ? harness.client : harness.wrongClient, edits: edits, plaintext: rest,
                closeNotify: control & 8 != 0, toReceiver: toReceiver, fromReceiver: fromReceiver, choices: choices)
            keyed = engine
            client = engine
        } catch {
            expect(false, "client engine: \(error)")
            return 0
        }
    }
    let loop: EventLoop
    do {
        loop = try EventLoop()
    } catch {
        expect(false, "EventLoop: \(error)")
        return 0
    }
    let id = harness.receiver.serve(input: input, output: output, from: harness.peer, on: loop)
    expect(id != nil, "a connection turned away with the throttle cleared")
    let report = run(client, socket: input, on: loop)
    if trace {
        note("socket: read end \(input.streamStatus), write end \(output.streamStatus); timers \(loop.timersHeld)")
    }
    fromReceiver.close()
    if trace { note("receiver: \(report.error.map { "\($0)" } ?? "goodbye"), \(report.tally.answers) entries") }

    // Served only past a handshake with the key, done on both sides.
    let authenticated = keyed.map { $0.handshakeDone && control & 4 == 0 } ?? false
    if !authenticated {
        expect(report.tally.answers == 0 && report.bytes == 0, "served without the key: \(report.tally)")
        guard let error = report.error else {
            expect(false, "a session without the key ended as if it had said goodbye")
            return 0
        }
        expect(
            error.code == .authenticationFailed || error.code == .protocolViolation,
            "a failed handshake ends as \(error)")
        // No certificate is shown or asked for: none can be the reason.
        expect(!"\(error)".contains("certificate not trusted"), "a handshake without certificates ends as \(error)")
        var throttle = harness.receiver.throttle
        expect(!throttle.allows(HandshakeLimiter.key(for: harness.peer)), "a failed handshake was not counted")
    }
    if authenticated {
        // The disk work the session left (an interrupted file closed, kept or removed) is done
        // before the next input, so that what it holds is not taken for a leak.
        let store = harness.receiver.store
        store.handingOn.wait()
        while store.pool.outstandingJobs > 0 || WorkerPool.shared.outstandingJobs > 0 { usleep(100) }
        harness.turn(loop)
        harness.sweep()
    }
    // Freed within the input, so libFuzzer's leak check sees its allocations balance.
    harness.report = nil
    return 0
}

runLibFuzzer(fuzzTLSReceiver)
