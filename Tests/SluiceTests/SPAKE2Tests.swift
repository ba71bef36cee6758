import CCrypto
import TestThreads
import Testing

@testable import Sluice

/// SPAKE2 (RFC 9382) on P-256: the RFC's four test vectors, a code shared and a code not, and
/// every kind of bad share a peer can send.
@Suite("SPAKE2", .ownThreads) struct SPAKE2Tests {
    struct Vector: Sendable, CustomTestStringConvertible {
        let a, b, w, x, y, pA, pB, k, hashTT, ke, macA, macB: String
        var testDescription: String { "A='\(a)', B='\(b)'" }
    }

    /// RFC 9382, Appendix B (the suite P256-SHA256-HKDF-SHA256-HMAC-SHA256, no AAD).
    static let vectors = [
        Vector(
            a: "server", b: "client",
            w: "2ee57912099d31560b3a44b1184b9b4866e904c49d12ac5042c97dca461b1a5f",
            x: "43dd0fd7215bdcb482879fca3220c6a968e66d70b1356cac18bb26c84a78d729",
            y: "dcb60106f276b02606d8ef0a328c02e4b629f84f89786af5befb0bc75b6e66be",
            pA: "04a56fa807caaa53a4d28dbb9853b9815c61a411118a6fe516a8798434751470f9"
                + "010153ac33d0d5f2047ffdb1a3e42c9b4e6be662766e1eeb4116988ede5f912c",
            pB: "0406557e482bd03097ad0cbaa5df82115460d951e3451962f1eaf4367a420676d0"
                + "9857ccbc522686c83d1852abfa8ed6e4a1155cf8f1543ceca528afb591a1e0b7",
            k: "0412af7e89717850671913e6b469ace67bd90a4df8ce45c2af19010175e37eed69"
                + "f75897996d539356e2fa6a406d528501f907e04d97515fbe83db277b715d3325",
            hashTT: "0e0672dc86f8e45565d338b0540abe6915bdf72e2b35b5c9e5663168e960a91b",
            ke: "0e0672dc86f8e45565d338b0540abe69",
            macA: "58ad4aa88e0b60d5061eb6b5dd93e80d9c4f00d127c65b3b35b1b5281fee38f0",
            macB: "d3e2e547f1ae04f2dbdbf0fc4b79f8ecff2dff314b5d32fe9fcef2fb26dc459b"),
        Vector(
            a: "", b: "client",
            w: "0548d8729f730589e579b0475a582c1608138ddf7054b73b5381c7e883e2efae",
            x: "403abbe3b1b4b9ba17e3032849759d723939a27a27b9d921c500edde18ed654b",
            y: "903023b6598908936ea7c929bd761af6039577a9c3f9581064187c3049d87065",
            pA: "04a897b769e681c62ac1c2357319a3d363f610839c4477720d24cbe32f5fd85f44"
                + "fb92ba966578c1b712be6962498834078262caa5b441ecfa9d4a9485720e918a",
            pB: "04e0f816fd1c35e22065d5556215c097e799390d16661c386e0ecc84593974a61b"
                + "881a8c82327687d0501862970c64565560cb5671f696048050ca66ca5f8cc7fc",
            k: "048f83ec9f6e4f87cc6f9dc740bdc2769725f923364f01c84148c049a39a735ebd"
                + "a82eac03e00112fd6a5710682767cff5361f7e819e53d8d3c3a2922e0d837aa6",
            hashTT: "642f05c473c2cd79909f9a841e2f30a70bf89b18180af97353ba198789c2b963",
            ke: "642f05c473c2cd79909f9a841e2f30a7",
            macA: "47d29e6666af1b7dd450d571233085d7a9866e4d49d2645e2df975489521232b",
            macB: "3313c5cefc361d27fb16847a91c2a73b766ffa90a4839122a9b70a2f6bd1d6df"),
        Vector(
            a: "server", b: "",
            w: "626e0cdc7b14c9db3e52a0b1b3a768c98e37852d5db30febe0497b14eae8c254",
            x: "07adb3db6bc623d3399726bfdbfd3d15a58ea776ab8a308b00392621291f9633",
            y: "b6a4fc8dbb629d4ba51d6f91ed1532cf87adec98f25dd153a75accafafedec16",
            pA: "04f88fb71c99bfffaea370966b7eb99cd4be0ff1a7d335caac4211c4afd855e2e1"
                + "5a873b298503ad8ba1d9cbb9a392d2ba309b48bfd7879aefd0f2cea6009763b0",
            pB: "040c269d6be017dccb15182ac6bfcd9e2a14de019dd587eaf4bdfd353f031101e7"
                + "cca177f8eb362a6e83e7d5e729c0732e1b528879c086f39ba0f31a9661bd34db",
            k: "0445ee233b8ecb51ebd6e7da3f307e88a1616bae2166121221fdc0dadb986afaf3"
                + "ec8a988dc9c626fa3b99f58a7ca7c9b844bb3e8dd9554aafc5b53813504c1cbe",
            hashTT: "005184ff460da2ce59062c87733c299c3521297d736598fc0a1127600efa1afb",
            ke: "005184ff460da2ce59062c87733c299c",
            macA: "bc9f9bbe99f26d0b2260e6456e05a86196a3307ec6663a18bf6ac825736533b2",
            macB: "c2370e1bf813b086dff0d834e74425a06e6390f48f5411900276dcccc5a297ec"),
        Vector(
            a: "", b: "",
            w: "7bf46c454b4c1b25799527d896508afd5fc62ef4ec59db1efb49113063d70cca",
            x: "8cef65df64bb2d0f83540c53632de911b5b24b3eab6cc74a97609fd659e95473",
            y: "d7a66f64074a84652d8d623a92e20c9675c61cb5b4f6a0063e4648a2fdc02d53",
            pA: "04a65b367a3f613cf9f0654b1b28a1e3a8a40387956c8ba6063e8658563890f46c"
                + "a1ef6a676598889fc28de2950ab8120b79a5ef1ea4c9f44bc98f585634b46d66",
            pB: "04589f13218822710d98d8b2123a079041052d9941b9cf88c6617ddb2fcc049466"
                + "2eea8ba6b64692dc318250030c6af045cb738bc81ba35b043c3dcb46adf6f58d",
            k: "041a3c03d51b452537ca2a1fea6110353c6d5ed483c4f0f86f4492ca3f378d40a9"
                + "94b4477f93c64d928edbbcd3e85a7c709b7ea73ee97986ce3d1438e135543772",
            hashTT: "fc6374762ba5cf11f4b2caa08b2cd1b9907ae0e26e8d6234318d91583cd74c86",
            ke: "fc6374762ba5cf11f4b2caa08b2cd1b9",
            macA: "dfb4db8d48ae5a675963ea5e6c19d98d4ea028d8e898dad96ea19a80ade95dca",
            macB: "d0f0609d1613138d354f7e95f19fb556bf52d751947241e8c7118df5ef0ae175"),
    ]

