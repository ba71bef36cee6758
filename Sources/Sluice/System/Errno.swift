#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A POSIX error number with a Swift name and the C library's text for it.
public struct Errno: RawRepresentable, Error, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: Int32

    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The calling thread's current `errno`.
    public static var current: Errno { Errno(rawValue: errno) }

    /// `strerror(3)` text, e.g. "No such file or directory".
    public var message: String { String(cString: strerror(rawValue)) }

    public var description: String { "\(message) (errno \(rawValue))" }

    public static let interrupted = Errno(rawValue: EINTR)
    public static let wouldBlock = Errno(rawValue: EAGAIN)
    public static let noSuchFile = Errno(rawValue: ENOENT)
    public static let permissionDenied = Errno(rawValue: EACCES)
    public static let notPermitted = Errno(rawValue: EPERM)
    public static let fileExists = Errno(rawValue: EEXIST)
    public static let isDirectory = Errno(rawValue: EISDIR)
    public static let notDirectory = Errno(rawValue: ENOTDIR)
    public static let noSpace = Errno(rawValue: ENOSPC)
    public static let brokenPipe = Errno(rawValue: EPIPE)
    public static let connectionReset = Errno(rawValue: ECONNRESET)
    public static let connectionRefused = Errno(rawValue: ECONNREFUSED)
    public static let timedOut = Errno(rawValue: ETIMEDOUT)
    public static let hostUnreachable = Errno(rawValue: EHOSTUNREACH)
    public static let networkUnreachable = Errno(rawValue: ENETUNREACH)
    public static let inProgress = Errno(rawValue: EINPROGRESS)
    public static let badFileDescriptor = Errno(rawValue: EBADF)
    public static let badAddress = Errno(rawValue: EFAULT)
    public static let invalidArgument = Errno(rawValue: EINVAL)
    public static let addressInUse = Errno(rawValue: EADDRINUSE)
    public static let readOnlyFileSystem = Errno(rawValue: EROFS)
    public static let ioError = Errno(rawValue: EIO)
}
