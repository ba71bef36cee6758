import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// `sluice copy`: one copy from a source endpoint to a destination endpoint, on one event loop.
///
/// The order of operations: build the stages and check the destination (nothing is read or
/// created yet, so a usage mistake costs nothing); open the source; create the destination;
/// run the pipeline; on success rename the destination into place, on failure or a signal
/// remove what was created.
final class CopySession: Interruptible {
    let options: CopyOptions
    let loop: EventLoop
    private let openOptions: OpenOptions
    private var stages: [any Stage] = []
    private var source: ReadStream?
    private(set) var sink: WriteStream?

    /// A TLS end that closed may still be sending its last bytes and close_notify: the loop
    /// runs on until they are out (bounded), or the peer would see a cut connection.
    func finishDelivering() {
        let deadline = ContinuousClock.now.advanced(by: .seconds(30))
        for stream in [source as ByteStream?, sink] {
            guard let stream else { continue }
            while TLS.isDelivering(stream) && ContinuousClock.now < deadline { loop.run(for: .milliseconds(20)) }
        }
    }

    /// The TLS protocol and cipher of whichever end is a TLS connection, for `--stats`.
    var negotiatedTLS: (protocol: String, cipher: String)? {
        for stream in [source as ByteStream?, sink] {
            if let stream, let version = stream.property(forKey: .tlsProtocol) as? String,
                let cipher = stream.property(forKey: .tlsCipher) as? String
            {
                return (version, cipher)
            }
        }
        return nil
    }
    private var destinationFile: DestinationFile?
    private var pipeline: Pipeline?
    private var progress: ProgressDisplay?
    private var watchdog: LoopTimer?
    private var result: PipelineResult?
    /// Set once the copy is over: the status and, for a failure, the one-line message.
    private(set) var outcome: CLIError?
    private var signal: Int32?
    /// Call off endpoints that are still waiting (a listener), on an interrupt or a timeout.
    private var cancelOpenings: [CancelOpening] = []

    init(options: CopyOptions, loop: EventLoop) {
        self.options = options.intoDirectory()
        self.loop = loop
        openOptions = OpenOptions(
            force: options.force, append: options.append, flush: options.fsync, direct: options.direct,
            timeoutSeconds: options.timeoutSeconds)
    }

    /// Whether to draw progress, given whether stderr is a terminal.
    static func showsProgress(_ mode: ProgressMode, stderrIsTerminal: Bool) -> Bool {
        switch mode {
        case .auto: return stderrIsTerminal
        case .on: return true
        case .off: return false
        }
    }

    // MARK: Steps (on the loop's thread)

    func start() {
        do {
            stages = try Transform.stages(for: options.transform, threads: options.threads)
            try options.destination.preflight(as: .destination, options: openOptions)
        } catch {
            end(error)
            return
        }
        startWatchdog()
        let cancelSource = options.source.open(as: .source, options: openOptions, on: loop) { [self] opened in
            guard outcome == nil else {
                if case .success(.source(let stream)) = opened { stream.close() }
                return
            }
            switch opened {
            case .success(.source(let stream)):
                source = stream
                openDestination()
            case .success(.destination):
                preconditionFailure("a source opened as a destination")
            case .failure(let error):
                end(error)
            }
        }
        if let cancelSource { cancelOpenings.append(cancelSource) }
    }

    private func openDestination() {
        let cancel = options.destination.open(as: .destination, options: openOptions, on: loop) { [self] opened in
            switch opened {
            case .success(.destination(let stream, let file)):
                sink = stream
                destinationFile = file
                guard outcome == nil else {
                    abandonStreams()
                    return
                }
                startPipeline()
            case .success(.source):
                preconditionFailure("a destination opened as a source")
            case .failure(let error):
                abandonStreams()
                end(error)
            }
        }
        if let cancel { cancelOpenings.append(cancel) }
    }

