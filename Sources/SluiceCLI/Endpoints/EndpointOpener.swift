import Sluice
import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// An endpoint opened for a copy: the stream to use, and for a destination file the handle
/// that renames it into place on success or removes it on failure.
enum OpenedEndpoint {
    case source(ReadStream)
    case destination(WriteStream, DestinationFile?)
}

/// How endpoints are opened: the options that matter to opening.
struct OpenOptions: Sendable {
    var force = false
    var append = false
    /// Flush a file destination to disk before it takes its name (`--fsync`).
    var flush = false
    /// Write a regular file destination with O_DIRECT (`--direct`).
    var direct = false
    /// For connecting and accepting (`--timeout`).
    var timeoutSeconds: Double?
}

extension Endpoint {
    /// Checks, before anything is read, what can be checked of a destination without creating
    /// it: an existing file without `--force` fails here with 73.
    func preflight(as role: EndpointRole, options: OpenOptions) throws(CLIError) {
        guard role == .destination, case .file(let path) = self else { return }
        _ = try DestinationFile.plan(path: path, force: options.force, append: options.append)
    }

    /// Opens the endpoint as `role` on `loop` and calls `completion` on the loop's thread with
    /// its stream, or the error to exit with. Files and stdio complete before this returns;
    /// socket endpoints complete once connected (or, listening, once one connection has been
    /// accepted). The stream is opened (or opening) but not scheduled: the pipeline does that.
    ///
    /// Returns what calls the opening off while it waits (a listener that has not accepted yet:
    /// closing it removes a Unix socket file), for an interrupt or a timeout; nil when there is
    /// nothing to wait for. Calling it after completion does no harm.
    ///
    /// This is the one place where endpoints become streams.
    @discardableResult
    func open(
        as role: EndpointRole,
        options: OpenOptions,
        on loop: EventLoop,
        completion: @escaping (Result<OpenedEndpoint, CLIError>) -> Void
    ) -> CancelOpening? {
        switch (self, role) {
        case (.file(let path), .source):
            let stream = ReadStream.file(atPath: path)
            stream.open()
            if stream.streamStatus == .error, let error = stream.streamError {
                completion(.failure(CLIError(error, during: .openingSource)))
            } else {
                completion(.success(.source(stream)))
            }
        case (.file(let path), .destination):
            do {
                let file = try DestinationFile(
                    path: path, force: options.force, append: options.append, flush: options.flush,
                    direct: options.direct)
                file.stream.open()
                if file.stream.streamStatus == .error, let error = file.stream.streamError {
                    file.discard()
                    completion(.failure(CLIError(error, during: .creatingDestination)))
                } else {
                    completion(.success(.destination(file.stream, file)))
                }
            } catch {
                completion(.failure(error))
            }
        case (.standardIO, .source):
            completion(.success(.source(.standardInput)))
        case (.standardIO, .destination):
            // `> file` with --direct: that file, past the page cache; a pipe or terminal as usual.
            guard options.direct, DestinationFile.isRegularFile(1) else {
                completion(.success(.destination(.standardOutput, nil)))
                break
            }
            let stream = DirectFileWriteStream(fd: 1, closeWhenDone: false, name: "stdout")
            stream.open()
            if stream.streamStatus == .error, let error = stream.streamError {
                completion(.failure(CLIError(error, during: .creatingDestination)))
            } else {
                completion(.success(.destination(stream, nil)))
            }
        case (.tcpConnect(let host, let port), _):
            let pair = Socket.connect(host: host, port: port, timeout: options.timeout)
            if role == .source, options.direct {
                // As a listening source does: whole pages per segment, spliced with O_DIRECT.
                _ = pair.0.setProperty(Int(DirectFileWriteStream.socketSegmentSize), forKey: .socketMaximumSegmentSize)
            }
            completion(.success(Self.half(of: pair, as: role)))
        case (.unixConnect(let path), _):
            let pair = Socket.connect(unixPath: path, timeout: options.timeout)
            completion(.success(Self.half(of: pair, as: role)))
        case (.tlsConnect(let host, let port, let tls), _):
            do {
                let context = try tls.makeContext(role: .client, host: host, operand: description)
                if let warning = tls.unverifiedPeerWarning(role: .client, operand: description) {
                    Terminal.report(warning)
                }
                let pair = TLS.secure(
                    Socket.connect(host: host, port: port, timeout: options.timeout), context: context)
                completion(.success(Self.half(of: pair, as: role)))
            } catch {
                completion(.failure(error))
            }
        case (.tlsListen(let host, let port, let tls), _):
            do {
                let context = try tls.makeContext(role: .server, host: nil, operand: description)
                let listener = try Socket.listen(host: host, port: port)
                if let warning = tls.unverifiedPeerWarning(role: .server, operand: description) {
                    Terminal.report(warning)
                }
                if let pin = context.localPin, !tls.usesKey {
                    // Listening now. With a throwaway certificate the client needs this to pin it.
                    Terminal.write("pin \(pin)\n", to: 2)
                }
                let gate = try AuthenticatingListener(listener: listener, context: context, on: loop, name: description)
                {
                    pair in completion(.success(Self.half(of: pair, as: role)))
                }
                return { gate.cancel() }
            } catch let error as CLIError {
                completion(.failure(error))
            } catch let error as SluiceError {
                completion(.failure(CLIError(error, during: role == .source ? .openingSource : .creatingDestination)))
            } catch {
                completion(.failure(CLIError(.ioError, "\(description): \(error)")))
            }
        case (.tcpListen, _), (.unixListen, _):
            // A refused connect or an unknown host surfaces later, as the pipeline's error at that
            // end before any byte moved; CopySession.phase(of:result:) then reports 69.
            do {
                let listener: SocketListener
                switch self {
                case .tcpListen(let host, let port): listener = try Socket.listen(host: host, port: port)
                case .unixListen(let path): listener = try Socket.listen(unixPath: path)
                default: preconditionFailure("not a listening endpoint")
                }
                if role == .source, options.direct, case .tcpListen = self {
                    // Whole pages per segment from a sender reading the page cache: the pipeline
                    // then splices them into the destination with O_DIRECT, no byte copied.
                    try listener.limitSegmentSize(to: DirectFileWriteStream.socketSegmentSize)
                }
                try listener.accept(on: loop) { input, output, _ in
                    listener.close()
                    completion(.success(Self.half(of: (input, output), as: role)))
                }
                return { listener.close() }
            } catch {
                completion(.failure(CLIError(error, during: role == .source ? .openingSource : .creatingDestination)))
            }
        }
        return nil
    }

