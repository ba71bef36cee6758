import Testing

@testable import SluiceCLI

/// The parser on its own, with a small option table like copy's.
@Suite struct ArgumentParserTests {
    let parser = ArgumentParser([
        OptionSpec("chunk-size", short: "b", value: .required("SIZE"), help: "chunk"),
        OptionSpec("compress", short: "z", value: .optional("[=FORMAT][:LEVEL]"), help: "compress"),
        OptionSpec("stats", value: .optional("[=text|json]"), help: "stats"),
        OptionSpec("force", short: "f", help: "force"),
        OptionSpec("quiet", short: "q", help: "quiet"),
        OptionSpec("timeout", value: .required("SECONDS"), help: "timeout"),
    ])

    func parse(_ words: String...) throws -> ParsedArguments {
        try parser.parse(words)
    }

    func usageMessage(_ words: String...) -> String? {
        do {
            _ = try parser.parse(words)
            return nil
        } catch {
            return error.message
        }
    }

    @Test func optionsAnywhereAmongOperands() throws {
        let parsed = try parse("a", "-f", "b", "--quiet")
        #expect(parsed.operands == ["a", "b"])
        #expect(parsed.has("force"))
        #expect(parsed.has("quiet"))
    }

    @Test func requiredValueAttachedOrSeparate() throws {
        #expect(try parse("--chunk-size=64K").value("chunk-size") == "64K")
        #expect(try parse("--chunk-size", "64K", "x").value("chunk-size") == "64K")
        #expect(try parse("--chunk-size", "64K", "x").operands == ["x"])
        #expect(try parse("-b64K").value("chunk-size") == "64K")
        #expect(try parse("-b", "64K").value("chunk-size") == "64K")
        // A separate value may look like an option: it is still the value.
        #expect(try parse("--timeout", "-1").value("timeout") == "-1")
        #expect(try parse("--chunk-size=").value("chunk-size") == "")
    }

    @Test func shortClusters() throws {
        let parsed = try parse("-qf", "src")
        #expect(parsed.has("quiet") && parsed.has("force"))
        #expect(parsed.operands == ["src"])
        let withValue = try parse("-fqb4M")
        #expect(withValue.has("force") && withValue.has("quiet"))
        #expect(withValue.value("chunk-size") == "4M")
        let separate = try parse("-fb", "512", "x")
        #expect(separate.value("chunk-size") == "512")
        #expect(separate.operands == ["x"])
    }

    @Test func optionalValuesOnlyWhenAttached() throws {
        #expect(try parse("--compress=zlib:1").value("compress") == "zlib:1")
        #expect(try parse("-zzlib:1").value("compress") == "zlib:1")
        let bare = try parse("-z", "zlib:1", "dest")
        #expect(bare.has("compress"))
        #expect(bare.value("compress") == nil)
        #expect(bare.operands == ["zlib:1", "dest"])
        let long = try parse("--compress", "gzip")
        #expect(long.value("compress") == nil)
        #expect(long.operands == ["gzip"])
        #expect(try parse("--stats").has("stats"))
        #expect(try parse("--stats=json").value("stats") == "json")
        // In a cluster the rest of the word is the value.
        let cluster = try parse("-fzgzip")
        #expect(cluster.has("force"))
        #expect(cluster.value("compress") == "gzip")
    }

    @Test func doubleDashEndsOptions() throws {
        let parsed = try parse("-f", "--", "-q", "--force", "-")
        #expect(parsed.operands == ["-q", "--force", "-"])
        #expect(!parsed.has("quiet"))
    }

    @Test func loneDashIsAnOperand() throws {
        #expect(try parse("-", "-").operands == ["-", "-"])
    }

    @Test func lastOccurrenceWins() throws {
        let parsed = try parse("-b", "512", "--chunk-size=4M")
        #expect(parsed.value("chunk-size") == "4M")
        #expect(parsed.last("chunk-size")?.spelling == "--chunk-size")
        #expect(try parse("-q", "-f").lastOf(["force", "quiet"]) == "force")
    }

    @Test func unknownOptionsAreNamed() {
        #expect(usageMessage("--frobnicate") == "unknown option '--frobnicate'")
        #expect(usageMessage("--frobnicate=3") == "unknown option '--frobnicate'")
        #expect(usageMessage("-x") == "unknown option '-x'")
        #expect(usageMessage("-fx") == "unknown option '-x'")
        #expect(usageMessage("--forc") == "unknown option '--forc'")
    }

    @Test func valueMistakes() {
        #expect(usageMessage("--chunk-size") == "option '--chunk-size' needs a value")
        #expect(usageMessage("x", "-b") == "option '-b' needs a value")
        #expect(usageMessage("--force=yes") == "option '--force' takes no value")
    }

    @Test func helpLinesAlignAndWrap() {
        let lines = parser.helpLines(indent: 2, column: 26)
        #expect(lines[0] == "  -b, --chunk-size SIZE   chunk")
        #expect(lines[1] == "  -z, --compress[=FORMAT][:LEVEL]\n" + String(repeating: " ", count: 26) + "compress")
        #expect(lines[2].hasPrefix("  --stats[=text|json]"))
    }
}
