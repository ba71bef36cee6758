import Sluice

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
///
/// What is shown is bounded: past `maxShownBytes` of output the text is cut, and ends with
/// `…` (a name of 4,096 bytes that are not UTF-8 would otherwise take 24 KiB to show).
public enum PeerText {
    /// The most UTF-8 bytes a sanitized text takes, its closing `…` included: twice the
    /// longest path the protocol carries, so that any path that needs no escape is shown whole.
    public static let maxShownBytes = 8192

    /// `bytes` decoded as UTF-8, shown safely (see `PeerText`).
    public static func sanitized(_ bytes: some Collection<UInt8>) -> String {
        let bytes = Array(bytes)
        var out = Shown()
        var parser = Unicode.UTF8.ForwardParser()
        var iterator = bytes.makeIterator()
        // The parser reports each scalar or error in order, so their lengths give the position.
        var position = 0
        while !out.isFull {
            switch parser.parseScalar(from: &iterator) {
            case .valid(let encoded):
                out.append(Unicode.UTF8.decode(encoded))
                position += encoded.count
            case .error(let length):
                for byte in bytes[position..<position + length] { out.append(escape: "\\x{" + hex(UInt32(byte)) + "}") }
                position += length
            case .emptyInput:
                return out.text
            }
        }
        return out.text
    }

    /// `text` shown safely (see `PeerText`).
    public static func sanitized(_ text: String) -> String {
        guard text.utf8.count > maxShownBytes || text.unicodeScalars.contains(where: isHidden) else { return text }
        var out = Shown()
        for scalar in text.unicodeScalars {
            out.append(scalar)
            if out.isFull { break }
        }
        return out.text
    }

    /// Sanitized text being built, cut with `…` once it would pass `maxShownBytes`.
    private struct Shown {
        private(set) var text = ""
        private(set) var isFull = false
        /// Room for the closing `…` (three bytes) is kept.
        private var room: Int { PeerText.maxShownBytes - 3 - text.utf8.count }

        mutating func append(_ scalar: Unicode.Scalar) {
            if PeerText.isHidden(scalar) {
                append(escape: "\\u{" + PeerText.hex(scalar.value) + "}")
            } else {
                append(escape: String(scalar))
            }
        }

        /// Appends `piece` (a kept character or an escape) whole, or cuts the text here.
        mutating func append(escape piece: String) {
            guard !isFull else { return }
            guard piece.utf8.count <= room else {
                text += "…"
                isFull = true
                return
            }
            text += piece
        }
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

    /// Upper-case hexadecimal, at least two digits.
    fileprivate static func hex(_ value: UInt32) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return digits.count < 2 ? "0" + digits : digits
    }
}
