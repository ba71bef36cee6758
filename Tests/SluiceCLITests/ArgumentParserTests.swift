import Testing

@testable import SluiceCLI

/// The parser on its own, with a small option table like copy's, read through its declarations.
@Suite struct ArgumentParserTests {
    static let chunkSize = Option<String>("chunk-size", short: "b", value: .required("SIZE"), help: "chunk")
    static let compress = Option<String?>(
        "compress", short: "z", value: .optional("[=FORMAT][:LEVEL]"), help: "compress", read: { $0.value })
    static let stats = Option<String?>("stats", value: .optional("[=text|json]"), help: "stats", read: { $0.value })
    static let force = Flag("force", short: "f", help: "force")
    static let quiet = Flag("quiet", short: "q", help: "quiet")
    static let timeout = Option<String>("timeout", value: .required("SECONDS"), help: "timeout")
    /// Read as a number of connections, as send's `--streams` is.
    static let streams = Option(
        "streams", short: "P", value: .required("N"), help: "streams", read: Read.number(of: "connections", in: 1...4))

    let parser = ArgumentParser([chunkSize, compress, stats, force, quiet, timeout, streams])

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
        #expect(parsed[Self.force])
        #expect(parsed[Self.quiet])
        #expect(!parsed.isGiven(Self.timeout))
    }

    @Test func requiredValueAttachedOrSeparate() throws {
        #expect(try parse("--chunk-size=64K")[Self.chunkSize] == "64K")
        #expect(try parse("--chunk-size", "64K", "x")[Self.chunkSize] == "64K")
        #expect(try parse("--chunk-size", "64K", "x").operands == ["x"])
        #expect(try parse("-b64K")[Self.chunkSize] == "64K")
        #expect(try parse("-b", "64K")[Self.chunkSize] == "64K")
        // A separate value may look like an option: it is still the value.
        #expect(try parse("--timeout", "-1")[Self.timeout] == "-1")
        #expect(try parse("--chunk-size=")[Self.chunkSize] == "")
        #expect(try parse()[Self.chunkSize] == nil)
    }

    @Test func shortClusters() throws {
        let parsed = try parse("-qf", "src")
        #expect(parsed[Self.quiet] && parsed[Self.force])
        #expect(parsed.operands == ["src"])
        let withValue = try parse("-fqb4M")
        #expect(withValue[Self.force] && withValue[Self.quiet])
        #expect(try withValue[Self.chunkSize] == "4M")
        let separate = try parse("-fb", "512", "x")
        #expect(try separate[Self.chunkSize] == "512")
        #expect(separate.operands == ["x"])
    }

    @Test func optionalValuesOnlyWhenAttached() throws {
        #expect(try parse("--compress=zlib:1")[Self.compress] == "zlib:1")
        #expect(try parse("-zzlib:1")[Self.compress] == "zlib:1")
        let bare = try parse("-z", "zlib:1", "dest")
        #expect(bare.isGiven(Self.compress))
        #expect(try bare[Self.compress] == .some(nil))
        #expect(bare.operands == ["zlib:1", "dest"])
        let long = try parse("--compress", "gzip")
        #expect(try long[Self.compress] == .some(nil))
        #expect(long.operands == ["gzip"])
        #expect(try parse("--stats").isGiven(Self.stats))
        #expect(try parse("--stats=json")[Self.stats] == "json")
        // In a cluster the rest of the word is the value.
        let cluster = try parse("-fzgzip")
        #expect(cluster[Self.force])
        #expect(try cluster[Self.compress] == "gzip")
    }

    @Test func doubleDashEndsOptions() throws {
        let parsed = try parse("-f", "--", "-q", "--force", "-")
        #expect(parsed.operands == ["-q", "--force", "-"])
        #expect(!parsed[Self.quiet])
    }

    @Test func loneDashIsAnOperand() throws {
        #expect(try parse("-", "-").operands == ["-", "-"])
    }

    @Test func lastOccurrenceWins() throws {
        let parsed = try parse("-b", "512", "--chunk-size=4M")
        #expect(try parsed[Self.chunkSize] == "4M")
        #expect(try parsed.last(Self.chunkSize)?.spelling == "--chunk-size")
        #expect(parsed.spelling(of: Self.chunkSize) == "--chunk-size")
        #expect(try parse("-q", "-f").lastGiven([(Self.force, "force"), (Self.quiet, "quiet")]) == "force")
        #expect(try parse("-f", "-q").lastGiven([(Self.force, "force"), (Self.quiet, "quiet")]) == "quiet")
        #expect(try parse("-b1").lastGiven([(Self.force, "force"), (Self.quiet, "quiet")]) == nil)
        #expect(try parse("-b1", "--timeout=2", "-b3").all(Self.chunkSize) == ["1", "3"])
    }

    /// A value is read when the command asks for it, with the option as the user wrote it in
    /// the message; the last occurrence alone is read.
    @Test func valuesAreReadTypedWithTheSpellingUsed() throws {
        let parsed = try parse("-P", "9", "--streams", "2")
        #expect(try parsed[Self.streams] == 2)
        #expect(throws: UsageError("-P '9': must be a number of connections from 1 to 4")) {
            try parse("--streams", "2", "-P9")[Self.streams]
        }
        #expect(throws: UsageError("--streams 'x': must be a number of connections from 1 to 4")) {
            try parse("--streams=x").all(Self.streams)
        }
        // Given but not read: no error yet.
        #expect(try parse("-Px").isGiven(Self.streams))
    }

    /// A declaration read another way, or with other help, keeps its names.
    @Test func declarationsDerived() throws {
        let doubled = Self.streams.reading { (option: ParsedArguments.Occurrence) throws(UsageError) -> Int in
            try Self.streams.read(option) * 2
        }
        #expect(try parse("-P2")[doubled] == 4)
        let helped = Self.timeout.withHelp("other")
        #expect(helped.specs[0].help == "other" && helped.key == Self.timeout.key)
        #expect(try parse("--timeout=5")[helped] == "5")
    }

    /// Reading an option the command does not declare is a mistake in the command, caught the
    /// first time it runs, not an option that reads as never given.
    @Test func readingAnUndeclaredOptionTraps() async {
        await #expect(processExitsWith: .failure) {
            let parsed = try ArgumentParser([Flag("force", help: "force")]).parse(["--force"])
            _ = parsed[Flag("quiet", help: "quiet")]
        }
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

    /// Every command's parser knows `--help` and `--version` (keygen, with no options, aside),
    /// and its help lists the options as the parser's declarations make them, each once.
    @Test func commandsHelpIsMadeFromTheirDeclarations() {
        for command in SluiceCommand.commands where command.name != "keygen" {
            let parser = command.parser
            #expect(parser.declares(CommonOptions.help) && parser.declares(CommonOptions.version), "\(command.name)")
            let listed = parser.specs.filter { !$0.help.isEmpty }.map(\.synopsis)
            #expect(listed.count >= 10 && Set(listed).count == listed.count, "\(command.name)")
            #expect(command.help.contains("Options:\n" + parser.helpLines().joined(separator: "\n") + "\n\n"))
        }
    }
}
