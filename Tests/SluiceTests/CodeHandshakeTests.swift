import Dispatch
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// The code exchange (SPAKE2, then key confirmation) over real connected sockets, between two
/// honest sides and against played peers that lie, stall or leave; the key it gives, and what
/// a relay answers and a peer seals before TLS.
@Suite("Code handshake", .serialized, .ownThreads) struct CodeHandshakeTests {
    static let right = [UInt8](repeating: 0x11, count: 32)
    static let wrong = [UInt8](repeating: 0x22, count: 32)
    static let context = Array("sluice relay v1 nameplate 7".utf8)

    /// Two connected sockets (a Unix stream pair: the same code as TCP's for these calls).
    static func socketPair() throws -> (BlockingSocket, BlockingSocket) {
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
        return (try BlockingSocket(adopting: fds[0], name: "a"), try BlockingSocket(adopting: fds[1], name: "b"))
    }

    static func soon(_ seconds: Double = 10) -> UInt64 { monotonicNanoseconds() + UInt64(seconds * 1e9) }

    /// Runs `body` on another thread; `wait()` gives its result.
    final class Side<T: Sendable>: @unchecked Sendable {
        private var result: Result<T, SluiceError>?
        private let done = DispatchSemaphore(value: 0)

        init(_ body: @escaping @Sendable () throws(SluiceError) -> T) {
            DispatchQueue.global().async { [self] in
                result = Result(catching: body)
                done.signal()
            }
        }

        func wait() -> Result<T, SluiceError> {
            done.wait()
            return result ?? .failure(SluiceError(.cancelled, operation: "test"))
        }
    }

    static func exchange(_ senderPassword: [UInt8], _ receiverPassword: [UInt8]) throws -> (
        Result<CodeKey, SluiceError>, Result<CodeKey, SluiceError>
    ) {
        let (a, b) = try socketPair()
        let sendingSide = HandOver(a)
        let other = Side { () throws(SluiceError) in
            try CodeHandshake.run(
                on: sendingSide.take(), password: senderPassword, role: .sender, context: context, deadline: soon())
        }
        let mine = Result { () throws(SluiceError) in
            try CodeHandshake.run(
                on: b, password: receiverPassword, role: .receiver, context: context, deadline: soon())
        }
        return (other.wait(), mine)
    }

    @Test func theSameCodeGivesBothSidesTheSameKey() throws {
        let (sender, receiver) = try Self.exchange(Self.right, Self.right)
        let a = try sender.get()
        let b = try receiver.get()
        #expect(a.preSharedKey == b.preSharedKey)
        #expect(a.streamToken(1) == b.streamToken(1))
        #expect(a.streamToken(1) != a.streamToken(2))
        #expect(a.streamToken(1).count == 64)
        // A second exchange with the same code gives another key (fresh secrets each time).
        let (again, _) = try Self.exchange(Self.right, Self.right)
        #expect(try again.get().preSharedKey != a.preSharedKey)
    }

    @Test func aWrongCodeFailsBothSides() throws {
        let (sender, receiver) = try Self.exchange(Self.right, Self.wrong)
        for side in [sender, receiver] {
            guard case .failure(let error) = side else {
                Issue.record("a wrong code gave a key")
                continue
            }
            #expect(error.code == .authenticationFailed)
            #expect(error.reason.contains("the code is wrong, or someone tried to guess it"))
        }
    }

    @Test func aCodeFromAWordCodeAgreesOnlyUnderItsNameplate() throws {
        let code = try WordCode.parse("7-acorn-tulip-pumice").get()
        let sameWords = try WordCode.parse("8-acorn-tulip-pumice").get()
        let w = try #require(code.passwordScalar)
        #expect(try Self.exchange(w, w).0.get().preSharedKey.key.count == 32)
        #expect(sameWords.passwordScalar != w)
    }

    /// A played peer: reads the honest side's hello, writes `message`, then ends its side; the
    /// honest side must fail and send nothing more than `answered` bytes (its confirmation, when
    /// it got as far as sending one) after its hello (magic and share).
    func playedPeer(sends message: [UInt8], answered: Int = 0) throws -> SluiceError? {
        let box: HandOver<BlockingSocket>
        let played: BlockingSocket
        do {
            let (honest, other) = try Self.socketPair()
            (box, played) = (HandOver(honest), other)
        }
        let side = Side { () throws(SluiceError) in
            // The socket goes (closed) with this closure's scope: after the exchange, as in use.
            try CodeHandshake.run(
                on: box.take(), password: Self.right, role: .receiver, context: Self.context, deadline: Self.soon())
        }
        let hello = try played.read(exactly: CodeHandshake.magic.count + SPAKE2.shareBytes, deadline: Self.soon())
        #expect(Array(hello.prefix(CodeHandshake.magic.count)) == CodeHandshake.magic)
        try played.write(message, deadline: Self.soon())
        let fd = played.takeDescriptor()
        shutdown(fd, Int32(SHUT_WR))
        let reader = try BlockingSocket(adopting: fd, name: "played")
        guard case .failure(let error) = side.wait() else { return nil }
        // The honest side said nothing more: its socket is closed after its hello.
        var after: [UInt8] = []
        while let byte = try? reader.read(exactly: 1, deadline: Self.soon()) { after += byte }
        #expect(after.count == answered, "the honest side sent \(after.count) bytes after its hello")
        return error
    }

