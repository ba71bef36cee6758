import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// `delta-resume`: a delta interrupted part of the way keeps the file rebuilt so far at its
/// temporary name (the old file untouched), and the next `send --sync` goes on from there; over
/// real sockets into a real directory.
@Suite("Deltas resumed", .ownThreads)
struct DeltaResumeTests {
    /// A source tree `root/tree` with `db` sent once into `root/dst`: its old bytes (4 MiB),
    /// the new ones (the first MiB the same, 2 MiB new, then the old file's last 3 MiB) written
    /// to the source, and the harness.
    struct Scene {
        let src: String
        let dst: String
        let old: [UInt8]
        let new: [UInt8]
        let harness: TransferHarness
        var partial: String { dst + "/tree/.db.sluice-part" }
        var stored: String { dst + "/tree/db" }
    }

    static func scene(_ root: String, _ name: String, seed: UInt64, options: TransferSendOptions) throws -> Scene {
        let src = root + "/tree-" + name + "/tree"
        let dst = root + "/dst-" + name
        for dir in [src, dst] {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        }
        let old = randomBytes(4 << 20, seed: seed)
        let new = Array(old[0..<(1 << 20)]) + randomBytes(2 << 20, seed: seed * 1000 + 7) + Array(old[(1 << 20)...])
        let harness = try TransferHarness(directory: dst)
        try writeFile(src + "/db", old, mtime: (1_600_000_000, 0))
        #expect(try harness.send(paths: [src], options: options).succeeded)
        try writeFile(src + "/db", new, mtime: (1_600_000_100, 0))
        return Scene(src: src, dst: dst, old: old, new: new, harness: harness)
    }

    static func syncing(compress: Bool = false, key: ResumeKey? = nil) -> TransferSendOptions {
        var options = TransferSendOptions()
        options.sync = true
        options.compress = compress
        options.resumeKey = key
        return options
    }

    /// Sends the scene's tree rate-limited and cancels it once the receiver's partial holds
    /// `bytes` (waiting for that, never for a time); then waits until the receiver has let the
    /// partial go (its lock free, its token stamped).
    static func interrupt(_ scene: Scene, at bytes: Int, options: TransferSendOptions) throws {
        var options = options
        options.chunkSize = try ChunkSize(65536)
        options.rateLimit = 4 << 20
        let harness = scene.harness
        let sessions = harness.reports.count
        let (sender, box) = try harness.startSender([.path(scene.src)], options: options)
        let watch = harness.loop.schedule(after: .milliseconds(5), repeating: .milliseconds(5)) {
            if (FileInfo(scene.partial)?.size ?? 0) >= bytes { sender.cancel() }
        }
        runLoop(harness.loop, for: .seconds(20)) { box.summary != nil && harness.reports.count > sessions }
        watch.cancel()
        #expect(box.summary?.error?.code == .cancelled)
        runLoop(harness.loop, for: .seconds(10)) { released(scene.partial) }
        #expect(readFile(scene.stored) == scene.old, "the old file is intact")
        #expect((FileInfo(scene.partial)?.size ?? 0) >= bytes, "the partial is kept")
    }

    /// Whether the receiver is done with the partial at `path`: not locked, and stamped with
    /// the token's mark where one is.
    static func released(_ path: String) -> Bool {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return true }
        defer { close(fd) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else { return false }
        flock(fd, LOCK_UN)
        return ReceiverStore.attribute(fd, Destination.tokenAttribute, limit: 128).map { $0.count > 64 } ?? true
    }

    static func delta(_ summary: TransferSummary) -> TransferFileResult? {
        summary.results.first { $0.path == "tree/db" }
    }

