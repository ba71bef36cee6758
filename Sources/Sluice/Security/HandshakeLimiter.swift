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
}
