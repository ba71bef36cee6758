// The SocketClient example with async/await. The client connects with `withConnection`, writes
// its message, half-closes (`finish()`) so the server sees the end, and reads the reply with
// `for try await chunk in input`; the connection is closed when the body returns. The echo
// server runs in the same process, on 127.0.0.1 with a port the kernel picks: it takes a
// connection from `IncomingConnections` and serves it with `withStreams`, copying its input to
// its output.

import Foundation
import Sluice

@main
struct AsyncSocketClient {
    static func main() async throws {
        let incoming = IncomingConnections(try Socket.listen(host: "127.0.0.1", port: 0))
        print("server: listening on \(incoming.address)")
        let port = incoming.address.port ?? 0
        async let served: Void = serveOne(incoming)

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
        incoming.close()
        print("received: \(reply)")
        exit(reply == message ? 0 : 1)
    }

    /// Accepts one connection and echoes it: its input copied to its output, which is then
    /// half-closed, so the client reads the end.
    static func serveOne(_ incoming: IncomingConnections) async throws {
        guard let connection = try await incoming.next() else { return }
        print("server: connection from \(connection.input.socketPeerAddress.map { "\($0)" } ?? "?")")
        try await withStreams(connection) { chunks, writer in
            try await writer.write(contentsOf: chunks)
        }
        print("server: done")
    }
}
