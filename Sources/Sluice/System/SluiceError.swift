/// The error every part of sluice reports: what was attempted, on what, and why.
///
/// Renders as one line, e.g. `open "/tmp/x": No such file or directory (errno 2)`. A subject
/// that is a file's path is always quoted, relative or not (`open "in": …`), so that spaces and
/// odd names stay visible; an address, `fd 3`, `memory` or a stage's name is not.
public struct SluiceError: Error, Hashable, Sendable, CustomStringConvertible {
    /// Why an operation failed.
    public enum Code: Hashable, Sendable {
        /// The kernel refused: the errno says why.
        case system(Errno)
        /// The stream has not been opened (or failed to open).
        case notOpen
        /// The stream has been closed.
        case closed
        /// A host name could not be resolved; the text is getaddrinfo's.
        case unknownHost(String)
        /// A time limit passed.
        case timedOut
        /// Compressed or framed data is corrupt (bad header, checksum, or encoding).
        case corruptData
        /// Compressed or framed data ended before it was complete.
        case truncatedData
        /// Output exceeded a configured limit (decompression bomb guard, size limit).
        case limitExceeded
        /// The peer broke the protocol.
        case protocolViolation
        /// The peer or the destination refused the operation.
        case refused
        /// The operation was cancelled.
        case cancelled
        /// A value given by the caller is out of range or malformed.
        case invalidArgument
        /// What was asked for is not in this build or on this machine (an optional engine).
        case unavailable
        /// The peer could not be authenticated, or did not authenticate us: a certificate
        /// not trusted, a name or pin mismatch, a wrong pre-shared key.
        case authenticationFailed
    }

    /// Why it failed.
    public var code: Code
    /// The operation attempted, e.g. `open`, `read`, `connect`, `inflate`.
    public var operation: String
    /// What it concerned: a path, an address, `fd 3`, a stage name.
    public var subject: String?
    /// Extra human-readable detail.
    public var detail: String?
    /// Whether `subject` is a file's path, which `description` quotes.
    public var subjectIsPath: Bool

    /// An error: `code` for `operation` on `subject`, with optional `detail`. A subject that
    /// looks like a path (it starts with `/` or `.`, or holds a `/`) counts as one; for any other
    /// path, use `init(_:operation:path:detail:)`.
    public init(_ code: Code, operation: String, subject: String? = nil, detail: String? = nil) {
        self.code = code
        self.operation = operation
        self.subject = subject
        self.detail = detail
        subjectIsPath = subject.map { $0.hasPrefix("/") || $0.hasPrefix(".") || $0.contains("/") } ?? false
    }

    /// An error: `code` for `operation` on the file at `path` (quoted in `description`), with
    /// optional `detail`.
    public init(_ code: Code, operation: String, path: String, detail: String? = nil) {
        self.code = code
        self.operation = operation
        subject = path
        self.detail = detail
        subjectIsPath = true
    }

    /// An error about a stream's `name`, which `isPath` says is a file's path.
    init(_ code: Code, operation: String, streamName name: String, isPath: Bool, detail: String? = nil) {
        self.init(code, operation: operation, subject: name, detail: detail)
        if isPath { subjectIsPath = true }
    }

    /// The errno, when the kernel reported the failure.
    public var errno: Errno? {
        if case .system(let e) = code { return e }
        return nil
    }

    /// Why, as text: the errno's text or the code's, with the detail.
    public var reason: String {
        let base: String
        switch code {
        case .system(let e): base = e.description
        case .notOpen: base = "stream is not open"
        case .closed: base = "stream is closed"
        case .unknownHost(let text): base = "unknown host (\(text))"
        case .timedOut: base = "timed out"
        case .corruptData: base = "corrupt data"
        case .truncatedData: base = "truncated data"
        case .limitExceeded: base = "limit exceeded"
        case .protocolViolation: base = "protocol violation"
        case .refused: base = "refused"
        case .cancelled: base = "cancelled"
        case .invalidArgument: base = "invalid argument"
        case .unavailable: base = "unavailable"
        case .authenticationFailed: base = "authentication failed"
        }
        guard let detail else { return base }
        return "\(base): \(detail)"
    }

    /// One line: `operation "path": reason`, or `operation subject: reason` for a subject that
    /// is not a path.
    public var description: String {
        guard let subject else { return "\(operation): \(reason)" }
        return subjectIsPath ? "\(operation) \"\(subject)\": \(reason)" : "\(operation) \(subject): \(reason)"
    }
}
