import CSluiceLinux

#if canImport(Glibc)
    import Glibc
#endif

/// Receives files and directories sent by `TransferSender`s into one directory, serving any
/// number of connections at once on one `EventLoop`, one session per connection.
///
/// ```swift
/// let receiver = try TransferReceiver(directory: "/srv/in", options: TransferReceiveOptions())
/// receiver.onSessionEnd = { report in print(report.peer, report.files, report.error as Any) }
/// let listener = try Socket.listen(port: 9000)
/// try receiver.accept(from: listener, on: loop)
/// loop.run()
/// ```
///
/// Each file is written under a temporary name next to its final name (`.NAME.sluice-part`),
/// its SHA-256 checked against the sender's, flushed (`fsync`), given the sender's mode and
/// mtime (`fchmod`, `futimens`), and renamed into place atomically — never replacing an
/// existing file unless `overwrite` is set (`renameat2(RENAME_NOREPLACE)`). Paths are walked
/// from a descriptor of the directory one component at a time without following links, so
/// nothing is ever written outside it. A connection that breaks the protocol, sends garbage
/// or goes silent ends alone; the others go on.
///
/// An interrupted file keeps its data under the temporary name, marked with the file's size
/// and mtime in the extended attribute `user.sluice.resume`; when the same file is sent
/// again, the receiver answers with the length held and the sender sends the rest. The
/// SHA-256 covers the whole file, held prefix included, so altered partial data is detected.
public final class TransferReceiver {
    /// The directory files are stored in, as given.
    public let directory: String
    public let options: TransferReceiveOptions
    /// Called when a connection ends, with what it did.
    public var onSessionEnd: ((TransferSessionReport) -> Void)?
    /// Called as sessions start, entries are answered, and on warnings.
    public var onEvent: ((TransferReceiverEvent) -> Void)?

    let destination: Destination
    private var sessions: [Int: ReceiverSession] = [:]
    private var nextID = 1
    private weak var listener: SocketListener?

    /// A receiver storing into `directory`, which must exist. Throws when it cannot be opened
    /// (`open "/srv/in": No such file or directory (errno 2)`).
    public init(directory: String, options: TransferReceiveOptions = TransferReceiveOptions()) throws(SluiceError) {
        self.directory = directory
        self.options = options
        destination = try Destination(path: directory)
    }

    /// Sessions in progress.
    public var activeSessions: Int { sessions.values.filter { !$0.isEnded }.count }

    /// Serves every connection `listener` accepts on `loop`.
    public func accept(from listener: SocketListener, on loop: EventLoop) throws(SluiceError) {
        self.listener = listener
        try listener.accept(on: loop) { [weak self] input, output, peer in
            self?.serve(input: input, output: output, peer: peer.description, on: loop)
        }
    }

    /// Serves one connection given as its two streams (opened here if not yet open). Returns
    /// the session's id.
    @discardableResult
    public func serve(input: ReadStream, output: WriteStream, peer: String, on loop: EventLoop) -> Int {
        let id = nextID
        nextID += 1
        let session = ReceiverSession(id: id, peer: peer, receiver: self, input: input, output: output, loop: loop)
        sessions[id] = session
        onEvent?(.sessionStarted(id: id, peer: peer))
        session.start()
        return id
    }

    /// Ends every session (interrupted files keep their partial data for a later resume).
    public func closeAllSessions() {
        for session in Array(sessions.values) {
            session.end(SluiceError(.cancelled, operation: "receive", subject: session.peer))
        }
    }

    func sessionEnded(_ session: ReceiverSession, report: TransferSessionReport) {
        onSessionEnd?(report)
    }

    /// The session's connection closed: the session can go.
    func sessionClosed(_ id: Int) {
        sessions[id] = nil
    }

    func emit(_ event: TransferReceiverEvent) { onEvent?(event) }
}

/// A file being received: its temporary file, digest and progress.
final class IncomingFile {
    let header: EntryHeader
    let relative: String
    let display: String
    let parent: Int32
    let name: String
    let temporary: String
    let fd: Int32
    let offset: UInt64
    let resumable: Bool
    let digest: SHA256Digest
    let inflate: Inflate?
    var written: UInt64 = 0
    /// Where the last `sync_file_range` writeback request ended.
    var writebackStarted: UInt64 = 0

