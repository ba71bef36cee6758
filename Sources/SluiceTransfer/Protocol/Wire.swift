import Sluice

/// The sluice transfer protocol, version 1: the constants, limits and message layouts that
/// `man/sluice-protocol.7` documents. Integers are big-endian.
///
/// Each side opens with the 8-byte magic `SLUICE\r\n`, then messages follow, each a type byte,
/// a 4-byte payload length and the payload. Every length is checked against the limit of its
/// message type before anything is allocated or read for it.
enum Wire {
    /// `SLUICE\r\n`: sent first by both sides.
    static let magic: [UInt8] = Array("SLUICE\r\n".utf8)
    /// The protocol version this implementation speaks.
    static let version: UInt16 = 1
    /// Type byte and payload length.
    static let frameHeaderSize = 5
    /// The largest DATA payload: the largest chunk size.
    static let maxDataPayload = ChunkSize.range.upperBound
    /// The largest control message payload (a header with a 4096-byte path fits).
    static let maxControlPayload = 8192
    /// The longest relative path, in bytes.
    static let maxPathBytes = 4096
    /// The longest path component, in bytes (NAME_MAX).
    static let maxComponentBytes = 255
    /// The largest file a receiver takes, and the furthest any of its bytes may lie: `Int64.max`,
    /// what an `off_t` holds. A FILE or RANGE of a larger size is refused (too large), and a
    /// file's data, holes and copies are counted against it before any of them becomes an
    /// offset, so no number from the wire is converted before it is checked.
    static let maxFileSize = UInt64(Int64.max)
    /// The longest reason text in REFUSED, FAILED, ABORT and ERROR.
    static let maxReasonBytes = 1024
    /// The most capabilities a HELLO may list, and the longest one.
    static let maxCapabilities = 32
    static let maxCapabilityBytes = 32

    /// How the ERROR of a receiver serving all the sessions it allows begins.
    static let busyPrefix = "busy:"
    /// How the ERROR of a receiver whose pairing code has served its transfers begins.
    static let expiredPrefix = "code expired:"
    /// The most connections one transfer may use (`streams` capability), and the bytes of a
    /// transfer id.
    static let maxStreams = 64
    static let transferIDBytes = 16
    /// The longest task group's name a JOIN carries (`groups`).
    static let maxGroupNameBytes = 64
    /// The most tasks a task group may say it has.
    static let maxGroupTasks = 1 << 20
    /// TOKEN's payload: an HMAC-SHA256 (`ResumeKey`).
    static let resumeTokenBytes = 32
    /// ACCEPT's optional flags byte (`resume-token`): the held bytes were written under the
    /// token sent before the FILE or RANGE, so no HELD follows.
    static let acceptVouched: UInt8 = 1

