import CSluiceLinux

#if canImport(Glibc)
    import Glibc
#endif

// The calls that move bytes from one descriptor to another inside the kernel, through the one
// syscall wrapper: EINTR retried, EAGAIN as `.wouldBlock`, everything else a typed error. Each
// uses and advances the descriptors' own file offsets (no offset is passed), so that a copy
// that goes on with another call, or with read/write, starts exactly where the last one
// stopped.

/// `copy_file_range(2)`: up to `count` bytes from file `source` to file `sink`.
func copyFileRange(_ source: Int32, _ sink: Int32, count: Int, subject: String) throws(SluiceError) -> IOResult<Int> {
    try syscall("copy_file_range", subject) { CSluiceLinux.copy_file_range(source, nil, sink, nil, count, 0) }
}

/// `sendfile(2)`: up to `count` bytes from file `source` to `sink` (a socket, a file, a device).
func sendFile(_ source: Int32, _ sink: Int32, count: Int, subject: String, suppressingSIGPIPE: Bool)
    throws(SluiceError) -> IOResult<Int>
{
    try syscall("sendfile", subject) {
        runSuppressingSIGPIPE(suppressingSIGPIPE) { CSluiceLinux.sendfile(sink, source, nil, count) }
    }
}

/// `splice(2)` with `SPLICE_F_NONBLOCK`: up to `count` bytes from `source` to `sink`, one of
/// which is a pipe. The pipe end never blocks; a socket end does not block when it is
/// non-blocking (as every watched descriptor is).
package func spliceBytes(_ source: Int32, _ sink: Int32, count: Int, subject: String, suppressingSIGPIPE: Bool)
    throws(SluiceError) -> IOResult<Int>
{
    let flags = UInt32(SPLICE_F_NONBLOCK | SPLICE_F_MOVE)
    return try syscall("splice", subject) {
        runSuppressingSIGPIPE(suppressingSIGPIPE) { CSluiceLinux.splice(source, nil, sink, nil, count, flags) }
    }
}

/// A pipe of the caller's own (`pipe2`, non-blocking and close-on-exec at both ends), holding
/// about `capacity` bytes where the kernel allows it (`F_SETPIPE_SZ`; an unprivileged process
/// is held to /proc/sys/fs/pipe-max-size, so smaller sizes are tried down to what the pipe
/// has). Returns the ends and the capacity it got (`F_GETPIPE_SZ`).
package func makeKernelPipe(capacity: Int, subject: String) throws(SluiceError) -> (
    read: Int32, write: Int32, capacity: Int
) {
    var ends: [Int32] = [-1, -1]
    try syscallValue("pipe2", subject) {
        ends.withUnsafeMutableBufferPointer { pipe2($0.baseAddress, O_CLOEXEC | O_NONBLOCK) }
    }
    let (readEnd, writeEnd) = (ends[0], ends[1])
    // A size the kernel will not give (EPERM above the limit, EBUSY below what the pipe holds)
    // is no failure: the pipe keeps the size it has.
    func size() -> Int { Int((try? syscallValue("fcntl", subject) { fcntl(writeEnd, F_GETPIPE_SZ) }) ?? 4096) }
    let current = max(4096, size())
    var wanted = capacity
    while wanted > current
        && (try? syscallValue("fcntl", subject) { fcntl(writeEnd, F_SETPIPE_SZ, Int32(clamping: wanted)) }) == nil
    {
        wanted /= 2
    }
    return (readEnd, writeEnd, size())
}

/// Runs `call` (a write to a pipe or socket whose reader may be gone) without a `SIGPIPE`
/// reaching the process when `suppress` is set: the signal is blocked on this thread for the
/// call, and a `SIGPIPE` the call raised is taken off the thread's pending set before the mask
/// is restored (see `writeSuppressingSIGPIPE`). Returns what `call` returned, `errno` kept.
@inline(__always)
func runSuppressingSIGPIPE(_ suppress: Bool, _ call: () -> Int) -> Int {
    guard suppress else { return call() }
    var pipeSet = sigset_t()
    sigemptyset(&pipeSet)
    sigaddset(&pipeSet, SIGPIPE)
    var previous = sigset_t()
    pthread_sigmask(SIG_BLOCK, &pipeSet, &previous)
    var pending = sigset_t()
    sigpending(&pending)
    let alreadyPending = sigismember(&pending, SIGPIPE) == 1
    let n = call()
    let saved = errno
    if n < 0 && saved == EPIPE && !alreadyPending {
        var zero = timespec(tv_sec: 0, tv_nsec: 0)
        _ = retryingOnInterrupt { sigtimedwait(&pipeSet, nil, &zero) }
    }
    pthread_sigmask(SIG_SETMASK, &previous, nil)
    errno = saved
    return n
}

/// True when `SIGPIPE` is ignored by the process (as the `sluice` command ignores it): a write
/// to a pipe or socket whose reader is gone then fails with EPIPE and nothing else happens, so
/// there is no signal to keep off.
package func isSIGPIPEIgnored() -> Bool {
    var current = sigaction()
    guard sigaction(SIGPIPE, nil, &current) == 0 else { return false }
    // Handlers are C function pointers, which Swift does not compare: compare their addresses.
    return unsafeBitCast(current.__sigaction_handler.sa_handler, to: Int.self) == unsafeBitCast(SIG_IGN, to: Int.self)
}
