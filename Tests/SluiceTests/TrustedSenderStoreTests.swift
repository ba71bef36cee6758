import CSluiceLinux
import Foundation
import Synchronization
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// A sender that holds the code is trusted with files, not with the machine (issue 48, items 1
/// and 3): played peers sending raw frames to a real receiver over loopback. Racing sessions
/// never change a file outside the destination through a name swapped for a link; a FIFO,
/// socket or device where a regular file was expected fails that file and holds no disk worker.
@Suite("A trusted sender's store: nothing changed outside DIR, no open that waits", .ownThreads)
struct TrustedSenderStoreTests {
    /// Rounds of CHECKs each racing session sends (seven CHECKs a round): enough for the name
    /// to change under many of them, few enough that the race takes a few seconds.
    static let raceRounds = 2000
    /// Sessions sending CHECKs at once, on the receiver's disk workers side by side.
    static let racingSessions = 3
    /// The mtime of the racing file, as the CHECKs say it.
    static let fileMtime = 1_600_000_000
    /// The outside file's mtime before the race.
    static let outsideMtime = 1_500_000_000

    /// What the race must leave as it was: an outside file's type, mode, owner, mtime, the time
    /// of its last change of status (any chmod, chown, utime or xattr change moves it), and its
    /// extended attributes.
    struct Untouched: Equatable, CustomStringConvertible {
        var status: stat
        var xattrs: [String: [UInt8]]

        init?(_ path: String) {
            status = stat()
            guard lstat(path, &status) == 0 else { return nil }
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { return nil }
            defer { close(fd) }
            guard let xattrs = ReceiverStore.userXattrs(fd) else { return nil }
            self.xattrs = xattrs
        }

        static func == (a: Untouched, b: Untouched) -> Bool {
            let (x, y) = (a.status, b.status)
            return x.st_mode == y.st_mode && x.st_uid == y.st_uid && x.st_gid == y.st_gid && a.xattrs == b.xattrs
                && x.st_mtim.tv_sec == y.st_mtim.tv_sec && x.st_mtim.tv_nsec == y.st_mtim.tv_nsec
                && x.st_ctim.tv_sec == y.st_ctim.tv_sec && x.st_ctim.tv_nsec == y.st_ctim.tv_nsec
        }

        var description: String {
            let (mtime, ctime) = (status.st_mtim, status.st_ctim)
            return "mode \(String(status.st_mode, radix: 8)) owner \(status.st_uid):\(status.st_gid)"
                + " mtime \(mtime.tv_sec).\(mtime.tv_nsec) ctime \(ctime.tv_sec).\(ctime.tv_nsec) xattrs \(xattrs)"
        }
    }

    /// A receiver that keeps the modes sent (so that every mode a CHECK names is applied) and
    /// lets senders sync.
    static var receiving: TransferReceiveOptions {
        var options = TransferReceiveOptions(idleTimeout: .seconds(30), keepsModes: true)
        options.sync = true
        return options
    }

    /// Runs `body` with a temporary directory and the receiver's directory `dst` in it.
    static func withDestination(_ body: (_ root: String, _ dst: String) throws -> Void) throws {
        try withTemporaryDirectory { root in
            try FileManager.default.createDirectory(atPath: root + "/dst", withIntermediateDirectories: true)
            try body(root, root + "/dst")
        }
    }

    /// Starts a raw session sending `payload`; the caller runs the loop.
    static func start(_ harness: TransferHarness, _ payload: [UInt8]) -> SocketExchange {
        let client = SocketExchange(Socket.connect(host: "127.0.0.1", port: harness.port), payload: payload)
        client.start(on: harness.loop)
        return client
    }

    /// The messages of `client`'s reply of type `type`, their payloads.
    static func replies(_ client: SocketExchange, _ type: Wire.MessageType) -> [[UInt8]] {
        RawWire.messages(client.received).filter { $0.0 == type.rawValue }.map(\.1)
    }

    /// The text of every REFUSED and FAILED in `client`'s reply.
    static func rejections(_ client: SocketExchange) -> [String] {
        (replies(client, .refused) + replies(client, .failed)).map { String(decoding: $0.dropFirst(), as: UTF8.self) }
    }

