import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `sluice relay ARGUMENTS --listen 127.0.0.1:0`, its stderr and stdout read as they come.
final class RelayProcess: @unchecked Sendable {
    let live: LiveSluice
    var process: Process { live.process }

    init(_ arguments: [String]) throws {
        live = try LiveSluice(["relay", "--listen", "127.0.0.1:0"] + arguments, keyed: false)
    }

    var stderrText: String { live.stderrText }
    var stdoutText: String { live.stdoutText }

    /// The port from `relaying on 127.0.0.1:PORT`, waiting for it.
    func port() throws -> UInt16 {
        try #require(UInt16(try live.line(/relaying on 127\.0\.0\.1:([0-9]+)\n/)))
    }

    /// Waits until stderr has a line containing `text`.
    func waitForLine(containing text: String) -> Bool {
        waitUntil { stderrText.split(separator: "\n").contains { $0.contains(text) } }
    }

    /// Sends `signal` and waits for the exit (at most 10 s, then SIGKILL): the status.
    func stop(with signal: Int32 = SIGTERM) -> Int32 {
        kill(process.processIdentifier, signal)
        return live.wait(seconds: 10).status
    }
}

/// A blocking connection to the relay, reads bounded by 10 s.
final class RelayPeer {
    let fd: Int32

    init(port: UInt16, from source: String = "127.0.0.1") throws {
        fd = try #require(connect(from: source, toLoopbackPort: port))
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    func send(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { return }
            offset += n
        }
    }

    func send(_ text: String) { send(Array(text.utf8)) }

    /// One line, newline included ("" at the end of stream).
    func line() -> String {
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while recv(fd, &byte, 1, 0) == 1 {
            bytes.append(byte)
            if byte == UInt8(ascii: "\n") { break }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Everything until the end of stream.
    func readToEnd() -> [UInt8] {
        var all: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { return all }
            all += buffer[0..<n]
        }
    }

    /// `OPEN`: the nameplate, or nil.
    func open() -> Int? {
        send("SLUICE-RELAY 1 OPEN\n")
        let reply = line()
        guard reply.hasPrefix("NAMEPLATE "), reply.hasSuffix("\n") else { return nil }
        return Int(reply.dropFirst(10).dropLast())
    }

    /// Two peers paired at the relay on `port`: one OPENs, the other JOINs its nameplate, and
    /// both are told `PAIRED` (checked).
    static func pair(port: UInt16) throws -> (opener: RelayPeer, joiner: RelayPeer, nameplate: Int) {
        let opener = try RelayPeer(port: port)
        let nameplate = try #require(opener.open())
        let joiner = try RelayPeer(port: port)
        joiner.send("SLUICE-RELAY 1 JOIN \(nameplate)\n")
        #expect(joiner.line() == "PAIRED\n")
        #expect(opener.line() == "PAIRED\n")
        return (opener, joiner, nameplate)
    }
}

@Suite(.ownThreads) struct RelayCommandTests {
    /// The command as a server: it pairs, splices both ways, logs the pair and its end, refuses
    /// strangers, stops on SIGTERM with a pair still open, and prints its statistics as JSON.
    @Test func pairsLogsAndReportsJSONWhenTerminated() throws {
        let relay = try RelayProcess(["--stats=json"])
        let port = try relay.port()
        let (sender, receiver, nameplate) = try RelayPeer.pair(port: port)
        let data = randomBytes(3 << 20, seed: 50)
        let reply = Array(randomBytes(1000, seed: 51))
        nonisolated(unsafe) let s = sender
        let sent = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            s.send(Array(data))
            shutdown(s.fd, Int32(SHUT_WR))
            sent.signal()
        }
        let forwardSame = receiver.readToEnd() == Array(data)
        #expect(forwardSame, "the bytes through the relay differ")
        sent.wait()
        receiver.send(reply)
        shutdown(receiver.fd, Int32(SHUT_WR))
        let replySame = sender.readToEnd() == reply
        #expect(replySame, "the reply differs")
        #expect(relay.waitForLine(containing: "ended nameplate \(nameplate): 127.0.0.1:"))
        #expect(relay.stderrText.contains("\(data.count) bytes ->, \(reply.count) bytes <-"))
        #expect(relay.stderrText.contains("paired nameplate \(nameplate): 127.0.0.1:"))

        let stranger = try RelayPeer(port: port)
        stranger.send("GET / HTTP/1.1\r\n")
        #expect(stranger.line() == "ERR bad hello\n")
        let guesser = try RelayPeer(port: port)
        guesser.send("SLUICE-RELAY 1 JOIN \(nameplate)\n")
        #expect(guesser.line() == "ERR claimed\n")

