#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A POSIX error number with a Swift name and the C library's text for it.
public struct Errno: RawRepresentable, Error, Hashable, Sendable, CustomStringConvertible {
    /// The number, as `errno` holds it.
    public var rawValue: Int32

    /// The error with number `rawValue`.
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The calling thread's current `errno`.
    public static var current: Errno { Errno(rawValue: errno) }

    /// `strerror(3)` text, e.g. "No such file or directory".
    public var message: String { String(cString: strerror(rawValue)) }

    /// The text and the number: `No such file or directory (errno 2)`.
    public var description: String { "\(message) (errno \(rawValue))" }

    /// `EINTR`.
    public static let interrupted = Errno(rawValue: EINTR)
    /// `EAGAIN`.
    public static let wouldBlock = Errno(rawValue: EAGAIN)
    /// `ENOENT`.
    public static let noSuchFile = Errno(rawValue: ENOENT)
    /// `EACCES`.
    public static let permissionDenied = Errno(rawValue: EACCES)
    /// `EPERM`.
    public static let notPermitted = Errno(rawValue: EPERM)
    /// `EEXIST`.
    public static let fileExists = Errno(rawValue: EEXIST)
    /// `EISDIR`.
    public static let isDirectory = Errno(rawValue: EISDIR)
    /// `ENOTDIR`.
    public static let notDirectory = Errno(rawValue: ENOTDIR)
    /// `ENOSPC`.
    public static let noSpace = Errno(rawValue: ENOSPC)
    /// `EPIPE`.
    public static let brokenPipe = Errno(rawValue: EPIPE)
    /// `ECONNRESET`.
    public static let connectionReset = Errno(rawValue: ECONNRESET)
    /// `ECONNREFUSED`.
    public static let connectionRefused = Errno(rawValue: ECONNREFUSED)
    /// `ETIMEDOUT`.
    public static let timedOut = Errno(rawValue: ETIMEDOUT)
    /// `EHOSTUNREACH`.
    public static let hostUnreachable = Errno(rawValue: EHOSTUNREACH)
    /// `ENETUNREACH`.
    public static let networkUnreachable = Errno(rawValue: ENETUNREACH)
    /// `EINPROGRESS`.
    public static let inProgress = Errno(rawValue: EINPROGRESS)
    /// `EBADF`.
    public static let badFileDescriptor = Errno(rawValue: EBADF)
    /// `EFAULT`.
    public static let badAddress = Errno(rawValue: EFAULT)
    /// `EINVAL`.
    public static let invalidArgument = Errno(rawValue: EINVAL)
    /// `EADDRINUSE`.
    public static let addressInUse = Errno(rawValue: EADDRINUSE)
    /// `EROFS`.
    public static let readOnlyFileSystem = Errno(rawValue: EROFS)
    /// `EIO`.
    public static let ioError = Errno(rawValue: EIO)
}
