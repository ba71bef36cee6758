// libFuzzer target: the receiver's protocol machine (`ReceiverMachine`) driven by whatever a
// sender might send. The bytes are decoded by `FrameDecoder` in fuzzer-chosen pieces and handed
// to the machine; every action it asks for is performed at once by an in-memory store (which
// also makes directories, opens files with a held partial, and fails now and then, as the
// disk can), with the file's data through a real `Inflate` when compressed, and SHA-256
// checked on commit. The invariants: no crash; no path outside the directory is ever produced;
// every entry is answered at most once (exactly once when the session ends in goodbye); the
// machine never waits for an outcome nobody was asked for; a file never holds more than it
// announced or the size limit allows; everything sent back decodes as the receiver's side.
// Ranges (the `streams` capability) are kept per file as the receiver's transfer keeps them: a
// range never overlaps another or leaves the announced size, and a file is stored only when
// its verified ranges cover it and the whole matches the file digest. Now and then a frame's
// sizes, offsets and counts are moved to 2^63 - 1, 2^63 or 2^64 - 1 (`Edges`): no file is taken
// past what an offset holds, and none of its bytes lands past one.
import FuzzDriver

@testable import FuzzSupport
@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// The receiving side's file system, in memory: what would be written where.
struct MemoryStore {
    var directories: Set<String> = []
    var files: [String: [UInt8]] = [:]

    /// Whether anything but a directory is in the way of `components`'s parents.
    func parentsBlocked(_ components: [String]) -> Bool {
        for index in components.indices.dropLast() where files[components[0...index].joined(separator: "/")] != nil {
            return true
        }
        return false
    }

    mutating func makeParents(_ components: [String]) {
        for index in components.indices.dropLast() {
            directories.insert(components[0...index].joined(separator: "/"))
        }
    }
}

/// The file being received: where its bytes go.
final class ActiveFile {
    let request: EntryRequest
    var content: [UInt8]
    let inflate: Inflate?
    /// For a RANGE: which bytes of the file `content` holds.
    var range: ByteRange?
    /// Sent as a delta: the bytes COPYs read (the store's file at the name).
    var basis: [UInt8]?
    /// HOLEs taken: `content` holds each as its digest input (`Wire.holeDigestInput`).
    var holes: UInt64 = 0
    var holeCount: UInt64 = 0

    /// The bytes the file holds: data, and the zeros of its holes.
    var size: UInt64 {
        let (sum, overflow) = (UInt64(content.count) - 13 * holeCount).addingReportingOverflow(holes)
        expect(!overflow, "holes of more than 2^64 bytes in one file")
        return sum
    }

    /// Where its bytes end in the file: past `Wire.maxFileSize` no offset (`off_t`) holds them,
    /// and the session would trap converting one.
    func expectWithinAnOffset(_ what: String) {
        let end = fileOffset(range?.start ?? 0, plus: size)
        expect(end != nil, "\(what) past what an offset holds: \(size) bytes from \(range?.start ?? 0)")
    }

    init(request: EntryRequest, content: [UInt8], inflate: Inflate?, range: ByteRange? = nil) {
        self.request = request
        self.content = content
        self.inflate = inflate
        self.range = range
    }
}

/// A file received in ranges: the ranges announced, and the bytes of those verified.
struct RangedFile {
    var header: EntryHeader
    var announced: [ByteRange] = []
    var verified: [ByteRange: [UInt8]] = [:]
}