    static func check(
        _ path: String, kind: Wire.CheckKind = .file, flags: UInt8 = Wire.CheckFlags.apply, size: UInt64 = 5,
        mode: UInt32, mtime: Int = fileMtime, digest: [UInt8] = []
    ) -> [UInt8] {
        MessageWriter.check(
            CheckHeader(
                kind: kind, flags: flags, size: size, mode: mode, mtimeSeconds: Int64(mtime), mtimeNanoseconds: 0,
                path: Array(path.utf8), digest: digest))
    }

    /// The racing file's bytes, which a CHECK comparing contents names by digest.
    static let fileBytes: [UInt8] = [9, 9, 9, 9, 9]

    /// One racing session's frames: rounds of a CHECK with apply of file `f` (only its mode
    /// differs), of FIFO `p` (mode and mtime differ), of file `c` by its contents (`--checksum`:
    /// the name flips between it and a FIFO, which must never be opened), and, where the
    /// receiver takes owners,
    /// the same with an OWNER (and for `f` XATTRs) before them; each round asks for another
    /// mode, owner and attribute than the last, so that every round has something to change.
    static func racingPayload(session: Int, owners: Bool) -> [UInt8] {
        let capabilities = ["sha256", "sync"] + (owners ? ["xattrs", "owners", "sync-attributes"] : [])
        var payload = RawWire.hello(capabilities)
        for round in 0..<raceRounds {
            let odd = (round + session) & 1 == 1
            let mode: UInt32 = odd ? 0o600 : 0o606
            let fifo = UInt32(Glibc.S_IFIFO) | mode
            // The file most: the old way of setting its mode lost the race to a flip between
            // the look and the change, which takes many tries to catch.
            payload += check("f", mode: mode) + check("f", mode: mode ^ 0o006) + check("f", mode: mode)
            payload += check("p", kind: .special, size: 0, mode: fifo, mtime: odd ? 1_000 : 2_000)
            let digest = SHA256Digest.hash(fileBytes)
            payload += check("c", flags: Wire.CheckFlags.apply | Wire.CheckFlags.digest, mode: mode, digest: digest)
            guard owners else { continue }
            let id = UInt32(odd ? 4001 : 4002)
            let owner = MessageWriter.owner(EntryOwner(uid: id, gid: id, user: "", group: ""))
            let xattr = MessageWriter.xattr(ExtendedAttribute(name: "user.race", value: [UInt8(round & 0xFF)]))
            payload += owner + xattr
            payload += check("f", flags: Wire.CheckFlags.apply | Wire.CheckFlags.xattrs, mode: odd ? 0o606 : 0o600)
            payload += owner + check("p", kind: .special, size: 0, mode: fifo ^ 0o006, mtime: odd ? 2_000 : 1_000)
        }
        return payload + RawWire.bye
    }

    /// Threads that flip names: each exchanges its pairs of names over and over.
    final class Flipper: Sendable {
        let stop = Atomic(false)
        let flips = Atomic(0)
        let stopped = DispatchSemaphore(value: 0)

        /// Starts a thread exchanging each pair of names in `directory` in turn, as tight as it
        /// goes (one call exchanges two names), until `finish`.
        func start(_ directory: Int32, _ pairs: [(String, String)]) {
            Thread.detachNewThread { [self] in
                while !stop.load(ordering: .relaxed) {
                    for (a, b) in pairs { renameat2(directory, a, directory, b, UInt32(RENAME_EXCHANGE)) }
                    flips.add(1, ordering: .relaxed)
                }
                stopped.signal()
            }
        }

        /// Stops the `threads` started, and waits until they have.
        func finish(_ threads: Int) {
            stop.store(true, ordering: .relaxed)
            for _ in 0..<threads { stopped.wait() }
        }
    }

