import Foundation
import TestThreads
import Testing

@testable import SluiceCLI

#if canImport(FoundationXML)
    import FoundationXML
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// Starts `sluice bench --listen` on a free loopback port; returns it with the port.
func benchServer(_ extra: [String] = []) throws -> (Running, UInt16) {
    let port = try freePort()
    let server = try Running(sluiceBinary, ["bench", "--listen", "127.0.0.1:\(port)", "--once"] + extra)
    return (server, port)
}

func jsonObject(_ text: some StringProtocol) throws -> [String: Any] {
    try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
}

/// The series of a `bench --svg` picture, read back with Foundation's XML parser (which fails
/// on anything that is not well-formed XML): each `<g class="series">`'s `data-series`, its
/// `data-kind` and how many points it holds.
final class PictureSeries: NSObject, XMLParserDelegate {
    struct Series: Equatable {
        var id: String
        var kind: String
        var points = 0
    }

    private(set) var series: [Series] = []
    private(set) var root: String?
    private var depthInSeries = 0

    /// Parses `data`; throws when it is not well-formed.
    static func read(_ data: Data) throws -> PictureSeries {
        let reader = PictureSeries()
        let parser = XMLParser(data: data)
        parser.delegate = reader
        guard parser.parse() else {
            throw ReceiverError(message: "not well-formed XML: \(parser.parserError.map { "\($0)" } ?? "?")")
        }
        return reader
    }

    func parser(
        _ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?,
        attributes: [String: String] = [:]
    ) {
        if root == nil { root = name }
        if depthInSeries > 0 {
            depthInSeries += 1
            if name == "circle" { series[series.count - 1].points += 1 }
        } else if name == "g", attributes["class"] == "series" {
            series.append(Series(id: attributes["data-series"] ?? "", kind: attributes["data-kind"] ?? ""))
            depthInSeries = 1
        }
    }

    func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
        if depthInSeries > 0 { depthInSeries -= 1 }
    }
}

