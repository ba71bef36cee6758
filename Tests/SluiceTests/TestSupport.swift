import Foundation
import TestThreads
import Testing

@testable import Sluice

/// A temporary directory removed when `body` returns.
func withTemporaryDirectory<T>(_ body: (String) throws -> T) throws -> T {
    let path = NSTemporaryDirectory() + "sluice-test-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try body(path)
}

/// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
func randomBytes(_ count: Int, seed: UInt64 = 0x9E37_79B9_7F4A_7C15) -> [UInt8] {
    var state = seed | 1
    var out = [UInt8](repeating: 0, count: count)
    out.withUnsafeMutableBytes { raw in
        var i = 0
        while i + 8 <= count {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            raw.storeBytes(of: state, toByteOffset: i, as: UInt64.self)
            i += 8
        }
        while i < count {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            raw[i] = UInt8(truncatingIfNeeded: state)
            i += 1
        }
    }
    return out
}

/// Records every event a stream delivers, and optionally reacts to them.
final class EventRecorder: ByteStreamDelegate {
    var events: [StreamEvent] = []
    var react: ((ByteStream, StreamEvent) -> Void)?

    init(react: ((ByteStream, StreamEvent) -> Void)? = nil) { self.react = react }

    func stream(_ stream: ByteStream, handle event: StreamEvent) {
        events.append(event)
        react?(stream, event)
    }
}

/// Copies `source` to `sink` on a loop the way the seeds do it: read on `hasBytesAvailable`
/// into one buffered chunk, write on `hasSpaceAvailable`, and when space was offered with
/// nothing to write, a pending-write flag that makes the next read write at once. At the
/// source's end the sink is closed (for a socket, a half-close) and then the source. Reads and
/// writes never block, so several copiers can share one loop (an echo, a relay). With
/// `bytesPerSecond` it reads no faster than that (a token bucket on the loop's clock; while it
/// is empty the copier does not read, so TCP holds the peer back): a link that shapes a flow.
final class LoopCopier: ByteStreamDelegate {
    let source: ReadStream
    let sink: WriteStream
    /// The stream offset of one byte to corrupt on the way (a relay that damages data).
    private let flipOffset: Int?
    private var buffer: [UInt8]
    private var start = 0
    private var end = 0
    /// Bytes read from the source so far.
    private(set) var total = 0
    private var pendingWrite = false
    private var sourceDone = false
    private(set) var finished = false
    private(set) var failure: SluiceError?
    var onFinish: (() -> Void)?
    /// Called after each read.
    var onBytes: (() -> Void)?
    private let bytesPerSecond: Int?
    private var tokens = 0.0
    private var lastRefill = ContinuousClock.now
    private var capTimer: LoopTimer?
    private weak var loop: EventLoop?

    init(
        source: ReadStream, sink: WriteStream, chunkSize: Int = 65536, flipOffset: Int? = nil,
        bytesPerSecond: Int? = nil
    ) {
        self.source = source
        self.sink = sink
        self.flipOffset = flipOffset
        self.bytesPerSecond = bytesPerSecond
        buffer = [UInt8](repeating: 0, count: chunkSize)
    }

    func start(on loop: EventLoop) {
        self.loop = loop
        source.delegate = self
        sink.delegate = self
        source.schedule(on: loop)
        sink.schedule(on: loop)
        source.open()
        sink.open()
    }

    /// Starts and runs `loop` until nothing is left to do.
    func run(on loop: EventLoop) {
        start(on: loop)
        loop.run()
    }

    func stream(_ stream: ByteStream, handle event: StreamEvent) {
        switch event {
        case .hasBytesAvailable where stream === source:
            read()
        case .hasSpaceAvailable:
            if end > start { flush() } else { pendingWrite = true }
        case .endEncountered where stream === source:
            sourceDone = true
            if end == start { finish() }
        case .errorOccurred:
            failure = stream.streamError
            finish()
        default:
            break
        }
    }

