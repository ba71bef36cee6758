import Sluice
import SluiceTransfer

/// How the transfer commands word what they print. Text from the other end (paths, reasons,
/// errors that quote them) goes through `PeerText.sanitized` before it is printed.
enum TransferText {
    /// `1.20MiB`, or `1.20MiB, 512KiB resumed`.
    static func size(_ result: TransferFileResult) -> String {
        if result.isLink { return "link" }
        if result.isDevice { return "device" }
        if result.isSpecial { return "special" }
        var text = result.size.map { Format.bytes($0) } ?? "?"
        if result.resumedBytes > 0 { text += ", \(Format.bytes(result.resumedBytes)) resumed" }
        return text
    }
}

extension TransferText {
    /// `result` as `rsync -i` prints a change: `>f+++++++++ path` for a file sent new,
    /// `>f.st...... path` for one that replaced another (size and time differed), `.f...p.....`
    /// for one only given its mode, `.f......x` for one only given its extended attributes
    /// (`.d....og...` a directory its owner and group), `cd+++++++++ dir/`,
    /// `cL+++++++++ link -> target`, `hf+++++++++ name => other`, `cD+++++++++ device`,
    /// `cS+++++++++ fifo` (a FIFO or socket). Nil for what was left as it was.
    static func itemized(_ result: TransferFileResult) -> String? {
        let path = PeerText.sanitized(result.path)
        let created = "+++++++++"
        let kind =
            result.isDirectory
            ? "d"
            : result.isLink && !result.isHardLink ? "L" : result.isDevice ? "D" : result.isSpecial ? "S" : "f"
        // Made, not written: rsync's `c` for a directory, a link, a device or a special.
        let made = result.isLink || result.isDevice || result.isSpecial
        let name = result.isDirectory ? path + "/" : path
        let target = result.linkTarget.map { PeerText.sanitized($0) }
        let suffix =
            result.isHardLink ? " => \(target ?? "")" : result.isLink ? " -> \(target ?? "")" : ""
        if result.isHardLink {
            if case .unchanged = result.change { return nil }
            return "hf\(created) \(name)\(suffix)"
        }
        switch result.change {
        case nil, .created?:
            let type = result.isDirectory || made ? "c" : ">"
            return "\(type)\(kind)\(created) \(name)\(suffix)"
        case .replaced(let differences)?:
            if differences.contains(.kind) || made {
                return "\(made ? "c" : ">")\(kind)\(created) \(name)\(suffix)"
            }
            return ">\(kind)\(letters(differences)) \(name)"
        case .unchanged(let differences)?:
            guard !differences.isDisjoint(with: updatedInPlace) else { return nil }
            return ".\(kind)\(letters(differences)) \(name)"
        }
    }

    /// rsync's nine letters after the type: checksum, size, time, permissions, owner, group,
    /// (unused), ACL, xattrs.
    private static func letters(_ differences: TransferDifferences) -> String {
        func letter(_ difference: TransferDifferences, _ name: String) -> String {
            differences.contains(difference) ? name : "."
        }
        return letter(.content, "c") + letter(.size, "s") + letter(.mtime, "t") + letter(.mode, "p")
            + letter(.owner, "o") + letter(.group, "g") + ".." + letter(.xattrs, "x")
    }

    /// What a sync sets on an entry left unsent (without `--checksum`'s mtime): its mode,
    /// extended attributes, owner and group.
    static let updatedInPlace = TransferResultCounts.inPlace
}

/// The progress line of `sluice send`, redrawn ten times a second on stderr: files done of
/// all (and, for a tree, files a second), then bytes, time, rate, and with the total known a
/// bar, percent and ETA (as `copy`'s), then the file being sent where the terminal is wide.
final class TransferProgressDisplay {
    private let sender: any TransferProgressSource
    private let output: (String) -> Void
    private var timer: LoopTimer?
    private var samples: [(time: Double, bytes: UInt64, files: Int)] = []
    /// True while a line is drawn without its newline.
    private var open = false

    /// False when a stream of unknown length is among the sources: no bar, percent or ETA.
    private let sizeKnown: Bool