    /// The half of a connection a copy uses; the other half is closed (the write half with a
    /// shutdown, so the peer reads the end).
    static func half(of pair: (ReadStream, WriteStream), as role: EndpointRole) -> OpenedEndpoint {
        switch role {
        case .source:
            pair.1.close()
            return .source(pair.0)
        case .destination:
            pair.0.close()
            return .destination(pair.1, nil)
        }
    }
}

/// Calls off an opening that waits (see `Endpoint.open`).
typealias CancelOpening = () -> Void

/// A `tls-listen:` endpoint's listener: it accepts connections and runs their handshakes
/// until one client authenticates, and hands on that one alone. A port scan, a plaintext peer,
/// a TLS 1.2 client or one with the wrong key ends its own connection with one line on
/// stderr, and the listener waits on. Connections wait for their handshake as `receive`'s do
/// (`AdmissionPolicy`): at most `admission.maximumPerAddress` from one address and
/// `admission.maximumWaiting` in all, each for the handshake timeout at most; a newcomer past
/// a cap pushes out the oldest of its own address (or of the address with the most waiting),
/// so a flood from one address does not keep a client from another out.
final class AuthenticatingListener {
    /// Who may wait for a handshake: `receive`'s rule, with room for fewer strangers (each
    /// holds a descriptor, and `copy` keeps the usual open-file limit).
    static let admission = AdmissionPolicy(maximumWaiting: 256)
    /// A connection whose handshake runs.
    private struct Handshake {
        var pair: (ReadStream, WriteStream)
        var waiting: AdmissionPolicy.Waiting
    }
    private let listener: SocketListener
    private let context: TLSContext
    private let loop: EventLoop
    private let name: String
    private var handshaking: [Int: Handshake] = [:]
    private var nextID = 0
    private var onAuthenticated: (((ReadStream, WriteStream)) -> Void)?

