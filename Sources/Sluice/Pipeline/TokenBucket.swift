/// A rate limit as a token bucket: at most `bytesPerSecond` on average, with a burst of a tenth
/// of a second. The writer asks how much it may write; when the answer is nothing, it waits
/// the returned time on the loop's timers (no busy waiting) and asks again.
struct TokenBucket {
    let bytesPerSecond: Int
    private var tokens: Double
    private var updated: UInt64

    init(bytesPerSecond: Int, now: UInt64 = monotonicNanoseconds()) {
        precondition(bytesPerSecond > 0, "rate limit must be positive")
        self.bytesPerSecond = bytesPerSecond
        tokens = Double(bytesPerSecond) / 20  // a small initial burst
        updated = now
    }

    /// How many of `wanted` bytes may be written now. When none may, `wait` says how long
    /// until a worthwhile amount (not a byte at a time) is available.
    mutating func allowance(wanted: Int, now: UInt64 = monotonicNanoseconds()) -> (bytes: Int, waitNanoseconds: UInt64)
    {
        let rate = Double(bytesPerSecond)
        let burst = max(rate / 10, 512)
        tokens = min(burst, tokens + Double(now - updated) * rate / 1e9)
        updated = now
        let grain = min(Double(wanted), max(512, rate / 50))
        if tokens >= grain { return (min(wanted, Int(tokens)), 0) }
        return (0, UInt64((grain - tokens) / rate * 1e9) + 1)
    }

    /// `n` bytes were written.
    mutating func spend(_ n: Int) {
        tokens -= Double(n)
    }
}
