import Sluice

/// The receiving side of one transfer over several connections (`streams`): the sessions that
/// joined it under its id, and the files it receives in ranges, each shared by the sessions
/// whose ranges it holds.
///
/// The first connection (index 0) creates the transfer; the others join it by its id, each
/// index once, no more than the count it announced. A range is admitted only inside its file's
/// announced size, apart from every other range of that file in the transfer, and for the same
/// version of the file (size, mode, mtime): so nothing is written outside the ranges announced,
/// and two transfers never share a file (the temporary file's lock refuses the second).
///
/// A task group (`send --group`: a JOIN naming the group) is joined by the connections of
/// several senders, each with its own indices and count: any of them creates it, and it
/// outlives them (`idleSince`) so that the ranges of its files that different tasks send, at
/// once or one after another, are put together; a range announced before whose connection
/// ended may be announced again (a task rerun), and resumes what it holds.
final class TransferGroup {
    let id: [UInt8]
    let count: Int
    /// The task group's name and its count of tasks; nil for a transfer of one sender.
    let name: [UInt8]?
    let tasks: Int
    /// The tasks seen, by session; and those whose ranges were verified.
    private(set) var taskOfSession: [Int: Int] = [:]
    private(set) var tasksSeen: Set<Int> = []
    var rangeTasks: Set<Int> = []
    /// When (monotonic nanoseconds) the task group's last connection ended; nil while one runs.
    private(set) var idleSince: UInt64?
    /// Indices joined so far, and the sessions (by id) still running.
    private(set) var indices: Set<Int> = []
    private(set) var members: Set<Int> = []
    /// Files received in ranges, by relative path.
    var files: [String: SharedFile] = [:]
    /// The paths the transfer's connections CHECKed, for `--delete` (PRUNE).
    var named: Set<String> = []
    /// The most unfinished files one transfer holds open at once: each holds a descriptor
    /// until it is stored or the transfer ends, and a peer must not exhaust them.
    static let maxOpenFiles = 64

    /// Files with ranges still to come (their temporary files open).
    var openFiles: Int { files.values.filter { !$0.finished }.count }

    init(id: [UInt8], count: Int, group: TaskGroupJoin? = nil) {
        self.id = id
        self.count = count
        name = group?.name
        tasks = group?.tasks ?? 1
    }

    var isTaskGroup: Bool { name != nil }

    /// Files of the task group with ranges still to come, and not failed.
    var incompleteFiles: Int { files.values.filter { !$0.finished }.count }

    /// Admits session `session` as connection `index`, or says why not.
    func admit(_ join: TransferJoin, session: Int) -> String? {
        if let name {
            guard let group = join.group, group.name == name else { return "JOIN: transfer id already in use" }
            guard group.tasks == tasks else {
                return "JOIN: task group \(PeerText.sanitized(String(decoding: name, as: UTF8.self))) has "
                    + "\(tasks) tasks, not \(group.tasks)"
            }
            members.insert(session)
            taskOfSession[session] = group.task
            tasksSeen.insert(group.task)
            idleSince = nil
            return nil
        }
        guard join.group == nil else { return "JOIN: transfer id already in use" }
        guard join.count == count else {
            return "JOIN: this transfer has \(count) connections, not \(join.count)"
        }
        guard !indices.contains(join.index) else { return "JOIN: connection \(join.index) already joined" }
        indices.insert(join.index)
        members.insert(session)
        return nil
    }

    /// Session `session` ended; true when it was the last.
    func leave(_ session: Int) -> Bool {
        members.remove(session)
        if members.isEmpty && isTaskGroup { idleSince = monotonicNanoseconds() }
        return members.isEmpty
    }

    /// The report of a session of this task group (nil for a transfer of one sender).
    func report(of session: Int) -> TaskGroupReport? {
        guard let name, let task = taskOfSession[session] else { return nil }
        return TaskGroupReport(
            name: PeerText.sanitized(String(decoding: name, as: UTF8.self)), task: task, tasks: tasks,
            incompleteFiles: incompleteFiles, rangeTasks: rangeTasks.sorted())
    }
}

