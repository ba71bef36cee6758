#if canImport(Glibc)
    import Glibc
#endif

/// Sends files, directory trees and streams to a `TransferReceiver` over one connection.
///
/// ```swift
/// let sender = try TransferSender(paths: ["photos", "notes.txt"], options: TransferSendOptions(compress: true))
/// let (input, output) = Socket.connect(host: "backup.local", port: 9000, timeout: .seconds(10))
/// sender.start(input: input, output: output, on: loop) { summary in
///     print(summary.files, summary.bytes, summary.error as Any)
/// }
/// loop.run()
/// ```
///
/// A directory is sent under its base name with everything below it (`photos/…`), each
/// directory before its contents, empty ones included; symbolic links inside it are skipped
/// with a warning. Each file is announced with its size, mode and mtime; the receiver answers
/// with the offset to start from (non-zero when it holds part of the file from an interrupted
/// transfer and `resume` is on: the sender then hashes that prefix locally and sends the
/// rest), the data follows in frames of at most the chunk size (raw deflate per file with
/// `compress`), then the SHA-256 of the whole file. A file counts as stored only once the
/// receiver has verified and stored it and said so.
///
/// Memory stays within a few chunks whatever the file sizes: a chunk is read only when the
/// connection has taken the one before (the seeds' backpressure rule, with a pending-write
/// flag), and the rate limit paces the writes.
public final class TransferSender: WireConnectionOwner {
    public let options: TransferSendOptions
    /// Warnings found while listing the sources (skipped links and special files).
    public private(set) var warnings: [String] = []
    /// Called as each entry is answered by the receiver (or fails on this side).
    public var onFileResult: ((TransferFileResult) -> Void)?
    /// Called for problems that do not fail the transfer (compression not offered by the
    /// receiver).
    public var onWarning: ((String) -> Void)?

    private enum Phase {
        case idle
        case handshake(matched: Int)
        case helloWait
        /// Between files: the next entry may be announced.
        case ready
        /// A FILE header was sent; waiting for ACCEPT or an answer.
        case awaitingAccept
        /// Sending the current file's data.
        case sending
        case byeSent
        case done
    }

    private let entries: [OutgoingEntry]
    private var outcomes: [TransferOutcome?]
    private var sizes: [UInt64?]
    private var resumed: [UInt64]
    private var localFailures: [Int: String] = [:]
    private var phase = Phase.idle
    private var nextEntry = 0
    private var unanswered: [Int] = []
    private var current: OutgoingFile?
    private var connection: WireConnection?
    private var loop: EventLoop?
    private var completion: ((TransferSummary) -> Void)?
    private var started: UInt64 = 0
    private var peerCapabilities: Set<String> = []
    private var parsing = false
    private var deflate: Deflate?
    private var rawBuffer: ByteBuffer?
    /// Computes the files' SHA-256 on another core while the loop moves their bytes.
    private let hasher = DigestWorker()
    private lazy var sourceWatcher = SourceWatcher(self)

    private var bytesDone: UInt64 = 0
    private var bytesSentOfFiles: UInt64 = 0
    private var resumedBytes: UInt64 = 0

    /// A sender of `paths` (files and directories). Lists directories now: throws for a path
    /// that does not exist (`stat "x": No such file or directory (errno 2)`) or cannot be
    /// listed; `warning` hears about what is skipped.
    public convenience init(
        paths: [String], options: TransferSendOptions = TransferSendOptions(), warning: ((String) -> Void)? = nil
    ) throws(SluiceError) {
        try self.init(sources: paths.map { .path($0) }, options: options, warning: warning)
    }

    /// A sender of `sources`: paths and streams.
    public init(
        sources: [TransferSource], options: TransferSendOptions = TransferSendOptions(),
        warning: ((String) -> Void)? = nil
    ) throws(SluiceError) {
        self.options = options
        var warnings: [String] = []
        entries = try SourceTree.entries(sources) { text in
            warnings.append(text)
            warning?(text)
        }
        self.warnings = warnings
        outcomes = Array(repeating: nil, count: entries.count)
        sizes = entries.map(\.size)
        resumed = Array(repeating: 0, count: entries.count)
    }

