import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

@Suite("Text from a peer, made safe to print", .ownThreads)
struct PeerTextTests {
    /// Every character class that must be shown as its code, with examples from its edges.
    static let hidden: [(String, [UInt32])] = [
        ("C0 controls", [0x00, 0x07, 0x09, 0x0A, 0x0D, 0x1B, 0x1F]),
        ("DEL", [0x7F]),
        ("C1 controls (CSI, OSC among them)", [0x80, 0x85, 0x9B, 0x9D, 0x9F]),
        ("bidirectional controls", [0x061C, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E]),
        ("bidirectional isolates", [0x2066, 0x2067, 0x2068, 0x2069]),
        ("zero-width characters", [0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF]),
        ("line and paragraph separators", [0x2028, 0x2029]),
        ("other invisible format characters (soft hyphen, tags)", [0x00AD, 0xE0001, 0xE0041]),
    ]

    @Test("Each control, bidirectional, zero-width and format character is shown as \\u{…}", arguments: hidden)
    func hiddenCharactersAreEscaped(_ name: String, _ values: [UInt32]) {
        for value in values {
            let scalar = Unicode.Scalar(value)!
            let code = String(value, radix: 16, uppercase: true)
            let escape = "\\u{" + (code.count < 2 ? "0" + code : code) + "}"
            var text = "a"
            text.unicodeScalars.append(scalar)
            text += "b"
            #expect(PeerText.sanitized(text) == "a\(escape)b", "\(name): U+\(code)")
            #expect(PeerText.sanitized(Array(text.utf8)) == "a\(escape)b", "\(name): U+\(code) as bytes")
        }
    }

    @Test("Plain text, other scripts and emoji are unchanged")
    func plainTextUnchanged() {
        for text in [
            "", "photos/2024/a b.jpg", "ünïcødé ✓", "日本語のファイル", "مرحبا", "שלום", "❤️ 🎉", "-_.,;:!?'\"()[]{}",
            "back\\slash", "tab-less, newline-less: fine",
        ] {
            #expect(PeerText.sanitized(text) == text)
            #expect(PeerText.sanitized(Array(text.utf8)) == text)
        }
    }

    @Test("A name with a CSI and an OSC sequence and a right-to-left override shows all three")
    func embeddedSequences() {
        let name = "report\u{1B}[2J\u{9B}31m\u{1B}]0;owned\u{07}\u{9D}8;;x\u{9C}\u{202E}gpj.exe"
        let shown = PeerText.sanitized(name)
        #expect(shown == "report\\u{1B}[2J\\u{9B}31m\\u{1B}]0;owned\\u{07}\\u{9D}8;;x\\u{9C}\\u{202E}gpj.exe")
        #expect(PeerText.sanitized(Array(name.utf8)) == shown)
        #expect(!shown.unicodeScalars.contains(where: PeerText.isHidden))
    }

    @Test("Bytes that are not UTF-8 are shown as \\x{…}, the valid text around them kept")
    func invalidUTF8() {
        #expect(PeerText.sanitized([0x61, 0xFF, 0x62]) == "a\\x{FF}b")
        // A truncated three-byte sequence, then an ASCII byte.
        #expect(PeerText.sanitized([0xE2, 0x80, 0x41]) == "\\x{E2}\\x{80}A")
        // An overlong encoding of '/', and a lone continuation byte.
        #expect(PeerText.sanitized([0xC0, 0xAF, 0x80]) == "\\x{C0}\\x{AF}\\x{80}")
        // An encoded surrogate, and a sequence cut off at the end.
        #expect(
            PeerText.sanitized([0xED, 0xA0, 0x80, 0x7A, 0xF0, 0x9F, 0x98])
                == "\\x{ED}\\x{A0}\\x{80}z\\x{F0}\\x{9F}\\x{98}")
        // Valid UTF-8 of a hidden character among invalid bytes.
        #expect(PeerText.sanitized([0xFE, 0xE2, 0x80, 0xAE, 0xFE]) == "\\x{FE}\\u{202E}\\x{FE}")
    }

    @Test("Sanitizing twice changes nothing: text already shown safely may pass again")
    func idempotent() {
        var random = SeededRandom(state: 37)
        for _ in 0..<2000 {
            let bytes = (0..<Int.random(in: 0...24, using: &random)).map { _ -> UInt8 in
                // Mostly the interesting bytes: controls, UTF-8 lead and continuation bytes.
                let pool: [UInt8] = [
                    0x1B, 0x5B, 0x5C, 0x75, 0x7B, 0x7D, 0x7F, 0x9B, 0xC2, 0xE2, 0x80, 0xAE, 0xFF, 0x41,
                ]
                return pool.randomElement(using: &random)!
            }
            let once = PeerText.sanitized(bytes)
            #expect(PeerText.sanitized(once) == once, "\(bytes)")
            #expect(!once.unicodeScalars.contains(where: PeerText.isHidden), "\(bytes)")
        }
    }

    @Test("Reasons from the wire are decoded sanitized: REFUSED, FAILED, ABORT and ERROR")
    func decodedReasons() {
        let reason: [UInt8] = Array("no\u{1B}[31m\u{202E}".utf8) + [0xFF]
        let shown = "no\\u{1B}[31m\\u{202E}\\x{FF}"
        let cases: [(Wire.MessageType, [UInt8], Frame)] = [
            (.refused, [Wire.RefusalCode.exists.rawValue], .refused(code: .exists, reason: shown)),
            (.failed, [Wire.FailureCode.io.rawValue], .failed(code: .io, reason: shown)),
            (.abort, [], .abort(reason: shown)),
            (.error, [], .error(reason: shown)),
        ]
        for (type, prefix, expected) in cases {
            let decoded = (prefix + reason).withUnsafeBytes { FrameDecoder.decode(type, $0) }
            #expect(decoded == expected, "\(type.name)")
        }
    }

    @Test("A path refused as invalid is reported sanitized")
    func refusedPathReported() {
        var machine = receiverAfterHello(.init(overwrite: false, maxSize: nil, resume: true))
        var header = fileHeader("x", size: 1)
        header.path = Array("../\u{1B}]0;t\u{07}\u{202E}".utf8) + [0xC0]
        let actions = machine.received(.frame(.file(header)))
        let paths = actions.compactMap { action -> String? in
            if case .report(let result) = action { return result.path }
            return nil
        }
        #expect(paths == ["../\\u{1B}]0;t\\u{07}\\u{202E}\\x{C0}"])
    }
}
