import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `sluice copy` as a program: the built binary, its exit statuses, stdout and stderr.
@Suite(.ownThreads) struct CopyCommandTests {
    @Test(arguments: ["512", "64K", "4M"])
    func fileToFileIsByteIdentical(chunkSize: String) throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(3 * 1_048_576 + 17)
            try write(data, to: "\(dir)/in")
            let outcome = try sluice("copy", "-b", chunkSize, "\(dir)/in", "\(dir)/out")
            #expect(outcome.status == 0)
            #expect(outcome.stderr.isEmpty)
            #expect(contents("\(dir)/out") == data)
            #expect(directoryEntries(dir) == ["in", "out"])
        }
    }

    @Test func emptyFile() throws {
        try withTemporaryDirectory { dir in
            try write(Data(), to: "\(dir)/in")
            #expect(try sluice("copy", "\(dir)/in", "\(dir)/out").status == 0)
            #expect(contents("\(dir)/out") == Data())
        }
    }

    @Test func standardInputToStandardOutput() throws {
        let data = randomBytes(1_048_576 + 3, seed: 7)
        let outcome = try sluice("copy", "-b", "64K", "-", "-", stdin: data)
        #expect(outcome.status == 0)
        #expect(outcome.stdout == data)
        #expect(outcome.stderr.isEmpty)
    }

    @Test func fileToStandardOutputAndBack() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(200_000, seed: 3)
            try write(data, to: "\(dir)/in")
            #expect(try sluice("copy", "\(dir)/in", "-").stdout == data)
            #expect(try sluice("copy", "-", "file:\(dir)/out", stdin: data).status == 0)
            #expect(contents("\(dir)/out") == data)
        }
    }

    // MARK: Usage errors: 64, one line naming the problem

    @Test(arguments: [
        (["-b", "511"], "must be 512 to 4M (4194304) bytes"),
        (["-b", "4194305"], "must be 512 to 4M (4194304) bytes"),
        (["-b", "12Q"], "chunk size '12Q'"),
        (["--frobnicate"], "unknown option '--frobnicate'"),
        (["-x"], "unknown option '-x'"),
        (["--compress=lz4"], "unknown format 'lz4'"),
        (["--rate-limit", "0"], "positive number of bytes"),
        (["--timeout", "soon"], "number of seconds"),
        (["--chunk-size"], "needs a value"),
    ])
    func usageErrors(options: [String], expected: String) throws {
        // The operands come first when the option takes the last word as its value.
        let outcome = try sluice(["copy", "/nonexistent/in", "/nonexistent/out"] + options)
        #expect(outcome.status == 64)
        #expect(outcome.stderrLines.count == 1)
        #expect(outcome.stderrText.hasPrefix("sluice: "))
        #expect(outcome.stderrText.contains(expected), "\(outcome.stderrText)")
    }

    @Test func missingOperands() throws {
        let one = try sluice("copy", "only-source")
        #expect(one.status == 64)
        #expect(
            one.stderrText
                == "sluice: copy: missing DEST after 'only-source' (usage: sluice copy [options] SOURCE DEST)\n")
        let none = try sluice("copy")
        #expect(none.status == 64)
        #expect(none.stderrText.contains("missing SOURCE and DEST"))
        let extra = try sluice("copy", "a", "b", "c")
        #expect(extra.status == 64)
        #expect(extra.stderrText.contains("unexpected operand 'c'"))
        let noCommand = try sluice([])
        #expect(noCommand.status == 64)
        #expect(noCommand.stderrLines.count == 1)
        let unknown = try sluice("frobnicate")
        #expect(unknown.status == 64)
        #expect(unknown.stderrText.hasPrefix("sluice: unknown command 'frobnicate' (commands: copy, "))
        #expect(unknown.stderrLines.count == 1)
        #expect(unknown.stderrText.hasSuffix(", help)\n"))
        let early = try sluice("--frobnicate")
        #expect(early.status == 64)
        #expect(early.stderrText == "sluice: unknown option '--frobnicate'\n")
        let misplaced = try sluice("-q", "copy", "a", "b")
        #expect(misplaced.status == 64)
        #expect(misplaced.stderrText.contains("goes after the command"))
    }

    // MARK: Sources and destinations

    /// The same whichever path the bytes would have taken (zero-copy or not, with a report).
    @Test(arguments: [[], ["--no-zero-copy"], ["--stats=json"]])
    func missingSourceIsNoInput(options: [String]) throws {
        try withTemporaryDirectory { dir in
            let outcome = try sluice(["copy"] + options + ["\(dir)/missing", "\(dir)/out"])
            #expect(outcome.status == 66)
            #expect(outcome.stderrLines.count == 1)
            #expect(outcome.stderrText.contains("\(dir)/missing"))
            #expect(outcome.stderrText.contains("No such file or directory"))
            #expect(directoryEntries(dir).isEmpty)
        }
    }

    @Test func existingDestinationNeedsForce() throws {
        try withTemporaryDirectory { dir in
            try write(Data("new".utf8), to: "\(dir)/in")
            try write(Data("old".utf8), to: "\(dir)/out")
            let refused = try sluice("copy", "\(dir)/in", "\(dir)/out")
            #expect(refused.status == 73)
            #expect(refused.stderrText == "sluice: \(dir)/out: file exists (use --force to replace it)\n")
            #expect(contents("\(dir)/out") == Data("old".utf8))

            let forced = try sluice("copy", "-f", "\(dir)/in", "\(dir)/out")
            #expect(forced.status == 0)
            #expect(contents("\(dir)/out") == Data("new".utf8))
            #expect(directoryEntries(dir) == ["in", "out"])
        }
    }

    @Test func appendAppendsInPlace() throws {
        try withTemporaryDirectory { dir in
            try write(Data("tail".utf8), to: "\(dir)/in")
            try write(Data("head-".utf8), to: "\(dir)/out")
            #expect(try sluice("copy", "--append", "\(dir)/in", "\(dir)/out").status == 0)
            #expect(contents("\(dir)/out") == Data("head-tail".utf8))
            #expect(try sluice("copy", "--append", "\(dir)/in", "\(dir)/new").status == 0)
            #expect(contents("\(dir)/new") == Data("tail".utf8))
            let same = try sluice("copy", "--append", "\(dir)/in", "\(dir)/in")
            #expect(same.status == 64)
            #expect(same.stderrText.contains("input file is output file"))
            #expect(contents("\(dir)/in") == Data("tail".utf8))
        }
    }

    @Test func destinationThatCannotBeCreated() throws {
        try withTemporaryDirectory { dir in
            try write(Data("x".utf8), to: "\(dir)/in")
            let noDirectory = try sluice("copy", "\(dir)/in", "\(dir)/missing/out")
            #expect(noDirectory.status == 73)
            #expect(noDirectory.stderrLines.count == 1)
            #expect(noDirectory.stderrText.contains("\(dir)/missing/out"))
            try FileManager.default.createDirectory(atPath: "\(dir)/sub", withIntermediateDirectories: false)
            // Standard input has no name to give a file in the directory.
            let directory = try sluice(["copy", "-f", "-", "\(dir)/sub"], stdin: Data("x".utf8))
            #expect(directory.status == 73)
            #expect(
                directory.stderrText
                    == "sluice: \(dir)/sub: is a directory (name the file to write in it: \(dir)/sub/NAME)\n")
            #expect(directoryEntries("\(dir)/sub").isEmpty)
        }
    }

    /// `copy FILE DIR` writes DIR/FILE's name, as cp does, under the same rules as any file.
    @Test func aFileCopiedToADirectoryTakesItsName() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(70_000, seed: 48)
            try write(data, to: "\(dir)/in.bin")
            try FileManager.default.createDirectory(atPath: "\(dir)/sub", withIntermediateDirectories: false)
            let first = try sluice("copy", "\(dir)/in.bin", "\(dir)/sub")
            #expect(first.status == 0, "\(first.stderrText)")
            #expect(contents("\(dir)/sub/in.bin") == data)
            let again = try sluice("copy", "\(dir)/in.bin", "\(dir)/sub/")
            #expect(again.status == 73)
            #expect(again.stderrText == "sluice: \(dir)/sub/in.bin: file exists (use --force to replace it)\n")
            let forced = try sluice("copy", "-f", "file:\(dir)/in.bin", "\(dir)/sub/")
            #expect(forced.status == 0, "\(forced.stderrText)")
            #expect(directoryEntries("\(dir)/sub") == ["in.bin"])
        }
    }

    @Test func devicesAreWrittenInPlace() throws {
        try withTemporaryDirectory { dir in
            try write(randomBytes(100_000), to: "\(dir)/in")
            let outcome = try sluice("copy", "\(dir)/in", "/dev/null")
            #expect(outcome.status == 0)
            #expect(outcome.stderr.isEmpty)
        }
    }

    @Test func sourceThatIsADirectoryIsNoInput() throws {
        try withTemporaryDirectory { dir in
            let outcome = try sluice("copy", dir, "\(dir)/out")
            #expect(outcome.status == 66)
            #expect(outcome.stderrLines.count == 1)
            #expect(!FileManager.default.fileExists(atPath: "\(dir)/out"))
        }
    }

    // MARK: Statistics and progress

    @Test func statsJSON() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(1_000_003)
            try write(data, to: "\(dir)/in")
            let outcome = try sluice("copy", "--stats=json", "-b", "64K", "\(dir)/in", "\(dir)/out")
            #expect(outcome.status == 0)
            #expect(outcome.stderrLines.count == 1)
            let object = try #require(try JSONSerialization.jsonObject(with: outcome.stderr) as? [String: Any])
            #expect(object["bytes_read"] as? Int == data.count)
            #expect(object["bytes_written"] as? Int == data.count)
            #expect(object["chunk_size"] as? Int == 65536)
            #expect(object["source"] as? String == "\(dir)/in")
            #expect(object["destination"] as? String == "\(dir)/out")
            for key in ["seconds", "read_rate", "write_rate", "source_bound_seconds", "sink_bound_seconds"] {
                #expect(object[key] is Double || object[key] is Int, "\(key)")
            }
            #expect(object["ratio"] == nil)
        }
    }

    @Test func statsText() throws {
        let outcome = try sluice("copy", "--stats", "-", "-", stdin: Data(count: 5000))
        #expect(outcome.status == 0)
        #expect(outcome.stdout.count == 5000)
        #expect(outcome.stderrText.contains("bytes read            5000 "))
        #expect(outcome.stderrText.contains("destination           stdout"))
    }

    @Test func noProgressWhenStderrIsNotATerminal() throws {
        let outcome = try sluice("copy", "-", "-", stdin: randomBytes(300_000))
        #expect(outcome.status == 0)
        #expect(outcome.stderr.isEmpty)
    }

    @Test func forcedProgressEndsWithACleanLine() throws {
        let outcome = try sluice("copy", "-p", "-", "-", stdin: randomBytes(300_000))
        #expect(outcome.status == 0)
        #expect(outcome.stderrText.hasPrefix("\r"))
        #expect(outcome.stderrText.hasSuffix("\u{1B}[K\n"))
        #expect(outcome.stderrText.contains("293KiB"))
        #expect(try sluice("copy", "-p", "-q", "-", "-", stdin: Data(count: 10)).stderr.isEmpty)
    }

    @Test func progressOnATerminal() throws {
        try withTemporaryDirectory { dir in
            try write(randomBytes(1_500_000), to: "\(dir)/in")
            // script(1) gives the command a pseudo-terminal as stdin, stdout and stderr.
            let command = "\(sluiceBinary.path) copy -b 64K --rate-limit 3M \(dir)/in \(dir)/out"
            let outcome = try Running(URL(fileURLWithPath: "/usr/bin/script"), ["-qfec", command, "/dev/null"]).wait()
            #expect(outcome.status == 0)
            let text = outcome.stdoutText
            #expect(text.range(of: #"\[[0-9.]+(B|KiB|MiB|GiB)/s\]"#, options: .regularExpression) != nil, "\(text)")
            #expect(text.contains("%"))
            #expect(text.unicodeScalars.contains("\r"))
            #expect(text.utf8.last == UInt8(ascii: "\n"))  // a pty turns it into "\r\n": one Character
            #expect(contents("\(dir)/out")?.count == 1_500_000)
        }
    }

    // MARK: Signals and time limits

    @Test func interruptRemovesTheUnfinishedDestination() throws {
        try withTemporaryDirectory { dir in
            try write(randomBytes(3 * 1_048_576), to: "\(dir)/in")
            let running = try Running(sluiceBinary, ["copy", "--rate-limit", "100K", "\(dir)/in", "\(dir)/out"])
            // The copy has started once its temporary file exists.
            waitUntil { directoryEntries(dir).contains { $0.hasPrefix(".out.sluice-") } }
            let during = directoryEntries(dir)
            #expect(during.count == 2)
            #expect(during.contains { $0.hasPrefix(".out.sluice-") }, "\(during)")
            running.signal(SIGINT)
            let outcome = running.wait()
            #expect(outcome.status == 130)
            #expect(outcome.stderrLines.count == 1)
            #expect(outcome.stderrText.contains("interrupted"))
            #expect(directoryEntries(dir) == ["in"])
        }
    }

    /// SIGINT reaches the loop through `execute` from the signal thread while the loop sleeps in
    /// `epoll_wait` (stdin open and silent): it must wake up and end the copy, every time.
    @Test func anInterruptReachesASleepingLoop() throws {
        try withTemporaryDirectory { dir in
            for round in 0..<5 {
                let running = try Running(sluiceBinary, ["copy", "-", "\(dir)/out\(round)"])
                #expect(waitUntil { directoryEntries(dir).contains { $0.hasPrefix(".out\(round).sluice-") } })
                running.signal(SIGINT)
                let outcome = running.wait(closingInput: false, within: .seconds(30))
                #expect(outcome.status == 130, "round \(round): \(outcome.stderrText)")
            }
            #expect(directoryEntries(dir).isEmpty)
        }
    }

    /// SIGTERM, and SIGHUP (an ssh session dropped), clean up as SIGINT does.
    @Test(arguments: [(SIGTERM, "terminated"), (SIGHUP, "hung up")])
    func terminateRemovesTheUnfinishedDestinationToo(signal: Int32, word: String) throws {
        try withTemporaryDirectory { dir in
            try write(randomBytes(2 * 1_048_576), to: "\(dir)/in")
            let running = try Running(sluiceBinary, ["copy", "--rate-limit", "100K", "\(dir)/in", "\(dir)/out"])
            #expect(waitUntil { directoryEntries(dir).contains { $0.hasPrefix(".out.sluice-") } })
            running.signal(signal)
            let outcome = running.wait()
            #expect(outcome.status == 128 + signal)
            #expect(outcome.stderrText == "sluice: copy to \(dir)/out: \(word)\n")
            #expect(directoryEntries(dir) == ["in"])
        }
    }

    @Test func timeoutWhenNothingMoves() throws {
        try withTemporaryDirectory { dir in
            // stdin stays open and silent: nothing moves.
            let running = try Running(sluiceBinary, ["copy", "--timeout", "0.3", "-", "\(dir)/out"])
            let outcome = running.wait(closingInput: false)
            #expect(outcome.status == 74)
            #expect(outcome.stderrText == "sluice: copy to \(dir)/out: timed out (no data moved for 0.3 s)\n")
            #expect(directoryEntries(dir).isEmpty)
        }
    }

    // MARK: Help and version

    @Test func helpAndVersion() throws {
        let version = try sluice("--version")
        #expect(version.status == 0)
        #expect(version.stdoutText.hasPrefix("sluice 0.1.0\nengines: zlib "))
        for words in [["--help"], ["-h"], ["help"]] {
            let help = try sluice(words)
            #expect(help.status == 0)
            #expect(help.stdoutText.contains("sluice copy [options] SOURCE DEST"))
            #expect(help.stderr.isEmpty)
        }
        for words in [["copy", "--help"], ["copy", "-h"], ["help", "copy"], ["copy", "a", "--help"]] {
            let help = try sluice(words)
            #expect(help.status == 0)
            #expect(help.stdoutText.hasPrefix("Usage: sluice copy [options] SOURCE DEST"))
            #expect(help.stdoutText.contains("--chunk-size"))
        }
        #expect(try sluice("copy", "--version").stdoutText == version.stdoutText)
        #expect(try sluice("help", "frobnicate").status == 64)
    }

    @Test func helpFitsEightyColumns() throws {
        for words in [["--help"], ["copy", "--help"]] {
            for line in try sluice(words).stdoutText.split(separator: "\n") {
                #expect(line.count <= 80, "\(line)")
            }
        }
    }

    @Test func everyLongOptionInHelpIsInTheManPage() throws {
        let manPage = try String(contentsOf: packageRoot.appendingPathComponent("man/sluice.1"), encoding: .utf8)
        // The commands sluice --help lists, each with its own --help.
        let overview = try sluice("--help").stdoutText
        let listed = overview.components(separatedBy: "Commands:\n").last ?? ""
        let commands = listed.split(separator: "\n").prefix { $0.hasPrefix("  ") }
            .compactMap { $0.split(separator: " ").first.map(String.init) }.filter { $0 != "help" }
        #expect(commands.contains("copy") && commands.contains("bench"))
        for command in commands {
            #expect(manPage.contains(".It Cm \(command)"), "man/sluice.1 has no section for \(command)")
            let help = try sluice(command, "--help").stdoutText
            let options = Set(help.matches(of: /--([a-z][a-z-]*)/).map { String($0.output.1) })
            #expect(options.count >= 8 || command == "keygen", "\(command)")
            for option in options {
                // mdoc writes --name as "Fl -name" (the macro adds the first dash).
                #expect(
                    manPage.contains("Fl -\(option)") || manPage.contains("Fl \\-\(option)"),
                    "man/sluice.1 does not document \(command) --\(option)")
            }
        }
    }
}
