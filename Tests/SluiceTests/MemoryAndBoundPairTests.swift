import Foundation
import TestThreads
import Testing

@testable import Sluice

@Suite(.ownThreads) struct MemoryAndBoundPairTests {
    @Test func growableMemoryWriteKeepsEverything() throws {
        let stream = WriteStream.toMemory()
        stream.open()
        let data = randomBytes(100_000)
        #expect(stream.write(all: data))
        #expect(stream.property(forKey: .dataWrittenToMemory) as? Data == Data(data))
        #expect(stream.property(forKey: .fileCurrentOffset) as? UInt64 == 100_000)
        stream.close()
        // Still readable after close, as NSStreamDataWrittenToMemoryStreamKey is.
        #expect((stream.property(forKey: .dataWrittenToMemory) as? Data)?.count == 100_000)
    }

    @Test func fixedCapacityStopsAtCapacity() throws {
        let loop = try EventLoop()
        let stream = WriteStream.toBuffer(capacity: 10)
        var events: [StreamEvent] = []
        var accepted: [Int] = []
        stream.eventHandler = { s, e in
            events.append(e)
            if e == .hasSpaceAvailable {
                let four = [UInt8](repeating: 7, count: 4)
                accepted.append(four.withUnsafeBytes { (s as! WriteStream).write(from: $0) })
            }
        }
        stream.schedule(on: loop)
        stream.open()
        loop.run(for: .seconds(2))
        #expect(accepted == [4, 4, 2])
        #expect(events.last == .endEncountered)
        #expect(!stream.hasSpaceAvailable)
        #expect(stream.write([1], maxLength: 1) == 0)
        #expect((stream.property(forKey: .dataWrittenToMemory) as? Data)?.count == 10)
    }

    @Test func boundPairPartialWritesAndPollingMode() throws {
        let (reader, writer) = boundPair(bufferSize: 10)
        reader.open()
        writer.open()
        let data = Array(0..<100).map { UInt8($0) }
        #expect(data.withUnsafeBytes { writer.write(from: $0) } == 10)  // partial: only 10 fit
        #expect(!writer.hasSpaceAvailable)
        #expect(reader.hasBytesAvailable)
        var buf = [UInt8](repeating: 0, count: 4)
        #expect(buf.withUnsafeMutableBytes { reader.read(into: $0) } == 4)
        #expect(buf == [0, 1, 2, 3])
        #expect(writer.hasSpaceAvailable)
        writer.close()
        var rest = [UInt8](repeating: 0, count: 100)
        #expect(rest.withUnsafeMutableBytes { reader.read(into: $0) } == 6)
        #expect(rest.withUnsafeMutableBytes { reader.read(into: $0) } == 0)
        #expect(reader.streamStatus == .atEnd)
    }

    @Test func boundPairBackpressureOnTheLoop() throws {
        let loop = try EventLoop()
        let (reader, writer) = boundPair(bufferSize: 1000)
        let payload = randomBytes(50_000)
        var sent = 0
        var received: [UInt8] = []
        var spaceOffers = 0
        var readerPaused = true
        writer.eventHandler = { s, e in
            guard e == .hasSpaceAvailable else { return }
            spaceOffers += 1
            let w = s as! WriteStream
            if sent == payload.count {
                w.close()
                return
            }
            let n = payload.withUnsafeBytes {
                w.write(from: UnsafeRawBufferPointer(rebasing: $0[sent..<min(sent + 300, payload.count)]))
            }
            sent += n
        }
        reader.eventHandler = { s, e in
            let r = s as! ReadStream
            if e == .hasBytesAvailable && !readerPaused {
                var b = [UInt8](repeating: 0, count: 256)
                let n = b.withUnsafeMutableBytes { r.read(into: $0) }
                if n > 0 { received += b[0..<n] }
            }
            if e == .endEncountered { r.close() }
        }
        reader.schedule(on: loop)
        writer.schedule(on: loop)
        reader.open()
        writer.open()
        // The reader ignores its first event: the writer fills the buffer and then hears nothing.
        #expect(runLoop(loop) { sent == 1000 })
        loop.run(for: .milliseconds(50))
        // 300 + 300 + 300 + 100 bytes: four offers, then the buffer is full and none come.
        #expect(sent == 1000)
        #expect(spaceOffers == 4)
        #expect(!writer.hasSpaceAvailable)
        // Drain: reading re-arms the reader and frees space, so the writer is offered space again.
        readerPaused = false
        var b = [UInt8](repeating: 0, count: 256)
        let n = b.withUnsafeMutableBytes { reader.read(into: $0) }
        received += b[0..<n]
        loop.run(for: .seconds(10))
        #expect(received.elementsEqual(payload), "\(received.count) bytes received of \(payload.count)")
        #expect(reader.streamStatus == .closed)
    }

    @Test func boundPairAcrossThreads() throws {
        let (reader, writer) = boundPair(bufferSize: 4096)
        let payload = randomBytes(1_000_000)
        let box = UncheckedBox(writer)
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            box.value.open()
            _ = box.value.write(all: payload)  // polling mode: blocks while the buffer is full
            box.value.close()
            done.signal()
        }
        thread.start()
        let loop = try EventLoop()
        var received: [UInt8] = []
        reader.eventHandler = { s, e in
            let r = s as! ReadStream
            if e == .hasBytesAvailable {
                var b = [UInt8](repeating: 0, count: 1500)
                let n = b.withUnsafeMutableBytes { r.read(into: $0) }
                if n > 0 { received += b[0..<n] }
            }
            if e == .endEncountered { r.close() }
        }
        reader.schedule(on: loop)
        reader.open()
        loop.run(for: .seconds(20))
        done.wait()
        #expect(received.elementsEqual(payload), "\(received.count) bytes received of \(payload.count)")
    }
}