    deinit { rawBuffer?.deallocate() }

    /// The entries to send, as relative paths (directories included).
    public var paths: [String] { entries.map(\.relative) }

    /// Where the transfer is now.
    public var progress: TransferProgress {
        let files = entries.indices.filter { !entries[$0].isDirectory }
        return TransferProgress(
            bytesDone: bytesDone, bytesTotal: sizes.reduce(0) { $0 + ($1 ?? 0) },
            bytesSent: connection?.bytesWritten ?? 0,
            filesDone: files.filter { outcomes[$0] != nil }.count, filesTotal: files.count,
            currentPath: current.map { entries[$0.index].relative },
            seconds: started == 0 ? 0 : Double(monotonicNanoseconds() - started) / 1e9)
    }

    /// Starts sending over the connection `input`/`output` (opened here if not open yet, e.g.
    /// straight from `Socket.connect`) on `loop`. Call on the loop's thread. `completion`
    /// runs once, with every entry's outcome.
    public func start(
        input: ReadStream, output: WriteStream, on loop: EventLoop, completion: @escaping (TransferSummary) -> Void
    ) {
        guard case .idle = phase else { preconditionFailure("a TransferSender runs once") }
        self.loop = loop
        self.completion = completion
        started = monotonicNanoseconds()
        let chunk = options.chunkSize.bytes
        let connection = WireConnection(
            input: input, output: output, inboundCapacity: 1 << 16,
            outboundCapacity: 4 * (chunk + Wire.frameHeaderSize) + 2 * Wire.maxControlPayload + 64,
            rateLimit: options.rateLimit)
        connection.owner = self
        self.connection = connection
        phase = .handshake(matched: 0)
        var capabilities = [Wire.Capability.sha256, Wire.Capability.deflate]
        if options.resume { capabilities.append(Wire.Capability.resume) }
        connection.outbound.append(Wire.magic + MessageWriter.hello(capabilities: capabilities))
        connection.start(on: loop)
    }

    /// Stops the transfer: the connection closes, and the summary's error is `.cancelled`. A
    /// file cut off this way is kept by the receiver for a later resume.
    public func cancel() {
        finish(SluiceError(.cancelled, operation: "send", subject: connection?.output.name))
    }

    // MARK: WireConnectionOwner

    func wireReceived(_ connection: WireConnection) {
        guard !parsing else { return }
        parsing = true
        parse()
        parsing = false
    }

    func wireCanSend(_ connection: WireConnection) {
        switch phase {
        case .sending: produce()
        case .ready: advance()
        case .idle, .handshake, .helloWait, .awaitingAccept, .byeSent, .done: break
        }
    }

    func wirePeerClosed(_ connection: WireConnection) {
        parse()
        if case .done = phase { return }
        finish(
            SluiceError(
                .truncatedData, operation: "send", subject: connection.output.name,
                detail: "the receiver closed the connection"))
    }

    func wireFailed(_ connection: WireConnection, _ error: SluiceError) {
        finish(error)
    }

    // MARK: Answers

    private func violation(_ reason: String) {
        guard let connection else { return }
        if !connection.isClosed { connection.send(MessageWriter.text(.error, reason)) }
        finish(SluiceError(.protocolViolation, operation: "send", subject: connection.output.name, detail: reason))
    }

    private func parse() {
        guard let connection else { return }
        while !isFinished {
            let available = connection.inbound.readableBytes
            if available == 0 { return }
            if case .handshake(let matched) = phase {
                guard let seen = Wire.consumeMagic(from: &connection.inbound, matched: matched) else {
                    violation("wrong magic: not a sluice receiver")
                    return
                }
                phase = seen == Wire.magic.count ? .helloWait : .handshake(matched: seen)
                continue
            }
            guard available >= Wire.frameHeaderSize else { return }
            var reader = MessageReader(connection.inbound.readable)
            let typeByte = reader.u8()!
            let length = Int(reader.u32()!)
            guard let type = Wire.MessageType(rawValue: typeByte) else {
                violation("unknown message type 0x\(String(typeByte, radix: 16))")
                return
            }
            guard length <= type.maxPayload, type != .data else {
                violation("\(type) message of \(length) bytes is not allowed here")
                return
            }
            guard available >= Wire.frameHeaderSize + length else { return }
            let payload = Array(
                connection.inbound.readable[Wire.frameHeaderSize..<Wire.frameHeaderSize + length])
            connection.inbound.consume(Wire.frameHeaderSize + length)
            payload.withUnsafeBytes { handle(type, $0) }
        }
    }

