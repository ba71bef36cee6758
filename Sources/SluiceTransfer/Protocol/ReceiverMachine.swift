import Sluice

/// The receiving side of the transfer protocol as a pure state machine: decoded messages and
/// the outcomes of its own actions in, actions out. No sockets, files or clocks: its session
/// performs the actions (on the loop, or on a worker for disk work) and feeds back outcomes.
///
/// While an action it waits for is in progress (`acceptsMessages` false) the session stops
/// handing it messages, and so stops reading the socket: a sender that runs ahead is held by
/// TCP, not by memory. Every (state, message) pair is decided below; a message that does not
/// belong where it arrives is a protocol violation that ends this session alone.
///
/// The machine lives in three files: this one (its types, its state and the messages), `+Entries`
/// (starting each kind of entry, and the data's accounting) and `+Outcomes` (its actions'
/// outcomes, the answers and the end). Its state is set by those files alone; the sessions and
/// the tests only read it.
struct ReceiverMachine: Sendable {
    struct Settings: Equatable, Sendable {
        var overwrite = false
        var maxSize: UInt64?
        var resume = true
        /// Offer the `streams` capability (one transfer over several connections).
        var streams = false
        /// With `streams`: offer `groups` (a JOIN may name a task group).
        var groups = true
        /// Offer the `eager` and `eager-resume` capabilities (a file's data follows its FILE
        /// without waiting for ACCEPT).
        var eager = true
        /// Offer `batch` (with `eager`): BATCH, small files in one frame, stored together.
        var batch = true
        /// Serve this connection only as part of a transfer it joins (`receive --once` once
        /// another connection's transfer is the one served): any other first message after HELLO
        /// is refused.
        var mustJoin = false
        /// The digests offered, the preferred first (SHA-256 among them).
        var digests = TransferDigest.offered
        /// Offer `links`, `holes` and `xattrs`.
        var links = true
        var holes = true
        var xattrs = true
        /// Offer `owners`: only a receiver that may give files away (root).
        var owners = false
        /// Offer `specials` (SPECIAL: devices, FIFOs, sockets).
        var specials = true
        /// Make devices: only a receiver running as root may (`mknod`); else a device is
        /// refused, that entry alone.
        var devices = false
        /// Offer `sync` (CHECK and HAVE; FILE, LINK and SPECIAL flagged replace). Off, an
        /// entry flagged replace is refused (unless `overwrite`) and a CHECK is a violation.
        /// On here, as everything a receiver may offer is, for the tests and fuzzers of the
        /// machine; a session sets it from `TransferReceiveOptions.sync`, off by default.
        var sync = true
        /// Offer `delete` (with `sync`): PRUNE. Off, a PRUNE is refused, that entry alone. A
        /// session sets it from `TransferReceiveOptions.delete`, off by default.
        var delete = true
        /// Offer `delta` (with `sync`): FILE flagged delta, answered with SIGS; with `resume`,
        /// `delta-resume` too (a delta continued where an interrupted one stopped).
        var delta = true
        /// Offer `sync-attributes` (with `sync`): XATTR and OWNER before a CHECK, compared and
        /// applied to an entry otherwise the same. Off, the receiver speaks as one published
        /// before it; for tests of that.
        var syncAttributes = true
        /// The most DIR entries one session may announce: each directory created is remembered
        /// until goodbye (its mode and mtime are set then), so a sender may not ask for millions.
        var maxDirectories = 1 << 20
    }

    /// The most files of one session a hard link may name (those flagged `linked` and stored),
    /// and the most bytes of their paths; a link to one past either is refused.
    static let maxLinkTargets = 65536
    static let maxLinkTargetBytes = 8 << 20

