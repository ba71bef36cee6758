import Foundation
import Testing

@testable import Sluice
@testable import SluiceCLI
@testable import SluiceTransfer

@Suite struct FormatTests {
    @Test func bytes() {
        #expect(Format.bytes(0 as UInt64) == "0B")
        #expect(Format.bytes(999 as UInt64) == "999B")
        #expect(Format.bytes(1024 as UInt64) == "1.00KiB")
        #expect(Format.bytes(12_900_000 as UInt64) == "12.3MiB")
        #expect(Format.bytes(123 << 20 as UInt64) == "123MiB")
        #expect(Format.bytes(3 << 29 as UInt64) == "1.50GiB")
        #expect(Format.rate(4 * 1_048_576) == "4.00MiB/s")
    }

    @Test func durations() {
        #expect(Format.duration(0) == "0:00:00")
        #expect(Format.duration(7.9) == "0:00:07")
        #expect(Format.duration(3723) == "1:02:03")
        #expect(Format.duration(.infinity) == "0:00:00")
        #expect(Format.duration(1e9) == "99:59:59")
    }

    @Test func numbers() {
        #expect(Format.fixed(3.14159, 3) == "3.142")
        #expect(Format.fixed(2, 2) == "2.00")
        #expect(Format.fixed(0.05, 1) == "0.1")
        #expect(Format.seconds(0.5) == "0.5")
        #expect(Format.seconds(5) == "5")
        #expect(Format.jsonNumber(.nan) == "0")
        #expect(Format.jsonString("a\"b\\c\n\u{1}") == "\"a\\\"b\\\\c\\n\\u0001\"")
    }
}

@Suite struct ProgressTests {
    func snapshot(
        _ bytes: UInt64, size: UInt64? = nil, rate: Double = 1_048_576, stage: ProgressSnapshot.StageCounts? = nil,
        bottleneck: Bottleneck? = nil, finished: Bool = false
    ) -> ProgressSnapshot {
        ProgressSnapshot(
            sourceBytes: bytes, elapsedSeconds: 3, rate: rate, sourceSize: size, stage: stage,
            bottleneck: bottleneck, finished: finished)
    }

    @Test func unknownSizeShowsBytesElapsedAndRate() {
        let line = ProgressLine.render(snapshot(5 << 20, bottleneck: .sink), width: 80)
        #expect(line == "5.00MiB 0:00:03 [1.00MiB/s] bottleneck: sink")
    }

    @Test func knownSizeShowsBarPercentAndETA() {
        let line = ProgressLine.render(snapshot(5 << 20, size: 10 << 20), width: 80)
        #expect(line.hasPrefix("5.00MiB 0:00:03 [1.00MiB/s] [====="))
        #expect(line.hasSuffix("] 50% ETA 0:00:05"))
        #expect(line.count == 79)
    }

    @Test func finishedLineHasNoETA() {
        let line = ProgressLine.render(snapshot(10 << 20, size: 10 << 20, finished: true), width: 60)
        #expect(line.hasSuffix("] 100%"))
        #expect(!line.contains(">"))
        #expect(!line.contains("ETA"))
    }

    @Test func stageShowsBothSidesAndTheRatio() {
        let counts = ProgressSnapshot.StageCounts(name: "gzip", sourceIsRaw: true, bytesIn: 3 << 20, bytesOut: 1 << 20)
        let line = ProgressLine.render(snapshot(3 << 20, stage: counts, bottleneck: .stage("gzip")), width: 100)
        #expect(line == "raw 3.00MiB gzip 1.00MiB ratio 3.00 0:00:03 [1.00MiB/s] bottleneck: gzip")
        let inflate = ProgressSnapshot.StageCounts(
            name: "inflate", sourceIsRaw: false, bytesIn: 1 << 20, bytesOut: 4 << 20)
        let back = ProgressLine.render(snapshot(1 << 20, stage: inflate), width: 100)
        #expect(back.hasPrefix("raw 4.00MiB inflate 1.00MiB ratio 4.00"))
    }

    @Test func narrowTerminalsDropTheBarAndNeverWrap() {
        let line = ProgressLine.render(snapshot(5 << 20, size: 10 << 20, bottleneck: .rateLimit), width: 50)
        #expect(line == "5.00MiB 0:00:03 [1.00MiB/s] 50% ETA 0:00:05")
        #expect(line.count <= 49)
        #expect(ProgressLine.render(snapshot(5 << 20, size: 10 << 20), width: 10).count <= 20)
    }

    @Test func bars() {
        #expect(ProgressLine.bar(0, width: 4) == "[>   ]")
        #expect(ProgressLine.bar(0.5, width: 4) == "[==> ]")
        #expect(ProgressLine.bar(1, width: 4) == "[====]")
    }

