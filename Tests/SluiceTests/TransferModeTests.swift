import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// The modes a receiver gives what it stores: the sender's permission bits less the receiver's
/// umask, or with `keepsModes` as sent; setuid, setgid and sticky never. The umask is given to
/// the receiver, never set on the test process, which other tests share.
@Suite("Transfer: modes a receiver can live with", .ownThreads)
struct TransferModeTests {
    /// What is sent: path under the tree, mode; a directory when its path ends in `/`.
    static let sent: [(String, mode_t)] = [
        ("t/", 0o777), ("t/setuid", 0o4777), ("t/setgid", 0o2775), ("t/shared", 0o666), ("t/private", 0o700),
        ("t/big", 0o6666), ("t/drop/", 0o3777), ("t/drop/inner", 0o640),
    ]

    struct Case: Sendable, CustomTestStringConvertible {
        var umask: UInt32
        var keepsModes: Bool
        var streams: Int
        /// The modes expected, in the order of `sent`.
        var expected: [mode_t]

        var testDescription: String {
            "umask \(String(umask, radix: 8))\(keepsModes ? ", keeping modes" : ""), \(streams) stream(s)"
        }
    }

    static let cases: [Case] = [1, 4].flatMap { streams in
        [
            Case(
                umask: 0o022, keepsModes: false, streams: streams,
                expected: [0o755, 0o755, 0o755, 0o644, 0o700, 0o644, 0o755, 0o640]),
            Case(
                umask: 0o027, keepsModes: false, streams: streams,
                expected: [0o750, 0o750, 0o750, 0o640, 0o700, 0o640, 0o750, 0o640]),
            Case(
                umask: 0o022, keepsModes: true, streams: streams,
                expected: [0o777, 0o777, 0o775, 0o666, 0o700, 0o666, 0o777, 0o640]),
        ]
    }

    @Test(
        "Files and directories get the sender's mode less the umask, or kept; never setuid, setgid, sticky",
        arguments: cases)
    func modes(_ test: Case) throws {
        try withTemporaryDirectory { root in
            let src = root + "/src"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            for (path, _) in Self.sent where path.hasSuffix("/") {
                try FileManager.default.createDirectory(atPath: src + "/" + path, withIntermediateDirectories: true)
            }
            for (path, mode) in Self.sent where !path.hasSuffix("/") {
                // big is sent in ranges over several connections, committed by the ranged path.
                let bytes = path == "t/big" ? TransferStreamsTests.content(4 << 20, seed: 6) : Array(path.utf8)
                try writeFile(src + "/" + path, bytes, mode: mode)
            }
            for (path, mode) in Self.sent { chmod(src + "/" + path, mode) }
            #expect(FileInfo(src + "/t/setuid")?.mode == 0o4777, "the sender's side must hold the bits it sends")
            #expect(FileInfo(src + "/t/drop")?.mode == 0o3777)

            let options = TransferReceiveOptions(
                idleTimeout: .seconds(20), keepsModes: test.keepsModes, umask: test.umask)
            let harness = try TransferHarness(directory: dst, options: options)
            let summary: TransferSummary
            if test.streams == 1 {
                summary = try harness.send(paths: [src + "/t"])
            } else {
                summary = try TransferStreamsTests.send(
                    [src + "/t"], streams: test.streams, port: harness.port, harness: harness
                ).0
                #expect(harness.allResults.contains { $0.rangeOnly && $0.path == "t/big" })
            }
            #expect(summary.error == nil && summary.succeeded, "\(summary.results)")
            let modes = Self.sent.map { FileInfo(dst + "/" + $0.0)?.mode }
            #expect(modes == test.expected.map { Optional($0) }, "\(modes.map { String($0 ?? 0, radix: 8) })")
        }
    }

    @Test("The bits kept: rwxrwxrwx less the umask, or all nine; never more")
    func permissionBits() {
        #expect(Destination.permissionBits(keepingModes: false, umask: 0o022) == 0o755)
        #expect(Destination.permissionBits(keepingModes: false, umask: 0o077) == 0o700)
        #expect(Destination.permissionBits(keepingModes: false, umask: 0) == 0o777)
        #expect(Destination.permissionBits(keepingModes: true, umask: 0o077) == 0o777)
    }

    @Test("The process's umask is read from /proc/self/status without being set")
    func umaskFromProc() {
        let status = "Name:\tsluice\nUmask:\t0027\nState:\tR (running)\n"
        #expect(FileCreationMask.parse(status: status) == 0o027)
        #expect(FileCreationMask.parse(status: "Umask:\t0000\n") == 0)
        #expect(FileCreationMask.parse(status: "Umask:\t0777") == 0o777)
        #expect(FileCreationMask.parse(status: "Name:\tsluice\n") == nil)
        #expect(FileCreationMask.parse(status: "Umask:\t1777\n") == nil)
        #expect(FileCreationMask.parse(status: "Umask:\tzz\n") == nil)
        // What the process has: the line the kernel writes, read as the receiver reads it.
        let proc = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        #expect(FileCreationMask.parse(status: proc) == FileCreationMask.current())
    }
}
