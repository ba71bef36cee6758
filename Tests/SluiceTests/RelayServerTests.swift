import Foundation
import TestThreads
import Testing

@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// A relay on 127.0.0.1, port 0, served on a thread of its own; `finish()` stops it and waits.
final class RelayUnderTest: @unchecked Sendable {
    let server: RelayServer
    private let logged = NSLock()
    nonisolated(unsafe) private var logLines: [String] = []
    private let done = DispatchSemaphore(value: 0)

    init(_ configure: (inout RelayOptions) -> Void = { _ in }) throws {
        var options = RelayOptions()
        options.host = "127.0.0.1"
        options.port = 0
        configure(&options)
        nonisolated(unsafe) var log: ((String) -> Void)?
        server = try RelayServer(options) { line in log?(line) }
        log = { [unowned self] line in logged.withLock { logLines.append(line) } }
        let server = self.server
        let done = self.done
        Thread.detachNewThread {
            server.run()
            done.signal()
        }
    }

    var port: UInt16 { server.address.port ?? 0 }

    /// The lines the relay logged so far.
    var lines: [String] { logged.withLock { logLines } }

    /// Stops the relay and waits for `run` to return (at most 10 s).
    @discardableResult
    func finish() -> Bool {
        server.stop()
        return done.wait(timeout: .now() + 10) == .success
    }

    /// Waits until the statistics satisfy `condition`.
    func waitFor(_ condition: (RelayStatistics) -> Bool) -> Bool {
        waitUntil { condition(server.statistics) }
    }
}

/// A client of the relay played by hand: a blocking socket from `source` to the relay, reads
/// bounded by a 10 s timeout so that a failure cannot hang the test.
final class RelayTestClient {
    let fd: Int32

