#if canImport(Glibc)
    import Glibc
#endif

extension StreamPropertyKey {
    /// The TLS version negotiated, as `String` (`TLSv1.3`); nil before the handshake is done.
    public static let tlsProtocol = StreamPropertyKey(rawValue: "tlsProtocol")
    /// The TLS cipher suite negotiated, as `String` (`TLS_AES_128_GCM_SHA256`).
    public static let tlsCipher = StreamPropertyKey(rawValue: "tlsCipher")
    /// The pin of the peer's certificate, as `TLSPin`, when it sent one.
    public static let tlsPeerPin = StreamPropertyKey(rawValue: "tlsPeerPin")
}

/// TLS 1.3 on stream pairs, in the NSStream model.
///
/// ```swift
/// let context = try TLSContext(settings)          // once; a listener shares it
/// let (input, output) = TLS.secure(Socket.connect(host: "example.org", port: 443), context: context)
/// input.delegate = self; output.delegate = self
/// input.schedule(on: loop); output.schedule(on: loop)
/// input.open(); output.open()   // connect, then handshake; openCompleted once it is done
/// ```
///
/// Events keep their meaning: `openCompleted` after the handshake (and the pin check);
/// `hasBytesAvailable` whenever decrypted bytes wait, even with an idle socket;
/// `hasSpaceAvailable` while the ciphertext buffer has room. `read` returns 0 only after the
/// peer's close_notify: a connection cut without one is an error (`.protocolViolation`,
/// "connection cut without close_notify"), never a clean end. Closing the write stream sends
/// close_notify and shuts down the sending direction; the read stream keeps working. A failed
/// authentication is `.authenticationFailed`; a handshake past `handshakeTimeout`, `.timedOut`.
public enum TLS {
    /// Secures `pair` (the two streams of one socket, not yet opened) with `context`. With
    /// security level `.none`, returns `pair` itself.
    public static func secure(
        _ pair: (ReadStream, WriteStream), context: TLSContext, level: StreamSocketSecurityLevel = .negotiatedSSL
    ) -> (ReadStream, WriteStream) {
        guard level == .negotiatedSSL else { return pair }
        let connection = TLSConnection(inner: pair, context: context)
        let reader = TLSReadStream(connection: connection, name: pair.0.name)
        let writer = TLSWriteStream(connection: connection, name: pair.1.name)
        connection.reader = reader
        connection.writer = writer
        return (reader, writer)
    }
}

extension TLS {
    /// Runs the TLS handshake of `pair` (the streams `secure` returned, neither opened yet) on
    /// `loop`, before the streams are used: `completion` gets nil once the peer has
    /// authenticated, or why it did not (the connection is closed then). A listener that
    /// serves only an authenticated client hands on the streams only after this, so a port
    /// scan or a peer without the key costs it nothing but one log line. Opening a stream of
    /// the pair afterwards completes at once (`openCompleted`).
    public static func handshake(
        _ pair: (ReadStream, WriteStream), on loop: EventLoop, completion: @escaping (SluiceError?) -> Void
    ) {
        guard let reader = pair.0 as? TLSReadStream else {
            return completion(pair.0.error(.invalidArgument, operation: "TLS handshake"))
        }
        reader.connection.handshake(on: loop, completion: completion)
    }

    /// Calls off the handshake `handshake(_:on:completion:)` runs for `pair`: its completion
    /// gets `.cancelled` and the connection is closed. Nothing once the handshake is over.
    public static func cancelHandshake(_ pair: (ReadStream, WriteStream)) {
        (pair.0 as? TLSReadStream)?.connection.cancelHandshake()
    }

    /// True while `stream`'s TLS connection, closed, still has ciphertext (its last bytes, the
    /// close_notify) to send: it sends it as the loop runs. A program about to stop its loop
    /// runs it on while this is true, or the peer sees a cut connection.
    public static func isDelivering(_ stream: ByteStream) -> Bool {
        switch stream {
        case let reader as TLSReadStream: return reader.connection.isLingering
        case let writer as TLSWriteStream: return writer.connection.isLingering
        default: return false
        }
    }
}