    @Test(
        "Racing sessions: a name flipped between a file or FIFO and a link to an outside file, CHECKed with apply; the outside file is never changed"
    )
    func racingChecksChangeNothingOutside() throws {
        try Self.withDestination { root, dst in
            let outside = root + "/outside"
            try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
            let secret = outside + "/secret"
            try writeFile(secret, [1, 2, 3, 4, 5], mode: 0o644, mtime: (Self.outsideMtime, 0))
            #expect(SourceMetadata.setXattr(secret, "user.keep", [7]))
            // `f` and `lf`, `p` and `lp`: a file and a FIFO (what the CHECKs name), and links to
            // the outside file, whose names the flipper exchanges.
            try writeFile(dst + "/f", Self.fileBytes, mode: 0o640, mtime: (Self.fileMtime, 0))
            // `c` and `cq`: a file compared by contents, and a FIFO.
            try writeFile(dst + "/c", Self.fileBytes, mode: 0o640, mtime: (Self.fileMtime, 0))
            #expect(mkfifo(dst + "/cq", 0o640) == 0)
            defer { Self.release([dst + "/c", dst + "/cq"]) }
            #expect(SpecialFilesTests.make(dst + "/p", Glibc.S_IFIFO, mode: 0o640))
            #expect(symlink(secret, dst + "/lf") == 0 && symlink(secret, dst + "/lp") == 0)
            let before = try #require(Untouched(secret))

            let harness = try TransferHarness(directory: dst, options: Self.receiving)
            let owners = geteuid() == 0
            let directory = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            #expect(directory >= 0)
            defer { close(directory) }
            // The file has a thread of its own: the old way of setting its mode lost only to a
            // flip between the look and the change.
            let flipper = Flipper()
            flipper.start(directory, [("f", "lf")])
            flipper.start(directory, [("p", "lp"), ("c", "cq")])
            let clients = (0..<Self.racingSessions).map {
                Self.start(harness, Self.racingPayload(session: $0, owners: owners))
            }
            let ended = runLoop(harness.loop, for: .seconds(30)) {
                clients.allSatisfy(\.done) && harness.reports.count >= Self.racingSessions
            }
            flipper.finish(2)
            #expect(ended, "the racing sessions did not end")
            #expect(harness.reports.allSatisfy { $0.error == nil }, "\(harness.reports.map(\.error))")

            // Nothing outside changed: not its mode, owner, times, nor its attributes.
            let after = try #require(Untouched(secret))
            #expect(after == before, "the outside file changed: \(before) → \(after)")
            #expect(readFile(secret) == [1, 2, 3, 4, 5])

            // The race was run: the names changed under the CHECKs, which saw the links (told
            // as another kind) and the file and FIFO, and set their modes.
            let haves = clients.flatMap { Self.replies($0, .have) }
            let rounds = Self.racingSessions * Self.raceRounds
            #expect(haves.count == rounds * (owners ? 7 : 5))
            let kind = UInt8(Wire.HaveDifference.kind)
            let sawLink = haves.filter { $0.count >= 2 && $0[1] & kind != 0 }.count
            let set = haves.filter { $0.first == Wire.HaveStatus.same.rawValue && $0.count >= 2 && $0[1] != 0 }.count
            #expect(
                sawLink > 0 && set > 0,
                "\(sawLink) links seen, \(set) changes made, \(flipper.flips.load(ordering: .relaxed)) flips")
            // Whichever name holds them now, the links still point outside and nothing but
            // the file and FIFO were changed.
            for name in ["f", "lf", "p", "lp"] {
                let info = try #require(FileInfo(dst + "/" + name))
                #expect(
                    info.type == Glibc.S_IFLNK || info.type == Glibc.S_IFREG || info.type == Glibc.S_IFIFO, "\(name)")
            }
        }
    }

    /// Starts a session sending a FILE flagged delta of `name` (whose basis is what is there),
    /// then BYE.
    static func deltaPayload(_ name: String) -> [UInt8] {
        let flags = Wire.FileFlags.sizeKnown | Wire.FileFlags.replace | Wire.FileFlags.delta
        return RawWire.hello(["sha256", "sync", "delta"]) + RawWire.file(name, size: 10, flags: flags) + RawWire.bye
    }

    /// Opens each FIFO for writing without waiting: a reader stuck in its open (the receiver
    /// before the fix) is let go, so that a failing test ends.
    static func release(_ fifos: [String]) {
        for path in fifos {
            let fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
            if fd >= 0 { close(fd) }
        }
    }

    @Test(
        "Four FIFOs as delta bases: each fails its file alone, another session's transfer completes, the receiver stops"
    )
    func fourFIFOBasesHoldNoWorker() throws {
        try Self.withDestination { root, dst in
            let fifos = (0..<ReceiverStore.diskThreads).map { dst + "/basis\($0)" }
            for path in fifos { #expect(mkfifo(path, 0o644) == 0) }
            defer { Self.release(fifos) }
            let harness = try TransferHarness(directory: dst, options: Self.receiving)
            let clients = fifos.indices.map { Self.start(harness, Self.deltaPayload("basis\($0)")) }
            let ended = runLoop(harness.loop, for: .seconds(10)) {
                clients.allSatisfy(\.done) && harness.reports.count >= fifos.count
            }
            #expect(ended, "the sessions with a FIFO as basis did not end")
            for (index, client) in clients.enumerated() {
                let reasons = Self.rejections(client)
                #expect(
                    reasons.count == 1 && reasons[0].contains("basis\(index)")
                        && reasons[0].contains("not a regular file (a FIFO)"), "\(reasons)")
                #expect(FileInfo(fifos[index])?.type == Glibc.S_IFIFO)
            }
            #expect(harness.reports.allSatisfy { $0.error == nil }, "\(harness.reports.map(\.error))")
            #expect(treePaths(dst) == fifos.indices.map { "basis\($0)" }, "no partial left: \(treePaths(dst))")

            // Another session's transfer goes through: no disk worker is held.
            try writeFile(root + "/plain.txt", Array("plain\n".utf8))
            let summary = try harness.send([.path(root + "/plain.txt")], limit: .seconds(10))
            #expect(summary.succeeded, "\(summary.results)")
            #expect(readFile(dst + "/plain.txt") == Array("plain\n".utf8))

            // And the receiver stops: its disk work is done within two seconds.
            harness.listener.close()
            harness.receiver.closeAllSessions()
            let stopped = DispatchSemaphore(value: 0)
            let receiver = UncheckedBox(harness.receiver)
            Thread.detachNewThread {
                receiver.value.finishDiskWork()
                stopped.signal()
            }
            #expect(stopped.wait(timeout: .now() + 2) == .success, "the receiver's disk work did not finish")
        }
    }

    /// Makes a FIFO, a socket and (as root) a device like /dev/null at `path` + each kind's
    /// name; returns the kinds made.
    static func makeNodes(_ path: (String) -> String) -> [String] {
        var made: [String] = []
        for (kind, type, device) in [
            ("fifo", Glibc.S_IFIFO, UInt64(0)), ("socket", Glibc.S_IFSOCK, 0),
            ("device", Glibc.S_IFCHR, SpecialFiles.device(major: 1, minor: 3)),
        ] where mknod(path(kind), type | 0o600, dev_t(device)) == 0 {
            made.append(kind)
        }
        return made
    }

    @Test(
        "A FIFO, a socket and a device where a regular file was expected (a delta's basis, a --checksum comparison, a partial to resume) fail that file; the session goes on"
    )
    func nonRegularEntriesFailTheirFileOnly() throws {
        try Self.withDestination { _, dst in
            let bases = Self.makeNodes { dst + "/basis-" + $0 }
            let compared = Self.makeNodes { dst + "/sum-" + $0 }
            let partials = Self.makeNodes { dst + "/" + Destination.temporaryName(for: "part-" + $0) }
            #expect(bases.count >= 2 && bases == compared && compared == partials)
            #expect(bases.contains("device") || geteuid() != 0)
            defer { Self.release(bases.map { dst + "/basis-" + $0 }) }

            let harness = try TransferHarness(directory: dst, options: Self.receiving)
            let delta = Wire.FileFlags.sizeKnown | Wire.FileFlags.replace | Wire.FileFlags.delta
            let resumable = Wire.FileFlags.sizeKnown | Wire.FileFlags.resumable
            let bytes: [UInt8] = [1, 2, 3]
            var payload = RawWire.hello(["sha256", "sync", "delta", "resume"])
            for kind in bases {
                payload += RawWire.file("basis-" + kind, size: 10, flags: delta)
                payload += Self.check(
                    "sum-" + kind, flags: Wire.CheckFlags.apply | Wire.CheckFlags.digest, size: 3, mode: 0o644,
                    digest: SHA256Digest.hash(bytes))
                // Refused at its header: no DATA follows.
                payload += RawWire.file("part-" + kind, size: 3, flags: resumable)
            }
            payload += RawWire.file("after.txt", size: 3) + RawWire.data(bytes) + RawWire.end(bytes) + RawWire.bye
            let client = Self.start(harness, payload)
            let ended = runLoop(harness.loop, for: .seconds(10)) { client.done && !harness.reports.isEmpty }
            #expect(ended, "the session did not end")
            #expect(harness.reports.first?.error == nil, "\(String(describing: harness.reports.first?.error))")

            let reasons = Self.rejections(client)
            let named = ["fifo": "a FIFO", "socket": "a socket", "device": "a character device"]
            for kind in bases {
                for name in ["basis-" + kind, Destination.temporaryName(for: "part-" + kind)] {
                    let reason = "\(name)\": not a regular file (\(named[kind] ?? ""))"
                    #expect(reasons.contains { $0.contains(reason) }, "\(reason) in \(reasons)")
                }
                // Told as another kind of entry: the sender would send it again.
                #expect(FileInfo(dst + "/sum-" + kind)?.type != Glibc.S_IFREG)
            }
            #expect(reasons.count == 2 * bases.count, "\(reasons)")
            let haves = Self.replies(client, .have)
            #expect(
                haves == bases.map { _ in [Wire.HaveStatus.differs.rawValue, UInt8(Wire.HaveDifference.kind)] },
                "\(haves)")
            #expect(readFile(dst + "/after.txt") == bytes)
            #expect(!fileExists(dst + "/part-fifo"))
            #expect(!fileExists(dst + "/" + Destination.temporaryName(for: "basis-fifo")))
        }
    }

    @Test(
        "The open of an existing file: a FIFO (or a link) where a regular file was looked at is refused at once, never opened"
    )
    func openRegularRefusesWhatChanged() throws {
        try withTemporaryDirectory { root in
            try writeFile(root + "/file", [1, 2, 3])
            try writeFile(root + "/outside", [4, 5, 6], mode: 0o644)
            #expect(mkfifo(root + "/fifo", 0o644) == 0)
            defer { Self.release([root + "/fifo"]) }
            #expect(symlink(root + "/outside", root + "/link") == 0)
            let directory = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            defer { close(directory) }
            var looked = stat()
            #expect(fstatat(directory, "file", &looked, AT_SYMLINK_NOFOLLOW) == 0)

            // The file looked at: opened, its status the look's.
            guard
                case .success(let (fd, status)) = EntryHandle.openRegular(
                    directory, "file", flags: O_RDONLY, display: "file", expecting: looked)
            else {
                Issue.record("the file looked at was not opened")
                return
            }
            #expect(status.st_ino == looked.st_ino && fcntl(fd, F_GETFL) & O_NONBLOCK == 0)
            close(fd)

            // The name now holds a FIFO or a link (a race, played): refused without opening it.
            for name in ["fifo", "link"] {
                let opened = EntryHandle.openRegular(directory, name, flags: O_RDONLY, display: name, expecting: looked)
                guard case .failure(.notRegular(.refused(_, let reason))) = opened else {
                    Issue.record("\(name): \(opened)")
                    continue
                }
                #expect(reason.contains(name), "\(reason)")
                // Without an earlier look, the type alone refuses it.
                let plain = EntryHandle.openRegular(directory, name, flags: O_RDONLY, display: name)
                guard case .failure(.notRegular(.refused(_, let reason))) = plain else {
                    Issue.record("\(name): \(plain)")
                    continue
                }
                #expect(reason.contains("not a regular file"), "\(reason)")
            }
            let missing = EntryHandle.openRegular(directory, "missing", flags: O_RDONLY, display: "missing")
            guard case .failure(.missing) = missing else {
                Issue.record("missing: \(missing)")
                return
            }

            // A link held is the link: its mode is never changed, and neither is what it names.
            let link = try EntryHandle.open(directory, "link", display: "link").get()
            #expect(throws: SluiceError.self) { try link.changeMode(0o600) }
            #expect(FileInfo(root + "/outside")?.mode == 0o644)
            // Held expecting the file looked at, the link is refused.
            #expect(throws: SluiceError.self) {
                try EntryHandle.open(directory, "link", display: "link", expecting: looked).get()
            }
        }
    }
}
