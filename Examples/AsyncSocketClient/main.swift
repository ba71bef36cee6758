// The SocketClient example with async/await. The client connects with `withConnection`, writes
// its message, half-closes (`finish()`) so the server sees the end, and reads the reply with
// `for try await chunk in input`; the connection is closed when the body returns. The echo
// server runs in the same process, on 127.0.0.1 with a port the kernel picks: each accepted
// connection is served by `withStreams`, copying its input to its output.

import Foundation
import Sluice

@main
struct AsyncSocketClient {
    static func main() async throws {
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        print("server: listening on \(listener.address)")
        let port = listener.port
        async let served: Void = serveOne(listener)

        let message = "收到啦，服務端！"
        let reply = try await withConnection(host: "127.0.0.1", port: port) { input, output in
            try await output.write(Array(message.utf8))
            print("sent \(message.utf8.count) bytes")
            try await output.finish()
            var reply: [UInt8] = []
            for try await chunk in input { reply += chunk }
            return String(decoding: reply, as: UTF8.self)
        }
        try await served
        print("received: \(reply)")
        exit(reply == message ? 0 : 1)
    }

    /// Accepts one connection (blocking accept on a thread of its own) and echoes it.
    static func serveOne(_ listener: sending SocketListener) async throws {
        let (input, output, peer) = try await withCheckedThrowingContinuation {
            (continuation: CheckedContinuation<(ReadStream, WriteStream, SocketAddress), any Error>) in
            nonisolated(unsafe) let listener = listener
            Thread {
                do {
                    nonisolated(unsafe) let connection = try listener.accept(timeout: .seconds(30))
                    listener.close()
                    continuation.resume(returning: connection)
                } catch {
                    listener.close()
                    continuation.resume(throwing: error)
                }
            }.start()
        }
        print("server: connection from \(peer)")
        try await withStreams(StreamPair(input, output)) { chunks, writer in
            try await writer.write(contentsOf: chunks)
        }
        print("server: done")
    }
}
