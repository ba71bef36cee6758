import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// The socket options a transfer sets on its connection.
@Suite("Transfer sockets", .ownThreads)
struct TransferSocketTests {
    /// Each small message (FILE, ACCEPT, END, STORED) goes out at once: Nagle's algorithm held
    /// each one until the peer's delayed ACK, 40 ms at a time, 90 ms per small file.
    @Test("Both ends set TCP_NODELAY, through TLS too")
    func noDelayOnBothEnds() throws {
        try withTemporaryDirectory { root in
            let loop = try EventLoop()
            // The receiver, over TLS: its session sets the option through the TLS stream on
            // the accepted socket, which this test holds.
            let receiver = try TransferReceiver(directory: root)
            try receiver.useTLS(preSharedKey: try #require(PreSharedKey(key: Array(repeating: 7, count: 32))))
            let listener = try Socket.listen(host: "127.0.0.1", port: 0)
            defer { listener.close() }
            var accepted: ReadStream?
            try listener.accept(on: loop) { input, output, peer in
                accepted = input
                receiver.serve(input: input, output: output, from: peer, on: loop)
            }
            // A client that connects and says nothing: the session waits for its handshake.
            let (silentIn, silentOut) = Socket.connect(host: "127.0.0.1", port: listener.port)
            silentIn.open()
            silentOut.open()
            #expect(runLoop(loop) { accepted?.socketNoDelay == true })

            // The sender, to a listener that accepts and never answers.
            let quiet = try Socket.listen(host: "127.0.0.1", port: 0)
            defer { quiet.close() }
            var held: [ByteStream] = []
            try quiet.accept(on: loop) { input, output, _ in held += [input, output] }
            try writeFile(root + "/a.bin", [1, 2, 3])
            let sender = try TransferSender(paths: [root + "/a.bin"])
            let (input, output) = Socket.connect(host: "127.0.0.1", port: quiet.port)
            #expect(input.socketNoDelay != true)
            sender.start(input: input, output: output, on: loop) { _ in }
            #expect(runLoop(loop) { held.count == 2 && input.socketNoDelay == true })

            sender.cancel()
            receiver.closeAllSessions()
            silentIn.close()
            silentOut.close()
            for stream in held { stream.close() }
            _ = runLoop(loop, for: .seconds(2)) { receiver.activeSessions == 0 }
        }
    }
}
