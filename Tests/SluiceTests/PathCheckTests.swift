import Testing

@testable import SluiceTransfer

/// `PathCheck` splits and checks every path a receiver is sent in one pass over its bytes: it
/// accepts and refuses exactly what the plain definition (split, then check each piece, then
/// look for partial names by string comparison) does, for the same reasons.
@Suite("Path checks")
struct PathCheckTests {
    /// The definition: what `PathCheck.receivable` (or `components`, without the partial names)
    /// answered before it was made one pass.
    private static func reference(_ path: [UInt8], receivable: Bool) -> Result<[String], PathRefusal> {
        guard !path.isEmpty else { return .failure(PathRefusal("empty path")) }
        guard path.count <= Wire.maxPathBytes else {
            return .failure(PathRefusal("path longer than \(Wire.maxPathBytes) bytes"))
        }
        guard !path.contains(0) else { return .failure(PathRefusal("NUL byte in path")) }
        guard String(validating: path, as: UTF8.self) != nil else {
            return .failure(PathRefusal("path is not valid UTF-8"))
        }
        guard path.first != UInt8(ascii: "/") else { return .failure(PathRefusal("absolute path")) }
        var components: [String] = []
        for part in path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false) {
            if part.isEmpty { return .failure(PathRefusal("empty path component")) }
            if part.elementsEqual([UInt8(ascii: ".")]) { return .failure(PathRefusal("'.' path component")) }
            if part.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) {
                return .failure(PathRefusal("'..' path component"))
            }
            if part.count > Wire.maxComponentBytes {
                return .failure(PathRefusal("path component longer than \(Wire.maxComponentBytes) bytes"))
            }
            components.append(String(decoding: part, as: UTF8.self))
        }
        if receivable && components.contains(where: PathCheck.isPartialName) {
            return .failure(PathRefusal("the name of a partial file (.NAME.sluice-part) is reserved"))
        }
        return .success(components)
    }

    private static func same(_ path: [UInt8]) -> Bool {
        func flat(_ result: Result<[String], PathRefusal>) -> String {
            switch result {
            case .success(let components): "ok \(components)"
            case .failure(let refusal): "refused \(refusal.reason)"
            }
        }
        return flat(PathCheck.components(path)) == flat(reference(path, receivable: false))
            && flat(PathCheck.receivable(path)) == flat(reference(path, receivable: true))
    }

    static let pieces: [[UInt8]] = [
        Array("a".utf8), Array("dir".utf8), Array("/".utf8), Array(".".utf8), Array("..".utf8), [0],
        Array("é".utf8), Array("e\u{301}".utf8), [0xFF], [0xC3], Array(".sluice-part".utf8),
        Array(".sluice-part.".utf8), Array("\u{301}".utf8), Array("x.sluice-part".utf8),
        Array(repeating: UInt8(ascii: "n"), count: 250),
    ]

    @Test("Chosen paths: accepted and refused as the definition says, for its reasons")
    func chosen() {
        let paths: [String] = [
            "a", "a/b/c", "d0001/f000001", "/a", "a//b", "a/", "./a", "a/./b", "a/../b", "..", ".", "...",
            ".sluice-part.x", ".f.sluice-part", "d/.f.sluice-part/g", ".sluice-part", "..sluice-part",
            ".sluice-part.\u{301}x", ".f.sluice-part\u{301}", "\u{301}.f.sluice-part", ".\u{301}f.sluice-part",
            "é/ü", String(repeating: "x", count: 255), String(repeating: "x", count: 256),
            String(repeating: "ab/", count: 1365) + "a", String(repeating: "ab/", count: 1366) + "a",
        ]
        for path in paths { #expect(Self.same(Array(path.utf8)), "\(path)") }
        for bytes: [UInt8] in [[], [0], [0x61, 0, 0x62], [0xFF], [0x61, 0x2F, 0xC3], [0x2F, 0]] {
            #expect(Self.same(bytes), "\(bytes)")
        }
        #expect((try? PathCheck.receivable(Array("d/.f.sluice-part".utf8)).get()) == nil)
        #expect((try? PathCheck.components(Array("d/.f.sluice-part".utf8)).get()) == ["d", ".f.sluice-part"])
    }

    @Test("Paths made of risky pieces, 20,000 of them: the same answers as the definition")
    func generated() {
        var state: UInt64 = 0x5EED_0052
        func next(_ bound: Int) -> Int {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return Int(state % UInt64(bound))
        }
        for _ in 0..<20_000 {
            var path: [UInt8] = []
            for _ in 0..<(1 + next(8)) { path += Self.pieces[next(Self.pieces.count)] }
            #expect(Self.same(path), "\(path)")
        }
    }
}
