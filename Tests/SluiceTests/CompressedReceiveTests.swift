import Foundation
import Testing

@testable import Sluice
@testable import SluiceTransfer

/// Compressed files are decompressed by the receiving session's worker (`WorkerInflate`), not
/// on its loop: what comes out is counted with the machine when each job is done. A sender
/// that lies in its compressed data fails that file only, with the reason, and nothing lands
/// at its name; the session goes on to the next file.
@Suite("Compressed data decompressed on the worker", .ownThreads)
struct CompressedReceiveTests {
    @Test func liesInCompressedDataFailTheFileAndTheSessionGoesOn() throws {
        try withTemporaryDirectory { root in
            let harness = try TransferHarness(directory: root)
            let flags = Wire.FileFlags.sizeKnown | Wire.FileFlags.compressed
            let content = compressibleBytes(200_000, seed: 5)
            let finished = try DeltaCompressionTests.deflate([content], finish: true)
            let unfinished = try DeltaCompressionTests.deflate([content], finish: false)
            let size = UInt64(content.count)
            for (what, messages, reason) in [
                ("garbage", RawWire.data(randomBytes(64, seed: 9)) + RawWire.end(content), "compressed data:"),
                ("past the size", RawWire.data(finished) + RawWire.end(content), "more data than announced"),
                ("truncated", RawWire.data(unfinished) + RawWire.end(content), "truncated"),
                ("after the end", RawWire.data(finished + [1, 2, 3]) + RawWire.end(content), "trailing garbage"),
            ] {
                let sessions = harness.reports.count
                let announced = what == "past the size" ? 100 : size
                let client = SocketExchange(
                    Socket.connect(host: "127.0.0.1", port: harness.port),
                    payload: RawWire.hello(["sha256", "deflate"])
                        + RawWire.file("f-" + what, size: announced, flags: flags)
                        + messages + RawWire.file("g-" + what, size: 3) + RawWire.data([1, 2, 3])
                        + RawWire.end([1, 2, 3]) + RawWire.bye)
                client.start(on: harness.loop)
                runLoop(harness.loop, for: .seconds(10)) { client.done && harness.reports.count > sessions }
                let report = try #require(harness.reports.last)
                #expect(report.error == nil, "\(what): the session goes on")
                let failed = harness.results(report).first { $0.path == "f-" + what }
                #expect(failed?.outcome.isStored == false, "\(what)")
                #expect(
                    failed.map { "\($0.outcome)".contains(reason) } == true,
                    "\(what): \(failed.map { "\($0.outcome)" } ?? "none")")
                #expect(!fileExists(root + "/f-" + what), "\(what): nothing at the file's name")
                #expect(readFile(root + "/g-" + what) == [1, 2, 3], "\(what): the next file is stored")
            }
            // The same file told the truth is stored whole.
            let sessions = harness.reports.count
            let client = SocketExchange(
                Socket.connect(host: "127.0.0.1", port: harness.port),
                payload: RawWire.hello(["sha256", "deflate"]) + RawWire.file("true", size: size, flags: flags)
                    + RawWire.data(Array(finished[0..<finished.count / 3]))
                    + RawWire.data(Array(finished[(finished.count / 3)...])) + RawWire.end(content) + RawWire.bye)
            client.start(on: harness.loop)
            runLoop(harness.loop, for: .seconds(10)) { client.done && harness.reports.count > sessions }
            #expect(harness.reports.last?.error == nil)
            #expect(readFile(root + "/true") == content)
        }
    }
}
