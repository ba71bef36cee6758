import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The exit statuses of `sluice`, from sysexits(3).
enum ExitStatus: Int32, Sendable {
    case ok = 0
    /// EX_USAGE: the command line is wrong.
    case usage = 64
    /// EX_DATAERR: corrupt or truncated compressed data, a failed integrity check, a limit.
    case dataError = 65
    /// EX_NOINPUT: the source does not exist or cannot be read.
    case noInput = 66
    /// EX_UNAVAILABLE: connection refused, unknown host, or a feature not built in.
    case unavailable = 69
    /// EX_CANTCREAT: the destination exists (without `--force`) or cannot be created.
    case cannotCreate = 73
    /// EX_IOERR: any other input/output error.
    case ioError = 74
    /// EX_NOPERM: authentication failed (certificate not trusted, name or pin mismatch, wrong key).
    case notPermitted = 77
    /// 128 + SIGHUP: the terminal went away (an ssh session dropped).
    case hungUp = 129
    /// 128 + SIGINT.
    case interrupted = 130
    /// 128 + SIGTERM.
    case terminated = 143
}

extension ExitStatus {
    /// The status and the word for a signal that stopped a command: SIGHUP, SIGTERM, or
    /// (anything else) SIGINT.
    static func stopped(by signal: Int32) -> (status: ExitStatus, word: String) {
        switch signal {
        case SIGHUP: return (.hungUp, "hung up")
        case SIGTERM: return (.terminated, "terminated")
        default: return (.interrupted, "interrupted")
        }
    }
}

/// A failure of a command: the status to exit with and the one line to print after `sluice: `.
struct CLIError: Error, Sendable, CustomStringConvertible {
    var status: ExitStatus
    var message: String

    init(_ status: ExitStatus, _ message: String) {
        self.status = status
        self.message = message
    }

    init(_ usage: UsageError) {
        self.init(.usage, usage.message)
    }

    var description: String { message }
}

/// What the command was doing when a library error happened: decides the exit status.
enum FailurePhase: Sendable {
    /// Opening (connecting, accepting) the source.
    case openingSource
    /// Creating or opening the destination.
    case creatingDestination
    /// Moving bytes: the pipeline failed at `location`.
    case copying(PipelineLocation)
}

extension CLIError {
    /// The exit status and message for a library error during `phase`:
    ///
    /// - 65 for corrupt or truncated data and exceeded limits, wherever they happen;
    /// - 66 for a source that does not exist or cannot be read;
    /// - 69 for an unknown host, a refused or unreachable connection, a connect timeout, an
    ///   engine this build lacks;
    /// - 73 for a destination that exists or cannot be created;
    /// - 77 for a peer that failed authentication (or failed ours);
    /// - 74 for everything else.
    init(_ error: SluiceError, during phase: FailurePhase) {
        self.init(Self.status(for: error, during: phase), Self.message(for: error))
    }

    static func status(for error: SluiceError, during phase: FailurePhase) -> ExitStatus {
        switch error.code {
        case .corruptData, .truncatedData, .limitExceeded:
            return .dataError
        case .unknownHost, .unavailable:
            return .unavailable
        case .refused:
            if case .openingSource = phase { return .unavailable }
            return .cannotCreate
        case .cancelled:
            return .interrupted
        case .authenticationFailed:
            return .notPermitted
        case .invalidArgument:
            return .usage
        case .timedOut:
            return .unavailable  // the library times out connecting; `--timeout` idling is reported apart
        case .system(let errno):
            if [.connectionRefused, .hostUnreachable, .networkUnreachable].contains(errno) {
                return .unavailable
            }
            switch phase {
            case .openingSource:
                if [.noSuchFile, .notDirectory, .permissionDenied, .isDirectory].contains(errno) { return .noInput }
            case .creatingDestination:
                let cannotCreate: [Errno] = [
                    .permissionDenied, .notPermitted, .fileExists, .isDirectory, .notDirectory, .noSuchFile,
                    .readOnlyFileSystem,
                ]
                if cannotCreate.contains(errno) { return .cannotCreate }
            case .copying:
                break
            }
            return .ioError
        case .notOpen, .closed, .protocolViolation:
            return .ioError
        }
    }

    /// One line: `open "/tmp/x": No such file or directory (errno 2)`. A caller's invalid
    /// argument reads as its detail: `chunk size '511': must be 512 to 4M …`.
    static func message(for error: SluiceError) -> String {
        if error.code == .invalidArgument, let detail = error.detail {
            if let subject = error.subject {
                return "\(error.operation) \(error.subjectIsPath ? "\"\(subject)\"" : subject): \(detail)"
            }
            return "\(error.operation): \(detail)"
        }
        return error.description
    }
}