    init(sender: any TransferProgressSource, sizeKnown: Bool, output: @escaping (String) -> Void) {
        self.sender = sender
        self.sizeKnown = sizeKnown
        self.output = output
    }

    func start(on loop: EventLoop) {
        timer = loop.schedule(after: ProgressDisplay.interval, repeating: ProgressDisplay.interval) { [weak self] in
            self?.draw()
        }
    }

    /// The columns the current file's name may take, on a terminal of at least
    /// `currentFileMinimumWidth` columns.
    static let currentFileColumns = 24
    static let currentFileMinimumWidth = 100

    /// The line for `progress`, `rate` bytes and `fileRate` files a second, within `width`
    /// columns.
    static func render(
        _ progress: TransferProgress, rate: Double, fileRate: Double = 0, finished: Bool, sizeKnown: Bool, width: Int
    ) -> String {
        var files = "\(progress.filesDone)/\(progress.filesTotal) files"
        if progress.filesTotal > 1 && fileRate > 0 { files += " \(Int(fileRate.rounded()))/s" }
        var current = ""
        if !finished, width >= currentFileMinimumWidth, progress.filesTotal > 1, let path = progress.currentPath {
            current = " " + shortened(PeerText.sanitized(path), to: currentFileColumns)
        }
        let snapshot = ProgressSnapshot(
            sourceBytes: progress.bytesDone, elapsedSeconds: progress.seconds, rate: rate,
            sourceSize: sizeKnown ? progress.bytesTotal : nil, stage: nil, bottleneck: nil, finished: finished)
        let room = max(20, width - files.count - 1 - current.count)
        return files + " " + ProgressLine.render(snapshot, width: room) + current
    }

    /// `path`, or its end after `…` when longer than `columns` characters.
    static func shortened(_ path: String, to columns: Int) -> String {
        guard path.count > columns, columns > 1 else { return path }
        return "…" + path.suffix(columns - 1)
    }

    private func draw() {
        let progress = sender.progress
        samples.append((progress.seconds, progress.bytesDone, progress.filesDone))
        while let first = samples.first, progress.seconds - first.time > 2, samples.count > 2 { samples.removeFirst() }
        let oldest = samples[0]
        let span = progress.seconds - oldest.time
        let rate = span > 0 ? Double(progress.bytesDone - oldest.bytes) / span : 0
        let fileRate = span > 0 ? Double(progress.filesDone - oldest.files) / span : 0
        show(
            Self.render(
                progress, rate: rate, fileRate: fileRate, finished: false, sizeKnown: sizeKnown,
                width: Terminal.columns(of: 2)),
            final: false)
    }

    /// Clears the drawn line so a message can be printed; the next tick redraws it.
    func clearLine() {
        guard open else { return }
        output("\r\u{1B}[K")
        open = false
    }

    /// Stops redrawing; draws the final state with the average rate.
    func finish(_ summary: TransferSummary) {
        timer?.cancel()
        timer = nil
        var progress = sender.progress
        progress.seconds = summary.seconds
        let rate = summary.seconds > 0 ? Double(progress.bytesDone) / summary.seconds : 0
        let fileRate = summary.seconds > 0 ? Double(progress.filesDone) / summary.seconds : 0
        show(
            Self.render(
                progress, rate: rate, fileRate: fileRate, finished: true, sizeKnown: sizeKnown,
                width: Terminal.columns(of: 2)),
            final: true)
    }

    private func show(_ line: String, final: Bool) {
        open = !final
        output("\r" + line + "\u{1B}[K" + (final ? "\n" : ""))
    }
}

/// The report of `sluice send --stats`.
struct SendStatsReport {
    var destination: String
    var summary: TransferSummary
    var chunkSize: ChunkSize
    var compressionLevel: Int?
    var rateLimit: Int?
    /// With `--streams`: the bytes written to each connection used.
    var streamBytes: [UInt64]?
    /// With `--shard`: which, how it was balanced, and (by bytes) what it held; with a group,
    /// the group's name.
    var shard: Shard?
    var shardByBytes = false
    var share: ShardShare?
    var group: String?