    init?(port: UInt16, from source: String = "127.0.0.1") {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_addr.s_addr = inet_addr(source)
        var remote = sockaddr_in()
        remote.sin_family = sa_family_t(AF_INET)
        remote.sin_addr.s_addr = inet_addr("127.0.0.1")
        remote.sin_port = port.bigEndian
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let size = socklen_t(MemoryLayout<sockaddr_in>.size)
        let connected =
            withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, size) }
            }
            == 0
            && withUnsafePointer(to: &remote) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, size) }
            } == 0
        guard connected else {
            close(fd)
            return nil
        }
        self.fd = fd
    }

    deinit { close(fd) }

    func send(_ text: String) { send(Array(text.utf8)) }

    /// Sends all of `bytes`; false when the connection failed first.
    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { return false }
            offset += n
        }
        return true
    }

    /// One line, newline included; "" at the end of stream (or on an error or the timeout).
    func line() -> String {
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while Glibc.recv(fd, &byte, 1, 0) == 1 {
            bytes.append(byte)
            if byte == UInt8(ascii: "\n") { break }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Everything until the end of stream.
    func readToEnd() -> [UInt8] {
        var all: [UInt8] = []
        while readMore(fd, into: &all) {}
        return all
    }

    /// True when the relay closed the connection: a read sees the end (or a reset).
    func seesEnd() -> Bool {
        var byte: UInt8 = 0
        return Glibc.recv(fd, &byte, 1, 0) <= 0
    }

    func shutdownWrite() { shutdown(fd, Int32(SHUT_WR)) }

    /// `OPEN`: the nameplate the relay gave, or nil.
    func open() -> Int? {
        send("SLUICE-RELAY 1 OPEN\n")
        let reply = line()
        guard reply.hasPrefix("NAMEPLATE "), reply.hasSuffix("\n") else { return nil }
        return Int(reply.dropFirst(10).dropLast())
    }
}

/// Opens a nameplate with one client and joins it with another: both have read `PAIRED`.
func relayPair(port: UInt16) -> (RelayTestClient, RelayTestClient, Int)? {
    guard let sender = RelayTestClient(port: port), let nameplate = sender.open(),
        let receiver = RelayTestClient(port: port)
    else { return nil }
    receiver.send("SLUICE-RELAY 1 JOIN \(nameplate)\n")
    guard receiver.line() == "PAIRED\n", sender.line() == "PAIRED\n" else { return nil }
    return (sender, receiver, nameplate)
}

/// Sends `bytes` from `from` on a thread of its own (then shuts its write side down) while the
/// caller reads from `to` to the end; returns what arrived.
func relayMove(_ bytes: [UInt8], from: RelayTestClient, to: RelayTestClient) -> [UInt8] {
    let sent = DispatchSemaphore(value: 0)
    nonisolated(unsafe) let from = from
    Thread.detachNewThread {
        from.send(bytes)
        from.shutdownWrite()
        sent.signal()
    }
    let received = to.readToEnd()
    sent.wait()
    return received
}

@Suite(.ownThreads) struct RelayHelloTests {
    @Test func parsesTheThreeHellos() {
        let token = String(repeating: "0123456789abcdef", count: 4)
        #expect(RelayHello.parse(Array("SLUICE-RELAY 1 OPEN\n".utf8)) == .hello(.open, length: 20))
        #expect(RelayHello.parse(Array("SLUICE-RELAY 1 JOIN 42\n".utf8)) == .hello(.join(nameplate: 42), length: 23))
        #expect(
            RelayHello.parse(Array("SLUICE-RELAY 1 JOIN 99999\n".utf8)) == .hello(.join(nameplate: 99999), length: 26))
        let stream = Array("SLUICE-RELAY 1 STREAM \(token)\n".utf8)
        #expect(RelayHello.parse(stream) == .hello(.stream(token: token), length: stream.count))
        // Bytes past the newline are the caller's to refuse; the hello's length says where it ends.
        #expect(RelayHello.parse(Array("SLUICE-RELAY 1 OPEN\nxyz".utf8)) == .hello(.open, length: 20))
        for hello in [RelayHello.open, .join(nameplate: 7), .stream(token: token)] {
            #expect(RelayHello.parse(Array(hello.line.utf8)) == .hello(hello, length: hello.line.utf8.count))
        }
    }

    @Test func aHelloInPiecesIsIncompleteUntilItsNewline() {
        let line = Array("SLUICE-RELAY 1 JOIN 1234\n".utf8)
        for end in 0..<line.count { #expect(RelayHello.parse(line[..<end]) == .incomplete, "\(end) bytes") }
        #expect(RelayHello.parse(line) == .hello(.join(nameplate: 1234), length: line.count))
    }

    @Test(arguments: [
        "SLUICE-RELAY 2 OPEN\n", "SLUICE-RELAY 1 open\n", "SLUICE-RELAY 1 OPEN \n", "SLUICE-RELAY 1 OPEN 3\n",
        "SLUICE-RELAY 1 JOIN\n", "SLUICE-RELAY 1 JOIN 0\n", "SLUICE-RELAY 1 JOIN 007\n", "SLUICE-RELAY 1 JOIN 100000\n",
        "SLUICE-RELAY 1 JOIN -1\n", "SLUICE-RELAY 1 JOIN 12a\n", "SLUICE-RELAY 1 JOIN  12\n",
        "SLUICE-RELAY 1 JOIN 12\r\n", "SLUICE-RELAY 1 STREAM abc\n",
        "SLUICE-RELAY 1 STREAM " + String(repeating: "A", count: 64) + "\n",
        "SLUICE-RELAY 1 STREAM " + String(repeating: "a", count: 65) + "\n", "\n", "GET / HTTP/1.1\r\n",
        "SLUICE-RELAY 1 OPEN\u{e9}\n",
    ])
    func refusesWhatIsNotAHello(_ text: String) {
        #expect(RelayHello.parse(Array(text.utf8)) == .bad, "\(text.debugDescription)")
    }

    @Test func refusesGarbageAtItsFirstWrongByteAndALineTooLong() {
        #expect(RelayHello.parse([0x16, 0x03, 0x01]) == .bad)
        #expect(RelayHello.parse(Array("SLUICE-RELAY 1 JOIN ".utf8) + [UInt8](repeating: 0x31, count: 200)) == .bad)
        #expect(
            RelayHello.parse(Array("SLUICE-RELAY 1 JOIN ".utf8) + [UInt8](repeating: 0x31, count: 107)) == .incomplete)
        #expect(RelayHello.parse(Array("SLUICE-RELAY 1 JOIN ".utf8) + [UInt8](repeating: 0x31, count: 108)) == .bad)
    }
}

