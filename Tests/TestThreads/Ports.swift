#if canImport(Glibc)
    import Glibc
#endif

/// A port of `type` (SOCK_DGRAM: UDP, SOCK_STREAM: TCP) free on this host now (a socket bound
/// to port 0, asked its port, then closed); nil when no socket could be bound. For tests that
/// need a port before anything listens on it.
public func freePort(_ type: __socket_type = SOCK_DGRAM) -> UInt16? {
    let fd = socket(AF_INET, Int32(type.rawValue), 0)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var any = sockaddr_in()
    any.sin_family = sa_family_t(AF_INET)
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let ok = withUnsafeMutablePointer(to: &any) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
        }
    }
    return ok ? UInt16(bigEndian: any.sin_port) : nil
}