    @Test func aShareOffTheCurveIsRefused() throws {
        let off = [4] + [UInt8](repeating: 1, count: 64)
        let error = try playedPeer(sends: CodeHandshake.magic + off)
        #expect(error?.code == .authenticationFailed)
        #expect(error?.reason.contains("not a point of the curve") == true)
    }

    @Test func theIdentityAndOtherEncodingsAreRefused() throws {
        // The identity's encoding (0x00) padded to a share's length, and a compressed point.
        for share in [[UInt8](repeating: 0, count: 65), [2] + [UInt8](repeating: 3, count: 64)] {
            let error = try playedPeer(sends: CodeHandshake.magic + share)
            #expect(error?.code == .authenticationFailed)
        }
    }

    @Test func aPeerOfAnotherProtocolIsToldApart() throws {
        // Not a guess: it never sent a share (a relay's side makes it one; a door does not).
        let error = try playedPeer(sends: Array("GET / HTTP/1.1\r\n".utf8) + [UInt8](repeating: 4, count: 65))
        #expect(error?.code == .protocolViolation)
        #expect(error?.reason.contains("does not speak") == true)
    }

    @Test func aTamperedShareFailsAtTheConfirmation() throws {
        // A real share for another password, then a confirmation of 32 random-looking bytes.
        let liar = try SPAKE2(
            role: .a, password: Self.wrong, identityA: Array("sluice sender".utf8),
            identityB: Array("sluice receiver".utf8), additionalData: Self.context)
        let error = try playedPeer(
            sends: CodeHandshake.magic + liar.share + [UInt8](repeating: 0x5A, count: SPAKE2.confirmationBytes),
            answered: SPAKE2.confirmationBytes)
        #expect(error?.code == .authenticationFailed)
        #expect(error?.reason.contains("the code is wrong") == true)
    }

    @Test func aPeerThatLeavesMidwayFails() throws {
        // Before its share is whole: no guess made.
        let early = try playedPeer(sends: CodeHandshake.magic + [4, 4, 4])
        #expect(early?.code == .protocolViolation)
        #expect(early?.reason.contains("sent no share") == true)
        // After its share, before its confirmation: it may have been a guess.
        let liar = try SPAKE2(
            role: .a, password: Self.wrong, identityA: Array("sluice sender".utf8),
            identityB: Array("sluice receiver".utf8), additionalData: Self.context)
        let late = try playedPeer(sends: CodeHandshake.magic + liar.share, answered: SPAKE2.confirmationBytes)
        #expect(late?.code == .authenticationFailed)
        #expect(late?.reason.contains("left before") == true)
    }

    @Test func aPeerThatNeverAnswersTimesOut() throws {
        let (honest, played) = try Self.socketPair()
        let started = monotonicNanoseconds()
        let result = Result { () throws(SluiceError) in
            try CodeHandshake.run(
                on: honest, password: Self.right, role: .sender, context: Self.context, deadline: Self.soon(0.2))
        }
        guard case .failure(let error) = result else {
            Issue.record("a silent peer gave a key")
            return
        }
        #expect(error.code == .protocolViolation)
        #expect(monotonicNanoseconds() - started < 5_000_000_000)
        _ = played
    }

