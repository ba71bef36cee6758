import CCrypto

/// The socket end of a `TLSEngine` that moves its own ciphertext: an OpenSSL BIO whose reads
/// and writes are the socket streams' non-blocking `tryRead`/`tryWrite` (so all socket I/O
/// stays in sluice's syscall wrapper).
///
/// Reading, OpenSSL takes records straight from the socket into its record buffer (read-ahead:
/// the rest of a record and the start of the next in one `recv`), where it decrypts them: no
/// copy through a BIO pair. Writing, records are gathered here (`pending`, bounded) and sent in
/// writes of `sendAbove` bytes or more: OpenSSL writes one record (16 KiB) per BIO call, and on
/// a loaded 2-core machine a `send` per record (and a wake-up of the peer per record) costs
/// more than the copy (issue 52, Benchmarks/RESULTS.md). A record is taken whole or not at all,
/// so OpenSSL never holds a half-sent one that would tie the next write to the same bytes.
final class TLSSocketTransport {
    /// The socket's streams.
    let reader: ReadStream
    let writer: WriteStream
    /// The socket may have bytes to read (cleared when a read would block).
    var readable = true
    /// The socket's reading end is over: end of file, or an error (`inputError`).
    private(set) var ended = false
    /// Whether any ciphertext came from the peer.
    private(set) var heardFromPeer = false
    /// The last read needed ciphertext the socket did not have: cleared by the next bytes.
    var awaitingCiphertext = false
    private(set) var inputError: SluiceError?
    private(set) var outputError: SluiceError?
    /// Ciphertext OpenSSL handed over that the socket has not taken yet, from `pendingStart`.
    private var pending: [UInt8] = []
    private var pendingStart = 0
    /// The most `pending` holds: beyond it a write asks OpenSSL to retry.
    static let pendingLimit = 256 * 1024
    /// `pending` is sent once it holds this much (and whenever a write of the stream ends).
    static let sendAbove = 128 * 1024
    /// The largest TLS 1.3 record OpenSSL writes: 16 KiB of plaintext, its content type, the
    /// tag and the header, with room to spare.
    static let largestRecord = 16384 + 256 + 5

    init(reader: ReadStream, writer: WriteStream) {
        self.reader = reader
        self.writer = writer
    }

    /// The socket's writing end failed (an error event): nothing more is sent.
    func failOutput(_ error: SluiceError) {
        if outputError == nil { outputError = error }
    }

    /// Bytes of ciphertext waiting to be sent.
    var pendingCount: Int { pending.count - pendingStart }

    /// Sends what is pending until the socket would block. True when nothing is left.
    @discardableResult
    func flush() -> Bool {
        if pending.isEmpty { return true }
        while pendingStart < pending.count {
            if outputError != nil { return false }
            let n = pending.withUnsafeBytes { whole in
                send(UnsafeRawBufferPointer(rebasing: whole[pendingStart...]))
            }
            if n == 0 { return false }
            pendingStart += n
        }
        pending.removeAll(keepingCapacity: true)
        pendingStart = 0
        return true
    }

    /// One write to the socket: the bytes it took (0 when it would block or failed).
    private func send(_ bytes: UnsafeRawBufferPointer) -> Int {
        switch writer.tryWrite(from: bytes) {
        case .processed(let n) where n > 0:
            return n
        case .wouldBlock:
            return 0
        case .processed:
            outputError = writer.streamError ?? SluiceError(.closed, operation: "send", subject: writer.name)
            return 0
        }
    }

    /// What the BIO does with a record OpenSSL writes.
    enum WriteOutcome {
        /// Sent, or the rest kept in `pending`: OpenSSL counts it written.
        case taken
        /// Nothing taken: OpenSSL keeps the record and reports that it wants to write.
        case retry
        case failed
    }

    /// Whether the writer may encrypt another record: one more fits in `pending`.
    var hasRoom: Bool { pendingCount + Self.largestRecord <= Self.pendingLimit }