/// A receiver session without a socket or a disk: the machine, the store, and the checks.
final class Session {
    var machine: ReceiverMachine
    var choices: Choices
    var store = MemoryStore()
    var file: ActiveFile?
    var ranged: [String: RangedFile] = [:]
    var ended = false
    /// An entry was announced and not yet answered.
    var outstanding = false
    /// Eager files the store held part of, answered with ACCEPT (to be announced again).
    var announcedAgain = 0
    var answersSent = 0
    var reports = 0
    /// The answers decoded as the sender would.
    var answers = peerDecoder(.toSender)
    let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 1)

    init(settings: ReceiverMachine.Settings, choices: Choices) {
        machine = ReceiverMachine(settings: settings)
        self.choices = choices
    }

    deinit { scratch.deallocate() }

    /// Now and then, the disk fails.
    func diskFails() -> Bool { choices.below(16) == 0 }

    // MARK: The machine's input

    /// Hands `item` to the machine and performs what it asks. Returns how many bytes of a DATA
    /// piece were not taken: now and then only a part is, as when the session's hasher is full
    /// (the decoder shows the rest again).
    func received(_ item: FrameDecoder.Item) -> Int {
        expect(machine.acceptsMessages, "a message while the machine waits for an outcome")
        let announcedBefore = machine.entriesAnnounced
        // Now and then a size, offset, length or count moved to the edges of what an offset
        // and a wire field hold (`Edges`).
        var item = item
        if case .frame(let frame) = item { item = .frame(Edges.frame(frame, &choices)) }
        let actions = machine.received(item)
        if machine.entriesAnnounced != announcedBefore {
            expect(machine.entriesAnnounced == announcedBefore + 1, "two entries from one message")
            expect(!outstanding, "a new entry before the last was answered")
            outstanding = true
        }
        var unused = 0
        if case .data(let piece, _) = item, actions == [.deliverData] {
            if piece.count > 1 && choices.below(8) == 0 { unused = 1 + choices.below(piece.count - 1) }
            deliver(UnsafeRawBufferPointer(rebasing: piece[0..<piece.count - unused]))
        } else {
            expect(!actions.contains(.deliverData), "deliverData for \(item)")
            perform(actions)
        }
        settle()
        return unused
    }

    func handle(_ outcome: ReceiverOutcome) {
        perform(machine.handle(outcome))
    }

    /// After the store answered everything at once, the machine must be ready for the next
    /// message or have ended.
    func settle() {
        expect(machine.acceptsMessages || machine.hasEnded, "the machine waits in \(machine.state) for nothing")
        // ACCEPT for an eager file held in part answers that announcement without a report: the
        // file is announced again and answered then.
        expect(
            machine.entriesAnswered == reports + announcedAgain && reports == answersSent,
            "answered \(machine.entriesAnswered), reported \(reports), sent \(answersSent), again \(announcedAgain)")
        expect(machine.entriesAnswered <= machine.entriesAnnounced, "more answers than entries")
    }

    // MARK: Actions

    func perform(_ actions: [ReceiverAction]) {
        for action in actions {
            if trace { note("receiver: \(action)") }
            expect(!ended, "\(action) after the session ended")
            switch action {
            case .send(let frame):
                // ACCEPT for an eager file the store holds part of: the file is announced
                // again, and answered then.
                if case .accept = frame, machine.state == .discarding {
                    outstanding = false
                    announcedAgain += 1
                }
                send(frame)
            case .makeDirectory(let request):
                check(request)
                if store.parentsBlocked(request.components) || store.files[request.relative] != nil {
                    handle(.directoryMade(.refused(.exists, "exists (not a directory)")))
                } else if diskFails() {
                    handle(.directoryMade(.failed(.io, "mkdirat: No space left on device")))
                } else {
                    store.makeParents(request.components)
                    store.directories.insert(request.relative)
                    handle(.directoryMade(nil))
                }
            case .makeLink(let request, let link):
                check(request)
                makeLink(request, link)
            case .makeSpecial(let request, let special):
                check(request)
                makeSpecial(request, special)
            case .prune(let components, _):
                // Only what no CHECK named, only below the directory pruned.
                check(components: components)
                expect(machine.peerDeletes && machine.settings.sync, "PRUNE taken without sync and delete")
                let prefix = components.joined(separator: "/") + "/"
                let gone = store.files.keys.filter { $0.hasPrefix(prefix) }.sorted()
                for path in gone { store.files[path] = nil }
                handle(.pruned(gone: gone, diskFails() ? .failed(.io, "unlinkat: Permission denied") : nil))
            case .move(let from, let to, _):
                // Both paths checked, never one inside the other, only with sync.
                for components in [from, to] {
                    check(components: components)
                }
                expect(machine.settings.sync, "MOVE taken without sync")
                expect(!to.starts(with: from), "a MOVE into itself taken")
                let moved = store.files.removeValue(forKey: from.joined(separator: "/"))
                if let moved { store.files[to.joined(separator: "/")] = moved }
                handle(.pruned(gone: [], moved == nil ? .failed(.io, "nothing there to move") : nil))
            case .remove(let components):
                expect(machine.peerDeletes && machine.mayRemove, "REMOVE taken without sync and delete")
                let path = components.joined(separator: "/")
                let gone = store.files.keys.filter { $0 == path || $0.hasPrefix(path + "/") }.sorted()
                for path in gone { store.files[path] = nil }
                handle(.pruned(gone: gone, diskFails() ? .failed(.io, "unlinkat: Permission denied") : nil))
            case .checkEntry(let components, let header, let attributes):
                // The session answers in order, without the machine waiting: HAVE from the store.
                expect(machine.settings.sync, "CHECK taken without the capability")
                // XATTR and OWNER before a CHECK only with `sync-attributes`, within the limits
                // of an entry's, no TOKEN, and XATTRs only for a CHECK flagged so.
                let compares = !attributes.isEmpty || header.comparesXattrs
                expect(!compares || machine.syncsAttributes, "attributes before a CHECK without sync-attributes")
                expect(attributes.resumeToken == nil, "a TOKEN before a CHECK")
                expect(attributes.xattrs.isEmpty || header.comparesXattrs, "XATTR before a CHECK not flagged so")
                expect(attributes.owner == nil || machine.settings.owners, "OWNER taken without owners")
                expect(!header.comparesXattrs || machine.settings.xattrs, "a CHECK flagged xattrs without xattrs")
                expect(
                    attributes.xattrs.count <= Wire.maxXattrsPerEntry
                        && attributes.xattrs.reduce(0, { $0 + $1.name.utf8.count + $1.value.count })
                            <= Wire.maxXattrBytesPerEntry,
                    "more attributes before a CHECK than an entry may carry")
                if let components {
                    for component in components {
                        expect(!component.isEmpty && component != "." && component != "..", "a CHECK path component")
                    }
                    let name = components.joined(separator: "/")
                    let there = store.files[name] != nil || store.directories.contains(name)
                    // What is there is the same, its attributes set, now and then.
                    var answer = HaveAnswer(status: there ? .differs : .absent)
                    if there, compares, choices.below(2) == 0 {
                        answer = HaveAnswer(
                            status: .same,
                            differences: (header.comparesXattrs ? Wire.HaveDifference.xattrs : 0)
                                | (attributes.owner != nil ? Wire.HaveDifference.owner | Wire.HaveDifference.group : 0))
                    }
                    expectDecodes(.have(answer), by: &answers, side: "receiver")
                }
            case .deliverHole(let length):
                guard let file else {
                    expect(false, "deliverHole without a file")
                    break
                }
                expect(file.request.header.sparse && file.inflate == nil && file.range == nil, "a hole in \(file)")
                // The machine allowed it: within the announced size. Hashed as the protocol
                // hashes a hole (its message); the bytes it stands for are counted apart.
                file.content += Wire.holeDigestInput(length)
                file.holes += length
                file.holeCount += 1
                expect(file.size <= file.request.header.size, "a hole past the announced size")
                file.expectWithinAnOffset("a hole")
            case .openFile(let request):
                check(request)
                // A BATCH holds only small files sent whole.
                expect(!machine.inBatch || request.header.sentWhole, "\(request.header) in a BATCH")
                openFile(request)
            case .deliverCopy(let offset, let length):
                guard let active = file, active.basis != nil else {
                    expect(false, "deliverCopy without a basis")
                    break
                }
                // A compressed delta's literal bytes before the COPY come out first, as the
                // session writes them (`settleInflate`); a stream not flushed fails the file.
                if let inflate = active.inflate, !settleInflate(active, inflate) { break }
                guard let file, file === active, let basis = file.basis else { break }
                expect(offset + length <= UInt64(basis.count), "a COPY past the basis")
                file.content += basis[Int(offset)..<Int(offset + length)]
                expect(file.size <= file.request.header.size, "a COPY past the announced size")
                file.expectWithinAnOffset("a COPY")
            case .deliverData:
                expect(false, "deliverData outside a DATA message")
            case .finishData:
                finishData()
            case .commitFile(let digest, _):
                commit(digest)
            case .joinTransfer(let join):
                expect(machine.settings.streams, "JOIN taken without the capability")
                handle(.transferJoined(join.index > 0 && choices.below(4) == 0 ? "JOIN: unknown transfer id" : nil))
            case .openRange(let request, let range):
                check(request)
                openRange(request, range)
            case .commitRange(let digest, let fileDigest, _):
                commitRange(digest, fileDigest)
            case .dropFile:
                expect(file != nil, "dropFile without a file")
                file = nil
            case .report(let result):
                expect(outstanding, "an answer for \(result.path), which was answered already or never announced")
                outstanding = false
                reports += 1
                // A range's STORED (rangeOnly) says the range is in, not yet the file.
                if result.outcome == .stored && !result.isDirectory && !result.rangeOnly {
                    expect(store.files[result.path] != nil, "\(result.path) reported stored but not in the store")
                }
            case .settleDirectories:
                expect(file == nil, "settling with a file open")
                handle(.directoriesSettled)
            case .commitStaged:
                expect(false, "commitStaged with nothing staged (this store commits at once)")
            case .storeBatch:
                // This store stores each file at once: nothing waits for the BATCH's end.
                expect(!machine.inBatch, "storeBatch inside a BATCH")
            case .end(let how):
                ended = true
                expect(machine.hasEnded, "end action, machine not ended")
                if how == .goodbye {
                    expect(!outstanding, "goodbye with an entry unanswered")
                    expect(machine.entriesAnswered == machine.entriesAnnounced, "goodbye with entries unanswered")
                }
            }
        }
    }

    /// A path the machine named without an entry (PRUNE, MOVE), checked as an entry's.
    func check(components: [String]) {
        let path = components.joined(separator: "/")
        check(
            EntryRequest(
                components: components, relative: path,
                header: EntryHeader(mode: 0, mtimeSeconds: 0, mtimeNanoseconds: 0, path: Array(path.utf8))))
    }

    /// The request's path stays inside the directory: components that cannot climb or jump.
    func check(_ request: EntryRequest) {
        expect(!request.components.isEmpty, "an entry without a path")
        for component in request.components {
            expect(
                !component.isEmpty && component != "." && component != "..", "component \(component.debugDescription)")
            expect(
                !component.utf8.contains(UInt8(ascii: "/")) && !component.utf8.contains(0),
                "component \(component.debugDescription)")
            expect(component.utf8.count <= Wire.maxComponentBytes, "a component of \(component.utf8.count) bytes")
        }
        expect(
            request.relative == request.components.joined(separator: "/"), "relative path differs from its components")
        expect(request.relative.utf8.first != UInt8(ascii: "/"), "an absolute path")
        expect(request.header.path == Array(request.relative.utf8), "the path on the wire is not the path stored")
    }

    func send(_ frame: Frame) {
        switch frame {
        case .stored, .refused, .failed: answersSent += 1
        case .hello, .file, .directory, .end, .abort, .bye, .accept, .error, .join, .range, .rangeEnd, .joined, .held,
            .link, .hole, .xattr, .owner, .check, .have, .prune, .gone, .signatures, .copy, .token, .special, .batch,
            .move, .remove:
            break
        }
        expectDecodes(frame, by: &answers, side: "receiver")
    }

    /// LINK: a symbolic link is stored as a name (its target is never followed); a hard link
    /// only to a file this session stored flagged linked.
    func makeLink(_ request: EntryRequest, _ link: LinkHeader) {
        if link.kind == .hard {
            let target = String(decoding: link.target, as: UTF8.self)
            expect(machine.linkTargets.contains(target), "a hard link to \(target), not a linked file of the session")
            expect(store.files[target] != nil, "a hard link to \(target), which is not stored")
        }
        let name = request.relative
        if store.parentsBlocked(request.components) || store.directories.contains(name) {
            handle(.linkMade(.refused(.exists, "exists (a directory)")))
        } else if store.files[name] != nil && !machine.settings.overwrite {
            handle(.linkMade(.refused(.exists, "exists")))
        } else if diskFails() {
            handle(.linkMade(.failed(.io, "symlink: No space left on device")))
        } else {
            store.makeParents(request.components)
            store.files[name] = link.kind == .hard ? store.files[String(decoding: link.target, as: UTF8.self)] : []
            handle(.linkMade(nil))
        }
    }

    /// SPECIAL: only with the capability, only a device, FIFO or socket, a device only where
    /// the receiver may make one; stored as a name (never opened).
    func makeSpecial(_ request: EntryRequest, _ special: SpecialHeader) {
        expect(machine.settings.specials, "SPECIAL taken without the capability")
        expect(Wire.SpecialType(mode: special.mode) != nil, "SPECIAL of mode \(special.mode) taken")
        expect(!special.type.isDevice || machine.settings.devices, "a device made by a receiver that may not")
        expect(!special.replace || machine.settings.sync, "SPECIAL flagged replace taken without sync")
        expect(request.attributes.xattrs.isEmpty, "XATTR taken for a SPECIAL")
        let name = request.relative
        if store.parentsBlocked(request.components) || store.directories.contains(name) {
            handle(.specialMade(.refused(.exists, "exists (a directory)")))
        } else if store.files[name] != nil && !machine.settings.overwrite && !special.replace {
            handle(.specialMade(.refused(.exists, "exists")))
        } else if diskFails() {
            handle(.specialMade(.failed(.io, "mknod: Operation not permitted")))
        } else {
            store.makeParents(request.components)
            store.files[name] = []
            handle(.specialMade(nil))
        }
    }

    func openFile(_ request: EntryRequest) {
        let name = request.relative
        expect(
            !request.header.sizeKnown || request.header.size <= Wire.maxFileSize,
            "a FILE of \(request.header.size) bytes taken, more than an offset holds")
        if store.parentsBlocked(request.components) {
            handle(.fileOpened(.failure(.refused(.invalidPath, "\(name): a parent is not a directory"))))
            return
        }
        if store.directories.contains(name) {
            handle(.fileOpened(.failure(.refused(.exists, "exists (a directory)"))))
            return
        }
        let header = request.header
        if store.files[name] != nil && !machine.settings.overwrite && !header.replaces {
            handle(.fileOpened(.failure(.refused(.exists, "exists"))))
            return
        }
        if diskFails() {
            handle(.fileOpened(.failure(.failed(.io, "openat: Permission denied"))))
            return
        }
        store.makeParents(request.components)
        // A resumable file may find a partial held from an earlier session: some prefix of
        // the announced size (its bytes are not known here, so they are zeros); a delta's is
        // what an interrupted delta rebuilt.
        var offset: UInt64 = 0
        if header.resumable && machine.settings.resume && header.sizeKnown && choices.below(2) == 0 {
            offset = UInt64(choices.below(Int(clamping: min(header.size, 1 << 16)) + 1))
        }
        file = ActiveFile(
            request: request, content: [UInt8](repeating: 0, count: Int(offset)),
            inflate: makeInflate(header, after: offset))
        // Held bytes written under the TOKEN sent, as the store may find (vouched): no HELD.
        let vouched = offset > 0 && request.attributes.resumeToken != nil && choices.below(2) == 0
        if header.delta {
            // The basis is what the store has at the name, when it is a file with bytes.
            expect(header.replaces && !header.sparse && !header.eager, "a delta file flagged \(header.flags)")
            expect(!header.resumable || machine.settings.resume, "a resumable delta without delta-resume")
            let basis = store.files[name].flatMap { $0.isEmpty ? nil : $0 }
            file?.basis = basis
            handle(.deltaOpened(.success(basis.map { UInt64($0.count) }), held: offset, vouched: vouched))
            return
        }
        handle(.fileOpened(.success(offset), vouched: vouched))
    }

    /// A compressed file's decompressor, bounded as the session bounds it.
    func makeInflate(_ header: EntryHeader, after offset: UInt64) -> Inflate? {
        guard header.compressed else { return nil }
        let most = header.sizeKnown ? header.size : Wire.maxFileSize
        var maxOutput = most - min(offset, most)
        if let maxSize = machine.settings.maxSize { maxOutput = min(maxOutput, maxSize) }
        do {
            return try Inflate(format: .deflate, limit: InflateLimit(maxOutputBytes: Int(clamping: maxOutput)))
        } catch {
            expect(false, "Inflate.init: \(error)")
            return nil
        }
    }

    /// Before a COPY in a compressed delta: what zlib held back goes to the file, and the
    /// stream must stand at a flushed block boundary; false when the file failed instead.
    func settleInflate(_ file: ActiveFile, _ inflate: Inflate) -> Bool {
        let out = UnsafeMutableRawBufferPointer(rebasing: scratch[0..<WorkerInflate.heldMost])
        switch Result(catching: { () throws(SluiceError) in try inflate.flushPending(into: out) }) {
        case .failure(let error):
            handle(.dataFailed(.failed(.data, "compressed data: \(error.reason)")))
            return false
        case .success(let (produced, settled)):
            guard settled else {
                handle(.dataFailed(.failed(.data, "compressed data: a COPY where the literal bytes were not flushed")))
                return false
            }
            if produced > 0 { store(UnsafeRawBufferPointer(rebasing: out[0..<produced]), to: file) }
            return self.file === file
        }
    }

    // MARK: Data

    func deliver(_ piece: UnsafeRawBufferPointer) {
        guard let file else { return }
        guard let inflate = file.inflate else {
            store(piece, to: file)
            return
        }
        var input = piece
        while !input.isEmpty, self.file === file {
            let room = 1 + choices.below(scratch.count)
            let out = UnsafeMutableRawBufferPointer(rebasing: scratch[0..<room])
            guard
                let progress = decompress(
                    file, into: out, { o throws(SluiceError) in try inflate.process(input, into: o) })
            else { return }
            input = UnsafeRawBufferPointer(rebasing: input[progress.consumed...])
            if progress.consumed == 0 && progress.produced == 0 && self.file === file {
                handle(.dataFailed(.failed(.data, "compressed data: no progress")))
                return
            }
        }
    }

    /// One call of the file's decompressor: what it produced goes to the file, a failure fails
    /// the file (nil).
    func decompress(
        _ file: ActiveFile, into out: UnsafeMutableRawBufferPointer,
        _ call: (UnsafeMutableRawBufferPointer) throws(SluiceError) -> StageProgress
    ) -> StageProgress? {
        switch Result(catching: { () throws(SluiceError) in try call(out) }) {
        case .failure(let error):
            handle(.dataFailed(.failed(.data, "compressed data: \(error.reason)")))
            return nil
        case .success(let progress):
            if progress.produced > 0 {
                store(UnsafeRawBufferPointer(rebasing: out[0..<progress.produced]), to: file)
            }
            return progress
        }
    }

    func store(_ bytes: UnsafeRawBufferPointer, to file: ActiveFile) {
        let (allowed, actions) = machine.decoded(bytes.count)
        guard allowed else {
            expect(!actions.isEmpty, "bytes refused without an answer")
            perform(actions)
            return
        }
        expect(actions.isEmpty, "bytes allowed with actions")
        file.content.append(contentsOf: bytes)
        file.expectWithinAnOffset("data")
        let header = file.request.header
        if let range = file.range {
            expect(file.size <= range.length, "\(file.size) bytes in \(range)")
        } else if header.sizeKnown {
            expect(file.size <= header.size, "\(file.size) bytes of \(header.size) announced")
        }
        if let maxSize = machine.settings.maxSize {
            expect(file.size <= maxSize, "\(file.size) bytes, the limit is \(maxSize)")
        }
    }

    func finishData() {
        guard let file else {
            expect(false, "finishData without a file")
            return
        }
        guard let inflate = file.inflate else {
            handle(.dataFinished)
            return
        }
        while self.file === file {
            guard
                let progress = decompress(file, into: scratch, { o throws(SluiceError) in try inflate.finish(into: o) })
            else { return }
            guard self.file === file else { return }
            if progress.finished {
                handle(.dataFinished)
                return
            }
            if progress.produced == 0 {
                handle(.dataFailed(.failed(.data, "compressed data: truncated")))
                return
            }
        }
    }

    func commit(_ digest: [UInt8]) {
        guard let file else {
            expect(false, "commitFile without a file")
            return
        }
        let name = file.request.relative
        if FileDigest.hash(machine.digest, file.content) != digest {
            self.file = nil
            handle(.committed(.failed(.data, "SHA-256 mismatch")))
        } else if store.directories.contains(name)
            || (store.files[name] != nil && !machine.settings.overwrite && !file.request.header.replaces)
        {
            self.file = nil
            handle(.committed(.refused(.exists, "exists")))
        } else if diskFails() {
            self.file = nil
            handle(.committed(.failed(.io, "fsync: Input/output error")))
        } else {
            store.files[name] = file.content
            self.file = nil
            handle(.committed(nil))
        }
    }
}

