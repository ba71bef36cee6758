import Dispatch
import FoundationEssentials
import Sluice
import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// The bench's many-files row: what a transfer pays per file rather than per byte. A tree of
/// small files (the same sizes and bytes every run) is sent with `TransferSender` to a
/// `TransferReceiver` over TCP loopback, in this process, the receiver on a thread and loop of
/// its own as a separate `sluice receive` would be, into a directory never used before, without
/// flushing each file (`receive --no-fsync`: the row measures the transfer, not the disk).
struct FilesBench {
    /// 2,000 files of 1 to 16 KiB (about 17 MB), 100 to a directory: a second or less.
    var files = 2000
    var filesPerDirectory = 100
    var smallest = 1 << 10
    var largest = 16 << 10
    var seed: UInt64 = 0x853C_49E6_748F_EA9B

    /// The row's title in the table.
    var title: String {
        "many files: \(files) of \(sizes), send → receive on loopback, no fsync"
    }

    /// `1–16 KiB`.
    var sizes: String {
        smallest % 1024 == 0 && largest % 1024 == 0
            ? "\(smallest >> 10)–\(largest >> 10) KiB" : "\(smallest)–\(largest) bytes"
    }

    /// Makes the tree in a new directory under `directory`, sends it, checks that every file
    /// arrived, and returns the measurement (the tree's making and removal are not timed).
    func run(in directory: String) throws -> FilesBenchResult {
        let source = directory + "/tree"
        let bytes = try makeTree(at: source)
        let destination = directory + "/tree-received"
        guard mkdir(destination, 0o755) == 0 else { throw failure("mkdir \(destination)") }
        // Made before the receiver starts, so that a failure leaves no thread waiting.
        let sender = try TransferSender(paths: [source])
        let loop = try EventLoop()
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        let server = FilesBenchServer(
            listener: listener, destination: destination,
            options: TransferReceiveOptions(fsync: false, idleTimeout: .seconds(60)))
        server.start()
        var summary: TransferSummary?
        let (measured, cpu) = CPUTime.measure { () -> (TransferSessionReport?, Double) in
            let start = monotonicNanoseconds()
            let (input, output) = Socket.connect(host: "127.0.0.1", port: listener.port)
            sender.start(input: input, output: output, on: loop) { done in
                summary = done
                loop.stop()
            }
            if summary == nil { loop.run() }
            let report = server.wait()
            return (report, Double(monotonicNanoseconds() - start) / 1e9)
        }
        let (report, seconds) = measured
        guard let summary, summary.succeeded else {
            throw BenchFailure(description: "files: \(summary?.error.map { "\($0)" } ?? "not every file was stored")")
        }
        if let problem = server.problem { throw BenchFailure(description: "files receiver: \(problem)") }
        guard let report, report.error == nil, report.files == files, summary.files == files, summary.bytes == bytes
        else {
            throw BenchFailure(
                description: "files: the receiver stored \(report?.files ?? 0) of \(files) files "
                    + "(\(summary.bytes) of \(bytes) bytes sent)\(report?.error.map { ": \($0)" } ?? "")")
        }
        return FilesBenchResult(files: files, bytes: bytes, seconds: seconds, cpu: cpu)
    }

    /// Writes `files` files under `root` (created here): directories `d000`, `d001`, … of
    /// `filesPerDirectory` files each, of sizes drawn uniformly from `smallest...largest` and
    /// bytes from `BenchData.random`, both from `seed`. Returns the bytes written.
    func makeTree(at root: String) throws -> UInt64 {
        let pattern = BenchData.random(largest + 4096, seed: seed)
        var state = seed
        func next() -> UInt64 {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return state
        }
        guard mkdir(root, 0o755) == 0 else { throw failure("mkdir \(root)") }
        var total: UInt64 = 0
        var folder = root
        for index in 0..<files {
            if index % filesPerDirectory == 0 {
                folder = root + "/d" + Self.digits(index / filesPerDirectory, 3)
                guard mkdir(folder, 0o755) == 0 else { throw failure("mkdir \(folder)") }
            }
            let size = smallest + Int(next() % UInt64(largest - smallest + 1))
            let offset = Int(next() % 4096)
            let path = folder + "/f" + Self.digits(index, 5)
            let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw failure("open \(path)") }
            let written = pattern.withUnsafeBytes { write(fd, $0.baseAddress! + offset, size) }
            close(fd)
            guard written == size else { throw failure("write \(path)") }
            total += UInt64(size)
        }
        return total
    }

    private static func digits(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        return String(repeating: "0", count: max(0, width - text.count)) + text
    }

    private func failure(_ what: String) -> BenchFailure {
        BenchFailure(description: "files: \(what): \(String(cString: strerror(errno)))")
    }
}

/// The many-files row's figures.
struct FilesBenchResult: Sendable {
    var files: Int
    /// File bytes sent (the tree's size).
    var bytes: UInt64
    /// From the sender's connect to the receiver's end of the session.
    var seconds: Double
    /// The CPU time the whole process used meanwhile (sender, receiver and their workers).
    var cpu: CPUTime

    var filesPerSecond: Double { seconds > 0 ? Double(files) / seconds : 0 }
    var bytesPerSecond: Double { seconds > 0 ? Double(bytes) / seconds : 0 }
}

/// The receiving end of the many-files row: accepts one connection on its own thread and loop
/// and serves it with a `TransferReceiver` until the session ends.
final class FilesBenchServer: @unchecked Sendable {
    private let listener: SocketListener
    private let destination: String
    private let options: TransferReceiveOptions
    private let done = DispatchSemaphore(value: 0)
    private var report: TransferSessionReport?
    /// Why the receiver could not run, if it could not.
    private(set) var problem: String?

    init(listener: SocketListener, destination: String, options: TransferReceiveOptions) {
        self.listener = listener
        self.destination = destination
        self.options = options
    }

    func start() {
        DispatchQueue(label: "sluice-bench-files").async { [self] in
            defer { done.signal() }
            do {
                let loop = try EventLoop()
                let receiver = try TransferReceiver(directory: destination, options: options)
                receiver.onSessionEnd = { [self] ended in
                    report = ended
                    loop.stop()
                }
                try listener.accept(on: loop) { [self] input, output, peer in
                    listener.close()
                    _ = receiver.serve(input: input, output: output, from: peer, on: loop)
                }
                loop.run()
                receiver.finishDiskWork()
            } catch {
                listener.close()
                problem = "\(error)"
            }
        }
    }

    /// Waits for the session to end; its report, nil if the receiver could not run.
    func wait() -> TransferSessionReport? {
        done.wait()
        return report
    }
}