/// A file received in ranges by the sessions of one transfer: its temporary file (opened once,
/// shared), the ranges announced for it, the bytes each holds, and which are verified.
final class SharedFile {
    let relative: String
    let header: EntryHeader
    private(set) var opened: OpenedFile?
    private(set) var failure: EntryRejection?
    private var waiting: [() -> Void] = []
    /// Every range announced in this transfer, and the bytes of each now in the file (from
    /// its start, verified or not).
    private(set) var ranges: [ByteRange: UInt64] = [:]
    /// Bytes held by an interrupted transfer, per range, found when the file was opened.
    private var held: [ByteRange: UInt64] = [:]
    private(set) var verified: Set<ByteRange> = []
    /// Ranges a session is receiving now.
    private(set) var active: Set<ByteRange> = []
    /// Ranges announced again after their connection ended (a task group's): what they hold
    /// is checked, never vouched for by a TOKEN.
    private(set) var readmitted: Set<ByteRange> = []
    /// The whole file's digest the verified ranges carried (they must all carry the same).
    private(set) var wholeDigest: [UInt8]?
    /// Ranges may be announced again once their connection ended (a task group's file).
    var readmits = false
    /// The file went to its final name (or failed for good): nothing more is admitted.
    var finished = false
    /// The TOKEN of the range that opened it (`resume-token`): a range's held bytes are vouched
    /// for only when its own TOKEN is this one and the partial carried it.
    let token: [UInt8]?

    init(relative: String, header: EntryHeader, token: [UInt8]? = nil) {
        self.relative = relative
        self.header = header
        self.token = token
    }

    /// Checks `range` of `header` against what this transfer announced of the file, and
    /// records it; returns the refusal when it does not belong.
    func admit(_ range: ByteRange, of header: EntryHeader) -> EntryRejection? {
        if let failure { return failure }
        guard !finished else { return .refused(.invalidRange, "\(range): the file is already complete") }
        guard header.size == self.header.size, header.mode == self.header.mode,
            header.mtimeSeconds == self.header.mtimeSeconds,
            header.mtimeNanoseconds == self.header.mtimeNanoseconds
        else { return .refused(.invalidRange, "\(range) of another version of the file (size, mode or mtime)") }
        if let other = ranges.keys.first(where: { $0.overlaps(range) }) {
            // A range of a task group whose connection ended, announced again: it goes on from
            // what it holds (all of it, once verified: checked again, not sent again).
            guard readmits, other == range, !active.contains(range) else {
                return .refused(.invalidRange, "overlapping ranges: \(range) overlaps \(other)")
            }
            let holds = verified.remove(range) != nil ? range.length : (ranges[range] ?? 0)
            held[range] = holds
            readmitted.insert(range)
            active.insert(range)
            return nil
        }
        ranges[range] = 0
        active.insert(range)
        return nil
    }

    /// Whether `range`'s held bytes may be vouched for by a TOKEN (not a range announced again).
    func mayVouch(_ range: ByteRange) -> Bool { !readmitted.contains(range) }

    /// Records the whole file's digest a verified range carried; false when an earlier range
    /// carried another (the tasks read different files).
    func agree(on digest: [UInt8]) -> Bool {
        guard let wholeDigest else {
            wholeDigest = digest
            return true
        }
        return wholeDigest == digest
    }

    /// Calls `ready` once the temporary file is open (or failed to open).
    func whenOpen(_ ready: @escaping () -> Void) {
        if opened != nil || failure != nil { ready() } else { waiting.append(ready) }
    }

    func didOpen(_ result: Result<(OpenedFile, [ByteRange: UInt64]), EntryRejection>) {
        switch result {
        case .success(let (file, held)):
            opened = file
            self.held = held
        case .failure(let rejection):
            failure = rejection
            finished = true
        }
        let ready = waiting
        waiting.removeAll()
        for call in ready { call() }
    }

    /// The bytes of `range` held by an interrupted transfer (0 when none).
    func heldBytes(of range: ByteRange) -> UInt64 { held[range] ?? 0 }

    /// The bytes of the file's ranges held by an interrupted transfer.
    var heldTotal: UInt64 { ranges.keys.reduce(0) { $0 + heldBytes(of: $1) } }

    /// The range's progress: `bytes` from its start are in the file.
    func note(_ range: ByteRange, holds bytes: UInt64) {
        ranges[range] = bytes
        active.remove(range)
    }

    /// The range verified; true when the verified ranges now cover the whole file (they are
    /// disjoint and inside it, so covering means their lengths add up to its size).
    func verify(_ range: ByteRange) -> Bool {
        ranges[range] = range.length
        verified.insert(range)
        active.remove(range)
        return verified.reduce(0) { $0 + $1.length } == header.size
    }

    /// A verified range turned out bad after all (the whole file did not match): forget it.
    func forgetVerified() {
        for range in verified { ranges[range] = 0 }
        verified.removeAll()
        wholeDigest = nil
    }

    /// What to record for a resume: every range with the bytes it holds, held ranges not
    /// announced this time included (unless they overlap one that was).
    var progress: [ByteRange: UInt64] {
        var all = ranges
        for (range, bytes) in held where !all.keys.contains(where: { $0.overlaps(range) }) { all[range] = bytes }
        return all
    }
}
