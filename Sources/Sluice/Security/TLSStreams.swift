#if canImport(Glibc)
    import Glibc
#endif

/// The connection is the core of its two TLS streams.
extension TLSConnection: StreamCore {
    func open(_ stream: ByteStream, side: StreamSide) throws(SluiceError) -> Bool { try open(stream) }
    func streamClosed(_ stream: ByteStream, side: StreamSide) { streamClosed(stream) }
    func attach(_ stream: ByteStream, side: StreamSide, to loop: EventLoop) { attach(to: loop) }
    func detach(_ stream: ByteStream, side: StreamSide) {}
    func left(_ stream: ByteStream, loop: EventLoop) { leftLoop() }

    func waitUntilReady(_ stream: ByteStream, side: StreamSide) throws(SluiceError) {
        switch side {
        case .reader: try waitUntilReadable()
        case .writer: try waitUntilWritable()
        }
    }

    func isReady(_ stream: ByteStream, side: StreamSide) -> Bool { side == .reader ? readerReady : writerReady }
    func property(_ key: StreamPropertyKey, of stream: ByteStream) -> Any? { property(key) }
}

/// The read stream of a TLS pair: decrypted bytes from the connection.
final class TLSReadStream: ReadStream {
    let connection: TLSConnection
    /// A failure met after some bytes were returned: reported by the next read.
    private var deferredFailure: SluiceError?

    init(connection: TLSConnection, name: String) {
        self.connection = connection
        super.init(name: name, core: connection)
    }

    override func readPrimitive(_ buffer: UnsafeMutableRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        if let deferredFailure { throw deferredFailure }
        guard let engine = connection.engine else { throw SluiceError(.notOpen, operation: "read", subject: name) }
        var total = 0
        while total < buffer.count {
            switch engine.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[total...])) {
            case .done(let n):
                total += n
            case .wantInput:
                if connection.pumpInput() { continue }
                connection.readNeedsCiphertext()
                return total > 0 ? .processed(total) : .wouldBlock
            case .wantOutput:
                if connection.flushOutput() { continue }
                return total > 0 ? .processed(total) : .wouldBlock
            case .closed:
                return .processed(total)
            case .failed(let error):
                let failure = connection.readFailure(error)
                if total == 0 { throw failure }
                deferredFailure = failure
                return .processed(total)
            }
        }
        // Reading can make bytes to send (an answer to the peer's KeyUpdate).
        if engine.outputPending > 0 { connection.flushOutput() }
        return .processed(total)
    }

    override var isReadyWithoutKernel: Bool { connection.readerReady || deferredFailure != nil }
}

/// The write stream of a TLS pair: bytes encrypted onto the connection. Closing it sends
/// close_notify.
final class TLSWriteStream: WriteStream {
    let connection: TLSConnection

    init(connection: TLSConnection, name: String) {
        self.connection = connection
        super.init(name: name, core: connection)
    }

    override func writePrimitive(_ buffer: UnsafeRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        guard let engine = connection.engine else { throw SluiceError(.notOpen, operation: "write", subject: name) }
        if let error = connection.outputError { throw error }
        connection.flushOutput()
        var total = 0
        writing: while total < buffer.count {
            switch engine.write(from: UnsafeRawBufferPointer(rebasing: buffer[total...])) {
            case .done(let n):
                total += n
            case .wantOutput:
                let before = engine.outputPending
                connection.flushOutput()
                if engine.outputPending >= before { break writing }
            case .wantInput:
                connection.pumpInput()
                break writing
            case .closed:
                throw SluiceError(.closed, operation: "write", subject: name)
            case .failed(let error):
                if total > 0 { break writing }
                throw connection.outputError ?? error
            }
        }
        connection.flushOutput()
        if total == 0, let error = connection.outputError { throw error }
        return total > 0 ? .processed(total) : .wouldBlock
    }

    override var isReadyWithoutKernel: Bool { connection.writerReady }
}