@Suite(.ownThreads) struct BenchCommandTests {
    @Test func localMatrixJSONHasEveryPathAndChunkSize() throws {
        let outcome = try sluice("bench", "--json", "--size", "1M")
        #expect(outcome.status == 0, "\(outcome.stderrText)")
        let report = try jsonObject(outcome.stdoutText)
        let results = try #require(report["results"] as? [[String: Any]])
        let paths = Set(results.compactMap { $0["path"] as? String })
        let zstd = try sluice("--version").stdoutText.contains("zstd 1.")
        #expect(
            paths
                == Set(
                    ["memory", "file", "file-zero-copy", "file-bare", "tcp", "tcp-gzip1", "gunzip"]
                        + (zstd ? ["tcp-zstd3"] : [])))
        for path in paths {
            let sizes = results.filter { $0["path"] as? String == path }.compactMap { $0["chunk_size"] as? Int }
            #expect(sizes == [512, 4096, 65536, 1 << 20, 4 << 20])
        }
        for cell in results {
            #expect((cell["bytes_per_second"] as? Double ?? 0) > 0)
            #expect(cell["bytes"] as? Int == 1 << 20)
            #expect((cell["seconds"] as? Double ?? 0) > 0)
        }
        #expect((report["peak_rss_bytes"] as? Int ?? 0) > 0)
        #expect((report["best"] as? [String: Int])?.count == paths.count)
        #expect((report["threads"] as? Int ?? 0) >= 1)
        #expect(report["gzip_engine"] as? String != nil)
        // The many-files row: every file of the tree sent and counted.
        let files = try #require(report["files"] as? [String: Any])
        #expect(files["files"] as? Int == 2000)
        #expect(files["smallest_file"] as? Int == 1024 && files["largest_file"] as? Int == 16384)
        #expect(files["fsync"] as? Bool == false)
        let bytes = try #require(files["bytes"] as? Int)
        #expect((2000 * 1024...2000 * 16384).contains(bytes))
        #expect((files["seconds"] as? Double ?? 0) > 0)
        #expect((files["files_per_second"] as? Double ?? 0) > 0)
        #expect((files["bytes_per_second"] as? Double ?? 0) > 0)
        #expect((files["cpu_seconds_per_gib"] as? Double ?? -1) >= 0)
    }

    /// The many-files row's tree is the same every run (its sizes and bytes come from a seed),
    /// so its figures compare across runs and machines.
    @Test func manyFilesTreeIsTheSameEveryRun() throws {
        try withTemporaryDirectory { dir in
            let bench = FilesBench(files: 250, filesPerDirectory: 100)
            let first = try bench.makeTree(at: "\(dir)/a")
            let second = try bench.makeTree(at: "\(dir)/b")
            #expect(first == second)
            #expect(directoryEntries("\(dir)/a") == ["d000", "d001", "d002"])
            #expect(directoryEntries("\(dir)/a/d002").count == 50)
            #expect(contents("\(dir)/a/d001/f00123") == contents("\(dir)/b/d001/f00123"))
            let sizes = try (0..<250).map { index -> Int in
                let name = "\(dir)/a/d\(String(format: "%03d", index / 100))/f\(String(format: "%05d", index))"
                return try #require(contents(name)).count
            }
            #expect(sizes.allSatisfy { (1024...16384).contains($0) })
            #expect(sizes.reduce(0, +) == Int(first))
            #expect(Set(sizes).count > 100)

            let result = try bench.run(in: dir)
            #expect(result.files == 250 && result.bytes == first)
        }
    }

    @Test func compressionRowsNameTheirEngineAndThreads() throws {
        let outcome = try sluice("bench", "--size", "1M", "-b", "1M", "--threads", "1", "--no-progress")
        #expect(outcome.status == 0, "\(outcome.stderrText)")
        #expect(outcome.stdoutText.contains("tcp, gzip:1 ("))
        #expect(outcome.stdoutText.contains(", 1T) → gunzip"))
    }

    @Test func localMatrixTableWithOneChunkSize() throws {
        let outcome = try sluice("bench", "--size", "1M", "-b", "64K")
        #expect(outcome.status == 0)
        #expect(outcome.stdoutText.contains("file → file"))
        #expect(outcome.stdoutText.contains("64K"))
        #expect(outcome.stdoutText.contains("peak RSS"))
        #expect(outcome.stdoutText.contains("many files: 2000 of 1–16 KiB, send → receive on loopback, no fsync\n  "))
        #expect(outcome.stdoutText.contains(" files/s, "))
        #expect(outcome.stderr.isEmpty)  // no progress when stderr is not a terminal
    }

    @Test func clientAndServerAgreeOnTheByteCount() throws {
        let (server, port) = try benchServer(["--json"])
        let client = try sluiceWhenListening(on: port, ["bench", "tcp:127.0.0.1:\(port)", "--seconds", "1", "--json"])
        #expect(client.status == 0, "\(client.stderrText)")
        let served = server.wait()
        #expect(served.status == 0)
        let mine = try jsonObject(client.stdoutText)
        let theirs = try jsonObject(served.stdoutText)
        let bytes = try #require(mine["bytes"] as? Int)
        #expect(bytes > 0)
        #expect(theirs["bytes"] as? Int == bytes)
        #expect(mine["server_bytes"] as? Int == bytes)
        #expect((mine["intervals"] as? [[String: Any]])?.isEmpty == false)
        #expect((mine["seconds"] as? Double ?? 0) >= 0.9)
    }

    @Test func reverseCompressedWithJSONStream() throws {
        let (server, port) = try benchServer(["--json"])
        let client = try sluiceWhenListening(
            on: port,
            [
                "bench", "tcp:127.0.0.1:\(port)", "--seconds", "1", "--interval", "0.25", "--reverse", "-z",
                "--json-stream",
            ])
        #expect(client.status == 0, "\(client.stderrText)")
        let served = server.wait()
        let lines = client.stdoutText.split(separator: "\n")
        let objects = try lines.map { try jsonObject($0) }
        let intervals = objects.filter { $0["type"] as? String == "interval" }
        #expect(intervals.count >= 3)
        #expect(objects.last?["type"] as? String == "summary")
        let summary = try #require(objects.last)
        #expect(summary["reverse"] as? Bool == true)
        let bytes = try #require(summary["bytes"] as? Int)
        #expect(bytes > 0)
        #expect(intervals.reduce(0) { $0 + ($1["bytes"] as? Int ?? 0) } == bytes)
        #expect(try jsonObject(served.stdoutText)["bytes"] as? Int == bytes)
    }

    @Test(arguments: [
        ["bench", "--size", "12Q"], ["bench", "--seconds", "2"], ["bench", "--listen", "9", "tcp:h:1"],
        ["bench", "--once"], ["bench", "file:x"], ["bench", "-b", "511"], ["bench", "--json", "--json-stream"],
        ["bench", "-P", "0", "tcp:127.0.0.1:1"], ["bench", "-P", "200", "tcp:127.0.0.1:1"],
        ["bench", "-P", "x", "tcp:127.0.0.1:1"], ["bench", "--parallel=-1", "tcp:127.0.0.1:1"],
        ["bench", "-P", "2"], ["bench", "--listen", "0", "-P", "2"], ["bench", "--listen", "0", "--svg", "x.svg"],
        ["bench", "--force"], ["bench", "--svg", ""],
    ])
    func usageErrors(arguments: [String]) throws {
        let outcome = try sluice(arguments)
        #expect(outcome.status == 64)
        #expect(outcome.stderrLines.count == 1)
        #expect(outcome.stderrText.hasPrefix("sluice: "))
    }

    @Test func refusedServerIsUnavailable() throws {
        let outcome = try withRefusingPort { port in try sluice("bench", "tcp:127.0.0.1:\(port)", "--seconds", "1") }
        #expect(outcome.status == 69)
        #expect(outcome.stderrText.contains("127.0.0.1"))
    }

    @Test func parallelRunReportsEachStreamAndTheirSumAndTheServerServesTheWholeRun() throws {
        let (server, port) = try benchServer(["--json"])
        let client = try sluiceWhenListening(
            on: port, ["bench", "tcp:127.0.0.1:\(port)", "-P", "4", "--seconds", "0.5", "--json"])
        #expect(client.status == 0, "\(client.stderrText)")
        // --once ends after the run's four connections, not after the first.
        let served = server.wait(within: .seconds(60))
        #expect(served.status == 0, "\(served.stderrText)")
        let mine = try jsonObject(client.stdoutText)
        #expect(mine["parallel"] as? Int == 4)
        let streams = try #require(mine["streams"] as? [[String: Any]])
        #expect(streams.count == 4)
        #expect(streams.compactMap { $0["stream"] as? Int } == [1, 2, 3, 4])
        let bytes = try #require(mine["bytes"] as? Int)
        let each = streams.compactMap { $0["bytes"] as? Int }
        #expect(each.count == 4 && each.allSatisfy { $0 > 0 })
        #expect(each.reduce(0, +) == bytes)
        #expect(mine["server_bytes"] as? Int == bytes)
        for stream in streams {
            #expect(stream["server_bytes"] as? Int == stream["bytes"] as? Int)
            let intervals = try #require(stream["intervals"] as? [[String: Any]])
            #expect(intervals.reduce(0) { $0 + ($1["bytes"] as? Int ?? 0) } == stream["bytes"] as? Int)
        }
        let sums = try #require(mine["intervals"] as? [[String: Any]])
        #expect(sums.reduce(0) { $0 + ($1["bytes"] as? Int ?? 0) } == bytes)
        #expect((mine["cpu_seconds_per_gib"] as? Double ?? -1) >= 0)
        #expect(mine["cpu_user_seconds"] is Double && mine["cpu_system_seconds"] is Double)

        let lines = try served.stdoutText.split(separator: "\n").map { try jsonObject($0) }
        #expect(lines.count == 5)
        let members = lines.filter { $0["sum"] == nil }
        #expect(Set(members.compactMap { $0["stream"] as? Int }) == [1, 2, 3, 4])
        #expect(members.allSatisfy { $0["streams"] as? Int == 4 })
        #expect(members.reduce(0) { $0 + ($1["bytes"] as? Int ?? 0) } == bytes)
        let sum = try #require(lines.last)
        #expect(sum["sum"] as? Bool == true)
        #expect(sum["streams"] as? Int == 4)
        #expect(sum["bytes"] as? Int == bytes)
        #expect((sum["cpu_seconds_per_gib"] as? Double ?? -1) >= 0)
    }

    /// A `-P 2` run whose second connection never comes: with `--once` the server serves the
    /// first, reports "1 of 2", and ends after `--timeout` rather than wait for good.
    @Test func onceServerDoesNotWaitForeverForARunsMissingConnection() throws {
        let (server, port) = try benchServer(["--json", "--timeout", "0.5"])
        #expect(waitUntil { isListening(port: port) })
        let fd = try #require(connectToLoopback(port: port))
        defer { close(fd) }
        let hello = BenchHello(
            reverse: false, compress: false, milliseconds: 1000, group: .init(id: 7, count: 2, index: 0))
        let bytes = hello.bytes + [UInt8](repeating: 0x5a, count: 100_000)
        #expect(bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == bytes.count)
        shutdown(fd, Int32(SHUT_WR))
        var answer = [UInt8](repeating: 0, count: 4096)
        while answer.withUnsafeMutableBytes({ recv(fd, $0.baseAddress, $0.count, 0) }) > 0 {}
        let served = server.wait(within: .seconds(30))
        #expect(served.status == 0, "\(served.stderrText)")
        #expect(served.stderrText.contains("1 of the run's 2 connections arrived"), "\(served.stderrText)")
        let lines = try served.stdoutText.split(separator: "\n").map { try jsonObject($0) }
        let sum = try #require(lines.last)
        #expect(sum["sum"] as? Bool == true)
        #expect(sum["streams"] as? Int == 1)
        #expect(sum["expected_streams"] as? Int == 2)
        #expect(sum["bytes"] as? Int == 100_000)
    }

    @Test func parallelReverseTextAndItsPicture() throws {
        try withTemporaryDirectory { dir in
            let (server, port) = try benchServer()
            let client = try sluiceWhenListening(
                on: port,
                [
                    "bench", "tcp:127.0.0.1:\(port)", "--parallel", "2", "--reverse", "--seconds", "0.5",
                    "--interval", "0.1", "--svg", "\(dir)/run.svg",
                ])
            #expect(client.status == 0, "\(client.stderrText)")
            #expect(server.wait(within: .seconds(60)).status == 0)
            let lines = client.stdoutText.split(separator: "\n")
            #expect(lines.first?.hasSuffix(", 2 streams") == true)
            func total(_ prefix: String) -> Int? {
                lines.last { $0.hasPrefix(prefix + " received ") }
                    .flatMap { $0.dropFirst(prefix.count + 10).split(separator: " ").first }.flatMap { Int($0) }
            }
            let one = try #require(total("[  1]"))
            let two = try #require(total("[  2]"))
            #expect(total("[SUM]") == one + two)
            #expect(lines.contains { $0.hasPrefix("[SUM] [") })  // a sum line per interval
            #expect(lines.last?.hasPrefix("CPU ") == true)

            let picture = try PictureSeries.read(try #require(contents("\(dir)/run.svg")))
            #expect(picture.root == "svg")
            #expect(picture.series.map(\.id) == ["stream-1", "stream-2", "sum"])
            #expect(picture.series.map(\.kind) == ["stream", "stream", "sum"])
            #expect(picture.series.allSatisfy { $0.points >= 2 })  // intervals of 0.1 s in 0.5 s
            #expect(directoryEntries(dir) == ["run.svg"])
        }
    }

    @Test func matrixPictureHasOneSeriesPerPathAndIsNotReplacedWithoutForce() throws {
        try withTemporaryDirectory { dir in
            let path = "\(dir)/matrix.svg"
            let outcome = try sluice("bench", "--json", "--size", "1M", "-b", "64K", "--svg", path)
            #expect(outcome.status == 0, "\(outcome.stderrText)")
            let report = try jsonObject(outcome.stdoutText)
            let results = try #require(report["results"] as? [[String: Any]])
            for cell in results {
                #expect((cell["cpu_seconds_per_gib"] as? Double ?? -1) >= 0)
                #expect(cell["cpu_user_seconds"] is Double)
            }
            let paths = results.compactMap { $0["path"] as? String }
            let picture = try PictureSeries.read(try #require(contents(path)))
            #expect(picture.root == "svg")
            #expect(picture.series.map(\.id) == paths)
            #expect(picture.series.allSatisfy { $0.kind == "path" && $0.points == 1 })

            let before = contents(path)
            let refused = try sluice("bench", "--size", "1M", "-b", "64K", "--svg", path)
            #expect(refused.status == 73)
            #expect(refused.stderrLines.count == 1 && refused.stderrText.hasPrefix("sluice: "))
            #expect(refused.stdout.isEmpty)  // refused before measuring
            #expect(contents(path) == before)
            let forced = try sluice("bench", "--size", "1M", "-b", "4K", "--svg", path, "-f")
            #expect(forced.status == 0, "\(forced.stderrText)")
            #expect(contents(path) != before)
            #expect(directoryEntries(dir) == ["matrix.svg"])

            let nowhere = try sluice("bench", "--size", "1M", "-b", "64K", "--svg", "\(dir)/missing/matrix.svg")
            #expect(nowhere.status == 73, "\(nowhere.stderrText)")
            #expect(nowhere.stderrLines.count == 1)
        }
    }

    @Test func helloParserRefusesWhatItDoesNotKnow() {
        let plain = BenchHello(reverse: true, compress: false, milliseconds: 1500)
        #expect(plain.bytes.count == BenchHello.size)
        #expect(BenchHello(header: plain.bytes) == plain)
        let grouped = BenchHello(
            reverse: false, compress: true, milliseconds: 10, group: .init(id: 0xDEAD_BEEF, count: 128, index: 127))
        #expect(grouped.bytes.count == BenchHello.size + BenchHello.groupSize)
        var read = BenchHello(header: Array(grouped.bytes.prefix(BenchHello.size)))
        #expect(read?.expectsGroup == true)
        #expect(read?.readGroup(Array(grouped.bytes.suffix(BenchHello.groupSize))) == true)
        #expect(read == grouped)
        // Counts of 0 or above 128, an index past the count, a group the header did not announce.
        for (count, index) in [(0, 0), (129, 0), (4, 4), (65535, 65535)] {
            var hello = BenchHello(header: Array(grouped.bytes.prefix(BenchHello.size)))
            var tail: [UInt8] = [0, 0, 0, 1]
            tail += [UInt8(count >> 8), UInt8(count & 255), UInt8(index >> 8), UInt8(index & 255)]
            #expect(hello?.readGroup(tail) == false)
        }
        var unannounced = BenchHello(header: plain.bytes)
        #expect(unannounced?.readGroup(Array(grouped.bytes.suffix(BenchHello.groupSize))) == false)
        // Garbage, short input and unknown flags are refused, never trusted.
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        for round in 0..<2000 {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            var bytes = grouped.bytes
            bytes[Int(state % UInt64(bytes.count))] ^= UInt8(truncatingIfNeeded: state >> 8) | 1
            let cut = round % 3 == 0 ? Int(state >> 32) % bytes.count : bytes.count
            let header = Array(bytes.prefix(min(cut, BenchHello.size)))
            guard var hello = BenchHello(header: header) else { continue }
            #expect(header.count == BenchHello.size && hello.milliseconds <= 3_600_000)
            if hello.readGroup(Array(bytes.dropFirst(BenchHello.size).prefix(cut - BenchHello.size))),
                let group = hello.group
            {
                #expect((1...BenchHello.maxStreams).contains(group.count) && group.index < group.count)
            }
        }
    }
}