    init(
        listener: SocketListener, context: TLSContext, on loop: EventLoop, name: String,
        onAuthenticated: @escaping ((ReadStream, WriteStream)) -> Void
    ) throws(SluiceError) {
        self.listener = listener
        self.context = context
        self.loop = loop
        self.name = name
        self.onAuthenticated = onAuthenticated
        try listener.accept(on: loop) { [self] input, output, peer in accepted(input, output, from: peer) }
    }

    private func accepted(_ input: ReadStream, _ output: WriteStream, from peer: SocketAddress) {
        guard onAuthenticated != nil else { return Self.close(input, output) }
        let address = HandshakeLimiter.key(for: peer)
        let now = monotonicNanoseconds()
        switch Self.admission.admit(from: address, among: handshaking.values.map(\.waiting), at: now) {
        case .wait:
            break
        case .refuse:
            return Self.close(input, output)
        case .waitDropping(let oldest):
            // Out of `handshaking` first, so that its completion says nothing of it.
            if let pushed = handshaking.removeValue(forKey: oldest) {
                TLS.cancelHandshake(pushed.pair)
                let reason = SluiceError(
                    .unavailable, operation: "TLS handshake", subject: pushed.pair.0.name,
                    detail: "dropped before it authenticated: newer connections were waiting")
                Terminal.report("\(name): \(PeerText.sanitized(reason.description))")
            }
        }
        let pair = TLS.secure((input, output), context: context)
        let id = nextID
        nextID += 1
        handshaking[id] = Handshake(pair: pair, waiting: .init(id: id, address: address, since: now))
        TLS.handshake(pair, on: loop) { [self] error in
            guard let pair = handshaking.removeValue(forKey: id)?.pair else { return }
            if let error {
                Terminal.report("\(name): \(PeerText.sanitized(error.description))")
                return
            }
            // Still in `handshaking`, so not cancelled: `cancel()` empties it as it lets go of
            // `onAuthenticated`.
            guard let handOn = onAuthenticated else { return }
            cancel()
            handOn(pair)
        }
    }

    /// Closes a connection nobody will serve. Its streams were never opened, and a socket is
    /// closed when its last opened stream closes: open both, then close both.
    private static func close(_ input: ReadStream, _ output: WriteStream) {
        input.open()
        output.open()
        output.close()
        input.close()
    }

    /// Stops listening and calls off the handshakes in progress.
    func cancel() {
        onAuthenticated = nil
        listener.close()
        let pending = handshaking.values
        handshaking.removeAll()
        for handshake in pending { TLS.cancelHandshake(handshake.pair) }
    }
}

extension OpenOptions {
    /// `--timeout` as the library's connect timeout.
    var timeout: Duration? { timeoutSeconds.map { .milliseconds(Int64(($0 * 1000).rounded(.up))) } }
}

extension ReadStream {
    /// The size of what the stream reads when it is a regular file (or stdin redirected from
    /// one): for the progress bar and ETA.
    var regularFileSize: UInt64? {
        guard let fd = fileDescriptor else { return nil }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        let offset = lseek(fd, 0, SEEK_CUR)
        let remaining = Int64(info.st_size) - max(0, Int64(offset))
        return UInt64(max(0, remaining))
    }
}

extension ByteStream {
    /// A regular file's device and inode, to tell when a source is also the destination.
    var fileIdentity: (dev_t, ino_t)? {
        guard let fd = fileDescriptor else { return nil }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        return (info.st_dev, info.st_ino)
    }
}
