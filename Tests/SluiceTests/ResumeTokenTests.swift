import Foundation
import Synchronization
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// `resume-token`: a sender's key vouches for the bytes a receiver holds of its file, so a
/// resume reads nothing back; anything else is checked with SHA-256 as before.
@Suite(.ownThreads) struct ResumeTokenTests {
    static let info = OpenedEntry(size: 100_000, mode: 0o644, mtimeSeconds: 1_700_000_000, mtimeNanoseconds: 5)
    static let entries = [
        SenderMachine.Entry(
            relative: "f", isDirectory: false, seekable: true, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0)
    ]
    static let receiverKey = PreSharedKey(key: Array(repeating: 0x42, count: 32))!
    static let key = ResumeKey(secret: Array(repeating: 7, count: 32), receiverKey: receiverKey)

    // MARK: The key

    @Test("HMAC-SHA256 matches RFC 4231; a token depends on the secret, the receiver's key and the file")
    func tokens() {
        let mac = SHA256Digest.authenticationCode(
            key: Array("Jefe".utf8), message: Array("what do ya want for nothing?".utf8))
        #expect(SHA256Digest.hex(mac) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        let long = SHA256Digest.authenticationCode(
            key: Array(repeating: 0xAA, count: 131),
            message: Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8))
        #expect(SHA256Digest.hex(long) == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")

        let header = fileHeader("f", size: 100_000, flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.resumable)
        let token = Self.key.token(for: header)
        #expect(token.count == Wire.resumeTokenBytes)
        #expect(Self.key.token(for: header) == token)
        var other = header
        other.mtimeNanoseconds += 1
        #expect(Self.key.token(for: other) != token)
        other = header
        other.path = Array("g".utf8)
        #expect(Self.key.token(for: other) != token)
        // Bound to the receiver's key: another key (a new pairing code) makes other tokens.
        let newCode = PreSharedKey(key: Array(repeating: 0x43, count: 32))!
        #expect(ResumeKey(secret: Self.key.secret, receiverKey: newCode).token(for: header) != token)
        #expect(ResumeKey(secret: Self.key.secret, receiverKey: Self.receiverKey) == Self.key)
        #expect(
            ResumeKey(secret: Array(repeating: 8, count: 32), receiverKey: Self.receiverKey).token(for: header)
                != token)
        // A receiver named rather than keyed is another binding again.
        #expect(ResumeKey(secret: Self.key.secret, receiver: "here").token(for: header) != token)
        #expect(
            ResumeKey(secret: Self.key.secret, receiver: "here").token(for: header)
                != ResumeKey(secret: Self.key.secret, receiver: "there").token(for: header))
        // What a receiver keeps tells nobody the token.
        #expect(ResumeKey.tag(of: token) != Array(SHA256Digest.hex(token).utf8))
        #expect(ResumeKey.tag(of: token).count == 64)
    }

    @Test("The key is made once, mode 0600 in a 0700 directory, and refused when others may read it")
    func keyFile() throws {
        try withTemporaryDirectory { root in
            let path = root + "/state/sluice/resume.key"
            let made = try ResumeKey(receiverKey: Self.receiverKey, path: path)
            #expect(made.secret.count == 32)
            var st = stat()
            #expect(stat(path, &st) == 0 && st.st_mode & 0o777 == 0o600)
            #expect(stat(root + "/state/sluice", &st) == 0 && st.st_mode & 0o777 == 0o700)
            #expect(try ResumeKey(receiverKey: Self.receiverKey, path: path) == made)
            chmod(path, 0o644)
            #expect(throws: SluiceError.self) { try ResumeKey(receiverKey: Self.receiverKey, path: path) }
        }
    }

    @Test("Senders that start at once with no key yet all use the one key made, never a half-written one")
    func keyMadeByRacingSenders() throws {
        try withTemporaryDirectory { root in
            for round in 0..<100 {
                let path = root + "/\(round)/sluice/resume.key"
                let made = Mutex<[Result<ResumeKey, SluiceError>]>([])
                DispatchQueue.concurrentPerform(iterations: 16) { _ in
                    let key = Result { () throws(SluiceError) in
                        try ResumeKey(receiverKey: Self.receiverKey, path: path)
                    }
                    made.withLock { $0.append(key) }
                }
                let results = made.withLock { $0 }
                let keys = results.compactMap { try? $0.get() }
                let failures = results.compactMap {
                    if case .failure(let error) = $0 { error.description } else { nil }
                }
                #expect(keys.count == 16, "round \(round): \(failures)")
                #expect(Set(keys.map(\.secret)).count == 1)
                let again = try ResumeKey(receiverKey: Self.receiverKey, path: path)
                #expect(again == keys.first)
                // Nothing but the key is left in its directory.
                let listing = try FileManager.default.contentsOfDirectory(atPath: root + "/\(round)/sluice")
                #expect(listing == ["resume.key"])
            }
        }
    }

    // MARK: The machines

    private func sender(peer: Set<String>, key: ResumeKey? = Self.key) -> (SenderMachine, [SenderAction]) {
        var machine = SenderMachine(
            entries: Self.entries, settings: .init(resume: true, eager: false, digests: [.sha256], resumeKey: key))
        _ = machine.received(.magic)
        _ = machine.received(.frame(.hello(version: 1, capabilities: peer)))
        _ = machine.proceed()
        let announced = machine.handle(.entryOpened(0, .success(Self.info)))
        return (machine, announced)
    }

    @Test("A sender with a key sends TOKEN before a resumable FILE, to a receiver offering resume-token only")
    func senderTokens() {
        let full: Set<String> = ["sha256", "resume", "held-sha256", "resume-token"]
        var (machine, announced) = sender(peer: full)
        #expect(machine.capabilities.contains("resume-token"))
        guard announced.count == 2, case .send(.token(let token)) = announced[0],
            case .send(.file(let header)) = announced[1]
        else {
            Issue.record("expected TOKEN then FILE: \(announced)")
            return
        }
        #expect(header.resumable)
        #expect(token == Self.key.token(for: header))
        // Vouched: no HELD before END.
        _ = machine.received(.frame(.accept(offset: 40_000, vouched: true)))
        #expect(machine.heldVouched)
        let digest = [UInt8](repeating: 1, count: 32)
        #expect(
            machine.handle(.dataEnded(size: 100_000, digest: digest))
                == [.stopData(0), .send(.end(size: 100_000, digest: digest))])

        for peer: Set<String> in [["sha256", "resume", "held-sha256"], ["sha256", "resume", "resume-token"]] {
            (_, announced) = sender(peer: peer)
            #expect(announced.count == 1, "\(peer): \(announced)")
        }
        let (keyless, plain) = sender(peer: full, key: nil)
        #expect(!keyless.capabilities.contains("resume-token"))
        #expect(plain.count == 1)
    }

    @Test("ACCEPT vouching for a file sent without a TOKEN, or for no held bytes, is a violation")
    func lyingVouch() {
        var (machine, _) = sender(peer: ["sha256", "resume", "held-sha256"])
        #expect(
            machine.received(.frame(.accept(offset: 10, vouched: true))).last
                == .end(.violation("ACCEPT vouching for held bytes of a file sent without a TOKEN, or none held")))
        (machine, _) = sender(peer: ["sha256", "resume", "held-sha256", "resume-token"])
        #expect(
            machine.received(.frame(.accept(offset: 0, vouched: true))).last
                == .end(.violation("ACCEPT vouching for held bytes of a file sent without a TOKEN, or none held")))
    }

    private func receiver() -> ReceiverMachine {
        var machine = ReceiverMachine(settings: .init(resume: true))
        _ = machine.received(.magic)
        _ = machine.received(
            .frame(.hello(version: 1, capabilities: ["sha256", "resume", "held-sha256", "resume-token"])))
        return machine
    }

    @Test("The receiver takes one TOKEN before a resumable FILE or RANGE, and vouches only for held bytes")
    func receiverTokens() {
        let token = [UInt8](repeating: 9, count: 32)
        let resumable = fileHeader("f", size: 6, flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.resumable)
        var machine = receiver()
        #expect(machine.capabilities.contains("resume-token"))
        #expect(machine.awaitsFirstRequest)
        #expect(machine.received(.frame(.token(token))).isEmpty)
        // The TOKEN was the session's first request (a pairing code counts it once).
        #expect(!machine.awaitsFirstRequest)
        guard case .openFile(let request)? = machine.received(.frame(.file(resumable))).first else {
            Issue.record("no openFile")
            return
        }
        #expect(request.attributes.resumeToken == token)
        #expect(machine.handle(.fileOpened(.success(4), vouched: true)) == [.send(.accept(offset: 4, vouched: true))])
        // No HELD wanted, and one is out of place.
        var ended = machine
        #expect(
            ended.received(.frame(.held(digest: token))).last
                == .end(.violation("HELD for a file with no held bytes, or twice")))
        _ = [UInt8](repeating: 0, count: 2).withUnsafeBytes { machine.received(.data($0, endsFrame: true)) }
        _ = machine.decoded(2)
        let digest = Array([UInt8](repeating: 1, count: 32)[0..<machine.digest.byteCount])
        #expect(machine.received(.frame(.end(size: 6, digest: digest))) == [.finishData])
        #expect(machine.handle(.dataFinished) == [.commitFile(digest: digest, held: nil)])

        // Vouched for nothing held: a plain ACCEPT.
        machine = receiver()
        _ = machine.received(.frame(.token(token)))
        _ = machine.received(.frame(.file(resumable)))
        #expect(machine.handle(.fileOpened(.success(0), vouched: true)) == [.send(.accept(offset: 0))])

        let misplaced: [(Frame, String)] = [
            (.directory(dirHeader("d")), "TOKEN before a DIR"),
            (.file(fileHeader("f", size: 6)), "TOKEN before a FILE that is not resumable"),
            (.token(token), "two TOKENs for one entry"),
            (.bye, "XATTR, OWNER or TOKEN not followed by an entry"),
        ]
        for (frame, reason) in misplaced {
            machine = receiver()
            _ = machine.received(.frame(.token(token)))
            #expect(machine.received(.frame(frame)).last == .end(.violation(reason)), "\(frame)")
        }
        machine = ReceiverMachine(settings: .init(resume: false))
        _ = machine.received(.magic)
        _ = machine.received(.frame(.hello(version: 1, capabilities: ["sha256"])))
        #expect(!machine.capabilities.contains("resume-token"))
        #expect(
            machine.received(.frame(.token(token))).last
                == .end(.violation("TOKEN: this receiver does not resume files")))
    }

    @Test("TOKEN and the vouching ACCEPT round-trip; other lengths and flags are refused")
    func frames() {
        let token = [UInt8](repeating: 5, count: 32)
        for (frame, direction) in [
            (Frame.token(token), FrameDirection.toReceiver), (.accept(offset: 7, vouched: true), .toSender),
            (.accept(offset: 7), .toSender),
        ] {
            #expect(decode(Wire.magic + frame.encoded, cuts: [], direction: direction) == [.magic, .frame(frame)])
        }
        #expect(Frame.accept(offset: 7).encoded.count == Wire.frameHeaderSize + 8)
        let bad: [([UInt8], FrameDirection)] = [
            (MessageWriter.message(.token) { $0.raw([UInt8](repeating: 5, count: 31)) }, .toReceiver),
            (Frame.token(token).encoded, .toSender),
            (
                MessageWriter.message(.accept) { w in
                    w.u64(7)
                    w.u8(2)
                }, .toSender
            ),
        ]
        for (bytes, direction) in bad {
            let decoded = decode(Wire.magic + bytes, cuts: [], direction: direction)
            #expect(decoded.count == 2)
            #expect(decoded.last.map { if case .violation = $0 { true } else { false } } == true, "\(direction)")
        }
    }

    // MARK: Real transfers

    /// Sends `path` rate-limited with `options` and cancels it once the receiver's partial holds
    /// 256 KiB more than before (waiting for that, never for a time).
    private func interrupt(_ harness: TransferHarness, _ path: String, partial: String, options: TransferSendOptions)
        throws
    {
        var options = options
        options.chunkSize = try ChunkSize(65536)
        options.rateLimit = 4 << 20
        let sessionsBefore = harness.reports.count
        let target = (FileInfo(partial)?.size ?? 0) + 256 << 10
        let (sender, box) = try harness.startSender([.path(path)], options: options)
        let watch = harness.loop.schedule(after: .milliseconds(5), repeating: .milliseconds(5)) {
            if (FileInfo(partial)?.size ?? 0) >= target { sender.cancel() }
        }
        runLoop(harness.loop, for: .seconds(20)) { box.summary != nil && harness.reports.count > sessionsBefore }
        watch.cancel()
        #expect(box.summary?.error?.code == .cancelled)
        // The receiver stamps the token's mark once it is done with the partial, after the
        // session ended: wait for that (a mark removed, or none, needs no stamp).
        runLoop(harness.loop, for: .seconds(10)) { tokenMark(partial).map { $0.count > 64 } ?? true }
    }

    /// A receiver into `root/dst` and a 4 MiB `root/big.bin` made from `seed`, with mtime
    /// nanoseconds `nanoseconds`: its bytes, the partial's path and the harness.
    private func scene(_ root: String, seed: UInt64, nanoseconds: Int) throws -> (
        dst: String, bytes: [UInt8], partial: String, harness: TransferHarness
    ) {
        let dst = root + "/dst"
        try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
        let bytes = randomBytes(4 << 20, seed: seed)
        try writeFile(root + "/big.bin", bytes, mtime: (1_600_000_000, nanoseconds))
        return (dst, bytes, dst + "/.big.bin.sluice-part", try TransferHarness(directory: dst))
    }

    private func tokenMark(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        return ReceiverStore.attribute(fd, Destination.tokenAttribute, limit: 128)
    }

    private func options(_ key: ResumeKey?) -> TransferSendOptions {
        var options = TransferSendOptions()
        options.resumeKey = key
        return options
    }

    @Test("A partial written under the sender's token resumes without reading it back; another sender's is checked")
    func vouchedResume() throws {
        try withTemporaryDirectory { root in
            let (dst, bytes, partial, harness) = try scene(root, seed: 21, nanoseconds: 3)
            let mine = ResumeKey(secret: Array(repeating: 1, count: 32), receiver: "here")
            let theirs = ResumeKey(secret: Array(repeating: 2, count: 32), receiver: "here")

            try interrupt(harness, root + "/big.bin", partial: partial, options: options(mine))
            let header = EntryHeader(
                flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.resumable, size: UInt64(bytes.count), mode: 0o644,
                mtimeSeconds: 1_600_000_000, mtimeNanoseconds: 3, path: Array("big.bin".utf8))
            // Stamped with the partial's mtime and size when the transfer ended.
            let tag = ResumeKey.tag(of: mine.token(for: header))
            let mark = try #require(tokenMark(partial))
            let held = try #require(FileInfo(partial)).size
            #expect(mark.starts(with: tag + [0x20]) && String(decoding: mark, as: UTF8.self).hasSuffix(" \(held)"))
            let summary = try harness.send([.path(root + "/big.bin")], options: options(mine))
            #expect(summary.succeeded, "\(summary.results)")
            #expect(
                summary.resumedBytes > 0 && summary.vouchedBytes == summary.resumedBytes,
                "\(summary.resumedBytes) resumed, \(summary.vouchedBytes) vouched")
            #expect(readFile(dst + "/big.bin") == bytes)
            // The stored file keeps none of the receiver's marks.
            #expect(tokenMark(dst + "/big.bin") == nil && !Destination.hasResumeMark(dst + "/big.bin"))

            // Another sender's partial (or one whose sender lost its key) is read and checked.
            unlink(dst + "/big.bin")
            try interrupt(harness, root + "/big.bin", partial: partial, options: options(theirs))
            try interrupt(harness, root + "/big.bin", partial: partial, options: options(mine))
            // Continued under another token: nothing vouches for it any more, not even that one.
            #expect(tokenMark(partial) == nil)
            let checked = try harness.send([.path(root + "/big.bin")], options: options(theirs))
            #expect(checked.succeeded, "\(checked.results)")
            #expect(checked.resumedBytes > 0 && checked.vouchedBytes == 0)
            #expect(readFile(dst + "/big.bin") == bytes)

            // Without a key: checked, as before.
            unlink(dst + "/big.bin")
            try interrupt(harness, root + "/big.bin", partial: partial, options: options(nil))
            #expect(tokenMark(partial) == nil)
            let keyless = try harness.send([.path(root + "/big.bin")], options: options(mine))
            #expect(keyless.succeeded && keyless.resumedBytes > 0 && keyless.vouchedBytes == 0)
            #expect(readFile(dst + "/big.bin") == bytes)
        }
    }

    @Test(
        "A vouched partial written to on the receiver's disk, or never stamped (its receiver died), is checked, not trusted"
    )
    func alteredOrUnstamped() throws {
        try withTemporaryDirectory { root in
            let (dst, bytes, partial, harness) = try scene(root, seed: 27, nanoseconds: 11)
            let key = ResumeKey(secret: Array(repeating: 5, count: 32), receiver: "here")

            try interrupt(harness, root + "/big.bin", partial: partial, options: options(key))
            let fd = open(partial, O_WRONLY)
            try #require(fd >= 0)
            #expect([UInt8(0x55)].withUnsafeBytes { pwrite(fd, $0.baseAddress, 1, 1000) } == 1)
            close(fd)
            let altered = try harness.send([.path(root + "/big.bin")], options: options(key))
            #expect(altered.vouchedBytes == 0)
            guard case .failed(_, let kind) = altered.results.first?.outcome else {
                Issue.record("the altered partial was not caught: \(altered.results)")
                return
            }
            #expect(kind == .data)
            #expect(!fileExists(dst + "/big.bin"))

            try interrupt(harness, root + "/big.bin", partial: partial, options: options(key))
            let mark = try #require(tokenMark(partial))
            #expect(SourceMetadata.setXattr(partial, Destination.tokenAttribute, Array(mark.prefix(64))))
            let unstamped = try harness.send([.path(root + "/big.bin")], options: options(key))
            #expect(unstamped.succeeded && unstamped.resumedBytes > 0 && unstamped.vouchedBytes == 0)
            #expect(readFile(dst + "/big.bin") == bytes)
        }
    }

    @Test(
        "Another key holder's interrupted transfer of other bytes under the same name, size and mtime: the sender's resume is checked, never a mixture"
    )
    func plantedByAnotherSender() throws {
        try withTemporaryDirectory { root in
            let (dst, bytes, partial, harness) = try scene(root, seed: 23, nanoseconds: 9)
            try FileManager.default.createDirectory(atPath: root + "/evil", withIntermediateDirectories: true)
            try writeFile(root + "/evil/big.bin", randomBytes(4 << 20, seed: 25), mtime: (1_600_000_000, 9))
            let sender = ResumeKey(secret: Array(repeating: 3, count: 32), receiver: "here")
            let attacker = ResumeKey(secret: Array(repeating: 4, count: 32), receiver: "here")
            try interrupt(harness, root + "/evil/big.bin", partial: partial, options: options(attacker))

            let summary = try harness.send([.path(root + "/big.bin")], options: options(sender))
            #expect(summary.vouchedBytes == 0)
            if case .failed(let reason, let kind) = summary.results.first?.outcome {
                #expect(kind == .data)
                #expect(reason == "SHA-256 mismatch (held partial data differs from the sender's file)")
                #expect(!fileExists(dst + "/big.bin"))
            } else {
                Issue.record("the planted bytes were not caught: \(summary.results)")
            }
            let again = try harness.send([.path(root + "/big.bin")], options: options(sender))
            #expect(again.succeeded)
            let identical = readFile(dst + "/big.bin") == bytes
            #expect(identical)
        }
    }

    @Test("Ranges over several connections: the cut range's held bytes are vouched for when the transfer comes again")
    func vouchedRanges() throws {
        try withTemporaryDirectory { root in
            let (dst, bytes, partial, harness) = try scene(root, seed: 29, nanoseconds: 0)
            let key = ResumeKey(secret: Array(repeating: 6, count: 32), receiver: "here")
            var options = TransferSendOptions()
            options.resumeKey = key
            let relay = try CappedRelay(to: harness.port, bytesPerSecond: 4 << 20, on: harness.loop)
            // Connection 2 carries bytes 2 MiB ..< 3 MiB: cut it a quarter of the way in.
            relay.cutAfter = (index: 2, bytes: 256 << 10)
            let (first, _) = try TransferStreamsTests.send(
                [root + "/big.bin"], streams: 4, port: relay.port, harness: harness, options: options)
            #expect(first.error != nil && fileExists(partial))
            runLoop(harness.loop, for: .seconds(10)) { tokenMark(partial).map { $0.count > 64 } ?? true }

            let (second, _) = try TransferStreamsTests.send(
                [root + "/big.bin"], streams: 4, port: harness.port, harness: harness, options: options)
            #expect(second.succeeded, "\(second.results)")
            #expect(sameBytes(dst + "/big.bin", bytes))
            #expect(second.resumedBytes >= 3 << 20 && second.vouchedBytes == second.resumedBytes)
            #expect(tokenMark(dst + "/big.bin") == nil)
        }
    }
}
