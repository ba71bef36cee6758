import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// send → receive over TLS through a relay that cuts both connections in the middle of a file.
@Suite(.ownThreads) struct TransferCutTests {
    @Test func aConnectionCutWithoutCloseNotifyExits74AndStoresNothing() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            try write(randomBytes(16 << 20, seed: 31), to: "\(dir)/big.bin")
            let receiver = try ReceiverProcess(["--dir", inbox, "--once"])
            let relay = try CutRelay(to: try receiver.port(), cutAfter: 2 << 20)
            let sent = try sluice("send", "--timeout", "20", "\(dir)/big.bin", "127.0.0.1:\(relay.port)")
            #expect(relay.waitUntilDone())
            #expect(relay.didCut, "the transfer ended before the relay cut it")
            #expect(sent.status == 74, "\(sent.stderrText)")
            #expect(sent.stderrText.hasPrefix("sluice: "))
            let received = receiver.wait()
            #expect(received.status == 74, "\(received.stderr)")
            #expect(received.stderr.contains("close_notify"), "\(received.stderr)")
            #expect(!FileManager.default.fileExists(atPath: "\(inbox)/big.bin"))
            // What arrived is kept only under the hidden partial name, for a resume.
            #expect(directoryEntries(inbox).allSatisfy { $0.hasPrefix(".") }, "\(directoryEntries(inbox))")
        }
    }
}
