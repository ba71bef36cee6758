import Foundation
import Testing

@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// Task groups (`send --group`) played by hostile peers over real sockets: the ranges of one
/// file from different connections at different times, a range past the size, overlapping
/// ranges, a whole-file digest that lies, a group never completed.
@Suite("Task groups: ranges of one file from several senders", .ownThreads)
struct TaskGroupTests {
    static func join(task: Int, tasks: Int, name: String) -> [UInt8] {
        let id = TaskGroup(name: name, task: task, tasks: tasks)?.id ?? []
        return MessageWriter.join(
            TransferJoin(
                id: id, index: 0, count: 1, group: TaskGroupJoin(task: task, tasks: tasks, name: Array(name.utf8))))
    }

    static func rangeEnd(_ bytes: [UInt8], whole: [UInt8]) -> [UInt8] {
        MessageWriter.rangeEnd(length: UInt64(bytes.count), digest: SHA256Digest.hash(bytes), fileDigest: whole)
    }

    /// The answers (STORED, REFUSED, FAILED) to `payload` played over one connection.
    private func exchange(_ harness: TransferHarness, _ payload: [UInt8]) throws -> [(UInt8, String)] {
        let answers = [Wire.MessageType.stored, .refused, .failed].map(\.rawValue)
        return try TransferStreamsTests().exchange(harness, payload).filter { answers.contains($0.0) }
    }

    @Test("Two tasks at different times make one file; bad ranges and a lying digest never reach the final name")
    func rangesFromTwoTasks() throws {
        try withTemporaryDirectory { root in
            let harness = try TransferHarness(directory: root)
            let data = TransferStreamsTests.content(100, seed: 9)
            let whole = SHA256Digest.hash(data)
            let hello = RawWire.hello(["sha256", "resume", "streams", "groups"])
            let range = TransferStreamsTests.range

            // Task 0: a range past the size (refused), then its range [0, 60), verified; it leaves.
            var first = hello + Self.join(task: 0, tasks: 2, name: "job-7")
            first += range("x", 90, 20, 100)
            first += range("x", 0, 60, 100) + RawWire.data(Array(data[0..<60]))
            first += Self.rangeEnd(Array(data[0..<60]), whole: whole) + RawWire.bye
            let answers = try exchange(harness, first)
            #expect(answers.map(\.0) == [Wire.MessageType.refused.rawValue, Wire.MessageType.stored.rawValue])
            #expect(!fileExists(root + "/x"))
            #expect(harness.reports.last?.taskGroup?.incompleteFiles == 1)

            // Task 1, later: an overlapping range (refused); its range with a digest of the
            // whole file that lies (failed: it is not the one task 0's range carried); then
            // the same range again, truthful: the file is complete, checked, named.
            var second = hello + Self.join(task: 1, tasks: 2, name: "job-7")
            second += range("x", 50, 50, 100)
            second += range("x", 60, 40, 100) + RawWire.data(Array(data[60..<100]))
            second += Self.rangeEnd(Array(data[60..<100]), whole: SHA256Digest.hash(Array("lies".utf8)))
            second += range("x", 60, 40, 100) + RawWire.data(Array(data[60..<100]))
            second += Self.rangeEnd(Array(data[60..<100]), whole: whole) + RawWire.bye
            let later = try exchange(harness, second)
            #expect(
                later.map(\.0)
                    == [
                        Wire.MessageType.refused.rawValue, Wire.MessageType.failed.rawValue,
                        Wire.MessageType.stored.rawValue,
                    ], "\(later)")
            #expect(later.first?.1.contains("overlapping ranges") == true, "\(later)")
            #expect(later.dropFirst().first?.1.contains("another digest of the whole file") == true, "\(later)")
            #expect(sameBytes(root + "/x", data))
            let report = try #require(harness.reports.last?.taskGroup)
            #expect(report.name == "job-7" && report.task == 1 && report.tasks == 2)
            #expect(report.incompleteFiles == 0 && report.rangeTasks == [0, 1])
        }
    }

    @Test("Ranges that agree on a lying whole-file digest: the file read back does not match, never named")
    func wholeDigestThatLies() throws {
        try withTemporaryDirectory { root in
            let harness = try TransferHarness(directory: root)
            let data = TransferStreamsTests.content(100, seed: 10)
            let lie = SHA256Digest.hash(Array("not this file".utf8))
            var payload =
                RawWire.hello(["sha256", "resume", "streams", "groups"]) + Self.join(task: 0, tasks: 1, name: "g")
            for (start, end) in [(0, 50), (50, 100)] {
                payload += TransferStreamsTests.range("y", start: UInt64(start), length: UInt64(end - start), size: 100)
                payload += RawWire.data(Array(data[start..<end])) + Self.rangeEnd(Array(data[start..<end]), whole: lie)
            }
            let answers = try exchange(harness, payload + RawWire.bye)
            #expect(answers.last?.0 == Wire.MessageType.failed.rawValue, "\(answers)")
            #expect(answers.last?.1.contains("mismatch (whole file)") == true, "\(answers)")
            #expect(!fileExists(root + "/y"))
        }
    }

    @Test("A group never completed keeps its file unnamed; one more group than the bound ends the idlest")
    func groupNeverCompleted() throws {
        try withTemporaryDirectory { root in
            var options = TransferReceiveOptions(idleTimeout: .seconds(20))
            options.maxTaskGroups = 1
            let harness = try TransferHarness(directory: root, options: options)
            let data = TransferStreamsTests.content(100, seed: 11)
            let hello = RawWire.hello(["sha256", "resume", "streams", "groups"])
            var payload = hello + Self.join(task: 0, tasks: 2, name: "never")
            payload +=
                TransferStreamsTests.range("z", start: 0, length: 50, size: 100) + RawWire.data(Array(data[0..<50]))
            payload += Self.rangeEnd(Array(data[0..<50]), whole: SHA256Digest.hash(data)) + RawWire.bye
            #expect(try exchange(harness, payload).map(\.0) == [Wire.MessageType.stored.rawValue])
            #expect(harness.reports.last?.taskGroup?.incompleteFiles == 1)
            #expect(!fileExists(root + "/z"))
            // A second group past the bound of one: the idle one ends, its partial kept
            // (closed, its range listed) for a resume; the new group is served.
            _ = try exchange(harness, hello + Self.join(task: 0, tasks: 1, name: "next") + RawWire.bye)
            #expect(harness.reports.last?.error == nil, "\(String(describing: harness.reports.last?.error))")
            harness.receiver.finishDiskWork()
            #expect(!fileExists(root + "/z"))
            #expect(readFile(root + "/.z.sluice-part")?.prefix(50) == data[0..<50])
        }
    }
}