    @Test(
        "An interrupted delta goes on where it stopped: the same file, the held part resumed, fewer bytes than a whole delta; with -z, a key (vouched) or none (checked)"
    )
    func resumesWhereItStopped() throws {
        try withTemporaryDirectory { root in
            let key = ResumeKey(secret: Array(repeating: 4, count: 32), receiver: "here")
            // The whole delta, uninterrupted, for its bytes on the wire.
            let whole = try Self.scene(root, "whole", seed: 40, options: Self.syncing())
            let full = try whole.harness.send(paths: [whole.src], options: Self.syncing())
            #expect(full.succeeded && Self.delta(full)?.sentAsDelta == true, "\(full.results)")
            #expect(readFile(whole.stored) == whole.new)

            for (name, compress, key) in [
                ("checked", false, nil), ("compressed", true, nil), ("vouched", false, key),
                ("vouched-compressed", true, key),
            ] as [(String, Bool, ResumeKey?)] {
                let options = Self.syncing(compress: compress, key: key)
                let scene = try Self.scene(root, name, seed: 40, options: options)
                // Cut 1 MiB into the new bytes (the first MiB is a COPY).
                try Self.interrupt(scene, at: 2 << 20, options: options)
                let held = UInt64(try #require(FileInfo(scene.partial)).size)
                let summary = try scene.harness.send(paths: [scene.src], options: options)
                #expect(summary.succeeded, "\(name): \(summary.results)")
                #expect(readFile(scene.stored) == scene.new, "\(name)")
                #expect(!fileExists(scene.partial), "\(name)")
                let result = try #require(Self.delta(summary))
                #expect(result.sentAsDelta, "\(name)")
                #expect(result.resumedBytes == held && summary.resumedBytes == held, "\(name): held \(held)")
                #expect(summary.vouchedBytes == (key == nil ? 0 : held), "\(name): \(summary.vouchedBytes) vouched")
                // The rest: a MiB of new bytes or less, and the old file's last 3 MiB as COPYs.
                #expect(summary.bytes <= 1 << 20, "\(name): literal bytes \(summary.bytes)")
                #expect(summary.matchedBytes >= (3 << 20) - (64 << 10), "\(name): matched \(summary.matchedBytes)")
                #expect(summary.bytesSent + (512 << 10) < full.bytesSent, "\(name): \(summary.bytesSent) on the wire")
            }
        }
    }

    @Test(
        "The old file changed between the runs: the held part (a prefix of the new file) goes on against the new basis; the old file gone or emptied: the rest whole"
    )
    func basisChangedBetweenRuns() throws {
        try withTemporaryDirectory { root in
            let options = Self.syncing()
            let scene = try Self.scene(root, "changed", seed: 50, options: options)
            try Self.interrupt(scene, at: 2 << 20, options: options)
            // Its first 512 KiB rewritten: what the partial was rebuilt from is gone.
            var other = scene.old
            other.replaceSubrange(0..<(512 << 10), with: randomBytes(512 << 10, seed: 59))
            try writeFile(scene.stored, other, mtime: (1_600_000_050, 0))
            let summary = try scene.harness.send(paths: [scene.src], options: options)
            #expect(summary.succeeded, "\(summary.results)")
            #expect(readFile(scene.stored) == scene.new)
            #expect(Self.delta(summary)?.sentAsDelta == true && summary.resumedBytes >= 2 << 20)
            #expect(summary.matchedBytes >= (3 << 20) - (64 << 10))

            // Gone, or emptied (a delta with no basis: the rest comes whole): resumed all the same.
            for emptied in [false, true] {
                let gone = try Self.scene(root, emptied ? "emptied" : "gone", seed: 60, options: options)
                try Self.interrupt(gone, at: 2 << 20, options: options)
                if emptied {
                    try writeFile(gone.stored, [], mtime: (1_600_000_050, 0))
                } else {
                    #expect(unlink(gone.stored) == 0)
                }
                let plain = try gone.harness.send(paths: [gone.src], options: options)
                #expect(plain.succeeded, "\(emptied): \(plain.results)")
                #expect(readFile(gone.stored) == gone.new, "\(emptied)")
                #expect(Self.delta(plain)?.sentAsDelta == false && plain.resumedBytes >= 2 << 20, "\(emptied)")
                // (A file the receiver lacks goes eager, and what is sent before its ACCEPT says
                // how much is held is skipped: only the delta's bytes are counted here.)
                #expect(!emptied || plain.bytes <= 4 << 20, "\(plain.bytes) bytes")
            }
        }
    }

    @Test(
        "A partial altered between the runs is caught by its digest (HELD, or the whole file's without held-sha256): the file fails, the old one stays, the next run is right"
    )
    func alteredPartialIsCaught() throws {
        try withTemporaryDirectory { root in
            for heldSHA256 in [true, false] {
                var options = Self.syncing()
                // An older sender: its held bytes are continued where SHA-256 is agreed.
                options.offersHeldSHA256 = heldSHA256
                options.digests = [.sha256]
                let scene = try Self.scene(root, "altered-\(heldSHA256)", seed: 70, options: options)
                try Self.interrupt(scene, at: 2 << 20, options: options)
                // A byte of the part a COPY rebuilt, then one of the new bytes.
                for offset in [1000, (1 << 20) + 5000] {
                    let fd = open(scene.partial, O_WRONLY)
                    try #require(fd >= 0)
                    #expect([UInt8(0x55)].withUnsafeBytes { pwrite(fd, $0.baseAddress, 1, off_t(offset)) } == 1)
                    close(fd)
                }
                let altered = try scene.harness.send(paths: [scene.src], options: options)
                guard case .failed(let reason, let kind)? = Self.delta(altered)?.outcome else {
                    Issue.record("\(heldSHA256): the altered partial was not caught: \(altered.results)")
                    continue
                }
                #expect(kind == .data, "\(heldSHA256): \(reason)")
                #expect(reason.contains(heldSHA256 ? "held partial data differs" : "held partial data"), "\(reason)")
                #expect(readFile(scene.stored) == scene.old, "\(heldSHA256): the old file stays")
                runLoop(scene.harness.loop, for: .seconds(10)) { !fileExists(scene.partial) }
                #expect(!fileExists(scene.partial), "\(heldSHA256): the altered partial is gone")

                let again = try scene.harness.send(paths: [scene.src], options: options)
                #expect(again.succeeded, "\(heldSHA256): \(again.results)")
                #expect(readFile(scene.stored) == scene.new)
                #expect(Self.delta(again)?.sentAsDelta == true && again.resumedBytes == 0)
            }
        }
    }

    @Test(
        "Without held-sha256 the held part is hashed into the whole file's digest at both ends, and resumed all the same"
    )
    func resumesWithoutHeldSHA256() throws {
        try withTemporaryDirectory { root in
            for compress in [false, true] {
                var options = Self.syncing(compress: compress)
                options.offersHeldSHA256 = false
                options.digests = [.sha256]
                let scene = try Self.scene(root, "unheld-\(compress)", seed: 80, options: options)
                try Self.interrupt(scene, at: 2 << 20, options: options)
                let summary = try scene.harness.send(paths: [scene.src], options: options)
                #expect(summary.succeeded, "\(summary.results)")
                #expect(readFile(scene.stored) == scene.new)
                #expect(Self.delta(summary)?.sentAsDelta == true && summary.resumedBytes >= 2 << 20)
                #expect(summary.bytes <= 1 << 20)
            }
        }
    }

    // MARK: The machines

    static let resumableDelta =
        Wire.FileFlags.sizeKnown | Wire.FileFlags.replace | Wire.FileFlags.delta | Wire.FileFlags.resumable

    static func receiver(_ settings: ReceiverMachine.Settings = .init(), peer: Set<String>) -> ReceiverMachine {
        var machine = ReceiverMachine(settings: settings)
        _ = machine.received(.magic)
        _ = machine.received(.frame(.hello(version: 1, capabilities: peer)))
        return machine
    }

    @Test(
        "Receiver: delta and resumable together only where it offers delta-resume (with resume); never eager or sparse")
    func receiverFlags() {
        #expect(ReceiverMachine(settings: .init()).capabilities.contains("delta-resume"))
        for settings in [
            ReceiverMachine.Settings(resume: false), .init(sync: false), .init(delta: false),
        ] {
            #expect(!ReceiverMachine(settings: settings).capabilities.contains("delta-resume"), "\(settings)")
        }
        let peer: Set<String> = ["sha256", "sync", "resume", "held-sha256"]
        for (flags, settings, legal) in [
            (Self.resumableDelta, ReceiverMachine.Settings(), true),
            (Self.resumableDelta | Wire.FileFlags.compressed, .init(), true),
            (Self.resumableDelta, .init(resume: false), false),
            (Self.resumableDelta | Wire.FileFlags.eager, .init(), false),
            (Self.resumableDelta | Wire.FileFlags.sparse, .init(), false),
            (Self.resumableDelta & ~Wire.FileFlags.replace, .init(), false),
        ] {
            var machine = Self.receiver(settings, peer: peer)
            let actions = machine.received(.frame(.file(fileHeader("f", size: 3 << 20, flags: flags))))
            if legal {
                guard case .openFile? = actions.first, actions.count == 1 else {
                    Issue.record("flags \(flags): \(actions)")
                    continue
                }
            } else {
                #expect(machine.hasEnded, "flags \(flags): \(actions)")
            }
        }
        var machine = Self.receiver(.init(resume: false), peer: peer)
        #expect(
            machine.received(.frame(.file(fileHeader("f", size: 3 << 20, flags: Self.resumableDelta)))).last
                == .end(.violation("FILE flagged delta and resumable: this receiver does not offer delta-resume")))
    }

