import Sluice

/// What became of one file or directory of a transfer, as the receiver answered it.
public enum TransferOutcome: Hashable, Sendable, CustomStringConvertible {
    /// Stored at its final name, its SHA-256 verified (a directory: created or already there).
    case stored
    /// Not stored, by the receiver's rule: `reason` is e.g. `exists`, `too large: …`,
    /// `invalid path: …`, `busy: …`. (Exit status 73 for a command-line tool.) A reason the
    /// peer sent arrives sanitized (`PeerText`), as do those of `failed` and of errors.
    case refused(reason: String)
    /// Not stored because something went wrong: a data error (digest or size mismatch,
    /// corrupt compressed data) or an I/O error on either side (disk full, read error,
    /// connection lost).
    case failed(reason: String, kind: TransferFailureKind)

    public var isStored: Bool { self == .stored }

    public var description: String {
        switch self {
        case .stored: return "stored"
        case .refused(let reason): return "refused: \(reason)"
        case .failed(let reason, _): return "failed: \(reason)"
        }
    }
}

/// Why a file failed: its data (exit status 65) or input/output (exit status 74).
public enum TransferFailureKind: Hashable, Sendable {
    /// The data did not verify: SHA-256 or size mismatch, corrupt compressed data.
    case data
    /// Reading, writing or the connection failed (disk full, I/O error, reset).
    case io
}

/// One entry of a transfer and its outcome.
public struct TransferFileResult: Hashable, Sendable {
    /// The relative path on the wire (`photos/2024/a.jpg`), `/`-separated: the name as it is
    /// on disk, which may hold any character but `/` and NUL, so show it through
    /// `PeerText.sanitized`. (A path refused as invalid, not UTF-8 say, is given sanitized.)
    public var path: String
    /// True for a directory entry.
    public var isDirectory: Bool
    /// The file's size, when known (a stream's size once it has been read).
    public var size: UInt64?
    /// Bytes that were not sent because the receiver already held them (resume).
    public var resumedBytes: UInt64
    public var outcome: TransferOutcome
    /// On a receiver, for a file sent in ranges over several connections: this answer is for
    /// one range, verified and written, and the file is not complete yet (the answer to its
    /// last range says whether it was stored).
    public var rangeOnly = false
    /// True for a symbolic or hard link (`TransferSendOptions.hardLinks`).
    public var isLink = false
    /// With `TransferSendOptions.sync`: what the receiver had at the name, and so what was (or,
    /// on a dry run, would be) done.
    public var change: TransferChange?
    /// Settled on a dry run: nothing was sent.
    public var dryRun = false
    /// Sent as a delta against the receiver's copy (the rsync algorithm).
    public var sentAsDelta = false
    /// On a sender, for a link: a symbolic link's target as written, or a hard link's other
    /// name (`isHardLink`).
    public var linkTarget: String?
    public var isHardLink = false
    /// A character or block device (`TransferSendOptions.devices`).
    public var isDevice = false
    /// A FIFO or socket (`TransferSendOptions.specials`).
    public var isSpecial = false

    public init(
        path: String, isDirectory: Bool = false, size: UInt64?, resumedBytes: UInt64 = 0, outcome: TransferOutcome
    ) {
        self.path = path
        self.isDirectory = isDirectory
        self.size = size
        self.resumedBytes = resumedBytes
        self.outcome = outcome
    }
}

/// What a sync found at the receiver for an entry.
public enum TransferChange: Hashable, Sendable {
    /// Nothing at the name: sent.
    case created
    /// Something else at the name: sent to replace it. What differed.
    case replaced(TransferDifferences)
    /// The same (a file: size and mtime): not sent. `.mode`, `.xattrs`, `.owner` or `.group`
    /// for what was set on it without data (or, on a dry run, would be).
    case unchanged(TransferDifferences)
}

