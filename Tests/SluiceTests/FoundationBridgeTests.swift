import Foundation
import SluiceFoundation
import Synchronization
import TestThreads
import Testing

@testable import Sluice

/// A minimal HTTP/1.1 server on sluice's own sockets (127.0.0.1, a port the kernel picks) that
/// accepts one request, reads its body (Content-Length or chunked; answering
/// `Expect: 100-continue`), and replies with the body's length. For testing URLSession uploads.
final class OneRequestHTTPServer: @unchecked Sendable {
    let listener: SocketListener
    var port: UInt16 { listener.port }
    private let result = Mutex<(method: String, body: [UInt8])?>(nil)

    init() throws {
        listener = try Socket.listen(host: "127.0.0.1", port: 0)
    }

    /// Serves one request on a thread of its own.
    func start() {
        let box = UncheckedBox(self)
        Thread { box.value.serve() }.start()
    }

    /// The request's method and body, once served.
    var request: (method: String, body: [UInt8])? { result.withLock { $0 } }

    private func serve() {
        guard let (input, output, _) = try? listener.accept(timeout: .seconds(30)) else { return }
        input.open()
        output.open()
        defer {
            output.close()
            input.close()
        }
        var buffer: [UInt8] = []
        func fill() -> Bool {
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n = input.read(&chunk, maxLength: chunk.count)
            if n <= 0 { return false }
            buffer += chunk[0..<n]
            return true
        }
        func line() -> String? {
            while true {
                if let i = buffer.firstIndex(of: 10) {
                    let text = String(decoding: buffer[..<i], as: UTF8.self).trimmingCharacters(
                        in: .whitespacesAndNewlines)
                    buffer.removeFirst(i + 1)
                    return text
                }
                if !fill() { return nil }
            }
        }
        func take(_ count: Int) -> [UInt8]? {
            while buffer.count < count { if !fill() { return nil } }
            defer { buffer.removeFirst(count) }
            return Array(buffer[0..<count])
        }
        guard let requestLine = line() else { return }
        var headers: [String: String] = [:]
        while let header = line(), !header.isEmpty {
            guard let colon = header.firstIndex(of: ":") else { continue }
            headers[header[..<colon].lowercased()] = header[header.index(after: colon)...].trimmingCharacters(
                in: .whitespaces)
        }
        if headers["expect"]?.lowercased() == "100-continue" {
            output.write(all: Array("HTTP/1.1 100 Continue\r\n\r\n".utf8))
        }
        var body: [UInt8] = []
        if headers["transfer-encoding"]?.lowercased() == "chunked" {
            while let sizeLine = line(), let size = Int(sizeLine.split(separator: ";")[0], radix: 16) {
                if size == 0 {
                    _ = line()
                    break
                }
                guard let bytes = take(size) else { return }
                body += bytes
                _ = line()
            }
        } else if let length = headers["content-length"].flatMap({ Int($0) }) {
            guard let bytes = take(length) else { return }
            body = bytes
        }
        let reply = "received \(body.count) bytes"
        output.write(
            all: Array(
                "HTTP/1.1 200 OK\r\nContent-Length: \(reply.utf8.count)\r\nConnection: close\r\n\r\n\(reply)".utf8))
        let method = String(requestLine.split(separator: " ").first ?? "")
        result.withLock { $0 = (method, body) }
    }
}

@Suite(.ownThreads) struct FoundationBridgeTests {
    @Test func aReadStreamAsAnInputStreamKeepsTheBlockingContract() {
        let input = randomBytes(200_000, seed: 3)
        let stream = ReadStream.memory(input).asInputStream()
        #expect(stream.streamStatus == .notOpen)
        var byte: UInt8 = 0
        #expect(stream.read(&byte, maxLength: 1) == -1)  // before open: an error, not a trap
        #expect(stream.streamError != nil)

        let fresh = ReadStream.memory(input).asInputStream()
        fresh.open()
        #expect(fresh.streamStatus == .open)
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while fresh.hasBytesAvailable {
            let n = fresh.read(&buffer, maxLength: buffer.count)
            #expect(n >= 0)
            if n == 0 { break }
            out += buffer[0..<n]
        }
        let same = out == input
        #expect(same)
        #expect(fresh.read(&buffer, maxLength: buffer.count) == 0)
        #expect(!fresh.hasBytesAvailable)
        #expect(fresh.streamStatus == .atEnd)
        fresh.close()
        #expect(fresh.streamStatus == .closed)
        #expect(fresh.read(&buffer, maxLength: buffer.count) == -1)  // after close: an error
    }

