import Foundation
import TestThreads
import Testing

@testable import Sluice

/// gzip's CRC-32 checked on another core while inflate goes on (`OutputCheckDeferring`,
/// `OffloadedStage`), as `pigz -d` checks on a thread of its own: the same verdicts as checking
/// in line, and a stage that never reports its end before its output is checked.
@Suite(.ownThreads) struct OverlappedCheckTests {
    static let engines = [CompressionEngine.zlib, .isal].filter(\.isAvailable)
    static let a = mixed(70_000)
    static let b = mixed(3_001)

    /// One gzip member of `data`, written by `gzip`.
    static func gzip(_ data: [UInt8], level: Int = 6) throws -> [UInt8] {
        [UInt8](try runProcess("/usr/bin/gzip", ["-c", "-\(level)"], stdin: Data(data)).stdout)
    }

    /// `member` with its trailer's CRC-32 (`crc`) or size changed.
    static func damaged(_ member: [UInt8], crc: Bool = true) -> [UInt8] {
        var bad = member
        bad[member.count - (crc ? 7 : 2)] ^= 0x10
        return bad
    }

    /// Decodes `input` with checks deferred, `piece` bytes at a time into 977-byte buffers; returns
    /// the output and the checks, each with the output there was before the call that reported it.
    static func deferred(_ stage: Inflate, _ input: [UInt8], piece: Int) throws -> ([UInt8], [(OutputCheck, Int)]) {
        stage.deferOutputChecks()
        var checks: [(OutputCheck, Int)] = []
        let out = try ParallelCompressionTests.feed(stage, input, piece: piece) { before in
            checks += stage.takeOutputChecks().map { ($0, before) }
        }
        return (out, checks)
    }

