import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// Devices, FIFOs and sockets (`-D`, `specials`): sent by a real sender to a real receiver over
/// loopback, made again as they were; an older receiver, one not running as root, and a raw
/// client that lies.
@Suite("Devices, FIFOs and sockets", .ownThreads)
struct SpecialFilesTests {
    /// The numbers of /dev/null (1, 3 on Linux).
    static let null = (major: UInt32(1), minor: UInt32(3))

    static func make(_ path: String, _ type: mode_t, mode: mode_t, device: UInt64 = 0, mtime: Int = 1_600_000_000)
        -> Bool
    {
        guard mknod(path, type | 0o600, dev_t(device)) == 0, chmod(path, mode) == 0 else { return false }
        var times = [timespec(tv_sec: mtime, tv_nsec: 0), timespec(tv_sec: mtime, tv_nsec: 0)]
        return utimensat(AT_FDCWD, path, &times, AT_SYMLINK_NOFOLLOW) == 0
    }

    /// A tree with a file, a FIFO, a socket and (as root) a character device like /dev/null.
    /// Returns whether the device could be made.
    static func makeTree(_ src: String) throws -> Bool {
        try FileManager.default.createDirectory(atPath: src + "/dev", withIntermediateDirectories: true)
        try writeFile(src + "/plain.txt", Array("plain\n".utf8), mtime: (1_600_000_000, 0))
        #expect(make(src + "/pipe", S_IFIFO, mode: 0o640))
        #expect(make(src + "/dev/sock", S_IFSOCK, mode: 0o600, mtime: 1_500_000_000))
        return make(
            src + "/dev/null", S_IFCHR, mode: 0o644, device: SpecialFiles.device(major: null.major, minor: null.minor))
    }

    static var withSpecials: TransferSendOptions {
        var options = TransferSendOptions()
        options.devices = true
        options.specials = true
        return options
    }

    /// A receiver that makes devices (`receive --devices --sync`), keeping the modes sent.
    static var makingDevices: TransferReceiveOptions {
        var options = TransferReceiveOptions(idleTimeout: .seconds(20), keepsModes: true)
        options.makesDevices = true
        options.sync = true
        return options
    }

    @Test("A FIFO, a socket and a device are made again as they were: type, mode, numbers, mtime")
    func madeAgain() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let device = try Self.makeTree(src)
            let harness = try TransferHarness(
                directory: dst, options: Self.makingDevices)
            let (summary, warnings) = try TreeMetadataTests.send(src, Self.withSpecials, to: harness)
            #expect(summary.succeeded, "\(summary.results.filter { !$0.outcome.isStored })")
            #expect(warnings.isEmpty, "\(warnings)")
            // Type, mode, mtime and a device's number, as `lstat` sees them.
            #expect(treeDifferences(src, dst + "/tree") == [])
            #expect(summary.specials == 2)
            #expect(summary.devices == (device ? 1 : 0))
            #expect(summary.results.first { $0.path == "tree/pipe" }?.isSpecial == true)
            #expect(harness.results(harness.reports.last).filter(\.isSpecial).count == 2)
            if device {
                let made = try #require(FileInfo(dst + "/tree/dev/null"))
                #expect(made.type == S_IFCHR)
                #expect(SpecialFiles.split(made.device) == Self.null)
            }

