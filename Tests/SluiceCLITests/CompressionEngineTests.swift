import Foundation
import TestThreads
import Testing

/// Runs `sluice` with `SLUICE_ENGINES` set, as a build without the optional engines behaves.
private func sluice(engines: String, _ arguments: String...) throws -> Outcome {
    try Running(URL(fileURLWithPath: "/usr/bin/env"), ["SLUICE_ENGINES=\(engines)", sluiceBinary.path] + arguments)
        .wait()
}

private func installed(_ path: String) -> Bool { FileManager.default.isExecutableFile(atPath: path) }

/// Whether this build and machine have zstd (what `--version` says).
private let zstdPresent: Bool = {
    (try? sluice("--version").stdoutText.contains("zstd 1.")) ?? false
}()

/// `sluice copy` with parallel deflate, zstd and the engines: against the peers, with bad input.
@Suite(.ownThreads) struct CompressionEngineTests {
    static let data: Data = {
        let text = (0..<40_000).map { "line \($0 % 3001): sluice moves bytes \($0 * 7 % 101)\n" }.joined()
        return Data(text.utf8) + randomBytes(300_000, seed: 5)
    }()

    @Test func outputIsIdenticalForOneAndFourThreadsAndReadByThePeers() throws {
        try withTemporaryDirectory { dir in
            try write(Self.data, to: "\(dir)/in")
            for level in ["1", "6", "9"] {
                #expect(try sluice("copy", "-zgzip:\(level)", "-T1", "\(dir)/in", "\(dir)/one.gz").status == 0)
                #expect(try sluice("copy", "-z", "-\(level)", "--threads=4", "\(dir)/in", "\(dir)/four.gz").status == 0)
                #expect(contents("\(dir)/one.gz") == contents("\(dir)/four.gz"), "gzip:\(level)")
                for peer in ["/usr/bin/gzip", "/usr/bin/pigz", "/usr/bin/igzip"] where installed(peer) {
                    let out = try Running(URL(fileURLWithPath: peer), ["-dc", "\(dir)/four.gz"]).wait()
                    #expect(out.status == 0, "\(peer)")
                    #expect(out.stdout == Self.data, "\(peer) of gzip:\(level)")
                }
                try FileManager.default.removeItem(atPath: "\(dir)/one.gz")
                try FileManager.default.removeItem(atPath: "\(dir)/four.gz")
            }
        }
    }

    @Test func theDetachedLevelTrapSaysHowToWriteIt() throws {
        try withTemporaryDirectory { dir in
            try write(Self.data, to: "\(dir)/in")
            let outcome = try sluice("copy", "-z", "gzip:1", "\(dir)/in", "\(dir)/out.gz")
            #expect(outcome.status == 64)
            #expect(outcome.stderrText.contains("write -zgzip:1 or --compress=gzip:1"))
            #expect(!FileManager.default.fileExists(atPath: "\(dir)/out.gz"))
        }
    }

    @Test func versionListsTheEngines() throws {
        let version = try sluice("--version")
        #expect(version.stdoutText.contains("engines: zlib "))
        let zlibOnly = try sluice(engines: "zlib", "--version")
        #expect(zlibOnly.stdoutText.contains("no zstd, no ISA-L, no libdeflate"))
    }

    @Test func zstdWithoutTheEngineExits69AndLeavesNothing() throws {
        try withTemporaryDirectory { dir in
            try write(Self.data, to: "\(dir)/in")
            let outcome = try sluice(engines: "zlib", "copy", "-zzstd", "\(dir)/in", "\(dir)/out.zst")
            #expect(outcome.status == 69)
            #expect(outcome.stderrLines.count == 1)
            #expect(outcome.stderrText.hasPrefix("sluice: ") && outcome.stderrText.contains("zstd"))
            #expect(!FileManager.default.fileExists(atPath: "\(dir)/out.zst"))
            // zstd input detected by -d there: the same answer.
            try write(Data([0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0]), to: "\(dir)/in.zst")
            let decode = try sluice(engines: "zlib", "copy", "-d", "\(dir)/in.zst", "\(dir)/out")
            #expect(decode.status == 69, "\(decode.stderrText)")
            #expect(decode.stderrText.contains("zstd"))
            #expect(!FileManager.default.fileExists(atPath: "\(dir)/out"))
            // gzip still works there, with zlib alone.
            #expect(try sluice(engines: "zlib", "copy", "-zgzip:1", "\(dir)/in", "\(dir)/out.gz").status == 0)
            #expect(try sluice("copy", "-d", "\(dir)/out.gz", "\(dir)/back").status == 0)
            #expect(contents("\(dir)/back") == Self.data)
        }
    }

    @Test(.enabled(if: zstdPresent && installed("/usr/bin/zstd")))
    func zstdRoundTripsWithTheZstdTool() throws {
        try withTemporaryDirectory { dir in
            try write(Self.data, to: "\(dir)/in")
            #expect(try sluice("copy", "-zzstd:19", "\(dir)/in", "\(dir)/a.zst").status == 0)
            let peer = try Running(URL(fileURLWithPath: "/usr/bin/zstd"), ["-dc", "\(dir)/a.zst"]).wait()
            #expect(peer.stdout == Self.data)
            // zstd's own multi-frame output, read back by sluice -d (auto-detected).
            let frames = try Running(URL(fileURLWithPath: "/usr/bin/zstd"), ["-c", "-1", "\(dir)/in"]).wait().stdout
            try write(frames + frames, to: "\(dir)/b.zst")
            #expect(try sluice("copy", "-d", "\(dir)/b.zst", "\(dir)/b").status == 0)
            #expect(contents("\(dir)/b") == Self.data + Self.data)
        }
    }