    /// Capabilities announced in HELLO.
    enum Capability {
        static let sha256 = "sha256"
        /// XXH3-128 instead of SHA-256 for every digest (`TransferDigest`), when both offer it.
        static let xxh128 = "xxh128"
        static let deflate = "deflate"
        static let resume = "resume"
        /// One transfer over several connections: JOIN, RANGE, RANGE-END and JOINED.
        static let streams = "streams"
        /// With `streams`: a JOIN may name a task group (its longer form): the connections of
        /// several senders (a scheduler's tasks, at once or one after another) send ranges of
        /// the same files into one transfer that outlives each of them (`TaskGroupJoin`).
        static let groups = "groups"
        /// A FILE flagged eager may be followed by its DATA and END at once, without waiting for
        /// ACCEPT (which the receiver does not send for it).
        static let eager = "eager"
        /// With `eager`: a FILE of any size may be eager, and a file over `Wire.eagerLimit` is
        /// then flagged eager and resumable. A receiver holding part of such a file answers
        /// ACCEPT with the bytes it holds instead of taking the data, skips the data up to END
        /// or ABORT, and the sender announces the file again, not eager, to resume it.
        static let eagerResume = "eager-resume"
        /// A resumed file's (or range's) held bytes are checked with SHA-256 apart from the agreed
        /// digest: HELD carries it, and END's digest covers only the bytes after them.
        static let heldSHA256 = "held-sha256"
        /// With `held-sha256`: TOKEN before a resumable FILE or RANGE; ACCEPT may say the held
        /// bytes were written under that token (`ResumeKey`), and HELD is then not sent.
        static let resumeToken = "resume-token"
        /// LINK: symbolic links sent as links, and hard links within a transfer (a FILE flagged
        /// `linked` may be named by a later LINK).
        static let links = "links"
        /// HOLE within a file's data: a run of zeros not sent, left unallocated (a sparse file).
        static let holes = "holes"
        /// XATTR before an entry: its `user.*` extended attributes.
        static let xattrs = "xattrs"
        /// OWNER before an entry: its owner and group. Offered only by a receiver that can give
        /// files away (running as root).
        static let owners = "owners"
        /// CHECK and HAVE: the sender asks what the receiver has of each entry before sending
        /// it, skips what is the same, and replaces what differs (FILE and LINK flagged replace).
        static let sync = "sync"
        /// In a sender's HELLO: it will send PRUNE (`--delete`), so the receiver keeps the paths
        /// CHECKed in the session.
        static let delete = "delete"
        /// FILE flagged delta: the receiver answers with its copy's block signatures (SIGS)
        /// before ACCEPT, and takes COPY among the DATA (`Delta`).
        static let delta = "delta"
        /// With `delta` and `resume`: a FILE flagged delta may be flagged resumable too. ACCEPT's
        /// offset is then the length of the file rebuilt so far (a prefix of the new file, kept
        /// at its temporary name when a delta was interrupted), and the delta covers the bytes
        /// after it.
        static let deltaResume = "delta-resume"
        /// With `sync`: XATTR (flagged by CHECK's `xattrs`) and OWNER may go before a CHECK too;
        /// the receiver compares them with what it has, applies the difference to an entry
        /// otherwise the same, and HAVE says so with the bits `xattrs`, `owner` and `group`
        /// (a third byte of HAVE carries `group`).
        static let syncAttributes = "sync-attributes"
        /// SPECIAL: devices (character and block, with their numbers), FIFOs and sockets, as
        /// entries of their own (rsync's `-D`). A receiver not running as root refuses a
        /// device, that entry only; FIFOs and sockets it makes all the same.
        static let specials = "specials"
        /// BATCH: many small eager files in one frame, stored together (`Wire.batchTarget`); and
        /// files of up to `Wire.wholeLimit` bytes eager, not resumable, received whole.
        static let batch = "batch"
        /// With `sync`: MOVE (a rename within the receiver's directory, `send --watch`) and,
        /// with `delete`, REMOVE (one path and what it holds, not a scan of a directory).
        static let watch = "watch"
    }

    /// Message types. Sender → receiver: 0x01, 0x10–0x1F, 0x30–0x35, 0x7F. Receiver → sender: 0x01,
    /// 0x15, 0x20–0x27, 0x7F.
    enum MessageType: UInt8, Sendable {
        case hello = 0x01
        case file = 0x10
        case directory = 0x11
        case data = 0x12
        case end = 0x13
        case abort = 0x14
        case bye = 0x15
        case join = 0x16
        case range = 0x17
        case rangeEnd = 0x18
        case held = 0x19
        case link = 0x1A
        case hole = 0x1B
        case xattr = 0x1C
        case owner = 0x1D
        case check = 0x1E
        case prune = 0x1F
        case accept = 0x20
        case stored = 0x21
        case refused = 0x22
        case failed = 0x23
        case joined = 0x24
        case have = 0x25
        case gone = 0x26
        case signatures = 0x27
        case copy = 0x30
        case token = 0x31
        case special = 0x32
        case batch = 0x33
        case move = 0x34
        case remove = 0x35
        case error = 0x7F

        /// The message's name in `sluice-protocol(7)`: `HELLO`, `FILE`, …
        var name: String {
            switch self {
            case .hello: return "HELLO"
            case .file: return "FILE"
            case .directory: return "DIR"
            case .data: return "DATA"
            case .end: return "END"
            case .abort: return "ABORT"
            case .bye: return "BYE"
            case .accept: return "ACCEPT"
            case .stored: return "STORED"
            case .refused: return "REFUSED"
            case .failed: return "FAILED"
            case .join: return "JOIN"
            case .range: return "RANGE"
            case .rangeEnd: return "RANGE-END"
            case .held: return "HELD"
            case .link: return "LINK"
            case .hole: return "HOLE"
            case .xattr: return "XATTR"
            case .owner: return "OWNER"
            case .check: return "CHECK"
            case .have: return "HAVE"
            case .prune: return "PRUNE"
            case .gone: return "GONE"
            case .signatures: return "SIGS"
            case .copy: return "COPY"
            case .token: return "TOKEN"
            case .special: return "SPECIAL"
            case .batch: return "BATCH"
            case .move: return "MOVE"
            case .remove: return "REMOVE"
            case .joined: return "JOINED"
            case .error: return "ERROR"
            }
        }

