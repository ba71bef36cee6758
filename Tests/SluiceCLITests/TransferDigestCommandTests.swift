import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// send and receive agree on the digest: XXH3-128 where both have libxxhash, SHA-256 when either
/// lacks it (`SLUICE_ENGINES=zlib` makes a process behave as one without it).
@Suite(.ownThreads) struct TransferDigestCommandTests {
    /// Whether this machine's sluice has XXH3-128: the last line's word in `--version`.
    static let hasXXH128: Bool = {
        guard let outcome = try? sluice("--version") else { return false }
        return outcome.stdoutText.contains("transfer digests: SHA-256, XXH3-128 (libxxhash")
    }()

    @Test(
        "The digest agreed is XXH3-128 only when both ends have it; the file arrives identical either way",
        arguments: [(false, false), (true, false), (false, true)])
    func agreement(senderWithout: Bool, receiverWithout: Bool) throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: false)
            let data = randomBytes(2_000_003, seed: 21)
            try write(data, to: "\(dir)/f.bin")
            let zlibOnly = ["SLUICE_ENGINES": "zlib"]
            let receiver = try ReceiverProcess(
                ["--dir", inbox, "--once"], environment: receiverWithout ? zlibOnly : [:])
            let send = try Running(
                sluiceBinary, ["send", "-q", "--stats=json", "\(dir)/f.bin", try receiver.address()],
                environment: senderWithout ? zlibOnly : [:]
            ).wait(within: .seconds(60))
            #expect(send.status == 0, "\(send.stderrText)")
            #expect(receiver.wait().status == 0)
            #expect(contents("\(inbox)/f.bin") == data)
            let expected = Self.hasXXH128 && !senderWithout && !receiverWithout ? "xxh128" : "sha256"
            #expect(lastJSONObject(send.stderrText)?["digest"] as? String == expected, "\(send.stderrText)")
        }
    }
}
