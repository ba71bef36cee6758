#if canImport(Glibc)
    import Glibc
#endif

/// Limits failed handshakes per peer address, so a listener cannot be used to guess keys at
/// speed: after `maximumFailures` failures within `window`, the address is refused until the
/// oldest of them leaves the window. Memory is bounded by `maximumAddresses` (the least
/// recently failing address is forgotten first). A value: the caller passes the time, which
/// keeps it testable without clocks.
public struct HandshakeLimiter: Sendable {
    public let maximumFailures: Int
    public let window: Duration
    public let maximumAddresses: Int
    private var failures: [String: [ContinuousClock.Instant]] = [:]

    public init(maximumFailures: Int = 5, window: Duration = .seconds(60), maximumAddresses: Int = 4096) {
        precondition(maximumFailures > 0 && maximumAddresses > 0, "HandshakeLimiter limits must be positive")
        self.maximumFailures = maximumFailures
        self.window = window
        self.maximumAddresses = maximumAddresses
    }

    /// Whether a handshake from `address` (a host, without the port) may go ahead at `now`.
    public mutating func allows(_ address: String, at now: ContinuousClock.Instant = .now) -> Bool {
        guard var times = failures[address] else { return true }
        times.removeAll { now - $0 >= window }
        failures[address] = times.isEmpty ? nil : times
        return times.count < maximumFailures
    }

    /// Records a failed handshake from `address` at `now`.
    public mutating func recordFailure(_ address: String, at now: ContinuousClock.Instant = .now) {
        var times = failures[address] ?? []
        times.removeAll { now - $0 >= window }
        times.append(now)
        if times.count > maximumFailures { times.removeFirst(times.count - maximumFailures) }
        failures[address] = times
        if failures.count > maximumAddresses, let oldest = failures.min(by: { $0.value.last! < $1.value.last! })?.key {
            failures[oldest] = nil
        }
    }

    /// Addresses with failures on record.
    public var trackedAddresses: Int { failures.count }

    /// The key an address is counted under: an IPv4 address as it is, an IPv6 address by its
    /// /64 prefix (one host is given a /64 to pick addresses from), an IPv4-mapped IPv6
    /// address as the IPv4 one, a Unix-domain peer as one key.
    public static func key(for peer: SocketAddress) -> String {
        guard peer.family == .ipv6, let host = peer.host else { return peer.host ?? "unix" }
        var address = in6_addr()
        guard inet_pton(AF_INET6, host, &address) == 1 else { return host }
        let bytes = withUnsafeBytes(of: address) { Array($0) }
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff {
            return bytes[12...].map(String.init).joined(separator: ".")
        }
        return Hex.encode(Array(bytes[0..<8])) + "::/64"
    }
}
