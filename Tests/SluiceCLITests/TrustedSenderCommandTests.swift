import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// `sluice receive` against played peers holding the key (here `--insecure`, the same frames
/// without TLS): a FIFO where a delta's basis was expected holds no disk worker (issue 48,
/// item 3).
@Suite(.ownThreads) struct TrustedSenderCommandTests {
    /// Sends `payload` on `fd`, says it has sent everything (`shutdown`), and reads the reply
    /// until the receiver closes the connection or `limit` passes. Closes `fd`.
    static func reply(_ fd: Int32, after payload: [UInt8], limit: Duration) -> (bytes: [UInt8], closed: Bool) {
        defer { close(fd) }
        var sent = 0
        while sent < payload.count {
            let n = payload.withUnsafeBytes { write(fd, $0.baseAddress! + sent, payload.count - sent) }
            guard n > 0 else { return ([], false) }
            sent += n
        }
        shutdown(fd, Int32(SHUT_WR))
        var received: [UInt8] = []
        let deadline = ContinuousClock.now.advanced(by: limit)
        while ContinuousClock.now < deadline {
            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, 50) >= 0 else { return (received, false) }
            guard ready.revents != 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { return (received, n == 0) }
            received += chunk[0..<n]
        }
        return (received, false)
    }

    @Test func fourFIFOBasesThenATransferThenSIGTERMWithinTwoSeconds() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            let fifos = (0..<4).map { "\(inbox)/basis\($0)" }
            for path in fifos { #expect(mkfifo(path, 0o644) == 0) }
            defer {
                // Lets go of a reader stuck in its open (a receiver that waits), so that a
                // failing test ends.
                for path in fifos {
                    let fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
                    if fd >= 0 { close(fd) }
                }
            }
            let receiver = try ReceiverProcess(["--insecure", "--dir", inbox, "--sync"])
            let port = try receiver.port()
            // Four sessions at once, one per disk worker, each sending a delta of a FIFO.
            let flags = Wire.FileFlags.sizeKnown | Wire.FileFlags.replace | Wire.FileFlags.delta
            let connections = fifos.indices.map { _ in connectToLoopback(port: port) }
            var payloads: [[UInt8]] = []
            for index in fifos.indices {
                let header = EntryHeader(
                    flags: flags, size: 10, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0,
                    path: Array("basis\(index)".utf8))
                payloads.append(
                    Wire.magic + MessageWriter.hello(capabilities: ["sha256", "sync", "delta"])
                        + MessageWriter.entry(.file, header) + MessageWriter.message(.bye))
            }
            for (index, fd) in connections.enumerated() {
                let fd = try #require(fd, "cannot connect")
                let (bytes, closed) = Self.reply(fd, after: payloads[index], limit: .seconds(10))
                let text = String(decoding: bytes, as: UTF8.self)
                #expect(closed, "session \(index) did not end: \(text)")
                #expect(text.contains("basis\(index)\": not a regular file (a FIFO)"), "\(text)")
            }

            // Another session's transfer completes.
            try write(Data("plain\n".utf8), to: "\(dir)/plain.txt")
            let sent = try Running(sluiceBinary, ["send", "--insecure", "\(dir)/plain.txt", try receiver.address()])
                .wait(within: .seconds(20))
            #expect(sent.status == 0, "\(sent.stderrText)")
            #expect(contents("\(inbox)/plain.txt") == Data("plain\n".utf8))

            // SIGTERM: the receiver exits within two seconds, as terminated.
            let start = ContinuousClock.now
            receiver.signal(SIGTERM)
            let exited = waitUntil(.seconds(2)) { !receiver.process.isRunning }
            let took = ContinuousClock.now - start
            #expect(exited, "still running \(took) after SIGTERM")
            let ended = receiver.wait()
            #expect(ended.status == 143, "\(ended.stderr)")
            for path in fifos {
                var st = stat()
                #expect(lstat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFIFO, "\(path)")
            }
        }
    }
}
