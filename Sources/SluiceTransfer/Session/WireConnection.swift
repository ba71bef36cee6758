import Sluice

/// What a `WireConnection` tells the session that owns it.
protocol WireConnectionOwner: AnyObject {
    /// Parse and consume what is complete in `connection.inbound` (called by `deliver`, never
    /// re-entrantly).
    func wireReceived(_ connection: WireConnection)
    /// `connection.outbound` has room and the socket has space: append more if there is any.
    func wireCanSend(_ connection: WireConnection)
    /// The peer closed its sending direction (after everything it sent was handed over).
    func wirePeerClosed(_ connection: WireConnection)
    /// A stream failed (reset, refused, timed out): the connection is unusable.
    func wireFailed(_ connection: WireConnection, _ error: SluiceError)
    /// The size `connection.inbound` should have now, or nil to leave it as it is. Asked
    /// before each read; the buffer changes size once nothing in it is lent and what it holds
    /// fits.
    func wireInboundCapacity(_ connection: WireConnection) -> Int?
}

extension WireConnectionOwner {
    func wireInboundCapacity(_ connection: WireConnection) -> Int? { nil }
}

/// One connection of the transfer protocol: a read and a write stream on a loop, an inbound
/// buffer the owner parses and an outbound buffer the owner fills, moved under the seeds'
/// backpressure rule:
///
/// - `hasBytesAvailable` is answered with one read into `inbound` while it has room and the
///   outbound backlog is below `pauseReadingAbove`; otherwise the offer is remembered and the
///   read happens when room comes (the peer's TCP window closes meanwhile).
/// - `hasSpaceAvailable` with nothing to write sets the pending-write flag; `flush()` writes
///   at once when the flag is set, so no offer is lost.
/// - An optional rate limit (a token bucket on the loop's timers) paces the writes.
///
/// Memory is the two buffers: the outbound one fixed at creation, the inbound one sized by the
/// owner (`wireInboundCapacity`), and what the owner lends (`sendLent`): a frame written from
/// its owner's memory, not copied into `outbound`.
final class WireConnection: ByteStreamDelegate {
    let input: ReadStream
    let output: WriteStream
    /// What was read and not yet parsed. Replaced by `spareInbound` when bytes lent from it
    /// keep it from taking more (see `swapInbound`): read it anew each time, never keep it.
    private(set) var inbound: ByteBuffer
    let outbound: ByteBuffer
    weak var owner: WireConnectionOwner?
    /// Stop reading while more than this many bytes wait to be written.
    var pauseReadingAbove: Int
    /// Bytes written to the socket.
    private(set) var bytesWritten: UInt64 = 0
    /// Bytes read from the socket.
    private(set) var bytesRead: UInt64 = 0
    /// How far the connection is from closed: open, its peer closed, closing, closed.
    private(set) var lifecycle = ConnectionLifecycle()
    /// True once `close()` ran.
    var isClosed: Bool { lifecycle.isClosed }
    /// The peer closed its sending direction (everything it sent is in `inbound`), and the
    /// connection was not asked to close.
    var peerHasClosed: Bool { lifecycle.peerHasClosed }
    /// Called once when the connection closes.
    var onClose: (() -> Void)?
    /// Time of the last read or write, for idle timeouts.
    private(set) var lastActivity = monotonicNanoseconds()

    /// A `hasBytesAvailable` offer not yet answered with a read.
    private var readOffered = false
    /// The pending-write flag: `hasSpaceAvailable` offered and nothing written since.
    private var writeOffered = BackpressureFlag()
    private var flushing = false
    private var delivering = false
    private var deliverAgain = false
    private var loop: EventLoop?
    /// Messages sent while this is set are written at the end of the loop's turn rather than
    /// at once: a receiver answering many small files, each as a worker finishes it, then
    /// answers them in one write (and wakes its peer once) instead of one each.
    var coalescesSends = false
    /// While set, `send` only appends: its owner writes everything with one `flush` once it has
    /// sent what it had to (`corking`). A sender's CHECKs for a second `--sync` went out one
    /// `sendto` each, 10,000 of them for a tree of 10,000 unchanged files.
    private(set) var corked = false
    /// Bytes of `outbound` from this offset on are held back, not written yet (a BATCH whose
    /// length is not known until it is closed): set by `hold`, cleared by `release`.
    private(set) var heldFrom: Int?
    private var flushTimer: LoopTimer?

    /// The other of the two inbound buffers a connection that lends bytes reads into in turn:
    /// allocated the first time lent bytes fill `inbound`, of its size.
    private var spareInbound: ByteBuffer?

    private let rateLimit: Int?
    private var limiter: RateLimiter?

