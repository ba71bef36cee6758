import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// A sender that holds the code is trusted with files, not with what the receiver has: by
/// default a receiver stores new entries only, replaces what differs only with `sync`
/// (`receive --sync`), removes only with `delete` (`receive --delete`), and replaces anything
/// only with `overwrite`. Played peers send the raw frames a sluice sender never would.
@Suite("A receiver replaces and removes only where it allows it", .ownThreads)
struct TrustedSenderPolicyTests {
    /// The default receiver, as `receive` with no option.
    static var plain: TransferReceiveOptions { TransferReceiveOptions(idleTimeout: .seconds(20)) }

    static func options(sync: Bool = false, delete: Bool = false, overwrite: Bool = false) -> TransferReceiveOptions {
        var options = TransferReceiveOptions(overwrite: overwrite, idleTimeout: .seconds(20))
        options.sync = sync
        options.delete = delete
        return options
    }

    /// A FILE flagged replace whose data follows at once (eager): refused at its header, its
    /// data is skipped.
    static let replace = Wire.FileFlags.sizeKnown | Wire.FileFlags.replace | Wire.FileFlags.eager

    static func check(_ path: String, kind: Wire.CheckKind = .directory) -> [UInt8] {
        MessageWriter.check(
            CheckHeader(kind: kind, mode: 0o755, mtimeSeconds: 0, mtimeNanoseconds: 0, path: Array(path.utf8)))
    }

    static func prune(_ path: String) -> [UInt8] { Frame.prune(path: Array(path.utf8), dryRun: false).encoded }

    static func link(_ path: String, to target: String, replace: Bool) -> [UInt8] {
        MessageWriter.link(
            LinkHeader(
                kind: .symbolic, mtimeSeconds: 0, mtimeNanoseconds: 0, path: Array(path.utf8),
                target: Array(target.utf8), replace: replace))
    }

    /// The answers (REFUSED, STORED, FAILED, GONE, BYE) in a reply, with their payloads as text.
    static func answers(_ client: SocketExchange) -> [(UInt8, String)] {
        let asides: [Wire.MessageType] = [.hello, .have, .accept]
        return RawWire.messages(client.received).filter { message in
            !asides.contains { $0.rawValue == message.0 }
        }.map { ($0.0, PeerText.sanitized($0.1)) }
    }