    private var isFinished: Bool {
        if case .done = phase { return true }
        return false
    }

    private func handle(_ type: Wire.MessageType, _ payload: UnsafeRawBufferPointer) {
        switch (phase, type) {
        case (.helloWait, .hello):
            guard let (version, capabilities) = MessageReader.hello(payload), version >= 1 else {
                violation("malformed HELLO")
                return
            }
            guard capabilities.contains(Wire.Capability.sha256) else {
                violation("no common digest (sha256 required)")
                return
            }
            peerCapabilities = capabilities
            if options.compress && !capabilities.contains(Wire.Capability.deflate) {
                warn("the receiver does not accept compressed data: sending uncompressed")
            }
            phase = .ready
            advance()
        case (.awaitingAccept, .accept):
            guard let file = current, unanswered == [file.index], payload.count == 8 else {
                violation("unexpected ACCEPT")
                return
            }
            var reader = MessageReader(payload)
            let offset = reader.u64()!
            guard offset == 0 || (file.resumable && offset <= (file.size ?? 0)) else {
                violation("ACCEPT offset \(offset) out of range")
                return
            }
            startData(file, offset: offset)
        case (_, .stored), (_, .refused), (_, .failed):
            guard !unanswered.isEmpty else {
                violation("an answer for no entry")
                return
            }
            let index = unanswered.removeFirst()
            var reader = MessageReader(payload)
            let outcome: TransferOutcome
            switch type {
            case .stored:
                if let file = current, file.index == index, case .sending = phase {
                    violation("STORED before the end of the file")
                    return
                }
                outcome = .stored
            case .refused:
                guard let _ = reader.u8() else {
                    violation("malformed REFUSED")
                    return
                }
                outcome = .refused(reason: Wire.printable(reader.rest()))
            default:
                guard let code = reader.u8() else {
                    violation("malformed FAILED")
                    return
                }
                let reason = Wire.printable(reader.rest())
                if let local = localFailures[index] {
                    outcome = .failed(reason: local, kind: .io)
                } else {
                    outcome = .failed(reason: reason, kind: code == Wire.FailureCode.data.rawValue ? .data : .io)
                }
            }
            settle(index, outcome)
            if let file = current, file.index == index {
                // Refused at the header, or answered early while its data was going out.
                let wasSending: Bool
                if case .sending = phase { wasSending = true } else { wasSending = false }
                closeCurrent()
                phase = .ready
                if wasSending { connection?.send(MessageWriter.text(.abort, "answered by the receiver")) }
                advance()
            }
        case (.byeSent, .bye):
            guard unanswered.isEmpty else {
                violation("goodbye with entries unanswered")
                return
            }
            finish(nil)
        case (_, .error):
            let reason = Wire.printable(Array(payload))
            finish(
                SluiceError(
                    .refused, operation: "send", subject: connection?.output.name, detail: "receiver: \(reason)"))
        default:
            violation("unexpected \(type) message")
        }
    }

    private func settle(_ index: Int, _ outcome: TransferOutcome) {
        outcomes[index] = outcome
        onFileResult?(result(index))
    }

    private func result(_ index: Int) -> TransferFileResult {
        TransferFileResult(
            path: entries[index].relative, isDirectory: entries[index].isDirectory, size: sizes[index],
            resumedBytes: resumed[index], outcome: outcomes[index] ?? .failed(reason: "not answered", kind: .io))
    }

    private func warn(_ text: String) {
        warnings.append(text)
        onWarning?(text)
    }

    // MARK: Entries

