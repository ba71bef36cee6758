import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `sluice send` and `sluice receive` as programs, over loopback, into temporary directories.
@Suite(.ownThreads) struct TransferCommandTests {
    @Test(arguments: [[], ["--direct"]])
    func oneFileArrivesWithItsBytesModeAndMtime(receiverOptions: [String]) throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: false)
            let data = randomBytes(1_500_001)
            try write(data, to: "\(dir)/a.bin")
            chmod("\(dir)/a.bin", 0o640)
            setMtime("\(dir)/a.bin", 1_000_000_000)
            let receiver = try ReceiverProcess(["--dir", inbox, "--once"] + receiverOptions)
            let send = try sluice("send", "-q", "\(dir)/a.bin", try receiver.address())
            #expect(send.status == 0, "\(send.stderrText)")
            #expect(send.stderr.isEmpty)
            let received = receiver.wait()
            #expect(received.status == 0, "\(received.stderr)")
            #expect(received.stderr.contains("sluice: stored a.bin ("))
            #expect(contents("\(inbox)/a.bin") == data)
            let attributes = modeAndMtime("\(inbox)/a.bin")
            #expect(attributes.mode == 0o640)
            #expect(attributes.mtime == 1_000_000_000)
            #expect(directoryEntries(inbox) == ["a.bin"])
        }
    }

    /// `--sync` over TLS: a second run sends nothing and itemizes nothing; a dry run lists the
    /// change and makes none.
    @Test func aSecondSyncSendsNothing() throws {
        try withTemporaryDirectory { dir in
            let tree = "\(dir)/tree"
            let inbox = "\(dir)/in"
            for path in [inbox, tree] {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            }
            try write(randomBytes(10_000, seed: 1), to: "\(tree)/a")
            try write(randomBytes(20_000, seed: 2), to: "\(tree)/b")
            let receiver = try ReceiverProcess(["--dir", inbox, "--sync"])
            let address = try receiver.address()
            let send = { (extra: [String]) in
                try sluice(withTestKey(["send", "--no-progress"] + extra + [tree, address]))
            }
            let first = try send(["--sync", "-i"])
            #expect(first.status == 0, "\(first.stderrText)")
            #expect(first.stdoutText.contains(">f+++++++++ tree/a"), "\(first.stdoutText)")
            let second = try send(["--sync", "-i", "--stats=json"])
            #expect(second.status == 0, "\(second.stderrText)")
            #expect(second.stdoutText.isEmpty, "\(second.stdoutText)")
            #expect((lastJSONObject(second.stderrText)?["unchanged"] as? Int) == 3, "\(second.stderrText)")
            try write(randomBytes(5, seed: 3), to: "\(tree)/b")
            let dry = try send(["-n"])
            #expect(dry.status == 0, "\(dry.stderrText)")
            #expect(dry.stdoutText == ">f.st...... tree/b\n", "\(dry.stdoutText)")
            #expect(FileManager.default.contents(atPath: "\(inbox)/tree/b")?.count == 20_000)
            receiver.signal(SIGTERM)
            _ = receiver.wait()
        }
    }

    @Test func aTreeArrivesIdentical() throws {
        try withTemporaryDirectory { dir in
            let tree = "\(dir)/photos"
            let inbox = "\(dir)/in"
            let manager = FileManager.default
            for path in [inbox, "\(tree)/2024/été", "\(tree)/empty dir", "\(tree)/deep/er/still"] {
                try manager.createDirectory(atPath: path, withIntermediateDirectories: true)
            }
            try write(randomBytes(300_000, seed: 1), to: "\(tree)/2024/été/a b.jpg")
            try write(Data(repeating: 0x41, count: 200_000), to: "\(tree)/2024/compressible.txt")
            try write(Data(), to: "\(tree)/empty")
            try write(randomBytes(10, seed: 2), to: "\(tree)/deep/er/still/ünïcødé ✓")
            chmod("\(tree)/empty", 0o600)
            chmod("\(tree)/2024/compressible.txt", 0o755)
            chmod("\(tree)/empty dir", 0o750)
            try manager.createSymbolicLink(atPath: "\(tree)/link", withDestinationPath: "empty")

            let receiver = try ReceiverProcess(["--dir", inbox, "--once"])
            let send = try sluice("send", "-zgzip:1", "--no-progress", tree, try receiver.address())
            #expect(send.status == 0, "\(send.stderrText)")
            #expect(!send.stderrText.contains("warning"), "\(send.stderrText)")
            #expect(receiver.wait().status == 0)

            // The link arrives as a link (diff -r compares what it points at, and its target).
            #expect(try manager.destinationOfSymbolicLink(atPath: "\(inbox)/photos/link") == "empty")
            #expect(try treesIdentical(tree, "\(inbox)/photos"))
            for path in ["empty", "2024/compressible.txt", "empty dir", "2024/été/a b.jpg", "deep/er"] {
                #expect(
                    modeAndMtime("\(tree)/\(path)").mode == modeAndMtime("\(inbox)/photos/\(path)").mode,
                    "mode of \(path)")
            }
            #expect(modeAndMtime("\(tree)/empty").mtime == modeAndMtime("\(inbox)/photos/empty").mtime)
        }
    }

    @Test func sixteenSendersAtOnceIntoOneReceiver() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: false)
            var expected: [String: Data] = [:]
            for i in 0..<16 {
                let data = randomBytes(150_000 + i * 1000, seed: UInt64(i + 10))
                try write(data, to: "\(dir)/file\(i)")
                expected["file\(i)"] = data
            }
            let receiver = try ReceiverProcess(["--dir", inbox, "--stats=json"])
            let address = try receiver.address()
            let senders = try (0..<16).map { i in
                try Running(sluiceBinary, ["send", "-b", "64K", "\(dir)/file\(i)", address])
            }
            for (i, sender) in senders.enumerated() {
                let outcome = sender.wait()
                #expect(outcome.status == 0, "sender \(i): \(outcome.stderrText)")
            }
            for (name, data) in expected {
                #expect(contents("\(inbox)/\(name)") == data, "\(name)")
            }
            #expect(directoryEntries(inbox).count == 16)
            let stopped = receiver.stop()
            #expect(stopped.status == 130)
            #expect(stopped.stderr.contains("sluice: receive into \(inbox): interrupted"))
            let stats = try #require(lastJSONObject(stopped.stderr))
            #expect(stats["sessions"] as? Int == 16)
            #expect(stats["files"] as? Int == 16)
        }
    }

    @Test func anExistingFileIsRefusedUnlessTheReceiverOverwrites() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: false)
            try write(Data("old".utf8), to: "\(inbox)/a.txt")
            try write(Data("new contents".utf8), to: "\(dir)/a.txt")

            let refusing = try ReceiverProcess(["--dir", inbox, "--once"])
            let refused = try sluice("send", "\(dir)/a.txt", try refusing.address())
            #expect(refused.status == 73)
            #expect(
                refused.stderrText
                    == "sluice: a.txt: refused by receiver: exists (use --overwrite on the receiver)\n")
            let refusingEnd = refusing.wait()
            #expect(refusingEnd.status == 73)
            #expect(refusingEnd.stderr.contains("sluice: refused a.txt: exists"))
            #expect(contents("\(inbox)/a.txt") == Data("old".utf8))

            let overwriting = try ReceiverProcess(["--dir", inbox, "--once", "--overwrite"])
            let replaced = try sluice("send", "\(dir)/a.txt", try overwriting.address())
            #expect(replaced.status == 0, "\(replaced.stderrText)")
            #expect(overwriting.wait().status == 0)
            #expect(contents("\(inbox)/a.txt") == Data("new contents".utf8))
            #expect(directoryEntries(inbox) == ["a.txt"])
        }
    }

    @Test func aNameOfThePartialFileFormIsRefused() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: false)
            try write(Data("planted".utf8), to: "\(dir)/.x.sluice-part")
            let receiver = try ReceiverProcess(["--dir", inbox, "--once"])
            let send = try sluice("send", "\(dir)/.x.sluice-part", try receiver.address())
            #expect(send.status == 73)
            #expect(
                send.stderrText
                    == "sluice: .x.sluice-part: refused by receiver: invalid path: the name of a partial file"
                    + " (.NAME.sluice-part) is reserved\n")
            #expect(receiver.wait().status == 73)
            #expect(directoryEntries(inbox).isEmpty)
        }
    }

    @Test func aFileAboveMaxSizeIsRefused() throws {
        try withTemporaryDirectory { dir in
            try write(randomBytes(5000), to: "\(dir)/big")
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: false)
            let receiver = try ReceiverProcess(["--dir", inbox, "--once", "--max-size", "4K"])
            let send = try sluice("send", "\(dir)/big", try receiver.address())
            #expect(send.status == 73)
            #expect(send.stderrText.hasPrefix("sluice: big: refused by receiver: too large"))
            #expect(receiver.wait().status == 73)
            #expect(directoryEntries(inbox).isEmpty)
        }
    }

    @Test func failuresBeforeTheTransferHaveTheirStatuses() throws {
        try withTemporaryDirectory { dir in
            try write(Data("x".utf8), to: "\(dir)/a")
            try withRefusingPort { port in
                let missing = try sluice("send", "\(dir)/a", "\(dir)/nothere", "127.0.0.1:\(port)")
                #expect(missing.status == 66)
                #expect(missing.stderrText == "sluice: \(dir)/nothere: No such file or directory (errno 2)\n")
                let refused = try sluice("send", "\(dir)/a", "127.0.0.1:\(port)")
                #expect(refused.status == 69)
                #expect(refused.stderrText.hasPrefix("sluice: connect 127.0.0.1:\(port): Connection refused"))
                #expect(refused.stderrLines.count == 1)
            }
            let noSocket = try sluice("send", "\(dir)/a", "unix:\(dir)/no.sock")
            #expect(noSocket.status == 69)
            let noDirectory = try sluice("receive", "--dir", "\(dir)/absent", "--listen", "127.0.0.1:0")
            #expect(noDirectory.status == 73)
            #expect(noDirectory.stderrText.hasPrefix("sluice: receive into \(dir)/absent: No such file"))
        }
    }

    /// How to run `send` as a user whom mode 000 keeps out of a directory: as it is, for a
    /// user other than root; for root (whom no mode stops), through `setpriv` as nobody
    /// (65534), which must reach the temporary directory and the built `sluice`. Nil when
    /// neither can be.
    static let unprivileged: [String]? = {
        guard geteuid() == 0 else { return [] }
        let searchPath = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        guard
            let setpriv = searchPath.split(separator: ":").map({ "\($0)/setpriv" })
                .first(where: { FileManager.default.isExecutableFile(atPath: $0) })
        else { return nil }
        // Every directory down to `path` searchable by others.
        func othersReach(_ path: String) -> Bool {
            var url = URL(fileURLWithPath: path).resolvingSymlinksInPath()
            while true {
                var st = stat()
                guard stat(url.path, &st) == 0, st.st_mode & S_IXOTH != 0 else { return false }
                if url.path == "/" { return true }
                url.deleteLastPathComponent()
            }
        }
        guard othersReach(NSTemporaryDirectory()), othersReach(sluiceBinary.path) else { return nil }
        return [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    }()

    /// A directory below a source that cannot be listed is skipped with a warning; the rest of
    /// the tree is sent, and the exit status is 66 (man/sluice.1, "send").
    @Test(
        .enabled(
            if: Self.unprivileged != nil,
            "root lists any directory: this needs setpriv to send as nobody, and a TMPDIR nobody can reach"))
    func aDirectoryThatCannotBeListedIsSkippedWithAWarningAndExits66() throws {
        let prefix = try #require(Self.unprivileged)
        try withTemporaryDirectory { dir in
            chmod(dir, 0o755)
            let (src, inbox) = ("\(dir)/src", "\(dir)/in")
            for path in [inbox, src, "\(src)/locked", "\(src)/sub"] {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
                chmod(path, 0o755)
            }
            let (a, b) = (randomBytes(100_000, seed: 66), randomBytes(3_000, seed: 67))
            try write(a, to: "\(src)/a.bin")
            try write(b, to: "\(src)/sub/b.bin")
            try write(Data("secret".utf8), to: "\(src)/locked/secret")
            for path in ["\(src)/a.bin", "\(src)/sub/b.bin"] { chmod(path, 0o644) }
            chmod("\(src)/locked", 0o000)
            defer { chmod("\(src)/locked", 0o755) }
            // The sender's copy of the tests' key, its own (a key file only its owner may read).
            let key = "\(dir)/key"
            try FileManager.default.copyItem(atPath: testKeyFile, toPath: key)
            chmod(key, 0o600)
            if !prefix.isEmpty { chown(key, 65534, 65534) }
            let receiver = try ReceiverProcess(["--dir", inbox, "--once"])
            // --no-resume: nobody cannot write a resume key into the tests' state directory (root's).
            let arguments = ["send", "--key-file", key, "--no-resume", src, try receiver.address()]
            let sender =
                prefix.isEmpty
                ? try Running(sluiceBinary, arguments)
                : try Running(URL(fileURLWithPath: prefix[0]), prefix.dropFirst() + [sluiceBinary.path] + arguments)
            let sent = sender.wait(within: .seconds(60))
            #expect(sent.status == 66, "\(sent.stderrText)")
            #expect(
                sent.stderrText
                    == "sluice: warning: skipping \"\(src)/locked\": opendir: Permission denied (errno 13)\n")
            let received = receiver.wait()
            #expect(received.status == 0, "\(received.stderr)")
            #expect(contents("\(inbox)/src/a.bin") == a)
            #expect(contents("\(inbox)/src/sub/b.bin") == b)
            #expect(directoryEntries("\(inbox)/src") == ["a.bin", "sub"])
            #expect(directoryEntries("\(inbox)/src/sub") == ["b.bin"])
            #expect(directoryEntries(inbox) == ["src"])
        }
    }

    @Test func usageErrors() throws {
        for words in [
            ["send"], ["send", "a"], ["send", "a", "host:0"], ["send", "a", "host:port"], ["send", "-", "h:1"],
            ["send", "--name", "x", "a", "h:1"], ["send", "-z10", "a", "h:1"], ["receive", "extra"],
            ["receive", "--listen", "h:99999"], ["receive", "--max-size", "lots"], ["receive", "--timeout", "0"],
        ] {
            let outcome = try sluice(words)
            #expect(outcome.status == 64, "\(words)")
            #expect(outcome.stderrLines.count == 1, "\(words): \(outcome.stderrText)")
        }
    }

    @Test func standardInputIsSentUnderItsName() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: false)
            let data = randomBytes(700_000, seed: 7)
            let receiver = try ReceiverProcess(["--dir", inbox, "--once"])
            let send = try sluice(
                ["send", "-z", "--stats=json", "-", "--name", "logs/today.txt", try receiver.address()], stdin: data)
            #expect(send.status == 0, "\(send.stderrText)")
            let stats = try #require(lastJSONObject(send.stderrText))
            #expect(stats["files"] as? Int == 1)
            #expect(stats["bytes"] as? Int == data.count)
            #expect(receiver.wait().status == 0)
            #expect(contents("\(inbox)/logs/today.txt") == data)
        }
    }

    /// A file appended to while it is sent is stored as it was read, and the sender says so.
    @Test func aFileThatChangesWhileSentIsStoredAsReadWithAWarning() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            let data = randomBytes(4_000_000, seed: 43)
            try write(data, to: "\(dir)/log")
            let receiver = try ReceiverProcess(["--dir", inbox])
            let sending = try Running(
                sluiceBinary, ["send", "--rate-limit", "1M", "\(dir)/log", try receiver.address()])
            #expect(waitUntil(.seconds(30)) { fileSize("\(inbox)/.log.sluice-part") ?? 0 > 0 })
            let handle = try #require(FileHandle(forWritingAtPath: "\(dir)/log"))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data("appended\n".utf8))
            try handle.close()
            let sent = sending.wait(within: .seconds(60))
            #expect(sent.status == 0, "\(sent.stderrText)")
            #expect(sent.stderrText.contains("changed while it was being sent"), "\(sent.stderrText)")
            #expect(sent.stderrText.contains("4000000 of them"), "\(sent.stderrText)")
            #expect(contents("\(inbox)/log") == data)
            _ = receiver.stop()
        }
    }

    @Test func aKilledSendIsResumed() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: false)
            let data = randomBytes(6_000_000, seed: 3)
            try write(data, to: "\(dir)/big")
            let receiver = try ReceiverProcess(["--dir", inbox])
            let address = try receiver.address()
            let first = try Running(sluiceBinary, ["send", "--rate-limit", "1M", "\(dir)/big", address])
            // Killed once part of the file is on the receiver's disk.
            #expect(waitUntil(.seconds(30)) { fileSize("\(inbox)/.big.sluice-part") ?? 0 >= 512 * 1024 })
            first.signal(SIGKILL)
            #expect(first.wait().status == SIGKILL)  // Process reports the signal
            // The receiver notices the end of the connection and keeps the partial file.
            waitUntil { receiver.stderrText.contains("in the middle of a file") }
            #expect(!FileManager.default.fileExists(atPath: "\(inbox)/big"))
            #expect(directoryEntries(inbox) == [".big.sluice-part"])

            let second = try sluice("send", "--stats=json", "\(dir)/big", address)
            #expect(second.status == 0, "\(second.stderrText)")
            let stats = try #require(lastJSONObject(second.stderrText))
            let resumed = try #require(stats["resumed_bytes"] as? Int)
            #expect(resumed > 0)
            // Both runs used the sender's resume key (authenticated by the tests' key file): the
            // held bytes were vouched for, not read back.
            #expect(stats["vouched_bytes"] as? Int == resumed)
            var key = stat()
            #expect(stat(testResumeKeyPath, &key) == 0 && key.st_mode & 0o777 == 0o600)
            // The file goes out eagerly until the receiver says how much it holds: what was in
            // flight by then is sent twice (at most the whole file once more).
            let bytes = try #require(stats["bytes"] as? Int)
            #expect(bytes >= data.count - resumed && bytes <= 2 * data.count - resumed, "\(bytes)")
            #expect(contents("\(inbox)/big") == data)
            #expect(directoryEntries(inbox) == ["big"])
            let stopped = receiver.stop()
            #expect(stopped.status == 130)
            #expect(stopped.stderr.contains("resumed)"))
        }
    }

    @Test func anAlteredPartialFailsTheIntegrityCheck() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: false)
            let data = randomBytes(4_000_000, seed: 5)
            try write(data, to: "\(dir)/big")
            let receiver = try ReceiverProcess(["--dir", inbox])
            let address = try receiver.address()
            let first = try Running(sluiceBinary, ["send", "--rate-limit", "2M", "\(dir)/big", address])
            #expect(waitUntil(.seconds(30)) { fileSize("\(inbox)/.big.sluice-part") ?? 0 >= 256 * 1024 })
            first.signal(SIGKILL)
            _ = first.wait()
            waitUntil { receiver.stderrText.contains("in the middle of a file") }
            // Flip the first byte of the partial file in place (its resume marker stays).
            let partial = "\(inbox)/.big.sluice-part"
            let fd = open(partial, O_RDWR)
            #expect(fd >= 0)
            var byte = ~data[0]
            #expect(pwrite(fd, &byte, 1, 0) == 1)
            close(fd)

            let second = try sluice("send", "--stats=json", "\(dir)/big", address)
            #expect(second.status == 65, "\(second.stderrText)")
            // The held bytes are checked with SHA-256 apart (held-sha256), whatever digest was agreed.
            #expect(
                second.stderrText.hasPrefix(
                    "sluice: big: failed: SHA-256 mismatch (held partial data differs from the sender's file)"))
            #expect(!FileManager.default.fileExists(atPath: "\(inbox)/big"))
            let third = try sluice("send", "\(dir)/big", address)
            #expect(third.status == 0, "\(third.stderrText)")
            #expect(contents("\(inbox)/big") == data)
            #expect(receiver.stop().status == 130)
        }
    }

    @Test func aSignalledSendExitsInterrupted() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: false)
            try write(randomBytes(2_000_000), to: "\(dir)/big")
            let receiver = try ReceiverProcess(["--dir", inbox, "--once"])
            // Slow enough that the file cannot be finished before the signal arrives.
            let sender = try Running(
                sluiceBinary, ["send", "--rate-limit", "256K", "\(dir)/big", try receiver.address()])
            #expect(waitUntil(.seconds(30)) { fileSize("\(inbox)/.big.sluice-part") ?? 0 > 0 })
            sender.signal(SIGTERM)
            let outcome = sender.wait()
            #expect(outcome.status == 143)
            #expect(outcome.stderrText.hasSuffix(": terminated\n"))
            #expect(receiver.wait().status == 74)
            #expect(!FileManager.default.fileExists(atPath: "\(inbox)/big"))
        }
    }

    @Test func aUnixSocketWorks() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: false)
            try write(Data("over a unix socket".utf8), to: "\(dir)/note")
            let receiver = try ReceiverProcess(["--dir", inbox, "--once", "--listen", "unix:\(dir)/s"])
            waitForFile("\(dir)/s")
            let send = try sluice("send", "\(dir)/note", "unix:\(dir)/s")
            #expect(send.status == 0, "\(send.stderrText)")
            let received = receiver.wait()
            #expect(received.status == 0)
            #expect(received.stderr.hasPrefix("sluice: receiving into \(inbox) on unix:\(dir)/s\n"))
            #expect(contents("\(inbox)/note") == Data("over a unix socket".utf8))
        }
    }

    /// A name that would forge terminal output (ESC starts a colour, U+202E turns what follows
    /// right to left) shows its characters escaped on both sides: the receiver's line for the
    /// file it stores, and the sender's for a refusal whose reason quotes the name back.
    @Test func namesWithControlAndBidiCharactersAreShownEscapedOnBothSides() throws {
        try withTemporaryDirectory { dir in
            let tree = "\(dir)/t"
            let inbox = "\(dir)/in"
            let evil = "evil\u{1B}[31m\u{202E}txt.exe"
            let blocked = "d\u{202E}x"
            try FileManager.default.createDirectory(atPath: "\(tree)/\(blocked)", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: "\(inbox)/t", withIntermediateDirectories: true)
            try write(Data("x".utf8), to: "\(tree)/\(evil)")
            try write(Data("y".utf8), to: "\(tree)/\(blocked)/f")
            // A file where the sender's directory goes: the receiver refuses the file under it
            // with a reason that names the directory.
            try write(Data(), to: "\(inbox)/t/\(blocked)")
            let receiver = try ReceiverProcess(["--dir", inbox, "--once"])
            let send = try sluice("send", "--no-progress", tree, try receiver.address())
            let received = receiver.wait()
            #expect(send.status == 73, "\(send.stderrText)")
            #expect(received.status == 73, "\(received.stderr)")
            #expect(contents("\(inbox)/t/\(evil)") == Data("x".utf8))

            let shownEvil = "evil\\u{1B}[31m\\u{202E}txt.exe"
            let shownBlocked = "d\\u{202E}x"
            #expect(received.stderr.contains("sluice: stored t/\(shownEvil) (1B)\n"), "\(received.stderr)")
            #expect(received.stderr.contains("sluice: refused t/\(shownBlocked)/f: "), "\(received.stderr)")
            #expect(
                send.stderrText.contains(
                    "sluice: t/\(shownBlocked)/f: refused by receiver: \(inbox)/t/\(shownBlocked) is a symbolic link"),
                "\(send.stderrText)")
            for output in [received.stderr, send.stderrText] {
                #expect(!output.unicodeScalars.contains { $0 == "\u{1B}" || $0 == "\u{202E}" })
            }
        }
    }

    /// The receiver's own umask (027 here) masks what the sender's modes allow, as cp does;
    /// `--keep-modes` keeps them as sent, as rsync -p does. Setuid, setgid and sticky: never.
    @Test(arguments: [false, true])
    func modesAreMaskedByTheReceiversUmaskUnlessKept(keepModes: Bool) throws {
        try withTemporaryDirectory { dir in
            let tree = "\(dir)/t"
            let inbox = "\(dir)/in"
            for path in ["\(tree)/shared", inbox] {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            }
            try write(Data("a".utf8), to: "\(tree)/notes")
            try write(Data("b".utf8), to: "\(tree)/tool")
            chmod("\(tree)/notes", 0o666)
            chmod("\(tree)/tool", 0o4755)
            chmod("\(tree)/shared", 0o3777)
            let receiver = try ReceiverProcess(
                ["--dir", inbox, "--once"] + (keepModes ? ["--keep-modes"] : []), umask: "027")
            let send = try sluice("send", "-q", tree, try receiver.address())
            #expect(send.status == 0, "\(send.stderrText)")
            #expect(receiver.wait().status == 0)
            let modes = ["notes", "tool", "shared"].map { modeAndMtime("\(inbox)/t/\($0)").mode }
            #expect(modes == (keepModes ? [0o666, 0o755, 0o777] : [0o640, 0o750, 0o750]))
        }
    }

    @Test func helpFitsAndEveryLongOptionIsInTheManPage() throws {
        let manPage = try String(contentsOf: packageRoot.appendingPathComponent("man/sluice.1"), encoding: .utf8)
        for command in ["send", "receive"] {
            let outcome = try sluice(command, "--help")
            #expect(outcome.status == 0)
            let help = outcome.stdoutText
            for line in help.split(separator: "\n") {
                #expect(line.count <= 80, "\(command): \(line)")
            }
            let options = Set(help.matches(of: /--([a-z][a-z-]*)/).map { String($0.output.1) })
            #expect(options.count >= 8)
            for option in options {
                #expect(
                    manPage.contains("Fl -\(option)") || manPage.contains("Fl \\-\(option)"),
                    "man/sluice.1 does not document --\(option) of \(command)")
            }
        }
        let top = try sluice("--help").stdoutText
        #expect(top.contains("sluice send [options] PATH... [HOST:]PORT"))
        #expect(top.contains("sluice receive [options]"))
    }
}