    init(
        summary: TransferSummary, destination: String, options: SendOptions, streamBytes: [UInt64]? = nil,
        share: ShardShare? = nil
    ) {
        self.summary = summary
        shard = options.shard
        shardByBytes = options.shardByBytes
        self.share = share
        group = options.group?.name
        self.streamBytes = streamBytes
        self.destination = destination
        chunkSize = options.chunkSize
        compressionLevel = options.compressionLevel
        rateLimit = options.rateLimit
    }

    private var count: (refused: Int, failed: Int) {
        // (A long watch lists some of them and counts the others.)
        var refused = summary.forgotten.refused
        var failed = summary.forgotten.failed
        for result in summary.results {
            switch result.outcome {
            case .stored: break
            case .refused: refused += 1
            case .failed: failed += 1
            }
        }
        return (refused, failed)
    }

    /// File bytes a second, resumed bytes excluded.
    var rate: Double { summary.seconds > 0 ? Double(summary.bytes) / summary.seconds : 0 }

    /// With `--sync`: entries left as they were, and entries that replaced another (nil
    /// without a sync).
    private var synced: (unchanged: Int, updated: Int, replaced: Int)? {
        let changes = summary.results.compactMap(\.change)
        let forgotten = summary.forgotten
        guard !changes.isEmpty || forgotten.created + forgotten.replaced + forgotten.unchanged > 0 else { return nil }
        let unchanged = changes.filter { if case .unchanged = $0 { true } else { false } }.count
        let updated = changes.filter {
            if case .unchanged(let differences) = $0 {
                !differences.isDisjoint(with: TransferText.updatedInPlace)
            } else {
                false
            }
        }.count
        let replaced = changes.filter { if case .replaced = $0 { true } else { false } }.count
        return (forgotten.unchanged + unchanged, forgotten.updatedInPlace + updated, forgotten.replaced + replaced)
    }

    var json: String {
        let (refused, failed) = count
        var fields: [(String, String)] = [
            ("destination", Format.jsonString(destination)),
            ("files", "\(summary.files)"),
            ("links", "\(summary.links)"),
            ("devices", "\(summary.devices)"),
            ("specials", "\(summary.specials)"),
            ("directories", "\(summary.directories)"),
            ("refused", "\(refused)"),
            ("failed", "\(failed)"),
            ("bytes", "\(summary.bytes)"),
            ("bytes_sent", "\(summary.bytesSent)"),
            ("bytes_received", "\(summary.bytesReceived)"),
            ("resumed_bytes", "\(summary.resumedBytes)"),
            ("vouched_bytes", "\(summary.vouchedBytes)"),
            ("hole_bytes", "\(summary.holeBytes)"),
            ("matched_bytes", "\(summary.matchedBytes)"),
            ("seconds", Format.jsonNumber(summary.seconds)),
            ("rate", Format.jsonNumber(rate)),
            ("chunk_size", "\(chunkSize.bytes)"),
        ]
        if let digest = summary.digest { fields.append(("digest", Format.jsonString(digest.rawValue))) }
        if let synced {
            fields.append(("unchanged", "\(synced.unchanged)"))
            fields.append(("updated", "\(synced.updated)"))
            fields.append(("replaced", "\(synced.replaced)"))
            fields.append(("deltas", "\(summary.deltas)"))
            fields.append(("removed", "\(summary.removedCount)"))
        }
        if let compressionLevel { fields.append(("compression_level", "\(compressionLevel)")) }
        if let rateLimit { fields.append(("rate_limit", "\(rateLimit)")) }
        if let streamBytes {
            fields.append(("streams", "\(streamBytes.count)"))
            fields.append(("stream_bytes", "[" + streamBytes.map(String.init).joined(separator: ",") + "]"))
        }
        fields += shardFields
        return "{" + fields.map { "\(Format.jsonString($0.0)):\($0.1)" }.joined(separator: ",") + "}"
    }