    @Test func aProbeAtTheLocalDoorIsNoGuessAndTheReceiverStillGetsIn() throws {
        let port = try #require(freePort(SOCK_DGRAM))
        let sender = try SenderRendezvous.local(wordCount: 3, announcePort: port)
        let code = sender.code
        let box = HandOver(sender)
        let waiting = Side { () throws(SluiceError) -> Int in
            try box.take().waitForReceiver(streams: 2, pairingDeadline: Self.soon(20)).sockets.count
        }
        // A stranger who heard the announcement: connects, says nothing of use, and leaves.
        let door = try LocalAnnounce.find(nameplate: code.nameplate, port: port, deadline: Self.soon())
        let probe = try #require(BlockingSocket.connectAll([door], deadline: Self.soon()).first)
        try probe.write(Array("GET / HTTP/1.0\r\n\r\n".utf8), deadline: Self.soon())
        close(probe.takeDescriptor())
        // Another that waits for the sender's share, then resets the connection (unread bytes,
        // no linger): the sender's read fails with ECONNRESET, and that is no guess either.
        let rude = try #require(BlockingSocket.connectAll([door], deadline: Self.soon()).first)
        #expect(try BlockingSocket.readable([rude.descriptor], deadline: Self.soon())[0])
        var abort = linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(rude.descriptor, SOL_SOCKET, SO_LINGER, &abort, socklen_t(MemoryLayout<linger>.size))
        close(rude.takeDescriptor())
        // The receiver with the code gets in, with both connections.
        let met = try Rendezvous.findLocal(code: code, announcePort: port, maxStreams: 4, deadline: Self.soon(20))
        #expect(met.sockets.count == 2)
        #expect(met.direct)
        #expect(try waiting.wait().get() == 2)
    }

    @Test func theSendersDoorAdmitsOnlyAConnectionThatProvesTheKey() throws {
        let key = CodeKey(secret: [UInt8](repeating: 5, count: 16))
        let door = try BlockingListener()
        let here = try #require(SocketAddress(numericHost: "127.0.0.1", port: door.port))
        // A stranger: 32 bytes that are not the proof; closed without an answer.
        let stranger = try #require(BlockingSocket.connectAll([here], deadline: Self.soon()).first)
        try stranger.write([UInt8](repeating: 0x42, count: 32), deadline: Self.soon())
        #expect(try BlockingSocket.readable([door.descriptor], deadline: Self.soon())[0])
        #expect(Rendezvous.admit(door, key: key, index: 0, deadline: Self.soon()) == nil)
        #expect(throws: SluiceError.self) { try stranger.read(exactly: 1, deadline: Self.soon()) }
        // A proof for another connection's index is no proof for this one.
        let wrongIndex = try #require(BlockingSocket.connectAll([here], deadline: Self.soon()).first)
        try wrongIndex.write(key.proof(from: .receiver, index: 1), deadline: Self.soon())
        #expect(Rendezvous.admit(door, key: key, index: 0, deadline: Self.soon()) == nil)
        // The receiver: its proof, answered with the sender's, which it checks.
        let box = HandOver(key)
        let reached = Side { () throws(SluiceError) -> Bool in
            Rendezvous.reach([here], key: box.take(), index: 2, deadline: Self.soon()) != nil
        }
        #expect(try BlockingSocket.readable([door.descriptor], deadline: Self.soon())[0])
        #expect(Rendezvous.admit(door, key: key, index: 2, deadline: Self.soon()) != nil)
        #expect(try reached.wait().get())
        // A receiver with another key is turned away, and hears nothing back.
        let liar = Side { () throws(SluiceError) -> Bool in
            Rendezvous.reach([here], key: CodeKey(secret: [UInt8](repeating: 6, count: 16)), deadline: Self.soon())
                != nil
        }
        #expect(try BlockingSocket.readable([door.descriptor], deadline: Self.soon())[0])
        #expect(Rendezvous.admit(door, key: key, index: 0, deadline: Self.soon()) == nil)
        #expect(try liar.wait().get() == false)
    }

    @Test func aSealedMessageOpensOnlyWithItsKeyAndRole() throws {
        let key = CodeKey(secret: [UInt8](repeating: 3, count: 16))
        let offer = try #require(ReachOffer(streams: 4))
        let sealed = try #require(key.seal(offer.encoded, from: .sender))
        #expect(sealed.count == offer.encoded.count + 16)
        #expect(key.open(sealed, from: .sender) == offer.encoded)
        #expect(key.open(sealed, from: .receiver) == nil)
        // Each message its own key: the second the sender seals is not the first.
        #expect(key.open(sealed, from: .sender, number: 1) == nil)
        #expect(key.seal(offer.encoded, from: .sender, number: 1) != sealed)
        #expect(CodeKey(secret: [UInt8](repeating: 4, count: 16)).open(sealed, from: .sender) == nil)
        for index in sealed.indices {
            var flipped = sealed
            flipped[index] ^= 1
            #expect(key.open(flipped, from: .sender) == nil, "a flipped bit at \(index) opened")
        }
        #expect(key.open(Array(sealed.prefix(15)), from: .sender) == nil)
    }

