import Foundation
import TestThreads
import Testing

@testable import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The event contract of the seeds, kind by kind.
@Suite(.ownThreads) struct StreamEventTests {
    @Test func memoryReadDeliversOpenBytesEndInOrder() throws {
        let loop = try EventLoop()
        let stream = ReadStream.memory(Array("hello, sluice".utf8))
        var got: [UInt8] = []
        let recorder = EventRecorder { s, event in
            guard event == .hasBytesAvailable else { return }
            var buf = [UInt8](repeating: 0, count: 4)
            let n = buf.withUnsafeMutableBytes { (s as! ReadStream).read(into: $0) }
            got += buf[0..<max(n, 0)]
        }
        stream.delegate = recorder
        stream.schedule(on: loop)
        stream.open()
        loop.run(for: .seconds(5))
        #expect(String(decoding: got, as: UTF8.self) == "hello, sluice")
        #expect(recorder.events.first == .openCompleted)
        #expect(recorder.events.last == .endEncountered)
        #expect(recorder.events.filter { $0 == .endEncountered }.count == 1)
        #expect(recorder.events.dropFirst().dropLast().allSatisfy { $0 == .hasBytesAvailable })
        #expect(stream.streamStatus == .atEnd)
        stream.close()
        #expect(stream.streamStatus == .closed)
    }

    @Test func fileReadAndWriteEventOrder() throws {
        try withTemporaryDirectory { dir in
            let path = dir + "/in"
            try Data("abc".utf8).write(to: URL(fileURLWithPath: path))
            let loop = try EventLoop()
            let reader = ReadStream.file(atPath: path)
            let writer = WriteStream.file(atPath: dir + "/out")
            let readEvents = EventRecorder { s, e in
                if e == .hasBytesAvailable {
                    var b = [UInt8](repeating: 0, count: 16)
                    _ = b.withUnsafeMutableBytes { (s as! ReadStream).read(into: $0) }
                }
            }
            let writeEvents = EventRecorder()
            reader.delegate = readEvents
            writer.delegate = writeEvents
            reader.schedule(on: loop)
            writer.schedule(on: loop)
            reader.open()
            writer.open()
            #expect(runLoop(loop) { readEvents.events.contains(.endEncountered) && !writeEvents.events.isEmpty })
            loop.run(for: .milliseconds(50))  // and then nothing more
            #expect(readEvents.events == [.openCompleted, .hasBytesAvailable, .hasBytesAvailable, .endEncountered])
            // The writer never wrote, so it was offered space exactly once.
            #expect(writeEvents.events == [.openCompleted, .hasSpaceAvailable])
            reader.close()
            writer.close()
        }
    }

    @Test func hasSpaceAvailableComesOncePerReadinessUntilTheDelegateWrites() throws {
        let loop = try EventLoop()
        let stream = WriteStream.toMemory()
        var offers = 0
        var pendingWrite = false
        stream.eventHandler = { _, event in
            if event == .hasSpaceAvailable {
                offers += 1
                pendingWrite = true  // nothing to write yet: the seeds' flag
            }
        }
        stream.schedule(on: loop)
        stream.open()
        #expect(runLoop(loop) { offers == 1 })
        loop.run(for: .milliseconds(50))  // and no second offer while nothing was written
        #expect(offers == 1)
        // Data arrives: the flag says write at once, which re-arms the event.
        #expect(pendingWrite)
        #expect(stream.write([1, 2, 3], maxLength: 3) == 3)
        #expect(runLoop(loop) { offers == 2 })
        stream.close()
        stream.remove(from: loop)
    }

