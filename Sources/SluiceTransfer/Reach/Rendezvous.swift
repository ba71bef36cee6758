import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// Where a `sluice relay` listens.
package struct RelayEndpoint: Hashable, Sendable, CustomStringConvertible {
    package var host: String
    package var port: UInt16

    package init(host: String, port: UInt16 = RelayClient.defaultPort) {
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
    /// Whether the connections go directly between the peers (else through the relay).
    package var direct: Bool

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
        try socket.write(RelayClient.open, deadline: deadline)
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
    /// expires) for the receiver, runs the code exchange, offers `streams` connections and, as
    /// `routes` allows, a direct way to this host; then takes the connections the receiver
    /// accepts, the way it chose: direct ones it makes to this host, or pairs at the relay.
    /// Each step after the pairing before `exchangeTime` has passed.
    package func waitForReceiver(
        streams: Int, routes: ReachRoutes = ReachRoutes(), pairingDeadline: UInt64,
        exchangeTime: UInt64 = Rendezvous.exchangeTime
    ) throws(SluiceError) -> Rendezvous {
        let answer = try Rendezvous.answer(from: socket, relay: relay, deadline: pairingDeadline)
        guard answer == .paired else { throw Rendezvous.unexpected(answer, relay: relay, asking: "a receiver") }
        let deadline = monotonicNanoseconds() &+ exchangeTime
        let key = try CodeHandshake.run(
            on: socket, password: password, role: .sender, context: Rendezvous.context(code.nameplate),
            deadline: deadline)
        // The door for a direct connection: only once the code is confirmed, and its addresses
        // only inside the sealed offer.
        let door = routes.direct ? try? BlockingListener() : nil
        let addresses = door.map {
            Array(SocketAddress.interfaceAddresses(port: $0.port).prefix(ReachOffer.maxAddresses))
        }
        guard let offer = ReachOffer(streams: streams, relayAllowed: routes.relay, addresses: addresses ?? []),
            let sealed = key.seal(offer.encoded, from: .sender)
        else { throw SluiceError(.invalidArgument, operation: "offer", detail: "\(streams) connections") }
        try Rendezvous.writeSealed(sealed, to: socket, deadline: deadline)
        // While the receiver tries the door, its answer comes through the relay.
        var direct: BlockingSocket?
        while true {
            let ready = try BlockingSocket.readable(
                [socket.descriptor] + (door.map { [$0.descriptor] } ?? []), deadline: deadline)
            if ready[0] { break }
            if ready.count > 1, ready[1], let door {
                if direct == nil {
                    direct = Rendezvous.admit(door, key: key, index: 0, deadline: deadline)
                } else {
                    _ = door.accept()  // the receiver has its way in: anyone else is closed
                }
            }
            guard ready.contains(true) else {
                throw SluiceError(.timedOut, operation: "code exchange", detail: "no answer from the receiver")
            }
        }
        guard
            let accepted = ReachAnswer.parse(
                try Rendezvous.readSealed(from: socket, key: key, by: .receiver, deadline: deadline)),
            accepted.streams <= streams
        else { throw Rendezvous.badOffer }
        switch accepted.route {
        case .direct:
            guard let direct, let door else { throw Rendezvous.badOffer }
            var sockets = [direct]
            while sockets.count < accepted.streams {
                let ready = try BlockingSocket.readable([door.descriptor], deadline: deadline)
                guard ready[0] else {
                    throw SluiceError(.timedOut, operation: "direct", detail: "the receiver's connections did not come")
                }
                if let more = Rendezvous.admit(door, key: key, index: sockets.count, deadline: deadline) {
                    sockets.append(more)
                }
            }
            return Rendezvous(sockets: sockets, key: key, direct: true)
        case .relay:
            guard routes.relay else { throw Rendezvous.badOffer }
            var sockets = [socket]
            for index in 1..<accepted.streams {
                sockets.append(try Rendezvous.pairStream(index, key: key, relay: relay, deadline: deadline))
            }
            return Rendezvous(sockets: sockets, key: key, direct: false)
        case .none:
            throw Rendezvous.noRoute
        }
    }
}

/// Which ways a transfer's connections may go once the peers have met.
package struct ReachRoutes: Sendable {
    /// Try a direct connection first (not with `--no-direct`).
    package var direct = true
    /// Fall back to the relay (not with `--no-relay`).
    package var relay = true
    /// How long the receiver tries the sender's addresses.
    package var directWindow: UInt64 = 2_000_000_000

    package init(direct: Bool = true, relay: Bool = true) {
        (self.direct, self.relay) = (direct, relay)
    }
}

extension Rendezvous {
    /// Joins the sender waiting under `code`'s nameplate at `relay`, runs the code exchange,
    /// accepts at most `maxStreams` of the connections offered, tries the sender's addresses
    /// as `routes` allows, and makes them, direct or paired at the relay, all before
    /// `deadline`.
    package static func join(
        relay: RelayEndpoint, code: WordCode, maxStreams: Int, routes: ReachRoutes = ReachRoutes(), deadline: UInt64
    ) throws(SluiceError) -> Rendezvous {
        guard let password = code.passwordScalar else {
            throw SluiceError(.unavailable, operation: "code", detail: "libcrypto failed (out of memory?)")
        }
        let socket = try BlockingSocket.connect(host: relay.host, port: relay.port, deadline: deadline)
        try socket.write(RelayClient.join(code.nameplate), deadline: deadline)
        let answer = try Self.answer(from: socket, relay: relay, deadline: deadline)
        guard answer == .paired else {
            throw unexpected(answer, relay: relay, asking: "the sender of nameplate \(code.nameplate)")
        }
        let key = try CodeHandshake.run(
            on: socket, password: password, role: .receiver, context: context(code.nameplate), deadline: deadline)
        guard let offer = ReachOffer.parse(try readSealed(from: socket, key: key, by: .sender, deadline: deadline))
        else { throw badOffer }
        let streams = min(offer.streams, max(1, maxStreams))
        var direct: (socket: BlockingSocket, address: SocketAddress)?
        if routes.direct && !offer.addresses.isEmpty {
            direct = reach(
                offer.addresses, key: key, deadline: min(deadline, monotonicNanoseconds() &+ routes.directWindow))
        }
        let route: ReachAnswer.Route = direct != nil ? .direct : routes.relay && offer.relayAllowed ? .relay : .none
        guard let accepted = ReachAnswer(streams: streams, route: route),
            let sealed = key.seal(accepted.encoded, from: .receiver)
        else { throw badOffer }
        try writeSealed(sealed, to: socket, deadline: deadline)
        switch route {
        case .direct:
            guard let direct else { throw badOffer }
            var sockets = [direct.socket]
            for index in 1..<streams {
                guard let more = reach([direct.address], key: key, index: index, deadline: deadline) else {
                    throw SluiceError(
                        .unavailable, operation: "direct", subject: direct.address.description,
                        detail: "connection \(index + 1) could not be made")
                }
                sockets.append(more.socket)
            }
            return Rendezvous(sockets: sockets, key: key, direct: true)
        case .relay:
            var sockets = [socket]
            for index in 1..<streams {
                sockets.append(try pairStream(index, key: key, relay: relay, deadline: deadline))
            }
            return Rendezvous(sockets: sockets, key: key, direct: false)
        case .none:
            throw noRoute
        }
    }

    static let noRoute = SluiceError(
        .unavailable, operation: "direct",
        detail: "no direct connection could be made, and --no-relay keeps the transfer off the relay")

    /// The first of `addresses` that connects and proves to be the sender (connection
    /// `index`'s proofs, each way) before `deadline`.
    static func reach(_ addresses: [SocketAddress], key: CodeKey, index: Int = 0, deadline: UInt64) -> (
        socket: BlockingSocket, address: SocketAddress
    )? {
        for socket in BlockingSocket.connectAll(addresses, deadline: deadline) {
            let proven = Result { () throws(SluiceError) -> Bool in
                try socket.write(key.proof(from: .receiver, index: index), deadline: deadline)
                return key.checks(try socket.read(exactly: 32, deadline: deadline), from: .sender, index: index)
            }
            guard case .success(true) = proven,
                let address = addresses.first(where: { $0.description == socket.name })
            else { continue }
            return (socket, address)
        }
        return nil
    }

    /// A connection at the sender's door that proves to be the receiver's connection `index`
    /// (answered with the sender's proof); nil for anyone else, who is closed.
    static func admit(_ door: BlockingListener, key: CodeKey, index: Int, deadline: UInt64) -> BlockingSocket? {
        guard let socket = door.accept() else { return nil }
        // A stranger at the door gets a second at most, not the exchange's whole time.
        let soon = min(deadline, monotonicNanoseconds() &+ 1_000_000_000)
        let proven = Result { () throws(SluiceError) -> Bool in
            guard key.checks(try socket.read(exactly: 32, deadline: soon), from: .receiver, index: index) else {
                return false
            }
            try socket.write(key.proof(from: .sender, index: index), deadline: soon)
            return true
        }
        guard case .success(true) = proven else { return nil }
        return socket
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
        try socket.write(RelayClient.stream(key.streamToken(index)), deadline: deadline)
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
        throws(SluiceError) -> RelayClient.Answer
    {
        let line: [UInt8]
        do {
            line = try socket.readLine(limit: RelayClient.maxLine, deadline: deadline)
        } catch {
            guard error.code == .truncatedData else { throw error }
            throw SluiceError(
                .unavailable, operation: "relay", subject: relay.description, detail: "it closed the connection")
        }
        guard let answer = RelayClient.parse(answer: line) else {
            throw SluiceError(
                .protocolViolation, operation: "relay", subject: relay.description,
                detail: "not a sluice relay (an answer it does not speak)")
        }
        return answer
    }

    /// The error for an answer that is not the one waited for.
    static func unexpected(_ answer: RelayClient.Answer, relay: RelayEndpoint, asking: String) -> SluiceError {
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