@Suite(.ownThreads) struct RelayRendezvousTests {
    @Test func openJoinClaimUnknownAndExpiry() {
        var random = SystemRandomNumberGenerator()
        var table = RelayRendezvous(lifetime: 100)
        let nameplate = table.open(connection: 1, now: 0, using: &random)!.nameplate
        #expect((1...99).contains(nameplate))
        #expect(table.join(nameplate: nameplate, connection: 2) == .paired(with: 1))
        #expect(table.join(nameplate: nameplate, connection: 3) == .claimed)
        let other = nameplate == 99_999 ? 1 : 99_999
        #expect(table.join(nameplate: other, connection: 4) == .unknown)
        #expect(table.expire(.nameplate(nameplate), now: 99) == .nothing)
        #expect(table.expire(.nameplate(nameplate), now: 100) == .forgotten)
        #expect(table.join(nameplate: nameplate, connection: 5) == .unknown)
        #expect(table.nameplatesInUse == 0)

        let waiting = table.open(connection: 6, now: 0, using: &random)!.nameplate
        #expect(table.expire(.nameplate(waiting), now: 200) == .waiterExpired(6))
        let left = table.open(connection: 7, now: 0, using: &random)!.nameplate
        table.leave(.nameplate(left), connection: 8)
        #expect(table.slots[.nameplate(left)] != nil, "only the waiter frees its nameplate")
        table.leave(.nameplate(left), connection: 7)
        #expect(table.join(nameplate: left, connection: 9) == .unknown)
    }

    @Test func streamsPairTwoAndRefuseAThird() {
        var table = RelayRendezvous(lifetime: 100)
        let token = String(repeating: "ab", count: 32)
        #expect(table.stream(token: token, connection: 1, now: 0) == .waiting)
        #expect(table.stream(token: token, connection: 2, now: 0) == .paired(with: 1))
        #expect(table.stream(token: token, connection: 3, now: 0) == .claimed)
        #expect(table.nameplatesInUse == 0)
    }

    @Test func nameplatesStayShortWhileFewAreInUseAndAllCanBeHandedOut() {
        var random = SystemRandomNumberGenerator()
        var table = RelayRendezvous(lifetime: 100)
        var seen = Set<Int>()
        for id in 0..<20 {
            let n = table.open(connection: UInt64(id), now: 0, using: &random)!.nameplate
            #expect(n <= 999)
            #expect(seen.insert(n).inserted)
        }
        for id in 20..<RelayHello.maximumNameplate {
            guard let n = table.open(connection: UInt64(id), now: 0, using: &random)?.nameplate, seen.insert(n).inserted
            else {
                Issue.record("no free nameplate after \(id)")
                return
            }
        }
        #expect(table.open(connection: 0, now: 0, using: &random) == nil)
    }

