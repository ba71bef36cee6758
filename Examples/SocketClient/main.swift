// A socket client in the NSStream style, after the CFStream client it is modelled on: create
// a connected pair of streams, give them a delegate, schedule them on a loop, open them; write
// the message when space is offered and close the output so the server sees the end; read the
// reply when bytes are available; close everything at the end.
//
// So that it runs on its own, the server is an echo server in the same process, listening on
// 127.0.0.1 with a port the kernel picks.

import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// Echoes each connection back to its sender, closing its output after the sender's end.
final class EchoSession: ByteStreamDelegate {
    let input: ReadStream
    let output: WriteStream
    private var pending: [UInt8] = []
    private var inputDone = false

    init(input: ReadStream, output: WriteStream, loop: EventLoop) {
        self.input = input
        self.output = output
        input.delegate = self
        output.delegate = self
        input.schedule(on: loop)
        output.schedule(on: loop)
        input.open()
        output.open()
    }

    func stream(_ stream: ByteStream, handle event: StreamEvent) {
        switch event {
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 2048)
            let n = buffer.withUnsafeMutableBytes { input.read(into: $0) }
            if n > 0 { pending += buffer[0..<n] }
            flush()
        case .hasSpaceAvailable:
            flush()
        case .endEncountered:
            inputDone = true
            flush()
        case .errorOccurred:
            input.close()
            output.close()
        default:
            break
        }
    }

    private func flush() {
        if !pending.isEmpty && output.hasSpaceAvailable {
            let n = pending.withUnsafeBytes { output.write(from: $0) }
            if n > 0 { pending.removeFirst(n) }
        }
        if inputDone && pending.isEmpty {
            output.close()
            input.close()
        }
    }
}

/// The client: the seed's `initNetworkCommunication`, `stream:handleEvent:` and `close`.
final class Client: ByteStreamDelegate {
    let inputStream: ReadStream
    let outputStream: WriteStream
    let loop: EventLoop
    let message = Array("收到啦，服務端！".utf8)  // "Got it, server!"
    private var reply: [UInt8] = []
    private(set) var failure: SluiceError?
    var finished: (() -> Void)?

    init(port: UInt16, loop: EventLoop) {
        (inputStream, outputStream) = Socket.connect(host: "127.0.0.1", port: port, timeout: .seconds(5))
        self.loop = loop
    }

    func initNetworkCommunication() {
        inputStream.delegate = self
        outputStream.delegate = self
        inputStream.schedule(on: loop)
        outputStream.schedule(on: loop)
        inputStream.open()
        outputStream.open()
    }

    func close() {
        outputStream.close()
        outputStream.remove(from: loop)
        outputStream.delegate = nil
        inputStream.close()
        inputStream.remove(from: loop)
        inputStream.delegate = nil
    }

    func stream(_ stream: ByteStream, handle event: StreamEvent) {
        print("\(stream === inputStream ? "input" : "output"): \(event)")
        switch event {
        case .hasSpaceAvailable where stream === outputStream:
            // One write is enough for a short message on a fresh connection; a longer one would
            // keep an offset and write again on the next hasSpaceAvailable.
            let n = message.withUnsafeBytes { outputStream.write(from: $0) }
            print("sent \(n) bytes")
            // Close the output, or the server would wait for more forever.
            outputStream.close()
        case .hasBytesAvailable where stream === inputStream:
            var buffer = [UInt8](repeating: 0, count: 2048)
            while inputStream.hasBytesAvailable {
                let len = buffer.withUnsafeMutableBytes { inputStream.read(into: $0) }
                if len <= 0 { break }
                reply += buffer[0..<len]
            }
        case .endEncountered:
            print("received: \(String(decoding: reply, as: UTF8.self))")
            close()
            finished?()
        case .errorOccurred:
            failure = stream.streamError
            close()
            finished?()
        default:
            break
        }
    }
}

/// Reports `message` on standard error and exits with status 1.
func fail(_ message: String) -> Never {
    let standardError = WriteStream.standardError
    standardError.open()
    standardError.write(all: Array("SocketClient: \(message)\n".utf8))
    exit(1)
}

do {
    let loop = try EventLoop()
    let listener = try Socket.listen(host: "127.0.0.1", port: 0)
    var sessions: [EchoSession] = []
    try listener.accept(on: loop) { input, output, peer in
        print("server: connection from \(peer)")
        sessions.append(EchoSession(input: input, output: output, loop: loop))
    }
    print("server: listening on \(listener.address)")

    let client = Client(port: listener.port, loop: loop)
    client.finished = { listener.close() }
    client.initNetworkCommunication()
    loop.run()
    print("server: served \(sessions.count) connection(s)")
    if let failure = client.failure {
        fail("\(failure)")
    }
} catch {
    fail("\(error)")
}
