import Testing

@testable import SluiceCLI

@Suite struct CopyOptionsTests {
    func options(_ words: String...) throws -> CopyOptions {
        try CopyOptions(try CopyOptions.parser.parse(words))
    }

    func usageMessage(_ words: String...) -> String? {
        do {
            _ = try CopyOptions(try CopyOptions.parser.parse(words))
            return nil
        } catch {
            return error.message
        }
    }

    @Test func defaults() throws {
        let o = try options("a", "b")
        #expect(o.source == .file("a"))
        #expect(o.destination == .file("b"))
        #expect(o.chunkSize.bytes == 1 << 20)
        #expect(o.transform == nil)
        #expect(o.progress == .auto)
        #expect(o.stats == nil)
        #expect(o.rateLimit == nil && o.timeoutSeconds == nil)
        #expect(!o.force && !o.append && !o.quiet)
        #expect(o.zeroCopy)
        #expect(o.idleSeconds == nil)
    }

    @Test func aSocketEndHasAnIdleLimitUnlessOneIsGiven() throws {
        #expect(try options("a", "tcp:h:1").idleSeconds == 300)
        #expect(try options("tls-listen:9000", "b").idleSeconds == 300)
        #expect(try options("unix:/s", "-").idleSeconds == 300)
        #expect(try options("--timeout", "4", "tcp-listen:9000", "b").idleSeconds == 4)
        #expect(try options("--timeout", "4", "a", "b").idleSeconds == 4)
    }

    @Test func everyOption() throws {
        let o = try options(
            "-b64K", "--stats=json", "--rate-limit", "10M", "--timeout", "2.5", "-f", "-", "tcp:h:1", "-p")
        #expect(o.chunkSize.bytes == 65536)
        #expect(o.stats == .json)
        #expect(o.rateLimit == 10 << 20)
        #expect(o.timeoutSeconds == 2.5)
        #expect(o.force)
        #expect(o.progress == .on)
        #expect(o.source == .standardIO)
        #expect(try options("--stats", "a", "b").stats == .text)
        #expect(try options("--append", "a", "b").append)
        #expect(try options("a", "--no-zero-copy", "b").zeroCopy == false)
        #expect(try options("a", "b").direct == false)
        #expect(try options("--direct", "a", "b").direct)
        #expect(try options("--direct", "a", "-").direct)
    }