    /// Frames lent by the owner (`sendLent`), in order; each goes out after the `before` bytes
    /// of `outbound` that were appended ahead of it (and after the frames lent before it).
    private var lent: [(bytes: UnsafeRawBufferPointer, before: Int, done: () -> Void)] = []
    /// Bytes of `outbound` that go out before the last lent frame: the sum of `before`.
    private var outboundBeforeLent = 0
    /// Lent bytes not yet written.
    private(set) var lentBytes = 0
    /// Bytes waiting to be written: `outbound`'s and the lent frames'.
    var pendingBytes: Int { outbound.readableBytes + lentBytes }
    /// Nothing waits to be written.
    var isFlushed: Bool { outbound.isEmpty && lent.isEmpty }

    init(
        input: ReadStream, output: WriteStream, inboundCapacity: Int, outboundCapacity: Int, rateLimit: Int? = nil
    ) {
        self.input = input
        self.output = output
        inbound = ByteBuffer(capacity: inboundCapacity)
        outbound = ByteBuffer(capacity: outboundCapacity)
        pauseReadingAbove = outboundCapacity
        self.rateLimit = rateLimit
    }

    /// Schedules and opens both streams (those not open yet) on `loop`.
    func start(on loop: EventLoop) {
        self.loop = loop
        // Frames go out whole (a chunk, or a control message), so Nagle's coalescing gains
        // nothing, while it held each small message (FILE, ACCEPT, END, STORED) until the peer's
        // delayed ACK: 40 ms at a time on Linux, 90 ms per small file. Set on the socket under
        // a TLS stream too; streams that are not TCP ignore it.
        input.socketNoDelay = true
        limiter = rateLimit.map { rate in
            RateLimiter(bytesPerSecond: rate, loop: { [weak self] in self?.loop }) { [weak self] in self?.flush() }
        }
        input.delegate = self
        output.delegate = self
        input.schedule(on: loop)
        output.schedule(on: loop)
        if input.streamStatus == .notOpen { input.open() }
        if output.streamStatus == .notOpen { output.open() }
        for stream in [input as ByteStream, output] where stream.streamStatus == .error {
            fail(stream.streamError ?? SluiceError(.notOpen, operation: "open", subject: stream.name))
            return
        }
    }

    // MARK: Events

    func stream(_ stream: ByteStream, handle event: StreamEvent) {
        guard !isClosed else { return }
        switch event {
        case .hasBytesAvailable where lifecycle.drainsInput:
            drain()
        case .hasBytesAvailable:
            readOffered = true
            readIfAllowed()
        case .hasSpaceAvailable:
            writeOffered.set()
            flush()
        case .endEncountered where stream === input && lifecycle.drainsInput:
            // A stream that knows its end without a read (a bound pair, memory) reports it so,
            // rather than as bytes available: the drain ends here, not at the cut's timer.
            drain()
        case .endEncountered where stream === input:
            take(.peerEnded)
        case .errorOccurred:
            let error = stream.streamError ?? SluiceError(.system(.ioError), operation: "socket", subject: stream.name)
            fail(error)
        default:
            break
        }
    }

    // MARK: Reading

    /// Reads if an offer is waiting and there is room, and lets the owner parse.
    func readIfAllowed() {
        deliver()
    }

    /// Lets the owner parse what is buffered (`wireReceived`), then reads more while allowed,
    /// until neither moves. A call made while one runs (from inside the owner's parsing, or an
    /// event it causes) folds into the running one, so the owner never parses re-entrantly and
    /// no read moves the bytes it is looking at.
    func deliver() {
        if delivering {
            deliverAgain = true
            return
        }
        delivering = true
        defer { delivering = false }
        repeat {
            deliverAgain = false
            owner?.wireReceived(self)
            if isClosed { return }
            if readOnce() { deliverAgain = true }
        } while deliverAgain && !isClosed
    }

    /// One read if an offer is waiting and there is room; true when bytes arrived.
    private func readOnce() -> Bool {
        guard readOffered, lifecycle.reads, pendingBytes <= pauseReadingAbove else { return false }
        // No pointer into the buffer is held here: the owner has returned from parsing.
        resizeInbound()
        // The decoder streams DATA: any other message it may wait for the rest of is smaller.
        guard inbound.reserveForRead(partial: Wire.frameHeaderSize + Wire.maxControlPayload) || swapInbound() else {
            return false  // the owner has not consumed, or lent bytes are out: it will call again
        }
        readOffered = false
        switch input.tryReadFilling(into: inbound.tail) {
        case .processed(let n) where n > 0:
            inbound.produced(n)
            bytesRead += UInt64(n)
            lastActivity = monotonicNanoseconds()
            return true
        case .processed(0):
            take(.peerEnded)
        case .processed:
            fail(input.streamError ?? SluiceError(.system(.ioError), operation: "recv", subject: input.name))
        case .wouldBlock:
            break
        }
        return false
    }