extension SocketListener {
    /// As `accept(on:handler:)`, handing out each connection secured with `context` (a server
    /// context): the streams handshake when opened.
    public func accept(on loop: EventLoop, context: TLSContext, handler: @escaping Socket.ConnectionHandler)
        throws(SluiceError)
    {
        try accept(on: loop) { input, output, peer in
            let (reader, writer) = TLS.secure((input, output), context: context)
            handler(reader, writer, peer)
        }
    }
}

/// Drives one `TLSEngine` over a socket's stream pair: moves ciphertext between the engine
/// and the socket streams (through their non-blocking reads and writes, so all socket I/O stays
/// in sluice's syscall wrapper), runs the handshake, and tells the TLS streams when they are
/// ready.
final class TLSConnection {
    enum State {
        case idle
        case handshaking
        case established
        case failed(SluiceError)
    }

    let inner: (reader: ReadStream, writer: WriteStream)
    let context: TLSContext
    weak var reader: TLSReadStream?
    weak var writer: TLSWriteStream?
    private(set) var state = State.idle
    private(set) var engine: TLSEngine?
    /// The socket may have bytes to read (cleared when a read would block).
    private var innerReadable = true
    /// The last read needed ciphertext that neither OpenSSL's buffers nor the socket had (a
    /// record only partly arrived): the reader waits on the socket, whatever OpenSSL holds,
    /// until more ciphertext comes. Without it a peer that stalls mid-record would keep the
    /// stream "ready" and the loop spinning.
    private var awaitingCiphertext = false
    private var inputError: SluiceError?
    private(set) var outputError: SluiceError?
    private var closeNotifySent = false
    private var writeSideClosing = false
    private var innerScheduled: EventLoop?
    private var timer: LoopTimer?
    /// Set while the connection outlives its streams to send its last bytes.
    private var lingering: TLSConnection?
    var isLingering: Bool { lingering != nil }

    init(inner: (ReadStream, WriteStream), context: TLSContext) {
        self.inner = (inner.0, inner.1)
        self.context = context
    }

    private var name: String { inner.reader.name }

    // MARK: Opening and the handshake

    /// `openPrimitive` of both TLS streams: true when the handshake is done.
    func open(_ stream: ByteStream) throws(SluiceError) -> Bool {
        switch state {
        case .established:
            return true
        case .failed(let error):
            throw error
        case .handshaking:
            if stream.loop != nil { return false }
            try finishHandshakePolling()
            return true
        case .idle:
            break
        }
        try begin(on: stream.loop)
        if stream.loop == nil {
            try finishHandshakePolling()
            return true
        }
        switch state {
        case .established: return true
        case .failed(let error): throw error
        case .idle, .handshaking: return false
        }
    }

    /// Called once the handshake that `handshake(on:completion:)` started is over.
    private var handshakeCompletion: ((SluiceError?) -> Void)?

    /// Runs the handshake on `loop` before either TLS stream is opened: `completion` gets nil
    /// once the peer is authenticated, or the failure (the socket is closed then). Opening a
    /// stream afterwards completes at once.
    func handshake(on loop: EventLoop, completion: @escaping (SluiceError?) -> Void) {
        guard case .idle = state else {
            if case .failed(let error) = state { return completion(error) }
            return completion(nil)
        }
        handshakeCompletion = completion
        do {
            try begin(on: loop)
        } catch {
            // `fail` reported it.
        }
    }

    /// Calls off a handshake `handshake(on:completion:)` started (its completion gets
    /// `.cancelled`, and the socket is closed); nothing once it is over.
    func cancelHandshake() {
        fail(SluiceError(.cancelled, operation: "TLS handshake", subject: name))
    }

