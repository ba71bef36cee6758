import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `send --exclude`, `--exclude-from`, `--files-from` (and `-0`), `--shard I/N` and `--shard auto`.
@Suite(.ownThreads) struct SelectionCommandTests {
    /// A small tree under `root/src`.
    func tree(_ root: String) throws {
        for dir in ["src/a/b", "src/build", "src/.git"] {
            try FileManager.default.createDirectory(atPath: "\(root)/\(dir)", withIntermediateDirectories: true)
        }
        for file in ["src/x.c", "src/x.o", "src/a/y.c", "src/a/b/z.c", "src/a/b/z.o", "src/build/out", "src/TODO"] {
            try write(Data(file.utf8), to: "\(root)/\(file)")
        }
    }

    /// The files under `directory`, relative, sorted.
    func files(_ directory: String) -> [String] {
        let enumerator = FileManager.default.enumerator(atPath: directory)
        var out: [String] = []
        while let path = enumerator?.nextObject() as? String {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: "\(directory)/\(path)", isDirectory: &isDirectory),
                !isDirectory.boolValue
            {
                out.append(path)
            }
        }
        return out.sorted()
    }

    /// `send --insecure ARGUMENTS` into a receiver of its own at `inbox`, with `environment` set
    /// and the launchers' variables of this test's own environment removed (`env -u`).
    func send(_ arguments: [String], into inbox: String, environment: [String: String] = [:]) throws -> Outcome {
        let receiver = try ReceiverProcess(["--insecure", "--dir", inbox, "--once"])
        let sent = try Running(
            URL(fileURLWithPath: "/usr/bin/env"),
            Self.clearedLaunchers + environment.map { "\($0)=\($1)" } + [sluiceBinary.path, "send", "--insecure"]
                + arguments + [try receiver.address()]
        ).wait(within: .seconds(30))
        _ = receiver.wait()
        return sent
    }

    @Test func excludePatternsAndAnExcludeFile() throws {
        try withTemporaryDirectory { dir in
            try tree(dir)
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            try write(Data("# build output\n*.o\nbuild/\n\n".utf8), to: "\(dir)/ignore")
            let sent = try send(
                ["--exclude-from", "\(dir)/ignore", "--exclude", ".git", "--exclude", "/TODO", "\(dir)/src"],
                into: inbox)
            #expect(sent.status == 0, "\(sent.stderrText)")
            #expect(files(inbox) == ["src/a/b/z.c", "src/a/y.c", "src/x.c"])
        }
    }

    @Test(arguments: [false, true])
    func filesFromSendsTheListedPathsOnly(nulSeparated: Bool) throws {
        try withTemporaryDirectory { dir in
            try tree(dir)
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            let list = ["a/b/z.c", "./TODO", "build/"]
            try write(Data(list.joined(separator: nulSeparated ? "\0" : "\n").utf8), to: "\(dir)/list")
            let sent = try send(
                ["--files-from", "\(dir)/list", "--exclude", "*.o"] + (nulSeparated ? ["-0"] : []) + ["\(dir)/src"],
                into: inbox)
            #expect(sent.status == 0, "\(sent.stderrText)")
            #expect(files(inbox) == ["src/TODO", "src/a/b/z.c", "src/build/out"])
        }
    }

    @Test func shardsCoverTheTreeExactlyOnce() throws {
        try withTemporaryDirectory { dir in
            try tree(dir)
            var all: [String] = []
            for index in 0..<3 {
                let inbox = "\(dir)/in\(index)"
                mkdir(inbox, 0o755)
                let sent = try send(["--shard", "\(index)/3", "\(dir)/src"], into: inbox)
                #expect(sent.status == 0, "\(sent.stderrText)")
                all += files(inbox)
            }
            let whole = "\(dir)/whole"
            mkdir(whole, 0o755)
            #expect(try send(["\(dir)/src"], into: whole).status == 0)
            #expect(all.sorted() == files(whole))
        }
    }

    /// `env` arguments that unset every variable `--shard auto` reads (CI may itself run in a job).
    static let clearedLaunchers =
        ["SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP"].flatMap { ["-u", $0] }
        + [
            "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "JOB_COMPLETION_INDEX",
        ].flatMap { ["-u", $0] }

    /// Three tasks as three launchers would start them, each with nothing but the same command
    /// line and its own environment, cover the tree exactly once, as `--shard I/3` does.
    @Test(
        arguments: [
            ("SLURM_PROCID", "SLURM_NTASKS"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
            ("JOB_COMPLETION_INDEX", nil),
        ] as [(String, String?)])
    func shardAutoTakesTheLaunchersTask(index variable: String, count: String?) throws {
        try withTemporaryDirectory { dir in
            try tree(dir)
            var all: [String] = []
            for index in 0..<3 {
                let auto = "\(dir)/auto\(index)", fixed = "\(dir)/fixed\(index)"
                mkdir(auto, 0o755)
                mkdir(fixed, 0o755)
                var environment = [variable: "\(index)"]
                if let count { environment[count] = "3" }
                let sent = try send(
                    ["--shard", "auto"] + (count == nil ? ["--shard-count", "3"] : []) + ["\(dir)/src"], into: auto,
                    environment: environment)
                #expect(sent.status == 0, "\(sent.stderrText)")
                #expect(try send(["--shard", "\(index)/3", "\(dir)/src"], into: fixed).status == 0)
                #expect(files(auto) == files(fixed), "task \(index) sends shard \(index) of 3")
                all += files(auto)
            }
            let whole = "\(dir)/whole"
            mkdir(whole, 0o755)
            #expect(try send(["\(dir)/src"], into: whole).status == 0)
            #expect(all.sorted() == files(whole))
        }
    }

    /// A tree with one file larger than the rest together: three tasks balanced by bytes cover
    /// it exactly once, the large file's task sends it alone, and each says its share.
    @Test func shardsByBytesBalanceTheBytes() throws {
        try withTemporaryDirectory { dir in
            try tree(dir)
            try write(Data(repeating: 7, count: 1 << 20), to: "\(dir)/src/a/large.bin")
            var all: [String] = []
            for index in 0..<3 {
                let inbox = "\(dir)/in\(index)"
                mkdir(inbox, 0o755)
                let sent = try send(["--shard", "\(index)/3", "--shard-by", "bytes", "\(dir)/src"], into: inbox)
                #expect(sent.status == 0, "\(sent.stderrText)")
                #expect(sent.stderrText.contains("shard \(index)/3 by bytes: "), "\(sent.stderrText)")
                let got = files(inbox)
                if got.contains("src/a/large.bin") { #expect(got == ["src/a/large.bin"]) }
                all += got
            }
            let whole = "\(dir)/whole"
            mkdir(whole, 0o755)
            #expect(try send(["\(dir)/src"], into: whole).status == 0)
            #expect(all.sorted() == files(whole))
            let alone = try sluice(["send", "--insecure", "--shard-by", "bytes", "\(dir)/src", "127.0.0.1:1"])
            #expect(alone.status == 64 && alone.stderrText.contains("goes with --shard"), "\(alone.stderrText)")
        }
    }

    /// `--shard auto` with no launcher, a variable that is not a number, a Kubernetes index
    /// without `--shard-count`, and `--shard-count` without `auto`: 64, and a line that says why.
    @Test func shardAutoSaysWhatItLookedFor() throws {
        let cases: [([String], [String: String], String)] = [
            (["--shard", "auto"], [:], "looked for SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT, SLURM_PROCID"),
            (["--shard", "auto"], ["SLURM_PROCID": "x1", "SLURM_NTASKS": "4"], "SLURM_PROCID='x1'"),
            (["--shard", "auto"], ["JOB_COMPLETION_INDEX": "2"], "give --shard-count N"),
            (["--shard", "auto"], ["PMI_RANK": "4", "PMI_SIZE": "4"], "PMI_RANK=4 is not below"),
            (["--shard", "auto", "--shard-count", "5"], ["PMI_RANK": "1", "PMI_SIZE": "4"], "disagrees"),
            (["--shard", "1/4", "--shard-count", "4"], [:], "goes with --shard auto"),
            (["--shard", "every"], [:], "or auto"),
        ]
        for (arguments, environment, text) in cases {
            let outcome = try Running(
                URL(fileURLWithPath: "/usr/bin/env"),
                Self.clearedLaunchers + environment.map { "\($0)=\($1)" }
                    + [sluiceBinary.path, "send", "--insecure"] + arguments + ["/nonexistent", "127.0.0.1:1"]
            ).wait()
            #expect(outcome.status == 64, "\(arguments) \(environment): \(outcome.stderrText)")
            #expect(outcome.stderrText.contains(text), "\(arguments) \(environment): \(outcome.stderrText)")
            #expect(outcome.stderrText.hasPrefix("sluice: "), "\(outcome.stderrText)")
        }
    }

    @Test func badSelectionsSayWhy() throws {
        try withTemporaryDirectory { dir in
            try tree(dir)
            try write(Data("../etc/passwd\n".utf8), to: "\(dir)/escape")
            try write(Data("a/nope\n".utf8), to: "\(dir)/missing")
            let cases: [([String], Int32, String)] = [
                (["--shard", "3/3", "\(dir)/src"], 64, "I from 0 to N-1"),
                (["--exclude", "!x.o", "\(dir)/src"], 64, "not supported"),
                (["--files-from", "\(dir)/escape", "\(dir)/src"], 64, "without '..'"),
                (["--files-from", "\(dir)/missing", "\(dir)/src"], 66, "nope"),
                (["--files-from", "\(dir)/nonexistent", "\(dir)/src"], 66, "No such file"),
                (["--files-from", "\(dir)/missing", "\(dir)/src", "\(dir)/src"], 64, "one directory"),
                (["--exclude-from", "\(dir)/nonexistent", "\(dir)/src"], 66, "No such file"),
            ]
            for (arguments, status, text) in cases {
                let outcome = try sluice(["send", "--insecure"] + arguments + ["127.0.0.1:1"])
                #expect(outcome.status == status, "\(arguments): \(outcome.stderrText)")
                #expect(outcome.stderrText.contains(text), "\(arguments): \(outcome.stderrText)")
                #expect(outcome.stderrLines.filter { !$0.contains("--insecure") }.count == 1, "\(outcome.stderrText)")
            }
        }
    }
}