    @Test func bottleneckFromWaitingTime() {
        #expect(Bottleneck.judge(seconds: 1, sourceBound: 0.9, sinkBound: 0, stage: nil, rateLimited: false) == .source)
        #expect(Bottleneck.judge(seconds: 1, sourceBound: 0, sinkBound: 0.6, stage: nil, rateLimited: false) == .sink)
        #expect(
            Bottleneck.judge(seconds: 1, sourceBound: 0, sinkBound: 0.6, stage: nil, rateLimited: true) == .rateLimit)
        #expect(
            Bottleneck.judge(seconds: 1, sourceBound: 0.7, sinkBound: 0.8, stage: "gzip", rateLimited: false)
                == .stage("gzip"))
        #expect(Bottleneck.judge(seconds: 1, sourceBound: 0.1, sinkBound: 0.1, stage: nil, rateLimited: false) == nil)
        #expect(
            Bottleneck.judge(seconds: 1, sourceBound: 0.1, sinkBound: 0, stage: "gzip", rateLimited: false)
                == .stage("gzip"))
        #expect(
            Bottleneck.judge(seconds: 1, sourceBound: 0, sinkBound: 0.9, stage: "gzip", rateLimited: false) == .sink)
        #expect(Bottleneck.judge(seconds: 0, sourceBound: 1, sinkBound: 0, stage: nil, rateLimited: false) == nil)
    }
}

@Suite struct StatsTests {
    func result(read: UInt64, written: UInt64, stages: [StageStatistics] = []) -> PipelineResult {
        PipelineResult(
            bytesRead: read, bytesWritten: written, stages: stages, elapsedSeconds: 2, sourceBoundSeconds: 0.25,
            sinkBoundSeconds: 1.5, peakInFlightBytes: 4096, inFlightLimit: 8192, error: nil)
    }

    @Test func jsonHasTheContractFields() throws {
        let options = try CopyOptions(try CopyOptions.parser.parse(["-b", "64K", "in", "-"]))
        let report = StatsReport(result: result(read: 1000, written: 1000), options: options, stageName: nil)
        let object = try #require(
            try JSONSerialization.jsonObject(with: Data(report.json.utf8)) as? [String: Any])
        #expect(object["source"] as? String == "in")
        #expect(object["destination"] as? String == "stdout")
        #expect(object["bytes_read"] as? Int == 1000)
        #expect(object["bytes_written"] as? Int == 1000)
        #expect(object["seconds"] as? Double == 2)
        #expect(object["chunk_size"] as? Int == 65536)
        #expect(object["read_rate"] as? Double == 500)
        #expect(object["write_rate"] as? Double == 500)
        #expect(object["source_bound_seconds"] as? Double == 0.25)
        #expect(object["sink_bound_seconds"] as? Double == 1.5)
        #expect(object["bottleneck"] as? String == "sink")
        #expect(object["ratio"] == nil)
        #expect(!report.json.contains("\n"))
    }

    @Test func ratioOnlyWithAStage() throws {
        let options = try CopyOptions(try CopyOptions.parser.parse(["-zzlib:1", "in", "out"]))
        let stage = StageStatistics(
            name: "zlib", bytesIn: 3000, bytesOut: 1000, inputWaitSeconds: 0, outputWaitSeconds: 0)
        let report = StatsReport(
            result: result(read: 3000, written: 1000, stages: [stage]), options: options, stageName: "zlib")
        let object = try #require(
            try JSONSerialization.jsonObject(with: Data(report.json.utf8)) as? [String: Any])
        #expect(object["ratio"] as? Double == 3)
        #expect(object["stage_settings"] as? String == "zlib:1")
        #expect(report.text.contains("ratio"))
        let decompress = try CopyOptions(try CopyOptions.parser.parse(["-d", "in", "out"]))
        let back = StatsReport(result: result(read: 1000, written: 4000), options: decompress, stageName: "inflate")
        #expect(back.ratio == 4)
    }

    @Test func pathFallbacksAndCPUInBothFormats() throws {
        let options = try CopyOptions(try CopyOptions.parser.parse(["a", "b"]))
        var pipelineResult = result(read: 1 << 30, written: 1 << 30)
        pipelineResult.path = .sendfile
        pipelineResult.fallbacks = [
            CopyFallback(refused: .copyFileRange, next: .sendfile, afterBytes: 4096, reason: Errno(rawValue: EXDEV))
        ]
        let cpu = CPUTime(userSeconds: 0.25, systemSeconds: 0.5)
        let report = StatsReport(result: pipelineResult, options: options, stageName: nil, cpu: cpu)
        #expect(
            report.pathText
                == "zero-copy (sendfile); copy_file_range refused after 4096 bytes: Invalid cross-device link (errno 18)"
        )
        #expect(report.text.contains("cpu seconds           0.750 (user 0.250, system 0.500), 0.750 per GiB\n"))
        let object = try #require(
            try JSONSerialization.jsonObject(with: Data(report.json.utf8)) as? [String: Any])
        #expect(object["path"] as? String == "sendfile")
        #expect(object["zero_copy"] as? Bool == true)
        let fallback = try #require((object["fallbacks"] as? [[String: Any]])?.first)
        #expect(fallback["refused"] as? String == "copy_file_range")
        #expect(fallback["after_bytes"] as? Int == 4096)
        #expect(fallback["errno"] as? Int == 18)
        #expect(fallback["reason"] as? String == "Invalid cross-device link")
        #expect(object["cpu_seconds"] as? Double == 0.75)
        #expect(object["cpu_seconds_per_gib"] as? Double == 0.75)
        // Without a measurement (a report made by hand), no CPU keys; read/write says why.
        pipelineResult.path = .readWrite
        pipelineResult.fallbacks = []
        pipelineResult.pathNote = "a stage transforms the bytes"
        let plain = StatsReport(result: pipelineResult, options: options, stageName: nil)
        #expect(plain.pathText == "read/write (a stage transforms the bytes)")
        #expect(!plain.json.contains("cpu_"))
        #expect(CPUReport(cpu: cpu, bytes: 0).secondsPerGiB == nil)
        #expect(CPUReport(cpu: cpu, bytes: 0).jsonFields.last?.1 == "null")
    }

    @Test func textIsAnAlignedBlock() throws {
        let options = try CopyOptions(try CopyOptions.parser.parse(["a", "b"]))
        let text = StatsReport(result: result(read: 10, written: 10), options: options, stageName: nil).text
        let lines = text.split(separator: "\n")
        #expect(lines.first == "source                a")
        for name in [
            "destination", "bytes read", "bytes written", "seconds", "chunk size", "read rate", "write rate",
            "source-bound seconds", "sink-bound seconds",
        ] {
            #expect(lines.contains { $0.hasPrefix(name + " ") }, "missing \(name)")
        }
    }
}

