import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `copy --stats=json`'s report: the last line of stderr that is a JSON object.
func statsObject(_ outcome: Outcome) throws -> [String: Any] {
    try #require(lastJSONObject(outcome.stderrText), "no JSON report in: \(outcome.stderrText)")
}

/// The first fallback of a JSON report.
func firstFallback(_ stats: [String: Any]) -> [String: Any]? {
    (stats["fallbacks"] as? [[String: Any]])?.first
}

/// `sluice copy` over TCP loopback: a receiver `tcp-listen:` on a free port writing to `to`,
/// and a sender from `from`, each with `options` and `--stats=json`.
func copyOverTCP(from: String, to: String, options: [String] = []) throws -> (sender: Outcome, receiver: Outcome) {
    let port = try freePort()
    let receiver = try Running(
        sluiceBinary, ["copy", "--stats=json"] + options + ["tcp-listen:127.0.0.1:\(port)", to])
    let sender = try sluiceWhenListening(
        on: port, ["copy", "--stats=json"] + options + [from, "tcp:127.0.0.1:\(port)"])
    return (sender, receiver.wait(within: .seconds(120)))
}

/// `copy` moves the bytes inside the kernel where nothing transforms them, and says so.
@Suite(.ownThreads) struct ZeroCopyCommandTests {
    static let chunkSizes = ["512", "4K", "64K", "1M", "4M"]

