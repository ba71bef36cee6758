/// Number formatting for progress and statistics, without Foundation's formatters.
enum Format {
    /// `0B`, `512B`, `1.00KiB`, `12.3MiB`, `123MiB`, `1.50GiB`: three significant digits.
    static func bytes(_ value: Double) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
        var scaled = max(0, value.isFinite ? value : 0)
        var unit = 0
        while scaled >= 1000 && unit < units.count - 1 {
            scaled /= 1024
            unit += 1
        }
        if unit == 0 { return "\(Int(scaled.rounded(.down)))B" }
        return significant(scaled) + units[unit]
    }

    static func bytes(_ value: UInt64) -> String { bytes(Double(value)) }

    /// `4.00MiB/s`.
    static func rate(_ bytesPerSecond: Double) -> String { bytes(bytesPerSecond) + "/s" }

    /// `0:00:07`, `1:02:03`; `99:59:59` at most.
    static func duration(_ seconds: Double) -> String {
        let total = min(Int(max(0, seconds.isFinite ? seconds : 0)), 99 * 3600 + 3599)
        let h = total / 3600
        let m = (total / 60) % 60
        let s = total % 60
        return "\(h):\(twoDigits(m)):\(twoDigits(s))"
    }

    /// Fixed decimals: `fixed(3.14159, 3)` is `3.142`.
    static func fixed(_ value: Double, _ decimals: Int) -> String {
        guard value.isFinite else { return "0" }
        var scale = 1.0
        for _ in 0..<decimals { scale *= 10 }
        let scaled = (abs(value) * scale).rounded()
        guard scaled < 9e15 else { return "\(value)" }
        let whole = UInt64(scaled)
        let integer = whole / UInt64(scale)
        let fraction = whole % UInt64(scale)
        var text = "\(value < 0 && whole != 0 ? "-" : "")\(integer)"
        if decimals > 0 {
            let digits = String(fraction)
            text += "." + String(repeating: "0", count: decimals - digits.count) + digits
        }
        return text
    }

    /// Seconds as given: `5`, `0.5`, `1.25` (three decimals at most, trailing zeros dropped).
    static func seconds(_ value: Double) -> String {
        var text = fixed(value, 3)
        if text.contains(".") {
            while text.hasSuffix("0") { text.removeLast() }
            if text.hasSuffix(".") { text.removeLast() }
        }
        return text
    }

    /// Three significant digits for values from 1 to 1000: `1.00`, `12.3`, `123`.
    private static func significant(_ value: Double) -> String {
        if value < 9.995 { return fixed(value, 2) }
        if value < 99.95 { return fixed(value, 1) }
        return fixed(value, 0)
    }

    private static func twoDigits(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }

    /// A JSON string literal.
    static func jsonString(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// A JSON number: finite, six decimals at most.
    static func jsonNumber(_ value: Double) -> String {
        guard value.isFinite else { return "0" }
        return fixed(value, 6)
    }
}