    @Test("The RFC's P-256 vectors: shares, transcript, key and both confirmations", arguments: vectors)
    func rfcVectors(_ v: Vector) throws {
        let (idA, idB) = (Array(v.a.utf8), Array(v.b.utf8))
        let a = try SPAKE2(role: .a, password: bytes(v.w), identityA: idA, identityB: idB, secretScalar: bytes(v.x))
        let b = try SPAKE2(role: .b, password: bytes(v.w), identityA: idA, identityB: idB, secretScalar: bytes(v.y))
        #expect(SHA256Digest.hex(a.share) == v.pA)
        #expect(SHA256Digest.hex(b.share) == v.pB)
        let atA = try a.finish(peerShare: b.share)
        let atB = try b.finish(peerShare: a.share)
        #expect(atA.transcript == atB.transcript)
        #expect(SHA256Digest.hex(SHA256Digest.hash(atA.transcript)) == v.hashTT)
        // K sits in the transcript after A, B, pA and pB, each behind its 8-byte length.
        let kStart = 8 * 5 + idA.count + idB.count + 65 * 2
        #expect(SHA256Digest.hex(atA.transcript[kStart..<kStart + 65]) == v.k)
        #expect(SHA256Digest.hex(atA.key) == v.ke && atB.key == atA.key)
        #expect(SHA256Digest.hex(atA.confirmation) == v.macA)
        #expect(SHA256Digest.hex(atB.confirmation) == v.macB)
        #expect(atA.confirms(atB.confirmation) && atB.confirms(atA.confirmation))
        #expect(!atA.confirms(atA.confirmation), "A's own confirmation is not B's")
    }

    @Test("w from a code matches an independent scrypt + HKDF (Python's hashlib)")
    func passwordScalarKnownAnswer() throws {
        // hashlib.scrypt(code, salt + [0, lane], n=2**13, r=8, p=1, dklen=32) for lanes 0 and 1,
        // HKDF-SHA256(both, salt, "sluice code scalar v2", 48) as an integer mod P-256's order.
        let w = try #require(SPAKE2.passwordScalar(code: Array("7-guitarist-revenge-shoe".utf8), salt: [1, 2]))
        #expect(SHA256Digest.hex(w) == "2a865540a9c9c7f0f5c81715767176515a345c3da9029dd4d5f736c0ee74b80e")
    }

