import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// `send --sync`: a second run moves only what changed (CHECK and HAVE), over real sockets
/// into a real directory.
@Suite("Sync: skip what is there, replace what differs", .ownThreads)
struct SyncTests {
    static func syncing(dryRun: Bool = false, hardLinks: Bool = true) -> TransferSendOptions {
        var options = TransferSendOptions()
        options.sync = true
        options.dryRun = dryRun
        options.hardLinks = hardLinks
        return options
    }

    static func changes(_ summary: TransferSummary) -> [String: TransferChange] {
        var out: [String: TransferChange] = [:]
        for result in summary.results { out[result.path] = result.change }
        return out
    }

    static func setMtime(_ path: String, _ seconds: Int) {
        var times = [timespec(tv_sec: seconds, tv_nsec: 0), timespec(tv_sec: seconds, tv_nsec: 0)]
        utimensat(AT_FDCWD, path, &times, AT_SYMLINK_NOFOLLOW)
    }

    @Test("A second send moves nothing; a change, a new mode, a new file and a dry run move what they should")
    func secondSendMovesOnlyChanges() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src + "/sub", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            for index in 0..<20 {
                try writeFile(src + "/sub/f\(index)", randomBytes(1000 + index * 5000, seed: UInt64(index)))
            }
            try writeFile(src + "/big.bin", randomBytes(3 << 20, seed: 99))
            #expect(symlink("sub/f1", src + "/link") == 0)
            #expect(Glibc.link(src + "/sub/f2", src + "/second") == 0)
            let harness = try TransferHarness(directory: dst)
            let first = try harness.send(paths: [src], options: Self.syncing())
            #expect(first.succeeded, "\(first.results.filter { !$0.outcome.isStored })")
            #expect(Self.changes(first)["tree/big.bin"] == .created)
            #expect(treeDifferences(src, dst + "/tree") == [])

            // Again: nothing of any file is sent, every entry is reported unchanged.
            let second = try harness.send(paths: [src], options: Self.syncing())
            #expect(second.succeeded)
            #expect(second.bytes == 0)
            #expect(second.bytesSent < 8192, "\(second.bytesSent) bytes for checks alone")
            let unchanged = second.results.filter { if case .unchanged = $0.change { true } else { false } }
            #expect(unchanged.count == second.results.count, "\(Self.changes(second))")
            #expect(treeDifferences(src, dst + "/tree") == [])

            // A file changed, one given a new mode, one added, a link pointed elsewhere.
            try writeFile(src + "/sub/f3", Array("changed".utf8))
            chmod(src + "/sub/f4", 0o600)
            try writeFile(src + "/sub/new", Array("new".utf8))
            unlink(src + "/link")
            #expect(symlink("sub/f5", src + "/link") == 0)
            Self.setMtime(src + "/sub", 1_600_000_000)
            Self.setMtime(src, 1_600_000_000)

            // A dry run says so and changes nothing.
            let before = treePaths(dst)
            let dry = try harness.send(paths: [src], options: Self.syncing(dryRun: true))
            #expect(dry.error == nil && dry.bytes == 0)
            let planned = Self.changes(dry)
            #expect(planned["tree/sub/f3"] == .replaced([.size, .mtime]))
            #expect(planned["tree/sub/f4"] == .unchanged(.mode))
            #expect(planned["tree/sub/new"] == .created)
            #expect(planned["tree/link"] == .replaced(.target))
            #expect(dry.results.allSatisfy { $0.dryRun })
            #expect(treePaths(dst) == before)
            #expect(readFile(dst + "/tree/sub/f3") != Array("changed".utf8))
            #expect(FileInfo(dst + "/tree/sub/f4")?.mode == 0o644)

