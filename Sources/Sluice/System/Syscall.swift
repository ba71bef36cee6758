#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The outcome of a non-blocking operation: it did something, or it would have blocked.
public enum IOResult<T: Sendable>: Sendable {
    /// The operation did this much (bytes read or written; 0 at the end).
    case processed(T)
    /// Nothing could be done without blocking (`EAGAIN`); wait for readiness.
    case wouldBlock
}

extension IOResult: Equatable where T: Equatable {}

/// Calls `body`, a libc call that returns -1 and sets `errno` when it fails, again while it
/// fails with `EINTR`; returns what it returned last, with `errno` as it left it. The one
/// `EINTR` loop in sluice: `syscall` and `syscallValue` are it with the errors decided, and a
/// caller that decides them itself (an errno it expects, a `Result`, a message) calls it
/// directly. `close` is not retried (`closeDescriptor`).
@inline(__always)
package func retryingOnInterrupt<T: FixedWidthInteger>(_ body: () -> T) -> T {
    while true {
        let result = body()
        if result != -1 || errno != EINTR { return result }
    }
}

/// `base + delta` as a file offset (`off_t`), or nil when the sum overflows or passes what an
/// `off_t` holds (`Int64.max`). Every position a receiver writes or reads in a file goes through
/// it before it becomes an `off_t`: the transfer's machine keeps a peer's numbers within the
/// file's size, and a number that got past that fails the read or write instead of trapping.
package func fileOffset(_ base: UInt64, plus delta: UInt64 = 0) -> off_t? {
    let (sum, overflow) = base.addingReportingOverflow(delta)
    return overflow ? nil : off_t(exactly: sum)
}

/// `pread(2)` from `fd` at `offset` until `buffer` is full (`EINTR` retried, short reads
/// continued); false at an error, or the end of the file first.
package func preadFully(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) -> Bool {
    guard let base = buffer.baseAddress else { return true }
    var done = 0
    while done < buffer.count {
        guard let at = fileOffset(offset, plus: UInt64(done)) else { return false }
        let n = retryingOnInterrupt { pread(fd, base + done, buffer.count - done, at) }
        guard n > 0 else { return false }
        done += n
    }
    return true
}

/// The one wrapper every libc call in sluice goes through.
///
/// Retries on `EINTR` (`retryingOnInterrupt`), returns `EAGAIN`/`EWOULDBLOCK` as `.wouldBlock`, traps on errors that
/// can only be bugs (`EBADF`, `EFAULT`), and throws everything else as a `SluiceError` that
/// names the call and what it concerned.
@inline(__always)
package func syscall<T: FixedWidthInteger & Sendable>(
    _ call: @autoclosure () -> String,
    _ subject: @autoclosure () -> String? = nil,
    _ body: () -> T
) throws(SluiceError) -> IOResult<T> {
    let result = retryingOnInterrupt(body)
    if result != -1 { return .processed(result) }
    let err = errno
    switch err {
    case EAGAIN, EWOULDBLOCK:
        return .wouldBlock
    case EBADF, EFAULT:
        preconditionFailure("\(call())(\(subject() ?? "")): unacceptable errno \(Errno(rawValue: err))")
    default:
        throw SluiceError(.system(Errno(rawValue: err)), operation: call(), subject: subject())
    }
}

/// As `syscall`, for calls that cannot return EAGAIN in the way they are used (blocking fds,
/// `open`, `fstat`): "would block" there is an error like any other.
@inline(__always)
@discardableResult
package func syscallValue<T: FixedWidthInteger & Sendable>(
    _ call: @autoclosure () -> String,
    _ subject: @autoclosure () -> String? = nil,
    _ body: () -> T
) throws(SluiceError) -> T {
    let result = retryingOnInterrupt(body)
    if result != -1 { return result }
    let err = errno
    if err == EBADF || err == EFAULT {
        preconditionFailure("\(call())(\(subject() ?? "")): unacceptable errno \(Errno(rawValue: err))")
    }
    throw SluiceError(.system(Errno(rawValue: err)), operation: call(), subject: subject())
}

