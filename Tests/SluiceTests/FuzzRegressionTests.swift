import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

/// Inputs the fuzz targets (Fuzz/) found, inlined; the files are in Fuzz/Regressions/, which
/// `Fuzz/run.sh` replays before fuzzing.
@Suite(.ownThreads) struct FuzzRegressionTests {
    /// `printf 'hello\n' | gzip -n`: a gzip member with no optional fields.
    static let hello: [UInt8] = [
        0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xcb, 0x48, 0xcd, 0xc9, 0xc9, 0xe7, 0x02, 0x00,
        0x20, 0x30, 0x3a, 0x36, 0x06, 0x00, 0x00, 0x00,
    ]

    static var engines: [CompressionEngine] { [.zlib, .isal].filter(\.isAvailable) }

    /// Fuzz/Regressions/inflate/gzip-reserved-flags: a gzip header with a reserved flag bit
    /// set (FLG 0x2c). RFC 1952 says a decoder must reject it; zlib and `gzip -d` do, ISA-L
    /// ignored it and went on (and, on that truncated input, reported truncation).
    @Test(arguments: engines)
    func gzipHeaderWithReservedFlagsIsCorrupt(_ engine: CompressionEngine) throws {
        let found: [UInt8] = [
            0x1f, 0x8b, 0x08, 0x2c, 0x00, 0x00, 0xee, 0x87, 0xc4, 0x01, 0x00, 0x00, 0x00, 0x00, 0x0d, 0xf1, 0x6b,
        ]
        for format in [DecompressionFormat.auto, .gzip] {
            for piece in [1, 3, 4, 11, found.count] {
                let error = #expect(throws: SluiceError.self) {
                    try drive(Inflate(format: format, engine: engine), found, piece: piece, outputSize: 7)
                }
                #expect(
                    error?.code == .corruptData,
                    "\(engine) \(format) in pieces of \(piece): \(String(describing: error))")
            }
        }
        // A whole member that is valid but for a reserved flag, alone and as a second member.
        for bit: UInt8 in [0x20, 0x40, 0x80] {
            var flagged = Self.hello
            flagged[3] |= bit
            for input in [flagged, Self.hello + flagged] {
                let error = #expect(throws: SluiceError.self) {
                    try drive(Inflate(format: .gzip, engine: engine), input, piece: 2, outputSize: 65536)
                }
                #expect(error?.code == .corruptData, "\(engine) FLG bit 0x\(String(bit, radix: 16))")
            }
        }
        #expect(
            try drive(Inflate(format: .gzip, engine: engine), Self.hello, piece: 1, outputSize: 1)
                == Array("hello\n".utf8))
    }

    /// Fuzz/Regressions/inflate/zlib-preset-dictionary-split: a zlib header asking for a preset
    /// dictionary (FDICT). zlib refuses it however the bytes arrive; ISA-L said so only when
    /// the header came in one piece, and otherwise went on as if there were no dictionary.
    @Test(arguments: engines)
    func zlibPresetDictionaryIsRefusedInAnySplit(_ engine: CompressionEngine) throws {
        let found: [UInt8] = [0x78, 0x3f, 0x00, 0x00, 0x7a, 0x00, 0x00, 0x03]
        for format in [DecompressionFormat.auto, .zlib] {
            for piece in 1...found.count {
                let error = #expect(throws: SluiceError.self) {
                    try drive(Inflate(format: format, engine: engine), found, piece: piece, outputSize: 64)
                }
                #expect(error?.code == .corruptData, "\(engine) \(format) in pieces of \(piece)")
                #expect(error?.reason.contains("preset dictionary") == true, "\(String(describing: error))")
            }
        }
    }

    /// Fuzz/Regressions/inflate/isal-total-in-past-input: on an invalid second member given
    /// in one piece, ISA-L rewound its input to before the piece (into what it had buffered of
    /// the header from the call before), and `totalIn` said 27 bytes of a 26-byte input.
    @Test(arguments: engines)
    func totalInCountsEachByteOnce(_ engine: CompressionEngine) throws {
        let found: [UInt8] = [
            0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0xa5, 0x00, 0x03, 0xcb, 0x48, 0xcd, 0xc9, 0xc9, 0x8b, 0x08,
            0x00, 0x00, 0x00, 0x00, 0x00, 0xa5, 0x00, 0x03,
        ]
        for piece in [1, 3, found.count] {
            let broken = try Inflate(format: .auto, engine: engine)
            #expect(throws: SluiceError.self) { try drive(broken, found, piece: piece, outputSize: 1 << 18) }
            #expect(broken.totalIn <= found.count, "\(engine) in pieces of \(piece): totalIn \(broken.totalIn)")
        }
        // Two whole members, a byte at a time: every byte counted once.
        let twice = Self.hello + Self.hello
        for piece in [1, 5, 13, twice.count] {
            let inflate = try Inflate(format: .gzip, engine: engine)
            #expect(try drive(inflate, twice, piece: piece, outputSize: 64) == Array("hello\nhello\n".utf8))
            #expect(inflate.totalIn == twice.count, "\(engine) in pieces of \(piece): totalIn \(inflate.totalIn)")
        }
    }

    /// Fuzz/Regressions/inflate/isal-trailing-garbage-at-finish: raw deflate followed by a
    /// garbage byte. When the stream's end was only found by `finish` (the last `process` ran
    /// out of output room), ISA-L had read the garbage ahead and it was dropped: the input was
    /// accepted. It must be refused however it is split.
    @Test(arguments: engines)
    func trailingGarbageFoundAtFinishIsRefused(_ engine: CompressionEngine) throws {
        let found: [UInt8] = [0x3b, 0xff, 0x00, 0x01, 0x00, 0x22, 0x3e]
        for piece in [1, 3, found.count] {
            for outputSize in [1, 6, 64] {
                let error = #expect(throws: SluiceError.self) {
                    try drive(
                        Inflate(format: .deflate, engine: engine), found, piece: piece, outputSize: outputSize)
                }
                #expect(
                    error?.reason.contains("trailing garbage") == true,
                    "\(engine) pieces \(piece) output \(outputSize): \(String(describing: error))")
            }
        }
    }

    /// Fuzz/Regressions/inflate/isal-invalid-distances-set: raw deflate whose dynamic block's
    /// distance code lengths do not form a valid code. zlib refuses it ("invalid distances
    /// set"); ISA-L decoded it to 3,041 bytes. Raw deflate has no checksum to catch that, so it
    /// is always decoded by zlib, whichever engine is asked for.
    @Test(arguments: engines)
    func invalidDistanceCodesAreRefused(_ engine: CompressionEngine) throws {
        let found: [UInt8] = [
            0x00, 0x9d, 0xd6, 0xc7, 0x11, 0xc2, 0x50, 0x0c, 0x00, 0xd1, 0x3b, 0x55, 0xa8, 0x04, 0x94, 0x4c, 0xe8,
            0x86, 0x60, 0xc0, 0x60, 0xfc, 0xc1, 0xc6, 0xa4, 0xea, 0x19, 0xe8, 0x80, 0x3d, 0x6b, 0xf6, 0xf6, 0x46,
            0x26, 0xdb, 0x74, 0xb5, 0xe8, 0x52, 0x6e, 0x87, 0x5a, 0xae, 0x63, 0xb7, 0x39, 0xc9, 0xba, 0x2f, 0x8f,
            0x4e, 0x76, 0xe5, 0x29, 0xc7, 0xf1, 0x7c, 0x19, 0xa4, 0xdc, 0xeb, 0xfe, 0x37, 0x6e, 0x25, 0x57, 0xef,
            0x97, 0x6c, 0xcb, 0x7e, 0xd2, 0x7e, 0x1b, 0x03, 0x8d, 0x83, 0x26, 0x40, 0x93, 0xa0, 0xa9, 0x40, 0x33,
            0x03, 0xcd, 0x1c, 0x34, 0x0b, 0xd0, 0xe8, 0x94, 0x44, 0x44, 0x82, 0x12, 0x0a, 0x4a, 0x2c, 0x28, 0xc1,
            0xa0, 0x44, 0x83, 0x12, 0x0e, 0x4a, 0x3c, 0x28, 0x01, 0xa1, 0x44, 0x84, 0x11, 0x11, 0x86, 0x76, 0x03,
            0x11, 0x61, 0x44, 0x84, 0x11, 0x11, 0x46, 0x44, 0x18, 0x11, 0x61, 0xc7, 0xf1, 0x7c, 0x19, 0x90, 0x1b,
            0x1f, 0x85, 0xc6, 0x7b, 0x00, 0x00, 0xa4, 0xdc, 0xeb, 0xfe, 0x34, 0x6e, 0x57, 0xef, 0x97, 0x6c, 0xcb,
            0x7e, 0xd2, 0x7e, 0x1b, 0x03, 0x8d, 0x83, 0x26, 0x40, 0x93, 0xa0, 0xa9, 0x40, 0x34, 0x03, 0xcd, 0x1c,
            0x34, 0x0b, 0xd0, 0xe8, 0x94, 0x44, 0x44, 0x82, 0x12, 0x0a, 0x4a, 0x2c, 0x28, 0xc1, 0xa0, 0x44, 0x83,
            0x12, 0x0e, 0x4a, 0x3c, 0x28, 0x01, 0xa1, 0x44, 0x84, 0x11, 0x11, 0x86, 0x76, 0x03, 0x12, 0x11, 0x49,
            0x44, 0x24, 0x11, 0x91, 0x44, 0x44, 0x12, 0x11, 0xd5, 0x9f, 0x22, 0x3e,
        ]
        let inflate = try Inflate(format: .deflate, engine: engine)
        #expect(inflate.engine == .zlib)
        for piece in [1, 64, found.count] {
            let error = #expect(throws: SluiceError.self) {
                try drive(Inflate(format: .deflate, engine: engine), found, piece: piece, outputSize: 4096)
            }
            #expect(error?.code == .corruptData, "\(engine) pieces \(piece): \(String(describing: error))")
        }
    }

    /// Fuzz/Regressions/inflate/zstd-content-size-streamed (after the harness's first byte): a
    /// zstd frame whose header declares 14 bytes of content and whose one (raw, last) block
    /// holds none, with the right checksum of nothing. libzstd refused it when it could decode
    /// the frame at once into a large output buffer, and accepted it streamed through a small
    /// one; sluice checks the declared size itself, so both are corrupt.
    @Test func zstdFrameShorterThanItsDeclaredSizeIsCorruptWhateverTheBuffers() throws {
        guard CompressionEngine.zstd.isAvailable else { return }
        let found: [UInt8] = [0x28, 0xb5, 0x2f, 0xfd, 0x24, 0x0e, 0x01, 0x00, 0x00, 0x99, 0xe9, 0xd8, 0x51]
        for (piece, outputSize) in [(found.count, 1 << 18), (found.count, 5), (1, 5), (1, 1 << 18), (4, 1)] {
            let error = #expect(throws: SluiceError.self) {
                try drive(ZstdDecompress(), found, piece: piece, outputSize: outputSize)
            }
            #expect(error?.code == .corruptData, "pieces \(piece), output \(outputSize): \(String(describing: error))")
        }
        // A frame that holds what it declares still decodes, split or not.
        let good = try drive(ZstdCompress(level: 3), Array("fourteen bytes".utf8), piece: 1 << 20, outputSize: 1 << 16)
        for (piece, outputSize) in [(good.count, 1 << 18), (1, 5), (3, 1)] {
            #expect(
                try drive(ZstdDecompress(), good, piece: piece, outputSize: outputSize) == Array("fourteen bytes".utf8))
        }
    }

    /// Fuzz/Regressions/inflate/zstd-empty-compressed-block (after the harness's first byte): a
    /// zstd frame declaring no content whose one block is a compressed block of size 0, with
    /// the right checksum of nothing. libzstd refused it when it decoded the frame at once and
    /// accepted it as an empty block when streamed; `zstd -d` refuses it. `ZstdFrameWalker`
    /// finds the block wherever the pieces fall, so sluice refuses it both ways; so with a
    /// raw block of data before it.
    @Test func zstdCompressedBlockOfSizeZeroIsCorruptWhateverTheBuffers() throws {
        guard CompressionEngine.zstd.isAvailable else { return }
        let found: [UInt8] = [0x28, 0xb5, 0x2f, 0xfd, 0x24, 0x00, 0x05, 0x00, 0x00, 0x99, 0xe9, 0xd8, 0x51]
        // Magic, a descriptor without content size or checksum, a window of 1 KiB, a raw block
        // of 3 bytes ("abc"), then the empty compressed block, last.
        let afterData: [UInt8] = [
            0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00, 0x18, 0x00, 0x00, 0x61, 0x62, 0x63, 0x05, 0x00, 0x00,
        ]
        Self.expectCorruptZstd([found, afterData])
    }

    /// Each frame, decoded whole or in pieces of 1, 4 and 9 bytes, into outputs of 1 byte to
    /// 256 KiB, fails as corrupt data.
    static func expectCorruptZstd(_ frames: [[UInt8]], sourceLocation: SourceLocation = #_sourceLocation) {
        for frame in frames {
            for (piece, outputSize) in [
                (frame.count, 1 << 18), (frame.count, 5), (frame.count, 1), (1, 5), (1, 1 << 18), (4, 1),
                (9, 1 << 18),
            ] {
                let error = #expect(throws: SluiceError.self, sourceLocation: sourceLocation) {
                    try drive(ZstdDecompress(), frame, piece: piece, outputSize: outputSize)
                }
                #expect(
                    error?.code == .corruptData, "pieces \(piece), output \(outputSize): \(String(describing: error))",
                    sourceLocation: sourceLocation)
            }
        }
    }

    /// Fuzz/Regressions/inflate/zstd-rle-block-empty-window (after the harness's first byte): a
    /// single-segment zstd frame declaring a content size of 0, with a checksum, whose blocks
    /// are empty raw blocks and one RLE block of size 0. libzstd read it when the whole frame
    /// came at once (as `zstd -d` of the file does) and called it corrupt when it came in
    /// pieces: its window holds no bytes. `ZstdFrameWalker` refuses such a block wherever the
    /// pieces fall; so for the smallest such frame, and one with a 4-byte content size.
    @Test func zstdRLEBlockInAnEmptyWindowIsCorruptWhateverTheBuffers() {
        guard CompressionEngine.zstd.isAvailable else { return }
        // Magic, a single-segment descriptor with a checksum, content size 0; ten empty raw
        // blocks, the RLE block of size 0 and its byte, 24 empty raw blocks, the last one, and
        // the checksum of nothing.
        let found: [UInt8] =
            [0x28, 0xb5, 0x2f, 0xfd, 0x24, 0x00] + [UInt8](repeating: 0, count: 30) + [0x02, 0x00, 0x00, 0x00]
            + [UInt8](repeating: 0, count: 72) + [0x01, 0x00, 0x00, 0x99, 0xe9, 0xd8, 0x51]
        let smallest: [UInt8] = [0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x00, 0x03, 0x00, 0x00, 0x00]
        let fourByteSize: [UInt8] = [0x28, 0xb5, 0x2f, 0xfd, 0xa0, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x41]
        Self.expectCorruptZstd([found, smallest, fourByteSize])
    }

    /// Fuzz/Regressions/inflate/zstd-legacy-frame-split (after the harness's first byte): a
    /// frame of zstd's v0.7 format (magic 0xFD2FB527) holding nothing. libzstd read it when the
    /// magic number came in one piece and called it an unknown prefix when it came in two;
    /// sluice refuses the legacy formats whatever the split.
    @Test func zstdLegacyFrameIsRefusedWhateverTheBuffers() throws {
        guard CompressionEngine.zstd.isAvailable else { return }
        let found: [UInt8] = [0x27, 0xb5, 0x2f, 0xfd, 0x00, 0x00, 0x00, 0x00, 0x00]
        for (piece, outputSize) in [(found.count, 1 << 18), (2, 1 << 18), (1, 5), (4, 1)] {
            let error = #expect(throws: SluiceError.self) {
                try drive(ZstdDecompress(), found, piece: piece, outputSize: outputSize)
            }
            #expect(error?.code == .corruptData, "pieces \(piece), output \(outputSize): \(String(describing: error))")
        }
    }

    /// Fuzz/Regressions/tls/wrong-magic-after-handshake: a client with the key whose plaintext
    /// is a wrong magic. The session ends on the violation gracefully, and while it drains
    /// what the peer still sends, a 5 s timer stands ready to cut a peer that never closes;
    /// the peer's close cancels it. The cancelled timer still held its closure, and through
    /// it the connection, its streams and the loop, until its deadline: every such session
    /// outlived its close by 5 s, and a loop dropped meanwhile leaked. (The same in
    /// plaintext, here over bound pairs; where, too, the peer's close went unnoticed while
    /// draining, since a bound pair reports its end without a read, and the session waited
    /// for that timer.)
    @Test func aSessionEndedOnAViolationLeavesNothingOnItsLoop() throws {
        try withTemporaryDirectory { directory in
            let receiver = try TransferReceiver(directory: directory)
            var report: TransferSessionReport?
            receiver.onSessionEnd = { report = $0 }
            let (input, toReceiver) = boundPair(bufferSize: 4096)
            let (fromReceiver, output) = boundPair(bufferSize: 4096)
            toReceiver.open()
            fromReceiver.open()
            weak var weakLoop: EventLoop?
            do {
                let loop = try EventLoop()
                weakLoop = loop
                receiver.serve(input: input, output: output, peer: "stranger", on: loop)
                let magic = Array("SLUICu\r\n".utf8)
                #expect(magic.withUnsafeBufferPointer { toReceiver.write($0.baseAddress!, maxLength: $0.count) } == 8)
                #expect(runLoop(loop) { report != nil })
                #expect(report?.error?.code == .protocolViolation)
                toReceiver.close()
                // At once: not when the 5 s timer that cuts a peer that never closes comes round.
                #expect(runLoop(loop, for: .seconds(2)) { input.streamStatus == .closed })
            }
            #expect(weakLoop == nil, "the closed session's loop is still held")
            fromReceiver.close()
        }
    }

    /// Fuzz/Corpus/tls/raw-client-hello: a real ClientHello with the key, then the peer hangs
    /// up. Once the server had picked the pre-shared key, OpenSSL's verify result was the PSK
    /// session's placeholder ("unspecified"), and the failure read "certificate not trusted"
    /// (in a receiver's log, about a handshake where no certificate is used): it is a peer
    /// that closed during the handshake.
    @Test func aClientThatHangsUpAfterItsHelloIsNotACertificateFailure() throws {
        let key = try #require(PreSharedKey(key: [UInt8](repeating: 7, count: 32)))
        var settings = TLSSettings(role: .server)
        settings.preSharedKey = key
        let server = try TLSEngine(context: TLSContext(settings), name: "stranger")
        settings.role = .client
        let client = try TLSEngine(context: TLSContext(settings), name: "receiver")
        #expect(client.handshake() == .wantInput)
        let hello = Array(client.output())
        #expect(hello.withUnsafeBytes { server.feed($0) } == hello.count)
        #expect(server.handshake() == .wantInput)
        server.endInput()
        guard case .failed(let error) = server.handshake() else {
            Issue.record("the handshake did not fail")
            return
        }
        #expect(error.code == .protocolViolation, "\(error)")
        #expect(!"\(error)".contains("certificate"), "\(error)")
    }

    /// Fuzz/Regressions/sender/dry-run-prune: `send --sync --delete --dry-run` (settings the
    /// seeds of sizes at the edges led the fuzzer to). The sender asked, then sent PRUNE, which
    /// the target took for a change made on a dry run: it is flagged dry run, and the receiver
    /// only lists what would go. What a dry run sends, then: CHECKs, that PRUNE, BYE.
    @Test func aDryRunSendsOnlyQuestionsAndADryRunPrune() {
        let directory = SenderMachine.Entry(
            relative: "d", isDirectory: true, seekable: false, mode: 0o755, mtimeSeconds: 0, mtimeNanoseconds: 0)
        let file = SenderMachine.Entry(
            relative: "d/f", isDirectory: false, seekable: true, mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0)
        var settings = SenderMachine.Settings()
        (settings.sync, settings.dryRun, settings.pruneRoots) = (true, true, [0])
        var machine = SenderMachine(entries: [directory, file], settings: settings)
        var sent = machine.start()
        _ = machine.received(.magic)
        _ = machine.received(.frame(.hello(version: 1, capabilities: ["sha256", "sync"])))
        for _ in 0..<10 where !machine.hasEnded {
            let actions = machine.proceed()
            sent += actions
            for case .send(let frame) in actions {
                switch frame {
                case .check: _ = machine.received(.frame(.have(HaveAnswer(status: .differs))))
                case .prune: _ = machine.received(.frame(.stored))
                case .bye: _ = machine.received(.frame(.bye))
                default: break
                }
            }
        }
        let frames = sent.compactMap { action -> Frame? in
            if case .send(let frame) = action { return frame }
            return nil
        }
        #expect(frames.dropFirst().map(\.type) == [.check, .check, .prune, .bye], "\(frames)")
        #expect(frames.contains(.prune(path: Array("d".utf8), dryRun: true)))
        #expect(machine.hasEnded)
    }
}