    /// Clients that pair with themselves and hang up, again and again (from as many addresses
    /// as they like): past the threshold the oldest burned nameplates are forgotten, so OPEN
    /// always finds one, while those still waiting are never touched.
    @Test func burnedNameplatesAreForgottenOldestFirstWhenTheyCrowd() throws {
        var random = SystemRandomNumberGenerator()
        var table = RelayRendezvous(lifetime: 1_000_000, rememberBurnedBelow: 50)
        var waiting: [Int] = []
        for id in 0..<10 {
            waiting.append(try #require(table.open(connection: UInt64(id), now: 0, using: &random)).nameplate)
        }
        var burned: [Int] = []
        var forgotten: [Int] = []
        for id in 10..<5_000 {
            let (n, dropped) = try #require(table.open(connection: UInt64(id), now: 0, using: &random))
            #expect(table.join(nameplate: n, connection: UInt64(id) + 100_000) == .paired(with: UInt64(id)))
            burned.append(n)
            for case .nameplate(let old) in dropped { forgotten.append(old) }
            #expect(table.nameplatesInUse <= 51)
        }
        #expect(forgotten == Array(burned.prefix(forgotten.count)), "the oldest first")
        #expect(forgotten.count >= 4_900)
        for (id, n) in waiting.enumerated() {
            #expect(table.join(nameplate: n, connection: 200_000) == .paired(with: UInt64(id)))
        }
        // The newest burned ones are still remembered: a late JOIN is told it was claimed.
        #expect(table.join(nameplate: try #require(burned.last), connection: 300_000) == .claimed)
    }
}

@Suite(.ownThreads) struct RelayServerTests {
    /// The heart of it: two clients paired by a nameplate, megabytes both ways at once, each
    /// direction's end passed on as a half-close while the other still flows.
    @Test func pairsAndSplicesBothWaysWithHalfClose() throws {
        let relay = try RelayUnderTest()
        defer { relay.finish() }
        guard let (sender, receiver, nameplate) = relayPair(port: relay.port) else {
            Issue.record("no pair")
            return
        }
        let forward = randomBytes(5 << 20, seed: 1)
        let backward = randomBytes(3 << 20 + 17, seed: 2)
        let back = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var backReceived: [UInt8] = []
        nonisolated(unsafe) let (s, r) = (sender, receiver)
        Thread.detachNewThread {
            backReceived = s.readToEnd()
            back.signal()
        }
        expectSameBytes(relayMove(forward, from: sender, to: receiver), forward)
        // The forward direction ended; the backward one still carries bytes.
        r.send(backward)
        r.shutdownWrite()
        back.wait()
        expectSameBytes(backReceived, backward)
        #expect(relay.waitFor { $0.pairsEnded == 1 })
        let stats = relay.server.statistics
        #expect(stats.pairsMade == 1)
        #expect(stats.bytesRelayed == UInt64(forward.count + backward.count))
        #expect(stats.nameplatesOpened == 1)
        let lines = relay.lines
        #expect(lines.contains { $0.hasPrefix("paired nameplate \(nameplate): 127.0.0.1:") })
        #expect(
            lines.contains {
                $0.hasPrefix("ended nameplate \(nameplate)") && $0.contains("\(forward.count) bytes ->")
                    && $0.contains("\(backward.count) bytes <-")
            }, "\(lines)")
    }

    @Test func aUsedNameplateIsClaimedAnUnknownOneIsUnknownAWaitingOneExpires() throws {
        let relay = try RelayUnderTest { $0.expire = .milliseconds(300) }
        defer { relay.finish() }
        guard let (_, _, nameplate) = relayPair(port: relay.port), let third = RelayTestClient(port: relay.port) else {
            Issue.record("no pair")
            return
        }
        third.send("SLUICE-RELAY 1 JOIN \(nameplate)\n")
        #expect(third.line() == "ERR claimed\n")
        #expect(third.seesEnd())

        let stranger = RelayTestClient(port: relay.port)!
        stranger.send("SLUICE-RELAY 1 JOIN \(nameplate == 99_999 ? 1 : 99_999)\n")
        #expect(stranger.line() == "ERR unknown\n")

        let lonely = RelayTestClient(port: relay.port)!
        let waiting = lonely.open()!
        #expect(lonely.line() == "ERR expired\n")
        #expect(lonely.seesEnd())
        let late = RelayTestClient(port: relay.port)!
        late.send("SLUICE-RELAY 1 JOIN \(waiting)\n")
        #expect(late.line() == "ERR unknown\n")
        let stats = relay.server.statistics
        #expect(stats.claimedRefused == 1)
        #expect(stats.unknownRefused == 2)
        #expect(stats.expired == 1)
    }