    /// The file being received.
    struct IncomingFile: Equatable, Sendable {
        var request: EntryRequest
        /// Bytes the receiver held from an interrupted transfer (not sent again).
        var offset: UInt64
        /// Decoded bytes received in this session.
        var received: UInt64 = 0
        /// From END: the size and digest the sender computed.
        var endSize: UInt64 = 0
        var endDigest: [UInt8] = []
        /// For a RANGE: the range (`offset` and `received` count within it), and the whole
        /// file's digest from RANGE-END.
        var range: ByteRange?
        var endFileDigest: [UInt8] = []
        /// From HELD: the SHA-256 of the held bytes, by the sender.
        var heldDigest: [UInt8]?
        /// The held bytes were written under the file's TOKEN: no HELD comes for them.
        var vouched = false
        /// Sent as a delta: the size of the basis its COPYs refer to (nil: none).
        var basisSize: UInt64?

        var total: UInt64 { offset + received }
        var header: EntryHeader { request.header }
        /// The bytes this entry carries when known: the range's length, or the file's size.
        var expected: UInt64? { range?.length ?? (header.sizeKnown ? header.size : nil) }
    }

    /// An answer in the order entries were announced: ready to go, or a staged file's, which
    /// waits for its commit.
    enum QueuedAnswer: Equatable, Sendable {
        case ready([ReceiverAction])
        case staged(IncomingFile)
    }

    enum Pending: Equatable, Sendable {
        case directory(EntryRequest)
        case link(EntryRequest, LinkHeader)
        case special(EntryRequest, SpecialHeader)
        case prune(EntryRequest)
        /// MOVE (`watch`): the request names the destination.
        case move(EntryRequest, from: [String])
        /// REMOVE (`watch` with `delete`).
        case remove(EntryRequest)
        case file(EntryRequest)
        case range(EntryRequest, ByteRange)
    }

    enum State: Equatable, Sendable {
        case awaitingMagic
        case awaitingHello
        /// Between entries.
        case idle
        /// JOIN is with the receiver's transfers.
        case joining(TransferJoin)
        /// A DIR or FILE is with the store.
        case storing(Pending)
        case receiving(IncomingFile)
        /// END arrived: the decompressor is being flushed.
        case finishing(IncomingFile)
        /// The digest is being checked and the file moved into place.
        case committing(IncomingFile)
        /// The file was answered before its end: its DATA is skipped up to END or ABORT.
        case discarding
        /// BYE arrived: directory attributes are being set.
        case settling
        case ended(SessionEnd)
    }

    /// Fixed once the session's first entry or JOIN is decided (`mustJoin` is settled then).
    var settings: Settings
    var state = State.awaitingMagic
    /// A message after HELLO came (its first entry, CHECK, JOIN, BYE, or the XATTR, OWNER,
    /// TOKEN or BATCH that goes before an entry): the session's first request was made, and a
    /// pairing code is claimed once for all the CHECKs and entries that follow.
    var requested = false
    /// Entries announced by the sender, and answers sent.
    var entriesAnnounced = 0
    var entriesAnswered = 0
    /// The transfer of several connections this one joined.
    var joined: TransferJoin?
    /// The digest agreed in HELLO: END and RANGE-END carry digests of its size.
    var digest = TransferDigest.sha256
    /// The sender listed `held-sha256` in HELLO.
    var peerChecksHeld = false
    /// Answers held back behind a staged file's, oldest first; empty when nothing is staged.
    var queuedAnswers = QueuedAnswers()
    /// Between BATCH and the end of its last message.
    var inBatch = false
    /// XATTR and OWNER for the entry announced next.
    var pendingAttributes = EntryAttributes()
    /// Files of this session flagged `linked` and stored: what a hard link may name.
    var linkTargets: Set<String> = []
    var linkTargetBytes = 0
    var directoriesAnnounced = 0
    /// A CHECK came: the sender syncs (existing directories are settled like created ones).
    var syncing = false
    /// The sender watches its tree (`send --watch`, HELLO lists `watch`): it sends a
    /// directory's CHECK again once what changed in it is answered, and the directory's mode
    /// and mtime are set then, not at goodbye.
    var peerWatches = false
    /// CHECKs taken; the most one session may send is `maxChecks`.
    var checksAnnounced = 0
    /// The sender listed `delete`: the paths it CHECKs are kept, up to `Wire.maxNamedBytes`.
    var peerDeletes = false
    var namedBytes = 0
    static let maxChecks = 1 << 24
    /// The sender listed `sync-attributes`.
    var peerSyncsAttributes = false