    @Test(arguments: chunkSizes)
    func fileToFileBothWays(chunk: String) throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(5 * 1_048_576 + 33, seed: 21)
            try write(data, to: "\(dir)/in")
            let kernel = try sluice("copy", "-b", chunk, "--stats=json", "\(dir)/in", "\(dir)/kernel")
            let plain = try sluice("copy", "-b", chunk, "--no-zero-copy", "--stats=json", "\(dir)/in", "\(dir)/plain")
            #expect(kernel.status == 0 && plain.status == 0)
            #expect(contents("\(dir)/kernel") == data)
            #expect(contents("\(dir)/plain") == data)
            let zeroCopy = try statsObject(kernel)
            #expect(zeroCopy["path"] as? String == "copy_file_range")
            #expect(zeroCopy["zero_copy"] as? Bool == true)
            #expect((zeroCopy["fallbacks"] as? [Any])?.isEmpty == true)
            let readWrite = try statsObject(plain)
            #expect(readWrite["path"] as? String == "read/write")
            #expect(readWrite["zero_copy"] as? Bool == false)
            #expect(readWrite["path_note"] as? String == "zero-copy turned off")
            for stats in [zeroCopy, readWrite] {
                #expect(stats["bytes_written"] as? Int == data.count)
                for key in ["cpu_user_seconds", "cpu_system_seconds", "cpu_seconds", "cpu_seconds_per_gib"] {
                    #expect(stats[key] is Double || stats[key] is Int, "\(key)")
                }
            }
            #expect(directoryEntries(dir) == ["in", "kernel", "plain"])
        }
    }

    @Test(arguments: ["512", "64K", "4M"])
    func pipesInAndOut(chunk: String) throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(3 * 1_048_576 + 5, seed: 22)
            try write(data, to: "\(dir)/in")
            // stdin and stdout are pipes here (Running gives the program pipes).
            let fromPipe = try sluice(["copy", "-b", chunk, "--stats=json", "-", "\(dir)/out"], stdin: data)
            #expect(fromPipe.status == 0)
            #expect(contents("\(dir)/out") == data)
            #expect(try statsObject(fromPipe)["path"] as? String == "splice")
            let toPipe = try sluice("copy", "-b", chunk, "--stats=json", "\(dir)/in", "-")
            #expect(toPipe.status == 0)
            #expect(toPipe.stdout == data)
            #expect(try statsObject(toPipe)["path"] as? String == "splice")
            let plain = try sluice("copy", "-b", chunk, "--no-zero-copy", "\(dir)/in", "-")
            #expect(plain.stdout == data)
        }
    }

    @Test(arguments: ["512", "64K", "1M", "4M"], [true, false])
    func fileOverLoopbackToFile(chunk: String, zeroCopy: Bool) throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(6 * 1_048_576 + 11, seed: 23)
            try write(data, to: "\(dir)/in")
            let options = ["-b", chunk] + (zeroCopy ? [] : ["--no-zero-copy"])
            let (sender, receiver) = try copyOverTCP(from: "\(dir)/in", to: "\(dir)/out", options: options)
            #expect(sender.status == 0, "\(sender.stderrText)")
            #expect(receiver.status == 0, "\(receiver.stderrText)")
            #expect(contents("\(dir)/out") == data)
            #expect(try statsObject(sender)["path"] as? String == (zeroCopy ? "sendfile" : "read/write"))
            #expect(try statsObject(receiver)["path"] as? String == (zeroCopy ? "splice" : "read/write"))
            #expect(try statsObject(receiver)["bytes_written"] as? Int == data.count)
        }
    }

    @Test func socketToDevNull() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(4 * 1_048_576, seed: 24)
            try write(data, to: "\(dir)/in")
            let (sender, receiver) = try copyOverTCP(from: "\(dir)/in", to: "/dev/null")
            #expect(sender.status == 0 && receiver.status == 0)
            let stats = try statsObject(receiver)
            #expect(stats["path"] as? String == "splice")
            #expect(stats["bytes_written"] as? Int == data.count)
        }
    }

    /// A destination on another file system (/dev/shm, a tmpfs, where /tmp is not): the kernel
    /// refuses copy_file_range there, and sendfile takes over.
    @Test(.enabled(if: onDifferentFileSystems(NSTemporaryDirectory(), "/dev/shm")))
    func destinationThatRefusesCopyFileRange() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(3 * 1_048_576 + 1, seed: 25)
            try write(data, to: "\(dir)/in")
            let destination = "/dev/shm/sluice-cli-test-\(UUID().uuidString)"
            defer { unlink(destination) }
            let outcome = try sluice("copy", "--stats=json", "\(dir)/in", destination)
            #expect(outcome.status == 0)
            #expect(contents(destination) == data)
            let stats = try statsObject(outcome)
            #expect(stats["path"] as? String == "sendfile")
            let fallback = try #require(firstFallback(stats))
            #expect(fallback["refused"] as? String == "copy_file_range")
            #expect(fallback["next"] as? String == "sendfile")
            #expect(fallback["errno"] as? Int == Int(EXDEV))
            #expect(fallback["after_bytes"] as? Int == 0)
        }
    }

    @Test func appendFallsBackToReadWrite() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(2 * 1_048_576 + 9, seed: 26)
            try write(data, to: "\(dir)/in")
            try write(Data("head-".utf8), to: "\(dir)/log")
            let outcome = try sluice("copy", "--append", "--stats", "\(dir)/in", "\(dir)/log")
            #expect(outcome.status == 0)
            #expect(contents("\(dir)/log") == Data("head-".utf8) + data)
            #expect(
                outcome.stderrText.contains(
                    "path                  read/write; sendfile refused after 0 bytes: Invalid argument (errno 22)"),
                "\(outcome.stderrText)")
        }
    }

    @Test func statsTextSaysThePathAndTheCPU() throws {
        try withTemporaryDirectory { dir in
            try write(randomBytes(1_000_000, seed: 27), to: "\(dir)/in")
            let kernel = try sluice("copy", "--stats", "\(dir)/in", "/dev/null")
            #expect(kernel.stderrText.contains("path                  zero-copy (sendfile)\n"), "\(kernel.stderrText)")
            #expect(
                kernel.stderrText.range(
                    of: #"cpu seconds +[0-9.]+ \(user [0-9.]+, system [0-9.]+\), [0-9.]+ per GiB\n"#,
                    options: .regularExpression) != nil, "\(kernel.stderrText)")
            let stage = try sluice("copy", "--stats", "-z", "\(dir)/in", "\(dir)/in.gz")
            #expect(stage.stderrText.contains("path                  read/write (a stage transforms the bytes)\n"))
        }
    }

    @Test func helpSaysHowToTurnItOff() throws {
        let help = try sluice("copy", "--help").stdoutText
        #expect(help.contains("--no-zero-copy"))
        #expect(help.contains("copy_file_range"))
    }

    // MARK: Failures

    /// The sender resets the connection mid-copy: the splicing receiver exits 74 with one line
    /// and removes its temporary file.
    @Test func resetMidCopyRemovesTheTemporaryFile() throws {
        try withTemporaryDirectory { dir in
            let port = try freePort()
            let receiver = try Running(sluiceBinary, ["copy", "tcp-listen:127.0.0.1:\(port)", "\(dir)/out"])
            #expect(waitUntil { isListening(port: port) })
            let fd = try #require(connectToLoopback(port: port))
            let payload = randomBytes(300_000, seed: 28)
            var sent = 0
            while sent < payload.count {
                let n = payload.withUnsafeBytes { send(fd, $0.baseAddress! + sent, payload.count - sent, 0) }
                if n <= 0 { break }
                sent += n
            }
            // The temporary file exists once the receiver has accepted and created it.
            #expect(waitUntil { directoryEntries(dir).contains { $0.hasPrefix(".out.sluice-") } })
            var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
            close(fd)  // with SO_LINGER 0: a reset
            let outcome = receiver.wait(within: .seconds(60))
            #expect(outcome.status == 74, "\(outcome.stderrText)")
            #expect(outcome.stderrLines.count == 1)
            #expect(outcome.stderrText.contains("Connection reset by peer"), "\(outcome.stderrText)")
            #expect(directoryEntries(dir).isEmpty)
        }
    }
}

/// Whether `a` and `b` are on different file systems (copy_file_range between them is refused
/// with EXDEV since Linux 5.19).
func onDifferentFileSystems(_ a: String, _ b: String) -> Bool {
    var first = stat()
    var second = stat()
    return stat(a, &first) == 0 && stat(b, &second) == 0 && first.st_dev != second.st_dev
}