        /// The largest payload a message of this type may carry.
        var maxPayload: Int {
            switch self {
            case .data, .batch: return Wire.maxDataPayload
            case .hello: return 2 + 1 + Wire.maxCapabilities * (1 + Wire.maxCapabilityBytes)
            case .file, .directory: return Wire.maxControlPayload
            case .end: return 8 + TransferDigest.sha256.byteCount
            case .accept: return 9
            case .join: return Wire.transferIDBytes + 4 + 9 + Wire.maxGroupNameBytes
            case .range: return 16 + Wire.maxControlPayload
            case .rangeEnd: return 8 + 2 * TransferDigest.sha256.byteCount
            case .held: return SHA256Digest.byteCount
            case .link: return 1 + 12 + 2 + Wire.maxPathBytes + 2 + Wire.maxPathBytes
            case .hole: return 8
            case .xattr: return 1 + Wire.maxXattrNameBytes + Wire.maxXattrValueBytes
            case .owner: return 8 + 2 * (1 + Wire.maxOwnerNameBytes)
            case .check:
                return 2 + 8 + 4 + 12 + 2 + Wire.maxPathBytes + 2 + Wire.maxPathBytes + 1 + SHA256Digest.byteCount
            case .have: return 3
            case .prune: return 1 + 2 + Wire.maxPathBytes
            case .gone, .remove: return Wire.maxPathBytes
            case .move: return 2 + Wire.maxPathBytes + 2 + Wire.maxPathBytes
            case .signatures: return 20 + Delta.signatureBytes * Delta.signaturesPerMessage
            case .copy: return 12
            case .token: return Wire.resumeTokenBytes
            case .special: return 1 + 4 + 12 + 8 + 2 + Wire.maxPathBytes
            case .stored, .bye, .joined: return 0
            case .refused, .failed: return 1 + Wire.maxReasonBytes
            case .abort, .error: return Wire.maxReasonBytes
            }
        }
    }

    /// FILE flags.
    enum FileFlags {
        static let sizeKnown: UInt8 = 1 << 0
        static let compressed: UInt8 = 1 << 1
        static let resumable: UInt8 = 1 << 2
        /// The data follows without waiting for ACCEPT (to a receiver offering `eager`); with
        /// `resumable` only to a receiver offering `eager-resume`.
        static let eager: UInt8 = 1 << 3
        /// A later LINK (hard) may name this file (`links`).
        static let linked: UInt8 = 1 << 4
        /// Its data may come with HOLEs (`holes`): the receiver reserves no room for it.
        static let sparse: UInt8 = 1 << 5
        /// The receiver has another file at the name (HAVE said it differs): replace it, as
        /// `--overwrite` does (`sync`).
        static let replace: UInt8 = 1 << 6
        /// With replace: send the file as a delta against the receiver's copy (`delta`).
        static let delta: UInt8 = 1 << 7
        static let all: UInt8 = 0b1111_1111
    }

    /// LINK's kind byte: the kind, with this bit when the link replaces what is there (`sync`).
    static let linkReplaceBit: UInt8 = 0x80

    /// What CHECK asks about.
    enum CheckKind: UInt8, Sendable {
        case file = 0
        case directory = 1
        case symbolicLink = 2
        /// A device, FIFO or socket (`specials`): the mode carries its type (`S_IFMT` bits),
        /// the size its device numbers (major << 32 | minor; 0 for a FIFO or socket).
        case special = 3
    }

    /// CHECK flags.
    enum CheckFlags {
        /// Apply a difference of mode where the rest is the same (not on a dry run).
        static let apply: UInt8 = 1
        /// The file's digest (the agreed one) follows: the same means the same contents, not
        /// the same mtime (`--checksum`).
        static let digest: UInt8 = 2
        /// The sender sends extended attributes (`sync-attributes`): the XATTRs before this
        /// CHECK, none or more, are all the entry's `user.*` ones, to compare with the receiver's.
        static let xattrs: UInt8 = 4
        static let all: UInt8 = apply | digest | xattrs
    }