            // A second run with --sync finds them all the same.
            var options = Self.withSpecials
            options.sync = true
            let (again, _) = try TreeMetadataTests.send(src, options, to: harness)
            #expect(again.succeeded)
            let changes = again.results.map { ($0.path, $0.change) }
            #expect(again.results.allSatisfy { $0.change == .unchanged([]) }, "\(changes)")
            // A FIFO whose mode changed here is given the sender's, without being made.
            #expect(chmod(dst + "/tree/pipe", 0o600) == 0)
            let (third, _) = try TreeMetadataTests.send(src, options, to: harness)
            let pipe = third.results.first { $0.path == "tree/pipe" }
            #expect(pipe?.change == .unchanged(.mode), "\(String(describing: pipe))")
            #expect(FileInfo(dst + "/tree/pipe") == FileInfo(src + "/pipe"))
            // Something else at a special's name is replaced by it.
            #expect(unlink(dst + "/tree/dev/sock") == 0)
            try writeFile(dst + "/tree/dev/sock", [1])
            let (fourth, _) = try TreeMetadataTests.send(src, options, to: harness)
            let sock = fourth.results.first { $0.path == "tree/dev/sock" }
            #expect(sock?.outcome == .stored)
            if case .replaced(let differences)? = sock?.change {
                #expect(differences.contains(.kind))
            } else {
                Issue.record("replaced expected: \(String(describing: sock))")
            }
            #expect(FileInfo(dst + "/tree/dev/sock") == FileInfo(src + "/dev/sock"))
        }
    }

    @Test("Over several connections: specials travel on the first, made as they were")
    func overSeveralConnections() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            _ = try Self.makeTree(src)
            try writeFile(src + "/big.bin", randomBytes(3 << 20, seed: 5))
            let harness = try TransferHarness(
                directory: dst, options: Self.makingDevices)
            let summary = try harness.send(src, streams: 3, options: Self.withSpecials)
            #expect(summary.succeeded, "\(summary.results.filter { !$0.outcome.isStored })")
            #expect(summary.specials == 2)
            #expect(treeDifferences(src, dst + "/tree") == [])
        }
    }

    @Test("Without -D they are skipped with a warning; without the capability, refused and the rest sent")
    func notAskedAndOlderReceiver() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            _ = try Self.makeTree(src)
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let harness = try TransferHarness(directory: dst)
            let (plain, warnings) = try TreeMetadataTests.send(src, TransferSendOptions(), to: harness)
            #expect(plain.succeeded)
            #expect(warnings.filter { $0.contains("not a regular file or directory") }.count >= 2, "\(warnings)")
            #expect(FileInfo(dst + "/tree/pipe") == nil)

            let old = root + "/old"
            try FileManager.default.createDirectory(atPath: old, withIntermediateDirectories: true)
            var receiving = TransferReceiveOptions(idleTimeout: .seconds(20))
            receiving.offersMetadata = false
            let oldHarness = try TransferHarness(directory: old, options: receiving)
            let (summary, told) = try TreeMetadataTests.send(src, Self.withSpecials, to: oldHarness)
            #expect(summary.error == nil)
            #expect(told.contains { $0.contains("does not take devices, FIFOs or sockets") }, "\(told)")
            let refused = summary.results.filter { !$0.outcome.isStored }
            #expect(refused.allSatisfy { $0.isSpecial || $0.isDevice }, "\(refused)")
            #expect(refused.count >= 2)
            #expect(readFile(old + "/tree/plain.txt") == Array("plain\n".utf8))
            #expect(FileInfo(old + "/tree/pipe") == nil)
        }
    }

    @Test("A receiver not asked to make devices refuses a device, that entry alone; FIFOs and sockets are made")
    func notRoot() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let device = try Self.makeTree(src)
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let receiving = TransferReceiveOptions(idleTimeout: .seconds(20))  // no devices: the default
            let harness = try TransferHarness(directory: dst, options: receiving)
            let (summary, _) = try TreeMetadataTests.send(src, Self.withSpecials, to: harness)
            #expect(summary.error == nil)
            let refused = summary.results.filter { !$0.outcome.isStored }
            if device {
                #expect(refused.map(\.path) == ["tree/dev/null"])
                #expect(refused.first?.outcome.description.contains("makes no devices") == true)
            }
            #expect(FileInfo(dst + "/tree/pipe")?.type == S_IFIFO)
            #expect(FileInfo(dst + "/tree/dev/sock")?.type == S_IFSOCK)
            #expect(FileInfo(dst + "/tree/dev/null") == nil)
            #expect(readFile(dst + "/tree/plain.txt") == Array("plain\n".utf8))
        }

        // The machine's rule, whoever runs the test.
        var machine = ReceiverMachine(settings: .init())
        _ = machine.received(.magic)
        _ = machine.received(.frame(.hello(version: 1, capabilities: ["sha256"])))
        let header = SpecialHeader(
            mode: Wire.SpecialType.characterDevice.rawValue | 0o600, mtimeSeconds: 0, mtimeNanoseconds: 0,
            major: 1, minor: 3, path: Array("null".utf8))
        let actions = machine.received(.frame(.special(header)))
        guard case .send(.refused(_, let reason))? = actions.first else {
            Issue.record("refused expected: \(actions)")
            return
        }
        #expect(reason.contains("makes no devices"))
        #expect(machine.state == .idle)
        machine.settings.devices = true
        #expect(
            machine.received(.frame(.special(header))).contains { if case .makeSpecial = $0 { true } else { false } })
    }

    @Test("SPECIAL on the wire: round trip, and a file's or directory's type, flags or numbers refused as malformed")
    func codec() {
        let header = SpecialHeader(
            mode: Wire.SpecialType.blockDevice.rawValue | 0o660, mtimeSeconds: -5, mtimeNanoseconds: 7, major: 8,
            minor: 1, path: Array("a/sda1".utf8), replace: true)
        var decoder = FrameDecoder(direction: .toReceiver)
        let bytes = Wire.magic + Frame.special(header).encoded
        let step = bytes.withUnsafeBytes { raw -> FrameDecoder.Step in
            _ = decoder.next(raw)
            return decoder.next(UnsafeRawBufferPointer(rebasing: raw[Wire.magic.count...]))
        }
        #expect(step == .item(.frame(.special(header)), consumed: bytes.count - Wire.magic.count))
        let fifo = SpecialHeader(
            mode: Wire.SpecialType.fifo.rawValue | 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0, path: [0x61])
        var malformed = [
            SpecialHeader(mode: UInt32(S_IFREG) | 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0, path: [0x61]),
            SpecialHeader(mode: UInt32(S_IFDIR) | 0o755, mtimeSeconds: 0, mtimeNanoseconds: 0, path: [0x61]),
            SpecialHeader(mode: UInt32(S_IFLNK) | 0o777, mtimeSeconds: 0, mtimeNanoseconds: 0, path: [0x61]),
            SpecialHeader(mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0, path: [0x61]),
        ]
        var numbered = fifo
        numbered.major = 1
        malformed.append(numbered)
        for header in malformed {
            let payload = Array(Frame.special(header).encoded.dropFirst(Wire.frameHeaderSize))
            #expect(payload.withUnsafeBytes { FrameDecoder.decode(.special, $0) } == nil, "\(header)")
        }
        var flagged = Array(Frame.special(fifo).encoded.dropFirst(Wire.frameHeaderSize))
        flagged[0] = 1
        #expect(flagged.withUnsafeBytes { FrameDecoder.decode(.special, $0) } == nil)
        // A receiver never sends one.
        var toSender = FrameDecoder(direction: .toSender)
        let back = Wire.magic + Frame.special(fifo).encoded
        let refused = back.withUnsafeBytes { raw -> FrameDecoder.Step in
            _ = toSender.next(raw)
            return toSender.next(UnsafeRawBufferPointer(rebasing: raw[Wire.magic.count...]))
        }
        #expect(refused == .violation("SPECIAL is not a message this side accepts"))
    }

    // MARK: A peer that lies

    static let hello = RawWire.hello(["sha256", "resume", "links", "specials"])

    static func special(_ path: String, _ type: Wire.SpecialType = .fifo, replace: Bool = false) -> [UInt8] {
        MessageWriter.special(
            SpecialHeader(
                mode: type.rawValue | 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0, path: Array(path.utf8),
                replace: replace))
    }

    @Test(
        "A special out of the directory, through a link, over a name that exists: refused; a file's type: the session ends"
    )
    func specialsThatLie() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            let outside = root + "/outside"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
            try writeFile(dst + "/theirs", Array("theirs".utf8))
            #expect(symlink("../outside", dst + "/escape") == 0)
            let harness = try TransferHarness(directory: dst)
            var payload = Self.hello
            payload += Self.special("../outside/fifo")
            payload += Self.special("/abs/fifo")
            payload += Self.special("escape/fifo")
            payload += Self.special("theirs")
            payload += Self.special("theirs", .socket, replace: true)
            payload += Self.special("ok")
            payload += RawWire.bye
            let replies = try TreeMetadataTests.exchange(harness, payload)
            let answers = replies.map(\.0).filter { $0 != Wire.MessageType.hello.rawValue }
            let (stored, refused) = (Wire.MessageType.stored.rawValue, Wire.MessageType.refused.rawValue)
            // REPLACE without sync agreed... the receiver offers sync: it replaces, as a link does.
            #expect(
                answers == [refused, refused, refused, refused, stored, stored, Wire.MessageType.bye.rawValue],
                "\(replies.map { ($0.0, PeerText.sanitized($0.1)) })")
            #expect(treePaths(outside) == [])
            #expect(FileInfo(dst + "/theirs")?.type == S_IFSOCK)
            #expect(FileInfo(dst + "/ok")?.type == S_IFIFO)

            let violations: [(String, [UInt8])] = [
                (
                    "a regular file's type",
                    MessageWriter.special(
                        SpecialHeader(mode: UInt32(S_IFREG) | 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0, path: [0x66])
                    )
                ),
                (
                    "a directory's type",
                    MessageWriter.special(
                        SpecialHeader(mode: UInt32(S_IFDIR) | 0o755, mtimeSeconds: 0, mtimeNanoseconds: 0, path: [0x64])
                    )
                ),
                (
                    "XATTR before it",
                    MessageWriter.xattr(ExtendedAttribute(name: "user.a", value: [1])) + Self.special("x")
                ),
            ]
            for (what, messages) in violations {
                let hello = RawWire.hello(["sha256", "xattrs", "specials"])
                let replies = try TreeMetadataTests.exchange(
                    harness, hello + messages + Self.special("after") + RawWire.bye)
                #expect(replies.last?.0 == Wire.MessageType.error.rawValue, "\(what): \(replies.map(\.0))")
                #expect(harness.reports.last?.error?.code == .protocolViolation, "\(what)")
            }
            #expect(FileInfo(dst + "/after") == nil)
            #expect(FileInfo(dst + "/f") == nil && FileInfo(dst + "/d") == nil)
        }
    }
}
