import CSluiceLinux

#if canImport(Glibc)
    import Glibc
#endif

/// The address of a socket endpoint: an IPv4 or IPv6 address with a port, or a Unix-domain
/// path. Wraps a `sockaddr_in`, `sockaddr_in6` or `sockaddr_un`.
///
/// Renders as `127.0.0.1:8080`, `[::1]:8080` (with `%scope` for a scoped IPv6 address) or the
/// Unix path, the forms sluice uses in messages.
public struct SocketAddress: Hashable, Sendable, CustomStringConvertible {
    /// The address family.
    public enum Family: Hashable, Sendable {
        /// `AF_INET`.
        case ipv4
        /// `AF_INET6`.
        case ipv6
        /// `AF_UNIX`.
        case unix
    }

    /// The raw `sockaddr` bytes, exactly as long as the kernel takes them.
    private let bytes: [UInt8]

    /// The address family.
    public let family: Family

    /// Wraps a `sockaddr` of `length` bytes filled by the kernel (`accept`, `getsockname`,
    /// `getaddrinfo`). Returns nil for families sluice does not use.
    package init?(sockaddr pointer: UnsafeRawPointer, length: socklen_t) {
        guard Int(length) >= MemoryLayout<sa_family_t>.size else { return nil }
        let rawFamily = Int32(pointer.loadUnaligned(as: sa_family_t.self))
        switch rawFamily {
        case AF_INET:
            guard Int(length) >= MemoryLayout<sockaddr_in>.size else { return nil }
            family = .ipv4
            bytes = Array(UnsafeRawBufferPointer(start: pointer, count: MemoryLayout<sockaddr_in>.size))
        case AF_INET6:
            guard Int(length) >= MemoryLayout<sockaddr_in6>.size else { return nil }
            family = .ipv6
            bytes = Array(UnsafeRawBufferPointer(start: pointer, count: MemoryLayout<sockaddr_in6>.size))
        case AF_UNIX:
            family = .unix
            let count = min(Int(length), MemoryLayout<sockaddr_un>.size)
            bytes = Array(UnsafeRawBufferPointer(start: pointer, count: count))
        default:
            return nil
        }
    }

    /// An IPv4 or IPv6 address given in numeric form (`127.0.0.1`, `::1`, `[::1]`), with a
    /// port. Returns nil when `host` is not a numeric address (`inet_pton`).
    public init?(numericHost host: String, port: UInt16) {
        var host = host
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        var sin = sockaddr_in()
        if inet_pton(AF_INET, host, &sin.sin_addr) == 1 {
            sin.sin_family = sa_family_t(AF_INET)
            sin.sin_port = port.bigEndian
            self.init(copying: &sin)
            return
        }
        var sin6 = sockaddr_in6()
        if inet_pton(AF_INET6, host, &sin6.sin6_addr) == 1 {
            sin6.sin6_family = sa_family_t(AF_INET6)
            sin6.sin6_port = port.bigEndian
            self.init(copying: &sin6)
            return
        }
        return nil
    }

