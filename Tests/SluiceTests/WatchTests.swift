import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// `send --watch` in the library: MOVE and REMOVE as a sender holding the code may send them
/// (refused cleanly where they would reach outside the directory, replace a directory, loop,
/// or remove without consent), the inotify parser, and a `TransferWatch` over real sockets
/// into a real directory.
@Suite("Watch: moves, removals, inotify", .ownThreads)
struct WatchTests {
    static func move(_ from: String, _ to: String) -> [UInt8] {
        Frame.move(from: Array(from.utf8), to: Array(to.utf8)).encoded
    }

    static func remove(_ path: String) -> [UInt8] { Frame.remove(path: Array(path.utf8)).encoded }

    /// The answers (STORED, REFUSED, FAILED) in a reply, with GONEs.
    static func answers(_ reply: [UInt8]) -> [UInt8] {
        RawWire.messages(reply).map(\.0).filter { $0 != Wire.MessageType.hello.rawValue }
    }

    @Test("MOVE out of the directory, through a link, over a directory, into itself, onto itself: refused")
    func movesThatLie() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            let outside = root + "/outside"
            try FileManager.default.createDirectory(atPath: dst + "/d/sub", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
            try writeFile(outside + "/precious", [1])
            try writeFile(dst + "/d/x", [2])
            try writeFile(dst + "/f", [3])
            try writeFile(dst + "/kept", [4])
            #expect(symlink(outside, dst + "/out") == 0)
            let harness = try TransferHarness(directory: dst)
            let client = try harness.exchange(
                RawWire.hello(["sha256", "sync", "delete"]) + Self.move("../outside/precious", "d/stolen")
                    + Self.move("d/x", "../outside/x") + Self.move("out/precious", "d/p")
                    + Self.move("d", "d/sub/d") + Self.move("f", "d") + Self.move("d/x", "d/x")
                    + Self.move("d/.x.sluice-part", "y") + Self.move("f", "kept") + Self.move("d/x", "e/deeper/x")
                    + Self.remove("../outside") + Self.remove("out/precious") + Self.remove("d/sub") + RawWire.bye)
            let (refused, stored, gone) = (
                Wire.MessageType.refused.rawValue,
                Wire.MessageType.stored.rawValue, Wire.MessageType.gone.rawValue
            )
            let answers = Self.answers(client.received)
            #expect(
                answers == [
                    refused, refused, refused, refused, refused, refused, refused, stored, stored, refused, stored,
                    gone, stored, Wire.MessageType.bye.rawValue,
                ], "\(RawWire.messages(client.received).map { ($0.0, PeerText.sanitized($0.1)) })")
            #expect(treePaths(outside) == ["precious"], "nothing outside moved or removed")
            #expect(treePaths(dst) == ["d", "e", "e/deeper", "e/deeper/x", "kept", "out"])
            #expect(readFile(dst + "/kept") == [3], "a move over a file replaces it (receive --sync)")
        }
    }

    @Test("Without receive --sync a MOVE is a violation; without --delete a REMOVE is refused")
    func movesNeedConsent() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try writeFile(dst + "/f", [1])
            let plain = try TransferHarness(directory: dst, options: TransferReceiveOptions(idleTimeout: .seconds(20)))
            _ = try plain.exchange(RawWire.hello(["sha256", "sync", "delete"]) + Self.move("f", "g") + RawWire.bye)
            #expect(plain.reports.last?.error?.code == .protocolViolation)
            var options = TransferReceiveOptions(idleTimeout: .seconds(20))
            options.sync = true
            let syncing = try TransferHarness(directory: dst, options: options)
            let client = try syncing.exchange(
                RawWire.hello(["sha256", "sync", "delete"]) + Self.remove("f") + RawWire.bye)
            #expect(
                Self.answers(client.received) == [Wire.MessageType.refused.rawValue, Wire.MessageType.bye.rawValue])
            #expect(treePaths(dst) == ["f"])
            // A sender that did not list delete may not send REMOVE at all.
            _ = try syncing.exchange(RawWire.hello(["sha256", "sync"]) + Self.remove("f") + RawWire.bye)
            #expect(syncing.reports.last?.error?.code == .protocolViolation)
        }
    }

    @Test("inotify events read back; bytes that are not whole events are refused, never trusted")
    func inotifyParser() {
        let events = [
            InotifyEvent(watch: 1, mask: UInt32(IN_CREATE), cookie: 0, name: "a"),
            InotifyEvent(watch: 2, mask: UInt32(IN_MOVED_FROM | IN_ISDIR), cookie: 7, name: "dir"),
            InotifyEvent(watch: 1, mask: UInt32(IN_Q_OVERFLOW), cookie: 0, name: nil),
        ]
        let bytes = InotifyEvent.encode(events, padding: 3)
        let parsed = bytes.withUnsafeBytes { InotifyEvent.parse($0) }
        #expect(parsed.complete && parsed.events == events)
        #expect(parsed.events[1].isDirectory)
        // Cut anywhere inside: the whole events before the cut, and a refusal.
        for cut in 1..<bytes.count where cut != 20 && cut != 40 {
            let part = Array(bytes[..<cut])
            let (some, complete) = part.withUnsafeBytes { InotifyEvent.parse($0) }
            #expect(!complete || some.count < events.count, "cut at \(cut)")
        }
        // A name with a slash, or not UTF-8: never a path.
        var odd = InotifyEvent.encode([InotifyEvent(watch: 1, mask: 2, cookie: 0, name: "a/b")])
        let slash = odd.withUnsafeBytes { InotifyEvent.parse($0) }
        #expect(slash.events.first?.name == nil && slash.events.first?.undecodable == true)
        odd[16] = 0xFF
        let invalid = odd.withUnsafeBytes { InotifyEvent.parse($0) }
        #expect(invalid.events.first?.name == nil)
        // A length past the end.
        var long = InotifyEvent.encode([InotifyEvent(watch: 1, mask: 2, cookie: 0, name: "abc")])
        long[12] = 200
        #expect(!long.withUnsafeBytes { InotifyEvent.parse($0) }.complete)
    }

    @Test("The watch table keeps a name per directory: a rename moves what lies below it, a removal forgets it")
    func watchTableFollowsRenames() throws {
        try withTemporaryDirectory { root in
            try FileManager.default.createDirectory(atPath: root + "/a/b/c", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: root + "/a/d", withIntermediateDirectories: true)
            let watcher = try TreeWatcher()
            defer { watcher.close() }
            for (path, relative) in [
                ("", "t"), ("/a", "t/a"), ("/a/b", "t/a/b"), ("/a/b/c", "t/a/b/c"), ("/a/d", "t/a/d"),
            ] {
                #expect(watcher.add(root + path, relative: relative) == nil)
            }
            let c = inotify_add_watch(watcher.fd, root + "/a/b/c", TreeWatcher.mask)
            #expect(watcher.count == 5 && watcher.relative(of: c) == "t/a/b/c")
            #expect(rename(root + "/a", root + "/x") == 0)
            watcher.renamed(from: "t/a", to: "t/x")
            #expect(watcher.relative(of: c) == "t/x/b/c", "below the directory renamed, the new path")
            // Watched again under its new name (an overflow's pass): the same watch, one node.
            #expect(watcher.add(root + "/x/b/c", relative: "t/x/b/c") == nil)
            #expect(watcher.count == 5)
            watcher.forget(below: "t/x/b")
            #expect(watcher.count == 3 && watcher.relative(of: c) == nil)
            let d = inotify_add_watch(watcher.fd, root + "/x/d", TreeWatcher.mask)
            #expect(watcher.relative(of: d) == "t/x/d")
            watcher.dropped(d)
            #expect(watcher.count == 2 && watcher.relative(of: d) == nil)
        }
    }

    /// A watch of `src` into `harness`, started, its first pass over.
    static func startWatch(
        _ src: String, _ harness: TransferHarness, delete: Bool = true, options: TransferSendOptions = .init(),
        configure: (TransferWatch) -> Void = { _ in }
    ) throws -> (TransferWatch, SummaryBox) {
        var options = options
        options.delete = delete
        let watch = try TransferWatch(paths: [src], options: options, settle: .milliseconds(20))
        configure(watch)
        var passed = false
        watch.onPassDone = { passed = true }
        let (input, output) = Socket.connect(host: "127.0.0.1", port: harness.port)
        let box = SummaryBox()
        watch.start(input: input, output: output, on: harness.loop) { box.summary = $0 }
        #expect(runLoop(harness.loop, for: .seconds(20)) { passed }, "the first pass did not end")
        return (watch, box)
    }

    /// Six directories of 150 two-byte files each under `src` (their second byte `tag`).
    static func writeSixDirectories(_ src: String, tag: UInt8) throws {
        for directory in 0..<6 {
            let path = src + "/d\(directory)"
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            for index in 0..<150 { try writeFile(path + "/f\(index)", [UInt8(index), tag]) }
        }
    }

    /// A walk that stays near the announcements, and forgetting in small steps: a first pass
    /// of a few hundred entries is never held whole.
    static func inSmallSteps(_ watch: TransferWatch) {
        watch.sender.walkStep = 16
        watch.sender.walkAhead = 32
        watch.sender.watch.forgetStep = 16
    }

    /// Runs the loop until the receiver's copy of `src` is the same (many seconds at most).
    static func settles(_ src: String, _ copy: String, _ harness: TransferHarness) -> Bool {
        runLoop(harness.loop, for: .seconds(20)) {
            treeDifferences(src, copy, compareDirectoryTimes: false).isEmpty
        }
    }

    @Test("A directory of 1,000 files renamed is one MOVE: a few hundred bytes on the wire, nothing resent")
    func directoryRenameIsAMove() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src + "/big", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            for index in 0..<1000 { try writeFile(src + "/big/f\(index)", randomBytes(1000, seed: UInt64(index))) }
            let harness = try TransferHarness(directory: dst)
            let (watch, box) = try Self.startWatch(src, harness)
            let before = watch.sender.bytesWritten
            let stored = watch.sender.progress.filesDone
            #expect(rename(src + "/big", src + "/moved") == 0)
            #expect(runLoop(harness.loop, for: .seconds(20)) { watch.moves == 1 && watch.lastChange != nil })
            #expect(Self.settles(src, dst + "/tree", harness), "\(treeDifferences(src, dst + "/tree"))")
            let wire = watch.sender.bytesWritten - before
            #expect(wire < 4096, "\(wire) bytes for a rename")
            #expect(watch.sender.progress.filesDone == stored, "no file sent again")
            watch.stop()
            #expect(runLoop(harness.loop, for: .seconds(20)) { box.summary != nil })
            #expect(box.summary?.error == nil)
        }
    }

    @Test("Directories' modes and mtimes match while watching, once their changes are answered: not at goodbye")
    func directoryTimesFollowTheWatch() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src + "/sub/deep", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            for index in 0..<20 { try writeFile(src + "/sub/f\(index)", [UInt8(index)]) }
            try writeFile(src + "/sub/deep/x", [1])
            let harness = try TransferHarness(directory: dst)
            let (watch, box) = try Self.startWatch(src, harness)
            let copy = dst + "/tree"
            // The first pass: its directories were set as their CHECKs came, then again.
            #expect(
                runLoop(harness.loop, for: .seconds(20)) { treeDifferences(src, copy).isEmpty },
                "\(treeDifferences(src, copy))")
            // A file made, one removed, a directory made with a file in it, a mode changed.
            try writeFile(src + "/sub/new", [9])
            #expect(unlink(src + "/sub/f3") == 0)
            try FileManager.default.createDirectory(atPath: src + "/sub/made", withIntermediateDirectories: true)
            try writeFile(src + "/sub/made/y", [2])
            #expect(chmod(src + "/sub/deep", 0o750) == 0)
            #expect(
                runLoop(harness.loop, for: .seconds(20)) { treeDifferences(src, copy).isEmpty },
                "\(treeDifferences(src, copy))")
            // The same directory changed again, once its last change is settled: set again.
            for name in ["again1", "again2"] {
                try writeFile(src + "/sub/" + name, [3])
                #expect(
                    runLoop(harness.loop, for: .seconds(20)) { treeDifferences(src, copy).isEmpty },
                    "\(name): \(treeDifferences(src, copy))")
            }
            #expect(box.summary == nil, "still watching")
            watch.stop()
            #expect(runLoop(harness.loop, for: .seconds(20)) { box.summary != nil })
            #expect(box.summary?.error == nil)
        }
    }

    @Test("An overflow of the inotify queue is caught by a --sync pass: what its lost events said arrives")
    func overflowIsCaughtBySync() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src + "/sub", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try writeFile(src + "/sub/a", [1])
            let harness = try TransferHarness(directory: dst)
            let (watch, box) = try Self.startWatch(src, harness)
            // Changes whose events are lost (read and dropped, as an overflow loses them)…
            watch.dropsEvents = true
            let seen = watch.eventsSeen
            try writeFile(src + "/sub/b", [2])
            try writeFile(src + "/sub/a", [3, 3])
            // b: created, written, closed; a: written, closed.
            #expect(runLoop(harness.loop, for: .seconds(20)) { watch.eventsSeen >= seen + 5 })
            watch.dropsEvents = false
            #expect(!treeDifferences(src, dst + "/tree", compareDirectoryTimes: false).isEmpty)
            // … then the overflow that says so.
            watch.simulateOverflow()
            #expect(Self.settles(src, dst + "/tree", harness), "\(treeDifferences(src, dst + "/tree"))")
            #expect(watch.overflows == 1)
            watch.stop()
            #expect(runLoop(harness.loop, for: .seconds(20)) { box.summary != nil })
        }
    }

    @Test("A directory that could not be watched is gone through again as --sync does, until its changes are in")
    func unwatchedDirectoryIsPassedOver() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src + "/sub", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let harness = try TransferHarness(directory: dst)
            let (watch, box) = try Self.startWatch(src, harness)
            watch.unwatchedPass = .milliseconds(100)
            watch.dropsEvents = true
            watch.simulateUnwatched("tree/sub")
            try writeFile(src + "/sub/new", [1, 2, 3])
            #expect(Self.settles(src, dst + "/tree", harness), "\(treeDifferences(src, dst + "/tree"))")
            watch.stop()
            #expect(runLoop(harness.loop, for: .seconds(20)) { box.summary != nil })
        }
    }

    @Test(
        "A watch forgets what is answered: 1,000 changes after a first pass of 500 files keep two rounds' entries at most"
    )
    func answeredEntriesAreForgotten() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            for directory in 0..<10 {
                try FileManager.default.createDirectory(
                    atPath: src + "/d\(directory)", withIntermediateDirectories: true)
                for index in 0..<50 { try writeFile(src + "/d\(directory)/f\(index)", [UInt8(index)]) }
            }
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let harness = try TransferHarness(directory: dst)
            let (watch, box) = try Self.startWatch(src, harness, delete: false)
            // The first pass (511 entries) is answered, and its directories' entries after it:
            // nothing of them is kept.
            #expect(runLoop(harness.loop, for: .seconds(20)) { watch.sender.answeredAll && watch.touched.isEmpty })
            #expect(watch.sender.entriesKept == 0)
            watch.sender.watch.mostKept = 0
            watch.sender.watch.forgetStep = 64
            let rounds = 10
            let perRound = 100
            for round in 0..<rounds {
                // Half new files, half files of the first pass rewritten.
                var made: [String] = []
                for index in 0..<perRound {
                    let directory = src + "/d\(index % 10)"
                    let path = index % 2 == 0 ? directory + "/new-\(round)-\(index)" : directory + "/f\(index / 2 % 50)"
                    try writeFile(path, [UInt8(round), UInt8(index), 7])
                    if index % 2 == 0 { made.append(dst + "/tree" + path.dropFirst(src.count)) }
                }
                // The round's new files arrive, and everything fed is answered…
                let machine = { watch.sender.machine }
                #expect(
                    runLoop(harness.loop, for: .seconds(20)) {
                        watch.queued == 0 && machine().unanswered.isEmpty && machine().entriesWaiting == 0
                            && machine().awaitingHave.isEmpty && made.allSatisfy { access($0, F_OK) == 0 }
                    }, "round \(round)")
                // … and forgotten.
                #expect(watch.sender.entriesKept == 0, "round \(round)")
            }
            #expect(Self.settles(src, dst + "/tree", harness), "\(treeDifferences(src, dst + "/tree"))")
            // Every change went through the session; what it kept never grew with them.
            let answered = watch.sender.watch.forgotten.files
            #expect(answered >= 500 + rounds * perRound / 2, "\(answered) files answered and forgotten")
            let most = watch.sender.watch.mostKept
            #expect(most <= 64 + 2 * perRound, "\(most) entries kept at once")
            watch.stop()
            #expect(runLoop(harness.loop, for: .seconds(20)) { box.summary != nil })
            #expect(box.summary?.error == nil)
            #expect(box.summary?.results.isEmpty == true, "every entry stored: counted, not listed")
            #expect((box.summary?.files ?? 0) >= 500 + rounds * perRound / 2)
        }
    }

    /// Makes `root`/stage/burst with directories a and b of `each` small files, outside the
    /// tree watched: moved in, it all exists when the watch sees it.
    /// A watch of `root`/tree into `root`/dst, a staged burst moved in, and its listing held
    /// after its first step of 16 (burst, a, and 14 of a's files fed).
    static func watchHeldInAListing(_ root: String) throws -> (
        src: String, dst: String, harness: TransferHarness, watch: TransferWatch, box: SummaryBox
    ) {
        let src = root + "/tree"
        let dst = root + "/dst"
        try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
        let stage = try stageBurst(root, each: 40)
        let harness = try TransferHarness(directory: dst)
        let (watch, box) = try startWatch(src, harness)
        watch.listingStep = 16
        watch.onListingStep = { _ in watch.listingHeld = true }
        #expect(rename(stage, src + "/burst") == 0)
        #expect(runLoop(harness.loop, for: .seconds(20)) { watch.listingHeld })
        return (src, dst, harness, watch, box)
    }

    static func stageBurst(_ root: String, each: Int) throws -> String {
        let stage = root + "/stage/burst"
        for directory in ["a", "b"] {
            try FileManager.default.createDirectory(atPath: stage + "/" + directory, withIntermediateDirectories: true)
            for index in 0..<each { try writeFile(stage + "/\(directory)/f\(index)", [UInt8(index & 0xFF), 1]) }
        }
        return stage
    }

    @Test("A directory moved in is listed in steps on a worker, each step fed as it comes: all of it arrives")
    func movedInDirectoryIsListedInSteps() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let stage = try Self.stageBurst(root, each: 150)
            let harness = try TransferHarness(directory: dst)
            let (watch, box) = try Self.startWatch(src, harness)
            watch.listingStep = 32
            var steps = 0
            watch.onListingStep = { _ in steps += 1 }
            #expect(rename(stage, src + "/burst") == 0)
            #expect(Self.settles(src, dst + "/tree", harness), "\(treeDifferences(src, dst + "/tree"))")
            // 303 entries (burst, a, b, 300 files): ten steps at least, one listing.
            #expect(steps >= 303 / 32, "\(steps) steps")
            #expect(watch.listings == 1)
            watch.stop()
            #expect(runLoop(harness.loop, for: .seconds(20)) { box.summary != nil })
            #expect(box.summary?.error == nil)
        }
    }

    @Test("A rename inside a directory being listed ends its listing: the MOVE goes, then it is listed again")
    func renameDuringAListing() throws {
        try withTemporaryDirectory { root in
            // The listing is held after its first step (burst, a, and 14 of a's files fed)…
            let (src, dst, harness, watch, box) = try Self.watchHeldInAListing(root)
            // … while a, half listed, is renamed: a MOVE of what was fed, then c listed whole.
            #expect(rename(src + "/burst/a", src + "/burst/c") == 0)
            #expect(runLoop(harness.loop, for: .seconds(20)) { watch.moves == 1 })
            watch.onListingStep = nil
            watch.listingHeld = false
            #expect(Self.settles(src, dst + "/tree", harness), "\(treeDifferences(src, dst + "/tree"))")
            #expect(watch.listings >= 2)
            watch.stop()
            #expect(runLoop(harness.loop, for: .seconds(20)) { box.summary != nil })
            #expect(box.summary?.error == nil)
        }
    }

    @Test("Stopped while a directory is listed, the watch sends the rest of it, then says goodbye")
    func stopDuringAListing() throws {
        try withTemporaryDirectory { root in
            let (src, dst, harness, watch, box) = try Self.watchHeldInAListing(root)
            // Everything fed so far is answered: goodbye must still wait for the listing.
            #expect(runLoop(harness.loop, for: .seconds(20)) { watch.sender.answeredAll })
            watch.stop()
            #expect(!runLoop(harness.loop, for: .milliseconds(200)) { box.summary != nil }, "no goodbye yet")
            watch.onListingStep = nil
            watch.listingHeld = false
            #expect(runLoop(harness.loop, for: .seconds(20)) { box.summary != nil })
            #expect(box.summary?.error == nil)
            #expect(
                treeDifferences(src, dst + "/tree", compareDirectoryTimes: false).isEmpty,
                "\(treeDifferences(src, dst + "/tree"))")
        }
    }

    @Test("With -H, the first pass is forgotten as it is answered, before its walk ends: the links still arrive")
    func hardLinkedFirstPassIsForgotten() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try Self.writeSixDirectories(src, tag: 1)
            // Three files with a second name each (held by the walk for its end).
            for index in 0..<3 { #expect(link(src + "/d0/f\(index)", src + "/d5/link\(index)") == 0) }
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let harness = try TransferHarness(directory: dst)
            var options = TransferSendOptions()
            options.hardLinks = true
            let (watch, box) = try Self.startWatch(
                src, harness, delete: false, options: options, configure: Self.inSmallSteps)
            // 910 entries: never all kept at once.
            let most = watch.sender.watch.mostKept
            #expect(most < 300, "\(most) entries kept at once")
            #expect(Self.settles(src, dst + "/tree", harness), "\(treeDifferences(src, dst + "/tree"))")
            for index in 0..<3 {
                var first = stat()
                var second = stat()
                #expect(stat(dst + "/tree/d0/f\(index)", &first) == 0)
                #expect(stat(dst + "/tree/d5/link\(index)", &second) == 0)
                #expect(first.st_ino == second.st_ino, "link \(index) arrived as a link")
            }
            watch.stop()
            #expect(runLoop(harness.loop, for: .seconds(20)) { box.summary != nil })
            #expect(box.summary?.error == nil)
        }
    }

    @Test("With --delete, the first pass is forgotten as it is answered, before its PRUNE: which still removes")
    func firstPassWithDeleteIsForgotten() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try Self.writeSixDirectories(src, tag: 2)
            // What the receiver holds and the sender does not: removed by the first pass's PRUNE.
            try FileManager.default.createDirectory(atPath: dst + "/tree/d2/old", withIntermediateDirectories: true)
            try writeFile(dst + "/tree/d2/old/stale", [1])
            try writeFile(dst + "/tree/stale", [1])
            let harness = try TransferHarness(directory: dst)
            let (watch, box) = try Self.startWatch(src, harness, delete: true, configure: Self.inSmallSteps)
            // 907 entries: never all kept at once (all of them were, until the PRUNE's answer).
            let most = watch.sender.watch.mostKept
            #expect(most < 300, "\(most) entries kept at once")
            #expect(access(dst + "/tree/stale", F_OK) != 0 && access(dst + "/tree/d2/old", F_OK) != 0)
            #expect(Self.settles(src, dst + "/tree", harness), "\(treeDifferences(src, dst + "/tree"))")
            watch.stop()
            #expect(runLoop(harness.loop, for: .seconds(20)) { box.summary != nil })
            #expect(box.summary?.error == nil)
            #expect(box.summary?.removedCount == 3, "\(box.summary?.removed ?? [])")
        }
    }

    @Test("A long watch's summary lists its first failures and counts the rest; one of each kind stays listed")
    func failuresAreBounded() throws {
        func result(_ index: Int, _ outcome: TransferOutcome) -> TransferFileResult {
            TransferFileResult(path: "tree/f\(index)", size: 1, outcome: outcome)
        }
        let io = TransferOutcome.failed(reason: "gone", kind: .io)
        var failures = KeptFailures()
        failures.limit = 6
        var counts = TransferResultCounts()
        let first = (0..<10).map { result($0, io) }.filter { failures.admits($0, counting: &counts) }
        #expect(first.count == 6)
        #expect(counts.failed == 4)
        // Past the limit, a refusal and a data failure are listed (the exit status follows them),
        // a second refusal is counted; a stored result is always listed.
        let refused = TransferOutcome.refused(reason: "exists")
        let later = [result(10, refused), result(11, .failed(reason: "digest", kind: .data)), result(12, refused)]
        #expect(later.map { failures.admits($0, counting: &counts) } == [true, true, false])
        #expect(failures.admits(result(13, .stored), counting: &counts))
        #expect(counts.refused == 1 && counts.failed == 4)
        // Two sessions summed: the same bound over both, their counts added.
        func summary(_ results: [TransferFileResult], _ counts: TransferResultCounts) -> TransferSummary {
            var summary = TransferSummary(
                files: 0, directories: 0, bytes: 0, bytesSent: 0, resumedBytes: 0, seconds: 1, results: results)
            summary.forgotten = counts
            return summary
        }
        let stored = result(99, .stored)
        let sum = try #require(
            TransferWatch.summed(
                summary(first + [stored], counts), summary((20..<25).map { result($0, io) }, counts),
                failureLimit: 6))
        #expect(sum.results.count == 7, "6 failures and the stored one")
        #expect(sum.results.last == stored)
        #expect(sum.forgotten.failed == 4 + 4 + 5)
        #expect(sum.forgotten.refused == 2)
    }
}