    /// Takes `bytes` (one record, or a few during the handshake) into `pending`, sent once it
    /// holds `sendAbove` bytes (or when the writer is done, `flush`); `.retry` if it is full.
    func write(_ bytes: UnsafeRawBufferPointer) -> WriteOutcome {
        if outputError != nil { return .failed }
        if pendingCount + bytes.count > Self.pendingLimit { flush() }
        if outputError != nil { return .failed }
        guard pendingCount + bytes.count <= Self.pendingLimit else { return .retry }
        if pendingStart > 0 && pending.count + bytes.count > Self.pendingLimit {
            // What the socket took is at the front: move the rest down (within the limit).
            pending.removeSubrange(0..<pendingStart)
            pendingStart = 0
        }
        pending.append(contentsOf: bytes)
        if pendingCount >= Self.sendAbove { flush() }
        return .taken
    }

    /// What a read from the socket gave OpenSSL.
    enum ReadOutcome {
        case bytes(Int)
        case wouldBlock
        /// End of file, or an error (`inputError`): no more ciphertext.
        case ended
    }

    /// Reads ciphertext into `buffer` (OpenSSL's record buffer).
    func read(into buffer: UnsafeMutableRawBufferPointer) -> ReadOutcome {
        if ended { return .ended }
        guard readable else { return .wouldBlock }
        switch reader.tryRead(into: buffer) {
        case .processed(let n) where n > 0:
            heardFromPeer = true
            awaitingCiphertext = false
            return .bytes(n)
        case .processed(let n):
            if n < 0 { inputError = reader.streamError ?? SluiceError(.system(.ioError), operation: "recv") }
            ended = true
            readable = false
            awaitingCiphertext = false
            return .ended
        case .wouldBlock:
            readable = false
            return .wouldBlock
        }
    }

    /// A BIO for `SSL_set_bio` whose reads and writes are this transport's (the BIO holds it
    /// unretained: the engine keeps it alive as long as the `SSL` that owns the BIO). Nil if
    /// OpenSSL could not make one.
    func makeBIO() -> OpaquePointer? {
        guard let method = Self.method, let bio = BIO_new(method) else { return nil }
        BIO_set_data(bio, Unmanaged.passUnretained(self).toOpaque())
        BIO_set_init(bio, 1)
        return bio
    }

    /// The BIO method, made once.
    private nonisolated(unsafe) static let method: OpaquePointer? = {
        guard let method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "sluice socket") else {
            return nil
        }
        _ = BIO_meth_set_write_ex(method) { bio, data, length, written in
            written?.pointee = 0
            guard let transport = TLSSocketTransport.calling(bio) else { return 0 }
            switch length > 0 ? transport.write(UnsafeRawBufferPointer(start: data, count: length)) : .taken {
            case .taken: written?.pointee = length
            case .retry: BIO_set_flags(bio, BIO_FLAGS_WRITE | BIO_FLAGS_SHOULD_RETRY)
            case .failed: break
            }
            return written?.pointee == length ? 1 : 0
        }
        _ = BIO_meth_set_read_ex(method) { bio, data, length, readBytes in
            readBytes?.pointee = 0
            guard length > 0, let transport = TLSSocketTransport.calling(bio) else { return 0 }
            switch transport.read(into: UnsafeMutableRawBufferPointer(start: data, count: length)) {
            case .bytes(let n): readBytes?.pointee = n
            case .wouldBlock: BIO_set_flags(bio, BIO_FLAGS_READ | BIO_FLAGS_SHOULD_RETRY)
            case .ended: break
            }
            return (readBytes?.pointee ?? 0) > 0 ? 1 : 0
        }
        _ = BIO_meth_set_ctrl(method) { bio, command, _, _ in
            switch command {
            case BIO_CTRL_FLUSH: return 1
            // OpenSSL asks after a read that gave nothing: the end of the peer's data.
            case BIO_CTRL_EOF: return bio.flatMap(TLSSocketTransport.of)?.ended == true ? 1 : 0
            default: return 0
            }
        }
        return method
    }()

    /// The transport of `bio`, its retry flags cleared for the call that begins.
    private static func calling(_ bio: OpaquePointer?) -> TLSSocketTransport? {
        guard let bio, let transport = of(bio) else { return nil }
        BIO_clear_flags(bio, BIO_FLAGS_READ | BIO_FLAGS_WRITE | BIO_FLAGS_IO_SPECIAL | BIO_FLAGS_SHOULD_RETRY)
        return transport
    }

    private static func of(_ bio: OpaquePointer) -> TLSSocketTransport? {
        guard let data = BIO_get_data(bio) else { return nil }
        return Unmanaged<TLSSocketTransport>.fromOpaque(data).takeUnretainedValue()
    }
}