/// What differed between the sender's entry and what the receiver had.
public struct TransferDifferences: OptionSet, Hashable, Sendable {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public static let size = TransferDifferences(rawValue: 1)
    public static let mtime = TransferDifferences(rawValue: 2)
    public static let mode = TransferDifferences(rawValue: 4)
    /// A file where a directory or link was, or the other way round.
    public static let kind = TransferDifferences(rawValue: 8)
    /// A link's target.
    public static let target = TransferDifferences(rawValue: 16)
    /// The contents, by digest (`TransferSendOptions.checksum`).
    public static let content = TransferDifferences(rawValue: 32)
    /// The `user.*` extended attributes (`TransferSendOptions.xattrs`); with `unchanged`, set
    /// without data.
    public static let xattrs = TransferDifferences(rawValue: 64)
    /// The owner, and the group (`TransferSendOptions.owners`); with `unchanged`, given
    /// without data.
    public static let owner = TransferDifferences(rawValue: 128)
    public static let group = TransferDifferences(rawValue: 256)
}

// MARK: Sender

/// How a `TransferSender` sends.
public struct TransferSendOptions: Sendable {
    /// Compress each file's data with raw deflate when the receiver supports it.
    public var compress: Bool
    /// The zlib level for `compress`, 0 to 9.
    public var compressionLevel: Int
    /// Worker threads that compress (pigz-style blocks; the output is the same for any
    /// count); nil: one per core.
    public var threads: Int?
    /// The largest DATA frame, and the unit the files are read in. Memory stays within a few
    /// chunks whatever the file sizes.
    public var chunkSize: ChunkSize
    /// Caps the bytes written to the connection per second.
    public var rateLimit: Int?
    /// Continue a file the receiver holds part of from an interrupted transfer.
    public var resume: Bool
    /// With `resume`: this sender's key (`ResumeKey`). Before each resumable file it sends a
    /// token only this key makes; a receiver continuing a partial written under that same
    /// token skips reading the held bytes back at both ends. Without a key (the default), or
    /// to a receiver without `resume-token`, held bytes are checked with SHA-256 at both
    /// ends. Set it only over an authenticated connection (TLS with a key or a code): a token
    /// seen on the wire vouches for bytes whoever sends them.
    public var resumeKey: ResumeKey?
    /// Send small files eagerly to a receiver that offers `eager`. Off, the sender speaks as
    /// one published before it; for tests of that.
    var eager = true
    /// With `resume`, offer `held-sha256` (held bytes checked apart with SHA-256). Off, the
    /// sender speaks as one published before it; for tests of that.
    var offersHeldSHA256 = true
    /// The digests offered, the preferred first (SHA-256 among them); for tests.
    var digests = TransferDigest.offered
    /// Which files of the sources are sent (all, by default).
    public var selection = FileSelection()
    /// What is read of the sources and sent besides names, bytes, modes and times: hard links,
    /// extended attributes, owners, devices, FIFOs and sockets (none by default).
    public var sourceOptions = SourceOptions()
    /// Ask the receiver what it has first (`--sync`): a file of the same size and mtime is not
    /// sent, one that differs replaces it (atomically), a link or directory the same is left.
    /// Without a receiver offering it, files it has are refused as before.
    public var sync = false
    /// With `sync` (`--checksum`): compare files by digest (the agreed one, computed on both
    /// sides, on workers), not by size and mtime: a file with the same contents is not sent,
    /// and gets the sender's mtime and mode.
    public var checksum = false
    /// With `sync` (`--dry-run`): only ask; every entry is reported with what would be done.
    public var dryRun = false
    /// With `sync`: send a changed file whole, never as a delta against the receiver's copy
    /// (`--whole-file`). Off, a changed file of 1 MiB or more that replaces a file is sent as
    /// the blocks that changed and references to the rest (the rsync algorithm), where the
    /// receiver offers it.
    public var wholeFile = false
    /// With `sync` (`--delete`): once every entry is stored, the receiver removes what is under
    /// each directory sent that the sender does not have (never the directory itself, never
    /// outside it, never through a link). Nothing is removed when an entry was not stored.
    public var delete = false

    public init(
        compress: Bool = false, compressionLevel: Int = 6, threads: Int? = nil, chunkSize: ChunkSize = .default,
        rateLimit: Int? = nil,
        resume: Bool = true
    ) {
        precondition(Deflate.levels.contains(compressionLevel), "compression level must be 0...9")
        precondition(rateLimit.map { $0 > 0 } ?? true, "rate limit must be positive")
        self.compress = compress
        precondition(threads.map { WorkerPool.threadCounts.contains($0) } ?? true, "threads must be 1...256")
        self.compressionLevel = compressionLevel
        self.threads = threads
        self.chunkSize = chunkSize
        self.rateLimit = rateLimit
        self.resume = resume
    }

