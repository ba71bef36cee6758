import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Runs `script` in bash with `$0` the sluice binary (`exec "$0" copy …`), for redirections and
/// limits a test sets around the program.
func sluiceInShell(_ script: String) throws -> Outcome {
    try Running(URL(fileURLWithPath: "/bin/bash"), ["-c", script, sluiceBinary.path]).wait(within: .seconds(120))
}

/// Whether files under `directory` can be opened with O_DIRECT (ext4 or xfs can; some file
/// systems cannot, and `--direct` then writes through the page cache).
func takesDirectIO(_ directory: String) -> Bool {
    // O_DIRECT: Glibc's module leaves it out (it needs _GNU_SOURCE); its value per architecture.
    #if arch(x86_64) || arch(i386)
        let flag: Int32 = 0o40000
    #else
        let flag: Int32 = 0o200000
    #endif
    let path = "\(directory)/.direct-probe-\(UUID().uuidString)"
    defer { unlink(path) }
    let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | flag, 0o600)
    guard fd >= 0 else { return false }
    close(fd)
    return true
}

/// `copy --direct`: a destination file written past the page cache, byte for byte the same.
@Suite(.ownThreads) struct DirectCopyCommandTests {
    /// Sizes around the block and buffer boundaries.
    static let sizes = [0, 1, 4095, 4096, 4097, 1_048_575, 1_048_576, 1_048_577, 5 * 1_048_576 + 4097]