    /// Whether an entry flagged replace may replace what is here: the receiver consented
    /// (`receive --sync`, or `--overwrite`, which replaces anything).
    var mayReplace: Bool { settings.sync || settings.overwrite }

    /// Whether a PRUNE may remove anything: the receiver consented (`receive --delete`).
    var mayRemove: Bool { settings.sync && settings.delete }

    /// The answer to an entry flagged replace where the receiver did not consent.
    static let replacingRefused = "exists, and this receiver does not let senders replace entries (receive --sync)"
    /// The answer to a PRUNE where the receiver did not consent.
    static let removingRefused = "nothing removed: this receiver does not let senders remove entries (receive --delete)"

    /// Whether XATTR and OWNER may go before a CHECK: both sides list `sync-attributes`.
    var syncsAttributes: Bool { settings.sync && settings.syncAttributes && peerSyncsAttributes }

    init(settings: Settings) {
        self.settings = settings
    }

    /// The capabilities this receiver announces.
    var capabilities: Set<String> {
        var set: Set<String> = [Wire.Capability.deflate]
        set.formUnion(settings.digests.map(\.capability))
        if settings.resume {
            set.formUnion([Wire.Capability.resume, Wire.Capability.heldSHA256, Wire.Capability.resumeToken])
        }
        if settings.streams { set.insert(Wire.Capability.streams) }
        if settings.streams && settings.groups { set.insert(Wire.Capability.groups) }
        if settings.eager { set.formUnion([Wire.Capability.eager, Wire.Capability.eagerResume]) }
        if settings.eager && settings.batch { set.insert(Wire.Capability.batch) }
        if settings.links { set.insert(Wire.Capability.links) }
        if settings.holes { set.insert(Wire.Capability.holes) }
        if settings.xattrs { set.insert(Wire.Capability.xattrs) }
        if settings.owners { set.insert(Wire.Capability.owners) }
        if settings.specials { set.insert(Wire.Capability.specials) }
        if settings.sync { set.insert(Wire.Capability.sync) }
        if settings.sync && settings.delete { set.insert(Wire.Capability.delete) }
        if settings.sync && settings.delta { set.insert(Wire.Capability.delta) }
        if settings.sync && settings.delta && settings.resume { set.insert(Wire.Capability.deltaResume) }
        if settings.sync && settings.syncAttributes { set.insert(Wire.Capability.syncAttributes) }
        if settings.sync { set.insert(Wire.Capability.watch) }
        return set
    }

    // MARK: Messages

    /// One decoded item from the sender.
    mutating func received(_ item: FrameDecoder.Item) -> [ReceiverAction] {
        if case .ended = state { return [] }
        switch item {
        case .magic:
            guard case .awaitingMagic = state else { return violation("a second magic") }
            state = .awaitingHello
            return []
        case .data:
            return receivedData()
        case .frame(let frame):
            return received(frame)
        case .batchEnd:
            inBatch = false
            return [.storeBatch]
        }
    }

    mutating func receivedData() -> [ReceiverAction] {
        switch state {
        case .receiving: return [.deliverData]
        case .discarding: return []
        case .awaitingMagic, .awaitingHello, .idle: return violation("DATA outside a file")
        case .joining, .storing, .finishing, .committing, .settling, .ended: return unexpectedInput("DATA")
        }
    }

