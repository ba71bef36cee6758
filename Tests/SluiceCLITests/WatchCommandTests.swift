import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `sluice send --watch`: a tree kept in sync as it changes, over one session to a real
/// `sluice receive --sync --delete`, each change followed until the receiver's tree is the
/// same (polled, with a deadline of many seconds: never a fixed sleep).
@Suite(.ownThreads) struct WatchCommandTests {
    /// Polls `condition` every 20 ms for at most `seconds`.
    func eventually(within seconds: Double = 30, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return true }
            usleep(20_000)
        }
        return try condition()
    }

    /// A receiver that allows replacing and removing, and a watch of `tree` sending to it.
    func start(
        _ tree: String, _ inbox: String, _ extra: [String] = [], receiving: [String] = []
    ) throws -> (ReceiverProcess, Running) {
        let receiver = try ReceiverProcess(["--dir", inbox, "--sync", "--delete"] + receiving)
        let sender = try Running(
            sluiceBinary,
            ["send", "--no-progress", "--watch", "--delete", "-i", "--stats=json"] + extra + [
                tree, try receiver.address(),
            ])
        return (receiver, sender)
    }

    @Test func changesArriveAsTheyHappen() throws {
        try withTemporaryDirectory { dir in
            let tree = "\(dir)/tree"
            let inbox = "\(dir)/in"
            let copy = "\(inbox)/tree"
            try FileManager.default.createDirectory(atPath: tree + "/old/sub", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
            try write(Data("first".utf8), to: tree + "/a")
            try write(Data("x".utf8), to: tree + "/old/sub/x")
            let (receiver, sender) = try start(tree, inbox)
            let same = { try treesIdentical(tree, copy) }
            #expect(try eventually(same), "the first pass")

            // Create, append, truncate.
            try write(Data("new".utf8), to: tree + "/b")
            #expect(try eventually(same), "created")
            let handle = try #require(FileHandle(forWritingAtPath: tree + "/a"))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data(" and more".utf8))
            try handle.close()
            #expect(try eventually(same), "appended")
            #expect(truncate(tree + "/a", 2) == 0)
            #expect(try eventually(same), "truncated")
            // mkdir -p deep, then files in it at once.
            try FileManager.default.createDirectory(atPath: tree + "/d1/d2/d3/d4", withIntermediateDirectories: true)
            for index in 0..<20 { try write(Data("deep \(index)".utf8), to: tree + "/d1/d2/d3/d4/f\(index)") }
            #expect(try eventually(same), "made deep")
            // Remove a file; rm -rf a subtree.
            #expect(unlink(tree + "/b") == 0)
            #expect(try eventually(same), "removed")
            try FileManager.default.removeItem(atPath: tree + "/old")
            #expect(try eventually(same), "removed a subtree")
            // Rename a file and a directory.
            #expect(rename(tree + "/a", tree + "/a2") == 0)
            #expect(try eventually(same), "renamed a file")
            #expect(rename(tree + "/d1", tree + "/D1") == 0)
            #expect(try eventually(same), "renamed a directory")
            // An editor's save: a temporary written, then renamed over the file.
            try write(Data("saved by an editor".utf8), to: tree + "/.a2.swp")
            #expect(rename(tree + "/.a2.swp", tree + "/a2") == 0)
            #expect(try eventually(same), "saved")

            sender.signal(SIGINT)
            let outcome = sender.wait(within: .seconds(30))
            #expect(outcome.status == 0, "\(outcome.stderrText)")
            let lines = outcome.stdoutText.split(separator: "\n")
            #expect(lines.contains("*deleting   tree/b"), "\(outcome.stdoutText)")
            #expect(lines.contains("*moving     tree/d1 -> tree/D1"), "\(outcome.stdoutText)")
            #expect(!outcome.stdoutText.contains(".a2.swp"), "the temporary is never sent: \(outcome.stdoutText)")
            #expect(!lines.contains { $0.hasPrefix(">f") && $0.hasSuffix("tree/D1/d2/d3/d4/f0") }, "nothing resent")
            let stats = try #require(lastJSONObject(outcome.stderrText), "\(outcome.stderrText)")
            #expect(stats["files"] != nil)
            _ = receiver.stop()
            #expect(try treesIdentical(tree, copy))
        }
    }

    /// A file written a piece at a time, never quiet for the settle time, goes once, whole,
    /// when it is closed; the receiver never holds part of it.
    @Test func aFileWrittenSlowlyGoesOnceWhole() throws {
        try withTemporaryDirectory { dir in
            let tree = "\(dir)/tree"
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
            // The first pass is over once the file it found is stored: the tree was listed
            // before `slow` was made (made while the first pass lists, a file goes as --sync
            // sends it, not as the watch does).
            try write(Data("marker".utf8), to: tree + "/marker")
            let (receiver, sender) = try start(tree, inbox, ["--settle", "1000"])
            #expect(
                eventually { contents(inbox + "/tree/marker") == Data("marker".utf8) }, "the first pass")
            let handle = try #require(
                FileManager.default.createFile(atPath: tree + "/slow", contents: nil)
                    ? FileHandle(forWritingAtPath: tree + "/slow") : nil)
            var whole = Data()
            // Written over 2 s: the pauses are the scenario; nothing is asserted on them.
            for index in 0..<10 {
                let piece = Data(repeating: UInt8(index), count: 4096)
                try handle.write(contentsOf: piece)
                whole += piece
                usleep(200_000)
                #expect(contents(inbox + "/tree/slow").map { $0.isEmpty } ?? true, "part of it arrived")
            }
            try handle.close()
            #expect(eventually { contents(inbox + "/tree/slow") == whole }, "sent once closed")
            sender.signal(SIGTERM)
            let outcome = sender.wait(within: .seconds(30))
            #expect(outcome.status == 0, "\(outcome.stderrText)")
            let sends = outcome.stdoutText.split(separator: "\n").filter { $0.hasSuffix(" tree/slow") }
            #expect(sends.count == 1, "sent once: \(outcome.stdoutText)")
            #expect(sends.last?.hasPrefix(">f") ?? false, "\(outcome.stdoutText)")
            _ = receiver.stop()
        }
    }

    /// The receiver goes away mid-watch and comes back on the same port: the sender connects
    /// again (with backoff), makes a --sync pass, and what changed meanwhile arrives.
    @Test func aReceiverRestartIsCaughtUp() throws {
        try withTemporaryDirectory { dir in
            let tree = "\(dir)/tree"
            let inbox = "\(dir)/in"
            let copy = "\(inbox)/tree"
            try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
            try write(Data("one".utf8), to: tree + "/a")
            let (first, sender) = try start(tree, inbox)
            let port = try first.port()
            #expect(try eventually { try treesIdentical(tree, copy) }, "the first pass")
            _ = first.stop()
            try write(Data("while away".utf8), to: tree + "/b")
            try write(Data("two".utf8), to: tree + "/a")
            let second = try ReceiverProcess(["--dir", inbox, "--sync", "--delete", "--listen", "127.0.0.1:\(port)"])
            #expect(try eventually { try treesIdentical(tree, copy) }, "caught up after the restart")
            try write(Data("after".utf8), to: tree + "/c")
            #expect(try eventually { try treesIdentical(tree, copy) }, "watching again")
            sender.signal(SIGINT)
            let outcome = sender.wait(within: .seconds(30))
            #expect(outcome.status == 0, "\(outcome.stderrText)")
            #expect(outcome.stderrText.contains("connection lost"), "\(outcome.stderrText)")
            // --stats sums both sessions: a in the first; a again and b in the second's --sync
            // pass, then c.
            #expect(outcome.stderrText.contains("\"files\":4,"), "\(outcome.stderrText)")
            _ = second.stop()
        }
    }

    @Test("A long watch's summary counts the failures it no longer lists: 1,005 refused, all in --stats and in 73")
    func refusalsPastTheKeptAreCounted() throws {
        try withTemporaryDirectory { dir in
            let tree = "\(dir)/tree"
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
            // 1,005 files over the receiver's --max-size, then one under it, last in the walk's
            // order: once it is stored, every refusal before it has been answered.
            for index in 0..<1005 { try write(Data(repeating: 7, count: 20), to: tree + "/f\(10_000 + index)") }
            try write(Data("ok".utf8), to: tree + "/z")
            let (receiver, sender) = try start(tree, inbox, receiving: ["--max-size", "10"])
            #expect(eventually { FileManager.default.fileExists(atPath: inbox + "/tree/z") })
            sender.signal(SIGINT)
            let outcome = sender.wait(within: .seconds(30))
            // A file refused: 73, though the watch lists only its first thousand.
            #expect(outcome.status == 73, "\(outcome.stderrText.suffix(2000))")
            let stats = try #require(lastJSONObject(outcome.stderrText), "\(outcome.stderrText.suffix(2000))")
            #expect(stats["refused"] as? Int == 1005, "\(stats)")
            #expect(stats["failed"] as? Int == 0, "\(stats)")
            _ = receiver.stop()
        }
    }

    @Test func watchUsageErrors() throws {
        try withTemporaryDirectory { dir in
            try write(Data("f".utf8), to: dir + "/file")
            let file = try sluice(["send", "--watch", "--insecure", dir + "/file", "127.0.0.1:9"])
            #expect(file.status == 64, "\(file.stderrText)")
            #expect(file.stderrText.contains("only directories are watched"), "\(file.stderrText)")
            let settle = try sluice(["send", "--settle", "10", "--insecure", dir, "127.0.0.1:9"])
            #expect(settle.status == 64 && settle.stderrText.contains("goes with --watch"), "\(settle.stderrText)")
            let streams = try sluice(["send", "--watch", "-P", "2", "--insecure", dir, "127.0.0.1:9"])
            #expect(streams.status == 64, "\(streams.stderrText)")
        }
    }
}