    @Test("Receiver: ACCEPT's offset is what the interrupted delta rebuilt; HELD checks it, a TOKEN vouches for it")
    func receiverHeldPart() {
        let peer: Set<String> = ["sha256", "sync", "resume", "held-sha256", "resume-token"]
        let header = fileHeader("f", size: 10_000, flags: Self.resumableDelta)
        let digest = [UInt8](repeating: 1, count: 32)
        let held = [UInt8](repeating: 2, count: 32)
        func opened(held: UInt64, vouched: Bool = false, token: Bool = false) -> (ReceiverMachine, [ReceiverAction]) {
            var machine = Self.receiver(peer: peer)
            if token { _ = machine.received(.frame(.token([UInt8](repeating: 9, count: 32)))) }
            _ = machine.received(.frame(.file(header)))
            let actions = machine.handle(.deltaOpened(.success(4000), held: held, vouched: vouched))
            return (machine, actions)
        }

        // Held and checked: ACCEPT 6000, then COPY (the basis's 6 blocks of 700 bytes, the last
        // 500) up to the size, HELD, END.
        var (machine, actions) = opened(held: 6000)
        #expect(actions == [.send(.accept(offset: 6000))])
        #expect(machine.received(.frame(.copy(index: 0, count: 6))) == [.deliverCopy(offset: 0, length: 4000)])
        // One byte past the size: the file fails.
        var past = machine
        #expect(past.received(.frame(.copy(index: 0, count: 6))).first == .dropFile(keep: false))
        _ = machine.decoded(0)
        #expect(
            machine.received(.frame(.end(size: 10_000, digest: digest))).last
                == .end(.violation("END without HELD for a resumed file")))
        (machine, _) = opened(held: 6000)
        _ = machine.received(.frame(.copy(index: 0, count: 6)))
        #expect(machine.received(.frame(.held(digest: held))).isEmpty)
        #expect(machine.received(.frame(.end(size: 10_000, digest: digest))) == [.finishData])
        #expect(machine.handle(.dataFinished) == [.commitFile(digest: digest, held: held)])