    /// A Unix-domain socket path. Throws `.invalidArgument` when the path is empty or longer
    /// than `sockaddr_un` holds (107 bytes on Linux).
    public init(unixPath path: String) throws(SluiceError) {
        var sun = sockaddr_un()
        sun.sun_family = sa_family_t(AF_UNIX)
        let utf8 = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: sun.sun_path)
        guard !utf8.isEmpty, utf8.count < capacity, !utf8.contains(0) else {
            throw SluiceError(
                .invalidArgument, operation: "unix socket", path: path,
                detail: "a path must be 1 to \(capacity - 1) bytes")
        }
        withUnsafeMutableBytes(of: &sun.sun_path) { raw in
            raw.copyBytes(from: utf8)
        }
        let offset = MemoryLayout<sockaddr_un>.offset(of: \sockaddr_un.sun_path)!
        family = .unix
        bytes = withUnsafeBytes(of: &sun) { Array($0.prefix(offset + utf8.count + 1)) }
    }

    private init<T>(copying value: inout T) {
        let raw = withUnsafeBytes(of: &value) { Array($0) }
        let parsed = raw.withUnsafeBytes { SocketAddress(sockaddr: $0.baseAddress!, length: socklen_t($0.count)) }
        self = parsed!
    }

    /// The port, for IPv4 and IPv6 addresses.
    public var port: UInt16? {
        switch family {
        case .ipv4: return UInt16(bigEndian: load(sockaddr_in.self).sin_port)
        case .ipv6: return UInt16(bigEndian: load(sockaddr_in6.self).sin6_port)
        case .unix: return nil
        }
    }

    /// The numeric host (`127.0.0.1`, `::1`), for IPv4 and IPv6 addresses (`inet_ntop`).
    public var host: String? {
        switch family {
        case .ipv4:
            var addr = load(sockaddr_in.self).sin_addr
            return Self.numeric(AF_INET, &addr, length: INET_ADDRSTRLEN)
        case .ipv6:
            var addr = load(sockaddr_in6.self).sin6_addr
            return Self.numeric(AF_INET6, &addr, length: INET6_ADDRSTRLEN)
        case .unix:
            return nil
        }
    }

    /// The path, for a Unix-domain address; empty for an unnamed socket (a connecting peer).
    public var path: String? {
        guard family == .unix else { return nil }
        let offset = MemoryLayout<sockaddr_un>.offset(of: \sockaddr_un.sun_path)!
        guard bytes.count > offset else { return "" }
        let pathBytes = bytes[offset...].prefix { $0 != 0 }
        return String(decoding: pathBytes, as: UTF8.self)
    }

    /// `127.0.0.1:8080`, `[::1]:8080`, `[fe80::1%2]:8080`, or the Unix path (`unnamed` when empty).
    public var description: String {
        switch family {
        case .ipv4:
            return "\(host ?? "?"):\(port ?? 0)"
        case .ipv6:
            let scope = load(sockaddr_in6.self).sin6_scope_id
            let suffix = scope == 0 ? "" : "%\(scope)"
            return "[\(host ?? "?")\(suffix)]:\(port ?? 0)"
        case .unix:
            let p = path ?? ""
            return p.isEmpty ? "unnamed" : p
        }
    }

    /// The `AF_*` constant of the family.
    var addressFamily: Int32 {
        switch family {
        case .ipv4: return AF_INET
        case .ipv6: return AF_INET6
        case .unix: return AF_UNIX
        }
    }

    /// Calls `body` with the `sockaddr` and its length, for `connect` and `bind`.
    package func withSockAddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) throws(SluiceError) -> R)
        throws(SluiceError)
        -> R
    {
        // Copy into a sockaddr_storage so the pointer is suitably aligned for the kernel's reads.
        var storage = sockaddr_storage()
        withUnsafeMutableBytes(of: &storage) { $0.copyBytes(from: bytes) }
        let length = socklen_t(bytes.count)
        let result: Result<R, SluiceError> = withUnsafePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                do throws(SluiceError) {
                    return .success(try body(sa, length))
                } catch {
                    return .failure(error)
                }
            }
        }
        return try result.get()
    }

    private func load<T>(_ type: T.Type) -> T {
        bytes.withUnsafeBytes { $0.loadUnaligned(as: T.self) }
    }

    private static func numeric(_ family: Int32, _ addr: UnsafeRawPointer, length: Int32) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(length) + 1)
        guard inet_ntop(family, addr, &buffer, socklen_t(length)) != nil else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

extension SocketAddress {
    /// Reads an address with `getsockname`/`getpeername`-shaped `call`.
    static func read(
        _ name: String,
        _ subject: String,
        _ call: (UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32
    ) throws(SluiceError) -> SocketAddress {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        try withUnsafeMutablePointer(to: &storage) { pointer throws(SluiceError) in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa throws(SluiceError) in
                _ = try syscallValue(name, subject) { call(sa, &length) }
            }
        }
        guard let address = withUnsafeBytes(of: &storage, { SocketAddress(sockaddr: $0.baseAddress!, length: length) })
        else {
            throw SluiceError(.invalidArgument, operation: name, subject: subject, detail: "unsupported address family")
        }
        return address
    }