    /// HAVE's answer.
    enum HaveStatus: UInt8, Sendable {
        /// Nothing at the name.
        case absent = 0
        /// The same kind, size and mtime (a link: the same target): not to be sent.
        case same = 1
        /// Something else at the name: sent to replace it.
        case differs = 2
    }

    /// PRUNE flags.
    enum PruneFlags {
        /// Only say what would go (GONE), remove nothing.
        static let dryRun: UInt8 = 1
    }

    /// The most bytes of paths a receiver keeps for one transfer's PRUNE (the paths CHECKed).
    static let maxNamedBytes = 64 << 20

    /// HAVE's differences (rsync's itemized letters). The bits below 64 fit HAVE's second byte
    /// and are all an old peer knows; the others come only with `sync-attributes`, `group` in
    /// a third byte that HAVE carries only when one of its bits is set.
    enum HaveDifference {
        static let size: UInt16 = 1
        static let mtime: UInt16 = 2
        static let mode: UInt16 = 4
        static let kind: UInt16 = 8
        static let target: UInt16 = 16
        /// The contents (by digest, `--checksum`).
        static let content: UInt16 = 32
        /// The `user.*` extended attributes (`sync-attributes`): with `same`, set as the
        /// sender's XATTRs said, without data.
        static let xattrs: UInt16 = 64
        /// The owner, or the group (`sync-attributes`): with `same`, given the sender's.
        static let owner: UInt16 = 128
        static let group: UInt16 = 256
        /// What any peer may say, and what one agreeing `sync-attributes` may say besides.
        static let basic: UInt16 = 63
        static let withAttributes: UInt16 = basic | xattrs | owner | group
    }

    /// LINK kinds.
    enum LinkKind: UInt8, Sendable {
        /// A symbolic link: the target as written, never followed by the receiver.
        case symbolic = 1
        /// A hard link to a file stored earlier in the same session (flagged `linked`).
        case hard = 2
    }

    /// SPECIAL's flags byte: the entry replaces what is at the name (`sync`).
    static let specialReplaceBit: UInt8 = 0x80

    /// The file types SPECIAL carries (the `S_IFMT` bits of its mode, as Linux and every Unix
    /// number them).
    enum SpecialType: UInt32, Sendable, CaseIterable {
        case fifo = 0o010000
        case characterDevice = 0o020000
        case blockDevice = 0o060000
        case socket = 0o140000

        static let mask: UInt32 = 0o170000

        /// The type of `mode`, nil for anything else (a file, a directory, a link).
        init?(mode: UInt32) { self.init(rawValue: mode & Self.mask) }

        var isDevice: Bool { self == .characterDevice || self == .blockDevice }

        /// What a message calls it.
        var name: String {
            switch self {
            case .fifo: return "FIFO"
            case .characterDevice: return "character device"
            case .blockDevice: return "block device"
            case .socket: return "socket"
            }
        }
    }

    /// The longest extended attribute name and value (Linux's `XATTR_NAME_MAX` and
    /// `XATTR_SIZE_MAX`), and the most attributes and bytes of them one entry may carry.
    static let maxXattrNameBytes = 255
    static let maxXattrValueBytes = 65536
    static let maxXattrsPerEntry = 128
    static let maxXattrBytesPerEntry = 256 * 1024
    /// What a HOLE adds to its file's digest: its whole message (type, length, the hole's
    /// length), not the zeros it stands for, so a hole of a terabyte costs no hashing. A
    /// sparse file's digest is thus of its data and its holes as sent (a resumed prefix,
    /// read back from disk, is hashed as the bytes it holds, zeros included, on both sides).
    static func holeDigestInput(_ length: UInt64) -> [UInt8] {
        Frame.hole(length: length).encoded
    }

    /// The only extended attributes sent and taken: `user.*`.
    static let xattrNamespace = "user."
    /// The longest user or group name in OWNER.
    static let maxOwnerNameBytes = 64