    mutating func received(_ frame: Frame) -> [ReceiverAction] {
        if settings.mustJoin, joined == nil, case .idle = state, frame.type != .join, frame.type != .error {
            return violation("this receiver serves one transfer (--once); connection refused")
        }
        if case .idle = state, frame.type != .error { requested = true }
        // A file's FILE and END, the messages of every file, decided before the tuple below,
        // which copies the state (a file's request and all) and the message.
        if case .idle = state, case .file(let header) = frame { return receivedFile(header) }
        if case .receiving = state, case .end(let size, let digest) = frame {
            return receivedEnd(size: size, digest: digest)
        }
        switch (state, frame) {
        case (.ended, _), (.joining, _), (.storing, _), (.finishing, _), (.committing, _), (.settling, _):
            return unexpectedInput(frame.type.name)
        case (.awaitingMagic, _):
            return violation("\(frame.type.name) before the magic")

        case (.awaitingHello, .hello(let version, let capabilities)):
            guard version >= 1 else { return violation("unsupported protocol version \(version)") }
            guard let agreed = TransferDigest.agreed(offered: settings.digests, peer: capabilities) else {
                return violation("no common digest (sha256 required)")
            }
            digest = agreed
            peerChecksHeld = capabilities.contains(Wire.Capability.heldSHA256)
            peerDeletes = capabilities.contains(Wire.Capability.delete)
            peerSyncsAttributes = capabilities.contains(Wire.Capability.syncAttributes)
            peerWatches = settings.sync && capabilities.contains(Wire.Capability.watch)
            state = .idle
            return []
        case (.awaitingHello, .file), (.awaitingHello, .directory), (.awaitingHello, .end),
            (.awaitingHello, .abort), (.awaitingHello, .bye), (.awaitingHello, .join), (.awaitingHello, .range),
            (.awaitingHello, .rangeEnd), (.awaitingHello, .held), (.awaitingHello, .link), (.awaitingHello, .hole),
            (.awaitingHello, .xattr), (.awaitingHello, .owner), (.awaitingHello, .check), (.awaitingHello, .prune),
            (.awaitingHello, .token), (.awaitingHello, .special), (.awaitingHello, .batch), (.awaitingHello, .move),
            (.awaitingHello, .remove):
            return violation("\(frame.type.name) before HELLO")

        case (.idle, .batch):
            guard settings.eager && settings.batch else {
                return violation("BATCH: this receiver does not offer batch")
            }
            guard pendingAttributes.isEmpty else { return violation("XATTR, OWNER or TOKEN before a BATCH") }
            inBatch = true
            return []

        case (.idle, .check(let header)):
            guard settings.sync else { return violation("CHECK: this receiver does not offer sync") }
            let attributes = takePendingAttributes()
            if !attributes.isEmpty || header.comparesXattrs {
                guard syncsAttributes else {
                    return violation("XATTR, OWNER or TOKEN before a CHECK (sync-attributes not agreed)")
                }
                guard attributes.resumeToken == nil else { return violation("TOKEN before a CHECK") }
                guard attributes.xattrs.isEmpty || header.comparesXattrs else {
                    return violation("XATTR before a CHECK not flagged xattrs")
                }
                guard !header.comparesXattrs || settings.xattrs else {
                    return violation("CHECK flagged xattrs: this receiver does not take extended attributes")
                }
                guard !header.comparesXattrs || header.kind != .symbolicLink else {
                    return violation("CHECK of a link flagged xattrs")
                }
            }
            checksAnnounced += 1
            guard checksAnnounced <= Self.maxChecks else {
                return violation("more than \(Self.maxChecks) CHECKs in one session")
            }
            syncing = true
            if header.comparesContents, header.digest.count != digest.byteCount {
                return violation("CHECK with a \(header.digest.count)-byte digest (\(digest) agreed)")
            }
            if peerDeletes && mayRemove {
                namedBytes += header.path.count + 1
                guard namedBytes <= Wire.maxNamedBytes else {
                    return violation("more than \(Wire.maxNamedBytes) bytes of paths CHECKed for --delete")
                }
            }
            if case .success(let components) = PathCheck.receivable(header.path) {
                return [.checkEntry(components, header, attributes)]
            }
            return [.checkEntry(nil, header, attributes)]

        case (.idle, .xattr(let attribute)):
            return takeAttribute(attribute)
        case (.idle, .prune(let path, let dryRun)):
            guard peerDeletes else { return violation("PRUNE: the sender did not list delete") }
            guard pendingAttributes.isEmpty else { return violation("XATTR, OWNER or TOKEN before a PRUNE") }
            entriesAnnounced += 1
            guard mayRemove else {
                return answer(
                    .refused(.other, Self.removingRefused), path: PeerText.sanitized(path), isDirectory: true,
                    size: nil)
            }
            switch PathCheck.receivable(path) {
            case .failure(let refusal):
                return answer(
                    .refused(.invalidPath, "invalid path: \(refusal.reason)"), path: PeerText.sanitized(path),
                    isDirectory: true, size: nil)
            case .success(let components):
                let relative = components.joined(separator: "/")
                let request = EntryRequest(
                    components: components, relative: relative,
                    header: EntryHeader(mode: 0, mtimeSeconds: 0, mtimeNanoseconds: 0, path: path))
                state = .storing(.prune(request))
                return [.prune(components, dryRun: dryRun)]
            }
        case (.idle, .move(let from, let to)):
            return startMove(from: from, to: to)
        case (.idle, .remove(let path)):
            return startRemove(path)
        case (.idle, .owner(let owner)):
            guard settings.owners else {
                return violation("OWNER: this receiver does not keep owners (it is not running as root)")
            }
            guard pendingAttributes.owner == nil else { return violation("two OWNERs for one entry") }
            pendingAttributes.owner = owner
            return []
        case (.idle, .link(let header)):
            guard settings.links else { return violation("LINK: this receiver does not offer links") }
            guard pendingAttributes.xattrs.isEmpty else { return violation("XATTR before a LINK") }
            guard pendingAttributes.resumeToken == nil else { return violation("TOKEN before a LINK") }
            entriesAnnounced += 1
            guard !header.replace || mayReplace else {
                _ = takePendingAttributes()
                return answer(
                    .refused(.exists, Self.replacingRefused), path: PeerText.sanitized(header.path),
                    isDirectory: false, size: nil, isLink: true)
            }
            return startLink(header)
        case (.idle, .special(let header)):
            guard settings.specials else { return violation("SPECIAL: this receiver does not offer specials") }
            guard pendingAttributes.xattrs.isEmpty else { return violation("XATTR before a SPECIAL") }
            guard pendingAttributes.resumeToken == nil else { return violation("TOKEN before a SPECIAL") }
            entriesAnnounced += 1
            guard !header.replace || mayReplace else {
                _ = takePendingAttributes()
                return answer(
                    .refused(.exists, Self.replacingRefused), path: PeerText.sanitized(header.path),
                    isDirectory: false, size: nil, special: header.type)
            }
            return startSpecial(header)

        case (.idle, .join) where !pendingAttributes.isEmpty, (.idle, .bye) where !pendingAttributes.isEmpty:
            return violation("XATTR, OWNER or TOKEN not followed by an entry")
        case (.idle, .join(let join)):
            guard settings.streams else { return violation("JOIN: this receiver does not offer streams") }
            guard joined == nil, entriesAnnounced == 0 else { return violation("JOIN after the transfer began") }
            guard join.group == nil || settings.groups else {
                return violation("JOIN of a task group: this receiver does not offer groups")
            }
            state = .joining(join)
            return [.joinTransfer(join)]
        case (.idle, .token(let token)):
            guard settings.resume else { return violation("TOKEN: this receiver does not resume files") }
            guard pendingAttributes.resumeToken == nil else { return violation("two TOKENs for one entry") }
            pendingAttributes.resumeToken = token
            return []
        case (.idle, .range(let header)):
            guard joined != nil else { return violation("RANGE outside a transfer of several connections") }
            guard !header.entry.eager else { return violation("RANGE flagged eager (a range waits for ACCEPT)") }
            guard !header.entry.sparse && !header.entry.linked else {
                return violation("RANGE flagged sparse or linked (a range is sent whole)")
            }
            guard pendingAttributes.resumeToken == nil || header.entry.resumable else {
                return violation("TOKEN before a RANGE that is not resumable")
            }
            entriesAnnounced += 1
            return startRange(header)

        case (.idle, .file(let header)):
            return receivedFile(header)
        case (.idle, .directory(let header)):
            guard pendingAttributes.resumeToken == nil else { return violation("TOKEN before a DIR") }
            directoriesAnnounced += 1
            guard directoriesAnnounced <= settings.maxDirectories else {
                return violation("more than \(settings.maxDirectories) directories in one session")
            }
            entriesAnnounced += 1
            switch PathCheck.receivable(header.path) {
            case .failure(let refusal):
                return answer(
                    .refused(.invalidPath, "invalid path: \(refusal.reason)"), path: PeerText.sanitized(header.path),
                    isDirectory: true, size: nil)
            case .success(let components):
                let request = EntryRequest(
                    components: components, relative: PathCheck.relative(header.path), header: header,
                    attributes: takePendingAttributes())
                state = .storing(.directory(request))
                return [.makeDirectory(request)]
            }
        case (.idle, .bye):
            state = .settling
            return [.settleDirectories]
        case (.idle, .hello), (.idle, .end), (.idle, .abort), (.idle, .rangeEnd), (.idle, .held), (.idle, .hole):
            return violation("\(frame.type.name) between entries")

        case (.receiving(let file), .copy(let index, let count)):
            return copied(file, index: index, count: count)
        case (.discarding, .copy):
            return []
        case (.awaitingHello, .copy):
            return violation("COPY before HELLO")
        case (.idle, .copy):
            return violation("COPY between entries")
        case (.receiving(let file), .hole(let length)):
            guard settings.holes, file.header.sparse, file.range == nil else {
                return violation("HOLE in a file not flagged sparse")
            }
            let (allowed, actions) = decodedBytes(length)
            return allowed ? [.deliverHole(length)] : actions

        case (.receiving(var file), .held(let digest)):
            guard checksHeld, file.offset > 0, !file.vouched, file.heldDigest == nil else {
                return violation("HELD for a file with no held bytes, or twice")
            }
            file.heldDigest = digest
            state = .receiving(file)
            return []
        case (.receiving, .end(let size, let digest)):
            return receivedEnd(size: size, digest: digest)
        case (.receiving(let file), .abort(let reason)):
            state = .idle
            return [.dropFile(keep: false)]
                + answer(
                    .failed(.aborted, "aborted by the sender: \(reason)"), path: file.request.relative,
                    isDirectory: false, size: file.header.sizeKnown ? file.header.size : file.total,
                    resumed: file.offset)
        case (.receiving(var file), .rangeEnd(let length, let digest, let fileDigest)):
            guard file.range != nil else { return violation("RANGE-END for a whole file (END expected)") }
            guard !awaitsHeld(file) else { return violation("RANGE-END without HELD for a resumed range") }
            guard digest.count == self.digest.byteCount else {
                return violation("RANGE-END with \(digest.count)-byte digests (\(self.digest) agreed)")
            }
            file.endSize = length
            file.endDigest = digest
            file.endFileDigest = fileDigest
            state = .finishing(file)
            return [.finishData]
        case (.receiving, .hello), (.receiving, .file), (.receiving, .directory), (.receiving, .bye),
            (.receiving, .join), (.receiving, .range), (.receiving, .link), (.receiving, .xattr),
            (.receiving, .owner), (.receiving, .check), (.receiving, .prune), (.receiving, .token),
            (.receiving, .special), (.receiving, .batch), (.receiving, .move), (.receiving, .remove):
            return violation("\(frame.type.name) in the middle of a file")

        case (.discarding, .end), (.discarding, .abort), (.discarding, .rangeEnd):
            state = .idle
            return []
        case (.discarding, .held), (.discarding, .hole):
            return []
        case (.discarding, .hello), (.discarding, .file), (.discarding, .directory), (.discarding, .bye),
            (.discarding, .join), (.discarding, .range), (.discarding, .link), (.discarding, .xattr),
            (.discarding, .owner), (.discarding, .check), (.discarding, .prune), (.discarding, .token),
            (.discarding, .special), (.discarding, .batch), (.discarding, .move), (.discarding, .remove):
            return violation("\(frame.type.name) in the middle of a file")

        case (_, .error(let reason)):
            return end(.peerError(reason))
        case (_, .accept), (_, .stored), (_, .refused), (_, .failed), (_, .joined), (_, .have), (_, .gone),
            (_, .signatures):
            // The decoder lets none of these through from a sender; kept explicit all the same.
            return violation("\(frame.type.name) is not a message a sender sends")
        }
    }