    @Test("Random secrets: the same code agrees, another code does not, and additional data is bound")
    func agreement() throws {
        let w = try #require(SPAKE2.passwordScalar(code: Array("7-guitarist-revenge-shoe".utf8), salt: [1, 2]))
        let other = try #require(SPAKE2.passwordScalar(code: Array("7-guitarist-revenge-shop".utf8), salt: [1, 2]))
        #expect(w.count == 32 && w != other)
        #expect(SPAKE2.passwordScalar(code: Array("7-guitarist-revenge-shoe".utf8), salt: [1, 2]) == w)
        #expect(SPAKE2.passwordScalar(code: Array("7-guitarist-revenge-shoe".utf8), salt: [1, 3]) != w)

        let (idA, idB) = (Array("sender".utf8), Array("receiver".utf8))
        let a = try SPAKE2(role: .a, password: w, identityA: idA, identityB: idB, additionalData: [9])
        let b = try SPAKE2(role: .b, password: w, identityA: idA, identityB: idB, additionalData: [9])
        #expect(a.share != (try SPAKE2(role: .a, password: w, identityA: idA, identityB: idB)).share)
        let (atA, atB) = (try a.finish(peerShare: b.share), try b.finish(peerShare: a.share))
        #expect(atA.key == atB.key && atA.confirms(atB.confirmation) && atB.confirms(atA.confirmation))

        let wrong = try SPAKE2(role: .b, password: other, identityA: idA, identityB: idB, additionalData: [9])
        let (atA2, atWrong) = (try a.finish(peerShare: wrong.share), try wrong.finish(peerShare: a.share))
        #expect(atA2.key != atWrong.key)
        #expect(!atA2.confirms(atWrong.confirmation) && !atWrong.confirms(atA2.confirmation))

        let unbound = try SPAKE2(role: .b, password: w, identityA: idA, identityB: idB, additionalData: [8])
        let (atA3, atUnbound) = (try a.finish(peerShare: unbound.share), try unbound.finish(peerShare: a.share))
        #expect(atA3.key == atUnbound.key, "the key does not depend on the additional data")
        #expect(!atA3.confirms(atUnbound.confirmation), "but the confirmation does")
    }

    @Test("A share off the curve, at the identity, of another form or length, or making K the identity: refused")
    func badShares() throws {
        let w = try #require(SPAKE2.passwordScalar(code: Array("1-a-b-c".utf8), salt: []))
        let a = try SPAKE2(role: .a, password: w, identityA: [], identityB: [])
        let b = try SPAKE2(role: .b, password: w, identityA: [], identityB: [])
        var offCurve = b.share
        offCurve[64] ^= 1
        var garbage = [UInt8](repeating: 0xFF, count: 65)
        garbage[0] = 4
        let compressed = [2] + b.share[1...32]
        let infinity: [UInt8] = [0]
        for share in [offCurve, garbage, Array(compressed), infinity, [], Array(b.share.dropLast()), b.share + [0]] {
            #expect(throws: SPAKE2.Failure.invalidShare) { try a.finish(peerShare: share) }
        }
        // pB = w·N: then pB − w·N is the identity, and so is K.
        let group = try #require(EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1))
        defer { EC_GROUP_free(group) }
        let (n, wN, scalar) = (EC_POINT_new(group), EC_POINT_new(group), BN_bin2bn(w, 32, nil))
        defer {
            EC_POINT_free(n)
            EC_POINT_free(wN)
            BN_free(scalar)
        }
        #expect(EC_POINT_oct2point(group, n, SPAKE2.pointN, 33, nil) == 1)
        #expect(EC_POINT_mul(group, wN, nil, n, scalar, nil) == 1)
        var crafted = [UInt8](repeating: 0, count: 65)
        #expect(EC_POINT_point2oct(group, wN, POINT_CONVERSION_UNCOMPRESSED, &crafted, 65, nil) == 65)
        #expect(throws: SPAKE2.Failure.invalidShare) { try a.finish(peerShare: crafted) }
        // A scalar that is not 32 bytes, or not below the order.
        #expect(throws: SPAKE2.Failure.invalidScalar) {
            try SPAKE2(role: .a, password: [1, 2, 3], identityA: [], identityB: [])
        }
        #expect(throws: SPAKE2.Failure.invalidScalar) {
            try SPAKE2(role: .a, password: [UInt8](repeating: 0xFF, count: 32), identityA: [], identityB: [])
        }
        // And the honest exchange still works after all that.
        #expect(try a.finish(peerShare: b.share).confirms(try b.finish(peerShare: a.share).confirmation))
    }

    private func bytes(_ hex: String) -> [UInt8] { Hex.decode(hex) ?? [] }
}