    /// The largest file a sender sends eagerly to a receiver without `eager-resume`, and the
    /// largest it sends eagerly without flagging it resumable to one with it (resuming so small a
    /// file saves less than the resume costs).
    static let eagerLimit: UInt64 = 64 * 1024
    /// The largest file a sender sends whole (eager, not resumable, in a BATCH) to a receiver
    /// that offers `batch`, and the largest FILE a BATCH may hold: the receiver stores such a
    /// file with one job, without a round trip to a worker to open it and another to commit it
    /// (500 files of 128 KiB: 0.09–0.10 s against 0.17–0.21 s sent eager and resumable).
    static let wholeLimit: UInt64 = 1 << 20
    /// The messages a BATCH may hold: the FILE, DATA, END and ABORT of files received whole.
    static func batchHolds(_ type: MessageType) -> Bool {
        type == .file || type == .data || type == .end || type == .abort
    }
    /// A sender closes a BATCH once its payload reaches this many bytes (or sooner: when the
    /// next entry is not a small file, or its loop has nothing more ready).
    static let batchTarget = 512 << 10

    /// REFUSED codes.
    enum RefusalCode: UInt8, Sendable {
        case exists = 1
        case tooLarge = 2
        case invalidPath = 3
        case busy = 4
        case other = 5
        /// A RANGE outside the file's announced size, overlapping another, or of another
        /// version of the file.
        case invalidRange = 6
    }

    /// FAILED codes.
    enum FailureCode: UInt8, Sendable {
        case data = 1
        case io = 2
        case aborted = 3
    }
}

/// A file or directory header as carried by FILE and DIR.
struct EntryHeader: Equatable, Sendable {
    var flags: UInt8 = 0
    var size: UInt64 = 0
    var mode: UInt32
    var mtimeSeconds: Int64
    var mtimeNanoseconds: UInt32
    var path: [UInt8]

    var sizeKnown: Bool { flags & Wire.FileFlags.sizeKnown != 0 }
    var compressed: Bool { flags & Wire.FileFlags.compressed != 0 }
    var resumable: Bool { flags & Wire.FileFlags.resumable != 0 }
    var eager: Bool { flags & Wire.FileFlags.eager != 0 }
    /// Sent whole, as a BATCH may hold it: eager, of a known size of at most `Wire.wholeLimit`
    /// bytes, and nothing else (not compressed, sparse, linked, resumable or a delta) but
    /// `replace`.
    var sentWhole: Bool {
        flags & ~Wire.FileFlags.replace == Wire.FileFlags.sizeKnown | Wire.FileFlags.eager
            && size <= Wire.wholeLimit
    }
}

extension EntryHeader {
    var linked: Bool { flags & Wire.FileFlags.linked != 0 }
    var sparse: Bool { flags & Wire.FileFlags.sparse != 0 }
    /// The sender replaces what is at the name (`sync`).
    var replaces: Bool { flags & Wire.FileFlags.replace != 0 }
    /// Sent as a delta against the receiver's copy (`delta`).
    var delta: Bool { flags & Wire.FileFlags.delta != 0 }
}

/// A LINK message: a symbolic link (its target as written) or a hard link to a file stored
/// earlier in the session (its target the file's relative path).
struct LinkHeader: Equatable, Sendable {
    var kind: Wire.LinkKind
    var mtimeSeconds: Int64
    var mtimeNanoseconds: UInt32
    var path: [UInt8]
    var target: [UInt8]
    /// Replace what is at the name (`sync`, after HAVE said it differs).
    var replace = false
}

/// A SPECIAL message: a device, FIFO or socket (`specials`). `mode` holds its type
/// (`Wire.SpecialType`) and permission bits; a device carries its major and minor numbers.
struct SpecialHeader: Equatable, Sendable {
    var mode: UInt32
    var mtimeSeconds: Int64
    var mtimeNanoseconds: UInt32
    var major: UInt32 = 0
    var minor: UInt32 = 0
    var path: [UInt8]
    /// Replace what is at the name (`sync`, after HAVE said it differs).
    var replace = false

    /// Its type: the decoder lets no other through.
    var type: Wire.SpecialType { Wire.SpecialType(mode: mode) ?? .fifo }
    /// The device numbers as CHECK's size carries them.
    var numbers: UInt64 { UInt64(major) << 32 | UInt64(minor) }
}

