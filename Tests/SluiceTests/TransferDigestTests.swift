import CSluiceEngines
import Foundation
import Testing

@testable import Sluice
@testable import SluiceTransfer

/// The digest a transfer checks files with is agreed in HELLO: XXH3-128 when both ends offer it,
/// SHA-256 otherwise; END and RANGE-END must then carry digests of its size.
@Suite("Transfer digests: agreement in HELLO and digest sizes")
struct TransferDigestTests {
    static let both: [TransferDigest] = [.xxh128, .sha256]

    private func receiver(offering digests: [TransferDigest], peer: Set<String>) -> ReceiverMachine {
        var machine = ReceiverMachine(settings: .init(digests: digests))
        _ = machine.received(.magic)
        _ = machine.received(.frame(.hello(version: 1, capabilities: peer)))
        return machine
    }

    @Test(
        "The first digest offered that the peer offers too is agreed; none in common is a violation",
        arguments: [
            (both, ["sha256", "xxh128"], TransferDigest.xxh128),
            (both, ["sha256"], .sha256),
            ([.sha256], ["sha256", "xxh128"], .sha256),
            (both, ["xxh128"], .xxh128),
        ] as [([TransferDigest], [String], TransferDigest)])
    func agreement(offered: [TransferDigest], peerList: [String], agreed: TransferDigest) {
        let peer = Set(peerList)
        let machine = receiver(offering: offered, peer: peer)
        #expect(machine.digest == agreed)
        #expect(machine.acceptsMessages)

        var sender = SenderMachine(entries: [], settings: .init(digests: offered))
        #expect(sender.capabilities.isSuperset(of: offered.map(\.capability)))
        _ = sender.received(.magic)
        #expect(sender.received(.frame(.hello(version: 1, capabilities: peer))).isEmpty)
        #expect(sender.digest == agreed)
    }

    @Test("A peer offering no digest this end knows is refused in both directions")
    func noCommonDigest() {
        var machine = ReceiverMachine(settings: .init(digests: [.sha256]))
        _ = machine.received(.magic)
        let actions = machine.received(.frame(.hello(version: 1, capabilities: ["xxh128", "deflate"])))
        #expect(actions.last == .end(.violation("no common digest (sha256 required)")))

        var sender = SenderMachine(entries: [], settings: .init(digests: [.sha256]))
        _ = sender.received(.magic)
        let refused = sender.received(.frame(.hello(version: 1, capabilities: ["xxh128"])))
        #expect(refused.contains(.send(.error(reason: "no common digest (sha256 required)"))))
    }

    @Test("END must carry a digest of the agreed size", arguments: TransferDigest.allCases)
    func endDigestSize(agreed: TransferDigest) {
        for size in [16, 32] {
            var machine = receiver(offering: Self.both, peer: [agreed.capability])
            _ = machine.received(.frame(.file(fileHeader("f", size: 0))))
            _ = machine.handle(.fileOpened(.success(0)))
            let actions = machine.received(.frame(.end(size: 0, digest: Array(repeating: 7, count: size))))
            if size == agreed.byteCount {
                #expect(actions == [.finishData])
            } else {
                #expect(actions.last == .end(.violation("END with a \(size)-byte digest (\(agreed) agreed)")))
            }
        }
    }

    @Test("END and RANGE-END decode with either digest size, and nothing else")
    func frameSizes() {
        for algorithm in TransferDigest.allCases {
            let digest = [UInt8](repeating: 1, count: algorithm.byteCount)
            let end = MessageWriter.end(size: 9, digest: digest)
            #expect(decode(Wire.magic + end, cuts: []) == [.magic, .frame(.end(size: 9, digest: digest))])
            let rangeEnd = MessageWriter.rangeEnd(length: 9, digest: digest, fileDigest: digest.map { $0 + 1 })
            #expect(
                decode(Wire.magic + rangeEnd, cuts: [])
                    == [.magic, .frame(.rangeEnd(length: 9, digest: digest, fileDigest: digest.map { $0 + 1 }))])
        }
        for odd in [0, 15, 20, 31] {
            let end = MessageWriter.end(size: 9, digest: [UInt8](repeating: 1, count: odd))
            #expect(decode(Wire.magic + end, cuts: []).contains { if case .violation = $0 { true } else { false } })
        }
    }

    /// libxxhash's dispatched update (its AVX2 or AVX-512 code, where the CPU has it) gives the
    /// baseline code's digest for every length around the stripe (64), block (1,024) and
    /// internal buffer (256) sizes and for long inputs, fed whole or in uneven pieces.
    @Test("XXH3-128 through libxxhash's CPU dispatcher equals its baseline code, whole and in pieces")
    func dispatchedXXH3EqualsBaseline() {
        guard TransferDigest.xxh128.isAvailable else { return }
        let data = randomBytes(300_000, seed: 52)
        let lengths = Array(0...1100) + [2047, 2048, 2049, 65_536, 100_003, 300_000]
        data.withUnsafeBytes { all in
            for length in lengths {
                for pieces in [1, 3, 7] {
                    let states = (sluice_xxh128_create(), sluice_xxh128_create())
                    guard let dispatched = states.0, let baseline = states.1 else {
                        Issue.record("no XXH3 state")
                        return
                    }
                    defer {
                        sluice_xxh128_free(dispatched)
                        sluice_xxh128_free(baseline)
                    }
                    var start = 0
                    for piece in 0..<pieces {
                        let end = piece == pieces - 1 ? length : min(length, start + length / pieces + piece * 13)
                        let bytes = all.baseAddress! + start
                        sluice_xxh128_update(dispatched, bytes, end - start)
                        sluice_xxh128_update_baseline(baseline, bytes, end - start)
                        start = end
                    }
                    var (a, b) = ([UInt8](repeating: 0, count: 16), [UInt8](repeating: 1, count: 16))
                    sluice_xxh128_digest(dispatched, &a)
                    sluice_xxh128_digest(baseline, &b)
                    if a != b { Issue.record("length \(length) in \(pieces) pieces: \(a) against \(b)") }
                }
            }
        }
    }
}
