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
        let key = try Rendezvous.exchange(
            on: socket, password: password, role: .sender, context: Rendezvous.context(code.nameplate),
            deadline: deadline)
        // The door for a direct connection: only once the code is confirmed, and its addresses
        // only inside the sealed offer.
        let door = routes.direct ? try? BlockingListener() : nil
        let addresses = door.map {
            Array(SocketAddress.interfaceAddresses(port: $0.port).prefix(ReachOffer.maxAddresses))
        }
        guard
            let offer = ReachOffer(
                streams: streams, relayAllowed: routes.relay, directAllowed: routes.direct, addresses: addresses ?? []),
            let sealed = key.seal(offer.encoded, from: .sender)
        else { throw SluiceError(.invalidArgument, operation: "offer", detail: "\(streams) connections") }
        try Rendezvous.writeSealed(sealed, to: socket, deadline: deadline)
        // While the receiver tries the door, its answer comes through the relay.
        let direct = try Rendezvous.waitAtDoor(door, answerOn: socket, key: key, dialer: .receiver, deadline: deadline)
        guard
            let accepted = ReachAnswer.parse(
                try Rendezvous.readSealed(from: socket, key: key, by: .receiver, deadline: deadline)),
            accepted.streams <= streams
        else { throw Rendezvous.badOffer }
        switch accepted.route {
        case .direct:
            guard let direct, let door else { throw Rendezvous.badOffer }
            let sockets = try Rendezvous.admitRest(
                door, first: direct, count: accepted.streams, key: key, deadline: deadline)
            return Rendezvous(sockets: sockets, key: key, direct: true)
        case .relay:
            guard routes.relay else { throw Rendezvous.badOffer }
            return try Rendezvous.pairRest(socket, count: accepted.streams, key: key, relay: relay, deadline: deadline)
        case .none:
            throw Rendezvous.noRoute
        case .reverse:
            // The receiver could not reach this host: this host tries the receiver's door, and
            // says (sealed) which way it went.
            guard routes.direct else { throw Rendezvous.badOffer }
            let window = min(deadline, monotonicNanoseconds() &+ routes.directWindow)
            let reached = Rendezvous.reach(accepted.addresses, key: key, dialer: .sender, deadline: window)
            let route: ReachAnswer.Route =
                reached != nil ? .direct : routes.relay && accepted.relayAllowed ? .relay : .none
            guard let decision = ReachAnswer(streams: accepted.streams, route: route),
                let sealed = key.seal(decision.encoded, from: .sender, number: 1)
            else { throw Rendezvous.badOffer }
            try Rendezvous.writeSealed(sealed, to: socket, deadline: deadline)
            switch (route, reached) {
            case (.direct, let reached?):
                let sockets = try Rendezvous.dialRest(
                    reached, count: accepted.streams, key: key, dialer: .sender, deadline: deadline)
                return Rendezvous(sockets: sockets, key: key, direct: true)
            case (.relay, _):
                return try Rendezvous.pairRest(
                    socket, count: accepted.streams, key: key, relay: relay, deadline: deadline)
            default:
                throw Rendezvous.noRoute
            }
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
        // scrypt runs while the relay is reached and the sender found. Whatever happens, it
        // has ended when this returns: a process that exits on an error while scrypt runs in
        // libcrypto has its atexit clean-up free what scrypt uses (a crash).
        let pending = code.beginPasswordScalar()
        defer { _ = pending.wait() }
        let socket = try BlockingSocket.connect(host: relay.host, port: relay.port, deadline: deadline)
        try socket.write(RelayClient.join(code.nameplate), deadline: deadline)
        let answer = try Self.answer(from: socket, relay: relay, deadline: deadline)
        guard answer == .paired else {
            throw unexpected(answer, relay: relay, asking: "the sender of nameplate \(code.nameplate)")
        }
        guard let password = pending.wait() else { throw Self.scryptFailed }
        let key = try Rendezvous.exchange(
            on: socket, password: password, role: .receiver, context: context(code.nameplate), deadline: deadline)
        guard let offer = ReachOffer.parse(try readSealed(from: socket, key: key, by: .sender, deadline: deadline))
        else { throw badOffer }
        let streams = min(offer.streams, max(1, maxStreams))
        let relayAllowed = routes.relay && offer.relayAllowed
        var direct: (socket: BlockingSocket, address: SocketAddress)?
        if routes.direct && !offer.addresses.isEmpty {
            direct = reach(
                offer.addresses, key: key, dialer: .receiver,
                deadline: min(deadline, monotonicNanoseconds() &+ routes.directWindow))
        }
        if let direct {
            try sendAnswer(ReachAnswer(streams: streams, route: .direct), on: socket, key: key, deadline: deadline)
            let sockets = try dialRest(direct, count: streams, key: key, dialer: .receiver, deadline: deadline)
            return Rendezvous(sockets: sockets, key: key, direct: true)
        }
        guard routes.direct, offer.directAllowed, let door = try? BlockingListener() else {
            try sendAnswer(
                ReachAnswer(streams: streams, route: relayAllowed ? .relay : .none), on: socket, key: key,
                deadline: deadline)
            guard relayAllowed else { throw noRoute }
            return try pairRest(socket, count: streams, key: key, relay: relay, deadline: deadline)
        }
        // This host could not reach the sender: it opens a door of its own and lets the sender
        // try it (the addresses sealed), then follows the sender's decision.
        let addresses = Array(SocketAddress.interfaceAddresses(port: door.port).prefix(ReachOffer.maxAddresses))
        try sendAnswer(
            ReachAnswer(streams: streams, route: .reverse, relayAllowed: relayAllowed, addresses: addresses),
            on: socket,
            key: key, deadline: deadline)
        let admitted = try waitAtDoor(door, answerOn: socket, key: key, dialer: .sender, deadline: deadline)
        guard
            let decision = ReachAnswer.parse(
                try readSealed(from: socket, key: key, by: .sender, number: 1, deadline: deadline)),
            decision.streams == streams
        else { throw badOffer }
        switch (decision.route, admitted) {
        case (.direct, let admitted?):
            let sockets = try admitRest(
                door, first: admitted, count: streams, key: key, dialer: .sender, deadline: deadline)
            return Rendezvous(sockets: sockets, key: key, direct: true)
        case (.relay, _) where relayAllowed:
            return try pairRest(socket, count: streams, key: key, relay: relay, deadline: deadline)
        case (.none, _):
            throw noRoute
        default:
            throw badOffer
        }
    }

    /// libcrypto could not stretch the code (it failed to allocate scrypt's memory).
    static var scryptFailed: SluiceError {
        SluiceError(.unavailable, operation: "code", detail: "libcrypto failed (out of memory?)")
    }

    /// Seals `message` (nil: out of range) as the receiver's answer and writes it.
    private static func sendAnswer(_ message: ReachAnswer?, on socket: BlockingSocket, key: CodeKey, deadline: UInt64)
        throws(SluiceError)
    {
        guard let message, let sealed = key.seal(message.encoded, from: .receiver) else { throw badOffer }
        try writeSealed(sealed, to: socket, deadline: deadline)
    }

    /// Until the peer's next message is on `socket`, admits (`admit`) the first connection at
    /// `door` that proves to be `dialer`'s connection 0 (strangers before it are closed). Once
    /// it is in, the door is left alone: the peer's next connections may come before its
    /// message does (the direct way is the shorter), and are admitted after it.
    static func waitAtDoor(
        _ door: BlockingListener?, answerOn socket: BlockingSocket, key: CodeKey, dialer: CodeHandshake.Role,
        deadline: UInt64
    ) throws(SluiceError) -> BlockingSocket? {
        var admitted: BlockingSocket?
        while true {
            let watching = admitted == nil ? door : nil
            let ready = try BlockingSocket.readable(
                [socket.descriptor] + (watching.map { [$0.descriptor] } ?? []), deadline: deadline)
            if ready[0] { return admitted }
            guard ready.contains(true) else {
                throw SluiceError(.timedOut, operation: "code exchange", detail: "no answer from the peer")
            }
            if let watching { admitted = admit(watching, key: key, index: 0, dialer: dialer, deadline: deadline) }
        }
    }

    /// `first`, then the peer's connections 1 to `count - 1` as they prove themselves at `door`.
    static func admitRest(
        _ door: BlockingListener, first: BlockingSocket, count: Int, key: CodeKey,
        dialer: CodeHandshake.Role = .receiver, deadline: UInt64
    ) throws(SluiceError) -> [BlockingSocket] {
        var sockets = [first]
        while sockets.count < count {
            guard try BlockingSocket.readable([door.descriptor], deadline: deadline)[0] else {
                throw SluiceError(.timedOut, operation: "direct", detail: "the peer's connections did not come")
            }
            if let more = admit(door, key: key, index: sockets.count, dialer: dialer, deadline: deadline) {
                sockets.append(more)
            }
        }
        return sockets
    }

    /// `first`, then connections 1 to `count - 1` made to the same address, each proved.
    static func dialRest(
        _ first: (socket: BlockingSocket, address: SocketAddress), count: Int, key: CodeKey,
        dialer: CodeHandshake.Role, deadline: UInt64
    ) throws(SluiceError) -> [BlockingSocket] {
        var sockets = [first.socket]
        for index in 1..<count {
            guard let more = reach([first.address], key: key, index: index, dialer: dialer, deadline: deadline) else {
                throw SluiceError(
                    .unavailable, operation: "direct", subject: first.address.description,
                    detail: "connection \(index + 1) could not be made")
            }
            sockets.append(more.socket)
        }
        return sockets
    }

    /// `socket` (the relay connection the code went over), then connections 1 to `count - 1`
    /// paired at the relay.
    static func pairRest(_ socket: BlockingSocket, count: Int, key: CodeKey, relay: RelayEndpoint, deadline: UInt64)
        throws(SluiceError) -> Rendezvous
    {
        var sockets = [socket]
        for index in 1..<count {
            sockets.append(try pairStream(index, key: key, relay: relay, deadline: deadline))
        }
        return Rendezvous(sockets: sockets, key: key, direct: false)
    }

    static let noRoute = SluiceError(
        .unavailable, operation: "direct",
        detail: "no direct connection could be made, and --no-relay keeps the transfer off the relay")

    /// The first of `addresses` that connects and proves to be the peer's door (connection
    /// `index`'s proofs, each way: `dialer`'s first) before `deadline`.
    static func reach(
        _ addresses: [SocketAddress], key: CodeKey, index: Int = 0, dialer: CodeHandshake.Role = .receiver,
        deadline: UInt64
    ) -> (socket: BlockingSocket, address: SocketAddress)? {
        let door: CodeHandshake.Role = dialer == .sender ? .receiver : .sender
        var untried = addresses
        // The first to connect is tried first; if it is not the peer, the others again.
        while !untried.isEmpty && monotonicNanoseconds() < deadline {
            let connected = BlockingSocket.connectAll(untried, deadline: deadline)
            guard !connected.isEmpty else { return nil }
            for socket in connected {
                untried.removeAll { $0.description == socket.name }
                let proven = Result { () throws(SluiceError) -> Bool in
                    try socket.write(key.proof(from: dialer, index: index), deadline: deadline)
                    return key.checks(try socket.read(exactly: 32, deadline: deadline), from: door, index: index)
                }
                guard case .success(true) = proven,
                    let address = addresses.first(where: { $0.description == socket.name })
                else { continue }
                return (socket, address)
            }
        }
        return nil
    }

    /// A connection at `door` that proves to be `dialer`'s connection `index` (answered with
    /// this side's proof); nil for anyone else, who is closed.
    static func admit(
        _ door: BlockingListener, key: CodeKey, index: Int, dialer: CodeHandshake.Role = .receiver, deadline: UInt64
    ) -> BlockingSocket? {
        let holder: CodeHandshake.Role = dialer == .sender ? .receiver : .sender
        guard let socket = door.accept() else { return nil }
        // A stranger at the door gets a second at most, not the exchange's whole time.
        let soon = min(deadline, monotonicNanoseconds() &+ 1_000_000_000)
        let proven = Result { () throws(SluiceError) -> Bool in
            guard key.checks(try socket.read(exactly: 32, deadline: soon), from: dialer, index: index) else {
                return false
            }
            try socket.write(key.proof(from: holder, index: index), deadline: soon)
            return true
        }
        guard case .success(true) = proven else { return nil }
        return socket
    }

    /// The code exchange on a connection paired at the relay: whoever joined the nameplate spent
    /// it, so a peer that sent no share there is as good as a wrong guess (`.authenticationFailed`).
    static func exchange(
        on socket: BlockingSocket, password: [UInt8], role: CodeHandshake.Role, context: [UInt8], deadline: UInt64
    ) throws(SluiceError) -> CodeKey {
        do {
            return try CodeHandshake.run(
                on: socket, password: password, role: role, context: context, deadline: deadline)
        } catch {
            guard error.code == .protocolViolation else { throw error }
            throw SluiceError(
                .authenticationFailed, operation: error.operation,
                detail: (error.detail ?? "") + "; the nameplate is spent (a guess?): ask for a new code")
        }
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
        from socket: BlockingSocket, key: CodeKey, by role: CodeHandshake.Role, number: Int = 0, deadline: UInt64
    ) throws(SluiceError) -> [UInt8] {
        let header = try socket.read(exactly: 2, deadline: deadline)
        let length = Int(header[0]) << 8 | Int(header[1])
        guard (16...ReachOffer.maxSealed).contains(length) else { throw badOffer }
        guard let opened = key.open(try socket.read(exactly: length, deadline: deadline), from: role, number: number)
        else {
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
