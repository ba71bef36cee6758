// libFuzzer target: the sender's protocol machine (`SenderMachine`) driven by whatever a
// receiver might answer. A sender connects to a receiver it may not trust (a wrong address, a
// hostile host): its answers are decoded by `FrameDecoder` in fuzzer-chosen pieces and handed to
// the machine, while a fake session performs every action at once (opens entries, sends their
// data, ends it now or a little later, or fails to read). The invariants: no crash; every entry
// is settled at most once (exactly once when the session ends in goodbye); data starts only for
// the file just announced, at an offset within it; nothing happens after the end; everything the
// sender sends decodes as the receiver's side; a delta is flagged as the receiver allows
// (resumable only to one offering `delta-resume`). Some sessions are one connection of a transfer
// over several (`streams`): they JOIN first and send files in ranges, as `StreamPlan` shares
// them out; a range's data never leaves the range. Now and then an answer's numbers are moved to
// 2^63 - 1, 2^63 or 2^64 - 1 (`Edges`), and files are as large as an offset holds: a lying
// receiver's ACCEPT offset or SIGS never gets past the checks.
import FuzzDriver

@testable import FuzzSupport
@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// The entries every session offers (the seed picks how many): directories, files that can be
/// resumed, and a stream.
let allEntries: [SenderMachine.Entry] = [
    .init(relative: "d", isDirectory: true, seekable: false, mode: 0o755, mtimeSeconds: 1, mtimeNanoseconds: 0),
    .init(relative: "d/a", isDirectory: false, seekable: true, mode: 0o644, mtimeSeconds: 2, mtimeNanoseconds: 3),
    .init(relative: "stdin", isDirectory: false, seekable: false, mode: 0o600, mtimeSeconds: 0, mtimeNanoseconds: 0),
    .init(relative: "d/e", isDirectory: true, seekable: false, mode: 0o700, mtimeSeconds: 4, mtimeNanoseconds: 5),
    .init(relative: "c", isDirectory: false, seekable: true, mode: 0o644, mtimeSeconds: 6, mtimeNanoseconds: 7),
    .init(
        relative: "d/s", isDirectory: false, seekable: false, mode: 0o777, mtimeSeconds: 8, mtimeNanoseconds: 9,
        symlinkTarget: Array("a".utf8)),
    .init(
        relative: "big", isDirectory: false, seekable: true, mode: 0o600, mtimeSeconds: 10, mtimeNanoseconds: 11,
        linked: true, sparse: true,
        attributes: EntryAttributes(
            xattrs: [ExtendedAttribute(name: "user.x", value: [1, 2])],
            owner: EntryOwner(uid: 1, gid: 2, user: "daemon", group: ""), xattrsRead: true)),
    .init(
        relative: "d/h", isDirectory: false, seekable: true, mode: 0o600, mtimeSeconds: 10, mtimeNanoseconds: 11,
        hardLinkTo: 6),
    .init(
        relative: "d/p", isDirectory: false, seekable: false, mode: 0o640, mtimeSeconds: 12, mtimeNanoseconds: 13,
        attributes: EntryAttributes(owner: EntryOwner(uid: 1, gid: 2, user: "", group: "")),
        special: .init(type: .fifo)),
    .init(
        relative: "null", isDirectory: false, seekable: false, mode: 0o666, mtimeSeconds: 14, mtimeNanoseconds: 15,
        special: .init(type: .characterDevice, major: 1, minor: 3)),
]

/// `SLUICE_FUZZ_TRACE=1 FuzzSender INPUT` prints every action (to read a finding).
let trace = getenv("SLUICE_FUZZ_TRACE") != nil

/// A sender session without a socket or files.
final class Session {
    var machine: SenderMachine
    var choices: Choices
    var ended = false
    /// The size each opened file announced (nil: a stream).
    var sizes: [Int: UInt64?] = [:]
    var settled: Set<Int> = []
    var pruned: Set<String> = []
    /// The file whose data is going out, where it started, and its range.
    var sending: (index: Int, offset: UInt64, range: ByteRange?)?
    /// The planned size of each file sent in ranges.
    var planned: [Int: UInt64] = [:]
    /// The receiver's signatures taken, by entry (a file sent as a delta).
    var bases: [Int: DeltaBasis] = [:]
    /// What the sender sends, decoded as the receiver would.
    var sent = peerDecoder(.toReceiver)
    /// The last message sent was an XATTR, OWNER or TOKEN: an entry (or a CHECK) is to follow.
    var attributesBefore = false