    private func startPipeline() {
        guard let source, let sink else { return }
        if let sourceID = source.fileIdentity, let sinkID = sink.fileIdentity, sourceID == sinkID,
            destinationFile?.plan != .viaTemporary(replacing: true)
        {
            abandonStreams()
            end(CLIError(.usage, "\(options.destination.displayName(as: .destination)): input file is output file"))
            return
        }
        destinationFile?.releaseReplacedCache(unlessIdentity: source.fileIdentity)
        let pipelineOptions = PipelineOptions(
            chunkSize: options.chunkSize, rateLimit: options.rateLimit, zeroCopy: options.zeroCopy)
        let pipeline = Pipeline(source: source, stages: stages, sink: sink, options: pipelineOptions)
        self.pipeline = pipeline
        if Self.showsProgress(options.progress, stderrIsTerminal: Terminal.isTerminal(2)) {
            progress = ProgressDisplay(
                pipeline: pipeline, sourceSize: source.regularFileSize, transform: options.transform,
                output: { Terminal.write($0, to: 2) })
        }
        pipeline.start(on: loop) { [self] result in finished(result) }
        if self.result == nil { progress?.start(on: loop) }
    }

    private func finished(_ result: PipelineResult) {
        self.result = result
        progress?.finish(result)
        progress = nil
        if let error = result.error {
            destinationFile?.discard()
            if let signal {
                end(Self.interruption(signal, destination: options.destination))
            } else {
                // A failure set by the watchdog before it cancelled the pipeline stays.
                var failure = CLIError(error.underlying, during: Self.phase(of: error, result: result))
                if failure.status == .dataError, case .stage = error.location {
                    // Damaged input, found by a decompressing stage: name it, as gzip does.
                    failure.message = "\(options.source.displayName(as: .source)): \(failure.message)"
                }
                end(failure)
            }
            return
        }
        // The bytes a direct sink still held when the pipeline closed it, and its error.
        if let direct = sink as? DirectFileWriteStream {
            do {
                try direct.finishWriting()
            } catch {
                destinationFile?.discard()
                end(CLIError(error, during: .copying(.sink)))
                return
            }
        }
        do {
            try destinationFile?.commit()
            if options.fsync, case .standardIO = options.destination { try Self.flushStandardOutput() }
        } catch {
            end(error)
            return
        }
        end(CLIError(.ok, ""))
    }

    /// `--fsync` with stdout: flushed when it is a file; a pipe or terminal has nothing to flush.
    private static func flushStandardOutput() throws(CLIError) {
        guard Glibc.fsync(1) != 0 else { return }
        let error = Errno.current
        guard error != .invalidArgument, error != .readOnlyFileSystem else { return }
        throw CLIError(SluiceError(.system(error), operation: "fsync", subject: "stdout"), during: .creatingDestination)
    }

    /// A connect that fails surfaces as the stream's error once the pipeline runs: before any
    /// byte moved, an error at the source is still one of opening it.
    private static func phase(of error: PipelineError, result: PipelineResult) -> FailurePhase {
        switch error.location {
        case .source where result.bytesRead == 0 && error.underlying.operation != "read":
            return .openingSource
        case .sink where result.bytesWritten == 0 && error.underlying.operation != "write":
            return .creatingDestination
        default:
            return .copying(error.location)
        }
    }

    private static func interruption(_ signal: Int32, destination: Endpoint) -> CLIError {
        let name = destination.displayName(as: .destination)
        let stopped = ExitStatus.stopped(by: signal)
        return CLIError(stopped.status, "copy to \(name): \(stopped.word)")
    }