    // The six source options one at a time, for callers written before `sourceOptions`: each
    // reads and sets its member of `sourceOptions`, which holds them.

    /// Forwards to `sourceOptions`: `SourceOptions.hardLinks`.
    public var hardLinks: Bool {
        get { sourceOptions.contains(.hardLinks) }
        set { setSourceOption(.hardLinks, newValue) }
    }
    /// Forwards to `sourceOptions`: `SourceOptions.xattrs`.
    public var xattrs: Bool {
        get { sourceOptions.contains(.xattrs) }
        set { setSourceOption(.xattrs, newValue) }
    }
    /// Forwards to `sourceOptions`: `SourceOptions.owners`.
    public var owners: Bool {
        get { sourceOptions.contains(.owners) }
        set { setSourceOption(.owners, newValue) }
    }
    /// Forwards to `sourceOptions`: `SourceOptions.numericIDs`.
    public var numericIDs: Bool {
        get { sourceOptions.contains(.numericIDs) }
        set { setSourceOption(.numericIDs, newValue) }
    }
    /// Forwards to `sourceOptions`: `SourceOptions.devices`.
    public var devices: Bool {
        get { sourceOptions.contains(.devices) }
        set { setSourceOption(.devices, newValue) }
    }
    /// Forwards to `sourceOptions`: `SourceOptions.specials`.
    public var specials: Bool {
        get { sourceOptions.contains(.specials) }
        set { setSourceOption(.specials, newValue) }
    }

    /// Puts `option` into `sourceOptions` or takes it out.
    private mutating func setSourceOption(_ option: SourceOptions, _ on: Bool) {
        if on { sourceOptions.insert(option) } else { sourceOptions.remove(option) }
    }
}

/// What a sender is to send.
public enum TransferSource {
    /// A file or a directory (sent recursively under its base name, as `scp -r`).
    case path(String)
    /// A stream of unknown length (standard input, a pipe) stored under `name`, a relative
    /// path, with permission bits `mode`. Not resumable.
    case stream(ReadStream, name: String, mode: UInt32 = 0o644)
}

/// A snapshot of a running transfer, for progress displays.
public struct TransferProgress: Hashable, Sendable {
    /// File bytes done: sent, or skipped because the receiver had them (resume).
    public var bytesDone: UInt64
    /// The sum of the known file sizes (a stream counts once it has ended).
    public var bytesTotal: UInt64
    /// Bytes written to the connection, protocol and compression included.
    public var bytesSent: UInt64
    /// Files answered (stored, refused or failed) and files in all.
    public var filesDone: Int
    public var filesTotal: Int
    /// The file being sent, if any.
    public var currentPath: String?
    /// Seconds since the transfer started.
    public var seconds: Double
}

// MARK: Receiver