    /// FILE between entries.
    private mutating func receivedFile(_ header: EntryHeader) -> [ReceiverAction] {
        if inBatch {
            guard header.sentWhole else {
                return violation(
                    "FILE in a BATCH: only eager files of a known size of at most \(Wire.wholeLimit) bytes, sent whole"
                )
            }
        }
        if header.eager {
            guard settings.eager else { return violation("FILE flagged eager: this receiver does not offer eager") }
            guard !header.resumable || header.sizeKnown else {
                return violation("FILE flagged eager and resumable without a size")
            }
        }
        if header.delta {
            guard settings.sync && settings.delta else {
                return violation("FILE flagged delta: this receiver does not offer delta")
            }
            guard header.replaces, header.sizeKnown, !header.sparse, !header.eager else {
                return violation(
                    "FILE flagged delta: only with replace and a size (and compressed, resumable or not)")
            }
            guard !header.resumable || settings.resume else {
                return violation("FILE flagged delta and resumable: this receiver does not offer delta-resume")
            }
        }
        guard pendingAttributes.resumeToken == nil || header.resumable else {
            return violation("TOKEN before a FILE that is not resumable")
        }
        if header.linked && !settings.links {
            return violation("FILE flagged linked: this receiver offers no links")
        }
        if header.sparse {
            guard settings.holes else { return violation("FILE flagged sparse: this receiver offers no holes") }
            guard !header.compressed && header.sizeKnown else {
                return violation("FILE flagged sparse without a size, or compressed")
            }
        }
        entriesAnnounced += 1
        guard !header.replaces || mayReplace else {
            _ = takePendingAttributes()
            return refuseAtHeader(
                header, .refused(.exists, Self.replacingRefused), path: PeerText.sanitized(header.path))
        }
        return startFile(header)
    }

    /// END of the file being received: its data is finished once the digest's size is checked
    /// (and HELD came, where one must). The file is moved to `.finishing`, not copied.
    private mutating func receivedEnd(size: UInt64, digest: [UInt8]) -> [ReceiverAction] {
        guard var file = state.takeFile(.receiving) else { return violation("END outside a file") }
        let problem: String?
        if file.range != nil {
            problem = "END for a range (RANGE-END expected)"
        } else if awaitsHeld(file) {
            problem = "END without HELD for a resumed file"
        } else if digest.count != self.digest.byteCount {
            problem = "END with a \(digest.count)-byte digest (\(self.digest) agreed)"
        } else {
            problem = nil
        }
        if let problem {
            // Ended in the middle of the file: its partial is kept for a resume (`end`).
            state = .receiving(file)
            return violation(problem)
        }
        file.endSize = size
        file.endDigest = digest
        state = .finishing(file)
        return [.finishData]
    }
}
