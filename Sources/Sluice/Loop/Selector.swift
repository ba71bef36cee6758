import CSluiceLinux

#if canImport(Glibc)
    import Glibc
#endif

/// Which readiness a registration asks the selector for.
public struct Interest: OptionSet, Hashable, Sendable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let read = Interest(rawValue: 1)
    public static let write = Interest(rawValue: 2)
}

/// What the selector reported for one descriptor.
public struct Readiness: OptionSet, Hashable, Sendable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let readable = Readiness(rawValue: 1)
    public static let writable = Readiness(rawValue: 2)
    /// The peer hung up (EPOLLHUP / EPOLLRDHUP): a read will see end of stream.
    public static let hangup = Readiness(rawValue: 4)
    /// An error is pending on the descriptor (EPOLLERR): the next read or write reports it.
    public static let error = Readiness(rawValue: 8)
}

/// The readiness-notification backend of an `EventLoop`: epoll on Linux. A kqueue or poll
/// backend implements the same four calls.
///
/// Each registration carries a `token` that the backend hands back with every readiness it
/// reports for it (epoll keeps it in `epoll_data`). The loop puts the descriptor and the
/// registration's generation in it, so a report that was already in a batch when its
/// registration ended never reaches a newer registration of the same descriptor number.
protocol Selector {
    /// Starts watching `fd`. Throws EPERM for descriptors the backend cannot watch (regular
    /// files under epoll); the loop then serves them from its ready queue.
    func register(fd: Int32, interest: Interest, token: UInt64) throws(SluiceError)
    func reregister(fd: Int32, interest: Interest, token: UInt64) throws(SluiceError)
    func deregister(fd: Int32)
    /// Waits up to `timeoutNanoseconds` (nil: forever; 0: do not wait) and calls `body` with
    /// the token of each ready registration.
    func wait(timeoutNanoseconds: UInt64?, _ body: (UInt64, Readiness) -> Void) throws(SluiceError)
    func close()
}

/// `Selector` over Linux epoll, level-triggered.
final class EpollSelector: Selector {
    private let epfd: Int32
    private var events: UnsafeMutableBufferPointer<epoll_event>

    init() throws(SluiceError) {
        epfd = try syscallValue("epoll_create1") { epoll_create1(Int32(EPOLL_CLOEXEC)) }
        events = .allocate(capacity: 256)
    }

    private static func mask(_ interest: Interest) -> UInt32 {
        var m: UInt32 = 0
        // EPOLLRDHUP only with read interest: once the peer has shut down its side it stays
        // set, and a writer waiting for space would otherwise be woken at every turn.
        if interest.contains(.read) { m |= EPOLLIN.rawValue | EPOLLRDHUP.rawValue }
        if interest.contains(.write) { m |= EPOLLOUT.rawValue }
        return m
    }

    func register(fd: Int32, interest: Interest, token: UInt64) throws(SluiceError) {
        var ev = epoll_event(events: Self.mask(interest), data: epoll_data_t(u64: token))
        try syscallValue("epoll_ctl", "fd \(fd)") { epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) }
    }

    func reregister(fd: Int32, interest: Interest, token: UInt64) throws(SluiceError) {
        var ev = epoll_event(events: Self.mask(interest), data: epoll_data_t(u64: token))
        try syscallValue("epoll_ctl", "fd \(fd)") { epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) }
    }

    func deregister(fd: Int32) {
        var ev = epoll_event()
        _ = epoll_ctl(epfd, EPOLL_CTL_DEL, fd, &ev)
    }

    func wait(timeoutNanoseconds: UInt64?, _ body: (UInt64, Readiness) -> Void) throws(SluiceError) {
        let timeout: Int32
        if let ns = timeoutNanoseconds {
            // Round up so a timer is never fired early.
            timeout = Int32(clamping: (ns + 999_999) / 1_000_000)
        } else {
            timeout = -1
        }
        let n: Int32
        switch try syscall("epoll_wait", nil, { epoll_wait(epfd, events.baseAddress, Int32(events.count), timeout) }) {
        case .processed(let count): n = count
        case .wouldBlock: return
        }
        for i in 0..<Int(n) {
            let ev = events[i]
            var r: Readiness = []
            let bits = ev.events
            if bits & EPOLLIN.rawValue != 0 { r.insert(.readable) }
            if bits & EPOLLOUT.rawValue != 0 { r.insert(.writable) }
            if bits & (EPOLLHUP.rawValue | EPOLLRDHUP.rawValue) != 0 { r.insert(.hangup) }
            if bits & EPOLLERR.rawValue != 0 { r.insert(.error) }
            body(ev.data.u64, r)
        }
    }

    func close() {
        closeDescriptor(epfd)
        events.deallocate()
    }
}