    /// The local address of socket `fd` (`getsockname`).
    package static func local(of fd: Int32) throws(SluiceError) -> SocketAddress {
        try read("getsockname", "fd \(fd)") { getsockname(fd, $0, $1) }
    }

    /// The peer address of socket `fd` (`getpeername`).
    static func peer(of fd: Int32) throws(SluiceError) -> SocketAddress {
        try read("getpeername", "fd \(fd)") { getpeername(fd, $0, $1) }
    }
}

extension SocketAddress {
    /// The raw address of an IPv4 (4 bytes) or IPv6 (16 bytes) address, network order; nil for
    /// a Unix socket's.
    package var addressBytes: [UInt8]? {
        switch family {
        case .ipv4:
            var addr = bytes.withUnsafeBytes { $0.loadUnaligned(as: sockaddr_in.self) }.sin_addr
            return withUnsafeBytes(of: &addr) { Array($0) }
        case .ipv6:
            var addr = bytes.withUnsafeBytes { $0.loadUnaligned(as: sockaddr_in6.self) }.sin6_addr
            return withUnsafeBytes(of: &addr) { Array($0) }
        case .unix:
            return nil
        }
    }

    /// Who is behind this address, for a server's caps: an IPv4 address as itself (also when
    /// it comes mapped into IPv6, `::ffff:a.b.c.d`), an IPv6 address by its /64 network — a
    /// single host or home is usually given a whole /64, so counting exact IPv6 addresses would
    /// let one client pass for 2^64 of them. Nil for a Unix socket's.
    package var capSource: String? {
        guard let raw = addressBytes else { return nil }
        if raw.count == 4 || raw[0..<12].elementsEqual([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF]) {
            return raw.suffix(4).map { String($0) }.joined(separator: ".")
        }
        let groups = stride(from: 0, to: 8, by: 2).map { String(UInt16(raw[$0]) << 8 | UInt16(raw[$0 + 1]), radix: 16) }
        return groups.joined(separator: ":") + "::/64"
    }

    /// An IPv4 (4 bytes) or IPv6 (16 bytes) address from its raw bytes and a port; nil for any
    /// other length.
    package init?(addressBytes raw: [UInt8], port: UInt16) {
        switch raw.count {
        case 4:
            var sin = sockaddr_in()
            sin.sin_family = sa_family_t(AF_INET)
            sin.sin_port = port.bigEndian
            withUnsafeMutableBytes(of: &sin.sin_addr) { $0.copyBytes(from: raw) }
            self.init(copying: &sin)
        case 16:
            var sin6 = sockaddr_in6()
            sin6.sin6_family = sa_family_t(AF_INET6)
            sin6.sin6_port = port.bigEndian
            withUnsafeMutableBytes(of: &sin6.sin6_addr) { $0.copyBytes(from: raw) }
            self.init(copying: &sin6)
        default:
            return nil
        }
    }

    /// One interface address of this host that is up: its address (raw bytes, 4 or 16), its
    /// netmask's, and its flags (`IFF_*`).
    private struct Interface {
        var address: SocketAddress
        var mask: [UInt8]?
        var flags: Int32
        /// The interface's index (`if_nametoindex`): an IPv6 link-scoped address's scope.
        var index: UInt32
    }

