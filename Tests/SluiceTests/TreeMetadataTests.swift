import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// Everything a file is besides its bytes: symbolic links, hard links, holes, extended
/// attributes, owners — sent by a real sender to a real receiver over loopback, and played
/// wrong by a raw client.
@Suite("Links, holes, extended attributes and owners", .ownThreads)
struct TreeMetadataTests {
    /// A sparse file of `size` bytes with `blocks` runs of 64 KiB of random data at the offsets
    /// given (the rest holes, the end included when the last run is not at the end).
    static func makeSparse(_ path: String, size: Int, at offsets: [Int]) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        #expect(fd >= 0)
        defer { close(fd) }
        #expect(ftruncate(fd, off_t(size)) == 0)
        for (index, offset) in offsets.enumerated() {
            let bytes = randomBytes(64 << 10, seed: UInt64(index + 7))
            let written = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) }
            #expect(written == bytes.count)
        }
    }

    static func allocated(_ path: String) -> Int {
        var st = stat()
        guard stat(path, &st) == 0 else { return -1 }
        return Int(st.st_blocks) * 512
    }

    static func inode(_ path: String) -> UInt64 {
        var st = stat()
        guard lstat(path, &st) == 0 else { return 0 }
        return UInt64(st.st_ino)
    }

    static func linkTarget(_ path: String) -> String? {
        try? FileManager.default.destinationOfSymbolicLink(atPath: path)
    }

    static func xattr(_ path: String, _ name: String) -> [UInt8]? {
        SourceMetadata.xattrs(path, warn: { _ in }).first { $0.name == name }?.value
    }

    static func setXattr(_ path: String, _ name: String, _ value: String) -> Bool {
        SourceMetadata.setXattr(path, name, Array(value.utf8))
    }

    /// A tree with every kind: a file with an attribute and a second name, symbolic links
    /// (relative, absolute, dangling, pointing out), an empty directory, a sparse file, a dated
    /// directory with an attribute.
    static func makeTree(_ src: String) throws -> (xattrs: Bool, sparse: Bool) {
        let fm = FileManager.default
        try fm.createDirectory(atPath: src + "/sub/empty", withIntermediateDirectories: true)
        try writeFile(src + "/a.txt", Array("hello\n".utf8), mtime: (1_600_000_000, 123))
        #expect(Glibc.link(src + "/a.txt", src + "/sub/second-name") == 0)
        #expect(symlink("a.txt", src + "/rel-link") == 0)
        #expect(symlink("/etc/hostname", src + "/abs-link") == 0)
        #expect(symlink("nowhere/at/all", src + "/dangling") == 0)
        #expect(symlink("../../outside", src + "/sub/out") == 0)
        try makeSparse(src + "/disk.img", size: 32 << 20, at: [0, 8 << 20])
        let xattrs = setXattr(src + "/a.txt", "user.color", "blue") && setXattr(src + "/sub", "user.kind", "dir")
        var times = [timespec(tv_sec: 1_500_000_000, tv_nsec: 0), timespec(tv_sec: 1_500_000_000, tv_nsec: 0)]
        utimensat(AT_FDCWD, src + "/sub", &times, 0)
        return (xattrs, allocated(src + "/disk.img") < 1 << 20)
    }

    /// Sends `path` to the harness's receiver, keeping the sender's warnings (the walk's too).
    static func send(_ path: String, _ options: TransferSendOptions, to harness: TransferHarness) throws -> (
        TransferSummary, [String]
    ) {
        var warnings: [String] = []
        let sender = try TransferSender(sources: [.path(path)], options: options) { warnings.append($0) }
        sender.onWarning = { warnings.append($0) }
        let (input, output) = Socket.connect(host: "127.0.0.1", port: harness.port)
        let box = SummaryBox()
        let sessions = harness.reports.count
        sender.start(input: input, output: output, on: harness.loop) { box.summary = $0 }
        runLoop(harness.loop, for: .seconds(20)) { box.summary != nil && harness.reports.count > sessions }
        return (try #require(box.summary), warnings)
    }

    @Test("Links, hard links, holes, attributes and empty directories arrive as they are, holes unsent")
    func everythingAFileIs() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let (xattrs, sparse) = try Self.makeTree(src)
            let harness = try TransferHarness(directory: dst)
            var options = TransferSendOptions()
            options.hardLinks = true
            options.xattrs = true
            let summary = try harness.send(paths: [src], options: options)
            #expect(summary.succeeded, "\(summary.results.filter { !$0.outcome.isStored })")
            let out = dst + "/tree"
            #expect(treeDifferences(src, out) == [])
            #expect(Self.linkTarget(out + "/rel-link") == "a.txt")
            #expect(Self.linkTarget(out + "/abs-link") == "/etc/hostname")
            #expect(Self.linkTarget(out + "/dangling") == "nowhere/at/all")
            #expect(Self.linkTarget(out + "/sub/out") == "../../outside")
            #expect(Self.inode(out + "/a.txt") == Self.inode(out + "/sub/second-name"))
            #expect(summary.links == 5)
            #expect(FileInfo(out + "/sub/empty")?.type == S_IFDIR)
            #expect(readFile(out + "/disk.img") == readFile(src + "/disk.img"))
            if sparse {
                #expect(summary.holeBytes >= 31 << 20)
                #expect(summary.bytesSent < 1 << 20, "holes are not sent: \(summary.bytesSent) bytes")
                #expect(Self.allocated(out + "/disk.img") < 2 << 20, "holes stay unallocated")
            }
            if xattrs {
                #expect(Self.xattr(out + "/a.txt", "user.color") == Array("blue".utf8))
                #expect(Self.xattr(out + "/sub", "user.kind") == Array("dir".utf8))
            }
            // A second name's file is one file: nothing is stored twice.
            #expect(harness.results(harness.reports.last).filter(\.isLink).count == 5)
        }
    }

    @Test("Over several connections: links, holes and second names travel with their files")
    func overSeveralConnections() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let (_, sparse) = try Self.makeTree(src)
            try writeFile(src + "/big.bin", randomBytes(3 << 20, seed: 5))
            let harness = try TransferHarness(directory: dst)
            var options = TransferSendOptions()
            options.hardLinks = true
            let summary = try harness.send(src, streams: 3, options: options)
            #expect(summary.succeeded, "\(summary.results.filter { !$0.outcome.isStored })")
            #expect(treeDifferences(src, dst + "/tree") == [])
            #expect(Self.inode(dst + "/tree/a.txt") == Self.inode(dst + "/tree/sub/second-name"))
            if sparse { #expect(Self.allocated(dst + "/tree/disk.img") < 2 << 20) }
        }
    }

    @Test("Owners: kept by a receiver running as root, by name or by number; else the sender is told")
    func owners() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
            try writeFile(src + "/named", [1])
            try writeFile(src + "/numbered", [2])
            let isRoot = geteuid() == 0
            if isRoot {
                #expect(chown(src + "/named", 65534, 65534) == 0)  // nobody (a name on Debian)
                #expect(chown(src + "/numbered", 54321, 54322) == 0)  // no name
            }
            for (keeps, numeric) in [(true, false), (true, true), (false, false)] {
                let dst = root + "/dst-\(keeps)-\(numeric)"
                try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
                var receiving = TransferReceiveOptions(idleTimeout: .seconds(20))
                receiving.keepsOwners = keeps
                let harness = try TransferHarness(directory: dst, options: receiving)
                var options = TransferSendOptions()
                options.owners = true
                options.numericIDs = numeric
                let (summary, warnings) = try Self.send(src, options, to: harness)
                #expect(summary.succeeded)
                var st = stat()
                if isRoot && keeps {
                    #expect(stat(dst + "/tree/named", &st) == 0 && st.st_uid == 65534 && st.st_gid == 65534)
                    #expect(stat(dst + "/tree/numbered", &st) == 0 && st.st_uid == 54321 && st.st_gid == 54322)
                    #expect(warnings.isEmpty, "\(warnings)")
                } else {
                    #expect(stat(dst + "/tree/named", &st) == 0 && st.st_uid == geteuid())
                    #expect(warnings.contains { $0.contains("does not keep owners") }, "\(warnings)")
                }
            }
        }
    }

    @Test("A receiver without links, holes or attributes: links refused with a reason, second names copied")
    func olderReceiver() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let (_, _) = try Self.makeTree(src)
            var receiving = TransferReceiveOptions(idleTimeout: .seconds(20))
            receiving.offersMetadata = false
            let harness = try TransferHarness(directory: dst, options: receiving)
            var options = TransferSendOptions()
            options.hardLinks = true
            options.xattrs = true
            let (summary, warnings) = try Self.send(src, options, to: harness)
            #expect(summary.error == nil)
            let refused = summary.results.filter { !$0.outcome.isStored }
            #expect(refused.count == 4, "the four symbolic links: \(refused)")
            #expect(refused.allSatisfy { $0.outcome.description.contains("does not take links") })
            #expect(readFile(dst + "/tree/sub/second-name") == Array("hello\n".utf8))
            #expect(Self.inode(dst + "/tree/a.txt") != Self.inode(dst + "/tree/sub/second-name"))
            #expect(readFile(dst + "/tree/disk.img") == readFile(src + "/disk.img"))
            #expect(warnings.contains { $0.contains("extended attributes") }, "\(warnings)")
            #expect(warnings.contains { $0.contains("symbolic links") }, "\(warnings)")
            #expect(!fileExists(dst + "/tree/rel-link"))
        }
    }

    // MARK: A peer that lies

    /// Sends `payload` from a raw client and returns the receiver's messages.
    static func exchange(_ harness: TransferHarness, _ payload: [UInt8]) throws -> [(UInt8, [UInt8])] {
        let sessionsBefore = harness.reports.count
        let client = SocketExchange(Socket.connect(host: "127.0.0.1", port: harness.port), payload: payload)
        client.start(on: harness.loop)
        runLoop(harness.loop, for: .seconds(10)) { client.done && harness.reports.count > sessionsBefore }
        #expect(client.done)
        return RawWire.messages(client.received)
    }

    static let hello = RawWire.hello(["sha256", "resume", "links", "holes", "xattrs", "owners"])

    static func link(_ path: String, _ target: String, kind: Wire.LinkKind = .symbolic) -> [UInt8] {
        MessageWriter.link(
            LinkHeader(
                kind: kind, mtimeSeconds: 0, mtimeNanoseconds: 0, path: Array(path.utf8), target: Array(target.utf8)))
    }

    static func xattr(_ name: String, _ value: [UInt8]) -> [UInt8] {
        MessageWriter.xattr(ExtendedAttribute(name: name, value: value))
    }

    @Test("A link out of the directory and a file through it, a hard link to a file not sent: refused, nothing outside")
    func linksThatLie() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            let outside = root + "/outside"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
            try writeFile(dst + "/theirs", Array("not the sender's".utf8))
            // Without fsync a file larger than a small one is answered as soon as it is stored.
            let harness = try TransferHarness(
                directory: dst, options: TransferReceiveOptions(fsync: false, idleTimeout: .seconds(20)))
            let content = Array("x".utf8)
            let eager = Wire.FileFlags.sizeKnown | Wire.FileFlags.eager
            let large = randomBytes(70_000, seed: 3)
            var payload = Self.hello
            payload += Self.link("escape", "../outside")
            payload +=
                RawWire.file("escape/planted", size: 1, flags: eager) + RawWire.data(content) + RawWire.end(content)
            payload += Self.link("escape/deeper", "x")
            payload += Self.link("stolen", "theirs", kind: .hard)
            payload += Self.link("stolen2", "/etc/passwd", kind: .hard)
            payload += Self.link("stolen3", "../outside/x", kind: .hard)
            // Flagged linked, stored, then linked to: the one hard link allowed.
            payload +=
                RawWire.file("mine", size: UInt64(large.count), flags: eager | Wire.FileFlags.linked)
                + RawWire.data(large) + RawWire.end(large)
            payload += Self.link("mine2", "mine", kind: .hard)
            payload += RawWire.bye
            let replies = try Self.exchange(harness, payload)
            let answers = replies.map(\.0).filter { $0 != Wire.MessageType.hello.rawValue }
            let (stored, refused) = (Wire.MessageType.stored.rawValue, Wire.MessageType.refused.rawValue)
            // The link itself is a name like any other; what goes through it is refused.
            #expect(
                answers == [
                    stored, refused, refused, refused, refused, refused, stored, stored, Wire.MessageType.bye.rawValue,
                ],
                "\(replies.map { ($0.0, PeerText.sanitized($0.1)) })")
            #expect(treePaths(outside) == [])
            #expect(Self.linkTarget(dst + "/escape") == "../outside")
            #expect(Self.inode(dst + "/mine") == Self.inode(dst + "/mine2"))
            #expect(readFile(dst + "/theirs") == Array("not the sender's".utf8))
            #expect(!fileExists(dst + "/stolen") && !fileExists(dst + "/stolen2") && !fileExists(dst + "/stolen3"))
        }
    }

    @Test("Holes past the size or in a file not flagged sparse, foreign or oversized attributes, an owner not offered")
    func metadataThatLies() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            var receiving = TransferReceiveOptions(idleTimeout: .seconds(20))
            receiving.keepsOwners = false
            let harness = try TransferHarness(directory: dst, options: receiving)
            let sparse = Wire.FileFlags.sizeKnown | Wire.FileFlags.sparse
            let hole = { (length: UInt64) in MessageWriter.message(.hole) { $0.u64(length) } }

            // A hole past the announced size: the file fails, the session goes on.
            var payload = Self.hello + RawWire.file("past", size: 10, flags: sparse) + hole(11)
            payload += RawWire.end([UInt8](repeating: 0, count: 11)) + RawWire.bye
            var replies = try Self.exchange(harness, payload)
            #expect(replies.contains { $0.0 == Wire.MessageType.failed.rawValue })
            #expect(replies.last?.0 == Wire.MessageType.bye.rawValue)
            #expect(!fileExists(dst + "/past"))

            // A sparse file stored: data, a hole, data, a hole to the end.
            var content = [UInt8](repeating: 0, count: 300_000)
            content[0] = 1
            content[200_000] = 2
            payload = Self.hello + RawWire.file("ok.img", size: UInt64(content.count), flags: sparse)
            payload += RawWire.data([1]) + hole(199_999) + RawWire.data([2]) + hole(99_999)
            // Its digest is of its data and its holes as sent (each HOLE as its message).
            let hashed = [1] + Wire.holeDigestInput(199_999) + [2] + Wire.holeDigestInput(99_999)
            payload += MessageWriter.end(size: UInt64(content.count), digest: SHA256Digest.hash(hashed))
            payload += RawWire.bye
            replies = try Self.exchange(harness, payload)
            #expect(replies.map(\.0).contains(Wire.MessageType.stored.rawValue), "\(replies.map(\.0))")
            #expect(readFile(dst + "/ok.img") == content)

            let violations: [(String, [UInt8])] = [
                ("HOLE in a file not flagged sparse", RawWire.file("plain", size: 10) + hole(5)),
                ("sparse and compressed", RawWire.file("z", size: 10, flags: sparse | Wire.FileFlags.compressed)),
                ("trusted.*", Self.xattr("trusted.evil", [1]) + RawWire.file("t", size: 0)),
                ("the receiver's own", Self.xattr("user.sluice.resume", [1]) + RawWire.file("t", size: 0)),
                ("over the limit", [Wire.MessageType.xattr.rawValue, 0x40, 0x00, 0x00, 0x00]),
                ("not offered", MessageWriter.owner(EntryOwner(uid: 0, gid: 0, user: "root", group: "root"))),
                ("XATTR before a LINK", Self.xattr("user.a", [1]) + Self.link("l", "t")),
                ("not followed by an entry", Self.xattr("user.a", [1]) + RawWire.bye),
                (
                    "too many", (0...Wire.maxXattrsPerEntry).flatMap { Self.xattr("user.a\($0)", [1]) }
                ),
            ]
            for (what, messages) in violations {
                let replies = try Self.exchange(harness, Self.hello + messages + RawWire.bye)
                #expect(replies.last?.0 == Wire.MessageType.error.rawValue, "\(what): \(replies.map(\.0))")
                #expect(harness.reports.last?.error?.code == .protocolViolation, "\(what)")
            }
            #expect(treePaths(dst) == ["ok.img"])
            // The receiver still serves.
            try writeFile(root + "/fine.txt", Array("still here".utf8))
            #expect(try harness.send(paths: [root + "/fine.txt"]).succeeded)
        }
    }

    @Test("Past the session's limit of directories, the session ends with one violation")
    func tooManyDirectories() {
        var machine = receiverAfterHello(.init(maxDirectories: 3))
        for index in 0..<3 {
            let header = EntryHeader(mode: 0o755, mtimeSeconds: 0, mtimeNanoseconds: 0, path: Array("d\(index)".utf8))
            #expect(
                machine.received(.frame(.directory(header))).first.map {
                    if case .makeDirectory = $0 { true } else { false }
                } == true)
            _ = machine.handle(.directoryMade(nil))
        }
        let fourth = EntryHeader(mode: 0o755, mtimeSeconds: 0, mtimeNanoseconds: 0, path: Array("d3".utf8))
        #expect(
            machine.received(.frame(.directory(fourth))).last
                == .end(.violation("more than 3 directories in one session")))
    }

    // MARK: The sender's machine

    static let linkEntries: [SenderMachine.Entry] = [
        .init(
            relative: "f", isDirectory: false, seekable: true, mode: 0o644, mtimeSeconds: 1, mtimeNanoseconds: 0,
            linked: true,
            attributes: EntryAttributes(xattrs: [ExtendedAttribute(name: "user.a", value: [1])])),
        .init(
            relative: "s", isDirectory: false, seekable: false, mode: 0o777, mtimeSeconds: 1, mtimeNanoseconds: 0,
            symlinkTarget: Array("f".utf8)),
        .init(
            relative: "g", isDirectory: false, seekable: true, mode: 0o644, mtimeSeconds: 1, mtimeNanoseconds: 0,
            hardLinkTo: 0),
    ]

    func senderAfterHello(_ capabilities: Set<String>) -> SenderMachine {
        var machine = SenderMachine(entries: Self.linkEntries, settings: .init(eager: false))
        _ = machine.start()
        _ = machine.received(.magic)
        _ = machine.received(.frame(.hello(version: 1, capabilities: capabilities.union(["sha256"]))))
        return machine
    }

    @Test("XATTR goes before its FILE; a hard link waits for its file's STORED and then goes as LINK")
    func senderOrdersLinks() {
        var machine = senderAfterHello([Wire.Capability.links, Wire.Capability.xattrs])
        #expect(machine.proceed() == [.openEntry(0)])
        let opened = machine.handle(
            .entryOpened(0, .success(OpenedEntry(size: 1, mode: 0o644, mtimeSeconds: 1, mtimeNanoseconds: 0))))
        #expect(opened.first == .send(.xattr(ExtendedAttribute(name: "user.a", value: [1]))))
        guard case .send(.file(let header))? = opened.last else {
            Issue.record("no FILE: \(opened)")
            return
        }
        #expect(header.linked)
        _ = machine.received(.frame(.accept(offset: 0)))
        _ = machine.handle(.dataEnded(size: 1, digest: [UInt8](repeating: 0, count: 32)))
        // The symbolic link goes at once; the hard link waits for its file's answer.
        let symlink = machine.proceed()
        #expect(symlink.contains { if case .send(.link(let link)) = $0 { link.kind == .symbolic } else { false } })
        #expect(!machine.canProceed)
        _ = machine.received(.frame(.stored))
        #expect(machine.canProceed)
        let hard = machine.proceed()
        #expect(
            hard == [
                .send(
                    .link(
                        LinkHeader(
                            kind: .hard, mtimeSeconds: 1, mtimeNanoseconds: 0, path: Array("g".utf8),
                            target: Array("f".utf8))))
            ])
    }

    @Test("A hard link whose file was refused fails here; to a receiver without links it is sent as a file")
    func senderHardLinkFallbacks() {
        var machine = senderAfterHello([Wire.Capability.links])
        _ = machine.proceed()
        _ = machine.handle(
            .entryOpened(0, .success(OpenedEntry(size: 1, mode: 0o644, mtimeSeconds: 1, mtimeNanoseconds: 0))))
        _ = machine.received(.frame(.refused(code: .exists, reason: "exists")))
        _ = machine.proceed()  // the symbolic link
        let hard = machine.proceed()
        #expect(hard.contains { if case .settle(2, .failed) = $0 { true } else { false } }, "\(hard)")

        var old = senderAfterHello([])
        _ = old.proceed()
        let file = old.handle(
            .entryOpened(0, .success(OpenedEntry(size: 1, mode: 0o644, mtimeSeconds: 1, mtimeNanoseconds: 0))))
        #expect(file.count == 1, "no XATTR to a receiver that does not take them: \(file)")
        _ = old.received(.frame(.refused(code: .exists, reason: "exists")))
        #expect(old.proceed() == [.settle(1, .refused(reason: "a symbolic link: the receiver does not take links"))])
        #expect(old.proceed() == [.openEntry(2)], "the second name goes as a file of its own")
    }
}
