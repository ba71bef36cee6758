import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// `send -a` with devices, FIFOs and sockets in the tree, as programs over loopback.
@Suite(.ownThreads) struct SpecialFilesCommandTests {
    static func node(_ path: String) -> (type: mode_t, mode: mode_t, device: UInt64)? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        return (st.st_mode & S_IFMT, st.st_mode & 0o7777, UInt64(st.st_rdev))
    }

    @Test func archiveSendsDevicesFIFOsAndSockets() throws {
        try withTemporaryDirectory { dir in
            let tree = "\(dir)/tree"
            let inbox = "\(dir)/in"
            for path in [inbox, tree] {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            }
            try write(randomBytes(100, seed: 1), to: "\(tree)/a")
            #expect(mknod("\(tree)/pipe", S_IFIFO | 0o640, 0) == 0)
            #expect(mknod("\(tree)/sock", S_IFSOCK | 0o600, 0) == 0)
            // The numbers of /dev/null; only root may make it (the tests run as root here).
            let device = mknod("\(tree)/null", S_IFCHR | 0o644, dev_t(SpecialFiles.device(major: 1, minor: 3))) == 0
            let receiver = try ReceiverProcess(["--dir", inbox, "--keep-modes", "--devices", "--sync"])
            let address = try receiver.address()
            let send = { (extra: [String]) in
                try sluice(withTestKey(["send", "--no-progress"] + extra + [tree, address]))
            }
            let first = try send(["-a", "-i", "--stats=json"])
            #expect(first.status == 0, "\(first.stderrText)")
            #expect(!first.stderrText.contains("skipping"), "\(first.stderrText)")
            #expect(first.stdoutText.contains("cS+++++++++ tree/pipe"), "\(first.stdoutText)")
            #expect(first.stdoutText.contains("cS+++++++++ tree/sock"), "\(first.stdoutText)")
            let stats = lastJSONObject(first.stderrText)
            #expect((stats?["specials"] as? Int) == 2, "\(first.stderrText)")
            #expect((stats?["devices"] as? Int) == (device ? 1 : 0), "\(first.stderrText)")
            let pipe = Self.node("\(inbox)/tree/pipe")
            #expect(pipe?.type == S_IFIFO && pipe?.mode == 0o640)
            #expect(Self.node("\(inbox)/tree/sock")?.type == S_IFSOCK)
            if device {
                #expect(first.stdoutText.contains("cD+++++++++ tree/null"), "\(first.stdoutText)")
                let made = Self.node("\(inbox)/tree/null")
                #expect(made?.type == S_IFCHR && made?.device == Self.node("\(tree)/null")?.device)
            }

            // A second run with --sync leaves them as they are.
            let second = try send(["-a", "--sync", "-i", "--stats=json"])
            #expect(second.status == 0, "\(second.stderrText)")
            #expect(second.stdoutText.isEmpty, "\(second.stdoutText)")

            // Without -D they are skipped with a warning, as before.
            let plain = try send(["--sync"])
            #expect(plain.status == 0, "\(plain.stderrText)")
            #expect(plain.stderrText.contains("skipping"), "\(plain.stderrText)")
            receiver.signal(SIGTERM)
            _ = receiver.wait()
        }
    }

    @Test func helpNamesTheOptions() throws {
        let help = try sluice("send", "--help")
        for option in ["--devices", "--specials", "-D"] {
            #expect(help.stdoutText.contains(option), "\(option)")
        }
    }
}