    init(
        header: EntryHeader, relative: String, display: String, parent: Int32, name: String, temporary: String,
        fd: Int32, offset: UInt64, resumable: Bool, digest: SHA256Digest, inflate: Inflate?
    ) {
        self.digest = digest
        self.header = header
        self.relative = relative
        self.display = display
        self.parent = parent
        self.name = name
        self.temporary = temporary
        self.fd = fd
        self.offset = offset
        self.resumable = resumable
        self.inflate = inflate
    }

    var total: UInt64 { offset + written }

    /// Closes the temporary file, keeping it for a resume if it may be, else removing it.
    func abandon(keep: Bool) {
        if !(keep && resumable) { unlinkat(parent, temporary, 0) }
        closeDescriptor(fd)
        closeDescriptor(parent)
    }
}

/// One connection to a `TransferReceiver`: the receiving side of the protocol.
final class ReceiverSession: WireConnectionOwner {
    enum Phase {
        /// `matched` bytes of the magic have arrived.
        case magic(matched: Int)
        case hello
        case entries
        case receiving
        /// The current file was answered early (refused or failed during its data): its
        /// remaining DATA is skipped up to END or ABORT.
        case discarding
        case done
    }

    /// With fsync on, writeback of a file is started each time this much more has arrived.
    static let writebackWindow: UInt64 = 8 << 20

    let id: Int
    let peer: String
    private weak var receiver: TransferReceiver?
    private let connection: WireConnection
    private let loop: EventLoop
    private let destination: Destination
    private let options: TransferReceiveOptions
    private var phase = Phase.magic(matched: 0)
    private var file: IncomingFile?
    private var dataRemaining = 0
    private var results: [TransferFileResult] = []
    private var createdDirectories: [(path: String, mode: UInt32, mtime: timespec)] = []
    private var bytesStored: UInt64 = 0
    private let started = monotonicNanoseconds()
    private var idleTimer: LoopTimer?
    private var parsing = false
    private var ended = false
    private var scratchStorage: UnsafeMutableRawBufferPointer?
    /// Computes the files' SHA-256 on another core while the loop moves their bytes.
    private let hasher = DigestWorker()