/// The short code's words and its written form.
@Suite("Word codes") struct WordCodeTests {
    @Test("2,048 distinct sorted lower-case words of 3 to 6 letters; each found by its value")
    func words() {
        let words = CodeWords.words
        #expect(words.count == 2048)
        #expect(zip(words, words.dropFirst()).allSatisfy { $0 < $1 }, "sorted, so distinct")
        #expect(words.allSatisfy { (3...6).contains($0.count) && $0.allSatisfy { $0.isASCII && $0.isLowercase } })
        for (index, word) in words.enumerated() {
            #expect(CodeWords.value(of: word) == index)
            #expect(CodeWords.value(of: word.uppercased()) == index)
        }
        #expect(CodeWords.value(of: "aardvarks") == nil && CodeWords.value(of: "") == nil)
        #expect(CodeWords.value(of: "zzzz") == nil && CodeWords.value(of: "a") == nil)
    }

    @Test("Generated codes parse back as written, with any case and separators; each word is drawn evenly")
    func generateAndParse() throws {
        var seen = Set<String>()
        for count in WordCode.wordCounts {
            let code = try #require(WordCode.generate(nameplate: 42, wordCount: count))
            #expect(code.words.count == count && code.secretBits == 11 * count)
            #expect(code.description.hasPrefix("42-"))
            #expect(try WordCode.parse(code.description).get() == code)
            let typed = "  42 " + code.words.map { $0.uppercased() }.joined(separator: " - ")
            #expect(try WordCode.parse(typed).get() == code)
            seen.formUnion(code.words)
        }
        // 3,000 words drawn: every word value is as likely, so the first and second halves of
        // the list (by value) each get about half (a draw that ignores a bit fails this).
        var low = 0
        for _ in 0..<1000 {
            let code = try #require(WordCode.generate(nameplate: 1))
            low += code.words.filter { CodeWords.value(of: $0)! < 1024 }.count
        }
        #expect((1300...1700).contains(low), "\(low) of 3000 in the first half")
        #expect(WordCode.generate(nameplate: 100_000) == nil && WordCode.generate(nameplate: 1, wordCount: 1) == nil)
    }

    @Test("A code without its nameplate, with a word not in the list, or too few words says which")
    func parseErrors() {
        #expect(WordCode.parse("guitar-acorn-tulip") == .failure(.badNameplate("guitar")))
        #expect(WordCode.parse("123456-acorn-tulip") == .failure(.badNameplate("123456")))
        #expect(WordCode.parse("") == .failure(.badNameplate("")))
        #expect(WordCode.parse("٣-acorn-tulip") == .failure(.badNameplate("٣")))
        #expect(WordCode.parse("7-acorn") == .failure(.wordCount(1)))
        #expect(WordCode.parse("7-acorn-tulpi-sushi") == .failure(.unknownWord("tulpi")))
        #expect(String(describing: WordCode.ParseError.unknownWord("tulpi")).contains("typo"))
    }

    @Test("The same words under another nameplate give another SPAKE2 password")
    func passwordDependsOnNameplate() throws {
        let a = try WordCode.parse("7-acorn-tulip-sushi").get()
        let b = try WordCode.parse("8-acorn-tulip-sushi").get()
        let w = try #require(a.passwordScalar)
        #expect(w.count == 32 && w != b.passwordScalar && w == a.passwordScalar)
    }

    @Test("w begun on other threads is the same w, however often and from however many threads it is awaited")
    func pendingPasswordIsThePassword() async throws {
        let code = try WordCode.parse("7-acorn-tulip-sushi").get()
        let pending = code.beginPasswordScalar()
        let awaited = await withTaskGroup(of: [UInt8]?.self) { group in
            for _ in 0..<4 { group.addTask { pending.wait() } }
            return await group.reduce(into: [[UInt8]?]()) { $0.append($1) }
        }
        let w = try #require(code.passwordScalar)
        #expect(awaited.count == 4 && awaited.allSatisfy { $0 == w })
        #expect(pending.wait() == w)
    }
}