        // A pair still open when the relay is told to stop: both ends see the end.
        let (a, b, _) = try RelayPeer.pair(port: port)
        #expect(relay.stop() == 0)
        #expect(a.readToEnd().isEmpty)
        #expect(b.readToEnd().isEmpty)

        let json = try #require(relay.stdoutText.split(separator: "\n").last.map(String.init))
        let object = try #require(
            try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any], "stdout: \(json)")
        #expect(object["pairs_made"] as? Int == 2)
        #expect(object["pairs_ended"] as? Int == 2)
        #expect(object["bytes_relayed"] as? Int == data.count + reply.count)
        #expect(object["nameplates_opened"] as? Int == 2)
        #expect(object["refused_bad_hello"] as? Int == 1)
        #expect(object["refused_claimed"] as? Int == 1)
        #expect(object["refused_busy"] as? Int == 0)
        #expect(object["expired"] as? Int == 0)
        #expect((object["peak_connections"] as? Int ?? 0) >= 2)
        #expect((object["seconds"] as? Double ?? 0) > 0)
        #expect(relay.stderrText.contains("relay stopped"))
    }

    /// 1,000 senders waiting on nameplates cost the relay little memory, and a real pair still
    /// pairs among them; a waiting nameplate expires with its line in the log.
    @Test func aThousandWaitingNameplatesFitIn32MiB() throws {
        #expect(testDescriptorsRaised)
        let relay = try RelayProcess([
            "--max-per-address", "2000", "--max-nameplates-per-address", "2000", "--expire", "20s",
        ])
        let port = try relay.port()
        var waiting: [RelayPeer] = []
        for _ in 0..<1000 {
            let peer = try RelayPeer(port: port, from: "127.0.0.7")
            guard peer.open() != nil else { break }
            waiting.append(peer)
        }
        #expect(waiting.count == 1000)
        let rss = try #require(residentKiB(of: relay.process.processIdentifier))
        #expect(rss <= 32 * 1024, "\(rss) KiB with 1,000 waiting nameplates")
        let (sender, receiver, _) = try RelayPeer.pair(port: port)
        sender.send("through")
        var byte = [UInt8](repeating: 0, count: 7)
        #expect(recv(receiver.fd, &byte, 7, Int32(MSG_WAITALL)) == 7 && byte == Array("through".utf8))
        waiting.removeAll()
        #expect(relay.stop(with: SIGINT) == 0)
    }

    @Test func aWaitingNameplateExpires() throws {
        let relay = try RelayProcess(["--expire", "300ms", "--stats"])
        let port = try relay.port()
        let sender = try RelayPeer(port: port)
        let nameplate = try #require(sender.open())
        #expect(sender.line() == "ERR expired\n")
        #expect(relay.waitForLine(containing: "expired nameplate \(nameplate) (127.0.0.1:"))
        #expect(relay.stop() == 0)
        #expect(relay.stderrText.contains("expired (nameplates, streams)"))
    }

    @Test func connectionsOverThePerAddressCapAreToldBusy() throws {
        let relay = try RelayProcess(["--max-per-address", "1", "-q"])
        let port = try relay.port()
        let first = try RelayPeer(port: port, from: "127.0.0.8")
        #expect(first.open() != nil)
        let second = try RelayPeer(port: port, from: "127.0.0.8")
        #expect(second.line() == "ERR busy\n")
        let other = try RelayPeer(port: port, from: "127.0.0.9")
        #expect(other.open() != nil)
        #expect(relay.stop() == 0)
        // -q: only the first line.
        #expect(relay.stderrText.split(separator: "\n").count == 1, "\(relay.stderrText)")
    }

    @Test(arguments: [
        (["--expire", "0"], "--expire '0': must be from 1ms to 7 days"),
        (["--idle", "10x"], "--idle '10x': must be a duration"),
        (["--max-connections", "0"], "--max-connections '0': must be a number of connections"),
        (["--rate-limit-total", "fast"], "--rate-limit-total 'fast': must be a positive number"),
        (["--listen", "99999"], "port '99999' is not a number"),
        (["extra"], "relay takes no operands"),
    ])
    func badOptionsAreUsageErrors(_ arguments: [String], _ message: String) throws {
        let outcome = try sluice(["relay"] + arguments)
        #expect(outcome.status == 64)
        #expect(outcome.stderrText.hasPrefix("sluice: "))
        #expect(outcome.stderrText.contains(message), "\(outcome.stderrText)")
    }

    @Test func anAddressInUseExits69() throws {
        let relay = try RelayProcess([])
        let port = try relay.port()
        let second = try sluice("relay", "--listen", "127.0.0.1:\(port)")
        #expect(second.status == 69)
        #expect(second.stderrText.contains("sluice: relay: cannot listen on 127.0.0.1:\(port): "))
        #expect(relay.stop() == 0)
    }
}