    @Test func hasBytesAvailableComesOncePerReadinessUntilTheDelegateReads() throws {
        let loop = try EventLoop()
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        let reader = ReadStream.descriptor(fds[0], closeWhenDone: true)
        var offers = 0
        reader.eventHandler = { _, event in if event == .hasBytesAvailable { offers += 1 } }
        reader.schedule(on: loop)
        reader.open()
        _ = write(fds[1], "xyz", 3)
        #expect(runLoop(loop) { offers == 1 })
        loop.run(for: .milliseconds(50))
        #expect(offers == 1)  // level-triggered data still there, but not read: no second event
        var buf = [UInt8](repeating: 0, count: 1)
        #expect(buf.withUnsafeMutableBytes { reader.read(into: $0) } == 1)
        #expect(runLoop(loop) { offers == 2 })
        reader.close()
        close(fds[1])
    }

    @Test func tryReadFillingTakesWhatIsThereReArmsAndReportsTheEndAfterBytes() throws {
        let loop = try EventLoop()
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        let reader = ReadStream.descriptor(fds[0], closeWhenDone: true)
        var events: [StreamEvent] = []
        reader.eventHandler = { _, event in events.append(event) }
        reader.schedule(on: loop)
        reader.open()
        var buffer = [UInt8](repeating: 0, count: 65536)
        // Two writes before the read: one call takes both, and stops (no blocking) at the empty pipe.
        _ = write(fds[1], "abc", 3)
        _ = write(fds[1], "defg", 4)
        #expect(runLoop(loop) { events.contains(.hasBytesAvailable) })
        #expect(buffer.withUnsafeMutableBytes { reader.tryReadFilling(into: $0) } == .processed(7))
        #expect(Array(buffer[0..<7]) == Array("abcdefg".utf8))
        #expect(reader.streamStatus == .open)
        // The empty read re-armed the stream: the next bytes are offered.
        let offersBefore = events.filter { $0 == .hasBytesAvailable }.count
        _ = write(fds[1], "hi", 2)
        #expect(runLoop(loop) { events.filter { $0 == .hasBytesAvailable }.count > offersBefore })
        #expect(events.filter { $0 == .hasBytesAvailable }.count == offersBefore + 1)
        // Bytes then the end: the bytes are returned, the end is reported by its event and the next read.
        _ = write(fds[1], "jk", 2)
        close(fds[1])
        #expect(buffer.withUnsafeMutableBytes { reader.tryReadFilling(into: $0) } == .processed(4))
        #expect(Array(buffer[0..<4]) == Array("hijk".utf8))
        #expect(runLoop(loop) { events.contains(.endEncountered) })
        #expect(events.last == .endEncountered)
        #expect(buffer.withUnsafeMutableBytes { reader.tryReadFilling(into: $0) } == .processed(0))
        reader.close()
    }

    /// Hands out at most three bytes a read, like a socket holding one small segment at a time.
    private final class TrickleStream: ReadStream {
        var bytes: [UInt8]
        var reads = 0
        init(_ bytes: [UInt8]) {
            self.bytes = bytes
            super.init(name: "trickle")
        }
        override func readPrimitive(_ buffer: UnsafeMutableRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
            reads += 1
            guard !bytes.isEmpty else { return .wouldBlock }
            let n = min(3, buffer.count, bytes.count)
            buffer.copyBytes(from: bytes[0..<n])
            bytes.removeFirst(n)
            return .processed(n)
        }
    }

    @Test func tryReadFillingReadsOnWhileShortReadsFindBytes() {
        let stream = TrickleStream(Array("abcdefghij".utf8))
        stream.open()
        var buffer = [UInt8](repeating: 0, count: 8)
        // Full after three reads (3 + 3 + 2): no fourth read.
        #expect(buffer.withUnsafeMutableBytes { stream.tryReadFilling(into: $0) } == .processed(8))
        #expect(buffer == Array("abcdefgh".utf8))
        #expect(stream.reads == 3)
        // Two bytes left, then a read that finds nothing: the two bytes.
        #expect(buffer.withUnsafeMutableBytes { stream.tryReadFilling(into: $0) } == .processed(2))
        #expect(Array(buffer[0..<2]) == Array("ij".utf8))
        #expect(stream.reads == 5)
        // Nothing at all: would block, as tryRead.
        #expect(buffer.withUnsafeMutableBytes { stream.tryReadFilling(into: $0) } == .wouldBlock)
    }