    /// Announces entries while between files: directories go out without waiting; a file
    /// waits for its ACCEPT. After the last entry, says goodbye.
    private func advance() {
        guard let connection else { return }
        while case .ready = phase, !connection.isClosed {
            guard connection.outbound.freeSpace >= 2 * Wire.maxControlPayload else { return }
            guard nextEntry < entries.count else {
                phase = .byeSent
                connection.send(MessageWriter.message(.bye))
                return
            }
            let index = nextEntry
            nextEntry += 1
            let entry = entries[index]
            let path = Array(entry.relative.utf8)
            switch entry.kind {
            case .directory:
                let header = EntryHeader(
                    mode: entry.mode, mtimeSeconds: entry.mtimeSeconds, mtimeNanoseconds: entry.mtimeNanoseconds,
                    path: path)
                unanswered.append(index)
                connection.send(MessageWriter.entry(.directory, header))
            case .file(let localPath):
                guard let file = openFile(index, localPath) else { continue }
                announce(file, path: path)
            case .stream(let stream):
                let file = OutgoingFile(
                    index: index, fd: nil, stream: stream, size: nil, mode: entry.mode,
                    mtimeSeconds: entry.mtimeSeconds, mtimeNanoseconds: entry.mtimeNanoseconds, resumable: false)
                stream.delegate = sourceWatcher
                if let loop { stream.schedule(on: loop) }
                if stream.streamStatus == .notOpen { stream.open() }
                announce(file, path: path)
            }
        }
    }

    /// Opens a file to send; on failure the entry fails here and is not announced.
    private func openFile(_ index: Int, _ path: String) -> OutgoingFile? {
        let opened = Sluice.openFile(path, flags: O_RDONLY | O_NOFOLLOW | O_CLOEXEC, permissions: 0)
        let fd: Int32
        switch opened {
        case .success(let descriptor): fd = descriptor
        case .failure(let error):
            settle(index, .failed(reason: error.description, kind: .io))
            return nil
        }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else {
            closeDescriptor(fd)
            settle(index, .failed(reason: "open \(quoted(path)): not a regular file any more", kind: .io))
            return nil
        }
        sizes[index] = UInt64(st.st_size)
        return OutgoingFile(
            index: index, fd: fd, stream: nil, size: UInt64(st.st_size), mode: UInt32(st.st_mode & 0o7777),
            mtimeSeconds: Int64(st.st_mtim.tv_sec), mtimeNanoseconds: UInt32(st.st_mtim.tv_nsec),
            resumable: options.resume && peerCapabilities.contains(Wire.Capability.resume))
    }

    private func announce(_ file: OutgoingFile, path: [UInt8]) {
        var flags: UInt8 = 0
        if file.size != nil { flags |= Wire.FileFlags.sizeKnown }
        if options.compress && peerCapabilities.contains(Wire.Capability.deflate) {
            flags |= Wire.FileFlags.compressed
            file.compressed = true
        }
        if file.resumable { flags |= Wire.FileFlags.resumable }
        let header = EntryHeader(
            flags: flags, size: file.size ?? 0, mode: file.mode, mtimeSeconds: file.mtimeSeconds,
            mtimeNanoseconds: file.mtimeNanoseconds, path: path)
        current = file
        unanswered.append(file.index)
        phase = .awaitingAccept
        connection?.send(MessageWriter.entry(.file, header))
    }

    /// ACCEPT arrived: hash the prefix the receiver holds, then send the rest.
    private func startData(_ file: OutgoingFile, offset: UInt64) {
        if offset > 0, let fd = file.fd {
            guard hasher.update(file.digest, readingPrefixOf: fd, length: offset) else {
                abortCurrent("read \(quoted(localPath(file))): \(Errno.current)")
                return
            }
            file.position = offset
            resumed[file.index] = offset
            resumedBytes += offset
            bytesDone += offset
        }
        if file.compressed {
            if let deflate {
                deflate.reset()
            } else {
                deflate = try? Deflate(format: .deflate, level: options.compressionLevel)
            }
            if rawBuffer == nil { rawBuffer = ByteBuffer(capacity: options.chunkSize.bytes) }
        }
        phase = .sending
        connection?.flush()
        produce()
    }

    private func localPath(_ file: OutgoingFile) -> String {
        if case .file(let path) = entries[file.index].kind { return path }
        return entries[file.index].relative
    }

    // MARK: Data