    /// Gives `inbound` the size the owner wants now (`wireInboundCapacity`), if nothing in it
    /// is lent and what it holds fits; not while the owner is parsing. For an owner whose lent
    /// bytes came back: the buffer need not wait for the next read to change size.
    func fitInbound() {
        guard !delivering else { return }  // the read that follows does it
        resizeInbound()
    }

    /// When bytes lent to a worker keep `inbound` from taking more (they stay in place until
    /// they come back, so it can neither compact nor rewind), reading goes on into the spare
    /// buffer, which takes what was not yet parsed, while the worker writes the lent bytes
    /// out of the first: the read of the next megabyte overlaps the write of the last, in two
    /// buffers of the owner's size at most. False when there is nothing to gain (no loan out,
    /// or more than an eighth of the buffer not yet parsed: it would be copied, for a read of
    /// less; at half, a tree of small files copied a quarter of its bytes again this way, 6 %
    /// of the receiver's user time) or the spare still has loans of its own.
    private func swapInbound() -> Bool {
        guard inbound.lent > 0, inbound.readableBytes <= inbound.capacity / 8 else { return false }
        var next = spareInbound ?? ByteBuffer(capacity: inbound.capacity)
        if next.capacity != inbound.capacity { next = ByteBuffer(capacity: inbound.capacity) }
        guard next.lent == 0 else { return false }
        next.consume(next.readableBytes)
        next.append(inbound.readable)
        inbound.consume(inbound.readableBytes)
        spareInbound = inbound
        inbound = next
        return inbound.tailSpace > 0
    }

    private func resizeInbound() {
        guard let wanted = owner?.wireInboundCapacity(self), wanted != inbound.capacity else { return }
        inbound.resize(to: wanted)
        if spareInbound?.capacity != inbound.capacity { spareInbound = nil }
    }

    // MARK: Writing

    /// Appends a message to the outbound buffer and writes it if the socket has space. The
    /// owner keeps room for what it sends (it stops parsing while the buffer is nearly full);
    /// should a message still not fit, the connection fails rather than lose it.
    func send(_ bytes: [UInt8]) {
        guard !isClosed else { return }
        guard outbound.append(bytes) else {
            fail(
                SluiceError(
                    .limitExceeded, operation: "send", subject: output.name,
                    detail: "internal: outbound buffer full (\(outbound.capacity) bytes)"))
            return
        }
        guard !corked else { return }
        guard coalescesSends, let loop else { return flush() }
        guard flushTimer == nil else { return }
        flushTimer = loop.schedule(after: .zero) { [weak self] in
            guard let self else { return }
            flushTimer = nil
            flush()
        }
    }

    /// Sends the frame at `bytes` from where it is, after everything sent before it: the
    /// owner's memory (a chunk a worker read from a file, its header in front) goes to the
    /// socket, or is sealed into TLS records, without a copy into `outbound`. `done` runs on
    /// the loop once all of it is written, or when the connection closes: `bytes` stay the
    /// owner's until then. False (nothing taken) while bytes are held for a BATCH (`hold`):
    /// the owner copies then.
    func sendLent(_ bytes: UnsafeRawBufferPointer, done: @escaping () -> Void) -> Bool {
        guard !isClosed, heldFrom == nil else { return false }
        guard !bytes.isEmpty else {
            done()
            return true
        }
        let before = outbound.readableBytes - outboundBeforeLent
        lent.append((bytes, before, done))
        outboundBeforeLent += before
        lentBytes += bytes.count
        return true
    }

    /// Runs `body` with `send` appending only, then writes what it sent at once (what is held
    /// for a BATCH excepted). Nested calls write once, at the end of the outermost.
    func corking(_ body: () -> Void) {
        guard !corked else { return body() }
        corked = true
        body()
        corked = false
        flush()
    }

    /// Holds back what is appended to `outbound` from now on, until `release`: the bytes before
    /// go out as usual.
    func hold() {
        heldFrom = outbound.readableBytes
    }

    /// Lets the held bytes go, and writes what the socket takes.
    func release() {
        heldFrom = nil
        flush()
    }