    @Test func pipeEndOfStreamAndEvents() throws {
        let loop = try EventLoop()
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        let reader = ReadStream.descriptor(fds[0], closeWhenDone: true)
        let writer = WriteStream.descriptor(fds[1], closeWhenDone: true)
        let payload = randomBytes(300_000)
        var received: [UInt8] = []
        var sent = 0
        var readerEvents: [StreamEvent] = []
        reader.eventHandler = { s, e in
            readerEvents.append(e)
            if e == .hasBytesAvailable {
                var b = [UInt8](repeating: 0, count: 8192)
                let n = b.withUnsafeMutableBytes { reader.read(into: $0) }
                if n > 0 { received += b[0..<n] }
            }
            if e == .endEncountered { s.close() }
        }
        writer.eventHandler = { s, e in
            if e == .hasSpaceAvailable {
                let n = payload.withUnsafeBytes {
                    writer.write(from: UnsafeRawBufferPointer(rebasing: $0[sent..<min(sent + 50_000, payload.count)]))
                }
                sent += max(n, 0)
                if sent == payload.count { s.close() }
            }
        }
        reader.schedule(on: loop)
        writer.schedule(on: loop)
        reader.open()
        writer.open()
        loop.run(for: .seconds(10))
        #expect(received.elementsEqual(payload), "\(received.count) bytes received of \(payload.count)")
        #expect(readerEvents.first == .openCompleted)
        #expect(readerEvents.last == .endEncountered)
    }

    @Test func writeToPipeWithClosedReaderIsEPIPENotACrash() throws {
        let loop = try EventLoop()
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        close(fds[0])
        let writer = WriteStream.descriptor(fds[1], closeWhenDone: true)
        var events: [StreamEvent] = []
        writer.eventHandler = { s, e in
            events.append(e)
            if e == .hasSpaceAvailable {
                #expect((s as! WriteStream).write([1, 2], maxLength: 2) == -1)
            }
        }
        writer.schedule(on: loop)
        writer.open()
        loop.run(for: .seconds(5))
        #expect(events == [.openCompleted, .hasSpaceAvailable, .errorOccurred])
        #expect(writer.streamStatus == .error)
        #expect(writer.streamError?.errno == .brokenPipe)
        writer.close()
    }

    @Test func errorOccurredIsDeliveredOnceThenSilence() throws {
        let loop = try EventLoop()
        let stream = ReadStream.file(atPath: "/nonexistent/sluice/missing")
        let recorder = EventRecorder()
        stream.delegate = recorder
        stream.schedule(on: loop)
        stream.open()
        #expect(runLoop(loop) { !recorder.events.isEmpty })
        loop.run(for: .milliseconds(50))  // once, then silence
        #expect(recorder.events == [.errorOccurred])
        #expect(stream.streamStatus == .error)
        let error = try #require(stream.streamError)
        #expect(error.errno == .noSuchFile)
        #expect(error.description == "open \"/nonexistent/sluice/missing\": No such file or directory (errno 2)")
        var b = [UInt8](repeating: 0, count: 4)
        #expect(b.withUnsafeMutableBytes { stream.read(into: $0) } == -1)
        loop.run(for: .milliseconds(50))
        #expect(recorder.events == [.errorOccurred])
    }

    /// `stream.delegate = Recorder()`: the delegate is held weakly and freed at once. The first
    /// event finds it gone and the stream notices (a debug build says so on standard error).
    @Test func aDelegateFreedAtOnceIsNoticedAtTheFirstEvent() throws {
        let loop = try EventLoop()
        let stream = ReadStream.memory([1, 2, 3])
        stream.delegate = EventRecorder()
        #expect(stream.delegate == nil)
        stream.schedule(on: loop)
        stream.open()
        #expect(stream.machine.pointee.delegateWasSet)
        #expect(runLoop(loop) { !stream.machine.pointee.delegateWasSet })
        stream.close()

        let cleared = ReadStream.memory([1])
        let recorder = EventRecorder()
        cleared.delegate = recorder
        cleared.delegate = nil
        #expect(!cleared.machine.pointee.delegateWasSet)
    }