    /// `--timeout`: fails the copy when no byte moved for that long (and before the pipeline
    /// starts, while connecting or waiting for a connection). Without it, a copy with a socket
    /// end gets the default idle limit once the pipeline runs, and waits for its connection as
    /// long as it takes.
    private func startWatchdog() {
        guard let limit = options.idleSeconds else { return }
        let waitsForConnection = options.timeoutSeconds != nil
        let tick = Duration.milliseconds(Int64(min(1000, max(10, limit * 250))))
        var lastCount: UInt64 = 0
        var lastChange = monotonicNanoseconds()
        watchdog = loop.schedule(after: tick, repeating: tick) { [weak self] in
            guard let self, self.outcome == nil else { return }
            let count = (self.pipeline?.bytesRead ?? 0) &+ (self.pipeline?.bytesWritten ?? 0)
            let now = monotonicNanoseconds()
            if count != lastCount || (self.pipeline == nil && !waitsForConnection) {
                lastCount = count
                lastChange = now
                return
            }
            guard Double(now - lastChange) / 1e9 >= limit else { return }
            let seconds = Format.seconds(limit)
            let error: CLIError
            if pipeline == nil {
                error = CLIError(.unavailable, "\(self.pendingEndpointName): timed out after \(seconds) s")
            } else {
                error = CLIError(
                    .ioError,
                    "copy to \(self.options.destination.displayName(as: .destination)): timed out"
                        + " (no data moved for \(seconds) s)")
            }
            self.fail(error)
        }
    }

    private var pendingEndpointName: String {
        source == nil
            ? options.source.displayName(as: .source) : options.destination.displayName(as: .destination)
    }

    /// SIGINT, SIGTERM or SIGHUP: cancel the pipeline (its completion cleans up) or, before it runs,
    /// end at once.
    func interrupt(_ signal: Int32) {
        guard outcome == nil, self.signal == nil else { return }
        self.signal = signal
        if let pipeline, result == nil {
            pipeline.cancel()
        } else {
            abandonStreams()
            end(Self.interruption(signal, destination: options.destination))
        }
    }

    /// Ends the copy with `error` from outside the pipeline (the watchdog).
    private func fail(_ error: CLIError) {
        guard outcome == nil else { return }
        if let pipeline, result == nil {
            outcome = error  // kept by `end`; the pipeline's completion removes the temporary file
            pipeline.cancel()
        } else {
            abandonStreams()
            end(error)
        }
    }

    private func abandonStreams() {
        for cancel in cancelOpenings { cancel() }
        cancelOpenings = []
        source?.close()
        sink?.close()
        destinationFile?.discard()
    }

    private func end(_ error: CLIError) {
        watchdog?.cancel()
        watchdog = nil
        progress?.finish(nil)
        progress = nil
        if outcome == nil { outcome = error }
        loop.stop()
    }

    // MARK: Running

    /// Runs a copy to its end and returns the exit status; prints the error or the report.
    static func run(_ options: CopyOptions) -> ExitStatus {
        let cpuBefore = CPUTime.process()
        guard let loop = makeCommandLoop() else { return .ioError }
        let session = CopySession(options: options, loop: loop)
        SignalWatcher.shared.route(to: session, on: loop)
        session.start()
        // Only `end` stops the loop, and it sets the outcome first.
        if session.outcome == nil { loop.run() }
        session.finishDelivering()
        SignalWatcher.shared.setHandler(nil)
        guard let outcome = session.outcome else {
            Terminal.report("copy: the event loop ran out of work before the copy ended (a bug)")
            return .ioError
        }
        if outcome.status != .ok {
            Terminal.report(outcome.message)
            return outcome.status
        }
        if let format = options.stats, let result = session.result {
            var report = StatsReport(
                result: result, options: options, stageName: session.stages.first?.name,
                cpu: CPUTime.process() - cpuBefore)
            report.tls = session.negotiatedTLS
            if let direct = session.sink as? DirectFileWriteStream {
                report.directBytes = direct.bytesWrittenDirectly
                report.pathNote =
                    result.path == .splice
                    ? "--direct: spliced from the socket into the destination with O_DIRECT"
                    : "--direct: the destination is written with O_DIRECT"
            }
            Terminal.write(format == .json ? report.json + "\n" : report.text, to: 2)
        }
        return .ok
    }
}

/// Hands a value to another thread when the code guarantees it is only used on one.
struct UncheckedSendable<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
