/// A tap that counts bytes and tells the average and recent rate, for progress displays.
public final class Meter: Tap {
    public private(set) var bytes: UInt64 = 0
    private var startNanoseconds: UInt64?
    private var endNanoseconds: UInt64?
    // Samples of (time, bytes) at least 100 ms apart, for the recent rate.
    private var samples: [(time: UInt64, bytes: UInt64)] = []
    private var next = 0
    private static let sampleCount = 20

    public init() {}

    public func observe(_ chunk: UnsafeRawBufferPointer) {
        let now = monotonicNanoseconds()
        if startNanoseconds == nil { startNanoseconds = now }
        bytes += UInt64(chunk.count)
        record(now)
    }

    public func finish() {
        if endNanoseconds == nil { endNanoseconds = monotonicNanoseconds() }
    }

    /// Seconds since the first byte (to the end, once finished).
    public var elapsedSeconds: Double {
        guard let start = startNanoseconds else { return 0 }
        let end = endNanoseconds ?? monotonicNanoseconds()
        return Double(end - start) / 1e9
    }

    /// Bytes per second since the first byte.
    public var averageRate: Double {
        let t = elapsedSeconds
        return t > 0 ? Double(bytes) / t : 0
    }

    /// Bytes per second over roughly the last two seconds.
    public var recentRate: Double {
        let now = endNanoseconds ?? monotonicNanoseconds()
        record(now)
        guard !samples.isEmpty else { return 0 }
        let oldest = samples.count < Self.sampleCount ? samples[0] : samples[next]
        guard now > oldest.time else { return averageRate }
        return Double(bytes - oldest.bytes) / (Double(now - oldest.time) / 1e9)
    }

    private func record(_ now: UInt64) {
        if !samples.isEmpty {
            let newest = samples[(next + samples.count - 1) % samples.count]
            if now - newest.time < 100_000_000 { return }
        }
        if samples.count < Self.sampleCount {
            samples.append((now, bytes))
        } else {
            samples[next] = (now, bytes)
        }
        next = (next + 1) % Self.sampleCount
    }
}
