import Foundation
import SluiceFoundation
import Synchronization
import TestThreads
import Testing

@testable import Sluice

/// A `ByteSource` of a kind of its own: hands out `bytes` in pieces of at most `piece`,
/// optionally failing after them instead of ending.
final class PieceSource: ByteSource, @unchecked Sendable {
    var bytes: [UInt8]
    let piece: Int
    let failAtEnd: Bool
    /// Set by `close()` on the stream's loop thread, read by the test's task.
    let closedBox = Mutex(false)

    init(_ bytes: [UInt8], piece: Int = 7, failAtEnd: Bool = false) {
        self.bytes = bytes
        self.piece = piece
        self.failAtEnd = failAtEnd
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        if bytes.isEmpty {
            if failAtEnd { throw SluiceError(.corruptData, operation: "read", subject: "pieces") }
            return .processed(0)
        }
        let n = min(piece, buffer.count, bytes.count)
        buffer.copyBytes(from: bytes[0..<n])
        bytes.removeFirst(n)
        return .processed(n)
    }

    func close() { closedBox.withLock { $0 = true } }
}

/// Apple's event rules — `openCompleted` first and once; one readiness event per readiness;
/// `endEncountered` once after the last byte; `errorOccurred` at most once and then silence —
/// checked for every kind of stream.
@Suite(.ownThreads) struct EventModelTests {
    static let payload = randomBytes(100_000, seed: 77)

    /// Kinds of read stream with `payload` behind them; the closure releases what they hold.
    static func readKinds(_ dir: String) throws -> [(String, ReadStream, () -> Void)] {
        let path = dir + "/payload"
        try Data(payload).write(to: URL(fileURLWithPath: path))
        var kinds: [(String, ReadStream, () -> Void)] = [
            ("memory", .memory(payload), {}),
            ("file", .file(atPath: path), {}),
            ("custom", .custom(PieceSource(payload, piece: 4096), name: "pieces"), {}),
            ("Foundation InputStream", .reading(InputStream(data: Data(payload))), {}),
        ]
        // A pipe with the payload already in it (it fits the 1 MiB pipe buffer after F_SETPIPE_SZ,
        // or is fed by a writer thread otherwise).
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        let writeFD = fds[1]
        let feeder = Thread {
            payload.withUnsafeBytes { raw in
                var off = 0
                while off < raw.count {
                    let n = write(writeFD, raw.baseAddress! + off, raw.count - off)
                    if n <= 0 { break }
                    off += n
                }
            }
            close(writeFD)
        }
        feeder.start()
        kinds.append(("pipe", .descriptor(fds[0], closeWhenDone: true, name: "pipe"), {}))
        let (boundRead, boundWrite) = boundPair(bufferSize: 1 << 20)
        boundWrite.open()
        #expect(boundWrite.write(all: payload))
        boundWrite.close()
        kinds.append(("bound pair", boundRead, {}))
        // A TCP connection whose peer sends the payload and closes.
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        let box = UncheckedBox(listener)
        Thread {
            guard let (input, output, _) = try? box.value.accept(timeout: .seconds(30)) else { return }
            output.open()
            output.write(all: payload)
            output.close()
            input.close()
            box.value.close()
        }.start()
        let (socketRead, socketWrite) = Socket.connect(host: "127.0.0.1", port: listener.port)
        kinds.append(("socket", socketRead, { socketWrite.close() }))
        return kinds
    }

    @Test func readEventsFollowTheRulesForEveryKind() throws {
        try withTemporaryDirectory { dir in
            for (kind, stream, release) in try Self.readKinds(dir) {
                defer { release() }
                let loop = try EventLoop()
                var events: [StreamEvent] = []
                var received: [UInt8] = []
                var reading = false
                stream.eventHandler = { s, event in
                    events.append(event)
                    guard reading, event == .hasBytesAvailable, let r = s as? ReadStream else { return }
                    var buffer = [UInt8](repeating: 0, count: 16384)
                    let n = r.read(&buffer, maxLength: buffer.count)
                    if n > 0 { received += buffer[0..<n] }
                }
                stream.schedule(on: loop)
                stream.open()
                // Not reading: exactly one hasBytesAvailable however long the loop runs.
                let deadline = ContinuousClock.now + .seconds(10)
                while !events.contains(.hasBytesAvailable) && ContinuousClock.now < deadline {
                    loop.run(for: .milliseconds(20))
                }
                loop.run(for: .milliseconds(50))
                #expect(events.first == .openCompleted, "\(kind)")
                #expect(events.filter { $0 == .hasBytesAvailable }.count == 1, "\(kind): \(events)")
                // Reading on each event: every byte, then one endEncountered, last.
                reading = true
                var first: UInt8 = 0
                let n = stream.read(&first, maxLength: 1)  // the consumed event's read
                #expect(n == 1, "\(kind)")
                received.append(first)
                while !events.contains(.endEncountered) && ContinuousClock.now < deadline {
                    loop.run(for: .milliseconds(20))
                }
                loop.run(for: .milliseconds(20))
                let same = received == Self.payload
                #expect(same, "\(kind)")
                #expect(events.filter { $0 == .openCompleted }.count == 1, "\(kind)")
                #expect(events.filter { $0 == .endEncountered }.count == 1, "\(kind)")
                #expect(events.last == .endEncountered, "\(kind): \(events.suffix(3))")
                #expect(!events.contains(.errorOccurred), "\(kind)")
                stream.close()
                stream.remove(from: loop)
            }
        }
    }