    /// The addresses of this host's interfaces that are up (`getifaddrs`), IPv4 and IPv6.
    private static func interfaces() -> [Interface] {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else { return [] }
        defer { freeifaddrs(list) }
        var found: [Interface] = []
        var entry = list
        while let current = entry {
            defer { entry = current.pointee.ifa_next }
            let flags = Int32(bitPattern: current.pointee.ifa_flags)
            guard let sa = current.pointee.ifa_addr, flags & Int32(IFF_UP) != 0 else { continue }
            let length = socklen_t(
                Int32(sa.pointee.sa_family) == AF_INET6
                    ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
            guard let address = SocketAddress(sockaddr: sa, length: length), address.family != .unix else { continue }
            let mask = current.pointee.ifa_netmask.flatMap { SocketAddress(sockaddr: $0, length: length)?.addressBytes }
            let index = current.pointee.ifa_name.map { if_nametoindex($0) } ?? 0
            found.append(Interface(address: address, mask: mask, flags: flags, index: index))
        }
        return found
    }

    /// The addresses of this host's interfaces that are up, with `port`: IPv4 and global IPv6,
    /// without loopback and link-local ones (a peer elsewhere cannot reach those).
    package static func interfaceAddresses(port: UInt16) -> [SocketAddress] {
        var found: [SocketAddress] = []
        for interface in interfaces() where interface.flags & Int32(IFF_LOOPBACK) == 0 {
            guard let raw = interface.address.addressBytes else { continue }
            if interface.address.family == .ipv6 && (raw[0] == 0xFE && raw[1] & 0xC0 == 0x80) { continue }  // fe80::/10
            if interface.address.family == .ipv4 && raw[0] == 169 && raw[1] == 254 { continue }  // 169.254/16
            guard let withPort = SocketAddress(addressBytes: raw, port: port), !found.contains(withPort) else {
                continue
            }
            found.append(withPort)
        }
        return found
    }

    /// ff02::1 (every node on the link) with `port`, scoped to each interface that is up, is
    /// not loopback, takes multicast and has an IPv6 address: how a datagram reaches every
    /// host of an IPv6 network, which has no broadcast.
    package static func linkAllNodesAddresses(port: UInt16) -> [SocketAddress] {
        var indexes: [UInt32] = []
        for interface in interfaces()
        where interface.address.family == .ipv6 && interface.flags & Int32(IFF_LOOPBACK) == 0
            && interface.flags & Int32(IFF_MULTICAST) != 0 && interface.index != 0 && !indexes.contains(interface.index)
        {
            indexes.append(interface.index)
        }
        return indexes.map { index in
            var sin6 = sockaddr_in6()
            sin6.sin6_family = sa_family_t(AF_INET6)
            sin6.sin6_port = port.bigEndian
            sin6.sin6_scope_id = index
            withUnsafeMutableBytes(of: &sin6.sin6_addr) {
                $0.copyBytes(from: [0xFF, 0x02] + [UInt8](repeating: 0, count: 13) + [1])
            }
            return SocketAddress(copying: &sin6)
        }
    }

    /// This address with another port (an IPv6 address's scope kept); nil for a Unix socket's.
    package func replacingPort(_ port: UInt16) -> SocketAddress? {
        guard family != .unix else { return nil }
        var raw = bytes
        raw[2] = UInt8(port >> 8)
        raw[3] = UInt8(port & 0xFF)
        return raw.withUnsafeBytes { buffer in
            buffer.baseAddress.flatMap { SocketAddress(sockaddr: $0, length: socklen_t(buffer.count)) }
        }
    }

    /// The broadcast addresses of this host's IPv4 interfaces that are up, with `port`: each
    /// network's address with every host bit set (the interface's own broadcast address may be
    /// unset, and `255.255.255.255` needs a route that a host without a default route lacks).
    package static func broadcastAddresses(port: UInt16) -> [SocketAddress] {
        var found: [SocketAddress] = []
        for interface in interfaces()
        where interface.flags & Int32(IFF_BROADCAST) != 0 && interface.address.family == .ipv4 {
            guard let host = interface.address.addressBytes, let bits = interface.mask, bits.count == host.count,
                let withPort = SocketAddress(addressBytes: zip(host, bits).map { $0 | ~$1 }, port: port),
                !found.contains(withPort)
            else { continue }
            found.append(withPort)
        }
        return found
    }
}
