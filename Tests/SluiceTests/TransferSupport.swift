import Foundation
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// A receiver listening on 127.0.0.1 (port 0) on its own loop, and helpers to send to it.
final class TransferHarness {
    let loop: EventLoop
    let directory: String
    let receiver: TransferReceiver
    let listener: SocketListener
    private(set) var reports: [TransferSessionReport] = []
    /// The receiver's warnings, in order.
    private(set) var warnings: [String] = []
    /// Every answer the receiver sent, by session (the reports count them, as a receiver
    /// keeps counts; the tests keep each).
    private(set) var answers: [Int: [TransferFileResult]] = [:]

    /// A receiver that lets senders replace and remove (`receive --delete`): what most tests
    /// of sync want. `TransferReceiveOptions()` is the default receiver, which stores new
    /// entries only.
    static var syncing: TransferReceiveOptions {
        var options = TransferReceiveOptions(idleTimeout: .seconds(20))
        options.delete = true
        return options
    }

    init(directory: String, options: TransferReceiveOptions = TransferHarness.syncing) throws {
        loop = try EventLoop()
        self.directory = directory
        receiver = try TransferReceiver(directory: directory, options: options)
        listener = try Socket.listen(host: "127.0.0.1", port: 0)
        receiver.onSessionEnd = { [unowned self] report in self.reports.append(report) }
        receiver.onEvent = { [unowned self] event in
            switch event {
            case .warning(_, let text): self.warnings.append(text)
            case .entry(let session, let result): self.answers[session, default: []].append(result)
            case .sessionStarted, .removed: break
            }
        }
        try receiver.accept(from: listener, on: loop)
    }

    deinit { listener.close() }

    var port: UInt16 { listener.port }

    /// The answers of the session `report` tells of, in order.
    func results(_ report: TransferSessionReport?) -> [TransferFileResult] {
        report.map { answers[$0.id] ?? [] } ?? []
    }

    /// The answers of every session that has ended, in the order they ended.
    var allResults: [TransferFileResult] { reports.flatMap { answers[$0.id] ?? [] } }

    /// Starts a sender of `sources` to `port` (the receiver's by default); the summary lands in
    /// the returned box.
    func startSender(
        _ sources: [TransferSource], options: TransferSendOptions = TransferSendOptions(), port: UInt16? = nil
    ) throws -> (TransferSender, SummaryBox) {
        let sender = try TransferSender(sources: sources, options: options)
        let (input, output) = Socket.connect(host: "127.0.0.1", port: port ?? self.port)
        let box = SummaryBox()
        sender.start(input: input, output: output, on: loop) { box.summary = $0 }
        return (sender, box)
    }

    /// Sends `sources` and runs the loop until the sender is done and the receiver's session
    /// has ended.
    func send(
        _ sources: [TransferSource], options: TransferSendOptions = TransferSendOptions(), port: UInt16? = nil,
        limit: Duration = .seconds(20)
    ) throws -> TransferSummary {
        let sessionsBefore = reports.count
        let (sender, box) = try startSender(sources, options: options, port: port)
        runLoop(loop, for: limit) { box.summary != nil && reports.count > sessionsBefore }
        _ = sender
        return try #require(box.summary, "the transfer did not finish in time")
    }

    /// Sends `path` over `streams` connections (`ParallelTransferSender`) and runs the loop
    /// until it is done and each connection's session has ended.
    func send(_ path: String, streams: Int, options: TransferSendOptions) throws -> TransferSummary {
        let sessions = reports.count
        let sender = try ParallelTransferSender(sources: [.path(path)], streams: streams, options: options)
        let box = SummaryBox()
        sender.start(connect: { [port] in Socket.connect(host: "127.0.0.1", port: port) }, on: loop) {
            box.summary = $0
        }
        runLoop(loop, for: .seconds(30)) { box.summary != nil && reports.count >= sessions + streams }
        return try #require(box.summary, "the transfer did not finish in time")
    }

    func send(paths: [String], options: TransferSendOptions = TransferSendOptions()) throws -> TransferSummary {
        try send(paths.map { .path($0) }, options: options)
    }

    /// Sends `payload` on a raw connection to the receiver, half-closes, and returns the reply
    /// once the session has ended.
    func exchange(_ payload: [UInt8]) throws -> SocketExchange {
        let sessionsBefore = reports.count
        let client = SocketExchange(Socket.connect(host: "127.0.0.1", port: port), payload: payload)
        client.start(on: loop)
        runLoop(loop, for: .seconds(10)) { client.done && reports.count > sessionsBefore }
        #expect(client.done)
        return client
    }
}

final class SummaryBox {
    var summary: TransferSummary?
}

/// Writes `bytes` to `path` with `mode` and the modification time `mtime` (seconds, nanoseconds).
func writeFile(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o644, mtime: (Int, Int)? = nil) throws {
    try Data(bytes).write(to: URL(fileURLWithPath: path))
    chmod(path, mode)
    if let (seconds, nanoseconds) = mtime {
        let times = [timespec(tv_sec: seconds, tv_nsec: nanoseconds), timespec(tv_sec: seconds, tv_nsec: nanoseconds)]
        utimensat(AT_FDCWD, path, times, 0)
    }
}

func readFile(_ path: String) -> [UInt8]? {
    FileManager.default.contents(atPath: path).map { [UInt8]($0) }
}