    private enum ReadResult {
        case bytes(Int)
        case end
        case wait
        case failed(String)
    }

    /// Reads the next bytes of the current file into `buffer`.
    private func readSource(_ file: OutgoingFile, into buffer: UnsafeMutableRawBufferPointer) -> ReadResult {
        if let fd = file.fd {
            let size = file.size ?? 0
            guard file.position < size else { return .end }
            let want = Int(min(UInt64(buffer.count), size - file.position))
            let position = off_t(file.position)
            let result = Result { () throws(SluiceError) in
                try syscallValue("read", localPath(file)) { pread(fd, buffer.baseAddress, want, position) }
            }
            switch result {
            case .success(0):
                return .failed("read \(quoted(localPath(file))): the file shrank while being sent")
            case .success(let n):
                return .bytes(n)
            case .failure(let error):
                return .failed(error.description)
            }
        }
        guard let stream = file.stream else { return .end }
        guard file.streamReadable else { return .wait }
        file.streamReadable = false
        switch stream.tryRead(into: buffer) {
        case .processed(let n) where n > 0: return .bytes(n)
        case .processed(0): return .end
        case .processed:
            let error = stream.streamError ?? SluiceError(.system(.ioError), operation: "read", subject: stream.name)
            return .failed(error.description)
        case .wouldBlock: return .wait
        }
    }

    /// Appends DATA frames of the current file until about a chunk waits to be written (so
    /// reads and socket writes alternate chunk by chunk, as in a copy pipeline, rather than in
    /// bursts that leave the receiver idle); at the end of the file, appends END.
    private func produce() {
        guard case .sending = phase, let file = current, let connection else { return }
        let chunk = options.chunkSize.bytes
        while case .sending = phase, current === file, connection.outbound.readableBytes < chunk,
            connection.outbound.reserve(chunk + Wire.frameHeaderSize + 64)
        {
            let frameStart = connection.outbound.writeIndex
            let payload = UnsafeMutableRawBufferPointer(
                rebasing: connection.outbound.tail[Wire.frameHeaderSize..<Wire.frameHeaderSize + chunk])
            var produced = 0
            if file.compressed, let deflate, var raw = rawBuffer {
                if raw.isEmpty && !file.sourceEnded {
                    let target = raw.tail
                    switch readSource(file, into: target) {
                    case .bytes(let n):
                        raw.produced(n)
                        noteRead(file, UnsafeRawBufferPointer(rebasing: target[0..<n]))
                    case .end: file.sourceEnded = true
                    case .wait:
                        rawBuffer = raw
                        return
                    case .failed(let reason):
                        rawBuffer = raw
                        abortCurrent(reason)
                        return
                    }
                }
                let step: Result<StageProgress, SluiceError>
                if !raw.isEmpty {
                    step = Result { () throws(SluiceError) in try deflate.process(raw.readable, into: payload) }
                } else {
                    step = Result { () throws(SluiceError) in try deflate.finish(into: payload) }
                }
                guard case .success(let progress) = step else {
                    rawBuffer = raw
                    abortCurrent("deflate failed")
                    return
                }
                raw.consume(progress.consumed)
                rawBuffer = raw
                produced = progress.produced
                if progress.finished { file.compressionFinished = true }
            } else {
                switch readSource(file, into: payload) {
                case .bytes(let n):
                    produced = n
                    noteRead(file, UnsafeRawBufferPointer(rebasing: payload[0..<n]))
                case .end:
                    file.sourceEnded = true
                case .wait:
                    return
                case .failed(let reason):
                    abortCurrent(reason)
                    return
                }
            }
            if produced > 0 {
                connection.outbound.setUInt8(Wire.MessageType.data.rawValue, at: frameStart)
                connection.outbound.setUInt32(UInt32(produced), at: frameStart + 1)
                connection.outbound.produced(Wire.frameHeaderSize + produced)
            }
            if file.sourceEnded && (!file.compressed || file.compressionFinished) {
                endCurrent()
                return
            }
        }
    }

    private func noteRead(_ file: OutgoingFile, _ bytes: UnsafeRawBufferPointer) {
        hasher.update(file.digest, bytes)
        file.position += UInt64(bytes.count)
        bytesDone += UInt64(bytes.count)
        bytesSentOfFiles += UInt64(bytes.count)
    }