    /// Starts the handshake: the engine, the socket's streams (scheduled on `loop`, if any, with
    /// the handshake's timer), and as much of the handshake as the bytes at hand allow.
    private func begin(on loop: EventLoop?) throws(SluiceError) {
        state = .handshaking
        do {
            engine = try TLSEngine(context: context, name: name)
        } catch {
            state = .handshaking
            fail(error)
            throw error
        }
        inner.reader.eventHandler = { [weak self] _, event in self?.innerReaderEvent(event) }
        inner.writer.eventHandler = { [weak self] _, event in self?.innerWriterEvent(event) }
        if let loop {
            scheduleInner(on: loop)
            timer = loop.schedule(after: context.settings.handshakeTimeout) { [weak self] in self?.timedOut() }
        }
        inner.reader.open()
        inner.writer.open()
        for side in [inner.reader as ByteStream, inner.writer] where side.streamStatus == .error {
            let error = side.streamError ?? SluiceError(.notOpen, operation: "open", subject: name)
            fail(error)
            throw error
        }
        if loop != nil && inner.reader.streamStatus == .open { driveHandshake() }
    }

    private func scheduleInner(on loop: EventLoop) {
        guard innerScheduled == nil else { return }
        innerScheduled = loop
        inner.reader.schedule(on: loop)
        inner.writer.schedule(on: loop)
    }

    /// Runs the handshake as far as the bytes at hand allow.
    private func driveHandshake() {
        guard case .handshaking = state, let engine else { return }
        guard inner.reader.streamStatus != .opening, inner.writer.streamStatus != .opening else { return }
        while true {
            let step = engine.handshake()
            let flushed = flushOutput()
            switch step {
            case .done:
                established()
                return
            case .wantInput:
                if let outputError { return fail(outputError) }
                if pumpInput() { continue }
                return
            case .wantOutput:
                if let outputError { return fail(outputError) }
                if flushed { continue }
                return
            case .closed:
                return fail(
                    SluiceError(
                        .protocolViolation, operation: "TLS handshake", subject: name,
                        detail: "the peer closed the connection during the handshake"))
            case .failed(let error):
                return fail(error.code == .authenticationFailed ? error : inputError ?? error)
            }
        }
    }

    /// Polling mode: drives the handshake, waiting on the socket with `poll`, until it is done,
    /// fails, or the handshake timeout passes.
    private func finishHandshakePolling() throws(SluiceError) {
        let deadline = monotonicNanoseconds() + context.settings.handshakeTimeout.nanoseconds
        while case .handshaking = state {
            driveHandshake()
            guard case .handshaking = state else { break }
            guard let fd = inner.reader.property(forKey: .fileDescriptor) as? Int32 else {
                fail(SluiceError(.notOpen, operation: "TLS handshake", subject: name))
                break
            }
            let now = monotonicNanoseconds()
            let wantsOutput = (engine?.outputPending ?? 0) > 0
            let events = Int16(wantsOutput ? POLLOUT : POLLIN)
            let milliseconds = now >= deadline ? 0 : Int32(clamping: (deadline - now + 999_999) / 1_000_000)
            do {
                if try pollDescriptor(fd, events: events, timeoutMilliseconds: milliseconds) == 0 {
                    timedOut()
                }
            } catch {
                fail(error)
            }
            innerReadable = true
        }
        if case .failed(let error) = state { throw error }
    }

    private func established() {
        timer?.cancel()
        timer = nil
        state = .established
        for stream in [reader as ByteStream?, writer] {
            if let stream, stream.streamStatus == .opening { stream.didOpen() }
        }
        let completion = handshakeCompletion
        handshakeCompletion = nil
        completion?(nil)
    }

    private func timedOut() {
        guard case .handshaking = state else { return }
        fail(
            SluiceError(
                .timedOut, operation: "TLS handshake", subject: name,
                detail: "no handshake within \(context.settings.handshakeTimeout)"))
    }

