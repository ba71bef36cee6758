import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `copy -f` onto an existing file, and `--fsync`: the final name holds the old file or the
/// new one, whatever happens to sluice on the way.
@Suite(.ownThreads) struct ReplaceTests {
    /// The temporary file of a copy to `dir/out`, once it exists.
    private func temporary(in dir: String) -> String? {
        directoryEntries(dir).first { $0.hasPrefix(".out.sluice-") }.map { "\(dir)/\($0)" }
    }

    /// Starts `copy -f - dir/out` over an existing `out`, feeds it half of `new`, and waits
    /// until that half is in the temporary file: the copy is in the middle of its work.
    private func replacementHalfWay(_ dir: String, old: Data, new: Data, extra: [String] = []) throws -> Running {
        try write(old, to: "\(dir)/out")
        let running = try Running(sluiceBinary, ["copy", "-f", "-b", "64K"] + extra + ["-", "\(dir)/out"])
        running.write(new.prefix(new.count / 2))
        #expect(waitUntil { temporary(in: dir).flatMap(fileSize) == new.count / 2 })
        return running
    }

    @Test(arguments: [SIGINT, SIGTERM, SIGHUP])
    func aSignalDuringAReplaceLeavesTheOldFile(signal: Int32) throws {
        try withTemporaryDirectory { dir in
            let old = randomBytes(1_048_576, seed: 1)
            let new = randomBytes(1_048_576, seed: 2)
            let running = try replacementHalfWay(dir, old: old, new: new)
            running.signal(signal)
            let outcome = running.wait(closingInput: false, within: .seconds(30))
            #expect(outcome.status == 128 + signal, "\(outcome.stderrText)")
            #expect(contents("\(dir)/out") == old)
            #expect(directoryEntries(dir) == ["out"])
        }
    }

    /// SIGKILL cannot be caught: the temporary file stays behind (hidden), the old file keeps
    /// its name, whole.
    @Test func aKillDuringAReplaceLeavesTheOldFile() throws {
        try withTemporaryDirectory { dir in
            let old = randomBytes(1_048_576, seed: 3)
            let new = randomBytes(1_048_576, seed: 4)
            let running = try replacementHalfWay(dir, old: old, new: new, extra: ["--fsync"])
            running.signal(SIGKILL)
            _ = running.wait(closingInput: false, within: .seconds(30))
            #expect(contents("\(dir)/out") == old)
            #expect(directoryEntries(dir).filter { !$0.hasPrefix(".out.sluice-") } == ["out"])
        }
    }

    /// The same copy, let finish: the new file has the name and its own inode; the old one is
    /// gone, and nothing else is left in the directory.
    @Test(arguments: [[], ["--fsync"]])
    func aFinishedReplaceLeavesOnlyTheNewFile(extra: [String]) throws {
        try withTemporaryDirectory { dir in
            let old = randomBytes(1_048_576, seed: 5)
            let new = randomBytes(1_048_576, seed: 6)
            let running = try replacementHalfWay(dir, old: old, new: new, extra: extra)
            var before = stat()
            stat("\(dir)/out", &before)
            running.write(new.suffix(from: new.count / 2))
            let outcome = running.wait(within: .seconds(30))
            #expect(outcome.status == 0, "\(outcome.stderrText)")
            #expect(contents("\(dir)/out") == new)
            #expect(directoryEntries(dir) == ["out"])
            var after = stat()
            stat("\(dir)/out", &after)
            #expect(after.st_ino != before.st_ino)
        }
    }

    /// A replaced file reached through a symbolic link: the link stays, its target is replaced.
    @Test func aReplaceThroughASymbolicLinkReplacesItsTarget() throws {
        try withTemporaryDirectory { dir in
            try write(Data("old".utf8), to: "\(dir)/target")
            try write(Data("new".utf8), to: "\(dir)/in")
            #expect(symlink("target", "\(dir)/link") == 0)
            let outcome = try sluice("copy", "-f", "\(dir)/in", "\(dir)/link")
            #expect(outcome.status == 0, "\(outcome.stderrText)")
            #expect(contents("\(dir)/target") == Data("new".utf8))
            #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: "\(dir)/link")) == "target")
            #expect(directoryEntries(dir) == ["in", "link", "target"])
        }
    }

    /// `copy -f FILE FILE` reads the file it replaces: it must not lose it.
    @Test func replacingTheSourceItselfKeepsItsBytes() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(300_000, seed: 7)
            try write(data, to: "\(dir)/f")
            let outcome = try sluice("copy", "-f", "\(dir)/f", "\(dir)/f")
            #expect(outcome.status == 0, "\(outcome.stderrText)")
            #expect(contents("\(dir)/f") == data)
            #expect(directoryEntries(dir) == ["f"])
        }
    }

    @Test func fsyncWritesNewFilesAppendsAndStandardOutput() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(200_000, seed: 8)
            try write(data, to: "\(dir)/in")
            #expect(try sluice("copy", "--fsync", "\(dir)/in", "\(dir)/new").status == 0)
            #expect(contents("\(dir)/new") == data)
            #expect(try sluice("copy", "--fsync", "--append", "\(dir)/in", "\(dir)/new").status == 0)
            #expect(contents("\(dir)/new") == data + data)
            // stdout a pipe: nothing to flush, and no complaint.
            let piped = try sluice("copy", "--fsync", "\(dir)/in", "-")
            #expect(piped.status == 0)
            #expect(piped.stdout == data)
            #expect(piped.stderr.isEmpty)
            #expect(directoryEntries(dir) == ["in", "new"])
        }
    }

    @Test func fsyncNeedsAFileDestination() throws {
        let outcome = try sluice("copy", "--fsync", "-", "unix:/nonexistent/socket")
        #expect(outcome.status == 64)
        #expect(outcome.stderrText.hasPrefix("sluice: --fsync needs a file destination"))
    }
}
