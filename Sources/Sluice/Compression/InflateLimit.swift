/// Limits that stop an `Inflate` stage from expanding a small input without bound
/// (a decompression bomb). Exceeding one throws `.limitExceeded`.
public struct InflateLimit: Hashable, Sendable {
    /// The most decompressed bytes the stage may produce, or nil for no limit.
    public var maxOutputBytes: Int?
    /// The largest allowed ratio of decompressed to compressed bytes, or nil for no limit.
    /// Only checked once the output exceeds `ratioFloor`, so small inputs are never flagged.
    public var maxRatio: Int?
    /// The output size below which `maxRatio` is not checked.
    public var ratioFloor: Int

    /// - Precondition: every limit is positive and the floor is not negative.
    public init(maxOutputBytes: Int? = nil, maxRatio: Int? = nil, ratioFloor: Int = 1 << 20) {
        precondition((maxOutputBytes ?? 0) >= 0, "InflateLimit.maxOutputBytes must not be negative")
        precondition((maxRatio ?? 1) >= 1, "InflateLimit.maxRatio must be at least 1")
        precondition(ratioFloor >= 0, "InflateLimit.ratioFloor must not be negative")
        self.maxOutputBytes = maxOutputBytes
        self.maxRatio = maxRatio
        self.ratioFloor = ratioFloor
    }

    /// No limits, like `gzip -d`.
    ///
    /// Deflate cannot expand more than about 1032 times, so a ratio limit above that never
    /// fires, while one below it rejects legitimate data (zeros, sparse images compress about
    /// 1000:1): a ratio limit is only useful for untrusted input, and then together with
    /// `maxOutputBytes`, which is the real bound. Set those where the input is untrusted.
    public static let `default` = InflateLimit()

    /// Throws `.limitExceeded` when `totalOut` bytes made from `totalIn` break a limit.
    func check(totalIn: Int, totalOut: Int, operation: String, subject: String) throws(SluiceError) {
        if let max = maxOutputBytes, totalOut > max {
            throw SluiceError(
                .limitExceeded, operation: operation, subject: subject,
                detail: "output exceeds \(max) bytes (decompression bomb guard)")
        }
        if let ratio = maxRatio, totalOut > ratioFloor {
            let (bound, overflow) = totalIn.multipliedReportingOverflow(by: ratio)
            if !overflow && totalOut > bound {
                throw SluiceError(
                    .limitExceeded, operation: operation, subject: subject,
                    detail: "output exceeds \(ratio)x the input (decompression bomb guard)")
            }
        }
    }
}