    /// The file's bytes are all out: END with the size and SHA-256, then the next entry.
    private func endCurrent() {
        guard let file = current, let connection else { return }
        if file.size == nil { sizes[file.index] = file.position }
        // The state changes before the send: sending may flush, which asks for more data.
        closeCurrent()
        phase = .ready
        connection.send(MessageWriter.end(size: file.position, digest: hasher.finalize(file.digest)))
        advance()
    }

    /// The file cannot be read: ABORT it (the receiver answers FAILED) and go on.
    private func abortCurrent(_ reason: String) {
        guard let file = current, let connection else { return }
        localFailures[file.index] = reason
        closeCurrent()
        phase = .ready
        connection.send(MessageWriter.text(.abort, reason))
        advance()
    }

    private func closeCurrent() {
        guard let file = current else { return }
        current = nil
        if let fd = file.fd { closeDescriptor(fd) }
        if let stream = file.stream {
            stream.delegate = nil
            stream.close()
            if let loop { stream.remove(from: loop) }
        }
        if var raw = rawBuffer {
            raw.consume(raw.readableBytes)
            rawBuffer = raw
        }
    }

    /// The stream being sent has bytes (or its end, or an error).
    fileprivate func sourceReady(_ stream: ByteStream, _ event: StreamEvent) {
        guard let file = current, file.stream === stream else { return }
        switch event {
        case .hasBytesAvailable, .endEncountered, .errorOccurred:
            file.streamReadable = true
            if case .sending = phase {
                connection?.flush()
                produce()
            }
        default:
            break
        }
    }

    // MARK: Ending

    private func finish(_ error: SluiceError?) {
        if case .done = phase { return }
        phase = .done
        closeCurrent()
        if let connection {
            if error == nil && connection.outbound.isEmpty == false {
                connection.closeAfterFlush()
            } else {
                connection.close()
            }
        }
        for index in entries.indices where outcomes[index] == nil {
            let reason = "not transferred: " + (error?.description ?? "no answer")
            outcomes[index] = .failed(reason: reason, kind: .io)
        }
        let stored = entries.indices.filter { outcomes[$0] == .stored }
        let summary = TransferSummary(
            files: stored.filter { !entries[$0].isDirectory }.count,
            directories: stored.filter { entries[$0].isDirectory }.count,
            bytes: bytesSentOfFiles, bytesSent: connection?.bytesWritten ?? 0, resumedBytes: resumedBytes,
            seconds: started == 0 ? 0 : Double(monotonicNanoseconds() - started) / 1e9,
            results: entries.indices.map(result), error: error)
        let done = completion
        completion = nil
        done?(summary)
    }
}

/// The state of the file being sent.
final class OutgoingFile {
    let index: Int
    let fd: Int32?
    let stream: ReadStream?
    let size: UInt64?
    let mode: UInt32
    let mtimeSeconds: Int64
    let mtimeNanoseconds: UInt32
    let resumable: Bool
    let digest = SHA256Digest()
    var compressed = false
    /// Bytes read from the source (the resumed prefix included).
    var position: UInt64 = 0
    var sourceEnded = false
    var compressionFinished = false
    /// For a stream: `hasBytesAvailable` came and no read has answered it yet.
    var streamReadable = false

    init(
        index: Int, fd: Int32?, stream: ReadStream?, size: UInt64?, mode: UInt32, mtimeSeconds: Int64,
        mtimeNanoseconds: UInt32, resumable: Bool
    ) {
        self.index = index
        self.fd = fd
        self.stream = stream
        self.size = size
        self.mode = mode
        self.mtimeSeconds = mtimeSeconds
        self.mtimeNanoseconds = mtimeNanoseconds
        self.resumable = resumable
    }
}

/// Receives the events of a stream being sent, for its sender.
private final class SourceWatcher: ByteStreamDelegate {
    weak var sender: TransferSender?

    init(_ sender: TransferSender) { self.sender = sender }

    func stream(_ stream: ByteStream, handle event: StreamEvent) {
        sender?.sourceReady(stream, event)
    }
}