    /// Where inflated bytes go before they are written: allocated on the first compressed file.
    private var scratch: UnsafeMutableRawBufferPointer {
        if let scratchStorage { return scratchStorage }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 18, alignment: 16)
        scratchStorage = buffer
        return buffer
    }

    var isEnded: Bool { ended }

    init(id: Int, peer: String, receiver: TransferReceiver, input: ReadStream, output: WriteStream, loop: EventLoop) {
        self.id = id
        self.peer = peer
        self.receiver = receiver
        self.loop = loop
        destination = receiver.destination
        options = receiver.options
        connection = WireConnection(
            input: input, output: output, inboundCapacity: 1 << 20, outboundCapacity: 1 << 17)
        connection.pauseReadingAbove = 1 << 16
        connection.owner = self
        connection.onClose = { [weak receiver] in receiver?.sessionClosed(id) }
    }

    deinit {
        scratchStorage?.deallocate()
    }

    func start() {
        var capabilities = [Wire.Capability.sha256, Wire.Capability.deflate]
        if options.resume { capabilities.append(Wire.Capability.resume) }
        connection.start(on: loop)
        guard !ended else { return }
        connection.send(Wire.magic + MessageWriter.hello(capabilities: capabilities))
        scheduleIdleCheck()
    }

    private func scheduleIdleCheck() {
        guard let timeout = options.idleTimeout, !ended else { return }
        let limit = timeout.nanoseconds
        let idle = monotonicNanoseconds() - connection.lastActivity
        let wait = idle >= limit ? 0 : limit - idle
        idleTimer = loop.schedule(after: .nanoseconds(Int64(clamping: wait))) { [weak self] in
            guard let self, !self.ended else { return }
            if monotonicNanoseconds() - self.connection.lastActivity >= limit {
                self.end(SluiceError(.timedOut, operation: "receive", subject: self.peer, detail: "idle"))
            } else {
                self.scheduleIdleCheck()
            }
        }
    }

    // MARK: WireConnectionOwner

    func wireReceived(_ connection: WireConnection) {
        guard !parsing else { return }
        parsing = true
        parse()
        parsing = false
    }

    func wireCanSend(_ connection: WireConnection) {}

    func wirePeerClosed(_ connection: WireConnection) {
        guard !ended else { return }
        parse()
        guard !ended else { return }
        let detail: String
        switch phase {
        case .magic, .hello: detail = "connection closed before the handshake"
        case .entries: detail = "connection closed without goodbye"
        case .receiving, .discarding: detail = "connection closed in the middle of a file"
        case .done: detail = "connection closed"
        }
        end(SluiceError(.truncatedData, operation: "receive", subject: peer, detail: detail))
    }

    func wireFailed(_ connection: WireConnection, _ error: SluiceError) {
        end(error)
    }

    // MARK: Parsing

    private func parse() {
        while !ended {
            let available = connection.inbound.readableBytes
            if available == 0 { return }
            if case .magic(let matched) = phase {
                guard let seen = Wire.consumeMagic(from: &connection.inbound, matched: matched) else {
                    violation("wrong magic: not a sluice sender")
                    return
                }
                phase = seen == Wire.magic.count ? .hello : .magic(matched: seen)
                continue
            }
            if dataRemaining > 0 {
                let n = min(available, dataRemaining)
                let bytes = UnsafeRawBufferPointer(rebasing: connection.inbound.readable[0..<n])
                if case .receiving = phase { receiveData(bytes) }
                connection.inbound.consume(n)
                dataRemaining -= n
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
            guard length <= type.maxPayload else {
                violation("\(type) message of \(length) bytes exceeds its limit of \(type.maxPayload)")
                return
            }
            if type == .data {
                switch phase {
                case .receiving, .discarding: break
                default:
                    violation("DATA outside a file")
                    return
                }
                guard length > 0 else {
                    violation("empty DATA frame")
                    return
                }
                connection.inbound.consume(Wire.frameHeaderSize)
                dataRemaining = length
                continue
            }
            guard available >= Wire.frameHeaderSize + length else { return }
            let payload = UnsafeRawBufferPointer(
                rebasing: connection.inbound.readable[Wire.frameHeaderSize..<Wire.frameHeaderSize + length])
            handle(type, payload)
            if !ended { connection.inbound.consume(Wire.frameHeaderSize + length) }
        }
    }

    private func handle(_ type: Wire.MessageType, _ payload: UnsafeRawBufferPointer) {
        switch (phase, type) {
        case (.hello, .hello):
            guard let (version, capabilities) = MessageReader.hello(payload) else {
                violation("malformed HELLO")
                return
            }
            guard version >= 1 else {
                violation("unsupported protocol version \(version)")
                return
            }
            guard capabilities.contains(Wire.Capability.sha256) else {
                violation("no common digest (sha256 required)")
                return
            }
            phase = .entries
        case (.entries, .file):
            guard let header = MessageReader.entry(.file, payload) else {
                violation("malformed FILE header")
                return
            }
            startFile(header)
        case (.entries, .directory):
            guard let header = MessageReader.entry(.directory, payload) else {
                violation("malformed DIR entry")
                return
            }
            makeDirectory(header)
        case (.receiving, .end):
            guard payload.count == Wire.MessageType.end.maxPayload else {
                violation("malformed END")
                return
            }
            var reader = MessageReader(payload)
            let size = reader.u64()!
            let digest = reader.rest()
            finishFile(size: size, digest: digest)
        case (.receiving, .abort):
            let reason = Wire.printable(Array(payload))
            failFile(.aborted, "aborted by the sender: \(reason)", kind: .io, keep: false)
            phase = .entries
        case (.discarding, .end), (.discarding, .abort):
            phase = .entries
        case (.entries, .bye):
            finishSession()
        case (_, .error):
            let reason = Wire.printable(Array(payload))
            end(SluiceError(.refused, operation: "receive", subject: peer, detail: "sender: \(reason)"))
        default:
            violation("unexpected \(type) message")
        }
    }

    // MARK: Entries

    private func record(_ result: TransferFileResult) {
        results.append(result)
        receiver?.emit(.entry(sessionID: id, result))
    }

    private func answer(_ rejection: EntryRejection, path: String, isDirectory: Bool, size: UInt64?) {
        switch rejection {
        case .refused(let code, let reason):
            connection.send(MessageWriter.answer(.refused, code: code.rawValue, reason: reason))
            record(
                TransferFileResult(path: path, isDirectory: isDirectory, size: size, outcome: .refused(reason: reason)))
        case .failed(let code, let reason):
            connection.send(MessageWriter.answer(.failed, code: code.rawValue, reason: reason))
            let kind: TransferFailureKind = code == .data ? .data : .io
            record(
                TransferFileResult(
                    path: path, isDirectory: isDirectory, size: size, outcome: .failed(reason: reason, kind: kind)))
        }
    }

    private func makeDirectory(_ header: EntryHeader) {
        let shown = Wire.printable(header.path)
        switch PathCheck.components(header.path) {
        case .failure(let refusal):
            answer(.refused(.invalidPath, "invalid path: \(refusal.reason)"), path: shown, isDirectory: true, size: nil)
        case .success(let components):
            let relative = components.joined(separator: "/")
            switch destination.makeDirectory(components, relative: relative) {
            case .failure(let rejection):
                answer(rejection, path: relative, isDirectory: true, size: nil)
            case .success(let created):
                let mtime = timespec(tv_sec: Int(header.mtimeSeconds), tv_nsec: Int(header.mtimeNanoseconds))
                if created.last == relative {
                    createdDirectories.append((relative, header.mode & 0o7777, mtime))
                }
                connection.send(MessageWriter.message(.stored))
                record(TransferFileResult(path: relative, isDirectory: true, size: nil, outcome: .stored))
            }
        }
    }

    private func startFile(_ header: EntryHeader) {
        let shown = Wire.printable(header.path)
        let size = header.sizeKnown ? header.size : nil
        let components: [String]
        switch PathCheck.components(header.path) {
        case .failure(let refusal):
            answer(
                .refused(.invalidPath, "invalid path: \(refusal.reason)"), path: shown, isDirectory: false, size: size)
            return
        case .success(let c):
            components = c
        }
        let relative = components.joined(separator: "/")
        if let maxSize = options.maxSize, header.sizeKnown, header.size > maxSize {
            answer(
                .refused(.tooLarge, "too large: \(header.size) bytes, the limit is \(maxSize)"), path: relative,
                isDirectory: false, size: size)
            return
        }
        let parent: Int32
        switch destination.openParent(of: components, relative: relative) {
        case .failure(let rejection):
            answer(rejection, path: relative, isDirectory: false, size: size)
            return
        case .success(let (fd, _)):
            parent = fd
        }
        let name = components.last!
        let display = destination.display(relative)
        if let kind = Destination.existing(parent, name) {
            if kind == S_IFDIR || !options.overwrite {
                closeDescriptor(parent)
                let reason = kind == S_IFDIR ? "exists (a directory)" : "exists"
                answer(.refused(.exists, reason), path: relative, isDirectory: false, size: size)
                return
            }
        }
        let temporary = Destination.temporaryName(for: name)
        let opened = Destination.openTemporary(
            parent, temporary, header: header, resume: options.resume, display: destination.display(temporary))
        guard case .success(let (fd, heldOffset, resumable)) = opened else {
            closeDescriptor(parent)
            if case .failure(let rejection) = opened {
                answer(rejection, path: relative, isDirectory: false, size: size)
            }
            return
        }
        var offset = heldOffset
        var digest = SHA256Digest()
        if offset > 0 && !hasher.update(digest, readingPrefixOf: fd, length: offset) {
            // The partial cannot be read back: start over.
            offset = 0
            digest = SHA256Digest()
            _ = ftruncate(fd, 0)
        }
        var inflate: Inflate?
        if header.compressed {
            var maxOutput: UInt64? = header.sizeKnown ? header.size - offset : nil
            if let maxSize = options.maxSize { maxOutput = min(maxOutput ?? maxSize, maxSize) }
            let limit = InflateLimit(maxOutputBytes: maxOutput.map { Int(clamping: $0) })
            inflate = try? Inflate(format: .deflate, limit: limit)
            guard inflate != nil else {
                closeDescriptor(fd)
                closeDescriptor(parent)
                answer(.failed(.io, "inflate: cannot initialise zlib"), path: relative, isDirectory: false, size: size)
                return
            }
        }
        file = IncomingFile(
            header: header, relative: relative, display: display, parent: parent, name: name, temporary: temporary,
            fd: fd, offset: offset, resumable: resumable, digest: digest, inflate: inflate)
        phase = .receiving
        connection.send(MessageWriter.accept(offset: offset))
    }

    private func receiveData(_ bytes: UnsafeRawBufferPointer) {
        guard let file else { return }
        guard let inflate = file.inflate else {
            writeFileBytes(bytes)
            return
        }
        var input = bytes
        while !input.isEmpty, case .receiving = phase {
            let step = Result { () throws(SluiceError) in try inflate.process(input, into: scratch) }
            switch step {
            case .success(let progress):
                if progress.produced > 0 {
                    writeFileBytes(UnsafeRawBufferPointer(rebasing: scratch[0..<progress.produced]))
                }
                input = UnsafeRawBufferPointer(rebasing: input[progress.consumed...])
                if progress.consumed == 0 && progress.produced == 0 {
                    failFile(.data, "corrupt compressed data: no progress", kind: .data, keep: false)
                    phase = .discarding
                }
            case .failure(let error):
                failInflate(error)
            }
        }
    }

    @inline(never)
    private func failInflate(_ error: SluiceError) {
        if error.code == .limitExceeded {
            failFile(.data, "more data than announced", kind: .data, keep: false)
        } else {
            failFile(.data, "compressed data: \(error.reason)", kind: .data, keep: false)
        }
        phase = .discarding
    }

    /// Writes decoded bytes to the temporary file at its current end, checking the limits.
    private func writeFileBytes(_ bytes: UnsafeRawBufferPointer) {
        guard let file, !bytes.isEmpty else { return }
        let newTotal = file.total + UInt64(bytes.count)
        if file.header.sizeKnown && newTotal > file.header.size {
            failFile(.data, "more data than announced (\(file.header.size) bytes)", kind: .data, keep: false)
            phase = .discarding
            return
        }
        if let maxSize = options.maxSize, newTotal > maxSize {
            let reason = "too large: more than \(maxSize) bytes"
            file.abandon(keep: false)
            self.file = nil
            connection.send(MessageWriter.answer(.refused, code: Wire.RefusalCode.tooLarge.rawValue, reason: reason))
            record(TransferFileResult(path: file.relative, size: nil, outcome: .refused(reason: reason)))
            phase = .discarding
            return
        }
        var done = 0
        while done < bytes.count {
            let position = off_t(file.total + UInt64(done))
            let result = Result { () throws(SluiceError) in
                try syscallValue("write", file.display) {
                    pwrite(file.fd, bytes.baseAddress! + done, bytes.count - done, position)
                }
            }
            switch result {
            case .success(let n):
                done += n
            case .failure(let error):
                failFile(.io, error.description, kind: .io, keep: false)
                phase = .discarding
                return
            }
        }
        hasher.update(file.digest, bytes)
        file.written += UInt64(bytes.count)
        if options.fsync && file.total - file.writebackStarted >= Self.writebackWindow {
            // Start writing to disk what has arrived (without waiting), so the fsync at the
            // end of the file finds little left to write rather than the whole file.
            _ = sync_file_range(
                file.fd, off_t(file.writebackStarted), off_t(file.total - file.writebackStarted),
                UInt32(SYNC_FILE_RANGE_WRITE))
            file.writebackStarted = file.total
        }
        bytesStored += UInt64(bytes.count)
    }

    /// Answers FAILED for the current file and drops it.
    private func failFile(_ code: Wire.FailureCode, _ reason: String, kind: TransferFailureKind, keep: Bool) {
        guard let file else { return }
        self.file = nil
        file.abandon(keep: keep)
        connection.send(MessageWriter.answer(.failed, code: code.rawValue, reason: reason))
        record(
            TransferFileResult(
                path: file.relative, size: file.header.sizeKnown ? file.header.size : file.total,
                resumedBytes: file.offset, outcome: .failed(reason: reason, kind: kind)))
    }

    private func finishFile(size: UInt64, digest: [UInt8]) {
        guard let file else { return }
        if let inflate = file.inflate {
            var finished = false
            while !finished, case .receiving = phase {
                let step = Result { () throws(SluiceError) in try inflate.finish(into: scratch) }
                switch step {
                case .success(let progress):
                    if progress.produced > 0 {
                        writeFileBytes(UnsafeRawBufferPointer(rebasing: scratch[0..<progress.produced]))
                    }
                    finished = progress.finished
                    if !finished && progress.produced == 0 {
                        failFile(.data, "compressed data: truncated", kind: .data, keep: false)
                        phase = .discarding
                    }
                case .failure(let error):
                    failInflate(error)
                }
            }
            guard case .receiving = phase else {
                phase = .entries
                return
            }
        }
        phase = .entries
        if file.header.sizeKnown && file.total != file.header.size {
            failFile(
                .data, "size mismatch: announced \(file.header.size) bytes, received \(file.total)", kind: .data,
                keep: false)
            return
        }
        if size != file.total {
            failFile(
                .data, "size mismatch: sender says \(size) bytes, received \(file.total)", kind: .data, keep: false)
            return
        }
        let computed = hasher.finalize(file.digest)
        guard computed == digest else {
            let what =
                file.offset > 0 ? " (held partial data or data in transit altered)" : " (data altered in transit)"
            failFile(.data, "SHA-256 mismatch\(what)", kind: .data, keep: false)
            return
        }
        let header = file.header
        let fd = file.fd
        let mtime = timespec(tv_sec: Int(header.mtimeSeconds), tv_nsec: Int(header.mtimeNanoseconds))
        let times = [timespec(tv_sec: 0, tv_nsec: utimeNow), mtime]
        fremovexattr(fd, Destination.resumeAttribute)
        let fsync = options.fsync
        let settled = Result { () throws(SluiceError) in
            try syscallValue("fchmod", file.display) { fchmod(fd, mode_t(header.mode & 0o777)) }
            try syscallValue("futimens", file.display) { futimens(fd, times) }
            if fsync { try syscallValue("fsync", file.display) { Glibc.fsync(fd) } }
        }
        if case .failure(let error) = settled {
            failFile(.io, error.description, kind: .io, keep: false)
            return
        }
        self.file = nil
        let committed = Destination.commit(
            file.parent, file.temporary, file.name, overwrite: options.overwrite, display: file.display)
        if case .success = committed, fsync { _ = Glibc.fsync(file.parent) }
        closeDescriptor(fd)
        closeDescriptor(file.parent)
        switch committed {
        case .success:
            connection.send(MessageWriter.message(.stored))
            record(
                TransferFileResult(path: file.relative, size: file.total, resumedBytes: file.offset, outcome: .stored))
        case .failure(let rejection):
            answer(rejection, path: file.relative, isDirectory: false, size: file.total)
        }
    }

    // MARK: Ending

    private func finishSession() {
        for entry in createdDirectories.reversed() {
            if let problem = destination.applyDirectoryAttributes(entry.path, mode: entry.mode, mtime: entry.mtime) {
                receiver?.emit(.warning(sessionID: id, problem))
            }
        }
        createdDirectories.removeAll()
        phase = .done
        connection.send(MessageWriter.message(.bye))
        end(nil, gracefully: true)
    }

    /// A protocol violation: tell the peer (best effort), then end the session.
    private func violation(_ reason: String) {
        guard !ended else { return }
        connection.send(MessageWriter.text(.error, reason))
        end(SluiceError(.protocolViolation, operation: "receive", subject: peer, detail: reason), gracefully: true)
    }

    /// Ends the session: an unfinished file keeps its partial data if resumable; the
    /// connection closes (after what is buffered, when `gracefully`).
    func end(_ error: SluiceError?, gracefully: Bool = false) {
        guard !ended else { return }
        ended = true
        idleTimer?.cancel()
        idleTimer = nil
        if let file {
            self.file = nil
            file.abandon(keep: true)
        }
        if gracefully && !connection.isClosed {
            connection.closeAfterFlush()
            if !connection.isClosed {
                // A peer that does not read gets 5 seconds, then the connection is cut.
                let timer = loop.schedule(after: .seconds(5)) { [connection] in connection.close() }
                let previous = connection.onClose
                connection.onClose = {
                    timer.cancel()
                    previous?()
                }
            }
        } else {
            connection.close()
        }
        let report = TransferSessionReport(
            id: id, peer: peer, results: results, bytes: bytesStored,
            seconds: Double(monotonicNanoseconds() - started) / 1e9, error: error)
        receiver?.sessionEnded(self, report: report)
    }
}