    @Test func aFailingStreamReportsMinusOneAndItsError() {
        let stream = ReadStream.file(atPath: "/nonexistent/sluice/\(UUID().uuidString)").asInputStream()
        stream.open()
        #expect(stream.streamStatus == .error)
        var buffer = [UInt8](repeating: 0, count: 16)
        #expect(stream.read(&buffer, maxLength: 16) == -1)
        #expect((stream.streamError as? SluiceError)?.errno == .noSuchFile)
    }

    @Test func aScheduledStreamCannotBeBridged() throws {
        let loop = try EventLoop()
        let inner = ReadStream.memory([1, 2, 3])
        inner.schedule(on: loop)
        let stream = inner.asInputStream()
        stream.open()
        #expect(stream.streamStatus == .error)
        var byte: UInt8 = 0
        #expect(stream.read(&byte, maxLength: 1) == -1)
        inner.remove(from: loop)
    }

    @Test func aWriteStreamAsAnOutputStream() {
        let stream = BridgedOutputStream(toMemory: ())
        var byte: UInt8 = 1
        #expect(stream.write(&byte, maxLength: 1) == -1)  // before open
        let fresh = WriteStream.toMemory().asOutputStream()
        fresh.open()
        #expect(fresh.hasSpaceAvailable)
        let input = randomBytes(100_000, seed: 4)
        #expect(input.withUnsafeBufferPointer { fresh.write($0.baseAddress!, maxLength: $0.count) } == 100_000)
        let data = fresh.property(forKey: .dataWrittenToMemoryStreamKey) as? NSData
        #expect(data.map { Data(referencing: $0) } == Data(input))
        fresh.close()
        #expect(fresh.write(&byte, maxLength: 1) == -1)  // after close

        let full = WriteStream.toBuffer(capacity: 2).asOutputStream()
        full.open()
        #expect(
            [UInt8](repeating: 9, count: 5).withUnsafeBufferPointer { full.write($0.baseAddress!, maxLength: 5) } == 2)
        #expect(!full.hasSpaceAvailable)
    }

    @Test func boundStreamsAcrossTwoThreads() throws {
        let (input, output) = Stream.boundStreams(bufferSize: 4096)
        let payload = randomBytes(1_000_000, seed: 12)
        let outputBox = UncheckedBox(output)
        let writer = Thread {
            let output = outputBox.value
            output.open()
            payload.withUnsafeBufferPointer { raw in
                var offset = 0
                while offset < raw.count {
                    let n = output.write(raw.baseAddress! + offset, maxLength: raw.count - offset)
                    if n <= 0 { break }
                    offset += n
                }
            }
            output.close()
        }
        writer.start()
        input.open()
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 8192)
        while true {
            let n = input.read(&buffer, maxLength: buffer.count)
            if n <= 0 { break }
            received += buffer[0..<n]
        }
        let same = received == payload
        #expect(same)
        var i: InputStream?
        var o: OutputStream?
        Stream.getBoundStreams(withBufferSize: 16, inputStream: &i, outputStream: &o)
        #expect(i != nil && o != nil)
    }

    @Test func streamsToHostTalkToAnEchoPeer() throws {
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        let box = UncheckedBox(listener)
        let server = Thread {
            guard let (input, output, _) = try? box.value.accept(timeout: .seconds(30)) else { return }
            input.open()
            output.open()
            if let data = try? input.readToEnd() { output.write(all: data) }
            output.close()
            input.close()
        }
        server.start()
        let (input, output) = Stream.streamsToHost(name: "127.0.0.1", port: Int(listener.port))
        output.open()
        input.open()
        let message = Array("ping".utf8)
        #expect(message.withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: 4) } == 4)
        output.close()  // half-close: the peer reads the end
        var buffer = [UInt8](repeating: 0, count: 16)
        var reply: [UInt8] = []
        while true {
            let n = input.read(&buffer, maxLength: 16)
            if n <= 0 { break }
            reply += buffer[0..<n]
        }
        #expect(reply == message)
        input.close()
        listener.close()

        let (refused, _) = Stream.streamsToHost(name: "127.0.0.1", port: 1)
        refused.open()
        #expect(refused.streamStatus == .error)
        #expect((refused.streamError as? SluiceError)?.errno == .connectionRefused)
    }

    @Test func aFoundationStreamFeedsAPipeline() throws {
        let input = randomBytes(3_000_000, seed: 13)
        let sink = WriteStream.toMemory()
        let pipeline = Pipeline(source: .reading(InputStream(data: Data(input))), sink: sink)
        let loop = try EventLoop()
        var result: PipelineResult?
        pipeline.start(on: loop) { result = $0 }
        loop.run()
        #expect(result?.succeeded == true)
        #expect(sink.dataWrittenToMemory == Data(input))

        // And out: a pipeline writing into a Foundation OutputStream.
        let memory = OutputStream(toMemory: ())
        let out = Pipeline(source: .memory(input), sink: .writing(memory))
        var second: PipelineResult?
        out.start(on: loop) { second = $0 }
        loop.run()
        #expect(second?.succeeded == true)
        let data = memory.property(forKey: .dataWrittenToMemoryStreamKey) as? NSData
        #expect(data.map { Data(referencing: $0) } == Data(input))
    }

    @Test func aMissingFoundationFileFailsTheSluiceStream() throws {
        let url = URL(fileURLWithPath: "/nonexistent/sluice/\(UUID().uuidString)")
        let stream = ReadStream.reading(try #require(InputStream(url: url)), name: url.path)
        stream.open()
        #expect(stream.streamStatus == .error)
        #expect(throws: SluiceError.self) { try stream.readToEnd() }
    }

    @Test func dataInAndOut() throws {
        let data = Data(randomBytes(70_000, seed: 2))
        #expect(try Data(reading: .memory(data)) == data)
        #expect(ReadStream(url: URL(string: "https://example.invalid/")!) == nil)
    }

    @Test func theURLSessionUploadExampleAgainstALocalServer() throws {
        try withTemporaryDirectory { dir in
            let server = try OneRequestHTTPServer()
            server.start()
            let payload = randomBytes(3_000_000, seed: 21)
            try Data(payload).write(to: URL(fileURLWithPath: dir + "/upload.bin"))
            let binary = productsDirectory().appendingPathComponent("URLSessionUpload").path
            let (status, out, err) = try runProcess(
                binary, [dir + "/upload.bin", "http://127.0.0.1:\(server.port)/upload.bin"])
            #expect(status == 0, "\(String(decoding: err, as: UTF8.self))")
            #expect(String(decoding: out, as: UTF8.self).contains("received 3000000 bytes"))
            let request = try #require(server.request)
            #expect(request.method == "PUT")
            #expect(request.body.count == payload.count)
            let same = request.body == payload
            #expect(same, "the body differs")
            server.listener.close()
        }
    }

    @Test func theAsyncExamplesRun() throws {
        let memory = try runProcess(productsDirectory().appendingPathComponent("AsyncWritingToMemory").path)
        #expect(memory.status == 0)
        #expect(String(decoding: memory.stdout, as: UTF8.self).contains("dataWrittenToMemory holds 6600 bytes"))
        let client = try runProcess(productsDirectory().appendingPathComponent("AsyncSocketClient").path)
        #expect(client.status == 0, "\(String(decoding: client.stderr, as: UTF8.self))")
        #expect(String(decoding: client.stdout, as: UTF8.self).contains("received: 收到啦，服務端！"))
    }
}

@Suite(.ownThreads) struct SIGPIPETests {
    private func disposition() -> UInt {
        var action = sigaction()
        sigaction(SIGPIPE, nil, &action)
        return unsafeBitCast(action.__sigaction_handler.sa_handler, to: UInt.self)
    }

    @Test func creatingStreamsAndLoopsLeavesSIGPIPEAlone() throws {
        let before = disposition()
        _ = ReadStream.memory([1])
        _ = WriteStream.toMemory()
        _ = try EventLoop()
        _ = Socket.connect(host: "127.0.0.1", port: 1)
        #expect(disposition() == before)
    }

    @Test func aWriteToAPipeWithNoReaderIsEPIPE() {
        // Whatever the process's SIGPIPE disposition (the default would kill the test run),
        // the write fails with EPIPE and nothing else happens.
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        close(fds[0])
        let stream = WriteStream.descriptor(fds[1], closeWhenDone: true, name: "pipe")
        stream.open()
        #expect(stream.write(all: [1, 2, 3]) == false)
        #expect(stream.streamError?.errno == .brokenPipe)
        stream.close()
        var pending = sigset_t()
        sigpending(&pending)
        #expect(sigismember(&pending, SIGPIPE) == 0)  // no SIGPIPE left pending on this thread
    }
}
