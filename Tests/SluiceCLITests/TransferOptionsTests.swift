import Sluice
import SluiceTransfer
import Testing

@testable import SluiceCLI

@Suite struct TransferOptionsTests {
    @Test func addressesParse() throws {
        #expect(try TransferAddress(parsing: "9000", listening: true) == .tcp(host: nil, port: 9000))
        #expect(try TransferAddress(parsing: "127.0.0.1:0", listening: true) == .tcp(host: "127.0.0.1", port: 0))
        #expect(try TransferAddress(parsing: "host:9000", listening: false) == .tcp(host: "host", port: 9000))
        #expect(try TransferAddress(parsing: "tcp:host:1", listening: false) == .tcp(host: "host", port: 1))
        #expect(try TransferAddress(parsing: "[::1]:9000", listening: false) == .tcp(host: "::1", port: 9000))
        #expect(try TransferAddress(parsing: "tcp:[::1]:9", listening: false) == .tcp(host: "::1", port: 9))
        #expect(try TransferAddress(parsing: "unix:/tmp/s", listening: false) == .unix("/tmp/s"))
        #expect(TransferAddress.tcp(host: "::1", port: 9).description == "[::1]:9")
        for (text, listening) in [
            ("host:0", false), ("::1:9", false), ("[::1]9", false), ("[v4]:9", false), ("h:", true), (":9", true),
            ("unix:", false), ("h:65536", true), ("", true),
        ] {
            #expect(throws: UsageError.self, "\(text)") { try TransferAddress(parsing: text, listening: listening) }
        }
    }

    @Test func sendOptions() throws {
        let parsed = try SendOptions.parser.parse(["-z3", "a", "-", "--name", "x/y", "--no-resume", "h:1"])
        let options = try SendOptions(parsed)
        #expect(options.paths == ["a", "-"])
        #expect(options.streamName == "x/y")
        #expect(options.compressionLevel == 3)
        #expect(options.libraryOptions.resume == false)
        let gzip = try SendOptions(try SendOptions.parser.parse(["--compress=gzip:1", "a", "1"]))
        #expect(gzip.compressionLevel == 1)
        #expect(gzip.destination == .tcp(host: nil, port: 1))
        #expect(try SendOptions(try SendOptions.parser.parse(["-z", "a", "1"])).compressionLevel == 6)
    }

    @Test func receiveOptions() throws {
        let defaults = try ReceiveOptions(try ReceiveOptions.parser.parse([]))
        #expect(defaults.listen == .tcp(host: nil, port: 9000))
        #expect(defaults.directory == ".")
        #expect(defaults.libraryOptions.overwrite == false)
        #expect(defaults.libraryOptions.directIO == false)
        #expect(try ReceiveOptions(try ReceiveOptions.parser.parse(["--direct"])).libraryOptions.directIO)
        let options = try ReceiveOptions(
            try ReceiveOptions.parser.parse(["-l", "[::1]:0", "-C", "in", "--max-size", "1M", "--timeout", "2.5"]))
        #expect(options.listen == .tcp(host: "::1", port: 0))
        #expect(options.directory == "in")
        #expect(options.maxSize == 1_048_576)
        #expect(options.libraryOptions.idleTimeout == .milliseconds(2500))
    }
}

extension TransferOptionsTests {
    /// Each of send's source flags turns on what `SourceOptionFlags` says, `-D` and `-a`
    /// several; `--numeric-ids` needs `--owner` or `-a`.
    @Test func sourceOptionFlags() throws {
        func source(_ words: String...) throws -> SourceOptions {
            try SendOptions(try SendOptions.parser.parse(words + ["a", "1"])).libraryOptions.sourceOptions
        }
        #expect(try source() == [])
        #expect(try source("-H") == .hardLinks)
        #expect(try source("--hard-links") == .hardLinks)
        #expect(try source("-X") == .xattrs)
        #expect(try source("--owner") == .owners)
        #expect(try source("--owner", "--numeric-ids") == [.owners, .numericIDs])
        #expect(try source("--devices") == .devices)
        #expect(try source("--specials") == .specials)
        #expect(try source("-D") == [.devices, .specials])
        #expect(try source("-a") == [.owners, .devices, .specials])
        #expect(
            try source("-aHX", "--numeric-ids") == [.hardLinks, .xattrs, .owners, .numericIDs, .devices, .specials])
        #expect(throws: UsageError("--numeric-ids goes with --owner (or -a)")) { try source("--numeric-ids", "-D") }
    }
}