    @Test func relayAnswersAndOffersParse() throws {
        #expect(RelayClient.parse(answer: Array("PAIRED".utf8)) == .paired)
        #expect(RelayClient.parse(answer: Array("NAMEPLATE 42".utf8)) == .nameplate(42))
        #expect(RelayClient.parse(answer: Array("NAMEPLATE 99999".utf8)) == .nameplate(99_999))
        for bad in [
            "NAMEPLATE 0", "NAMEPLATE 100000", "NAMEPLATE -1", "NAMEPLATE +4", "NAMEPLATE ", "paired", "", "PAIRED ",
        ] {
            #expect(RelayClient.parse(answer: Array(bad.utf8)) == nil, "\(bad)")
        }
        #expect(RelayClient.parse(answer: Array("ERR claimed".utf8)) == .refused(.claimed))
        #expect(RelayClient.parse(answer: Array("ERR busy".utf8)) == .refused(.busy))
        #expect(RelayClient.parse(answer: Array("ERR expired".utf8)) == .refused(.expired))
        #expect(RelayClient.parse(answer: Array("ERR unknown".utf8)) == .refused(.unknown))
        #expect(RelayClient.parse(answer: Array("ERR bad hello".utf8)) == .refused(.other("bad hello")))
        #expect(RelayClient.parse(answer: Array("ERR \u{1B}[2J".utf8)) == nil)
        #expect(RelayClient.join(42) == Array("SLUICE-RELAY 1 JOIN 42\n".utf8))
        #expect(ReachOffer.parse([1, 3, 3, 0]) == ReachOffer(streams: 3))
        for bad: [UInt8] in [
            [1, 0, 3, 0], [1, 65, 3, 0], [2, 3, 3, 0], [1, 3, 4, 0], [1, 3, 3], [1, 3, 3, 1], [1, 3, 3, 17], [],
        ] {
            #expect(ReachOffer.parse(bad) == nil, "\(bad)")
        }
        // Addresses: 4 or 16 bytes and a port, exactly; anything left over is refused.
        let v4 = try #require(SocketAddress(numericHost: "192.0.2.7", port: 4242))
        let v6 = try #require(SocketAddress(numericHost: "2001:db8::9", port: 80))
        let offer = try #require(ReachOffer(streams: 2, relayAllowed: false, addresses: [v4, v6]))
        #expect(ReachOffer.parse(offer.encoded) == offer)
        #expect(ReachOffer.parse(offer.encoded + [0]) == nil)
        #expect(ReachOffer.parse(Array(offer.encoded.dropLast())) == nil)
        var zeroPort = offer.encoded
        zeroPort[4 + 1 + 4] = 0
        zeroPort[4 + 1 + 4 + 1] = 0
        #expect(ReachOffer.parse(zeroPort) == nil)
        #expect(ReachAnswer.parse([1, 2, 1, 1, 0]) == ReachAnswer(streams: 2, route: .direct))
        for bad: [UInt8] in [
            [1, 2, 0, 1, 0], [1, 2, 5, 1, 0], [1, 0, 1, 1, 0], [2, 2, 1, 1, 0], [1, 2, 1, 2, 0], [1, 2, 1, 1],
        ] {
            #expect(ReachAnswer.parse(bad) == nil, "\(bad)")
        }
        let reverse = try #require(ReachAnswer(streams: 3, route: .reverse, relayAllowed: false, addresses: [v6, v4]))
        #expect(ReachAnswer.parse(reverse.encoded) == reverse)
        #expect(ReachOffer.parse([1, 3, 3, 0]) == ReachOffer(streams: 3, relayAllowed: true, directAllowed: true))
        #expect(ReachOffer.parse([1, 3, 0, 0]) == ReachOffer(streams: 3, relayAllowed: false, directAllowed: false))
        // A stranger's datagram: an announcement, exactly.
        let heard = try #require(LocalAnnounce.parse(LocalAnnounce.message(nameplate: 4821, port: 40000)))
        #expect(heard.nameplate == 4821 && heard.port == 40000)
        for bad in [
            "SLUICE-ANNOUNCE 1 4821 40000", "SLUICE-ANNOUNCE 2 4821 40000\n", "SLUICE-ANNOUNCE 1 0 40000\n",
            "SLUICE-ANNOUNCE 1 4821 70000\n", "SLUICE-ANNOUNCE 1 4821  40000\n", "SLUICE-ANNOUNCE 1 +4821 40000\n",
        ] {
            #expect(LocalAnnounce.parse(Array(bad.utf8)) == nil, "\(bad)")
        }
    }
}

/// Hands a non-Sendable value to another thread in a test, once: `take()` moves it out.
final class HandOver<T>: @unchecked Sendable {
    private var value: T?
    init(_ value: T) { self.value = value }

    func take() -> T {
        defer { value = nil }
        guard let value else { fatalError("taken twice") }
        return value
    }
}
