import Foundation
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

/// Copies `source` to `sink` through `loop` with `chunkSize` reads, the way the seeds do it:
/// read on `hasBytesAvailable`, write on `hasSpaceAvailable`, with a pending-write flag.
/// Returns the error if any stream failed.
final class LoopCopier: ByteStreamDelegate {
    let source: ReadStream
    let sink: WriteStream
    var buffer: [UInt8]
    var start = 0
    var end = 0
    var pendingWrite = false
    var sourceDone = false
    var failure: SluiceError?

    init(source: ReadStream, sink: WriteStream, chunkSize: Int) {
        self.source = source
        self.sink = sink
        buffer = [UInt8](repeating: 0, count: chunkSize)
    }

    func run(on loop: EventLoop) {
        source.delegate = self
        sink.delegate = self
        source.schedule(on: loop)
        sink.schedule(on: loop)
        source.open()
        sink.open()
        loop.run()
    }

    func stream(_ stream: ByteStream, handle event: StreamEvent) {
        switch event {
        case .hasBytesAvailable:
            guard end == 0 else { return }  // buffer full: wait for the writer to drain it
            let n = buffer.withUnsafeMutableBytes { source.read(into: $0) }
            if n > 0 {
                start = 0
                end = n
                if pendingWrite {
                    pendingWrite = false
                    flush()
                }
            }
        case .hasSpaceAvailable:
            if end > start { flush() } else { pendingWrite = true }
        case .endEncountered where stream === source:
            sourceDone = true
            if end == start { finish() }
        case .errorOccurred:
            failure = stream.streamError
            source.close()
            sink.close()
        default:
            break
        }
    }

    private func flush() {
        let n = buffer.withUnsafeBytes { sink.write(from: UnsafeRawBufferPointer(rebasing: $0[start..<end])) }
        guard n > 0 else { return }
        start += n
        if start == end {
            start = 0
            end = 0
            if sourceDone {
                finish()
            } else if source.hasBytesAvailable || source.streamStatus == .open {
                // The reader skipped an event while the buffer was full: read now.
                stream(source, handle: .hasBytesAvailable)
            }
        }
    }

    private func finish() {
        source.close()
        sink.close()
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
    if let stdin { try input.fileHandleForWriting.write(contentsOf: stdin) }
    try input.fileHandleForWriting.close()
    var stdoutData = Data()
    var stderrData = Data()
    let group = DispatchGroup()
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
