import Foundation
import TestThreads
import Testing

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

@Suite(.ownThreads) struct BenchCommandTests {
    @Test func localMatrixJSONHasEveryPathAndChunkSize() throws {
        let outcome = try sluice("bench", "--json", "--size", "1M")
        #expect(outcome.status == 0, "\(outcome.stderrText)")
        let report = try jsonObject(outcome.stdoutText)
        let results = try #require(report["results"] as? [[String: Any]])
        let paths = Set(results.compactMap { $0["path"] as? String })
        let zstd = try sluice("--version").stdoutText.contains("zstd 1.")
        #expect(
            paths == Set(["memory", "file", "file-bare", "tcp", "tcp-gzip1", "gunzip"] + (zstd ? ["tcp-zstd3"] : [])))
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
    ])
    func usageErrors(arguments: [String]) throws {
        let outcome = try sluice(arguments)
        #expect(outcome.status == 64)
        #expect(outcome.stderrLines.count == 1)
        #expect(outcome.stderrText.hasPrefix("sluice: "))
    }

    @Test func refusedServerIsUnavailable() throws {
        let outcome = try sluice("bench", "tcp:127.0.0.1:\(try freePort())", "--seconds", "1")
        #expect(outcome.status == 69)
        #expect(outcome.stderrText.contains("127.0.0.1"))
    }
}
