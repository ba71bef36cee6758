/// The one line a client of `sluice relay` sends first (relay protocol version 1): ask for a
/// nameplate, join one, or pair a further connection of a transfer by its stream token.
///
/// `parse(_:)` is a pure function on the bytes received so far, so the relay, the fuzz target
/// and the tests feed it directly; nothing a stranger sends can make it trap.
public enum RelayHello: Hashable, Sendable {
    /// `SLUICE-RELAY 1 OPEN`: a sender asks for a nameplate.
    case open
    /// `SLUICE-RELAY 1 JOIN <n>`: a receiver joins nameplate `n` (1...99999).
    case join(nameplate: Int)
    /// `SLUICE-RELAY 1 STREAM <token>`: a further connection of a transfer; `token` is 64
    /// lowercase hex digits.
    case stream(token: String)

    /// The longest hello, its newline included.
    public static let maximumLength = 128
    /// The highest nameplate.
    public static let maximumNameplate = 99_999
    /// What every hello starts with.
    static let prefix = Array("SLUICE-RELAY 1 ".utf8)

    /// What the bytes received so far make.
    public enum Parse: Hashable, Sendable {
        /// No newline yet, and nothing wrong so far: wait for more (within the hello timeout).
        case incomplete
        /// A hello of `length` bytes, its newline included. Bytes past `length` were sent
        /// before `PAIRED`: a protocol violation the caller deals with.
        case hello(RelayHello, length: Int)
        /// Not a hello (bad version or verb, bad number or token, too long, not ASCII):
        /// answered with `ERR bad hello`.
        case bad
    }

    /// Parses the start of what a client sent. Looks at no more than `maximumLength` bytes.
    public static func parse(_ bytes: some Collection<UInt8>) -> Parse {
        var line: [UInt8] = []
        line.reserveCapacity(min(bytes.count, maximumLength))
        for byte in bytes.prefix(maximumLength) {
            if byte == UInt8(ascii: "\n") {
                guard let hello = hello(line) else { return .bad }
                return .hello(hello, length: line.count + 1)
            }
            // Printable ASCII only; and the line must go on to be a hello: garbage (a TLS
            // ClientHello, an HTTP request) is refused at its first wrong byte.
            guard byte >= 0x20, byte < 0x7f else { return .bad }
            if line.count < prefix.count, byte != prefix[line.count] { return .bad }
            line.append(byte)
        }
        return line.count >= maximumLength ? .bad : .incomplete
    }

    /// The hello a complete line (without its newline) is, or nil.
    private static func hello(_ line: [UInt8]) -> RelayHello? {
        guard line.count > prefix.count, line.starts(with: prefix) else { return nil }
        let words = line[prefix.count...].split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false)
        switch (words.first.map { String(decoding: $0, as: UTF8.self) }, words.count) {
        case ("OPEN", 1):
            return .open
        case ("JOIN", 2):
            return nameplate(words[1]).map { .join(nameplate: $0) }
        case ("STREAM", 2):
            return token(words[1]).map { .stream(token: $0) }
        default:
            return nil
        }
    }

    /// A nameplate as written: 1 to 5 decimal digits, no leading zero.
    static func nameplate(_ digits: ArraySlice<UInt8>) -> Int? {
        guard (1...5).contains(digits.count), digits.first != UInt8(ascii: "0") else { return nil }
        var value = 0
        for digit in digits {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(digit) else { return nil }
            value = value * 10 + Int(digit - UInt8(ascii: "0"))
        }
        return value
    }

    /// A stream token: exactly 64 lowercase hex digits.
    static func token(_ text: ArraySlice<UInt8>) -> String? {
        guard text.count == 64 else { return nil }
        let isHex = text.allSatisfy {
            (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0)
        }
        return isHex ? String(decoding: text, as: UTF8.self) : nil
    }

    /// The hello as a client sends it, newline included.
    public var line: String {
        switch self {
        case .open: return "SLUICE-RELAY 1 OPEN\n"
        case .join(let nameplate): return "SLUICE-RELAY 1 JOIN \(nameplate)\n"
        case .stream(let token): return "SLUICE-RELAY 1 STREAM \(token)\n"
        }
    }
}