    @Test(arguments: engines, [1, 7, 4096, 1 << 20])
    func deferredInflateReportsEachMembersCRCAtItsEnd(engine: CompressionEngine, piece: Int) throws {
        let members = try Self.gzip(Self.a) + Self.gzip([]) + Self.gzip(Self.b, level: 1) + [0, 0]
        let (out, checks) = try Self.deferred(try Inflate(format: .gzip, engine: engine), members, piece: piece)
        #expect(out == Self.a + Self.b)
        let ends = [Self.a.count, Self.a.count, Self.a.count + Self.b.count]
        #expect(checks.map(\.0.end) == ends)
        #expect(
            checks.map(\.0.crc32) == [
                Checksum.compute(.crc32, over: Self.a), 0, Checksum.compute(.crc32, over: Self.b),
            ])
        for (check, before) in checks {
            // Reported no later than the call that produced the first byte after its end.
            #expect(before <= check.end, "the check ending at \(check.end) came after \(before) bytes")
            #expect(check.mismatch.code == .corruptData)
            #expect(check.mismatch.reason.contains("incorrect data check"), "\(check.mismatch)")
            #expect(check.mismatch.reason.contains("offset"), "\(check.mismatch)")
        }
        // The stage leaves a wrong CRC-32 to its runner, but still checks the size itself.
        let (_, reported) = try Self.deferred(
            try Inflate(engine: engine), Self.damaged(try Self.gzip(Self.a)), piece: piece)
        #expect(reported.count == 1 && reported[0].0.crc32 != Checksum.compute(.crc32, over: Self.a))
        let error = #expect(throws: SluiceError.self) {
            try Self.deferred(
                try Inflate(engine: engine), Self.damaged(try Self.gzip(Self.a), crc: false), piece: piece)
        }
        #expect(error?.reason.contains("incorrect length check") == true, "\(String(describing: error))")
    }

    /// The stages the CLI and a library user would offload, with the checks on a worker of
    /// their own: `Inflate` with each engine, and `Decompressor` (format detection, the default
    /// engine).
    static func stages() throws -> [(String, () throws -> OffloadedStage)] {
        var made: [(String, () throws -> OffloadedStage)] = Self.engines.map { engine in
            ("\(engine)", { OffloadedStage(try Inflate(engine: engine), checksOnWorkers: true) })
        }
        made.append(("Decompressor", { OffloadedStage(try Decompressor(), checksOnWorkers: true) }))
        return made
    }

    /// By default the checks leave the stage only when the pool has a thread beyond the loop's
    /// and the inflating one's; asked for, when it has a second one; never without a loop.
    @Test func theChecksLeaveTheStageWhenThePoolHasThreadsForThem() throws {
        let loop = try EventLoop()
        for (threads, asked, expected) in [
            (1, nil, false), (2, nil, false), (3, nil, true), (1, true, false), (2, true, true), (3, false, false),
        ] as [(Int, Bool?, Bool)] {
            let stage = OffloadedStage(try Decompressor(), pool: WorkerPool(threads: threads), checksOnWorkers: asked)
            #expect(!stage.checksOutputOnWorkers)
            stage.attach(to: loop) {}
            #expect(stage.checksOutputOnWorkers == expected, "\(threads) threads, asked \(String(describing: asked))")
        }
    }

    @Test func aCRCMismatchFoundByTheCheckingWorkerFailsThePipelineAndRemovesItsFile() throws {
        let good = try Self.gzip(Self.a)
        let second = try Self.gzip(Self.b, level: 1)
        for (name, make) in try Self.stages() {
            for input in [Self.damaged(good), good + Self.damaged(second), Self.damaged(good) + second] {
                try withTemporaryDirectory { dir in
                    let stage = try make()
                    let path = "\(dir)/out"
                    let pipeline = Pipeline(
                        source: .memory(input), stages: [stage], sink: .file(atPath: path),
                        options: PipelineOptions(chunkSize: try ChunkSize(4096)))
                    let result = try runPipeline(pipeline)
                    #expect(stage.checksOutputOnWorkers == (WorkerPool.shared.threadCount > 1), "\(name)")
                    let error = try #require(result.error, "\(name): a wrong CRC-32 was accepted")
                    #expect(error.underlying.code == .corruptData, "\(name)")
                    #expect(error.underlying.subject == "gzip", "\(name): \(error)")
                    #expect(error.underlying.reason.contains("incorrect data check"), "\(name): \(error)")
                    #expect(error.underlying.reason.contains("offset"), "\(name): \(error)")
                    #expect(!FileManager.default.fileExists(atPath: path), "\(name)")
                }
            }
            // The same members undamaged decode; padding is ignored and garbage refused.
            let (result, out) = try pipe(good + second + good + [0, 0, 0], [try make()], chunk: 4096)
            #expect(result.succeeded, "\(name): \(String(describing: result.error))")
            #expect(out == Self.a + Self.b + Self.a, "\(name)")
            let (garbage, _) = try pipe(good + second + [0x42], [try make()])
            #expect(garbage.error?.underlying.reason.contains("trailing garbage") == true, "\(name)")
            let (short, _) = try pipe(Array(good.dropLast(3)), [try make()])
            #expect(short.error?.underlying.code == .truncatedData, "\(name)")
        }
    }

    @Test func withoutALoopTheStageChecksItsOwnOutput() throws {
        for (name, make) in try Self.stages() {
            let stage = try make()
            let error = #expect(throws: SluiceError.self) {
                try ParallelCompressionTests.feed(stage, Self.damaged(try Self.gzip(Self.a)), piece: 5000)
            }
            #expect(error?.reason.contains("incorrect data check") == true, "\(name): \(String(describing: error))")
            #expect(!stage.checksOutputOnWorkers)
        }
    }

    /// The stage's chain and the check chain run by hand, in turn: the stage has finished and
    /// all its output is taken, but it is not done until the checks have run. Each chain
    /// stops when its slice is over, to run again.
    @Test(arguments: engines, [false, true])
    func theStageIsNotDoneUntilItsOutputIsChecked(engine: CompressionEngine, damaged: Bool) throws {
        let member = try Self.gzip(Self.a)
        let input = (damaged ? Self.damaged(member) : member) + (try Self.gzip(Self.b))
        let inflate = try Inflate(format: .gzip, engine: engine)
        let core = OffloadCore(inflate, inputBytes: 1 << 20, outputBytes: 1 << 20)
        inflate.deferOutputChecks()
        core.verifying = true
        input.withUnsafeBytes { OffloadCore.copy(in: $0, into: core.input, at: 0) }
        core.shared.withLock { s in
            s.inWritten = input.count
            s.ended = true
        }
        #expect(core.claimStage())
        // A slice that is over stops the chain after one call, still running, to be run again.
        #expect(core.runStage(until: 0))
        #expect(core.shared.withLock { $0.running && $0.outWritten > 0 })
        #expect(!core.runStage(until: nil))
        let written = core.shared.withLock { s in
            s.outDrained = s.outWritten
            return s.outWritten
        }
        #expect(written == Self.a.count + Self.b.count)
        #expect(core.shared.withLock { $0.innerFinished && $0.failure == nil })
        #expect(!core.isDone, "done before its output was checked")
        #expect(core.claimChecks())
        #expect(core.runChecks(until: 0))
        #expect(core.shared.withLock { $0.checking })
        #expect(!core.runChecks(until: nil))
        let failure = core.shared.withLock { $0.failure }
        if damaged {
            #expect(failure?.reason.contains("incorrect data check") == true, "\(String(describing: failure))")
            #expect(!core.isDone)
        } else {
            #expect(failure == nil)
            #expect(core.isDone)
        }
    }
}