    @Test func aStreamTokenPairsTwoConnectionsAndRefusesAThird() throws {
        let relay = try RelayUnderTest()
        defer { relay.finish() }
        let hello = "SLUICE-RELAY 1 STREAM " + String(repeating: "5a", count: 32) + "\n"
        let first = RelayTestClient(port: relay.port)!
        first.send(hello)
        let second = RelayTestClient(port: relay.port)!
        second.send(hello)
        #expect(second.line() == "PAIRED\n")
        #expect(first.line() == "PAIRED\n")
        let third = RelayTestClient(port: relay.port)!
        third.send(hello)
        #expect(third.line() == "ERR claimed\n")
        let data = randomBytes(1 << 20, seed: 3)
        expectSameBytes(relayMove(data, from: second, to: first), data)
        #expect(relay.lines.contains { $0.hasPrefix("paired stream: ") })
    }

    @Test(arguments: [
        "SLUICE-RELAY 1 JOIN 0\n", "HELLO\n", "\u{16}\u{3}\u{1}", "SLUICE-RELAY 1 STREAM nothex\n",
        "SLUICE-RELAY 1 JOIN " + String(repeating: "1", count: 120),
    ])
    func aBadHelloIsRefused(_ text: String) throws {
        let relay = try RelayUnderTest()
        defer { relay.finish() }
        let client = RelayTestClient(port: relay.port)!
        client.send(text)
        #expect(client.line() == "ERR bad hello\n")
        #expect(client.seesEnd())
        #expect(relay.server.statistics.badHello == 1)
    }

    @Test func aByteBeforePairedClosesTheConnectionAndFreesItsNameplate() throws {
        let relay = try RelayUnderTest()
        defer { relay.finish() }
        let eager = RelayTestClient(port: relay.port)!
        let nameplate = eager.open()!
        eager.send("x")
        #expect(eager.seesEnd())
        let joiner = RelayTestClient(port: relay.port)!
        joiner.send("SLUICE-RELAY 1 JOIN \(nameplate)\n")
        #expect(joiner.line() == "ERR unknown\n")
        // The hello and a byte in one segment.
        let hasty = RelayTestClient(port: relay.port)!
        hasty.send("SLUICE-RELAY 1 OPEN\nx")
        #expect(hasty.seesEnd())
        #expect(relay.server.statistics.earlyBytes == 2)
    }

    @Test func silentAndHalfOpenConnectionsAreClosedAndIdlePairsCut() throws {
        let relay = try RelayUnderTest {
            $0.helloTimeout = .milliseconds(200)
            $0.idle = .milliseconds(300)
        }
        defer { relay.finish() }
        let silent = RelayTestClient(port: relay.port)!
        let partial = RelayTestClient(port: relay.port)!
        partial.send("SLUICE-RELAY 1 JO")
        let halfOpen = RelayTestClient(port: relay.port)!
        halfOpen.shutdownWrite()
        #expect(silent.seesEnd())
        #expect(partial.seesEnd())
        #expect(halfOpen.seesEnd())
        #expect(relay.server.statistics.noHello == 3)

        // A pair whose one side half-closed and whose other says nothing: cut when idle.
        guard let (sender, receiver, _) = relayPair(port: relay.port) else {
            Issue.record("no pair")
            return
        }
        sender.shutdownWrite()
        #expect(receiver.seesEnd())
        #expect(sender.seesEnd())
        #expect(relay.waitFor { $0.idleCut == 1 && $0.pairsEnded == 1 })
    }

