import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// Where a `sluice relay` listens.
package struct RelayEndpoint: Hashable, Sendable, CustomStringConvertible {
    package var host: String
    package var port: UInt16

    package init(host: String, port: UInt16 = RelayHello.defaultPort) {
        self.host = host
        self.port = port
    }

    package var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// The connections two peers hold once they have met at a relay and agreed on a key: the first
/// carried the code exchange; all of them are paired end to end and carry TLS next, with
/// `key.preSharedKey`.
package struct Rendezvous {
    /// Every connection of the transfer, the code exchange's first.
    package var sockets: [BlockingSocket]
    /// The key the code gave.
    package var key: CodeKey

    /// How long the exchanges after pairing may take, unless the caller says otherwise.
    package static let exchangeTime: UInt64 = 30_000_000_000
}

/// The sender's side of meeting at a relay: it asks for a nameplate, makes a code with it, and
/// (`waitForReceiver`) waits for the receiver who types that code.
package final class SenderRendezvous {
    /// The code to show: the nameplate the relay gave and new random words.
    package let code: WordCode
    private let relay: RelayEndpoint
    private let socket: BlockingSocket
    private let password: [UInt8]

    /// Connects to `relay`, asks for a nameplate and makes a code of `wordCount` words under it
    /// (its scrypt is worked out now, while nobody waits).
    package init(relay: RelayEndpoint, wordCount: Int, deadline: UInt64) throws(SluiceError) {
        self.relay = relay
        socket = try BlockingSocket.connect(host: relay.host, port: relay.port, deadline: deadline)
        try socket.write(RelayHello.open, deadline: deadline)
        let answer = try Rendezvous.answer(from: socket, relay: relay, deadline: deadline)
        guard case .nameplate(let nameplate) = answer else {
            throw Rendezvous.unexpected(answer, relay: relay, asking: "a nameplate")
        }
        guard let made = WordCode.generate(nameplate: nameplate, wordCount: wordCount),
            let password = made.passwordScalar
        else { throw SluiceError(.unavailable, operation: "code", detail: "no random bytes, or libcrypto failed") }
        (code, self.password) = (made, password)
    }

    /// Waits (until `pairingDeadline`: the relay ends the wait sooner when the nameplate
    /// expires) for the receiver, runs the code exchange, offers `streams` connections, and
    /// pairs as many further ones as the receiver accepts, each before `deadline` counted from
    /// the pairing (`exchangeTime` by default).
    package func waitForReceiver(streams: Int, pairingDeadline: UInt64, exchangeTime: UInt64 = Rendezvous.exchangeTime)
        throws(SluiceError) -> Rendezvous
    {
        let answer = try Rendezvous.answer(from: socket, relay: relay, deadline: pairingDeadline)
        guard answer == .paired else { throw Rendezvous.unexpected(answer, relay: relay, asking: "a receiver") }
        let deadline = monotonicNanoseconds() &+ exchangeTime
        let key = try CodeHandshake.run(
            on: socket, password: password, role: .sender, context: Rendezvous.context(code.nameplate),
            deadline: deadline)
        guard let offer = ReachOffer(streams: streams), let sealed = key.seal(offer.encoded, from: .sender) else {
            throw SluiceError(.invalidArgument, operation: "offer", detail: "\(streams) connections")
        }
        try Rendezvous.writeSealed(sealed, to: socket, deadline: deadline)
        guard
            let accepted = ReachOffer.parse(
                try Rendezvous.readSealed(from: socket, key: key, by: .receiver, deadline: deadline)),
            accepted.streams <= streams
        else { throw Rendezvous.badOffer }
        var sockets = [socket]
        for index in 1..<accepted.streams {
            sockets.append(try Rendezvous.pairStream(index, key: key, relay: relay, deadline: deadline))
        }
        return Rendezvous(sockets: sockets, key: key)
    }
}

extension Rendezvous {
    /// Joins the sender waiting under `code`'s nameplate at `relay`, runs the code exchange,
    /// accepts at most `maxStreams` of the connections offered and pairs them, all before
    /// `deadline`.
    package static func join(relay: RelayEndpoint, code: WordCode, maxStreams: Int, deadline: UInt64)
        throws(SluiceError) -> Rendezvous
    {
        guard let password = code.passwordScalar else {
            throw SluiceError(.unavailable, operation: "code", detail: "libcrypto failed (out of memory?)")
        }
        let socket = try BlockingSocket.connect(host: relay.host, port: relay.port, deadline: deadline)
        try socket.write(RelayHello.join(code.nameplate), deadline: deadline)
        let answer = try Self.answer(from: socket, relay: relay, deadline: deadline)
        guard answer == .paired else {
            throw unexpected(answer, relay: relay, asking: "the sender of nameplate \(code.nameplate)")
        }
        let key = try CodeHandshake.run(
            on: socket, password: password, role: .receiver, context: context(code.nameplate), deadline: deadline)
        guard let offer = ReachOffer.parse(try readSealed(from: socket, key: key, by: .sender, deadline: deadline)),
            let accepted = ReachOffer(streams: min(offer.streams, max(1, maxStreams))),
            let sealed = key.seal(accepted.encoded, from: .receiver)
        else { throw badOffer }
        try writeSealed(sealed, to: socket, deadline: deadline)
        var sockets = [socket]
        for index in 1..<accepted.streams {
            sockets.append(try pairStream(index, key: key, relay: relay, deadline: deadline))
        }
        return Rendezvous(sockets: sockets, key: key)
    }

    /// What binds the key to this meeting: the protocol and the nameplate.
    static func context(_ nameplate: UInt32) -> [UInt8] {
        Array("sluice relay v1 nameplate \(nameplate)".utf8)
    }

    /// Pairs further connection `index` through the relay by its token.
    static func pairStream(_ index: Int, key: CodeKey, relay: RelayEndpoint, deadline: UInt64)
        throws(SluiceError) -> BlockingSocket
    {
        let socket = try BlockingSocket.connect(host: relay.host, port: relay.port, deadline: deadline)
        try socket.write(RelayHello.stream(key.streamToken(index)), deadline: deadline)
        let answer = try Self.answer(from: socket, relay: relay, deadline: deadline)
        guard answer == .paired else { throw unexpected(answer, relay: relay, asking: "connection \(index + 1)") }
        return socket
    }

    static let badOffer = SluiceError(
        .authenticationFailed, operation: "code exchange", detail: "the peer's sealed offer is not valid")

    static func writeSealed(_ sealed: [UInt8], to socket: BlockingSocket, deadline: UInt64)
        throws(SluiceError)
    {
        try socket.write([UInt8(sealed.count >> 8), UInt8(sealed.count & 0xFF)] + sealed, deadline: deadline)
    }

    /// Reads one sealed message and opens it; a length out of bounds or a message not sealed
    /// by the holder of the key is a failed exchange.
    static func readSealed(
        from socket: BlockingSocket, key: CodeKey, by role: CodeHandshake.Role, deadline: UInt64
    ) throws(SluiceError) -> [UInt8] {
        let header = try socket.read(exactly: 2, deadline: deadline)
        let length = Int(header[0]) << 8 | Int(header[1])
        guard (16...ReachOffer.maxSealed).contains(length) else { throw badOffer }
        guard let opened = key.open(try socket.read(exactly: length, deadline: deadline), from: role) else {
            throw badOffer
        }
        return opened
    }

    /// Reads the relay's answer line.
    static func answer(from socket: BlockingSocket, relay: RelayEndpoint, deadline: UInt64)
        throws(SluiceError) -> RelayHello.Answer
    {
        let line: [UInt8]
        do {
            line = try socket.readLine(limit: RelayHello.maxLine, deadline: deadline)
        } catch {
            guard error.code == .truncatedData else { throw error }
            throw SluiceError(
                .unavailable, operation: "relay", subject: relay.description, detail: "it closed the connection")
        }
        guard let answer = RelayHello.parse(answer: line) else {
            throw SluiceError(
                .protocolViolation, operation: "relay", subject: relay.description,
                detail: "not a sluice relay (an answer it does not speak)")
        }
        return answer
    }

    /// The error for an answer that is not the one waited for.
    static func unexpected(_ answer: RelayHello.Answer, relay: RelayEndpoint, asking: String) -> SluiceError {
        let subject = relay.description
        switch answer {
        case .refused(.busy):
            return SluiceError(.unavailable, operation: "relay", subject: subject, detail: "busy; try again later")
        case .refused(.expired):
            return SluiceError(
                .timedOut, operation: "relay", subject: subject, detail: "nobody came for \(asking) in time")
        case .refused(.claimed):
            return SluiceError(
                .authenticationFailed, operation: "relay", subject: subject,
                detail:
                    "someone else used the code already (a guess?); \(asking) cannot be reached with it: ask for a new code"
            )
        case .refused(.unknown):
            return SluiceError(
                .unavailable, operation: "relay", subject: subject,
                detail: "nobody waits there for \(asking) (a typo in the code, or it expired)")
        case .refused(.other(let reason)):
            return SluiceError(.protocolViolation, operation: "relay", subject: subject, detail: "refused: \(reason)")
        case .nameplate, .paired:
            return SluiceError(
                .protocolViolation, operation: "relay", subject: subject, detail: "an answer out of turn")
        }
    }
}