    /// The handshake failed: the opening streams fail, the alert (if any) goes out, and the
    /// socket is closed.
    private func fail(_ failure: SluiceError) {
        guard case .handshaking = state else { return }
        var error = failure
        if let engine, !engine.heardFromPeer, engine.context.settings.role == .client,
            failure.errno == .connectionReset || failure.errno == .brokenPipe
        {
            // Reset before a byte came back: turned away before TLS, as when the peer closes.
            error = TLSEngine.turnedAway(subject: name)
        }
        timer?.cancel()
        timer = nil
        state = .failed(error)
        _ = flushOutput()
        closeInner()
        for stream in [reader as ByteStream?, writer] {
            if let stream, stream.streamStatus == .opening { stream.fail(error) }
        }
        let completion = handshakeCompletion
        handshakeCompletion = nil
        completion?(error)
    }

    // MARK: Moving ciphertext

    /// Reads from the socket into the engine while it has room and the socket has bytes.
    /// Returns whether anything changed (bytes, the end, an error).
    @discardableResult
    func pumpInput() -> Bool {
        guard let engine, !engine.inputEnded else { return false }
        var progress = false
        while innerReadable {
            let space = engine.inputSpace()
            if space.isEmpty { break }
            switch inner.reader.tryRead(into: space) {
            case .processed(let n) where n > 0:
                engine.commitInput(n)
                awaitingCiphertext = false
                progress = true
            case .processed(let n):
                if n < 0 {
                    inputError = inner.reader.streamError ?? SluiceError(.system(.ioError), operation: "recv")
                }
                engine.endInput()
                innerReadable = false
                awaitingCiphertext = false
                return true
            case .wouldBlock:
                innerReadable = false
            }
        }
        return progress
    }

    /// Sends the engine's ciphertext until the socket would block. True when none is left.
    @discardableResult
    func flushOutput() -> Bool {
        guard let engine else { return true }
        while true {
            let out = engine.output()
            if out.isEmpty { return true }
            if outputError != nil { return false }
            switch inner.writer.tryWrite(from: out) {
            case .processed(let n) where n > 0:
                engine.consumeOutput(n)
            case .wouldBlock:
                return false
            case .processed:
                outputError =
                    inner.writer.streamError ?? SluiceError(.closed, operation: "send", subject: name)
                return false
            }
        }
    }

    // MARK: Socket events

    private func innerReaderEvent(_ event: StreamEvent) {
        if event.contains(.errorOccurred) || event.contains(.endEncountered) || event.contains(.hasBytesAvailable) {
            innerReadable = true
        }
        if event.contains(.errorOccurred) { pumpInput() }
        progressed()
    }

    private func innerWriterEvent(_ event: StreamEvent) {
        if event.contains(.errorOccurred) {
            outputError = inner.writer.streamError ?? SluiceError(.closed, operation: "send", subject: name)
        }
        if event.contains(.hasSpaceAvailable) { flushOutput() }
        progressed()
    }

    /// Something moved: go on with whatever waits for it.
    private func progressed() {
        switch state {
        case .handshaking:
            driveHandshake()
        case .established:
            if writeSideClosing { finishWriting() }
            reader?.signal()
            writer?.signal()
        case .idle, .failed:
            break
        }
    }

    // MARK: For the TLS streams

    var readerReady: Bool {
        guard case .established = state, let engine else { return false }
        return innerReadable || engine.inputEnded || (engine.plaintextPending && !awaitingCiphertext)
    }

    /// A read found no whole record and the socket had nothing more: wait for the socket.
    func readNeedsCiphertext() {
        awaitingCiphertext = true
    }

    var writerReady: Bool {
        guard case .established = state, let engine else { return false }
        return outputError != nil || engine.outputPending < TLSEngine.bufferSize / 2
    }

    /// Polling mode: waits until the socket is readable.
    func waitUntilReadable() throws(SluiceError) {
        if !innerReadable && !(engine?.inputEnded ?? true) { try inner.reader.waitUntilReadable() }
        innerReadable = true
    }

    /// Polling mode: waits until the socket takes more ciphertext.
    func waitUntilWritable() throws(SluiceError) {
        while !flushOutput() && outputError == nil {
            try inner.writer.waitUntilWritable()
        }
    }

