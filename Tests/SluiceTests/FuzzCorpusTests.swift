import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

/// The fuzz targets' seed corpora (`Fuzz/Corpus`, made by `Fuzz/make-seeds.sh`) must stay what
/// they claim to be: whole, valid sessions for the decoder and both machines, real compressed
/// streams for Inflate. A change of the wire format that made them stale would leave the
/// fuzzers starting from noise; this says so, and `Fuzz/make-seeds.sh` rewrites them.
@Suite(.ownThreads) struct FuzzCorpusTests {
    static let corpus = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz/Corpus")

    /// Each seed's payload (after the seed byte that picks the target's choices), by name.
    static func seeds(_ target: String) throws -> [(name: String, payload: [UInt8])] {
        let directory = corpus.appendingPathComponent(target)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        return try names.map { name in
            (name, Array(try Data(contentsOf: directory.appendingPathComponent(name)).dropFirst()))
        }
    }

    @Test func sessionSeedsDecodeToTheirEnd() throws {
        for target in ["frames", "receiver", "sender"] {
            let seeds = try Self.seeds(target)
            #expect(seeds.count >= 5, "\(target): \(seeds.count) seeds")
            for (name, payload) in seeds {
                let direction: FrameDirection = target == "sender" || name == "answers" ? .toSender : .toReceiver
                let decoded = decode(payload, cuts: [], direction: direction)
                #expect(decoded.first == .magic, "\(target)/\(name)")
                #expect(!decoded.contains { if case .violation = $0 { true } else { false } }, "\(target)/\(name)")
                #expect(
                    decoded.last == .frame(.bye)
                        || decoded.last.map { if case .frame(.error) = $0 { true } else { false } }
                            == true,
                    "\(target)/\(name) does not end with BYE or ERROR")
            }
        }
    }

    /// The tls target's seeds: raw bytes (control byte 0) whose ClientHellos are whole
    /// handshake records, and a real client's sessions (no edits) whose plaintext is a whole
    /// session of the protocol.
    @Test func tlsSeedsAreWhatTheyClaim() throws {
        let seeds = try Self.seeds("tls")
        #expect(seeds.count >= 10)
        for (name, payload) in seeds {
            let control = try #require(payload.first, "tls/\(name)")
            let rest = Array(payload.dropFirst())
            if name.hasPrefix("raw-client-hello") || name == "raw-tls12-client-hello" {
                #expect(control == 0, "tls/\(name)")
                #expect(rest.starts(with: [0x16, 0x03, 0x01]), "tls/\(name)")
                let length = rest.count >= 5 ? Int(rest[3]) << 8 | Int(rest[4]) : 0
                if name.hasSuffix("truncated") {
                    #expect(rest.count < 5 + length, "tls/\(name)")
                } else {
                    #expect(rest.count >= 5 + length && rest[5] == 0x01, "tls/\(name): not a ClientHello")
                }
            }
            if name.hasPrefix("client-") && name != "client-http" {
                #expect(control & 3 != 0 && control >> 4 & 3 == 0, "tls/\(name)")
                let decoded = decode(rest, cuts: [], direction: .toReceiver)
                #expect(decoded.first == .magic, "tls/\(name)")
                #expect(decoded.last == .frame(.bye), "tls/\(name) does not end with BYE")
            }
        }
    }

    @Test func inflateSeedsAreRealStreams() throws {
        let seeds = try Self.seeds("inflate")
        #expect(seeds.count >= 10)
        for (name, payload) in seeds {
            // zstd frames go through Decompressor's detection; a build without zstd skips them.
            if name.hasSuffix(".zst") && !CompressionEngine.zstd.isAvailable { continue }
            let decode = { try drive(Decompressor(format: .auto), payload, piece: 65536, outputSize: 65536) }
            if name.hasPrefix("garbage") {
                let error = #expect(throws: SluiceError.self, "inflate/\(name)") { try decode() }
                #expect(error?.code == .corruptData, "inflate/\(name)")
            } else {
                #expect(throws: Never.self, "inflate/\(name)") { try decode() }
            }
        }
    }
}