    /// A path is quoted whether it is absolute or relative; an address, `fd N` or `memory` is not.
    @Test func errorMessagesQuoteEveryPathAndNothingElse() throws {
        let relative = "sluice-missing-\(getpid())"
        let missing = ReadStream.file(atPath: relative)
        missing.open()
        #expect(missing.streamError?.description == "open \"\(relative)\": No such file or directory (errno 2)")
        let dotted = WriteStream.file(atPath: "./\(relative)/out")
        dotted.open()
        #expect(dotted.streamError?.description == "open \"./\(relative)/out\": No such file or directory (errno 2)")

        var b = [UInt8](repeating: 0, count: 4)
        let unopened = ReadStream.file(atPath: "in")
        #expect(b.withUnsafeMutableBytes { unopened.read(into: $0) } == -1)
        #expect(unopened.streamError?.description == "read \"in\": stream is not open")
        let named = WriteStream.descriptor(1, path: "out file")
        #expect(named.write([1], maxLength: 1) == -1)
        #expect(named.streamError?.description == "write \"out file\": stream is not open")
        let bare = ReadStream.descriptor(0)
        #expect(b.withUnsafeMutableBytes { bare.read(into: $0) } == -1)
        #expect(bare.streamError?.description == "read fd 0: stream is not open")

        #expect(SluiceError(.system(.noSuchFile), operation: "open", path: "in").description.hasPrefix("open \"in\": "))
        #expect(
            SluiceError(.refused, operation: "connect", subject: "127.0.0.1:80").description
                == "connect 127.0.0.1:80: refused")
        #expect(
            SluiceError(.corruptData, operation: "inflate", subject: "gzip").description == "inflate gzip: corrupt data"
        )
    }

    @Test func writingIntoAReadOnlyDirectoryFails() throws {
        try withTemporaryDirectory { dir in
            // root ignores directory modes, so as root use a directory the kernel itself refuses.
            let target: String
            if geteuid() == 0 {
                target = "/sys/sluice-test-\(getpid())"
            } else {
                #expect(chmod(dir, 0o555) == 0)
                target = dir + "/file"
            }
            defer { chmod(dir, 0o755) }
            let stream = WriteStream.file(atPath: target)
            stream.open()
            #expect(stream.streamStatus == .error)
            #expect(stream.streamError?.errno == .permissionDenied)
            #expect(stream.streamError?.subject == target)
            #expect(!FileManager.default.fileExists(atPath: target))
        }
    }

    @Test func misuseReturnsMinusOneWithAReasonAndNeverTraps() throws {
        let reader = ReadStream.memory([1, 2, 3])
        var b = [UInt8](repeating: 0, count: 4)
        #expect(b.withUnsafeMutableBytes { reader.read(into: $0) } == -1)
        #expect(reader.streamError?.code == .notOpen)
        #expect(reader.streamStatus == .notOpen)
        #expect(!reader.hasBytesAvailable)
        reader.open()
        reader.close()
        reader.close()  // idempotent
        #expect(b.withUnsafeMutableBytes { reader.read(into: $0) } == -1)
        #expect(reader.streamError?.code == .closed)
        #expect(reader.streamStatus == .closed)

        let writer = WriteStream.toMemory()
        #expect(writer.write([1], maxLength: 1) == -1)
        #expect(writer.streamError?.code == .notOpen)
        #expect(!writer.hasSpaceAvailable)
        writer.open()
        writer.close()
        #expect(writer.write([1], maxLength: 1) == -1)
        #expect(writer.streamError?.description == "write memory: stream is closed")
    }
}
