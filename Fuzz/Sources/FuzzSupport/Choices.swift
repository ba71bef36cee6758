#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The choices a fuzz target makes besides the bytes themselves (where to split the input,
/// how large an output buffer is, which option to use), drawn from a seed that is part of the
/// input, so libFuzzer explores them by mutating that seed and a crashing input replays them
/// exactly.
///
/// Every target's input is one seed byte followed by the payload: `FuzzInput.split(_:)`.
public struct Choices {
    private var state: UInt64

    public init(seed: UInt8, length: Int) {
        state = UInt64(seed) &* 0x9E37_79B9_7F4A_7C15 ^ UInt64(truncatingIfNeeded: length)
    }

    /// The next 64 pseudo-random bits (splitmix64).
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Choices of their own, for a second party (a store beside the stream's splits).
    public mutating func fork() -> Choices {
        var other = self
        other.state = next()
        return other
    }

    /// A number in `0..<bound`.
    public mutating func below(_ bound: Int) -> Int {
        precondition(bound > 0, "Choices.below: the harness asked for an empty range")
        return Int(next() % UInt64(bound))
    }

    /// A piece length from 1 to `max`, mostly small: one byte at a time, a few bytes, a few
    /// hundred, or everything that is left, so that every kind of boundary is tried.
    public mutating func pieceLength(max: Int) -> Int {
        guard max > 1 else { return max }
        switch below(8) {
        case 0, 1: return 1
        case 2, 3: return 1 + below(min(max, 8))
        case 4, 5: return 1 + below(min(max, 512))
        case 6: return 1 + below(max)
        default: return max
        }
    }
}

/// The seed byte and the payload of a fuzz input.
public enum FuzzInput {
    /// Splits libFuzzer's input into the seed of its `Choices` and the payload; nil for an
    /// empty input.
    public static func split(_ start: UnsafeRawPointer?, _ count: Int) -> (Choices, UnsafeRawBufferPointer)? {
        guard let start, count > 0 else { return nil }
        let bytes = UnsafeRawBufferPointer(start: start, count: count)
        return (Choices(seed: bytes[0], length: count), UnsafeRawBufferPointer(rebasing: bytes[1...]))
    }
}

/// Stops the process with `message` on stderr when `condition` is false: a finding. (libFuzzer
/// saves the input that led here; a trap with a message is what a fuzz target is for.)
public func expect(
    _ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String, file: StaticString = #fileID,
    line: UInt = #line
) {
    guard !condition() else { return }
    var text = "fuzz: invariant broken at \(file):\(line): \(message())\n"
    text.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
    abort()
}

extension FuzzInput {
    /// The first seed byte whose choices, for an input of `count` bytes in all, pass `wanted`:
    /// how the seed generator makes an input that a target reads as it intends.
    public static func seedByte(count: Int, where wanted: (inout Choices) -> Bool) -> UInt8 {
        for byte in UInt8.min...UInt8.max {
            var choices = Choices(seed: byte, length: count)
            if wanted(&choices) { return byte }
        }
        return 0
    }
}

/// Writes `line` to stderr at once (a trace survives the abort of a finding).
public func note(_ line: String) {
    var text = line + "\n"
    text.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
}
