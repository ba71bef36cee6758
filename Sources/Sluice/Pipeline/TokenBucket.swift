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

/// A rate limit on a loop: the token bucket and the one timer that wakes its writer. A writer
/// asks `take(wanted:)` before each write and reports what it wrote with `spend`; when nothing
/// may go now, the limiter schedules `resume` once, after the wait, on the loop's timers.
package final class RateLimiter {
    private var bucket: TokenBucket
    private var timer: LoopTimer?
    private let loop: () -> EventLoop?
    private let resume: () -> Void

    /// `loop` gives the loop the writer is on now (none: polling, nothing is scheduled);
    /// `resume` writes again once the wait is over.
    package init(
        bytesPerSecond: Int, now: UInt64 = monotonicNanoseconds(), loop: @escaping () -> EventLoop?,
        resume: @escaping () -> Void
    ) {
        bucket = TokenBucket(bytesPerSecond: bytesPerSecond, now: now)
        self.loop = loop
        self.resume = resume
    }

    /// True while the writer waits for the timer: a readiness event is not its cue to write.
    var isWaiting: Bool { timer != nil }

    /// How many of `wanted` bytes may be written now; when none, the timer is set (once).
    package func take(wanted: Int) -> Int {
        let (bytes, wait) = bucket.allowance(wanted: wanted)
        if bytes > 0 { return bytes }
        guard let loop = loop(), timer == nil else { return 0 }
        timer = loop.schedule(after: .nanoseconds(Int64(wait))) { [weak self] in
            guard let self else { return }
            self.timer = nil
            self.resume()
        }
        return 0
    }

    /// `n` bytes were written.
    package func spend(_ n: Int) { bucket.spend(n) }

    /// The writer is done: no more wake-ups.
    package func cancel() {
        timer?.cancel()
        timer = nil
    }
}
