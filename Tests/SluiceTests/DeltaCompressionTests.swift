import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// Deltas with `-z`: literal bytes in one raw deflate stream per file, cut with a sync flush
/// before each COPY that follows them; over real sockets into a real directory.
@Suite("Deltas compressed", .ownThreads)
struct DeltaCompressionTests {
    /// Raw deflate of `pieces`, each ended with a sync flush (`ParallelDeflate.flush`), the
    /// stream finished after the last when `finish`.
    static func deflate(_ pieces: [[UInt8]], engine: CompressionEngine = .zlib, finish: Bool = true) throws -> [UInt8] {
        let level = engine == .isal ? 1 : 6
        let stage = try ParallelDeflate(format: .deflate, level: level, threads: 1, engine: engine)
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        func drain(_ input: [UInt8]?) throws {
            var offered = 0
            while true {
                let progress = try buffer.withUnsafeMutableBytes { output in
                    guard let input else { return try stage.finish(into: output) }
                    return try input.withUnsafeBytes {
                        try stage.process(UnsafeRawBufferPointer(rebasing: $0[offered...]), into: output)
                    }
                }
                offered += progress.consumed
                out += buffer[0..<progress.produced]
                if progress.finished || (input != nil && offered == input?.count && progress.produced == 0) { return }
            }
        }
        for piece in pieces {
            try drain(piece)
            stage.flush()
            try drain([])
        }
        if finish { try drain(nil) }
        return out
    }

    static func syncing(compress: Bool, chunk: Int? = nil, level: Int = 6) throws -> TransferSendOptions {
        var options = TransferSendOptions()
        options.sync = true
        options.compress = compress
        options.compressionLevel = level
        if let chunk { options.chunkSize = try ChunkSize(chunk) }
        return options
    }

