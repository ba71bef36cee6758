/// Text that came from outside — a peer's file names and reasons, names read from a
/// directory — made safe to show on a terminal or write to a log. The one place such text is
/// escaped: the transfer protocol's decoder passes every reason through it, and a program
/// printing a received path passes the path through it.
///
/// A character that could act instead of being seen is shown as its code in Swift's notation,
/// `\u{202E}`, so a reader sees that it was there: the C0 and C1 controls and DEL (the
/// terminal's escape sequences: ESC, CSI U+009B, OSC U+009D), the bidirectional controls
/// (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), which reorder what follows them
/// (`gpj.exe` shown as `exe.jpg`), the zero-width characters (U+200B–U+200D, U+2060, U+FEFF),
/// and the other invisible format characters and line separators (Unicode categories Cc, Cf,
/// Zl, Zp). Bytes that are not UTF-8 are shown as `\x{FF}`. Everything else, accented letters
/// and other scripts included, is kept as it is.
///
/// A backslash is not escaped: the output is made only of kept characters and those escapes,
/// so sanitizing it again changes nothing, and a name that spells `\u{202E}` in plain
/// characters can only look suspicious, never hide anything.
public enum PeerText {
    /// `bytes` decoded as UTF-8, shown safely (see `PeerText`).
    public static func sanitized(_ bytes: some Collection<UInt8>) -> String {
        let bytes = Array(bytes)
        var out = ""
        var parser = Unicode.UTF8.ForwardParser()
        var iterator = bytes.makeIterator()
        // The parser reports each scalar or error in order, so their lengths give the position.
        var position = 0
        while true {
            switch parser.parseScalar(from: &iterator) {
            case .valid(let encoded):
                append(Unicode.UTF8.decode(encoded), to: &out)
                position += encoded.count
            case .error(let length):
                for byte in bytes[position..<position + length] { out += "\\x{" + hex(UInt32(byte)) + "}" }
                position += length
            case .emptyInput:
                return out
            }
        }
    }

    /// `text` shown safely (see `PeerText`).
    public static func sanitized(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isHidden) else { return text }
        var out = ""
        for scalar in text.unicodeScalars { append(scalar, to: &out) }
        return out
    }

    /// True for a character shown as its code: a control, an invisible format character (the
    /// bidirectional and zero-width ones among them), a line or paragraph separator.
    static func isHidden(_ scalar: Unicode.Scalar) -> Bool {
        // Printable ASCII, nearly every path a tree holds, is answered without Unicode's tables.
        if scalar.value >= 0x20 && scalar.value < 0x7F { return false }
        switch scalar.properties.generalCategory {
        case .control, .format, .lineSeparator, .paragraphSeparator:
            return true
        default:
            return false
        }
    }

    private static func append(_ scalar: Unicode.Scalar, to out: inout String) {
        if isHidden(scalar) {
            out += "\\u{" + hex(scalar.value) + "}"
        } else {
            out.unicodeScalars.append(scalar)
        }
    }

    /// Upper-case hexadecimal, at least two digits.
    private static func hex(_ value: UInt32) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return digits.count < 2 ? "0" + digits : digits
    }
}