    @Test func compressionValues() throws {
        #expect(try options("-z", "a", "b").transform == .compress(CompressionSpec(format: .gzip, level: 6)))
        #expect(try options("-zzlib:1", "a", "b").transform == .compress(CompressionSpec(format: .zlib, level: 1)))
        #expect(try options("--compress=deflate", "a", "b").transform == .compress(CompressionSpec(format: .deflate)))
        #expect(try options("--compress=:9", "a", "b").transform == .compress(CompressionSpec(level: 9)))
        #expect(try options("-d", "a", "b").transform == .decompress(DecompressionSpec(format: .auto)))
        #expect(try options("--decompress=gzip", "a", "b").transform == .decompress(DecompressionSpec(format: .gzip)))
        #expect(try options("-dzlib", "a", "b").transform == .decompress(DecompressionSpec(format: .zlib)))
        // gzip's level options, which an explicit :LEVEL overrides.
        #expect(try options("-z", "-1", "a", "b").transform == .compress(CompressionSpec(format: .gzip, level: 1)))
        #expect(try options("-9", "-zzlib", "a", "b").transform == .compress(CompressionSpec(format: .zlib, level: 9)))
        #expect(try options("-1", "-zgzip:7", "a", "b").transform == .compress(CompressionSpec(level: 7)))
        #expect(try options("-zzstd", "a", "b").transform == .compress(CompressionSpec(format: .zstd, level: 3)))
        #expect(try options("-zzstd:19", "a", "b").transform == .compress(CompressionSpec(format: .zstd, level: 19)))
        #expect(try options("-dzstd", "a", "b").transform == .decompress(DecompressionSpec(format: .zstd)))
        #expect(try options("-T", "3", "-z", "a", "b").threads == 3)
        #expect(try options("-z", "a", "b").threads == nil)
        // A separate word after -z would be an operand: a value-like word is reported.
        #expect(
            usageMessage("-z", "gzip:1", "a", "b")
                == "-z gzip:1: the value of -z must be attached, or 'gzip:1' is read as a file; write -zgzip:1 or --compress=gzip:1"
        )
        #expect(usageMessage("-d", "zstd", "a", "b")?.contains("write -dzstd or --decompress=zstd") == true)
        #expect(try options("-z", "file:gzip", "b").source == .file("gzip"))
    }

    @Test func badValuesNameWhatIsWrong() {
        #expect(usageMessage("-b", "511", "a", "b")?.contains("must be 512 to 4M (4194304)") == true)
        #expect(usageMessage("-b", "4194305", "a", "b")?.contains("must be 512 to 4M") == true)
        #expect(usageMessage("-b", "12Q", "a", "b")?.contains("chunk size '12Q'") == true)
        #expect(usageMessage("--compress=lz4", "a", "b")?.contains("unknown format 'lz4'") == true)
        #expect(usageMessage("-zgzip:10", "a", "b") == "-z: level '10' is not a number from 0 to 9 for gzip")
        #expect(usageMessage("-zzstd:20", "a", "b") == "-z: level '20' is not a number from 1 to 19 for zstd")
        #expect(usageMessage("-3", "a", "b")?.contains("use it with -z") == true)
        #expect(usageMessage("--threads", "0", "-z", "a", "b")?.contains("from 1 to 256") == true)
        #expect(usageMessage("--compress=gzip:", "a", "b")?.contains("level ''") == true)
        #expect(usageMessage("--decompress=brotli", "a", "b")?.contains("unknown format 'brotli'") == true)
        #expect(usageMessage("-z", "-d", "a", "b") == "-z and -d cannot be used together")
        #expect(usageMessage("--stats=xml", "a", "b") == "--stats: unknown format 'xml' (text or json)")
        #expect(usageMessage("--rate-limit", "0", "a", "b")?.contains("positive number of bytes") == true)
        #expect(usageMessage("--rate-limit", "fast", "a", "b")?.contains("'fast'") == true)
        #expect(usageMessage("--timeout", "0", "a", "b")?.contains("number of seconds") == true)
        #expect(usageMessage("--timeout", "-1", "a", "b")?.contains("number of seconds") == true)
        #expect(usageMessage("--timeout", "inf", "a", "b")?.contains("number of seconds") == true)
        #expect(usageMessage("-f", "--append", "a", "b") == "--force and --append cannot be used together")
        #expect(usageMessage("--append", "a", "tcp:h:1")?.contains("--append needs a file destination") == true)
    }

    @Test func operandCount() {
        #expect(usageMessage()?.hasPrefix("copy: missing SOURCE and DEST") == true)
        #expect(usageMessage("a")?.hasPrefix("copy: missing DEST after 'a'") == true)
        #expect(usageMessage("a", "b", "c")?.hasPrefix("copy: unexpected operand 'c'") == true)
    }

    @Test func progressSwitches() throws {
        #expect(try options("-p", "--no-progress", "a", "b").progress == .off)
        #expect(try options("--no-progress", "-p", "a", "b").progress == .on)
        #expect(try options("-p", "-q", "a", "b").progress == .off)
        #expect(CopySession.showsProgress(.auto, stderrIsTerminal: true))
        #expect(!CopySession.showsProgress(.auto, stderrIsTerminal: false))
        #expect(CopySession.showsProgress(.on, stderrIsTerminal: false))
        #expect(!CopySession.showsProgress(.off, stderrIsTerminal: true))
    }
}
