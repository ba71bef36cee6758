import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// `send --sync -X` and `--owner` (`sync-attributes`): XATTR and OWNER go before a CHECK too, and
/// the receiver brings an entry otherwise the same up to date without its data.
@Suite("Sync: extended attributes and owners set without data", .ownThreads)
struct SyncAttributesTests {
    // MARK: The machines

    static let attributes = EntryAttributes(
        xattrs: [ExtendedAttribute(name: "user.a", value: [1])], owner: EntryOwner(uid: 1, gid: 2, user: "", group: ""),
        xattrsRead: true)

    static let entries: [SenderMachine.Entry] = [
        .init(
            relative: "f", isDirectory: false, seekable: true, mode: 0o644, mtimeSeconds: 1, mtimeNanoseconds: 0,
            attributes: attributes, listedSize: 5),
        .init(
            relative: "s", isDirectory: false, seekable: false, mode: 0o777, mtimeSeconds: 1, mtimeNanoseconds: 0,
            symlinkTarget: Array("f".utf8), attributes: attributes),
    ]

    static func sender(_ capabilities: Set<String>, dryRun: Bool = false) -> SenderMachine {
        var machine = SenderMachine(entries: entries, settings: .init(eager: false, sync: true, dryRun: dryRun))
        _ = machine.start()
        _ = machine.received(.magic)
        _ = machine.received(.frame(.hello(version: 1, capabilities: capabilities.union(["sha256", "sync"]))))
        return machine
    }

    static let all: Set<String> = [Wire.Capability.xattrs, Wire.Capability.owners, Wire.Capability.syncAttributes]

    static func check(_ path: String, kind: Wire.CheckKind = .file, flags: UInt8 = Wire.CheckFlags.apply)
        -> CheckHeader
    {
        CheckHeader(
            kind: kind, flags: flags, size: 5, mode: 0o644, mtimeSeconds: 1, mtimeNanoseconds: 0,
            path: Array(path.utf8), target: kind == .symbolicLink ? Array("f".utf8) : [])
    }

    @Test("XATTR and OWNER go before a CHECK only where the receiver agreed sync-attributes; a link's without XATTR")
    func senderSendsAttributesBeforeCheck() {
        var machine = Self.sender(Self.all)
        #expect(machine.capabilities.contains(Wire.Capability.syncAttributes))
        let xattr = SenderAction.send(.xattr(ExtendedAttribute(name: "user.a", value: [1])))
        let owner = SenderAction.send(.owner(EntryOwner(uid: 1, gid: 2, user: "", group: "")))
        #expect(
            machine.proceed() == [
                xattr, owner, .send(.check(Self.check("f", flags: Wire.CheckFlags.apply | Wire.CheckFlags.xattrs))),
            ])
        var link = Self.check("s", kind: .symbolicLink)
        link.size = 0
        link.mode = 0o777
        #expect(machine.proceed() == [owner, .send(.check(link))])

        // A dry run sends them too (the receiver says what would change), flagged not to apply.
        var dry = Self.sender(Self.all, dryRun: true)
        #expect(dry.proceed() == [xattr, owner, .send(.check(Self.check("f", flags: Wire.CheckFlags.xattrs)))])