    /// Kinds of write stream, each with room for at least 64 KiB.
    static func writeKinds(_ dir: String) -> [(String, WriteStream)] {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        let reader = fds[0]
        Thread {
            var buffer = [UInt8](repeating: 0, count: 65536)
            while read(reader, &buffer, buffer.count) > 0 {}
            close(reader)
        }.start()
        final class Sink: ByteSink {
            var bytes = 0
            func write(from buffer: UnsafeRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
                bytes += buffer.count
                return .processed(buffer.count)
            }
        }
        // A TCP connection whose peer reads everything.
        var socketWrite: WriteStream?
        if let listener = try? Socket.listen(host: "127.0.0.1", port: 0) {
            let box = UncheckedBox(listener)
            Thread {
                guard let (input, output, _) = try? box.value.accept(timeout: .seconds(30)) else { return }
                input.open()
                _ = try? input.readToEnd()
                input.close()
                output.close()
                box.value.close()
            }.start()
            socketWrite = Socket.connect(host: "127.0.0.1", port: listener.port).1
        }
        #expect(socketWrite != nil)
        return [
            ("socket", socketWrite ?? .discard()),
            ("memory", .toMemory()),
            ("buffer", .toBuffer(capacity: 1 << 20)),
            ("file", .file(atPath: dir + "/out")),
            ("pipe", .descriptor(fds[1], closeWhenDone: true, name: "pipe")),
            ("bound pair", boundPair(bufferSize: 1 << 20).1),
            ("custom", .custom(Sink(), name: "sink")),
            ("Foundation OutputStream", .writing(OutputStream(toMemory: ()))),
        ]
    }

    @Test func writeEventsFollowTheRulesForEveryKind() throws {
        try withTemporaryDirectory { dir in
            for (kind, stream) in Self.writeKinds(dir) {
                let loop = try EventLoop()
                var events: [StreamEvent] = []
                stream.eventHandler = { _, event in events.append(event) }
                stream.schedule(on: loop)
                stream.open()
                let deadline = ContinuousClock.now + .seconds(10)
                while !events.contains(.hasSpaceAvailable) && ContinuousClock.now < deadline {
                    loop.run(for: .milliseconds(20))
                }
                loop.run(for: .milliseconds(50))
                #expect(events == [.openCompleted, .hasSpaceAvailable], "\(kind): \(events)")
                // A write re-arms: the next readiness brings one more event.
                #expect(stream.write(all: [1, 2, 3]), "\(kind)")
                while events.count < 3 && ContinuousClock.now < deadline { loop.run(for: .milliseconds(20)) }
                loop.run(for: .milliseconds(50))
                #expect(events == [.openCompleted, .hasSpaceAvailable, .hasSpaceAvailable], "\(kind): \(events)")
                stream.close()
                stream.remove(from: loop)
            }
        }
    }

    @Test func anErrorIsDeliveredOnceAndThenSilence() throws {
        let stream = ReadStream.custom(PieceSource([1, 2, 3], failAtEnd: true), name: "pieces")
        let loop = try EventLoop()
        var events: [StreamEvent] = []
        stream.eventHandler = { s, event in
            events.append(event)
            if event == .hasBytesAvailable, let r = s as? ReadStream {
                var buffer = [UInt8](repeating: 0, count: 8)
                _ = r.read(&buffer, maxLength: 8)
            }
        }
        stream.schedule(on: loop)
        stream.open()
        loop.run(for: .seconds(10))  // returns as soon as the stream has nothing left to deliver
        #expect(events == [.openCompleted, .hasBytesAvailable, .hasBytesAvailable, .errorOccurred])
        #expect(stream.streamStatus == .error)
        #expect(stream.streamError?.code == .corruptData)
        var byte: UInt8 = 0
        #expect(stream.read(&byte, maxLength: 1) == -1)
        #expect(events.count == 4)
    }

    @Test func aFileThatCannotBeOpenedIsOneEvent() throws {
        try withTemporaryDirectory { dir in
            let stream = ReadStream.file(atPath: dir)  // a directory: refused at open
            let recorder = EventRecorder { s, event in
                if event == .hasBytesAvailable, let r = s as? ReadStream {
                    var byte: UInt8 = 0
                    _ = r.read(&byte, maxLength: 1)
                }
            }
            let loop = try EventLoop()
            stream.delegate = recorder
            stream.schedule(on: loop)
            stream.open()
            loop.run(for: .seconds(10))
            // An open that fails reports errorOccurred alone (no openCompleted), once.
            #expect(recorder.events == [.errorOccurred])
            #expect(stream.streamError?.errno == .isDirectory)
        }
    }
}
