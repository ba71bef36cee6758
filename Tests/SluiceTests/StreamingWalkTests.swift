import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// The sender walks its directories on a worker while it sends (`TransferSender+Walk`): the
/// first file goes before the walk ends, the walk stays a bounded distance ahead, and what it
/// cannot list is a warning — over real sockets into a real directory.
@Suite("Streaming walk: the sender sends while it lists", .ownThreads)
struct StreamingWalkTests {
    /// Starts `sender` towards `harness`; the summary lands in the box.
    static func start(_ sender: TransferSender, to harness: TransferHarness) -> SummaryBox {
        let (input, output) = Socket.connect(host: "127.0.0.1", port: harness.port)
        let box = SummaryBox()
        sender.start(input: input, output: output, on: harness.loop) { box.summary = $0 }
        return box
    }

    @Test("The first file is stored while the walk is held up after its first step; the rest follows")
    func theFirstFileGoesBeforeTheWalkEnds() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src + "/sub", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            for index in 0..<20 { try writeFile(src + "/f\(index)", randomBytes(100 + index, seed: UInt64(index))) }
            for index in 0..<5 { try writeFile(src + "/sub/g\(index)", [UInt8(index)]) }
            let harness = try TransferHarness(directory: dst)
            let sender = try TransferSender(paths: [src])
            sender.walkStep = 4
            var steps = 0
            // Held after the first step (the directory and three files) until a file is stored.
            sender.onWalkStep = { _ in
                steps += 1
                if steps == 1 { sender.walkHeld = true }
            }
            var firstStored: (path: String, walkEnded: Bool, filesTotal: Int)?
            sender.onFileResult = { result in
                guard firstStored == nil, !result.isDirectory, result.outcome.isStored else { return }
                firstStored = (result.path, sender.walkEnded, sender.progress.filesTotal)
                sender.walkHeld = false
            }
            let box = Self.start(sender, to: harness)
            let sessions = harness.reports.count
            runLoop(harness.loop, for: .seconds(20)) { box.summary != nil && harness.reports.count > sessions }
            let summary = try #require(box.summary)
            #expect(summary.succeeded, "\(String(describing: summary.error))")
            let first = try #require(firstStored)
            #expect(first.path == "tree/f0")
            #expect(!first.walkEnded)
            // The total grows as the walk goes: three files listed then, 25 in the end.
            #expect(first.filesTotal == 3)
            #expect(sender.progress.filesTotal == 25)
            #expect(steps > 2)
            #expect(summary.files == 25 && summary.directories == 2)
            #expect(treeDifferences(src, dst + "/tree") == [])
        }
    }

    @Test("Without answers, the walk stops a bounded number of entries ahead of the announcements")
    func theWalkPausesWhenFarAhead() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
            let (ahead, step) = (1024, 256)
            for index in 0..<2 * ahead { try writeFile(src + "/f\(index)", []) }
            let loop = try EventLoop()
            // A listener that never accepts: the connection opens, and no HELLO ever comes.
            let listener = try Socket.listen(host: "127.0.0.1", port: 0)
            defer { listener.close() }
            let sender = try TransferSender(paths: [src])
            sender.walkAhead = ahead
            sender.walkStep = step
            var steps = 0
            sender.onWalkStep = { _ in steps += 1 }
            let (input, output) = Socket.connect(host: "127.0.0.1", port: listener.port)
            let box = SummaryBox()
            sender.start(input: input, output: output, on: loop) { box.summary = $0 }
            runLoop(loop, for: .seconds(20)) {
                steps > 0 && !sender.walking && sender.machine.entriesWaiting >= ahead
            }
            #expect(!sender.walkEnded)
            #expect(sender.paths.count >= ahead)
            #expect(sender.paths.count <= ahead + step)
            #expect(!sender.walking)
            sender.cancel()
            runLoop(loop, for: .seconds(5)) { box.summary != nil }
            #expect(box.summary?.error?.code == .cancelled)
        }
    }

    @Test("What goes away mid-walk is skipped with a warning, the rest is sent, and --delete removes nothing")
    func whatCannotBeListedMidWalkIsAWarning() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            for dir in ["a", "b/inner", "c"] {
                try FileManager.default.createDirectory(atPath: src + "/" + dir, withIntermediateDirectories: true)
            }
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            for name in ["a/x", "b/y", "b/inner/z", "c/w"] { try writeFile(src + "/" + name, Array(name.utf8)) }
            let harness = try TransferHarness(directory: dst)
            var options = TransferSendOptions()
            options.sync = true
            options.delete = true
            let whole = try harness.send(paths: [src], options: options)
            #expect(whole.succeeded)
            try writeFile(dst + "/tree/stray", [1])

            // The top directory is listed in the first step; `b` goes before the second.
            var warnings: [String] = []
            let sender = try TransferSender(paths: [src], options: options) { warnings.append($0) }
            sender.walkStep = 1
            sender.onWalkStep = { _ in
                guard sender.paths == ["tree"] else { return }
                try? FileManager.default.removeItem(atPath: src + "/b")
            }
            let box = Self.start(sender, to: harness)
            let sessions = harness.reports.count
            runLoop(harness.loop, for: .seconds(20)) { box.summary != nil && harness.reports.count > sessions }
            let summary = try #require(box.summary)
            #expect(summary.error == nil)
            #expect(
                warnings.contains { $0.hasPrefix("skipping \"\(src)/b\": lstat: No such file or directory") },
                "\(warnings)")
            // The sender's warnings: the walk's, then --delete's.
            #expect(sender.warnings.first == warnings.first && sender.warnings.count == warnings.count + 1)
            #expect(sender.paths == ["tree", "tree/a", "tree/a/x", "tree/c", "tree/c/w"])
            #expect(summary.results.allSatisfy { $0.outcome.isStored })
            // The receiver's copy of what could not be listed, and the rest, stay.
            #expect(summary.removed.isEmpty)
            #expect(summary.pruneFailures == ["tree: nothing removed: refused: not every entry could be listed"])
            #expect(fileExists(dst + "/tree/stray") && fileExists(dst + "/tree/b/inner/z"))

            if geteuid() != 0 {
                // A directory this user cannot read: the same (root reads any).
                #expect(chmod(src + "/c", 0) == 0)
                defer { chmod(src + "/c", 0o755) }
                var unreadable: [String] = []
                _ = try TransferSender(paths: [src]) { unreadable.append($0) }
                let listed = try SourceTree.list([.path(src)]) { unreadable.append($0) }
                #expect(listed.incomplete)
                #expect(unreadable.contains { $0.hasPrefix("skipping \"\(src)/c\": opendir: Permission denied") })
            }
        }
    }

    @Test("With --sync --checksum, entries listed after HELLO are checked by digest as the first ones are")
    func checksumsOfEntriesThatArriveLater() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            for dir in ["a", "b", "c"] {
                try FileManager.default.createDirectory(atPath: src + "/" + dir, withIntermediateDirectories: true)
                for index in 0..<4 {
                    let seed = UInt64(index) * 2 + UInt64(dir.utf8.first ?? 0) * 16
                    try writeFile(
                        src + "/\(dir)/f\(index)", randomBytes(500, seed: seed), mtime: (1_600_000_000, 0))
                }
            }
            let harness = try TransferHarness(directory: dst)
            var options = TransferSendOptions()
            options.sync = true
            options.checksum = true
            #expect(try harness.send(paths: [src], options: options).succeeded)
            // The same size and mtime, other contents: only a digest tells.
            try writeFile(src + "/c/f3", randomBytes(500, seed: 99), mtime: (1_600_000_000, 0))

            let sender = try TransferSender(paths: [src], options: options)
            sender.walkStep = 1
            var steps = 0
            var stepsBeforeAnswer = 0
            sender.onWalkStep = { _ in
                steps += 1
                if steps == 1 { sender.walkHeld = true }
            }
            // Held after the top directory until its answer: the rest arrives after HELLO.
            sender.onFileResult = { _ in
                guard sender.walkHeld else { return }
                stepsBeforeAnswer = steps
                sender.walkHeld = false
            }
            let box = Self.start(sender, to: harness)
            let sessions = harness.reports.count
            runLoop(harness.loop, for: .seconds(20)) { box.summary != nil && harness.reports.count > sessions }
            let summary = try #require(box.summary)
            #expect(summary.succeeded, "\(summary.results)")
            #expect(stepsBeforeAnswer == 1)
            let replaced = summary.results.filter {
                if case .replaced = $0.change { return true } else { return false }
            }
            #expect(replaced.map(\.path) == ["tree/c/f3"])
            #expect(summary.bytes == 500)
            #expect(summary.results.count == 16)
            #expect(treeDifferences(src, dst + "/tree") == [])
        }
    }

    @Test("Over --streams 3, files go on every connection while the walk is held up; each waits for its directory")
    func parallelConnectionsSendWhileTheWalkGoesOn() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            for dir in ["a", "b", "c", "d"] {
                try FileManager.default.createDirectory(atPath: src + "/" + dir, withIntermediateDirectories: true)
                for index in 0..<6 {
                    try writeFile(src + "/\(dir)/f\(index)", randomBytes(3000 + index, seed: UInt64(index + 1)))
                }
            }
            try writeFile(src + "/d/big", randomBytes(1 << 20, seed: 9))
            let harness = try TransferHarness(directory: dst)
            let sender = try ParallelTransferSender(paths: [src], streams: 3)
            sender.walkStep = 8
            var steps = 0
            sender.onWalkStep = { _ in
                steps += 1
                if steps == 2 { sender.walkHeld = true }
            }
            // Held after two steps (the top directory, a and b with their twelve files, and c)
            // until those twelve files are stored.
            var storedWhileHeld: [String] = []
            var joined: Set<Int> = []
            sender.onStreamJoined = { joined.insert($0) }
            sender.onFileResult = { result in
                guard sender.walkHeld, !result.isDirectory, result.outcome.isStored else { return }
                storedWhileHeld.append(result.path)
                if storedWhileHeld.count == 12 { sender.walkHeld = false }
            }
            let box = SummaryBox()
            sender.start(connect: { Socket.connect(host: "127.0.0.1", port: harness.port) }, on: harness.loop) {
                box.summary = $0
            }
            runLoop(harness.loop, for: .seconds(20)) { box.summary != nil && harness.receiver.activeSessions == 0 }
            let summary = try #require(box.summary)
            #expect(summary.succeeded, "\(summary.results)")
            #expect(sender.streamsUsed == 3 && joined == [0, 1, 2])
            // Every file of the two steps was stored before the walk went on.
            #expect(storedWhileHeld.count == 12, "\(storedWhileHeld)")
            #expect(sender.walkEnded)
            #expect(summary.files == 25 && summary.directories == 5)
            #expect(harness.reports.count == 3)
            #expect(harness.reports.allSatisfy { $0.error == nil }, "\(harness.reports.map(\.error))")
            // The other connections carried files: the big one's ranges at least.
            #expect(sender.bytesPerStream.allSatisfy { $0 > 300 << 10 }, "\(sender.bytesPerStream)")
            #expect(treeDifferences(src, dst + "/tree") == [])
        }
    }

    @Test("A missing source or --files-from path still throws at once; a stream keeps its place among paths")
    func sourcesAreCheckedAtOnce() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src + "/a", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try writeFile(src + "/a/x", [1])
            try writeFile(src + "/file", [2])
            #expect(throws: SluiceError.self) { try TransferSender(paths: [src, root + "/missing"]) }
            let missing = Result { () throws(SluiceError) in try TransferSender(paths: [root + "/missing"]) }
            guard case .failure(let error) = missing else {
                Issue.record("a missing source did not throw")
                return
            }
            #expect(error.description == "stat \"\(root)/missing\": No such file or directory (errno 2)")
            var options = TransferSendOptions()
            options.selection = FileSelection(only: ["a/nope"])
            #expect(throws: SluiceError.self) { try TransferSender(paths: [src], options: options) }
            // Through a file, or excluded on the way: the walk would not meet it.
            options.selection = FileSelection(only: ["file/x"])
            #expect(throws: SluiceError.self) { try TransferSender(paths: [src], options: options) }
            options.selection = FileSelection(excludes: [try #require(try ExcludePattern("a/"))], only: ["a/x"])
            #expect(throws: SluiceError.self) { try TransferSender(paths: [src], options: options) }

            let harness = try TransferHarness(directory: dst)
            let summary = try harness.send([
                .path(src + "/a"), .stream(.memory(Array("piped".utf8)), name: "in.txt"), .path(src + "/file"),
            ])
            #expect(summary.succeeded, "\(String(describing: summary.error))")
            #expect(summary.results.map(\.path) == ["a", "a/x", "in.txt", "file"])
            #expect(readFile(dst + "/in.txt") == Array("piped".utf8))
        }
    }

    static let directory = SenderMachine.Entry(
        relative: "d", isDirectory: true, seekable: false, mode: 0o755, mtimeSeconds: 0, mtimeNanoseconds: 0)
    static let link = SenderMachine.Entry(
        relative: "d/l", isDirectory: false, seekable: false, mode: 0o777, mtimeSeconds: 0, mtimeNanoseconds: 0,
        symlinkTarget: Array("x".utf8))

    /// A machine whose entries are to arrive, with `--sync --delete`, past HELLO.
    static func arriving() -> SenderMachine {
        var machine = SenderMachine(entries: [], settings: .init(sync: true, prunesArriving: true), listed: false)
        _ = machine.received(.magic)
        _ = machine.received(.frame(.hello(version: 1, capabilities: ["sha256", "links", "sync"])))
        return machine
    }

    @Test("The machine announces entries as they arrive, in order; goodbye and PRUNE wait for the last")
    func theMachineTakesEntriesAsTheyArrive() {
        var machine = Self.arriving()
        guard case .send(.hello(_, let capabilities)) = machine.start().first else {
            Issue.record("no HELLO")
            return
        }
        #expect(capabilities.contains(Wire.Capability.delete), "the roots to prune are still to come")
        #expect(!machine.canProceed && !machine.workDone && machine.proceed().isEmpty)
        machine.entriesArrived([Self.directory], pruneRoots: [0], last: false)
        #expect(machine.proceed() == [.send(.check(machine.check(0)))])
        #expect(machine.received(.frame(.have(HaveAnswer(status: .absent)))).isEmpty)
        #expect(machine.proceed().last.map { if case .send(.directory) = $0 { true } else { false } } == true)
        #expect(machine.entriesWaiting == 0)
        // Everything there is went: no goodbye while the walk goes on.
        #expect(!machine.canProceed && !machine.workDone)
        #expect(machine.received(.frame(.stored)) == [.settle(0, .stored)])
        #expect(!machine.canProceed)
        machine.entriesArrived([Self.link], last: true)
        #expect(machine.entriesWaiting == 1)
        #expect(machine.checks == [0, 1])
        #expect(machine.proceed() == [.send(.check(machine.check(1)))])
        #expect(machine.received(.frame(.have(HaveAnswer(status: .absent)))).isEmpty)
        #expect(machine.proceed().last.map { if case .send(.link) = $0 { true } else { false } } == true)
        #expect(machine.workDone)
        #expect(machine.received(.frame(.stored)) == [.settle(1, .stored)])
        #expect(machine.proceed() == [.send(.prune(path: Array("d".utf8), dryRun: false))])

        // Something could not be listed: PRUNE removes nothing.
        var incomplete = Self.arriving()
        incomplete.entriesArrived([Self.directory], pruneRoots: [0], last: true, incomplete: true)
        _ = incomplete.proceed()
        _ = incomplete.received(.frame(.have(HaveAnswer(status: .absent))))
        _ = incomplete.proceed()
        _ = incomplete.received(.frame(.stored))
        #expect(incomplete.proceed() == [.pruned("d", .refused(reason: "not every entry could be listed"))])
        #expect(incomplete.proceed() == [.send(.bye)])
    }
}