    /// The failure to report for a read that failed in the engine: the socket's own error
    /// (a reset) when there was one.
    func readFailure(_ error: SluiceError) -> SluiceError {
        // The alert the record layer owes the peer for a record it refused, if the socket
        // takes it now (never waited for: the connection is failing).
        if engine?.outputPending ?? 0 > 0 { _ = flushOutput() }
        return error.code == .authenticationFailed ? error : inputError ?? error
    }

    func attach(to loop: EventLoop) {
        scheduleInner(on: loop)
    }

    /// A TLS stream left its loop (`remove(from:)`): the socket's streams follow once neither
    /// TLS stream is scheduled.
    func leftLoop() {
        guard lingering == nil, let loop = innerScheduled, reader?.loop == nil, writer?.loop == nil else { return }
        inner.reader.remove(from: loop)
        inner.writer.remove(from: loop)
        innerScheduled = nil
    }

    func property(_ key: StreamPropertyKey) -> Any? {
        switch key {
        case .tlsProtocol: return engine?.protocolName
        case .tlsCipher: return engine?.cipherName
        case .tlsPeerPin: return engine?.handshakeDone == true ? engine?.peerPin : nil
        case .fileDescriptor: return nil  // the descriptor carries ciphertext: not for the app
        default: return inner.reader.property(forKey: key)
        }
    }

    func setProperty(_ value: Any?, _ key: StreamPropertyKey) -> Bool {
        key == .fileDescriptor ? false : inner.reader.setProperty(value, forKey: key)
    }

    // MARK: Closing

    private func isActive(_ stream: ByteStream?) -> Bool {
        guard let stream else { return false }
        return stream.isOpenish || stream.streamStatus == .error
    }

    /// A TLS stream closed. The write side ending (closed, or never opened once the reader
    /// closes) sends close_notify; the socket closes after both, once its last bytes are sent.
    func streamClosed(_ stream: ByteStream) {
        let readerActive = isActive(reader)
        let writerActive = isActive(writer)
        switch state {
        case .idle, .failed:
            if !readerActive && !writerActive { closeInner() }
            return
        case .handshaking:
            let opening = [reader as ByteStream?, writer].contains { $0?.streamStatus == .opening }
            if !opening { fail(SluiceError(.closed, operation: "TLS handshake", subject: name)) }
            return
        case .established:
            break
        }
        if !writerActive && !closeNotifySent {
            closeNotifySent = true
            engine?.shutdown()
        }
        if !writerActive {
            writeSideClosing = true
            finishWriting()
        }
    }

    /// Sends what is left of the write side, then shuts the socket's write side down (and
    /// closes the socket once the reader is closed too). On a loop it waits for socket space
    /// (the connection keeps itself alive meanwhile); in polling mode it blocks.
    private func finishWriting() {
        var flushed = flushOutput()
        if !flushed && outputError == nil && innerScheduled == nil {
            while !flushed && outputError == nil {
                do { try inner.writer.waitUntilWritable() } catch { break }
                flushed = flushOutput()
            }
        }
        if flushed || outputError != nil {
            writeSideClosing = false
            inner.writer.close()
            if !isActive(reader) { closeInner() }
            lingering = nil
        } else {
            lingering = self
        }
    }

    /// Closes the socket. Bytes the peer sent that nobody will read (session tickets, say) are
    /// read and dropped first: closing with unread bytes would make the kernel send a reset,
    /// and the peer could lose the end of what we sent.
    private func closeInner() {
        timer?.cancel()
        timer = nil
        if inner.reader.streamStatus == .open {
            var scratch = [UInt8](repeating: 0, count: 16384)
            scratch.withUnsafeMutableBytes { buffer in
                for _ in 0..<64 {
                    guard case .processed(let n) = inner.reader.tryRead(into: buffer), n > 0 else { break }
                }
            }
        }
        inner.writer.close()
        inner.reader.close()
        lingering = nil
    }
}
