import Foundation
import Synchronization
import Testing

@testable import Sluice

/// Waits (polling a condition) until `condition` holds or `deadline` passes. The deadline only
/// bounds a failure, so it is generous: a clean-clone CI run once saw the two-core cooperative
/// pool held 24 s at the suite's start, and a writing task here starve past a 20 s deadline
/// (the suites that held it now run on their own threads, `.ownThreads`; 4 s since).
func eventually(_ deadline: Duration = .seconds(60), _ condition: () -> Bool) async -> Bool {
    let end = ContinuousClock.now + deadline
    while !condition() {
        if ContinuousClock.now > end { return false }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return true
}

/// A counter shared with a task.
final class Counter: Sendable {
    let value = Atomic<Int>(0)
}

/// The bytes waiting in the buffer of the bound pair whose read end is `reader`.
func bytesInPair(_ reader: ReadStream) throws -> () -> Int {
    let pair = try #require(reader as? BoundReadStream).shared
    return {
        pair.condition.lock()
        defer { pair.condition.unlock() }
        return pair.count
    }
}

/// A non-blocking one-byte write that fails (the reading end is closed); false while it succeeds
/// or would block.
func writeFails(_ writer: WriteStream) -> Bool {
    let result = [UInt8(1)].withUnsafeBytes { writer.tryWrite(from: $0) }
    if case .processed(let n) = result { return n < 0 }
    return false
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

    @Test func noChunkIsLostAtTheEndWhateverTheSizes() async throws {
        // The consumer is woken per burst of reads, not per chunk: the last chunks of a burst
        // that meets the end must still come before the end.
        for (size, chunk) in [(1_000_000, 65536), (3 << 20, 1 << 20), (777_777, 4096), (100, 1)] {
            for _ in 0..<5 {
                var total = 0
                for try await piece in ReadStream.memory(randomBytes(size)).chunks(ofAtMost: chunk) {
                    total += piece.count
                }
                #expect(total == size, "\(size) bytes in \(chunk)-byte chunks")
            }
        }
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
        let pairBytes = try bytesInPair(reader)
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
        let chunks = ByteChunks(reader, chunkSize: 16 * 1024, bufferLimit: 64 * 1024)
        var iterator = chunks.makeAsyncIterator()
        _ = try await iterator.next()
        // The consumer now lags. The stall is a state to wait for, not a time: the loop side
        // stopped reading (its buffer is full, and only the consumer's next() resumes it) and
        // the pair's buffer is full, so the writer is held. It got ahead by at most the chunk
        // buffer + the pair buffer + the chunk taken + one chunk over the limit + one block.
        #expect(await eventually { chunks.core.isPaused && pairBytes() == 64 * 1024 })
        let bound = 64 * 1024 + 64 * 1024 + 2 * 16 * 1024 + 4096
        #expect(written.load(ordering: .relaxed) > 64 * 1024)
        #expect(written.load(ordering: .relaxed) <= bound)
        stop.store(true, ordering: .relaxed)
        var rest = 0
        while let chunk = try await iterator.next() { rest += chunk.count }
        #expect(rest > 0)
    }

    @Test func cancellingTheTaskClosesTheStream() async throws {
        nonisolated(unsafe) let (reader, writer) = boundPair(bufferSize: 1024)
        writer.open()
        let received = Counter()
        let task = Task {
            for try await chunk in ByteChunks(reader) { received.value.add(chunk.count, ordering: .relaxed) }
        }
        // One byte, taken by the consumer: the stream is open on the loop, and the task then
        // waits in next() for more, which never comes, until it is cancelled.
        #expect(writer.write(all: [7]))
        #expect(await eventually { received.value.load(ordering: .relaxed) == 1 })
        task.cancel()
        await #expect(throws: CancellationError.self) { try await task.value }
        // The reader was closed: the writer sees it (the pair's write side fails).
        #expect(await eventually { writeFails(writer) })
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

@Suite struct ChunkFIFOTests {
    @Test func aTakenChunkIsNoLongerHeld() {
        var fifo = ChunkFIFO()
        for i in 0..<40 { fifo.append([UInt8](repeating: UInt8(i), count: 1000)) }
        #expect(fifo.bytes == 40_000)
        for i in 0..<39 {
            guard var chunk = fifo.popFirst() else {
                Issue.record("the queue ran dry at \(i)")
                return
            }
            let before = chunk.withUnsafeBytes { $0.baseAddress }
            chunk[0] = 0xFF  // no copy on write: the queue kept no reference to it
            #expect(chunk.withUnsafeBytes { $0.baseAddress } == before, "chunk \(i)")
        }
        #expect(fifo.bytes == 1000)
        #expect(fifo.first?.first == 39)
        fifo.consumed(400)
        #expect(fifo.bytes == 600)
        fifo.removeAll()
        #expect(fifo.isEmpty && fifo.bytes == 0 && fifo.popFirst() == nil)
    }
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
        let pairBytes = try bytesInPair(reader)
        let writer = AsyncByteWriter(writerEnd, bufferLimit: 8192)
        let returned = Counter()
        let task = Task {
            for _ in 0..<64 {
                try await writer.write([UInt8](repeating: 1, count: 1024))
                returned.value.add(1, ordering: .relaxed)
            }
            try await writer.finish()
        }
        // Nobody reads: the writes must stall, with at most buffer + pair buffer queued. The stall
        // is a state to wait for: a write suspended, the writer's queue at its limit, the pair's
        // buffer full.
        #expect(
            await eventually {
                writer.writesWaitingForSpace == 1 && writer.queuedBytes == 8192 && pairBytes() == 4096
            })
        // Eleven writes returned; the twelfth, whose bytes filled the queue, waits; none beyond.
        #expect(returned.value.load(ordering: .relaxed) == 11)
        // The blocking reads on a thread of their own: on the task's thread they would hold one
        // of the cooperative pool's threads (two on two cores), which the writing task needs.
        let readerBox = UncheckedBox(reader)
        let total = await withCheckedContinuation { (done: CheckedContinuation<Int, Never>) in
            Thread {
                let reader = readerBox.value
                reader.open()
                var total = 0
                var buffer = [UInt8](repeating: 0, count: 65536)
                while true {
                    let n = reader.read(&buffer, maxLength: buffer.count)
                    if n <= 0 { break }
                    total += n
                }
                done.resume(returning: total)
            }.start()
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
        let pairBytes = try bytesInPair(reader)
        writer.open()
        let task = Task { try await Pipeline(source: reader, sink: .toMemory()).run() }
        // Cancelled while it runs (a task cancelled before the loop starts its pipeline is
        // `aCancelledTaskNeverStartsCopying`): running is an event to wait for, the pipeline
        // taking a byte from its source. It then waits for more, which never comes.
        #expect(writer.write(all: [7]))
        #expect(await eventually { pairBytes() == 0 })
        task.cancel()
        await #expect(throws: CancellationError.self) { _ = try await task.value }
        // The pipeline opened its source before it was stopped, so the writer sees the close.
        #expect(await eventually { writeFails(writer) })
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

@Suite struct IncomingConnectionsTests {
    @Test func anEchoServerServesSeveralClients() async throws {
        let incoming = IncomingConnections(try Socket.listen(host: "127.0.0.1", port: 0))
        let port = try #require(incoming.address.port)
        let server = Task {
            for _ in 0..<3 {
                guard let connection = try await incoming.next() else { return }
                try await withStreams(connection) { input, output in try await output.write(contentsOf: input) }
            }
        }
        for i in 0..<3 {
            let message = randomBytes(100_000 + i, seed: UInt64(i + 40))
            let reply = try await withConnection(host: "127.0.0.1", port: port) { input, output in
                try await output.write(message)
                try await output.finish()
                var reply: [UInt8] = []
                for try await chunk in input { reply += chunk }
                return reply
            }
            let same = reply == message
            #expect(same, "client \(i)")
        }
        try await server.value
        incoming.close()
        #expect(try await incoming.next() == nil)
    }

    @Test func closeEndsAWaitingNext() async throws {
        let incoming = IncomingConnections(try Socket.listen(host: "127.0.0.1", port: 0))
        let waiting = Task { try await incoming.next() == nil }
        #expect(await eventually { incoming.hasWaiter })
        incoming.close()
        #expect(try await waiting.value)
    }

    /// A stress run crashed with "close(32): EBADF, descriptor closed twice": `close()` handed
    /// the listener's close to the loop, and the deinit that followed closed it again at once
    /// from the test's thread, racing the loop's. A second close must do nothing; the loop
    /// closes the listener, once. Here the loop is held busy so the order is fixed: while it is
    /// held the port still takes connections (nothing closed it from this thread), and once it
    /// has run, the port refuses them.
    @Test func aSecondCloseLeavesTheListenerToTheLoop() async throws {
        // 127.0.0.2: once this listener is closed, its port may be taken by another test's on
        // 127.0.0.1, which must not answer the connects that check it is gone.
        let incoming = IncomingConnections(try Socket.listen(host: "127.0.0.2", port: 0))
        let port = try #require(incoming.address.port)
        #expect(listensOn127002(port: port))
        let waiting = Task { try await incoming.next() == nil }  // starts accepting on the loop
        let loop = try EventLoop.shared
        let (input, output) = Socket.connect(host: "127.0.0.2", port: port)
        input.open()
        output.open()
        defer {
            input.close()
            output.close()
        }
        #expect(try await waiting.value == false)  // the loop accepted it: the listener is on the loop
        let held = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        loop.execute {
            held.signal()
            release.wait()
        }
        held.wait()
        incoming.close()
        incoming.close()
        #expect(tcpConnects(port: port, host: "127.0.0.2"), "the second close() closed the listener off the loop")
        release.signal()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in loop.execute { done.resume() } }
        // Asked of the kernel's table rather than by connecting: a listener of another test on
        // the wildcard address may have taken the port number since, and would answer. Waited
        // for, not read once: a process another test is spawning at this moment holds a copy of
        // every descriptor until its exec (close-on-exec closes them there), and keeps the
        // socket listening until then; CI saw exactly that once.
        #expect(await eventually { !listensOn127002(port: port) })
    }

    @Test func cancellingAWaitingNextThrows() async throws {
        let incoming = IncomingConnections(try Socket.listen(host: "127.0.0.1", port: 0))
        let waiting = Task { _ = try await incoming.next() != nil }
        #expect(await eventually { incoming.hasWaiter })
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
        incoming.close()
    }

    @Test func connectionsBeyondTheQueueAreClosed() async throws {
        let incoming = IncomingConnections(try Socket.listen(host: "127.0.0.1", port: 0), maximumQueued: 2)
        let port = try #require(incoming.address.port)
        let waiter = Task { try await incoming.next() != nil }  // starts accepting; takes the first
        var clients: [(ReadStream, WriteStream)] = []
        let first = Socket.connect(host: "127.0.0.1", port: port)
        first.0.open()
        first.1.open()
        clients.append(first)
        #expect(try await waiter.value)
        // Four more: two wait in the queue, two find it full and are closed (they read the end).
        // The outcome is a state to wait for (the shared loop accepts them when it gets the
        // CPU): two clients have read the end and two connections are queued. It is final —
        // queued connections stay open until taken or closed — so the two clients left must
        // still be open then, with no window to wait out.
        var pending: [ReadStream] = []
        for _ in 0..<4 {
            let (input, output) = Socket.connect(host: "127.0.0.1", port: port)
            input.open()
            output.open()
            clients.append((input, output))
            pending.append(input)
        }
        var ended = 0
        let settled = await eventually {
            ended += endedClients(&pending)
            return ended > 2 || (ended == 2 && incoming.queuedCount == 2)
        }
        #expect(settled && ended == 2, "\(ended) clients closed, \(incoming.queuedCount) queued")
        #expect(endedClients(&pending) == 0, "a queued connection was closed")
        #expect(pending.count == 2)
        for (input, output) in clients {
            output.close()
            input.close()
        }
        incoming.close()
    }
}

/// Polls the sockets of `clients` once, without waiting; removes those that are readable (a
/// client that reads the end, or fails) and returns how many read the end.
private func endedClients(_ clients: inout [ReadStream]) -> Int {
    var fds = clients.map { pollfd(fd: $0.fileDescriptor ?? -1, events: Int16(POLLIN), revents: 0) }
    guard poll(&fds, nfds_t(fds.count), 0) > 0 else { return 0 }
    var ended = 0
    for index in fds.indices.reversed() where fds[index].revents != 0 {
        if (try? clients[index].readToEnd()) == Data() { ended += 1 }
        clients.remove(at: index)
    }
    return ended
}

/// Whether a blocking TCP connect to 127.0.0.1:`port` succeeds (a listening socket takes it into
/// its backlog even while nobody accepts).
/// Whether a socket listens on 127.0.0.2:`port` itself (not on the wildcard address), as
/// `/proc/net/tcp` lists it: local address `0200007F:PORT`, state `0A`.
func listensOn127002(port: UInt16) -> Bool {
    guard let table = try? String(contentsOfFile: "/proc/net/tcp", encoding: .utf8) else { return false }
    let local = "0200007F:" + String(format: "%04X", port)
    return table.split(separator: "\n").contains { line in
        let fields = line.split(separator: " ")
        return fields.count > 3 && fields[1] == local && fields[3] == "0A"
    }
}

func tcpConnects(port: UInt16, host: String = "127.0.0.1") -> Bool {
    let fd = connectLoopback(port: port, host: host)
    guard fd >= 0 else { return false }
    close(fd)
    return true
}