        // Without sync-attributes, or without xattrs or owners: the CHECK alone, as before.
        var old = Self.sender([Wire.Capability.xattrs, Wire.Capability.owners])
        #expect(old.proceed() == [.send(.check(Self.check("f")))])
        var noOwners = Self.sender([Wire.Capability.xattrs, Wire.Capability.syncAttributes])
        #expect(
            noOwners.proceed() == [
                xattr, .send(.check(Self.check("f", flags: Wire.CheckFlags.apply | Wire.CheckFlags.xattrs))),
            ])
        var off = SenderMachine(
            entries: Self.entries, settings: .init(eager: false, sync: true, syncAttributes: false))
        #expect(!off.capabilities.contains(Wire.Capability.syncAttributes))
        _ = off.start()
        _ = off.received(.magic)
        _ = off.received(.frame(.hello(version: 1, capabilities: Self.all.union(["sha256", "sync"]))))
        #expect(off.proceed() == [.send(.check(Self.check("f")))])
    }

    @Test("A HAVE saying what was set is taken only where sync-attributes was agreed; the entry is not sent")
    func senderTakesAttributeBits() {
        let set = Wire.HaveDifference.xattrs | Wire.HaveDifference.owner | Wire.HaveDifference.group
        var machine = Self.sender(Self.all)
        _ = machine.proceed()
        _ = machine.proceed()
        #expect(machine.received(.frame(.have(HaveAnswer(status: .same, differences: set)))) == [])
        #expect(machine.proceed() == [.settle(0, .stored)])
        #expect(machine.haves[0] == HaveAnswer(status: .same, differences: set))
        #expect(
            TransferSender.change(machine.haves[0]) == .unchanged([.xattrs, .owner, .group]))

        var old = Self.sender([Wire.Capability.xattrs])
        _ = old.proceed()
        #expect(
            old.received(.frame(.have(HaveAnswer(status: .same, differences: Wire.HaveDifference.xattrs)))).last
                == .end(.violation("HAVE with differences 64 (sync-attributes not agreed)")))
    }

    static func receiver(
        peer: Set<String>, settings: ReceiverMachine.Settings = ReceiverMachine.Settings(owners: true)
    ) -> ReceiverMachine {
        var machine = ReceiverMachine(settings: settings)
        _ = machine.start()
        _ = machine.received(.magic)
        _ = machine.received(.frame(.hello(version: 1, capabilities: peer.union(["sha256"]))))
        return machine
    }

    static func isViolation(_ actions: [ReceiverAction], _ text: String) -> Bool {
        guard case .end(.violation(let reason))? = actions.last else { return false }
        return reason.contains(text)
    }

    @Test("The receiver takes XATTR and OWNER before a CHECK only with sync-attributes, within an entry's limits")
    func receiverTakesAttributesBeforeCheck() {
        let xattr = Frame.xattr(ExtendedAttribute(name: "user.a", value: [1]))
        let owner = Frame.owner(EntryOwner(uid: 1, gid: 2, user: "", group: ""))
        let flagged = Self.check("f", flags: Wire.CheckFlags.apply | Wire.CheckFlags.xattrs)

        var agreed = Self.receiver(peer: [Wire.Capability.syncAttributes])
        #expect(agreed.capabilities.contains(Wire.Capability.syncAttributes))
        #expect(agreed.received(.frame(xattr)) == [])
        #expect(agreed.received(.frame(owner)) == [])
        #expect(
            agreed.received(.frame(.check(flagged))) == [
                .checkEntry(
                    ["f"], flagged,
                    EntryAttributes(
                        xattrs: [ExtendedAttribute(name: "user.a", value: [1])],
                        owner: EntryOwner(uid: 1, gid: 2, user: "", group: ""), xattrBytes: 7))
            ])
        // Flagged with no XATTR: the entry is to have none.
        #expect(agreed.received(.frame(.check(flagged))) == [.checkEntry(["f"], flagged, EntryAttributes())])

        // Without the capability on either side: a violation, as before.
        for var machine in [
            Self.receiver(peer: []),
            Self.receiver(
                peer: [Wire.Capability.syncAttributes],
                settings: ReceiverMachine.Settings(owners: true, syncAttributes: false)),
        ] {
            #expect(!machine.syncsAttributes)
            _ = machine.received(.frame(xattr))
            #expect(Self.isViolation(machine.received(.frame(.check(flagged))), "XATTR, OWNER or TOKEN before a CHECK"))
        }
        var unflaggedOld = Self.receiver(peer: [])
        #expect(Self.isViolation(unflaggedOld.received(.frame(.check(flagged))), "sync-attributes not agreed"))

        // XATTR before a CHECK not flagged, before a link's, a TOKEN, too many.
        var unflagged = Self.receiver(peer: [Wire.Capability.syncAttributes])
        _ = unflagged.received(.frame(xattr))
        #expect(Self.isViolation(unflagged.received(.frame(.check(Self.check("f")))), "not flagged xattrs"))
        var link = Self.receiver(peer: [Wire.Capability.syncAttributes])
        #expect(
            Self.isViolation(
                link.received(.frame(.check(Self.check("s", kind: .symbolicLink, flags: Wire.CheckFlags.xattrs)))),
                "CHECK of a link flagged xattrs"))
        var noXattrs = Self.receiver(
            peer: [Wire.Capability.syncAttributes], settings: ReceiverMachine.Settings(xattrs: false, owners: true))
        #expect(
            Self.isViolation(noXattrs.received(.frame(.check(flagged))), "does not take extended attributes"))
        var token = Self.receiver(peer: [Wire.Capability.syncAttributes])
        _ = token.received(.frame(.token([UInt8](repeating: 1, count: Wire.resumeTokenBytes))))
        #expect(Self.isViolation(token.received(.frame(.check(flagged))), "TOKEN before a CHECK"))
        var many = Self.receiver(peer: [Wire.Capability.syncAttributes])
        var last: [ReceiverAction] = []
        for index in 0...Wire.maxXattrsPerEntry where !many.hasEnded {
            last = many.received(.frame(.xattr(ExtendedAttribute(name: "user.a\(index)", value: [1]))))
        }
        #expect(Self.isViolation(last, "more than \(Wire.maxXattrsPerEntry) extended attributes"))

        // An OWNER to a receiver that keeps none (not root): a violation, as before.
        var notRoot = Self.receiver(peer: [Wire.Capability.syncAttributes], settings: ReceiverMachine.Settings())
        #expect(Self.isViolation(notRoot.received(.frame(owner)), "does not keep owners"))
    }

    @Test("HAVE: a third byte only with a bit set, and no bit past group")
    func haveCodec() {
        func decode(_ payload: [UInt8]) -> Frame? {
            var decoder = FrameDecoder(direction: .toSender)
            let bytes = Wire.magic + [Wire.MessageType.have.rawValue, 0, 0, 0, UInt8(payload.count)] + payload
            return bytes.withUnsafeBytes { raw -> Frame? in
                guard case .item(_, let consumed) = decoder.next(raw),
                    case .item(.frame(let frame), _) = decoder.next(UnsafeRawBufferPointer(rebasing: raw[consumed...]))
                else { return nil }
                return frame
            }
        }
        let same = Wire.HaveStatus.same.rawValue
        #expect(decode([same, 64]) == .have(HaveAnswer(status: .same, differences: 64)))
        #expect(decode([same, 0xC0, 1]) == .have(HaveAnswer(status: .same, differences: 0x1C0)))
        #expect(decode([same, 0, 0]) == nil)
        #expect(decode([same, 0, 2]) == nil)
        let answer = HaveAnswer(status: .same, differences: Wire.HaveDifference.group | Wire.HaveDifference.mode)
        #expect(Frame.have(answer).encoded == [Wire.MessageType.have.rawValue, 0, 0, 0, 3, same, 4, 1])
        #expect(Frame.have(HaveAnswer(status: .same, differences: 64)).encoded.count == Wire.frameHeaderSize + 2)
    }

    // MARK: Real transfers

    /// Whether the temporary directory's file system keeps `user.*` attributes.
    static let xattrsKept: Bool =
        (try? withTemporaryDirectory { dir in
            _ = FileManager.default.createFile(atPath: dir + "/probe", contents: Data())
            return SourceMetadata.setXattr(dir + "/probe", "user.probe", [1])
        }) ?? false

    static func xattrs(_ path: String) -> [String: [UInt8]] {
        Dictionary(
            SourceMetadata.xattrs(path, warn: { _ in }).map { ($0.name, $0.value) }, uniquingKeysWith: { a, _ in a })
    }

    static func syncing(xattrs: Bool = true, owners: Bool = false, dryRun: Bool = false) -> TransferSendOptions {
        var options = TransferSendOptions()
        options.sync = true
        options.xattrs = xattrs
        options.owners = owners
        options.numericIDs = true
        options.dryRun = dryRun
        return options
    }

    @Test(
        "An attribute changed, added or removed on an unchanged file or directory: set without data; a dry run sets none",
        .enabled(if: xattrsKept, "the temporary directory's file system keeps no user.* attributes"))
    func attributesSetWithoutData() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src + "/sub", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            for name in ["changed", "added", "removed", "plain"] {
                try writeFile(src + "/" + name, randomBytes(4000, seed: UInt64(name.utf8.count)))
            }
            #expect(SourceMetadata.setXattr(src + "/changed", "user.color", Array("blue".utf8)))
            #expect(SourceMetadata.setXattr(src + "/removed", "user.old", [1, 2]))
            #expect(SourceMetadata.setXattr(src + "/removed", "user.keep", [3]))
            #expect(SourceMetadata.setXattr(src + "/plain", "user.same", [4]))
            let harness = try TransferHarness(directory: dst)
            let first = try harness.send(paths: [src], options: Self.syncing())
            #expect(first.succeeded, "\(first.results.filter { !$0.outcome.isStored })")
            #expect(Self.xattrs(dst + "/tree/removed") == ["user.old": [1, 2], "user.keep": [3]])
            // The receiver's own marks are neither compared nor removed.
            #expect(SourceMetadata.setXattr(dst + "/tree/plain", "user.sluice.mine", [9]))

            // Data and mtime untouched: only the attributes change.
            let before = FileInfo(src + "/changed")
            #expect(SourceMetadata.setXattr(src + "/changed", "user.color", Array("green".utf8)))
            #expect(SourceMetadata.setXattr(src + "/added", "user.new", Array("yes".utf8)))
            #expect(SourceMetadata.removeXattr(src + "/removed", "user.old"))
            #expect(SourceMetadata.setXattr(src + "/sub", "user.kind", Array("dir".utf8)))
            #expect(FileInfo(src + "/changed") == before)

            let dry = try harness.send(paths: [src], options: Self.syncing(dryRun: true))
            #expect(dry.error == nil && dry.bytes == 0)
            let planned = SyncTests.changes(dry)
            for name in ["changed", "added", "removed"] {
                #expect(planned["tree/" + name] == .unchanged(.xattrs), "\(name): \(planned)")
            }
            #expect(planned["tree/sub"] == .unchanged(.xattrs))
            #expect(planned["tree/plain"] == .unchanged([]))
            #expect(Self.xattrs(dst + "/tree/changed") == ["user.color": Array("blue".utf8)])
            #expect(Self.xattrs(dst + "/tree/removed").count == 2)

            let second = try harness.send(paths: [src], options: Self.syncing())
            #expect(second.succeeded, "\(second.results.filter { !$0.outcome.isStored })")
            #expect(second.bytes == 0, "no data for attributes: \(second.bytes)")
            let changes = SyncTests.changes(second)
            for name in ["changed", "added", "removed"] {
                #expect(changes["tree/" + name] == .unchanged(.xattrs), "\(name): \(changes)")
            }
            #expect(changes["tree/sub"] == .unchanged(.xattrs))
            #expect(changes["tree/plain"] == .unchanged([]))
            for path in ["changed", "added", "removed", "plain", "sub"] {
                #expect(Self.xattrs(dst + "/tree/" + path) == Self.xattrs(src + "/" + path), "\(path)")
            }
            #expect(SourceMetadata.xattr(dst + "/tree/plain", "user.sluice.mine") == [9])
            #expect(treeDifferences(src, dst + "/tree") == [])

            // A third time: nothing to set.
            let third = try harness.send(paths: [src], options: Self.syncing())
            #expect(third.results.allSatisfy { $0.change == .unchanged([]) }, "\(SyncTests.changes(third))")

            // A file whose data changed too is sent, its attributes with it.
            try writeFile(src + "/changed", Array("other".utf8))
            #expect(SourceMetadata.setXattr(src + "/changed", "user.color", Array("red".utf8)))
            let fourth = try harness.send(paths: [src], options: Self.syncing())
            #expect(fourth.bytes == 5)
            #expect(SyncTests.changes(fourth)["tree/changed"] == .replaced([.size, .mtime, .xattrs]))
            #expect(Self.xattrs(dst + "/tree/changed") == ["user.color": Array("red".utf8)])
        }
    }

    @Test(
        "To a receiver without sync-attributes: the CHECK goes alone and the session ends well, the attributes unset",
        .enabled(if: xattrsKept, "the temporary directory's file system keeps no user.* attributes"))
    func olderReceiver() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try writeFile(src + "/f", [1, 2, 3])
            #expect(SourceMetadata.setXattr(src + "/f", "user.a", [1]))
            var receiving = TransferReceiveOptions(idleTimeout: .seconds(20))
            receiving.sync = true
            receiving.offersSyncAttributes = false
            let harness = try TransferHarness(directory: dst, options: receiving)
            #expect(try harness.send(paths: [src], options: Self.syncing()).succeeded)
            #expect(SourceMetadata.setXattr(src + "/f", "user.a", [2]))
            let second = try harness.send(paths: [src], options: Self.syncing())
            #expect(second.succeeded && second.error == nil, "\(String(describing: second.error))")
            #expect(SyncTests.changes(second)["tree/f"] == .unchanged([]))
            #expect(harness.reports.allSatisfy { $0.error == nil })
            #expect(Self.xattrs(dst + "/tree/f") == ["user.a": [1]])
        }
    }

    @Test(
        "Owner and group changed on an unchanged file, directory and link: given without data (as root)",
        .enabled(if: getuid() == 0, "only root can give files away"))
    func ownersSetWithoutData() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src + "/sub", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try writeFile(src + "/f", randomBytes(3000, seed: 5))
            try writeFile(src + "/g", randomBytes(3000, seed: 6))
            chmod(src + "/g", 0o750)
            #expect(symlink("f", src + "/link") == 0)
            let harness = try TransferHarness(directory: dst)
            let first = try harness.send(paths: [src], options: Self.syncing(xattrs: false, owners: true))
            #expect(first.succeeded, "\(first.results.filter { !$0.outcome.isStored })")

            #expect(chown(src + "/f", 1, 1) == 0)
            #expect(chown(src + "/g", 0, 1) == 0)
            #expect(chown(src + "/sub", 1, 0) == 0)
            #expect(lchown(src + "/link", 1, 1) == 0)

            let dry = try harness.send(paths: [src], options: Self.syncing(xattrs: false, owners: true, dryRun: true))
            #expect(SyncTests.changes(dry)["tree/f"] == .unchanged([.owner, .group]))
            var st = stat()
            #expect(stat(dst + "/tree/f", &st) == 0 && st.st_uid == 0)

            let second = try harness.send(paths: [src], options: Self.syncing(xattrs: false, owners: true))
            #expect(second.succeeded, "\(second.results.filter { !$0.outcome.isStored })")
            #expect(second.bytes == 0)
            let changes = SyncTests.changes(second)
            #expect(changes["tree/f"] == .unchanged([.owner, .group]))
            #expect(changes["tree/g"] == .unchanged(.group))
            #expect(changes["tree/sub"] == .unchanged(.owner))
            #expect(changes["tree/link"] == .unchanged([.owner, .group]))
            #expect(stat(dst + "/tree/f", &st) == 0 && st.st_uid == 1 && st.st_gid == 1)
            #expect(stat(dst + "/tree/g", &st) == 0 && st.st_uid == 0 && st.st_gid == 1)
            #expect(st.st_mode & 0o7777 == 0o750)
            #expect(stat(dst + "/tree/sub", &st) == 0 && st.st_uid == 1 && st.st_gid == 0)
            #expect(lstat(dst + "/tree/link", &st) == 0 && st.st_uid == 1 && st.st_gid == 1)
            #expect(treeDifferences(src, dst + "/tree") == [])
        }
    }
}