    @Test("Inflate.flushPending: held-back output comes out, and only a sync flush settles the stream")
    func flushPendingSettlesOnlyAtAFlush() throws {
        let engines = [CompressionEngine.zlib, .libdeflate, .isal].filter(\.isAvailable)
        for engine in engines {
            let pieces = [
                compressibleBytes(70_000, seed: 1), [UInt8](repeating: 7, count: 100_000),
                compressibleBytes(3, seed: 2),
            ]
            let stream = try Self.deflate(pieces, engine: engine, finish: false)
            // Output space of every size: zlib stops with output held back now and then.
            for outputSize in [1, 7, 258, 4096, 65_537] {
                let inflate = try Inflate(format: .deflate)
                var output = [UInt8](repeating: 0, count: outputSize)
                var got: [UInt8] = []
                let settledAtStart = try output.withUnsafeMutableBytes { try inflate.flushPending(into: $0) }
                #expect(settledAtStart.settled && settledAtStart.produced == 0, "nothing taken, nothing held")
                var consumed = 0
                while consumed < stream.count {
                    let progress = try output.withUnsafeMutableBytes { out in
                        try stream.withUnsafeBytes {
                            try inflate.process(UnsafeRawBufferPointer(rebasing: $0[consumed...]), into: out)
                        }
                    }
                    consumed += progress.consumed
                    got += output[0..<progress.produced]
                }
                var held = [UInt8](repeating: 0, count: 512)  // ReceiverSession.inflateHeldMost
                let flushed = try held.withUnsafeMutableBytes { try inflate.flushPending(into: $0) }
                got += held[0..<flushed.produced]
                #expect(flushed.settled, "\(engine), output \(outputSize)")
                #expect(got == pieces.flatMap { $0 }, "\(engine), output \(outputSize)")
                let again = try held.withUnsafeMutableBytes { try inflate.flushPending(into: $0) }
                #expect(again.settled && again.produced == 0, "\(engine): a second look finds it settled still")
            }
        }
        // A stream cut inside a block does not settle.
        let whole = try Self.deflate([compressibleBytes(50_000, seed: 3)], finish: true)
        let inflate = try Inflate(format: .deflate)
        var output = [UInt8](repeating: 0, count: 1 << 20)
        _ = try output.withUnsafeMutableBytes { out in
            try whole.withUnsafeBytes {
                try inflate.process(UnsafeRawBufferPointer(rebasing: $0[0..<whole.count / 2]), into: out)
            }
        }
        let cut = try output.withUnsafeMutableBytes {
            try inflate.flushPending(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<512]))
        }
        #expect(!cut.settled)
    }

    @Test("A delta with -z: the same file, deltas and matched bytes counted, fewer bytes on the wire than without")
    func compressedDeltaMatchesAndIsSmaller() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
            let content = compressibleBytes(4 << 20, seed: 11)
            // Blocks changed here and there (literal pieces between COPYs), and a run inserted.
            var changed = content
            for i in 0..<60 { changed[(i * 69_001 + 5000) % changed.count] ^= 0x20 }
            changed.insert(contentsOf: compressibleBytes(40_000, seed: 12), at: 2_000_000)
            var wire: [String: UInt64] = [:]
            for (name, compress, chunk, level) in [
                ("plain", false, nil, 6), ("z", true, nil, 6), ("z-small-chunks", true, 4096, 6), ("z1", true, nil, 1),
                ("z0", true, nil, 0),
            ] as [(String, Bool, Int?, Int)] {
                let dst = root + "/dst-" + name
                try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
                let harness = try TransferHarness(directory: dst)
                try writeFile(src + "/db", content, mtime: (1_600_000_000, 0))
                #expect(try harness.send(paths: [src], options: try Self.syncing(compress: compress)).succeeded)
                try writeFile(src + "/db", changed, mtime: (1_600_000_100, 0))
                let summary = try harness.send(
                    paths: [src], options: try Self.syncing(compress: compress, chunk: chunk, level: level))
                #expect(summary.succeeded, "\(name): \(summary.results)")
                #expect(readFile(dst + "/tree/db") == changed, "\(name)")
                #expect(summary.results.first { $0.path == "tree/db" }?.sentAsDelta == true, "\(name)")
                #expect(summary.matchedBytes > 3_500_000, "\(name)")
                #expect(summary.bytes < 400_000, "\(name): literal bytes \(summary.bytes)")
                wire[name] = summary.bytesSent
            }
            let plain = try #require(wire["plain"])
            #expect(try #require(wire["z"]) < plain * 2 / 3, "\(wire)")
            #expect(try #require(wire["z1"]) < plain * 2 / 3, "\(wire)")
        }
    }

    @Test("An interrupted compressed delta leaves the old file as it was; the next run goes on where it stopped")
    func interruptedDeltaLeavesTheOldFile() throws {
        try withTemporaryDirectory { root in
            let src = root + "/tree"
            let dst = root + "/dst"
            for dir in [src, dst] {
                try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            }
            let content = compressibleBytes(4 << 20, seed: 31)
            let harness = try TransferHarness(directory: dst)
            try writeFile(src + "/db", content, mtime: (1_600_000_000, 0))
            #expect(try harness.send(paths: [src], options: try Self.syncing(compress: true)).succeeded)
            // The second half changed: 2 MiB of literal bytes, sent slowly, cut in the middle.
            let changed = Array(content[0..<(2 << 20)]) + randomBytes(2 << 20, seed: 32)
            try writeFile(src + "/db", changed, mtime: (1_600_000_100, 0))
            var options = try Self.syncing(compress: true, chunk: 65536)
            options.rateLimit = 2 << 20
            let partial = dst + "/tree/.db.sluice-part"
            let sessions = harness.reports.count
            let (sender, box) = try harness.startSender([.path(src)], options: options)
            let watch = harness.loop.schedule(after: .milliseconds(5), repeating: .milliseconds(5)) {
                if (FileInfo(partial)?.size ?? 0) >= 2 << 20 + 256 << 10 { sender.cancel() }
            }
            runLoop(harness.loop, for: .seconds(20)) { box.summary != nil && harness.reports.count > sessions }
            watch.cancel()
            #expect(box.summary?.error?.code == .cancelled)
            #expect(readFile(dst + "/tree/db") == content, "the old file is intact")
            let summary = try harness.send(paths: [src], options: try Self.syncing(compress: true))
            #expect(summary.succeeded, "\(summary.results)")
            #expect(readFile(dst + "/tree/db") == changed)
            #expect(summary.results.first { $0.path == "tree/db" }?.sentAsDelta == true)
            // What the first run rebuilt (past the 2 MiB it copied) is not sent again.
            #expect(summary.resumedBytes > 2 << 20 && summary.bytes < 2 << 20, "\(summary.resumedBytes) resumed")
        }
    }

    @Test("Compressed delta lies: a COPY inside an unflushed block, literals past the size: the file fails, no more")
    func compressedDeltaLies() throws {
        try withTemporaryDirectory { root in
            let dst = root + "/dst"
            try FileManager.default.createDirectory(atPath: dst, withIntermediateDirectories: true)
            let old = randomBytes(2 << 20, seed: 2)
            try writeFile(dst + "/f", old)
            let harness = try TransferHarness(directory: dst)
            let flags =
                Wire.FileFlags.sizeKnown | Wire.FileFlags.replace | Wire.FileFlags.delta | Wire.FileFlags.compressed
            let finished = try Self.deflate([compressibleBytes(20_000, seed: 4)], finish: true)
            let copy = Frame.copy(index: 0, count: 1).encoded
            for (what, messages, reason) in [
                (
                    "unflushed",
                    RawWire.file("f", size: 4 << 20, flags: flags)
                        + RawWire.data(Array(finished[0..<finished.count / 2])) + copy, "not flushed"
                ),
                (
                    "past the size",
                    RawWire.file("f", size: 100, flags: flags) + RawWire.data(finished), "more data than announced"
                ),
            ] {
                let sessions = harness.reports.count
                // After the lie, another file in the same session is stored.
                let client = SocketExchange(
                    Socket.connect(host: "127.0.0.1", port: harness.port),
                    payload: RawWire.hello(["sha256", "sync", "deflate"]) + messages + RawWire.end([])
                        + RawWire.file("g-" + what, size: 3) + RawWire.data([1, 2, 3])
                        + RawWire.end([1, 2, 3]) + RawWire.bye)
                client.start(on: harness.loop)
                runLoop(harness.loop, for: .seconds(10)) { client.done && harness.reports.count > sessions }
                let report = try #require(harness.reports.last)
                #expect(report.error == nil, "\(what): the session goes on")
                let failed = harness.results(report).first { $0.path == "f" }
                #expect(failed?.outcome.isStored == false, "\(what)")
                #expect(
                    failed.map { "\($0.outcome)".contains(reason) } == true,
                    "\(what): \(failed.map { "\($0.outcome)" } ?? "none")")
                #expect(harness.results(report).first { $0.path == "g-" + what }?.outcome.isStored == true, "\(what)")
                #expect(readFile(dst + "/f") == old, "\(what): the old file is intact")
            }
        }
    }

    @Test("Machines: delta and compressed together are legal, resumable too; delta with sparse or eager is not")
    func machinesTakeCompressedDeltas() {
        let entries: [SenderMachine.Entry] = [
            .init(
                relative: "f", isDirectory: false, seekable: true, mode: 0o644, mtimeSeconds: 1, mtimeNanoseconds: 0,
                listedSize: 2 << 20)
        ]
        var sender = SenderMachine(entries: entries, settings: .init(compress: true, eager: false, sync: true))
        _ = sender.start()
        _ = sender.received(.magic)
        _ = sender.received(.frame(.hello(version: 1, capabilities: ["sha256", "sync", "delta", "deflate"])))
        _ = sender.proceed()
        _ = sender.received(.frame(.have(HaveAnswer(status: .differs, differences: Wire.HaveDifference.size))))
        #expect(sender.proceed() == [.openEntry(0)])
        let opened = sender.handle(
            .entryOpened(0, .success(OpenedEntry(size: 3 << 20, mode: 0o644, mtimeSeconds: 2, mtimeNanoseconds: 0))))
        let header = opened.compactMap { action -> EntryHeader? in
            if case .send(.file(let header)) = action { return header }
            return nil
        }.first
        #expect(header?.delta == true && header?.compressed == true, "\(opened)")

        let base = Wire.FileFlags.sizeKnown | Wire.FileFlags.replace | Wire.FileFlags.delta
        for (flags, legal) in [
            (base | Wire.FileFlags.compressed, true), (base, true),
            (base | Wire.FileFlags.compressed | Wire.FileFlags.sparse, false),
            (base | Wire.FileFlags.compressed | Wire.FileFlags.eager, false),
            (base | Wire.FileFlags.compressed | Wire.FileFlags.resumable, true),
        ] {
            var receiver = ReceiverMachine(settings: .init())
            _ = receiver.received(.magic)
            _ = receiver.received(.frame(.hello(version: 1, capabilities: ["sha256", "sync"])))
            let actions = receiver.received(
                .frame(
                    .file(
                        EntryHeader(
                            flags: flags, size: 3 << 20, mode: 0o644, mtimeSeconds: 2, mtimeNanoseconds: 0,
                            path: Array("f".utf8)))))
            if legal {
                #expect(
                    actions.count == 1 && { if case .openFile = actions[0] { return true } else { return false } }(),
                    "\(flags)")
            } else {
                #expect(receiver.hasEnded, "flags \(flags): \(actions)")
            }
        }
    }
}