/// `open(2)` with EINTR retried, as a `Result` (typed `catch` clauses trip the 6.3 optimizer).
package func openFile(_ path: String, flags: Int32, permissions: mode_t) -> Result<Int32, SluiceError> {
    let fd = retryingOnInterrupt { Glibc.open(path, flags, permissions) }
    if fd >= 0 { return .success(fd) }
    return .failure(SluiceError(.system(.current), operation: "open", path: path))
}

extension Result where Failure == SluiceError {
    /// The errno of a failed system call, if this is one.
    package var failureErrno: Errno? {
        if case .failure(let error) = self { return error.errno }
        return nil
    }
}

/// Closes a descriptor. `close` is never retried on EINTR: on Linux the fd is gone either way.
package func closeDescriptor(_ fd: Int32) {
    let rc = Glibc.close(fd)
    if rc == -1 && errno == EBADF {
        preconditionFailure("close(\(fd)): EBADF, descriptor closed twice")
    }
}

/// sluice changes no process-wide setting: in particular it leaves `SIGPIPE` alone (a program
/// that wants it ignored says so itself, as the `sluice` command does). Sockets are written with
/// `send(MSG_NOSIGNAL)`, other descriptors with `writeSuppressingSIGPIPE`, so a write to a
/// closed pipe or socket is an `EPIPE` error, never a signal. `ensure()` is a no-op kept for the
/// event loop's initialiser, which still calls it.
enum ProcessSetup {
    @inline(__always) static func ensure() {}
}

/// `write(2)` to a descriptor that may be a pipe, FIFO or socket whose reader has gone, without
/// a `SIGPIPE` reaching the process: the signal is blocked on this thread for the call, and a
/// `SIGPIPE` the write raised is taken off the thread's pending set before the mask is
/// restored (the technique libcurl and OpenSSL's documentation describe; see
/// `runSuppressingSIGPIPE`). Returns what `write` returned, with `errno` preserved.
func writeSuppressingSIGPIPE(_ fd: Int32, _ buffer: UnsafeRawBufferPointer) -> Int {
    runSuppressingSIGPIPE(true) { Glibc.write(fd, buffer.baseAddress, buffer.count) }
}

/// Sets or clears `O_NONBLOCK`, returning the previous flags.
func setNonBlocking(_ fd: Int32, _ on: Bool) throws(SluiceError) -> Int32 {
    let flags = try syscallValue("fcntl", "fd \(fd)") { fcntl(fd, F_GETFL) }
    let wanted = on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK
    if wanted != flags {
        try syscallValue("fcntl", "fd \(fd)") { fcntl(fd, F_SETFL, wanted) }
    }
    return flags
}

/// Monotonic time in nanoseconds (`CLOCK_MONOTONIC`).
@inline(__always)
public func monotonicNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
}

/// Waits on one descriptor with `poll(2)`; used by polling-mode streams whose fd is
/// non-blocking. Returns the revents.
func pollDescriptor(_ fd: Int32, events: Int16, timeoutMilliseconds: Int32) throws(SluiceError) -> Int16 {
    var pfd = pollfd(fd: fd, events: events, revents: 0)
    let n = try syscallValue("poll", "fd \(fd)") { poll(&pfd, 1, timeoutMilliseconds) }
    return n == 0 ? 0 : pfd.revents
}

/// An environment variable's value, read with `getenv(3)`. `ProcessInfo.processInfo.environment`
/// first copies the whole environment into a dictionary: 2.8% of the CPU time of a short
/// `sluice send` (14 ms; Benchmarks/RESULTS.md), which many senders started at once each pay.
func environmentValue(_ name: String) -> String? {
    guard let value = getenv(name) else { return nil }
    return String(cString: value)
}

/// A comma-separated list in an environment variable (`SLUICE_ENGINES=zstd, isal`), each name
/// without the spaces and tabs around it; nil when the variable is not set.
package func environmentList(_ name: String) -> [String]? {
    environmentValue(name).map { $0.split(separator: ",").map { String($0.trimmingSpaces()) } }
}

extension Substring {
    /// Without the spaces and tabs at either end (for comma-separated lists in the environment).
    func trimmingSpaces() -> Substring {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return self[first...last]
    }
}