    /// Writes what is buffered while the socket takes it (asking the owner for more as the
    /// buffer empties), up to a bounded number of writes per call.
    func flush() {
        guard !isClosed, !flushing else { return }
        flushing = true
        defer { flushing = false }
        var writes = 0
        while writeOffered.isSet, !isClosed, writes < 8 {
            if outbound.readableBytes < outbound.capacity / 2 { owner?.wireCanSend(self) }
            guard !isClosed, !isFlushed else { break }
            // The next lent frame, once the bytes of `outbound` before it are out.
            let lending = lent.first.map { $0.before == 0 } ?? false
            let beforeLent = lent.first?.before ?? .max
            var allowed = lending ? lent[0].bytes.count : min(outbound.readableBytes, heldFrom ?? .max, beforeLent)
            guard allowed > 0 else { break }
            if let limiter {
                allowed = min(allowed, limiter.take(wanted: allowed))
                if allowed == 0 { return }
            }
            let slice =
                lending
                ? UnsafeRawBufferPointer(rebasing: lent[0].bytes[0..<allowed])
                : UnsafeRawBufferPointer(rebasing: outbound.readable[0..<allowed])
            switch output.tryWrite(from: slice) {
            case .processed(let n) where n > 0:
                writeOffered.take()
                if lending {
                    wroteLent(n)
                } else {
                    outbound.consume(n)
                    heldFrom? -= n
                    if !lent.isEmpty {
                        lent[0].before -= n
                        outboundBeforeLent -= n
                    }
                }
                bytesWritten += UInt64(n)
                lastActivity = monotonicNanoseconds()
                limiter?.spend(n)
                writes += 1
                // Accepted in full: the socket very likely takes more now.
                if n == allowed && rateLimit == nil { writeOffered.set() }
            case .processed(0):
                writeOffered.take()
            case .processed:
                fail(output.streamError ?? SluiceError(.system(.ioError), operation: "send", subject: output.name))
                return
            case .wouldBlock:
                writeOffered.take()
            }
        }
        if writeOffered.isSet && writes > 0 && pendingBytes > (heldFrom ?? 0) {
            // Bounded work per event: the stream was re-armed by the last write. (Only held
            // bytes left: the offer is kept, and `release` writes them at once.)
            writeOffered.take()
        }
        if pendingBytes <= pauseReadingAbove { readIfAllowed() }
        if isFlushed { take(.flushed) }
    }

    /// `n` bytes of the first lent frame were written: once all are, it goes back to its owner.
    private func wroteLent(_ n: Int) {
        lentBytes -= n
        let rest = lent[0].bytes.count - n
        guard rest == 0 else {
            lent[0].bytes = UnsafeRawBufferPointer(rebasing: lent[0].bytes[n...])
            return
        }
        lent.removeFirst().done()
    }

    // MARK: Ending

    /// Closes once everything buffered is written (reading stops now). With `drainingInput`,
    /// the sending direction is shut down then, and the connection closes once the peer has
    /// closed its own, what it sends meanwhile read and dropped (so that closing does not reset
    /// the connection under the last message: a peer that pipelines its requests would lose
    /// the answer to a reset; the owner bounds the wait). The first call decides.
    func closeAfterFlush(drainingInput: Bool = false) {
        readOffered = false
        take(.closeAfterFlush(drainingInput: drainingInput))
    }

    /// Moves the lifecycle by `event` and does what it says.
    private func take(_ event: ConnectionLifecycle.Event) {
        switch lifecycle.handle(event) {
        case .nothing, .ignore:
            break
        case .reportPeerClosed:
            owner?.wirePeerClosed(self)
        case .flush:
            if isFlushed { take(.flushed) } else { flush() }
        case .shutOutputAndDrain:
            output.close()
            drain()
        case .drain:
            drain()
        case .closeStreams:
            closeStreams()
        }
    }

    /// Reads and drops what the peer sends, until it closes (then closes too) or would block.
    /// Into a scratch buffer of its own: bytes of `inbound` may still be lent to a worker.
    private func drain() {
        guard !isClosed, isFlushed else { return }
        var scratch = [UInt8](repeating: 0, count: 16 << 10)
        let closes = scratch.withUnsafeMutableBytes { buffer in
            while true {
                switch input.tryRead(into: buffer) {
                case .processed(let n) where n > 0:
                    bytesRead += UInt64(n)
                case .processed:
                    return true
                case .wouldBlock:
                    return false
                }
            }
        }
        if closes { close() }
    }

    private func fail(_ error: SluiceError) {
        guard !isClosed else { return }
        // Held across `close()`: its `onClose` may drop the last other reference to the owner
        // (a receiver forgets a closed session), and the owner must still hear why.
        let owner = self.owner
        close()
        owner?.wireFailed(self, error)
    }

    /// Closes both streams and leaves the loop. Idempotent.
    func close() {
        take(.close)
    }

    /// Closes both streams, leaves the loop and runs `onClose`: once, as the lifecycle closes.
    private func closeStreams() {
        limiter?.cancel()
        flushTimer?.cancel()
        flushTimer = nil
        input.delegate = nil
        output.delegate = nil
        output.close()
        input.close()
        // What was lent goes back unwritten: the owners' memory is theirs again.
        let unwritten = lent
        lent.removeAll()
        lentBytes = 0
        outboundBeforeLent = 0
        for frame in unwritten { frame.done() }
        if let loop {
            input.remove(from: loop)
            output.remove(from: loop)
        }
        let closed = onClose
        onClose = nil
        closed?()
    }
}