/// A CHECK message: what the sender has at a path, for the receiver to compare (`sync`).
struct CheckHeader: Equatable, Sendable {
    var kind: Wire.CheckKind
    var flags: UInt8 = 0
    var size: UInt64 = 0
    var mode: UInt32
    var mtimeSeconds: Int64
    var mtimeNanoseconds: UInt32
    var path: [UInt8]
    /// A symbolic link's target (empty otherwise).
    var target: [UInt8] = []
    /// With `CheckFlags.digest`: the file's digest.
    var digest: [UInt8] = []

    var applies: Bool { flags & Wire.CheckFlags.apply != 0 }
    var comparesContents: Bool { flags & Wire.CheckFlags.digest != 0 }
    /// The XATTRs before it are all the entry's (`sync-attributes`).
    var comparesXattrs: Bool { flags & Wire.CheckFlags.xattrs != 0 }
}

/// A SIGS message: signatures of blocks `first …` of the receiver's copy (the basis) of the file
/// being sent as a delta, cut into `blockSize` blocks; `size` is the basis's.
struct SignatureBatch: Equatable, Sendable {
    var blockSize: Int
    var size: UInt64
    var first: UInt64
    var signatures: [Delta.Signature]
}

/// A HAVE message: the answer to the oldest unanswered CHECK.
struct HaveAnswer: Equatable, Sendable {
    var status: Wire.HaveStatus
    /// `Wire.HaveDifference` bits: what differs (or, with `same`, the mode, extended attributes
    /// or owner it changed).
    var differences: UInt16 = 0
}

/// An OWNER message: who owns the next entry, by id and by name (empty with `--numeric-ids`).
/// A receiver maps the names to its own ids where it knows them, as rsync does.
struct EntryOwner: Equatable, Sendable {
    var uid: UInt32
    var gid: UInt32
    var user: String
    var group: String
}

/// What XATTR and OWNER messages said about the entry that follows them.
struct EntryAttributes: Equatable, Sendable {
    /// `user.*` extended attributes, in the order sent.
    var xattrs: [ExtendedAttribute] = []
    var owner: EntryOwner?
    /// Bytes of names and values, against `Wire.maxXattrBytesPerEntry`.
    var xattrBytes = 0
    /// A receiver's: the TOKEN sent before a resumable FILE or RANGE (`resume-token`).
    var resumeToken: [UInt8]?
    /// A sender's: `xattrs` was read from the entry (`-X`) and is all its `user.*` attributes,
    /// so a CHECK may carry them to compare (`sync-attributes`). Not sent.
    var xattrsRead = false

    var isEmpty: Bool { xattrs.isEmpty && owner == nil && resumeToken == nil }
}

/// One extended attribute: its full name (`user.…`) and value.
struct ExtendedAttribute: Equatable, Sendable {
    var name: String
    var value: [UInt8]
}

/// Which connection of a transfer over several this is (JOIN): the transfer's random id, the
/// connection's index and the number of connections; for a connection of a task group
/// (`groups`), which task of how many sends it, and the group's name.
struct TransferJoin: Hashable, Sendable {
    var id: [UInt8]
    var index: Int
    var count: Int
    /// Nil for a transfer of one sender; else the task group this connection's sender is part of.
    var group: TaskGroupJoin? = nil
}

/// The longer JOIN's part (`groups`): task `task` of `tasks` of the group named `name` (its
/// id, the JOIN's, is drawn from the name by the senders: every task names the same group).
struct TaskGroupJoin: Hashable, Sendable {
    var task: Int
    var tasks: Int
    /// 1 to `Wire.maxGroupNameBytes` bytes, none of them a control character.
    var name: [UInt8]
}

/// Bytes `start ..< start + length` of a file.
struct ByteRange: Hashable, Sendable, CustomStringConvertible {
    var start: UInt64
    var length: UInt64

    /// The end, or nil when `start + length` overflows.
    var end: UInt64? {
        let (sum, overflow) = start.addingReportingOverflow(length)
        return overflow ? nil : sum
    }

    func overlaps(_ other: ByteRange) -> Bool {
        guard let end, let otherEnd = other.end else { return true }
        return start < otherEnd && other.start < end
    }

    var description: String { "bytes \(start)+\(length)" }
}

/// A RANGE message: one range of a file, with the file's header.
struct RangeHeader: Equatable, Sendable {
    var range: ByteRange
    var entry: EntryHeader
}