    @Test(arguments: sizes)
    func fileToFile(size: Int) throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(size, seed: UInt64(size) + 40)
            try write(data, to: "\(dir)/in")
            let outcome = try sluice("copy", "--direct", "--stats=json", "\(dir)/in", "\(dir)/out")
            #expect(outcome.status == 0, "\(outcome.stderrText)")
            #expect(contents("\(dir)/out") == data)
            let stats = try statsObject(outcome)
            #expect(stats["path"] as? String == "read/write")
            #expect(stats["bytes_written"] as? Int == size)
            // Every whole block went direct, the tail through the page cache.
            let expected = takesDirectIO(dir) ? size - size % 4096 : 0
            #expect(stats["direct_bytes"] as? Int == expected)
            #expect(directoryEntries(dir) == ["in", "out"])
        }
    }

    @Test(arguments: ["512", "64K", "1M", "4M"])
    func socketToFile(chunk: String) throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(6 * 1_048_576 + 11, seed: 41)
            try write(data, to: "\(dir)/in")
            let port = try freePort()
            let receiver = try Running(
                sluiceBinary,
                ["copy", "--direct", "-b", chunk, "--stats=json", "tcp-listen:127.0.0.1:\(port)", "\(dir)/out"])
            let sender = try sluiceWhenListening(on: port, ["copy", "-b", chunk, "\(dir)/in", "tcp:127.0.0.1:\(port)"])
            let received = receiver.wait(within: .seconds(120))
            #expect(sender.status == 0, "\(sender.stderrText)")
            #expect(received.status == 0, "\(received.stderrText)")
            #expect(contents("\(dir)/out") == data)
            let stats = try statsObject(received)
            #expect(stats["bytes_written"] as? Int == data.count)
            #expect(stats["direct_bytes"] as? Int == (takesDirectIO(dir) ? data.count - data.count % 4096 : 0))
            // The listener asked for segments of whole pages: spliced from the socket into the
            // file, no byte copied. (A sender's 512-byte calls may be pushed in pieces of 512,
            // which a disk of 4 KiB sectors refuses: then read/write, the same bytes.)
            if takesDirectIO(dir) && chunk != "512" {
                #expect(stats["path"] as? String == "splice", "\(stats)")
                #expect((stats["fallbacks"] as? [Any])?.isEmpty == true, "\(stats)")
            }
        }
    }

    /// The receiver connecting to a listening sender asks for the same segments before it
    /// connects: spliced as well.
    @Test func connectingSocketToFile() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(3 * 1_048_576 + 5, seed: 49)
            try write(data, to: "\(dir)/in")
            let port = try freePort()
            let sender = try Running(sluiceBinary, ["copy", "\(dir)/in", "tcp-listen:127.0.0.1:\(port)"])
            let received = try sluiceWhenListening(
                on: port, ["copy", "--direct", "--stats=json", "tcp:127.0.0.1:\(port)", "\(dir)/out"])
            let sent = sender.wait(within: .seconds(120))
            #expect(sent.status == 0, "\(sent.stderrText)")
            #expect(received.status == 0, "\(received.stderrText)")
            #expect(contents("\(dir)/out") == data)
            let stats = try statsObject(received)
            if takesDirectIO(dir) {
                #expect(stats["path"] as? String == "splice", "\(stats)")
                #expect(stats["direct_bytes"] as? Int == data.count - data.count % 4096)
            }
        }
    }

    /// The file the bytes went to directly is not left in the page cache.
    @Test(.enabled(if: takesDirectIO(NSTemporaryDirectory())))
    func notLeftInThePageCache() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(4 * 1_048_576, seed: 42)
            try write(data, to: "\(dir)/in")
            #expect(try sluice("copy", "--direct", "\(dir)/in", "\(dir)/out").status == 0)
            let fd = open("\(dir)/out", O_RDONLY)
            try #require(fd >= 0)
            defer { close(fd) }
            let map = mmap(nil, data.count, PROT_READ, MAP_SHARED, fd, 0)
            try #require(map != MAP_FAILED)
            defer { munmap(map, data.count) }
            let page = Int(sysconf(Int32(_SC_PAGESIZE)))
            var resident = [UInt8](repeating: 0, count: (data.count + page - 1) / page)
            try #require(mincore(map, data.count, &resident) == 0)
            let cached = resident.filter { $0 & 1 != 0 }.count
            #expect(cached <= 4, "\(cached) of \(resident.count) pages cached")
            #expect(contents("\(dir)/out") == data)
        }
    }

    /// `--force` replaces, `--append` starts inside a block (a buffered head, then whole blocks).
    @Test func replaceAndAppend() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(3 * 1_048_576 + 77, seed: 43)
            let old = randomBytes(5000, seed: 44)
            try write(data, to: "\(dir)/in")
            try write(old, to: "\(dir)/replaced")
            try write(old, to: "\(dir)/appended")
            let refused = try sluice("copy", "--direct", "\(dir)/in", "\(dir)/replaced")
            #expect(refused.status == 73)
            #expect(contents("\(dir)/replaced") == old)
            #expect(try sluice("copy", "--direct", "-f", "\(dir)/in", "\(dir)/replaced").status == 0)
            #expect(contents("\(dir)/replaced") == data)
            let appended = try sluice("copy", "--direct", "--append", "--stats=json", "\(dir)/in", "\(dir)/appended")
            #expect(appended.status == 0, "\(appended.stderrText)")
            #expect(contents("\(dir)/appended") == old + data)
            let total = old.count + data.count
            let blocks = takesDirectIO(dir) ? total / 4096 * 4096 - 8192 : 0  // blocks 0 and 1 held old bytes
            #expect(try statsObject(appended)["direct_bytes"] as? Int == blocks)
            // A new file through --append: created, and written the same way.
            #expect(try sluice("copy", "--direct", "--append", "\(dir)/in", "\(dir)/new").status == 0)
            #expect(contents("\(dir)/new") == data)
            #expect(directoryEntries(dir) == ["appended", "in", "new", "replaced"])
        }
    }

    /// Standard output redirected to a file is that file; a later write to the same
    /// descriptor goes after the copy (the offset moved as with write(2)). A pipe is written
    /// as usual.
    @Test func standardOutput() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(2 * 1_048_576 + 3, seed: 45)
            try write(data, to: "\(dir)/in")
            let shell = try sluiceInShell(
                "{ \"$0\" copy --direct '\(dir)/in' -; printf END; } > '\(dir)/out' && \"$0\" copy --direct '\(dir)/in' - | cat > '\(dir)/piped'"
            )
            #expect(shell.status == 0, "\(shell.stderrText)")
            #expect(contents("\(dir)/out") == data + Data("END".utf8))
            #expect(contents("\(dir)/piped") == data)
        }
    }

    /// A destination that is not a regular file is written as usual.
    @Test func devNull() throws {
        try withTemporaryDirectory { dir in
            try write(randomBytes(1_048_577, seed: 46), to: "\(dir)/in")
            let outcome = try sluice("copy", "--direct", "--stats=json", "\(dir)/in", "/dev/null")
            #expect(outcome.status == 0, "\(outcome.stderrText)")
            #expect(try statsObject(outcome)["direct_bytes"] == nil)
        }
    }

    @Test func socketDestinationIsAUsageError() throws {
        let outcome = try sluice("copy", "--direct", "-", "tcp:127.0.0.1:9")
        #expect(outcome.status == 64)
        #expect(outcome.stderrText == "sluice: --direct needs a file destination, not tcp:127.0.0.1:9\n")
    }

    /// A write that fails (the file size limit, as a full disk would) fails the copy as the
    /// buffered path does, and leaves nothing at the final name: in the middle (a whole
    /// buffer) and in the tail that only the end writes.
    @Test(arguments: [3 * 1_048_576, 1_048_576 + 100])
    func writeFailure(size: Int) throws {
        try expectSameWriteFailure(size: size) { options, dir in
            try sluiceInShell("trap '' XFSZ; ulimit -f 1024; exec \"$0\" copy \(options) '\(dir)/in' '\(dir)/out'")
        }
    }

    /// The same while spliced from a socket into the file.
    @Test func socketWriteFailure() throws {
        try expectSameWriteFailure(size: 3 * 1_048_576) { options, dir in
            let port = try freePort()
            let receiver = try Running(
                URL(fileURLWithPath: "/bin/bash"),
                [
                    "-c",
                    "trap '' XFSZ; ulimit -f 1024; exec \"$0\" copy \(options) tcp-listen:127.0.0.1:\(port) '\(dir)/out'",
                    sluiceBinary.path,
                ])
            _ = try sluiceWhenListening(on: port, ["copy", "\(dir)/in", "tcp:127.0.0.1:\(port)"])
            return receiver.wait(within: .seconds(120))
        }
    }

    /// Runs `copy` with `--direct` and with `--no-zero-copy` under a file size limit (`run`
    /// with the options and the directory holding `in`, of `size` random bytes): both fail with
    /// one line saying so and the same status, and leave nothing beside `in`.
    func expectSameWriteFailure(size: Int, _ run: (String, String) throws -> Outcome) throws {
        try withTemporaryDirectory { dir in
            try write(randomBytes(size, seed: 47), to: "\(dir)/in")
            var statuses: [Int32] = []
            for options in ["--direct", "--no-zero-copy"] {
                let outcome = try run(options, dir)
                #expect(outcome.stderrText.hasPrefix("sluice: "), "\(outcome.stderrText)")
                #expect(outcome.stderrText.contains("File too large"), "\(outcome.stderrText)")
                #expect(outcome.stderrLines.count == 1, "\(outcome.stderrText)")
                statuses.append(outcome.status)
                #expect(directoryEntries(dir) == ["in"])
            }
            #expect(statuses[0] == statuses[1] && statuses[0] != 0)
        }
    }
}