    /// The shard's fields of the JSON report (none without `--shard`).
    private var shardFields: [(String, String)] {
        guard let shard else { return [] }
        var fields: [(String, String)] = [
            ("shard", Format.jsonString(shard.description)),
            ("shard_by", Format.jsonString(shardByBytes ? "bytes" : "paths")),
        ]
        if let group { fields.append(("group", Format.jsonString(group))) }
        if let share {
            fields.append(("shard_files", "\(share.files)"))
            fields.append(("shard_bytes", "\(share.bytes)"))
            fields.append(("shard_ranges", "\(share.ranges)"))
            fields.append(("total_files", "\(share.totalFiles)"))
            fields.append(("total_bytes", "\(share.totalBytes)"))
            fields.append(("split_files", "\(share.splitFiles)"))
        }
        let sent = summary.results.filter { !$0.isDirectory && $0.outcome == .stored }.map {
            Format.jsonString($0.path)
        }
        fields.append(("shard_paths", "[" + sent.joined(separator: ",") + "]"))
        return fields
    }

    var text: String {
        let (refused, failed) = count
        var rows: [(String, String)] = [
            ("destination", destination),
            ("files", "\(summary.files) stored, \(refused) refused, \(failed) failed"),
            ("links", "\(summary.links) (among the files)"),
            ("specials", "\(summary.devices) devices, \(summary.specials) FIFOs and sockets (among the files)"),
            ("directories", "\(summary.directories)"),
            ("bytes", "\(summary.bytes) (\(Format.bytes(summary.bytes)))"),
            ("bytes sent", "\(summary.bytesSent) (\(Format.bytes(summary.bytesSent)), on the wire)"),
            ("bytes received", "\(summary.bytesReceived) (\(Format.bytes(summary.bytesReceived)), answers)"),
            ("resumed bytes", "\(summary.resumedBytes) (\(Format.bytes(summary.resumedBytes)))"),
            ("vouched bytes", "\(summary.vouchedBytes) (of the resumed, not read back: the resume key vouched)"),
            ("holes", "\(summary.holeBytes) (\(Format.bytes(summary.holeBytes)), not sent)"),
            ("matched bytes", "\(summary.matchedBytes) (\(Format.bytes(summary.matchedBytes)), the receiver's own)"),
            ("seconds", Format.fixed(summary.seconds, 3)),
            ("rate", Format.rate(rate)),
            ("chunk size", "\(chunkSize) (\(chunkSize.bytes) bytes)"),
        ]
        if let digest = summary.digest { rows.append(("digest", digest.description)) }
        if let synced {
            let deltas = summary.deltas
            rows.append(
                (
                    "sync",
                    "\(synced.unchanged) unchanged (not sent; \(synced.updated) given new attributes), "
                        + "\(synced.replaced) replaced (\(deltas) as deltas), "
                        + "\(summary.removedCount) removed"
                ))
        }
        if let compressionLevel { rows.append(("compression", "deflate:\(compressionLevel)")) }
        if let rateLimit { rows.append(("rate limit", Format.rate(Double(rateLimit)))) }
        if let streamBytes {
            let each = streamBytes.map { Format.bytes($0) }.joined(separator: ", ")
            rows.append(("streams", "\(streamBytes.count) (on the wire: \(each))"))
        }
        if let shard {
            var line = "\(shard) by \(shardByBytes ? "bytes" : "paths")"
            if let share {
                line += ": \(share.files) of \(share.totalFiles) files (\(share.ranges) ranges), "
                line += "\(Format.bytes(share.bytes)) of \(Format.bytes(share.totalBytes))"
            }
            rows.append(("shard", line))
            if let group { rows.append(("group", group)) }
        }
        return StatsTable.render(rows)
    }
}

/// The report of `sluice receive --stats`: totals over the sessions served.
struct ReceiveStatsReport {
    var directory: String
    var address: String
    var sessions = 0
    /// The sessions' answers, counted.
    var tally = TransferTally()
    var bytes: UInt64 = 0
    var seconds = 0.0
    /// Task groups (`send --group`) served, by name, in the order first seen.
    var groups: [GroupStats] = []

    /// What the sessions of one task group did.
    struct GroupStats {
        var name: String
        var tasks: Int
        var tasksSeen: Set<Int> = []
        var sessions = 0
        var files = 0
        var bytes: UInt64 = 0
        var ranges = 0
        /// As the group's last session ended.
        var incompleteFiles = 0
        var rangeTasks: [Int] = []

