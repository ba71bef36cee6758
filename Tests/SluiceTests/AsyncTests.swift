import Foundation
import Synchronization
import Testing

@testable import Sluice

/// Waits (polling a condition) until `condition` holds or `deadline` passes.
func eventually(_ deadline: Duration = .seconds(20), _ condition: () -> Bool) async -> Bool {
    let end = ContinuousClock.now + deadline
    while !condition() {
        if ContinuousClock.now > end { return false }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return true
}

@Suite struct ChunksTests {
    @Test func chunksDeliverEveryByteInOrderAndEnd() async throws {
        let input = randomBytes(3_000_000, seed: 5)
        var out: [UInt8] = []
        var sizes: [Int] = []
        for try await chunk in ReadStream.memory(input).chunks(ofAtMost: 65536) {
            #expect(!chunk.isEmpty && chunk.count <= 65536)
            sizes.append(chunk.count)
            out += chunk
        }
        let same = out == input
        #expect(same)
        #expect(sizes.count >= 3_000_000 / 65536)
    }

    @Test func aFileReadThroughChunksClosesWhenDone() async throws {
        let dir = NSTemporaryDirectory() + "sluice-chunks-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let input = randomBytes(1_234_567, seed: 6)
        try Data(input).write(to: URL(fileURLWithPath: dir + "/f"))
        var out: [UInt8] = []
        for try await chunk in ReadStream.file(atPath: dir + "/f").chunks(ofAtMost: 1 << 20) { out += chunk }
        let same = out == input
        #expect(same)
    }

    @Test func theStreamsErrorIsThrown() async throws {
        let stream = ReadStream.file(atPath: "/nonexistent/sluice/\(UUID().uuidString)")
        var error: SluiceError?
        do {
            for try await _ in stream.chunks() {}
        } catch let e as SluiceError {
            error = e
        }
        #expect(error?.errno == .noSuchFile)
        // An error after some bytes: the bytes first, then the error.
        var got: [UInt8] = []
        do {
            for try await chunk in ReadStream.custom(PieceSource([1, 2, 3, 4], piece: 2, failAtEnd: true), name: "p")
                .chunks()
            {
                got += chunk
            }
            Issue.record("no error thrown")
        } catch let e as SluiceError {
            #expect(e.code == .corruptData)
        }
        #expect(got == [1, 2, 3, 4])
    }

    @Test func aSecondIteratorThrows() async throws {
        let chunks = ReadStream.memory(randomBytes(1000)).chunks()
        var first = chunks.makeAsyncIterator()
        var second = chunks.makeAsyncIterator()
        await #expect(throws: SluiceError.self) { _ = try await second.next() }
        var total = 0
        while let chunk = try await first.next() { total += chunk.count }
        #expect(total == 1000)
        #expect(try await first.next() == nil)  // after the end: nil again, no hang
    }

    @Test func readingAClosedStreamThrows() async throws {
        let stream = ReadStream.memory([1, 2, 3])
        stream.open()
        stream.close()
        await #expect(throws: SluiceError.self) {
            for try await _ in stream.chunks() {}
        }
    }

    @Test func readingStopsWhileTheConsumerLags() async throws {
        // A bound pair fed from another thread: the writer can only get ahead by what the
        // chunk buffer and the pair's buffer hold.
        nonisolated(unsafe) let (reader, writer) = boundPair(bufferSize: 64 * 1024)
        let written = Atomic<Int>(0)
        let stop = Atomic<Bool>(false)
        let writerBox = UncheckedBox(writer)
        let feeder = Thread {
            let w = writerBox.value
            w.open()
            let block = [UInt8](repeating: 7, count: 4096)
            while !stop.load(ordering: .relaxed) {
                let n = block.withUnsafeBytes { w.write(from: $0) }
                if n <= 0 { break }
                written.add(n, ordering: .relaxed)
            }
            w.close()
        }
        feeder.start()
        var iterator = ByteChunks(reader, chunkSize: 16 * 1024, bufferLimit: 64 * 1024).makeAsyncIterator()
        _ = try await iterator.next()
        // The consumer now lags: the writer must stall at chunk buffer + pair buffer + one chunk.
        #expect(await eventually { written.load(ordering: .relaxed) > 64 * 1024 })
        let bound = 64 * 1024 + 64 * 1024 + 2 * 16 * 1024 + 4096
        for _ in 0..<20 {
            try await Task.sleep(for: .milliseconds(10))
            #expect(written.load(ordering: .relaxed) <= bound)
        }
        stop.store(true, ordering: .relaxed)
        var rest = 0
        while let chunk = try await iterator.next() { rest += chunk.count }
        #expect(rest > 0)
    }

    @Test func cancellingTheTaskClosesTheStream() async throws {
        nonisolated(unsafe) let (reader, writer) = boundPair(bufferSize: 1024)
        writer.open()
        let task = Task {
            var total = 0
            for try await chunk in ByteChunks(reader) { total += chunk.count }
            return total
        }
        // Nothing is ever written: the task waits in next() until cancelled.
        try await Task.sleep(for: .milliseconds(20))
        task.cancel()
        await #expect(throws: CancellationError.self) { _ = try await task.value }
        // The reader was closed: the writer sees it (the pair's write side fails).
        #expect(
            await eventually {
                writer.write(all: [1]) == false
            })
    }

    @Test func breakingOutClosesTheStream() async throws {
        let source = PieceSource(randomBytes(100_000), piece: 1000)
        for try await _ in ReadStream.custom(source, name: "p").chunks(ofAtMost: 1000) { break }
        #expect(await eventually { source.closedFlag })
    }
}

extension PieceSource {
    var closedFlag: Bool { closedBox.withLock { $0 } }
}