    init(settings: SenderMachine.Settings, entries: [SenderMachine.Entry], choices: Choices) {
        var choices = choices
        if choices.below(2) == 0 && !entries.isEmpty {
            // One connection of a transfer over several.
            let count = 2 + choices.below(3)
            let index = choices.below(count)
            let sizes: [UInt64?] = entries.map { $0.seekable ? UInt64(choices.below(4 << 20)) : nil }
            let plan = StreamPlan.plan(entries: entries, sizes: sizes, streams: count)
            for case .range(let entry, _, let size) in plan[index] { planned[entry] = size }
            machine = SenderMachine(
                entries: entries, settings: settings, work: plan[index],
                join: TransferJoin(id: Array(repeating: 7, count: Wire.transferIDBytes), index: index, count: count),
                fallback: index == 0 ? entries.indices.map(SenderMachine.Work.entry) : nil)
        } else {
            machine = SenderMachine(entries: entries, settings: settings)
        }
        self.choices = choices
    }

    func received(_ item: FrameDecoder.Item) {
        // Now and then an ACCEPT's offset or a SIGS's numbers at the edges (`Edges`).
        var item = item
        if case .frame(let frame) = item { item = .frame(Edges.frame(frame, &choices)) }
        perform(machine.received(item))
        step()
    }

    func handle(_ outcome: SenderOutcome) {
        perform(machine.handle(outcome))
    }

    /// What the session does between messages: announce entries while it may, and now and
    /// then end the data going out.
    func step() {
        while !ended {
            if let (index, offset, range) = sending, choices.below(16) != 0 {
                expect(
                    machine.sendingIndex == index,
                    "data of \(index) going out, the machine sends \(String(describing: machine.sendingIndex))")
                if choices.below(16) == 0 {
                    handle(.readFailed("read \"\(index)\": Input/output error"))
                } else {
                    // The held bytes' SHA-256, which the session computes for a resumed file.
                    let held = offset > 0 ? SHA256Digest.hash([UInt8(truncatingIfNeeded: offset)]) : nil
                    let digest = FileDigest.hash(machine.digest, [UInt8(truncatingIfNeeded: index)])
                    if let range {
                        let length = choices.below(16) == 0 ? range.length + 1 : range.length
                        handle(.rangeEnded(length: length, digest: digest, fileDigest: digest, held: held))
                    } else {
                        let size = (sizes[index] ?? nil) ?? UInt64(choices.below(4096))
                        // Now and then the file changed size while it was read.
                        let sentSize = choices.below(16) == 0 ? size + 1 : max(size, offset)
                        handle(.dataEnded(size: sentSize, digest: digest, held: held))
                    }
                }
            } else if machine.canProceed {
                perform(machine.proceed())
            } else {
                return
            }
        }
    }

