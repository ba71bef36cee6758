/// The size of the chunks a pipeline reads, transforms and writes: 512 bytes to 4 MiB
/// (4,194,304 bytes) inclusive.
public struct ChunkSize: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The accepted range, in bytes.
    public static let range = 512...4_194_304

    /// The default: the size at which the file → file and loopback paths of `sluice bench`
    /// reach their best rate on the reference machine (see Benchmarks/RESULTS.md).
    public static let `default` = ChunkSize(unchecked: 1 << 20)

    public let bytes: Int

    /// A chunk size of `bytes`; throws `.invalidArgument` naming the range when out of it.
    public init(_ bytes: Int) throws(SluiceError) {
        guard Self.range.contains(bytes) else {
            throw Self.rangeError(String(bytes))
        }
        self.bytes = bytes
    }

    private init(unchecked bytes: Int) { self.bytes = bytes }

    /// Parses `512`, `64K`, `64KiB`, `1M`, `4M`, `4MiB` (K = 1024, M = 1048576; a lower-case
    /// `k`/`m` is accepted too). Anything else, or a size outside the range, throws
    /// `.invalidArgument` with a message that names the accepted range.
    public init(parsing text: String) throws(SluiceError) {
        guard let bytes = Self.parseBytes(text) else { throw Self.rangeError(text) }
        guard Self.range.contains(bytes) else { throw Self.rangeError(text) }
        self.bytes = bytes
    }

    /// Parses a byte count with an optional binary suffix: K/KiB, M/MiB, G/GiB (k, m, g too).
    public static func parseBytes(_ text: String) -> Int? {
        let digits = text.prefix { $0.isASCII && $0.isNumber }
        guard !digits.isEmpty, digits.count <= 12, let value = Int(digits) else { return nil }
        let multiplier: Int
        switch text.dropFirst(digits.count) {
        case "": multiplier = 1
        case "K", "k", "KiB": multiplier = 1 << 10
        case "M", "m", "MiB": multiplier = 1 << 20
        case "G", "g", "GiB": multiplier = 1 << 30
        default: return nil
        }
        let (product, overflow) = value.multipliedReportingOverflow(by: multiplier)
        return overflow ? nil : product
    }

    private static func rangeError(_ text: String) -> SluiceError {
        SluiceError(
            .invalidArgument, operation: "chunk size", subject: "'\(text)'",
            detail: "must be 512 to 4M (4194304) bytes, written like 512, 64K, 64KiB, 1M or 4MiB")
    }

    /// `512`, `64K`, `1M`, `4M` when exact; bytes otherwise.
    public var description: String {
        if bytes % (1 << 20) == 0 { return "\(bytes >> 20)M" }
        if bytes % (1 << 10) == 0 { return "\(bytes >> 10)K" }
        return "\(bytes)"
    }

    public static func < (lhs: ChunkSize, rhs: ChunkSize) -> Bool { lhs.bytes < rhs.bytes }
}