/// How a `TransferReceiver` stores what it receives.
public struct TransferReceiveOptions: Sendable {
    /// Replace existing files. Without it an existing file is never replaced: the sender is
    /// told `refused: exists`.
    public var overwrite: Bool
    /// Refuse files larger than this many bytes.
    public var maxSize: UInt64?
    /// Keep the data of an interrupted file under its temporary name and continue it when
    /// the same file (path, size, mtime) is sent again.
    public var resume: Bool
    /// Make each file's data durable before it takes its final name and is answered
    /// `stored`: verified files are flushed in batches (one `syncfs` per batch of up to 64
    /// files or 64 MiB) and renamed after their batch's flush, and the file system is flushed
    /// once more before the session's goodbye. Off, files are renamed as soon as they are
    /// verified and nothing is flushed.
    public var fsync: Bool
    /// Drop a connection that sends nothing for this long; nil never does.
    public var idleTimeout: Duration?
    /// Sessions served at once. A connection beyond the limit gets an ERROR message
    /// (`busy: …`) and is closed at once; the sender may try again later. Each connection of
    /// a transfer over several counts.
    public var maxSessions: Int
    /// Offer the `streams` capability: accept one transfer over several connections, its
    /// large files in ranges written in place. Off, the receiver speaks as one without it
    /// (version 1 as first published), and a `--streams` sender uses one connection.
    public var streams: Bool
    /// Write files of 1 MiB or more with `O_DIRECT`, from memory to the disk without copying
    /// them into the page cache: less CPU per byte, and a steady cost on machines whose memory
    /// for new page-cache pages comes slowly (virtual machines whose host takes back the memory
    /// they free), at the price of leaving the file out of the cache and of one write at a time
    /// reaching the disk per file. Where the file system has no direct I/O the file is written
    /// as usual.
    public var directIO: Bool
    /// Give files and directories the sender's permission bits as sent (`rwxrwxrwx`, as rsync's
    /// `-p` does). Off, the sender's bits are masked by `umask`, as `cp` without `-p` does: a
    /// file sent as 0666 is stored 0644 under umask 022. Setuid, setgid and sticky are never
    /// kept either way: a sender does not choose what runs with its owner's rights here.
    public var keepsModes: Bool
    /// The file-creation mask whose bits are taken from the sender's modes unless `keepsModes`;
    /// nil: the process's, read (without changing it) when the receiver is created.
    public var umask: UInt32?
    /// Offer the `eager` capability (a small file's data follows its FILE at once). Off, the
    /// receiver speaks as one published before it; for tests of that.
    var eager = true
    /// Offer `sync` (`receive --sync`): a sender may ask what is here first (CHECK), give an
    /// entry that is the same its mode, times, owner and attributes, and replace one that
    /// differs from its own (`send --sync`: FILE, LINK and SPECIAL flagged replace) even without
    /// `overwrite`. Off (the default), the receiver stores new entries only: an entry flagged
    /// replace is refused (`exists`, naming `receive --sync`) unless `overwrite`, and a CHECK
    /// ends the session.
    public var sync = false
    /// Offer `delete` (`receive --delete`, which implies `sync`): a sender may remove what is
    /// here below a directory it sent and no longer has (`send --delete`: PRUNE). Off (the
    /// default), every PRUNE is refused, naming `receive --delete`, and nothing is removed.
    public var delete = false {
        didSet { if delete { sync = true } }
    }
    /// Give files the owner and group the sender sends (`send --owner`), by name where this
    /// machine knows it, else by number: offered only when the receiver runs as root.
    public var keepsOwners = true
    /// Offer `links`, `holes`, `xattrs` and `specials`. Off, the receiver speaks as one
    /// published before them; for tests of that.
    var offersMetadata = true
    /// Make the device files a sender sends (`send -D`), when running as root (`mknod` needs
    /// it). Off by default: a device node is a door to the hardware (a disk, the memory) for
    /// whoever may open it, so a receiver makes one only when told to (`receive --devices`),
    /// as rsync's daemon does only when configured. FIFOs and sockets are made either way.
    public var makesDevices = false
    /// Offer `delta` (with `sync`); off for tests of a receiver without it.
    var offersDelta = true
    /// Offer `sync-attributes` (with `sync`); off for tests of a receiver without it.
    var offersSyncAttributes = true
    /// Offer `batch` (with `eager`): off only in tests, to play a receiver published before it.
    var offersBatch = true
    /// How long a task group (`send --group`) outlives its last connection, its unfinished
    /// files open and their verified ranges remembered, for the group's other tasks (or a task
    /// rerun by the scheduler) to go on with; past it (found at the next JOIN or session end,
    /// or when the receiver stops), its unfinished files are closed and kept for a resume.
    public var taskGroupLinger: Duration = .seconds(3600)
    /// The most task groups a receiver keeps at once: a new one past it puts an end to the
    /// one idle longest (or is told `busy` when every one has a connection).
    public var maxTaskGroups = 8

    public init(
        overwrite: Bool = false, maxSize: UInt64? = nil, resume: Bool = true, fsync: Bool = true,
        idleTimeout: Duration? = .seconds(300), maxSessions: Int = 64, streams: Bool = true,
        directIO: Bool = false, keepsModes: Bool = false, umask: UInt32? = nil
    ) {
        precondition(umask.map { $0 <= 0o777 } ?? true, "umask must be within 0o777")
        self.keepsModes = keepsModes
        self.umask = umask
        self.streams = streams
        self.directIO = directIO
        precondition(maxSessions >= 1, "maxSessions must be at least 1")
        self.maxSessions = maxSessions
        self.overwrite = overwrite
        self.maxSize = maxSize
        self.resume = resume
        self.fsync = fsync
        self.idleTimeout = idleTimeout
    }
}