    @Test func corruptAndTruncatedInputOfEveryFormatExits65WithNothingLeft() throws {
        try withTemporaryDirectory { dir in
            try write(Self.data, to: "\(dir)/in")
            var formats = ["gzip", "zlib", "deflate"]
            if zstdPresent { formats.append("zstd") }
            for format in formats {
                #expect(try sluice("copy", "-z\(format)", "\(dir)/in", "\(dir)/c").status == 0)
                let good = try #require(contents("\(dir)/c"))
                var corrupt = good
                if format == "deflate" {
                    corrupt[0] = 0xff  // a reserved block type (raw deflate carries no checksum)
                } else {
                    corrupt[good.count - 3] ^= 0x5a  // in the checksum or size trailer
                }
                try write(corrupt, to: "\(dir)/corrupt")
                try write(good.prefix(good.count / 2), to: "\(dir)/short")
                for bad in ["corrupt", "short"] {
                    let outcome = try sluice("copy", "--decompress=\(format)", "\(dir)/\(bad)", "\(dir)/out")
                    #expect(outcome.status == 65, "\(format) \(bad): \(outcome.stderrText)")
                    #expect(outcome.stderrLines.count == 1)
                    // The damaged file, then the stage and format: zlib's and ISA-L's inflate, or zstd's.
                    let stage = format == "zstd" ? "decompress" : "inflate"
                    let prefix = "sluice: \(dir)/\(bad): \(stage) \(format): "
                    #expect(outcome.stderrText.hasPrefix(prefix), "\(outcome.stderrText)")
                    #expect(outcome.stderrText.contains("offset"), "\(outcome.stderrText)")
                    #expect(!FileManager.default.fileExists(atPath: "\(dir)/out"), "\(format) \(bad)")
                }
                try FileManager.default.removeItem(atPath: "\(dir)/c")
            }
        }
    }

    /// With three threads or more (`-T3`), gzip's CRC-32 is checked by a worker of its own while
    /// another inflates (as `pigz -d` does); a mismatch it finds late, after the member's bytes
    /// were written, still exits 65 with nothing at the destination, as when the inflating
    /// thread checks (the default on two cores). With each engine, in one member or several.
    @Test(arguments: ["isal,zstd", "zlib"], ["-T3", "-T2"])
    func aCRCMismatchFoundByTheCheckingWorkerExits65WithNothingLeft(engines: String, threads: String) throws {
        try withTemporaryDirectory { dir in
            try write(Self.data, to: "\(dir)/in")
            try write(Self.data.prefix(70_001), to: "\(dir)/in2")
            #expect(try sluice("copy", "-zgzip:6", "\(dir)/in", "\(dir)/a.gz").status == 0)
            #expect(try sluice("copy", "-zgzip:1", "\(dir)/in2", "\(dir)/b.gz").status == 0)
            let a = try #require(contents("\(dir)/a.gz"))
            let b = try #require(contents("\(dir)/b.gz"))
            var badA = a
            badA[a.count - 7] ^= 0x01  // in the CRC-32; the size is right
            var badB = b
            badB[b.count - 8] ^= 0x80
            let cases: [(String, Data, String)] = [
                ("one member", badA, "incorrect data check"),
                ("first of two", badA + b, "incorrect data check"),
                ("last of three", a + b + badB, "incorrect data check"),
                ("garbage after two", a + b + Data([0x1f, 0x8c]), "trailing garbage"),
            ]
            for (name, input, reason) in cases {
                try write(input, to: "\(dir)/bad.gz")
                let outcome = try sluice(engines: engines, "copy", "-d", threads, "\(dir)/bad.gz", "\(dir)/out")
                #expect(outcome.status == 65, "\(engines) \(name): \(outcome.stderrText)")
                #expect(outcome.stderrLines.count == 1, "\(engines) \(name): \(outcome.stderrText)")
                #expect(outcome.stderrText.hasPrefix("sluice: "), "\(engines) \(name)")
                #expect(outcome.stderrText.contains("gzip"), "\(engines) \(name): \(outcome.stderrText)")
                #expect(outcome.stderrText.contains(reason), "\(engines) \(name): \(outcome.stderrText)")
                #expect(outcome.stderrText.contains("offset"), "\(engines) \(name): \(outcome.stderrText)")
                #expect(!FileManager.default.fileExists(atPath: "\(dir)/out"), "\(engines) \(name)")
            }
            // The same members, undamaged and zero-padded, decode to what went in.
            try write(a + b + a + Data(count: 512), to: "\(dir)/good.gz")
            let good = try sluice(engines: engines, "copy", "-d", threads, "\(dir)/good.gz", "\(dir)/out")
            #expect(good.status == 0, "\(engines): \(good.stderrText)")
            #expect(contents("\(dir)/out") == Self.data + Self.data.prefix(70_001) + Self.data)
        }
    }
}