@Suite struct AsyncWriterTests {
    @Test func writesEverythingThenFinishes() async throws {
        let sink = WriteStream.toMemory()
        let probe = UncheckedBox(sink)
        let writer = AsyncByteWriter(sink, bufferLimit: 100_000)
        let input = randomBytes(1_000_000, seed: 8)
        for offset in stride(from: 0, to: input.count, by: 30_000) {
            try await writer.write(Array(input[offset..<min(offset + 30_000, input.count)]))
        }
        try await writer.finish()
        #expect(probe.value.streamStatus == .closed)
        #expect(probe.value.dataWrittenToMemory == Data(input))
        try await writer.finish()  // a second finish returns at once
        await #expect(throws: SluiceError.self) { try await writer.write([1]) }
    }

    @Test func writeSuspendsWhileThereIsNoSpace() async throws {
        nonisolated(unsafe) let (reader, writerEnd) = boundPair(bufferSize: 4096)
        let writer = AsyncByteWriter(writerEnd, bufferLimit: 8192)
        let task = Task {
            for _ in 0..<64 { try await writer.write([UInt8](repeating: 1, count: 1024)) }
            try await writer.finish()
        }
        // Nobody reads: the writes must stall, with at most buffer + pair buffer queued.
        try await Task.sleep(for: .milliseconds(50))
        reader.open()
        var total = 0
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = reader.read(&buffer, maxLength: buffer.count)
            if n <= 0 { break }
            total += n
        }
        try await task.value
        #expect(total == 64 * 1024)
    }

    @Test func contentsOfCopiesAnotherStream() async throws {
        let input = randomBytes(500_000, seed: 9)
        let sink = WriteStream.toMemory()
        let probe = UncheckedBox(sink)
        let writer = AsyncByteWriter(sink)
        try await writer.write(contentsOf: ReadStream.memory(input).chunks(ofAtMost: 10_000))
        try await writer.finish()
        #expect(probe.value.dataWrittenToMemory == Data(input))
    }

    @Test func aFullStreamIsAnError() async throws {
        let writer = AsyncByteWriter(WriteStream.toBuffer(capacity: 10))
        do {
            try await writer.write([UInt8](repeating: 0, count: 100))
            try await writer.finish()
            Issue.record("no error")
        } catch let error as SluiceError {
            #expect(error.errno == .noSpace)
        }
    }

    @Test func aFailedOpenIsThrown() async throws {
        let writer = AsyncByteWriter(WriteStream.file(atPath: "/nonexistent/sluice/\(UUID().uuidString)/f"))
        await #expect(throws: SluiceError.self) {
            try await writer.write([1, 2, 3])
            try await writer.finish()
        }
    }
}

@Suite struct PipelineAsyncTests {
    @Test func runOnTheSharedLoopManyAtOnce() async throws {
        let inputs = (0..<8).map { randomBytes(300_000, seed: UInt64($0 + 1)) }
        try await withThrowingTaskGroup(of: Bool.self) { group in
            for input in inputs {
                group.addTask {
                    let sink = WriteStream.toMemory()
                    let probe = UncheckedBox(sink)
                    let result = try await Pipeline(source: .memory(input), sink: sink).run()
                    return result.succeeded && probe.value.dataWrittenToMemory == Data(input)
                }
            }
            for try await ok in group { #expect(ok) }
        }
    }

    @Test func cancellationStopsThePipeline() async throws {
        nonisolated(unsafe) let (reader, writer) = boundPair(bufferSize: 1024)
        writer.open()
        let task = Task { try await Pipeline(source: reader, sink: .toMemory()).run() }
        try await Task.sleep(for: .milliseconds(20))
        task.cancel()
        await #expect(throws: CancellationError.self) { _ = try await task.value }
        #expect(await eventually { writer.write(all: [1]) == false })
    }

    @Test func aCancelledTaskNeverStartsCopying() async throws {
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await Pipeline(source: .memory([1, 2, 3]), sink: .discard()).run()
        }
        // Cancelled before the loop started it: either thrown or, if the copy won the race, done.
        do {
            let result = try await task.value
            #expect(result.succeeded)
        } catch is CancellationError {}
    }
}

@Suite struct ScopedStreamsTests {
    @Test func withConnectionEchoesAndCloses() async throws {
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        let port = listener.port
        let listenerBox = UncheckedBox(listener)
        let server = Thread {
            guard let (input, output, _) = try? listenerBox.value.accept(timeout: .seconds(20)) else { return }
            input.open()
            output.open()
            let data = (try? input.readToEnd()) ?? Data()
            output.write(all: data.reversed())
            output.close()
            input.close()
        }
        server.start()
        let reply = try await withConnection(host: "127.0.0.1", port: port) { input, output in
            try await output.write(Array("hello".utf8))
            try await output.finish()  // half-close: the server reads the end, then replies
            var got: [UInt8] = []
            for try await chunk in input { got += chunk }
            return got
        }
        #expect(String(decoding: reply, as: UTF8.self) == "olleh")
        listener.close()
    }

    @Test func aThrowingBodyClosesBoth() async throws {
        nonisolated(unsafe) let (reader, writerEnd) = boundPair(bufferSize: 1024)
        nonisolated(unsafe) let sink = WriteStream.toMemory()
        let probe = UncheckedBox(sink)
        struct Boom: Error {}
        await #expect(throws: Boom.self) {
            try await withStreams(reading: reader, writing: sink) { _, output in
                try await output.write([1, 2, 3])
                throw Boom()
            }
        }
        #expect(await eventually { probe.value.streamStatus == .closed })
        writerEnd.close()
    }
}