func fileExists(_ path: String) -> Bool {
    var st = stat()
    return lstat(path, &st) == 0
}

/// What `lstat` says about a path, for comparisons.
struct FileInfo: Equatable, CustomStringConvertible {
    var type: mode_t
    var mode: mode_t
    var size: Int
    var mtimeSeconds: Int
    var mtimeNanoseconds: Int
    /// A device's number (0 for anything else).
    var device: UInt64

    init?(_ path: String) {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        type = st.st_mode & S_IFMT
        mode = st.st_mode & 0o7777
        size = type == S_IFREG ? Int(st.st_size) : 0
        mtimeSeconds = st.st_mtim.tv_sec
        mtimeNanoseconds = st.st_mtim.tv_nsec
        device = type == S_IFCHR || type == S_IFBLK ? UInt64(st.st_rdev) : 0
    }

    var description: String {
        "type \(String(type, radix: 8)) mode \(String(mode, radix: 8)) size \(size) mtime \(mtimeSeconds).\(mtimeNanoseconds)"
            + (device == 0 ? "" : " device \(device)")
    }
}

/// Every path below `root`, relative, sorted.
func treePaths(_ root: String) -> [String] {
    (FileManager.default.subpaths(atPath: root) ?? []).sorted()
}

/// Compares two trees: the same paths, types, contents, modes and modification times.
/// Returns the differences.
func treeDifferences(_ a: String, _ b: String, compareDirectoryTimes: Bool = true) -> [String] {
    var out: [String] = []
    let pathsA = treePaths(a)
    let pathsB = treePaths(b)
    if pathsA != pathsB { out.append("paths differ: \(pathsA) vs \(pathsB)") }
    for path in Set(pathsA).intersection(pathsB).sorted() + [""] {
        let fullA = path.isEmpty ? a : a + "/" + path
        let fullB = path.isEmpty ? b : b + "/" + path
        guard var infoA = FileInfo(fullA), var infoB = FileInfo(fullB) else {
            out.append("\(path): missing")
            continue
        }
        if infoA.type == S_IFDIR && !compareDirectoryTimes {
            infoA.mtimeSeconds = 0
            infoA.mtimeNanoseconds = 0
            infoB.mtimeSeconds = 0
            infoB.mtimeNanoseconds = 0
        }
        if infoA != infoB { out.append("\(path): \(infoA) vs \(infoB)") }
        if infoA.type == S_IFREG && readFile(fullA) != readFile(fullB) { out.append("\(path): contents differ") }
    }
    return out
}

/// A raw client of the wire format, for sending what no `TransferSender` would.
enum RawWire {
    static func hello(_ capabilities: [String] = ["sha256", "deflate", "resume"]) -> [UInt8] {
        Wire.magic + MessageWriter.hello(capabilities: capabilities)
    }

    static func file(_ path: String, size: UInt64 = 0, flags: UInt8 = Wire.FileFlags.sizeKnown) -> [UInt8] {
        file(bytes: Array(path.utf8), size: size, flags: flags)
    }

    static func file(bytes path: [UInt8], size: UInt64 = 0, flags: UInt8 = Wire.FileFlags.sizeKnown) -> [UInt8] {
        MessageWriter.entry(
            .file, EntryHeader(flags: flags, size: size, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0, path: path))
    }

    static func data(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [Wire.MessageType.data.rawValue]
        withUnsafeBytes(of: UInt32(bytes.count).bigEndian) { out.append(contentsOf: $0) }
        return out + bytes
    }

    static func end(_ bytes: [UInt8]) -> [UInt8] {
        MessageWriter.end(size: UInt64(bytes.count), digest: SHA256Digest.hash(bytes))
    }

    static let bye = MessageWriter.message(.bye)

    /// The messages in a receiver's reply, after its magic: (type, payload).
    static func messages(_ reply: [UInt8]) -> [(UInt8, [UInt8])] {
        guard reply.count >= Wire.magic.count, Array(reply[0..<Wire.magic.count]) == Wire.magic else { return [] }
        var out: [(UInt8, [UInt8])] = []
        var index = Wire.magic.count
        while index + 5 <= reply.count {
            let type = reply[index]
            let length = reply[index + 1..<index + 5].reduce(0) { $0 << 8 | Int($1) }
            guard index + 5 + length <= reply.count else { break }
            out.append((type, Array(reply[index + 5..<index + 5 + length])))
            index += 5 + length
        }
        return out
    }
}

/// A TCP relay on the loop between a client and `target`, which flips one byte of the
/// client-to-target direction at `flipOffset`.
final class FlippingRelay {
    let listener: SocketListener
    private var pumps: [LoopCopier] = []

    init(to target: UInt16, flipOffset: Int, on loop: EventLoop) throws {
        listener = try Socket.listen(host: "127.0.0.1", port: 0)
        try listener.accept(on: loop) { [unowned self] input, output, _ in
            let (upIn, upOut) = Socket.connect(host: "127.0.0.1", port: target)
            let toTarget = LoopCopier(source: input, sink: upOut, chunkSize: 16384, flipOffset: flipOffset)
            let toClient = LoopCopier(source: upIn, sink: output, chunkSize: 16384)
            self.pumps += [toTarget, toClient]
            toTarget.start(on: loop)
            toClient.start(on: loop)
        }
    }

    deinit { listener.close() }

    var port: UInt16 { listener.port }
}
