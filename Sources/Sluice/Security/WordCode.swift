import CCrypto
import Dispatch
import Synchronization

/// A short code to read out, `NAMEPLATE-word-word-word` (`7-guitar-acorn-tulip`): a nameplate,
/// a few digits that name the meeting place (a relay's slot, an announcement on the network)
/// and are not secret, and words from `CodeWords` (11 bits each), which are.
///
/// The words are far too few bits to be a key: they go through SPAKE2 (`SPAKE2`,
/// `passwordScalar`), which lets an attacker test one guess per run of the protocol with a
/// party holding the code, never offline. With three words a guess succeeds once in 2^33.
public struct WordCode: Hashable, Sendable, CustomStringConvertible {
    /// The nameplate: where the two sides meet; not secret.
    public let nameplate: UInt32
    /// The secret words, lower case, each one of `CodeWords`.
    public let words: [String]

    /// Words in a code by default.
    public static let defaultWordCount = 3
    /// The words a code may have: two (22 bits) to eight.
    public static let wordCounts = 2...8
    /// The largest nameplate: five digits at most.
    public static let maxNameplate: UInt32 = 99_999

    /// Why a written code was rejected.
    public enum ParseError: Error, Hashable, Sendable, CustomStringConvertible {
        /// No nameplate in front (`7-…`), or one of more than five digits.
        case badNameplate(String)
        /// Fewer or more words than a code has.
        case wordCount(Int)
        /// A word that is not one of the code words: a typo, most likely.
        case unknownWord(String)

        public var description: String {
            switch self {
            case .badNameplate(let text):
                return "a code starts with its nameplate, 1 to 5 digits, not '\(text)'"
            case .wordCount(let n):
                return "a code has \(WordCode.wordCounts.lowerBound) to \(WordCode.wordCounts.upperBound) words "
                    + "after its nameplate, not \(n)"
            case .unknownWord(let word): return "'\(word)' is not a code word: a typo in the code?"
            }
        }
    }

    /// A new code for `nameplate` with `wordCount` words drawn from OpenSSL's CSPRNG
    /// (`RAND_bytes`, 11 bits a word: no bias); nil if it has no entropy to give, or the count or
    /// nameplate is out of range.
    public static func generate(nameplate: UInt32, wordCount: Int = defaultWordCount) -> WordCode? {
        guard wordCounts.contains(wordCount), nameplate <= maxNameplate else { return nil }
        var random = [UInt8](repeating: 0, count: 2 * wordCount)
        guard RAND_bytes(&random, Int32(random.count)) == 1 else { return nil }
        let words = (0..<wordCount).map { i in
            String(CodeWords.words[(Int(random[2 * i]) << 8 | Int(random[2 * i + 1])) & 0x7FF])
        }
        return WordCode(nameplate: nameplate, words: words)
    }

    private init(nameplate: UInt32, words: [String]) {
        self.nameplate = nameplate
        self.words = words
    }

    /// Parses a code as a person may type it: any case, words apart by dashes or spaces
    /// (`7 Guitar acorn-tulip`). A pure function of its input.
    public static func parse(_ text: String) -> Result<WordCode, ParseError> {
        let parts = text.split { $0 == "-" || $0 == " " || $0 == "\t" }
        guard let first = parts.first, (1...5).contains(first.count), first.allSatisfy(\.isASCII),
            first.allSatisfy(\.isNumber), let nameplate = UInt32(first)
        else { return .failure(.badNameplate(String(parts.first ?? ""))) }
        let words = parts.dropFirst()
        guard wordCounts.contains(words.count) else { return .failure(.wordCount(words.count)) }
        var found: [String] = []
        for word in words {
            guard let value = CodeWords.value(of: word) else { return .failure(.unknownWord(String(word))) }
            found.append(String(CodeWords.words[value]))
        }
        return .success(WordCode(nameplate: nameplate, words: found))
    }

    /// The code as written: the nameplate and the words, with dashes.
    public var description: String { ([String(nameplate)] + words).joined(separator: "-") }

    /// Bits of secret in the words.
    public var secretBits: Int { 11 * words.count }

    /// SPAKE2's w for this code: the words stretched by scrypt, salted with a label and the
    /// nameplate (so a table of guesses made for one nameplate serves no other). Nil when
    /// libcrypto fails (out of memory).
    public var passwordScalar: [UInt8]? {
        SPAKE2.passwordScalar(
            code: Array(words.joined(separator: "-").utf8),
            salt: Array("sluice word code v1".utf8) + [0]
                + Array(String(nameplate).utf8))
    }

    /// Starts working out `passwordScalar` on other threads and returns at once: a receiver
    /// connects to the relay, or waits for the sender's announcement, while scrypt runs, and
    /// waits for w only when the exchange needs it (up to two round trips saved over a network).
    /// Wait for it on every path, errors included, before the process may exit: libcrypto's
    /// clean-up at exit frees what a running scrypt uses.
    public func beginPasswordScalar() -> PendingScalar {
        PendingScalar { passwordScalar }
    }
}

/// A value being worked out on another thread (``WordCode/beginPasswordScalar()``): `wait()`
/// returns it once it is there, as often as it is asked.
public final class PendingScalar: Sendable {
    private let result = Mutex<[UInt8]??>(nil)
    private let done = DispatchSemaphore(value: 0)

    init(_ work: @escaping @Sendable () -> [UInt8]?) {
        DispatchQueue.global().async { [self] in
            let value = work()
            result.withLock { $0 = .some(value) }
            done.signal()
        }
    }

    /// The value (nil when libcrypto failed), waiting for the work to end if it has not.
    public func wait() -> [UInt8]? {
        if let value = result.withLock({ $0 }) { return value }
        done.wait()
        done.signal()
        return result.withLock { $0 } ?? nil
    }
}