extension Session {
    /// RANGE: admitted only apart from the file's other ranges, for the same version of it.
    func openRange(_ request: EntryRequest, _ range: ByteRange) {
        let header = request.header
        expect(header.sizeKnown && !header.compressed, "a range without a known size, or compressed")
        expect(range.length > 0 && (range.end.map { $0 <= header.size } ?? false), "\(range) outside \(header.size)")
        expect(header.size <= Wire.maxFileSize, "a RANGE of a file of \(header.size) bytes taken")
        var entry = ranged[request.relative] ?? RangedFile(header: header)
        guard entry.header == header, !entry.announced.contains(where: { $0.overlaps(range) }) else {
            handle(.fileOpened(.failure(.refused(.invalidRange, "overlapping ranges"))))
            return
        }
        if diskFails() {
            handle(.fileOpened(.failure(.failed(.io, "openat: Permission denied"))))
            return
        }
        entry.announced.append(range)
        ranged[request.relative] = entry
        file = ActiveFile(request: request, content: [], inflate: nil, range: range)
        handle(.fileOpened(.success(0)))
    }

    /// RANGE-END checked by the machine: the range's digest, then, when the verified ranges
    /// cover the file, the whole file's.
    func commitRange(_ digest: [UInt8], _ fileDigest: [UInt8]) {
        guard let file, let range = file.range, var entry = ranged[file.request.relative] else {
            expect(false, "commitRange without a range")
            return
        }
        self.file = nil
        guard FileDigest.hash(machine.digest, file.content) == digest else {
            handle(.rangeCommitted(.failed(.data, "SHA-256 mismatch (\(range))"), fileStored: false))
            return
        }
        entry.verified[range] = file.content
        ranged[file.request.relative] = entry
        let covered = entry.verified.keys.reduce(UInt64(0)) { $0 + $1.length }
        expect(covered <= entry.header.size, "verified ranges beyond the file")
        guard covered == entry.header.size else {
            handle(.rangeCommitted(nil, fileStored: false))
            return
        }
        let whole = entry.verified.sorted { $0.key.start < $1.key.start }.flatMap(\.value)
        guard FileDigest.hash(machine.digest, whole) == fileDigest else {
            handle(.rangeCommitted(.failed(.data, "SHA-256 mismatch (whole file)"), fileStored: false))
            return
        }
        store.files[file.request.relative] = whole
        handle(.rangeCommitted(nil, fileStored: true))
    }
}