    @Test("The default receiver: FILE, LINK and SPECIAL flagged replace and PRUNE are refused, naming the option")
    func defaultStoresNewEntriesOnly() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst + "/d", withIntermediateDirectories: true)
            try writeFile(dst + "/f", [9, 9, 9])
            try writeFile(dst + "/d/keep", [7])
            #expect(symlink("f", dst + "/l") == 0)
            let harness = try TransferHarness(directory: dst, options: Self.plain)
            let client = try harness.exchange(
                RawWire.hello(["sha256", "links", "specials", "delete"])
                    + RawWire.file("f", size: 3, flags: Self.replace) + RawWire.data([1, 2, 3])
                    + RawWire.end([1, 2, 3])
                    + Self.link("l", to: "elsewhere", replace: true)
                    + SpecialFilesTests.special("p", replace: true)
                    + RawWire.file("new", size: 2, flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.eager)
                    + RawWire.data([4, 5]) + RawWire.end([4, 5])
                    + Self.prune("d") + RawWire.bye)
            // Its HELLO offers neither sync nor delete.
            let hello = RawWire.messages(client.received).first { $0.0 == Wire.MessageType.hello.rawValue }
            let offered = String(decoding: hello?.1 ?? [], as: UTF8.self)
            #expect(!offered.isEmpty && !offered.contains("sync") && !offered.contains("delete"), "\(offered)")
            let answers = Self.answers(client)
            let refused = Wire.MessageType.refused.rawValue
            #expect(
                answers.map(\.0) == [
                    refused, refused, refused, Wire.MessageType.stored.rawValue, refused, Wire.MessageType.bye.rawValue,
                ], "\(answers)")
            guard answers.count == 6 else { return }
            for (index, answer) in answers.prefix(3).enumerated() {
                #expect(answer.1.contains("receive --sync"), "\(index): \(answer.1)")
            }
            #expect(answers[4].1.contains("receive --delete"), "\(answers[4].1)")
            #expect(harness.reports.last?.error == nil, "the session goes on to its goodbye")
            // Nothing here was replaced, made or removed; the new file was stored.
            #expect(readFile(dst + "/f") == [9, 9, 9])
            #expect(SourceMetadata.linkTarget(dst + "/l") == Array("f".utf8))
            #expect(!fileExists(dst + "/p"))
            #expect(readFile(dst + "/d/keep") == [7])
            #expect(readFile(dst + "/new") == [4, 5])
            // A CHECK (which may change what is here) is not for this receiver.
            _ = try harness.exchange(RawWire.hello(["sha256"]) + Self.check("d") + RawWire.bye)
            #expect(harness.reports.last?.error?.code == .protocolViolation)
        }
    }

    @Test("sync lets a sender replace, not remove; delete lets it remove; overwrite replaces without sync")
    func eachOptionAllowsItsOwn() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            func scene() throws {
                try? FileManager.default.removeItem(atPath: dst)
                try FileManager.default.createDirectory(atPath: dst + "/d", withIntermediateDirectories: true)
                try writeFile(dst + "/f", [9, 9, 9])
                try writeFile(dst + "/d/gone", [7])
            }
            let payload =
                RawWire.hello(["sha256", "sync", "delete"]) + Self.check("d")
                + RawWire.file("f", size: 3, flags: Self.replace) + RawWire.data([1, 2, 3]) + RawWire.end([1, 2, 3])
                + Self.prune("d") + RawWire.bye
            let stored = Wire.MessageType.stored.rawValue
            let refused = Wire.MessageType.refused.rawValue
            let gone = Wire.MessageType.gone.rawValue
            let bye = Wire.MessageType.bye.rawValue

            try scene()
            let syncing = try TransferHarness(directory: dst, options: Self.options(sync: true))
            let first = Self.answers(try syncing.exchange(payload))
            #expect(first.map(\.0) == [stored, refused, bye], "\(first)")
            #expect(first.count > 1 && first[1].1.contains("receive --delete"), "\(first)")
            #expect(readFile(dst + "/f") == [1, 2, 3])
            #expect(readFile(dst + "/d/gone") == [7])

            try scene()
            let deleting = try TransferHarness(directory: dst, options: Self.options(delete: true))
            let second = Self.answers(try deleting.exchange(payload))
            #expect(second.map(\.0).sorted() == [stored, stored, bye, gone].sorted(), "\(second)")
            #expect(readFile(dst + "/f") == [1, 2, 3])
            #expect(!fileExists(dst + "/d/gone"))

            try scene()
            let overwriting = try TransferHarness(directory: dst, options: Self.options(overwrite: true))
            let third = Self.answers(
                try overwriting.exchange(
                    RawWire.hello(["sha256"]) + RawWire.file("f", size: 3, flags: Self.replace)
                        + RawWire.data([1, 2, 3]) + RawWire.end([1, 2, 3]) + RawWire.bye))
            #expect(third.map(\.0) == [stored, bye], "\(third)")
            #expect(readFile(dst + "/f") == [1, 2, 3])
        }
    }

    @Test("A sluice sender's --sync and --delete to a receiver that allows neither: warned, refused, nothing lost")
    func senderToDefaultReceiver() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: dst + "/tree", withIntermediateDirectories: true)
            try writeFile(src + "/a", [1, 2, 3])
            try writeFile(src + "/b", [4])
            try writeFile(dst + "/tree/a", [9])
            try writeFile(dst + "/tree/extra", [8])
            let harness = try TransferHarness(directory: dst, options: Self.plain)
            var options = SyncTests.syncing()
            options.delete = true
            let (summary, warnings) = try TreeMetadataTests.send(src, options, to: harness)
            #expect(!summary.succeeded)
            #expect(warnings.contains { $0.contains("receive --sync") }, "\(warnings)")
            #expect(warnings.contains { $0.contains("receive --delete") }, "\(warnings)")
            let a = summary.results.first { $0.path == "tree/a" }
            #expect(a?.outcome == .refused(reason: "exists"), "\(String(describing: a))")
            #expect(summary.results.first { $0.path == "tree/b" }?.outcome == .stored)
            #expect(summary.pruneRefused && summary.pruneFailures.count == 1, "\(summary.pruneFailures)")
            #expect(readFile(dst + "/tree/a") == [9])
            #expect(readFile(dst + "/tree/extra") == [8])
            #expect(readFile(dst + "/tree/b") == [4])
        }
    }

    @Test("A sender that makes the receiver warn fifty times leaves five warnings and one that counts the rest")
    func warningsAreLimited() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            let count = 50
            for index in 0..<count {
                try FileManager.default.createDirectory(atPath: dst + "/d\(index)", withIntermediateDirectories: true)
            }
            let harness = try TransferHarness(directory: dst, options: Self.options(sync: true))
            let before = harness.reports.count
            // CHECKs of directories that are there, to be given their mode and mtime at goodbye;
            // once every HAVE is in, the directories go, so that each one's settling warns.
            let peer = try PlayedSender(port: harness.port) { peer in
                var checks = RawWire.hello(["sha256", "sync"])
                for index in 0..<count {
                    checks += MessageWriter.check(
                        CheckHeader(
                            kind: .directory, flags: Wire.CheckFlags.apply, mode: 0o700, mtimeSeconds: 7,
                            mtimeNanoseconds: 0, path: Array("d\(index)".utf8)))
                }
                peer.send(checks)
                var haves = 0
                while haves < count, let frame = peer.next() {
                    if case .have = frame { haves += 1 }
                }
                for index in 0..<count { rmdir(dst + "/d\(index)") }
                peer.send(RawWire.bye)
            }
            let ended = runLoop(harness.loop, for: .seconds(30)) { peer.done && harness.reports.count > before }
            #expect(ended)
            #expect(harness.reports.last?.error == nil)
            let warnings = harness.warnings
            #expect(warnings.count == SessionWarnings.shown + 1, "\(warnings)")
            #expect(warnings.last == "… and \(count - SessionWarnings.shown) more warnings in this session")
            #expect(warnings.dropLast().allSatisfy { $0.contains("cannot reopen") }, "\(warnings)")
        }
    }

    @Test("The session's first request is claimed once: its CHECKs and entries after it are one transfer")
    func checksAreOneRequest() {
        var settings = ReceiverMachine.Settings()
        settings.sync = true
        var machine = ReceiverMachine(settings: settings)
        _ = machine.start()
        _ = machine.received(.magic)
        _ = machine.received(.frame(.hello(version: 1, capabilities: ["sha256"])))
        #expect(machine.awaitsFirstRequest)
        let check = CheckHeader(kind: .directory, mode: 0o755, mtimeSeconds: 0, mtimeNanoseconds: 0, path: [0x64])
        _ = machine.received(.frame(.check(check)))
        #expect(!machine.awaitsFirstRequest, "a CHECK is the first request")
        _ = machine.received(.frame(.check(check)))
        #expect(!machine.awaitsFirstRequest, "and the second is not another")
    }

    @Test("Directories to settle are bounded, and so are a session's warnings")
    func boundedRecords() {
        var directories = DirectoriesToSettle()
        let mtime = timespec(tv_sec: 5, tv_nsec: 6)
        for index in 0..<(DirectoriesToSettle.maxCount + 10) {
            directories.append("d\(index)", mode: 0o755, mtime: mtime)
        }
        #expect(directories.count == DirectoriesToSettle.maxCount)
        #expect(directories.dropped == 10)
        var last: [(String, UInt32, Int, Int)] = []
        directories.forEachLastFirst { path, mode, time in
            if last.count < 2 { last.append((path, mode, time.tv_sec, time.tv_nsec)) }
        }
        #expect(last.map(\.0) == ["d\(DirectoriesToSettle.maxCount - 1)", "d\(DirectoriesToSettle.maxCount - 2)"])
        #expect(last.allSatisfy { $0.1 == 0o755 && $0.2 == 5 && $0.3 == 6 })
        var long = DirectoriesToSettle()
        let name = String(repeating: "x", count: 4000)
        while long.append(name, mode: 0o700, mtime: mtime) {}
        #expect(long.count == DirectoriesToSettle.maxPathBytes / 4000)

        var warnings = SessionWarnings()
        let told = (0..<1_000_000).filter { _ in warnings.admit() }.count
        #expect(told == SessionWarnings.shown)
        #expect(warnings.summary == "… and \(1_000_000 - SessionWarnings.shown) more warnings in this session")
    }

    @Test("A name that is not UTF-8 is shown bounded, and sanitizing it again changes nothing")
    func sanitizedNamesAreBounded() {
        let shown = PeerText.sanitized([UInt8](repeating: 0xFF, count: 4096))
        #expect(shown.utf8.count <= PeerText.maxShownBytes)
        #expect(shown.hasSuffix("…") && shown.hasPrefix("\\x{FF}\\x{FF}"))
        #expect(PeerText.sanitized(shown) == shown)
        let long = String(repeating: "a", count: 10_000)
        #expect(PeerText.sanitized(long).utf8.count == PeerText.maxShownBytes)
        let path = String(repeating: "b/", count: 2048)
        #expect(PeerText.sanitized(path) == path, "any path the protocol carries is shown whole")
    }
}