    private func read() {
        guard end == 0, !finished else { return }  // full: read again once the writer drains the chunk
        let allowed = allowance()
        guard allowed > 0 else {
            // Over the cap: read when the bucket has refilled a little.
            if capTimer == nil, let loop {
                capTimer = loop.schedule(after: .milliseconds(5)) { [weak self] in
                    self?.capTimer = nil
                    self?.read()
                }
            }
            return
        }
        let result = buffer.withUnsafeMutableBytes {
            source.tryRead(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<allowed]))
        }
        guard case .processed(let n) = result, n > 0 else { return }
        if let flipOffset, flipOffset >= total, flipOffset < total + n { buffer[flipOffset - total] ^= 0x01 }
        tokens -= Double(n)
        total += n
        end = n
        onBytes?()
        if pendingWrite {
            pendingWrite = false
            flush()
        }
    }

    private func flush() {
        let written = buffer.withUnsafeBytes { sink.tryWrite(from: UnsafeRawBufferPointer(rebasing: $0[start..<end])) }
        guard case .processed(let n) = written, n > 0 else { return }
        start += n
        guard start == end else { return }
        start = 0
        end = 0
        if sourceDone {
            finish()
        } else if source.streamStatus == .open {
            read()  // the source's last event found the chunk full and was not answered
        }
    }

    /// Bytes the cap allows now (a whole chunk when uncapped).
    private func allowance() -> Int {
        guard let bytesPerSecond else { return buffer.count }
        let now = ContinuousClock.now
        let elapsed = now - lastRefill
        lastRefill = now
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        // At most a tenth of a second's worth saved up: the cap holds over short spans too.
        tokens = min(tokens + seconds * Double(bytesPerSecond), Double(bytesPerSecond) / 10)
        return min(buffer.count, max(0, Int(tokens)))
    }

    /// Ends the copy at once, both streams closed (a relay cutting a connection).
    func cut() { finish() }

    private func finish() {
        guard !finished else { return }
        finished = true
        capTimer?.cancel()
        sink.close()
        source.close()
        onFinish?()
    }
}

/// The directory holding the package's built products (next to the test bundle).
func productsDirectory() -> URL {
    URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
}

/// Runs a built product or a system tool; returns (status, stdout, stderr).
@discardableResult
func runProcess(
    _ executable: String,
    _ arguments: [String] = [],
    stdin: Data? = nil
) throws -> (status: Int32, stdout: Data, stderr: Data) {
    signal(SIGPIPE, SIG_IGN)  // a child that exits early must not kill the test process
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    let input = Pipe()
    process.standardInput = input
    try process.run()
    var stdoutData = Data()
    var stderrData = Data()
    let group = DispatchGroup()
    // Written while stdout is read: a child that writes as it reads would otherwise fill its
    // output pipe and wait for us while we wait for it to take more input.
    let writer = UncheckedBox(input.fileHandleForWriting)
    DispatchQueue.global().async(group: group) {
        if let stdin { try? writer.value.write(contentsOf: stdin) }
        try? writer.value.close()
    }
    let errBox = UncheckedBox(err)
    let stderrBuffer = UncheckedBox(NSMutableData())
    DispatchQueue.global().async(group: group) {
        stderrBuffer.value.append(errBox.value.fileHandleForReading.readDataToEndOfFile())
    }
    stdoutData = out.fileHandleForReading.readDataToEndOfFile()
    group.wait()
    stderrData = stderrBuffer.value as Data
    process.waitUntilExit()
    return (process.terminationStatus, stdoutData, stderrData)
}

/// Waits until `condition` holds or `limit` passes; returns whether it holds. For conditions
/// another thread or process brings about (a file appears, a thread finishes): the deadline
/// only bounds a failure, and the short pause between checks only spares the CPU.
@discardableResult
func waitUntil(_ limit: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now.advanced(by: limit)
    while !condition() {
        if ContinuousClock.now >= deadline { return condition() }
        usleep(2_000)
    }
    return true
}

/// The suites that block their thread rely on `.ownThreads` to keep them off the cooperative
/// pool (see `OwnThreads`): this checks that it does.
@Suite(.ownThreads) struct OwnThreadsTests {
    @Test func aBlockingBodyRunsOnTheTestRunsOwnThreads() {
        #expect(BlockingTestExecutor.shared.isCurrentThreadOwn)
    }

    @Test(arguments: [1, 2]) func soDoesEachCaseOfAParameterizedTest(_ n: Int) {
        #expect(BlockingTestExecutor.shared.isCurrentThreadOwn, "case \(n)")
    }
}

/// A blocking TCP connection to 127.0.0.1:`port` on a descriptor of its own: the descriptor,
/// or -1 when the connect fails (the caller closes it).
func connectLoopback(port: UInt16, host: String = "127.0.0.1") -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return -1 }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr(host)
    let rc = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    guard rc == 0 else {
        close(fd)
        return -1
    }
    return fd
}

/// A blocking TCP socket listening on 127.0.0.1 on a port the kernel chose, for peers played
/// by hand on a thread of their own: its descriptor and port.
func listenOnLoopback() throws -> (fd: Int32, port: UInt16) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
            bind(fd, pointer, length) == 0 && listen(fd, 1) == 0 && getsockname(fd, pointer, &length) == 0
        }
    }
    guard bound else {
        let error = Errno.current
        close(fd)
        throw SluiceError(.system(error), operation: "listen", subject: "127.0.0.1:0")
    }
    return (fd, UInt16(bigEndian: address.sin_port))
}

/// Reads what a blocking socket has (up to 64 KiB) onto the end of `pending`; false at its end
/// or on an error.
func readMore(_ fd: Int32, into pending: inout [UInt8]) -> Bool {
    var buffer = [UInt8](repeating: 0, count: 1 << 16)
    let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
    guard n > 0 else { return false }
    pending += buffer[0..<n]
    return true
}