/// `SLUICE_FUZZ_TRACE=1 FuzzReceiver INPUT` prints every action (to read a finding).
let trace = getenv("SLUICE_FUZZ_TRACE") != nil

/// Runs one session over `bytes`, split as `choices` says.
func run(_ bytes: UnsafeRawBufferPointer, _ choices: Choices, _ settings: ReceiverMachine.Settings) {
    var choices = choices
    let session = Session(settings: settings, choices: choices.fork())
    session.perform(session.machine.start())
    feed(
        bytes, as: .toReceiver, &choices, ended: { session.ended }, item: session.received,
        violated: { session.perform(session.machine.violated($0)) },
        closed: { choices in
            // The connection ends one way or another.
            let outcomes: [ReceiverOutcome] = [
                .peerClosed, .peerClosed, .timedOut, .cancelled,
                .connectionFailed(SluiceError(.system(Errno(rawValue: ECONNRESET)), operation: "read")),
            ]
            session.handle(outcomes[choices.below(outcomes.count)])
        })
    session.settle()
}

/// One fuzz input (libFuzzer's `LLVMFuzzerTestOneInput`).
func fuzzReceiver(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    guard let (first, bytes) = FuzzInput.split(start, count) else { return 0 }
    var seed = first
    var settings = ReceiverMachine.Settings()
    settings.overwrite = seed.below(4) == 0
    settings.resume = seed.below(4) != 0
    switch seed.below(4) {
    case 0: settings.maxSize = UInt64(seed.below(1 << 16))
    case 1: settings.maxSize = 1 << 20
    default: settings.maxSize = nil
    }
    settings.streams = seed.below(2) == 0
    settings.mustJoin = settings.streams && seed.below(8) == 0
    settings.eager = seed.below(4) != 0
    settings.links = seed.below(4) != 0
    settings.holes = seed.below(4) != 0
    settings.xattrs = seed.below(4) != 0
    settings.owners = seed.below(2) == 0
    settings.sync = seed.below(4) != 0
    settings.delta = seed.below(4) != 0
    settings.syncAttributes = seed.below(4) != 0
    settings.specials = seed.below(4) != 0
    settings.devices = seed.below(2) == 0
    run(bytes, seed, settings)
    return 0
}

runLibFuzzer(fuzzReceiver)