/// What one connection to a receiver did, reported when it ends.
public struct TransferSessionReport: Sendable {
    /// Numbers sessions from 1 in the order they were accepted.
    public var id: Int
    /// The peer's address (or the name given to `serve`).
    public var peer: String
    /// The answers the peer's entries got, counted (each was reported as it happened, by
    /// `TransferReceiverEvent.entry`): a session keeps counts, not a record per answer, so that
    /// a sender of a million entries costs the receiver no memory for them.
    public var tally: TransferTally
    /// File bytes written to disk in this session (resumed prefixes excluded).
    public var bytes: UInt64
    public var seconds: Double
    /// Why the session ended early: a protocol violation, a reset, an idle timeout; nil when
    /// the sender said goodbye.
    public var error: SluiceError?
    /// For a connection of a transfer over several (`send --streams`): which one it was.
    public var streamIndex: Int? = nil
    /// For a connection of a task group (`send --group`): what it was part of, as the session
    /// ended.
    public var taskGroup: TaskGroupReport? = nil

    /// Files stored.
    public var files: Int { tally.files }
}

/// A receiver's session that was part of a task group (`send --group`): which group and task,
/// and the group as the session ended.
public struct TaskGroupReport: Sendable, Equatable {
    /// The group's name, as its JOIN carried it (printable: no control characters).
    public var name: String
    /// Which task of how many the session's sender said it was.
    public var task: Int
    public var tasks: Int
    /// The group's files received in ranges that are not complete yet (ranges still to come).
    public var incompleteFiles: Int
    /// The tasks whose ranges of the group's files were verified so far.
    public var rangeTasks: [Int]
}

/// The answers of a receiver's session, counted by kind and outcome.
public struct TransferTally: Equatable, Sendable {
    /// Files stored (links, devices, FIFOs and sockets among them; not ranges alone).
    public var files = 0
    /// Directories made (or found there).
    public var directories = 0
    /// Among `files`: links, device files, FIFOs and sockets.
    public var links = 0
    public var devices = 0
    public var specials = 0
    /// Ranges of a file sent over several connections, verified and written before the file
    /// was complete.
    public var ranges = 0
    /// Entries refused (they exist, or are not allowed here), failed for their data (a digest
    /// that did not match), and failed otherwise (input/output, aborted).
    public var refused = 0
    public var failedData = 0
    public var failedIO = 0
    /// Bytes not sent again because the receiver held them from an interrupted transfer.
    public var resumedBytes: UInt64 = 0

    public init() {}

    /// Every answer counted: stored (files, directories, ranges), refused or failed.
    public var answers: Int { files + directories + ranges + refused + failedData + failedIO }

    /// Counts one answer.
    public mutating func add(_ result: TransferFileResult) {
        switch result.outcome {
        case .stored:
            if result.isDirectory {
                directories += 1
            } else if result.rangeOnly {
                ranges += 1
            } else {
                files += 1
            }
            if result.isLink { links += 1 }
            if result.isDevice { devices += 1 }
            if result.isSpecial { specials += 1 }
            resumedBytes &+= result.resumedBytes
        case .refused: refused += 1
        case .failed(_, .data): failedData += 1
        case .failed(_, .io): failedIO += 1
        }
    }

    /// Adds another session's counts.
    public mutating func add(_ other: TransferTally) {
        files += other.files
        directories += other.directories
        links += other.links
        devices += other.devices
        specials += other.specials
        ranges += other.ranges
        refused += other.refused
        failedData += other.failedData
        failedIO += other.failedIO
        resumedBytes &+= other.resumedBytes
    }
}

/// Something that happened in a receiver session, as it happens.
public enum TransferReceiverEvent: Sendable {
    /// A connection was accepted.
    case sessionStarted(id: Int, peer: String)
    /// An entry was answered.
    case entry(sessionID: Int, TransferFileResult)
    /// A problem that did not fail an entry (a directory's attributes could not be set).
    case warning(sessionID: Int, String)
    /// A path removed (`send --delete`): the sender no longer has it.
    case removed(sessionID: Int, String)
}
