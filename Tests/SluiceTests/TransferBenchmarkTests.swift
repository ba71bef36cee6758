import Foundation
import Testing

@testable import Sluice

/// Opt-in: `SLUICE_TRANSFER_BENCH=/path/to/file swift test -c release -Xswiftc -enable-testing
/// --filter TransferBenchmark` sends that file over loopback, receiver and sender each on a
/// loop of its own thread, and prints the rate.
@Suite("TransferBenchmark")
struct TransferBenchmarkTests {
    @Test(
        "Loopback transfer of a large file",
        .enabled(if: ProcessInfo.processInfo.environment["SLUICE_TRANSFER_BENCH"] != nil))
    func loopback() throws {
        let source = ProcessInfo.processInfo.environment["SLUICE_TRANSFER_BENCH"]!
        let fsync = ProcessInfo.processInfo.environment["SLUICE_TRANSFER_FSYNC"] == "1"
        let compress = ProcessInfo.processInfo.environment["SLUICE_TRANSFER_COMPRESS"] == "1"
        try withTemporaryDirectory { dst in
            let listener = try Socket.listen(host: "127.0.0.1", port: 0)
            let port = listener.port
            let box = UncheckedBox(listener)
            let receiverThread = Thread {
                let loop = try! EventLoop()
                let receiver = try! TransferReceiver(
                    directory: dst, options: TransferReceiveOptions(fsync: fsync, idleTimeout: nil))
                receiver.onSessionEnd = { _ in box.value.close() }
                try! receiver.accept(from: box.value, on: loop)
                loop.run()
            }
            receiverThread.start()
            let loop = try EventLoop()
            let sender = try TransferSender(paths: [source], options: TransferSendOptions(compress: compress))
            var summary: TransferSummary?
            let (input, output) = Socket.connect(host: "127.0.0.1", port: port)
            sender.start(input: input, output: output, on: loop) { summary = $0 }
            while summary == nil { loop.run(for: .seconds(1)) }
            let result = try #require(summary)
            #expect(result.succeeded)
            let rate = Double(result.bytes) / result.seconds / 1_048_576
            print(
                "transfer \(result.bytes) bytes in \(result.seconds) s: \(Int(rate)) MiB/s "
                    + "(fsync \(fsync), compress \(compress), on the wire \(result.bytesSent))")
        }
    }
}