    /// A receiver that never reads stalls its own pair only: the relay reads no more from its
    /// sender than its pipe holds, and another pair moves its bytes meanwhile.
    @Test func aClientThatNeverReadsStallsOnlyItsPair() throws {
        let relay = try RelayUnderTest()
        defer { relay.finish() }
        guard let (stuckSender, stuckReceiver, _) = relayPair(port: relay.port) else {
            Issue.record("no pair")
            return
        }
        // Fill everything between the stuck sender and its receiver: the sender's sends block.
        _ = fcntl(stuckSender.fd, F_SETFL, fcntl(stuckSender.fd, F_GETFL) | O_NONBLOCK)
        let chunk = [UInt8](repeating: 7, count: 1 << 16)
        var pushed = 0
        var blocked = false
        while pushed < 256 << 20 {
            let n = chunk.withUnsafeBytes { Glibc.send(stuckSender.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n > 0 {
                pushed += n
                continue
            }
            guard errno == EAGAIN else { break }
            // Would block: give the relay a moment's chance to make room, and see whether it did.
            var poller = pollfd(fd: stuckSender.fd, events: Int16(POLLOUT), revents: 0)
            if poll(&poller, 1, 300) == 0 {
                blocked = true
                break
            }
        }
        #expect(blocked, "the sender was never held back (\(pushed) bytes)")
        #expect(pushed < 256 << 20)
        guard let (sender, receiver, _) = relayPair(port: relay.port) else {
            Issue.record("no second pair")
            return
        }
        let data = randomBytes(2 << 20, seed: 4)
        expectSameBytes(relayMove(data, from: sender, to: receiver), data)
        // The stuck pair is still there, and what its receiver reads now is what was sent.
        var first: [UInt8] = []
        #expect(readMore(stuckReceiver.fd, into: &first))
        #expect(!first.isEmpty && first.allSatisfy { $0 == 7 })
    }

    @Test func connectionsOverTheCapsAreToldBusy() throws {
        #expect(raiseDescriptorLimit())
        let relay = try RelayUnderTest {
            $0.maxConnections = 4
            $0.maxPerAddress = 2
        }
        defer { relay.finish() }
        let a = RelayTestClient(port: relay.port, from: "127.0.0.2")!
        let b = RelayTestClient(port: relay.port, from: "127.0.0.2")!
        #expect(a.open() != nil)
        #expect(b.open() != nil)
        let c = RelayTestClient(port: relay.port, from: "127.0.0.2")!
        #expect(c.line() == "ERR busy\n")
        #expect(c.seesEnd())
        let d = RelayTestClient(port: relay.port, from: "127.0.0.3")!
        let e = RelayTestClient(port: relay.port, from: "127.0.0.4")!
        #expect(d.open() != nil)
        #expect(e.open() != nil)
        let f = RelayTestClient(port: relay.port, from: "127.0.0.5")!
        #expect(f.line() == "ERR busy\n")
        #expect(relay.server.statistics.busyRefused == 2)
        #expect(relay.server.statistics.peakConnections == 4)
    }

    /// A client that pairs with itself and hangs up, again and again, burns nameplates without
    /// holding connections: the nameplates one address holds (waiting or used) are capped too.
    @Test func oneAddressCannotBurnNameplatesWithoutEnd() throws {
        let relay = try RelayUnderTest { $0.maxKeysPerAddress = 2 }
        defer { relay.finish() }
        for _ in 0..<2 {
            let sender = RelayTestClient(port: relay.port, from: "127.0.0.10")!
            let nameplate = try #require(sender.open())
            let receiver = RelayTestClient(port: relay.port, from: "127.0.0.10")!
            receiver.send("SLUICE-RELAY 1 JOIN \(nameplate)\n")
            #expect(receiver.line() == "PAIRED\n")
            #expect(sender.line() == "PAIRED\n")
        }
        #expect(relay.waitFor { $0.pairsEnded == 2 })
        let third = RelayTestClient(port: relay.port, from: "127.0.0.10")!
        third.send("SLUICE-RELAY 1 OPEN\n")
        #expect(third.line() == "ERR busy\n")
        let other = RelayTestClient(port: relay.port, from: "127.0.0.11")!
        #expect(other.open() != nil)
    }

    /// 1,000 senders wait on nameplates; a real pair still pairs and moves its bytes.
    @Test func aThousandWaitingNameplatesDoNotStopARealPair() throws {
        #expect(raiseDescriptorLimit())
        let relay = try RelayUnderTest {
            $0.maxPerAddress = 2000
            $0.maxKeysPerAddress = 2000
        }
        defer { relay.finish() }
        var waiting: [RelayTestClient] = []
        var nameplates = Set<Int>()
        for _ in 0..<1000 {
            guard let client = RelayTestClient(port: relay.port, from: "127.0.0.6"), let n = client.open() else {
                break
            }
            waiting.append(client)
            nameplates.insert(n)
        }
        #expect(waiting.count == 1000)
        #expect(nameplates.count == 1000)
        guard let (sender, receiver, nameplate) = relayPair(port: relay.port) else {
            Issue.record("no pair")
            return
        }
        #expect(!nameplates.contains(nameplate))
        let data = randomBytes(1 << 20, seed: 5)
        expectSameBytes(relayMove(data, from: sender, to: receiver), data)
        #expect(relay.server.statistics.nameplatesOpened == 1001)
    }

    /// `--rate-limit` (each pair) and `--rate-limit-total` (the relay) both hold a pair back.
    @Test(arguments: [false, true])
    func aPairIsHeldToTheRateLimit(total: Bool) throws {
        let rate = 2 << 20
        let relay = try RelayUnderTest { options in
            if total { options.rateLimitTotal = rate } else { options.rateLimit = rate }
        }
        defer { relay.finish() }
        guard let (sender, receiver, _) = relayPair(port: relay.port) else {
            Issue.record("no pair")
            return
        }
        let data = randomBytes(1 << 20, seed: 6)
        let start = ContinuousClock.now
        expectSameBytes(relayMove(data, from: sender, to: receiver), data)
        let elapsed = ContinuousClock.now - start
        // The bucket starts with a twentieth of a second's worth and holds at most a tenth:
        // 1 MiB at 2 MiB/s takes at least 0.45 s; allow for a coarse clock.
        #expect(elapsed >= .milliseconds(400), "\(elapsed)")
    }

    @Test func stoppingCutsThePairsAndCountsThem() throws {
        let relay = try RelayUnderTest()
        guard let (sender, receiver, _) = relayPair(port: relay.port) else {
            Issue.record("no pair")
            relay.finish()
            return
        }
        sender.send("hello")
        var got: [UInt8] = []
        while got.count < 5 && readMore(receiver.fd, into: &got) {}
        #expect(got == Array("hello".utf8))
        #expect(relay.finish())
        #expect(sender.seesEnd())
        #expect(receiver.seesEnd())
        let stats = relay.server.statistics
        #expect(stats.pairsEnded == 1)
        #expect(stats.bytesRelayed == 5)
    }
}

/// Records an issue unless `received` is `expected`, without a diff of megabytes in the failure
/// (Swift Testing would compute one, for minutes, and print it): the counts, and where they
/// first differ.
func expectSameBytes(_ received: [UInt8], _ expected: [UInt8]) {
    if received == expected { return }
    let first =
        zip(received, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
        ?? min(received.count, expected.count)
    Issue.record("\(received.count) bytes received, \(expected.count) expected; first difference at \(first)")
}

/// Raises this process's open-file limit to its hard limit (the relay tests hold thousands of
/// sockets at both ends).
func raiseDescriptorLimit() -> Bool {
    var limit = rlimit()
    guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return false }
    limit.rlim_cur = limit.rlim_max
    return setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 && limit.rlim_cur >= 4096
}