    func perform(_ actions: [SenderAction]) {
        for action in actions {
            if trace { note("sender: \(action)") }
            expect(!ended, "\(action) after the session ended")
            switch action {
            case .send(let frame):
                expectDecodes(frame, by: &sent, side: "sender")
                if case .file(let header) = frame, header.delta {
                    expect(
                        header.replaces && header.sizeKnown && !header.eager && !header.sparse,
                        "a delta flagged \(header.flags)")
                    expect(
                        !header.resumable || machine.peerCapabilities.contains(Wire.Capability.deltaResume),
                        "a resumable delta to a receiver without delta-resume")
                }
                // A dry run changes nothing: it asks (with the attributes to compare, where the
                // receiver agreed `sync-attributes`), and says goodbye.
                var asks: Set<Wire.MessageType> = [.hello, .check, .bye, .error, .join]
                if machine.syncsAttributes { asks.formUnion([.xattr, .owner]) }
                // With `--delete`, PRUNE flagged dry run: the receiver only lists what would go.
                if case .prune(_, dryRun: true) = frame { asks.insert(.prune) }
                expect(!machine.settings.dryRun || asks.contains(frame.type), "\(frame.type.name) on a dry run")
                // XATTR and OWNER go before an entry, or before a CHECK only with `sync-attributes`.
                if [.xattr, .owner, .token].contains(frame.type) {
                    attributesBefore = true
                } else if attributesBefore {
                    attributesBefore = false
                    var next: Set<Wire.MessageType> = [.file, .directory, .link, .range, .special]
                    if machine.syncsAttributes { next.insert(.check) }
                    expect(
                        next.contains(frame.type) || frame.type == .error, "XATTR or OWNER before \(frame.type.name)")
                }
            case .openEntry(let index):
                expect(!machine.settings.dryRun, "an entry opened on a dry run")
                expect(machine.entries.indices.contains(index), "open entry \(index) of \(machine.entries.count)")
                expect(!machine.entries[index].isDirectory, "open a directory")
                expect(sizes[index] == nil, "entry \(index) opened twice")
                if choices.below(16) == 0 {
                    sizes[index] = .some(nil)
                    handle(.entryOpened(index, .failure(LocalFailure("open: Permission denied"))))
                } else {
                    let entry = machine.entries[index]
                    // Now and then large enough to go as a delta (with sync).
                    var size: UInt64? =
                        entry.seekable ? UInt64(choices.below(1 << 20)) * (choices.below(8) == 0 ? 4 : 1) : nil
                    // Now and then as large as a file can be (a sparse one), or nearly.
                    if size != nil, choices.below(16) == 0 { size = UInt64(Int64.max) - UInt64(choices.below(2)) }
                    // A file sent in ranges is (nearly always) the size it was planned at.
                    if let planned = planned[index], choices.below(16) != 0 { size = planned }
                    sizes[index] = size
                    handle(
                        .entryOpened(
                            index,
                            .success(
                                OpenedEntry(
                                    size: size, mode: entry.mode, mtimeSeconds: entry.mtimeSeconds,
                                    mtimeNanoseconds: entry.mtimeNanoseconds))))
                }
            case .startData(let index, let offset, _, let range):
                expect(sending == nil, "data of \(index) while \(sending.map { "\($0.index)" } ?? "") is going out")
                expect(sizes[index] != nil, "data of entry \(index), never opened")
                if let range {
                    expect(planned[index] != nil, "a range of \(index), which is sent whole")
                    expect(offset <= range.length, "data of \(range) from \(offset)")
                    let end = range.end ?? .max
                    expect(end <= (planned[index] ?? 0), "\(range) outside the file")
                } else if let size = sizes[index] ?? nil {
                    expect(offset <= size, "data of \(index) from \(offset), its size is \(size)")
                } else {
                    expect(offset == 0, "a stream resumed at \(offset)")
                }
                sending = (index, offset, range)
            case .stopData(let index):
                if let current = sending {
                    expect(current.index == index, "stop \(index) while \(current.index) is going out")
                }
                sending = nil
            case .streamsDeclined:
                expect(machine.join == nil, "declined but still joining")
                planned.removeAll()
            case .joined:
                expect(machine.join != nil, "JOINED without a JOIN")
            case .settle(let index, _):
                expect(!settled.contains(index), "entry \(index) settled twice")
                settled.insert(index)
            case .takeSignatures(let index, let batch):
                expect(sizes[index] != nil, "SIGS taken for \(index), never opened")
                // As the session keeps them (`TransferSender.takeSignatures`): only the next ones
                // of the basis announced, which must then fit what a sender can hold.
                var basis = bases[index] ?? DeltaBasis(blockSize: batch.blockSize, size: batch.size)
                guard basis.takes(batch) else {
                    perform(machine.violated("SIGS out of order, or not of the basis announced"))
                    break
                }
                basis.add(batch.signatures)
                expect(
                    basis.received <= basis.blockCount && basis.blockCount <= Delta.maximumBlocks,
                    "a basis of \(basis.blockCount) blocks (\(basis.size) bytes), \(basis.received) signatures taken")
                bases[index] = basis
            case .gone(let root, let path):
                expect(machine.settings.pruneRoots.contains(root), "GONE taken for \(root), never pruned")
                expect(path.hasPrefix(machine.entries[root].relative + "/"), "GONE \(path) outside \(root)")
            case .operated, .removed:
                // Only a watching sender queues MOVE and REMOVE; none is queued here.
                expect(false, "a MOVE or REMOVE answered, none sent")
            case .pruned(let path, _):
                expect(
                    machine.settings.pruneRoots.contains { machine.entries[$0].relative == path },
                    "\(path) pruned, never a root")
                expect(!pruned.contains(path), "\(path) pruned twice")
                expect(settled.count == Set(machine.work.map(\.index)).count, "PRUNE before every entry settled")
                pruned.insert(path)
            case .end(let how):
                ended = true
                expect(machine.hasEnded, "end action, machine not ended")
                if how == .goodbye {
                    // Every entry of this connection's work (all of them, unless it is one
                    // connection of several).
                    let planned = Set(machine.work.map(\.index))
                    expect(settled == planned, "goodbye with \(settled.count) of \(planned.count) settled")
                }
            }
        }
    }
}

/// One fuzz input (libFuzzer's `LLVMFuzzerTestOneInput`).
func fuzzSender(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    guard let (first, bytes) = FuzzInput.split(start, count) else { return 0 }
    var choices = first
    var settings = SenderMachine.Settings()
    settings.compress = choices.below(2) == 0
    settings.resume = choices.below(4) != 0
    if choices.below(2) == 0 {
        settings.resumeKey = ResumeKey(secret: Array(repeating: 1, count: 32), receiver: "fuzz")
    }
    let entries = Array(allEntries.prefix(choices.below(allEntries.count + 1)))
    settings.sync = choices.below(4) == 0
    settings.dryRun = settings.sync && choices.below(4) == 0
    if settings.sync && !entries.isEmpty && choices.below(2) == 0 { settings.pruneRoots = [0] }
    let session = Session(settings: settings, entries: entries, choices: choices.fork())
    session.perform(session.machine.start())
    feed(
        bytes, as: .toSender, &choices, ended: { session.ended },
        item: {
            session.received($0)
            return 0
        },
        violated: { session.perform(session.machine.violated($0)) },
        closed: { choices in session.handle(choices.below(4) == 0 ? .cancelled : .peerClosed) })
    return 0
}

runLibFuzzer(fuzzSender)
