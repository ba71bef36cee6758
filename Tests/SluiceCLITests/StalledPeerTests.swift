import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The CPU time (user + system) process `pid` has used so far, in seconds, from /proc.
func cpuSeconds(of pid: Int32) -> Double? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let end = text.lastIndex(of: ")")
    else { return nil }
    // After "pid (comm) ", the fields are numbered from 3 (state): utime is 14, stime 15.
    let fields = text[text.index(after: end)...].split(separator: " ")
    guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// A TLS peer whose path dies in the middle of a record, both connections left open (a network
/// outage): the side waiting for the rest of the record waits on its socket, costing no CPU,
/// and gives up at its timeout with 74, leaving nothing at the destination's name.
@Suite(.ownThreads) struct StalledPeerTests {
    /// Where the relay stops: inside a record (records are 16 KiB and some bytes).
    static let stallAt = 1_000_003

    /// Waits for the stall, then measures `pid`'s CPU over five seconds.
    static func cpuWhileStalled(_ relay: CutRelay, _ pid: Int32) -> Double? {
        guard waitUntil(.seconds(60), { relay.didCut }), let before = cpuSeconds(of: pid) else { return nil }
        let start = ContinuousClock.now
        while ContinuousClock.now - start < .seconds(5) { usleep(100_000) }
        guard let after = cpuSeconds(of: pid) else { return nil }
        return after - before
    }

    @Test func aReceiverWaitingForTheRestOfARecordCostsNothing() throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            try write(randomBytes(8 << 20, seed: 61), to: "\(dir)/big.bin")
            let receiver = try ReceiverProcess(["--dir", inbox, "--once", "--timeout", "7"])
            let relay = try CutRelay(to: try receiver.port(), cutAfter: Self.stallAt, stall: true)
            defer { relay.release() }
            let sender = try Running(sluiceBinary, ["send", "\(dir)/big.bin", "127.0.0.1:\(relay.port)"])
            let cpu = Self.cpuWhileStalled(relay, receiver.process.processIdentifier)
            #expect(cpu != nil && cpu! < 0.1, "the receiver used \(String(describing: cpu)) CPU-s in 5 s")
            let ended = receiver.wait(seconds: 30)
            #expect(ended.status == 74, "\(ended.stderr)")
            #expect(ended.stderr.contains("timed out"), "\(ended.stderr)")
            #expect(fileSize("\(inbox)/big.bin") == nil)
            relay.release()
            _ = sender.wait(within: .seconds(30))
        }
    }

    /// The sender's side: its receiver stops reading in the middle of a file, while chunks read
    /// from the file wait to be written from the buffers they were read into (lent to the
    /// connection): the sender waits on its socket at no CPU, gives up at its timeout with 74,
    /// and the receiver keeps nothing at the file's name.
    @Test(arguments: [false, true])
    func aSenderWhoseReceiverStopsReadingCostsNothing(authenticated: Bool) throws {
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            try write(randomBytes(8 << 20, seed: 64), to: "\(dir)/big.bin")
            let trust = authenticated ? ["--key-file", testKeyFile] : ["--insecure"]
            let receiver = try ReceiverProcess(["--dir", inbox, "--once"] + trust)
            let relay = try CutRelay(to: try receiver.port(), cutAfter: Self.stallAt, stall: true)
            defer { relay.release() }
            let sender = try Running(
                sluiceBinary, ["send", "--timeout", "6"] + trust + ["\(dir)/big.bin", "127.0.0.1:\(relay.port)"])
            let cpu = Self.cpuWhileStalled(relay, sender.process.processIdentifier)
            #expect(cpu != nil && cpu! < 0.1, "the sender used \(String(describing: cpu)) CPU-s in 5 s")
            let ended = sender.wait(within: .seconds(30))
            #expect(ended.status == 74, "\(ended.stderrText)")
            #expect(ended.stderrText.contains("timed out"), "\(ended.stderrText)")
            relay.release()
            _ = receiver.wait(seconds: 30)
            #expect(fileSize("\(inbox)/big.bin") == nil)
        }
    }

    @Test func aTLSListenerWaitingForTheRestOfARecordCostsNothing() throws {
        try withTemporaryDirectory { dir in
            try write(randomBytes(8 << 20, seed: 62), to: "\(dir)/big.bin")
            let port = try freePort()
            let listener = try WatchedProcess(
                sluiceBinary, ["copy", "--timeout", "7", "tls-listen:127.0.0.1:\(port)", "\(dir)/out"])
            let pin = try listener.pin()
            let relay = try CutRelay(to: port, cutAfter: Self.stallAt, stall: true)
            defer { relay.release() }
            let sender = try Running(
                sluiceBinary, ["copy", "\(dir)/big.bin", "tls:127.0.0.1:\(relay.port),pin=\(pin)"])
            let cpu = Self.cpuWhileStalled(relay, listener.process.processIdentifier)
            #expect(cpu != nil && cpu! < 0.1, "the listener used \(String(describing: cpu)) CPU-s in 5 s")
            let ended = listener.wait(seconds: 30)
            #expect(ended.status == 74, "\(ended.stderr)")
            #expect(ended.stderr.contains("timed out"), "\(ended.stderr)")
            #expect(fileSize("\(dir)/out") == nil)
            relay.release()
            _ = sender.wait(within: .seconds(30))
        }
    }

    @Test func aTLSClientWaitingForTheRestOfARecordCostsNothing() throws {
        try withTemporaryDirectory { dir in
            try write(randomBytes(8 << 20, seed: 63), to: "\(dir)/big.bin")
            let port = try freePort()
            let server = try WatchedProcess(sluiceBinary, ["copy", "\(dir)/big.bin", "tls-listen:127.0.0.1:\(port)"])
            let pin = try server.pin()
            let relay = try CutRelay(to: port, cutAfter: Self.stallAt, towardClient: true, stall: true)
            defer { relay.release() }
            let client = try Running(
                sluiceBinary, ["copy", "--timeout", "7", "tls:127.0.0.1:\(relay.port),pin=\(pin)", "\(dir)/out"])
            let cpu = Self.cpuWhileStalled(relay, client.pid)
            #expect(cpu != nil && cpu! < 0.1, "the client used \(String(describing: cpu)) CPU-s in 5 s")
            let ended = client.wait(within: .seconds(30))
            #expect(ended.status == 74, "\(ended.stderrText)")
            #expect(ended.stderrText.contains("timed out"), "\(ended.stderrText)")
            #expect(fileSize("\(dir)/out") == nil)
            relay.release()
            _ = server.wait(seconds: 30)
        }
    }
}