        var json: String {
            let fields: [(String, String)] = [
                ("name", Format.jsonString(name)),
                ("tasks", "\(tasks)"),
                ("tasks_seen", "\(tasksSeen.count)"),
                ("sessions", "\(sessions)"),
                ("files", "\(files)"),
                ("bytes", "\(bytes)"),
                ("ranges", "\(ranges)"),
                ("range_tasks", "[" + rangeTasks.map(String.init).joined(separator: ",") + "]"),
                ("incomplete_files", "\(incompleteFiles)"),
            ]
            return "{" + fields.map { "\(Format.jsonString($0.0)):\($0.1)" }.joined(separator: ",") + "}"
        }

        var text: String {
            "\(files) files, \(Format.bytes(bytes)), \(ranges) ranges; tasks seen \(tasksSeen.count) of \(tasks) "
                + "(\(sessions) sessions); \(incompleteFiles) incomplete"
        }
    }

    var files: Int { tally.files }
    var links: Int { tally.links }
    var devices: Int { tally.devices }
    var specials: Int { tally.specials }
    var directories: Int { tally.directories }
    var refused: Int { tally.refused }
    var failed: Int { tally.failedData + tally.failedIO }
    var resumedBytes: UInt64 { tally.resumedBytes }

    mutating func add(_ report: TransferSessionReport) {
        sessions += 1
        bytes += report.bytes
        tally.add(report.tally)
        guard let group = report.taskGroup else { return }
        var index = groups.firstIndex { $0.name == group.name }
        if index == nil {
            groups.append(GroupStats(name: group.name, tasks: group.tasks))
            index = groups.count - 1
        }
        guard let index else { return }
        groups[index].tasksSeen.insert(group.task)
        groups[index].sessions += 1
        groups[index].files += report.tally.files
        groups[index].bytes += report.bytes
        groups[index].ranges += report.tally.ranges
        groups[index].incompleteFiles = group.incompleteFiles
        groups[index].rangeTasks = group.rangeTasks
    }

    var rate: Double { seconds > 0 ? Double(bytes) / seconds : 0 }

    var json: String {
        let fields: [(String, String)] = [
            ("directory", Format.jsonString(directory)),
            ("address", Format.jsonString(address)),
            ("sessions", "\(sessions)"),
            ("files", "\(files)"),
            ("links", "\(links)"),
            ("devices", "\(devices)"),
            ("specials", "\(specials)"),
            ("directories", "\(directories)"),
            ("refused", "\(refused)"),
            ("failed", "\(failed)"),
            ("bytes", "\(bytes)"),
            ("resumed_bytes", "\(resumedBytes)"),
            ("seconds", Format.jsonNumber(seconds)),
            ("rate", Format.jsonNumber(rate)),
            ("groups", "[" + groups.map(\.json).joined(separator: ",") + "]"),
        ]
        return "{" + fields.map { "\(Format.jsonString($0.0)):\($0.1)" }.joined(separator: ",") + "}"
    }

    var text: String {
        StatsTable.render(
            [
                ("directory", directory),
                ("address", address),
                ("sessions", "\(sessions)"),
                ("files", "\(files) stored, \(refused) refused, \(failed) failed"),
                ("links", "\(links) (among the files)"),
                ("specials", "\(devices) devices, \(specials) FIFOs and sockets (among the files)"),
                ("directories", "\(directories)"),
                ("bytes", "\(bytes) (\(Format.bytes(bytes)))"),
                ("resumed bytes", "\(resumedBytes) (\(Format.bytes(resumedBytes)))"),
                ("seconds", Format.fixed(seconds, 3)),
                ("rate", Format.rate(rate)),
            ] + groups.map { ("group \($0.name)", $0.text) })
    }
}

/// Aligned `name  value` lines, as `copy --stats` prints them.
enum StatsTable {
    static func render(_ rows: [(String, String)]) -> String {
        let width = (rows.map(\.0.count).max() ?? 0) + 2
        return rows.map { $0.0 + String(repeating: " ", count: width - $0.0.count) + $0.1 + "\n" }.joined()
    }
}