        // Vouched for by the TOKEN: no HELD.
        (machine, actions) = opened(held: 6000, vouched: true, token: true)
        #expect(actions == [.send(.accept(offset: 6000, vouched: true))])
        _ = machine.received(.frame(.copy(index: 0, count: 6)))
        #expect(
            machine.received(.frame(.held(digest: held))).last
                == .end(.violation("HELD for a file with no held bytes, or twice")))

        // More held than the file: dropped, FAILED, the session goes on.
        (machine, actions) = opened(held: 10_001)
        #expect(actions.first == .dropFile(keep: false))
        #expect(actions.contains(.send(.failed(code: .io, reason: "held partial data is larger than the file"))))
        #expect(!machine.hasEnded)

        // Interrupted: the partial is kept.
        (machine, _) = opened(held: 6000)
        #expect(machine.handle(.peerClosed).first == .dropFile(keep: true))
    }

    @Test("Sender: a delta is flagged resumable (with its TOKEN) to a receiver offering delta-resume, and only then")
    func senderFlags() {
        let entries: [SenderMachine.Entry] = [
            .init(
                relative: "f", isDirectory: false, seekable: true, mode: 0o644, mtimeSeconds: 1, mtimeNanoseconds: 0,
                listedSize: 2 << 20)
        ]
        let key = ResumeKey(secret: Array(repeating: 7, count: 32), receiver: "r")
        let info = OpenedEntry(size: 3 << 20, mode: 0o644, mtimeSeconds: 2, mtimeNanoseconds: 0)
        let base: Set<String> = ["sha256", "sync", "delta", "resume", "held-sha256", "resume-token"]
        for (peer, resumable) in [(base.union(["delta-resume"]), true), (base, false)] {
            var sender = SenderMachine(
                entries: entries, settings: .init(eager: false, digests: [.sha256], sync: true, resumeKey: key))
            _ = sender.received(.magic)
            _ = sender.received(.frame(.hello(version: 1, capabilities: peer)))
            _ = sender.proceed()
            _ = sender.received(.frame(.have(HaveAnswer(status: .differs, differences: Wire.HaveDifference.size))))
            #expect(sender.proceed() == [.openEntry(0)])
            let announced = sender.handle(.entryOpened(0, .success(info)))
            guard case .send(.file(let header))? = announced.last else {
                Issue.record("no FILE: \(announced)")
                continue
            }
            #expect(header.delta && header.resumable == resumable, "\(peer): \(header.flags)")
            #expect(announced.count == (resumable ? 2 : 1), "a TOKEN before it when resumable: \(announced)")
            let accepted = sender.received(.frame(.accept(offset: 1 << 20, vouched: false)))
            guard resumable else {
                #expect(sender.hasEnded, "an offset for a delta not resumable: \(accepted)")
                continue
            }
            #expect(accepted == [.startData(index: 0, offset: 1 << 20, compressed: false, range: nil)])
            #expect(sender.sendingDelta)
            let digest = [UInt8](repeating: 1, count: 32)
            let held = [UInt8](repeating: 2, count: 32)
            #expect(
                sender.handle(.dataEnded(size: 3 << 20, digest: digest, held: held))
                    == [.stopData(0), .send(.held(digest: held)), .send(.end(size: 3 << 20, digest: digest))])
        }
    }
}