/// The log of a failure that repeats (a listener out of descriptors retrying).
@Suite struct RepeatedFailureLogTests {
    final class Lines: @unchecked Sendable {
        var all: [String] = []
    }

    @Test func aRepeatedFailureIsOneLineThenOneWhenItEnds() {
        let lines = Lines()
        var log = RepeatedFailureLog(operation: "accepting connections") { lines.all.append($0) }
        log.succeeded(at: 0)
        #expect(lines.all.isEmpty)
        for i in 0..<40 { log.failed("accept4: Too many open files", at: UInt64(i) * 100_000_000) }
        #expect(lines.all == ["accept4: Too many open files"])
        #expect(log.failing)
        log.succeeded(at: 4_100_000_000)
        log.succeeded(at: 4_200_000_000)
        #expect(
            lines.all == [
                "accept4: Too many open files",
                "accepting connections again after 4.1 s (39 more failures like the one above)",
            ])
        #expect(!log.failing)
    }

    @Test func aDifferentFailureClosesTheFirstAndIsReported() {
        let lines = Lines()
        var log = RepeatedFailureLog(operation: "accepting connections") { lines.all.append($0) }
        log.failed("A", at: 0)
        log.failed("A", at: 500_000_000)
        log.failed("B", at: 1_000_000_000)
        log.succeeded(at: 3_000_000_000)
        #expect(
            lines.all == [
                "A", "the failure above lasted 1.0 s (1 more failure like the one above)", "B",
                "accepting connections again after 2.0 s",
            ])
    }
}

@Suite struct TreeProgressTests {
    static func progress(path: String?) -> TransferProgress {
        TransferProgress(
            bytesDone: 50 << 20, bytesTotal: 150 << 20, bytesSent: 50 << 20, filesDone: 1234, filesTotal: 10_000,
            currentPath: path, seconds: 1.5)
    }

    @Test func aTreeShowsFilesPerSecondAndTheFileBeingSent() {
        let path = "photos/2026/holiday/a-very-long-file-name-that-goes-on.jpeg"
        let wide = TransferProgressDisplay.render(
            Self.progress(path: path), rate: 30e6, fileRate: 812.4, finished: false, sizeKnown: true, width: 120)
        #expect(wide.hasPrefix("1234/10000 files 812/s "), "\(wide)")
        #expect(wide.hasSuffix(" …" + path.suffix(23)), "\(wide)")
        #expect(wide.count <= 120, "\(wide.count) columns: \(wide)")
        // A narrow terminal leaves the name out, and so does the final line.
        let narrow = TransferProgressDisplay.render(
            Self.progress(path: path), rate: 30e6, fileRate: 812.4, finished: false, sizeKnown: true, width: 80)
        #expect(!narrow.contains("holiday") && narrow.hasPrefix("1234/10000 files 812/s "), "\(narrow)")
        let done = TransferProgressDisplay.render(
            Self.progress(path: path), rate: 30e6, fileRate: 812.4, finished: true, sizeKnown: true, width: 120)
        #expect(!done.contains("holiday"), "\(done)")
    }

    @Test func aControlCharacterInAFileNameIsNotSentToTheTerminal() {
        let line = TransferProgressDisplay.render(
            Self.progress(path: "a\u{1B}[2Jb"), rate: 1, fileRate: 1, finished: false, sizeKnown: true, width: 120)
        #expect(!line.contains("\u{1B}"), "\(line)")
    }
}