            let third = try harness.send(paths: [src], options: Self.syncing())
            #expect(third.succeeded, "\(third.results.filter { !$0.outcome.isStored })")
            #expect(third.bytes == 10, "only the changed and the new file's bytes: \(third.bytes)")
            #expect(treeDifferences(src, dst + "/tree") == [])
            #expect(try FileManager.default.destinationOfSymbolicLink(atPath: dst + "/tree/link") == "sub/f5")
        }
    }

    @Test("Over several connections: ranges of a file the receiver has are not sent")
    func overSeveralConnections() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try writeFile(src + "/big.bin", randomBytes(4 << 20, seed: 7))
            for index in 0..<10 { try writeFile(src + "/f\(index)", randomBytes(3000, seed: UInt64(index))) }
            let harness = try TransferHarness(directory: dst)
            for round in 0..<2 {
                if round == 1 { try writeFile(src + "/f0", Array("different".utf8)) }
                let summary = try harness.send(src, streams: 3, options: Self.syncing())
                #expect(summary.succeeded, "\(summary.results.filter { !$0.outcome.isStored })")
                #expect(treeDifferences(src, dst + "/tree") == [])
                if round == 1 {
                    #expect(summary.bytes == 9, "only f0: \(summary.bytes)")
                    #expect(Self.changes(summary)["tree/big.bin"] == .unchanged([]))
                }
            }
        }
    }

    @Test("A receiver with --no-sync: the sender says so, files there are refused; a dry run sends nothing")
    func receiverWithoutSync() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst + "/tree", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
            try writeFile(src + "/there", Array("mine".utf8))
            try writeFile(src + "/new", Array("new".utf8))
            try writeFile(dst + "/tree/there", Array("theirs".utf8))
            var receiving = TransferReceiveOptions(idleTimeout: .seconds(20))
            receiving.sync = false
            let harness = try TransferHarness(directory: dst, options: receiving)
            let dry = try harness.send(paths: [src], options: Self.syncing(dryRun: true))
            #expect(dry.results.allSatisfy { !$0.outcome.isStored })
            #expect(!fileExists(dst + "/tree/new"))
            let summary = try harness.send(paths: [src], options: Self.syncing())
            #expect(summary.results.first { $0.path == "tree/there" }?.outcome == .refused(reason: "exists"))
            #expect(readFile(dst + "/tree/there") == Array("theirs".utf8))
            #expect(readFile(dst + "/tree/new") == Array("new".utf8))
        }
    }

    @Test("CHECK is answered in order, never looks outside; replace and CHECK where sync is off are violations")
    func checksThatLie() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            let outside = root + "/outside"
            try FileManager.default.createDirectory(atPath: dst + "/d", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
            try writeFile(outside + "/secret", [1, 2, 3])
            try writeFile(dst + "/d/f", [1, 2, 3], mtime: (1_600_000_000, 0))
            #expect(symlink(outside, dst + "/out") == 0)
            let harness = try TransferHarness(directory: dst)
            func check(_ path: String, size: UInt64 = 3, kind: Wire.CheckKind = .file) -> [UInt8] {
                MessageWriter.check(
                    CheckHeader(
                        kind: kind, size: size, mode: 0o644, mtimeSeconds: 1_600_000_000, mtimeNanoseconds: 0,
                        path: Array(path.utf8)))
            }
            var payload = RawWire.hello(["sha256", "sync"])
            payload += check("d/f") + check("d/f", size: 4) + check("out/secret") + check("../outside/secret")
            payload += check("d", kind: .directory) + check("missing") + RawWire.bye
            let client = SocketExchange(Socket.connect(host: "127.0.0.1", port: harness.port), payload: payload)
            client.start(on: harness.loop)
            runLoop(harness.loop, for: .seconds(10)) { client.done && !harness.reports.isEmpty }
            let haves = RawWire.messages(client.received).filter { $0.0 == Wire.MessageType.have.rawValue }.map(\.1)
            #expect(
                haves == [
                    [Wire.HaveStatus.same.rawValue, 0],
                    [Wire.HaveStatus.differs.rawValue, UInt8(Wire.HaveDifference.size)],
                    [Wire.HaveStatus.absent.rawValue, 0],  // through a link: never looked at
                    [Wire.HaveStatus.absent.rawValue, 0],  // an invalid path
                    [Wire.HaveStatus.same.rawValue, 0],
                    [Wire.HaveStatus.absent.rawValue, 0],
                ])
            #expect(RawWire.messages(client.received).last?.0 == Wire.MessageType.bye.rawValue)

            var receiving = TransferReceiveOptions(idleTimeout: .seconds(20))
            receiving.sync = false
            let strict = try TransferHarness(directory: dst, options: receiving)
            let replace = Wire.FileFlags.sizeKnown | Wire.FileFlags.replace
            for (messages, violates) in [(check("d/f"), true), (RawWire.file("d/f", size: 3, flags: replace), false)] {
                let sessions = strict.reports.count
                let client = SocketExchange(
                    Socket.connect(host: "127.0.0.1", port: strict.port),
                    payload: RawWire.hello(["sha256"]) + messages + RawWire.bye)
                client.start(on: strict.loop)
                runLoop(strict.loop, for: .seconds(10)) { client.done && strict.reports.count > sessions }
                // A CHECK ends the session; a FILE flagged replace is refused, that file alone.
                #expect((strict.reports.last?.error?.code == .protocolViolation) == violates)
                if !violates {
                    let refused = RawWire.messages(client.received).first { $0.0 == Wire.MessageType.refused.rawValue }
                    let reason = String(decoding: refused?.1 ?? [], as: UTF8.self)
                    #expect(reason.contains("receive --sync"), "\(reason)")
                }
            }
            #expect(readFile(dst + "/d/f") == [1, 2, 3])
        }
    }

    @Test("--delete removes what the sender lacks, never through a link, never a partial; a dry run removes nothing")
    func deleteRemovesWhatIsGone() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            let outside = root + "/outside"
            for path in [src + "/keep", dst, outside] {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            }
            try writeFile(src + "/keep/a", [1])
            try writeFile(src + "/b", [2])
            try writeFile(outside + "/precious", [3])
            let harness = try TransferHarness(directory: dst)
            #expect(try harness.send(paths: [src], options: Self.syncing()).succeeded)
            // What the receiver has and the sender does not: a file, a tree, a link out.
            try FileManager.default.createDirectory(atPath: dst + "/tree/old/deeper", withIntermediateDirectories: true)
            try writeFile(dst + "/tree/old/deeper/x", [4])
            try writeFile(dst + "/tree/keep/stale", [5])
            #expect(symlink(outside, dst + "/tree/out") == 0)
            try writeFile(dst + "/tree/.b.sluice-part", [6])
            var options = Self.syncing(dryRun: true)
            options.delete = true
            let expected = ["tree/keep/stale", "tree/old/deeper/x", "tree/old/deeper", "tree/old", "tree/out"]
            let dry = try harness.send(paths: [src], options: options)
            #expect(dry.succeeded)
            #expect(dry.removed == expected)
            #expect(fileExists(dst + "/tree/old/deeper/x") && fileExists(dst + "/tree/out"))

            options.dryRun = false
            let real = try harness.send(paths: [src], options: options)
            #expect(real.succeeded, "\(real.pruneFailures)")
            #expect(real.removed == expected)
            #expect(treePaths(dst + "/tree") == [".b.sluice-part", "b", "keep", "keep/a"])
            #expect(treePaths(outside) == ["precious"])

            // An entry not stored: nothing is removed.
            try writeFile(dst + "/tree/stray", [7])
            try FileManager.default.createDirectory(atPath: dst + "/tree/b2", withIntermediateDirectories: true)
            try writeFile(src + "/b2", [8])
            let refused = try harness.send(paths: [src], options: options)
            #expect(!refused.succeeded)
            #expect(refused.removed.isEmpty && refused.pruneFailures.count == 1)
            #expect(fileExists(dst + "/tree/stray"))
        }
    }

    @Test("Over several connections, --delete keeps every file any connection sent")
    func deleteOverSeveralConnections() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src + "/d", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst + "/tree/gone", withIntermediateDirectories: true)
            try writeFile(dst + "/tree/gone/x", [1])
            try writeFile(src + "/big.bin", randomBytes(2 << 20, seed: 4))
            for index in 0..<12 { try writeFile(src + "/d/f\(index)", randomBytes(2000, seed: UInt64(index))) }
            let harness = try TransferHarness(directory: dst)
            var options = Self.syncing()
            options.delete = true
            let summary = try harness.send(src, streams: 3, options: options)
            #expect(summary.succeeded, "\(summary.pruneFailures)")
            #expect(summary.removed == ["tree/gone/x", "tree/gone"])
            #expect(treeDifferences(src, dst + "/tree", compareDirectoryTimes: false) == [])
        }
    }

    @Test("PRUNE without delete, of a path not checked, through a link or out: refused or a violation")
    func prunesThatLie() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            let outside = root + "/outside"
            try FileManager.default.createDirectory(atPath: dst + "/d", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
            try writeFile(outside + "/precious", [1])
            try writeFile(dst + "/d/x", [2])
            #expect(symlink(outside, dst + "/out") == 0)
            let harness = try TransferHarness(directory: dst)
            func check(_ path: String) -> [UInt8] {
                MessageWriter.check(
                    CheckHeader(
                        kind: .directory, mode: 0o755, mtimeSeconds: 0, mtimeNanoseconds: 0, path: Array(path.utf8)))
            }
            func prune(_ path: String) -> [UInt8] { Frame.prune(path: Array(path.utf8), dryRun: false).encoded }
            func exchange(_ payload: [UInt8]) -> [(UInt8, [UInt8])] {
                let sessions = harness.reports.count
                let client = SocketExchange(Socket.connect(host: "127.0.0.1", port: harness.port), payload: payload)
                client.start(on: harness.loop)
                runLoop(harness.loop, for: .seconds(10)) { client.done && harness.reports.count > sessions }
                return RawWire.messages(client.received)
            }
            // Without "delete" in HELLO: a violation.
            _ = exchange(RawWire.hello(["sha256", "sync"]) + check("d") + prune("d") + RawWire.bye)
            #expect(harness.reports.last?.error?.code == .protocolViolation)
            // Not checked, climbing out, through a link: refused; nothing removed anywhere.
            let replies = exchange(
                RawWire.hello(["sha256", "sync", "delete"]) + check("out") + prune("d") + prune("../outside")
                    + prune("out") + RawWire.bye)
            let answers = replies.map(\.0).filter {
                $0 != Wire.MessageType.hello.rawValue && $0 != Wire.MessageType.have.rawValue
            }
            #expect(
                answers == [
                    Wire.MessageType.refused.rawValue, Wire.MessageType.refused.rawValue,
                    Wire.MessageType.failed.rawValue, Wire.MessageType.bye.rawValue,
                ], "\(replies.map { ($0.0, PeerText.sanitized($0.1)) })")
            #expect(!replies.contains { $0.0 == Wire.MessageType.gone.rawValue })
            #expect(treePaths(outside) == ["precious"])
            #expect(fileExists(dst + "/d/x"))
        }
    }

    @Test(
        "A changed large file goes as a delta: few bytes, the same file; --whole-file and a receiver without delta send it all"
    )
    func changedFileGoesAsDelta() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
            let content = randomBytes(4 << 20, seed: 21)
            for (name, offersDelta, wholeFile) in [
                ("delta", true, false), ("whole", true, true), ("old", false, false),
            ] {
                let dst = root + "/dst-" + name
                try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
                var receiving = TransferHarness.syncing
                receiving.offersDelta = offersDelta
                let harness = try TransferHarness(directory: dst, options: receiving)
                try writeFile(src + "/db", content, mtime: (1_600_000_000, 0))
                #expect(try harness.send(paths: [src], options: Self.syncing()).succeeded)
                // A few bytes changed in place, some inserted: the rest is the receiver's already.
                var changed = content
                changed[1_000_000] ^= 0x55
                changed[3_000_000] ^= 0x55
                changed.insert(contentsOf: randomBytes(5000, seed: 8), at: 2_000_000)
                try writeFile(src + "/db", changed, mtime: (1_600_000_100, 0))
                var options = Self.syncing()
                options.wholeFile = wholeFile
                let summary = try harness.send(paths: [src], options: options)
                #expect(summary.succeeded, "\(name): \(summary.results)")
                #expect(readFile(dst + "/tree/db") == changed, "\(name)")
                #expect(FileInfo(dst + "/tree/db")?.mtimeSeconds == 1_600_000_100)
                #expect(summary.results.first { $0.path == "tree/db" }?.sentAsDelta == (name == "delta"))
                if name == "delta" {
                    #expect(summary.bytes < 64 << 10, "literal bytes: \(summary.bytes)")
                    #expect(summary.matchedBytes > 4_000_000)
                    #expect(summary.bytesSent < 128 << 10, "on the wire: \(summary.bytesSent)")
                } else {
                    #expect(summary.bytes == UInt64(changed.count), "\(name)")
                    #expect(summary.matchedBytes == 0)
                }
            }
        }
    }

    @Test("COPY past the old file, COPY in a file not sent as a delta, delta without replace: violations")
    func copiesThatLie() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try writeFile(dst + "/f", randomBytes(2 << 20, seed: 2))
            let harness = try TransferHarness(directory: dst)
            let deltaFlags = Wire.FileFlags.sizeKnown | Wire.FileFlags.replace | Wire.FileFlags.delta
            let copy = { (index: UInt64, count: UInt32) in Frame.copy(index: index, count: count).encoded }
            for (what, messages) in [
                ("past the old file", RawWire.file("f", size: 4 << 20, flags: deltaFlags) + copy(1 << 40, 1)),
                ("overflow", RawWire.file("f", size: 4 << 20, flags: deltaFlags) + copy(UInt64.max / 2, 1)),
                ("not a delta", RawWire.file("g", size: 10) + copy(0, 1)),
                ("no replace", RawWire.file("f", size: 10, flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.delta)),
            ] {
                let sessions = harness.reports.count
                let client = SocketExchange(
                    Socket.connect(host: "127.0.0.1", port: harness.port),
                    payload: RawWire.hello(["sha256", "sync"]) + messages + RawWire.bye)
                client.start(on: harness.loop)
                runLoop(harness.loop, for: .seconds(10)) { client.done && harness.reports.count > sessions }
                #expect(harness.reports.last?.error?.code == .protocolViolation, "\(what)")
            }
            // A COPY within the old file but past the size announced fails the file, no more.
            let sessions = harness.reports.count
            let client = SocketExchange(
                Socket.connect(host: "127.0.0.1", port: harness.port),
                payload: RawWire.hello(["sha256", "sync"]) + RawWire.file("f", size: 100, flags: deltaFlags)
                    + copy(0, 1) + RawWire.end([]) + RawWire.bye)
            client.start(on: harness.loop)
            runLoop(harness.loop, for: .seconds(10)) { client.done && harness.reports.count > sessions }
            #expect(harness.results(harness.reports.last).first?.outcome.isStored == false)
            #expect(readFile(dst + "/f")?.count == 2 << 20, "the old file is intact")
        }
    }

    @Test("--checksum compares contents: a touched file is not sent (its mtime is set), a same-sized change is")
    func checksumComparesContents() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try writeFile(src + "/touched", randomBytes(3000, seed: 1), mtime: (1_600_000_000, 0))
            try writeFile(src + "/sneaky", randomBytes(3000, seed: 2), mtime: (1_600_000_000, 0))
            let harness = try TransferHarness(directory: dst)
            #expect(try harness.send(paths: [src], options: Self.syncing()).succeeded)
            // New mtime, same bytes; new bytes, same size and mtime.
            Self.setMtime(src + "/touched", 1_700_000_000)
            try writeFile(src + "/sneaky", randomBytes(3000, seed: 4), mtime: (1_600_000_000, 0))  // (seed | 1 differs)
            var options = Self.syncing()
            options.checksum = true
            let summary = try harness.send(paths: [src], options: options)
            #expect(summary.succeeded, "\(summary.results)")
            let changes = Self.changes(summary)
            #expect(changes["tree/touched"] == .unchanged(.mtime))
            #expect(changes["tree/sneaky"] == .replaced(.content))
            #expect(summary.bytes == 3000, "only the changed file: \(summary.bytes)")
            #expect(treeDifferences(src, dst + "/tree") == [])
        }
    }

    @Test("The sender waits for an entry's HAVE before it sends it, and takes no HAVE it did not ask for")
    func senderMachineWaitsForHave() {
        let entries: [SenderMachine.Entry] = [
            .init(
                relative: "f", isDirectory: false, seekable: true, mode: 0o644, mtimeSeconds: 1, mtimeNanoseconds: 0,
                listedSize: 5)
        ]
        var machine = SenderMachine(entries: entries, settings: .init(eager: false, sync: true))
        _ = machine.start()
        _ = machine.received(.magic)
        _ = machine.received(.frame(.hello(version: 1, capabilities: ["sha256", "sync"])))
        let check = machine.proceed()
        #expect(
            check == [
                .send(
                    .check(
                        CheckHeader(
                            kind: .file, flags: Wire.CheckFlags.apply, size: 5, mode: 0o644, mtimeSeconds: 1,
                            mtimeNanoseconds: 0, path: Array("f".utf8))))
            ])
        #expect(!machine.canProceed, "the file waits for its HAVE")
        _ = machine.received(.frame(.have(HaveAnswer(status: .same))))
        #expect(machine.proceed() == [.settle(0, .stored)])
        #expect(
            machine.received(.frame(.have(HaveAnswer(status: .same)))).last == .end(.violation("HAVE for no CHECK")))
    }
}
