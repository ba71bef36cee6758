import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// Meeting on one network with no server at all: a sender with no relay announces its
/// nameplate and the port it listens on in UDP broadcasts (`SLUICE-ANNOUNCE 1 NAMEPLATE PORT`,
/// nothing secret: the words never leave either side), and `receive CODE` waits for the
/// announcement of its nameplate and connects to where it came from. The code exchange that
/// follows decides whether it found the right sender.
package enum LocalAnnounce {
    /// The UDP port announcements go to unless told otherwise (`--lan-port`).
    package static let defaultPort: UInt16 = 9009
    /// How often the sender announces.
    package static let interval: UInt64 = 500_000_000
    /// The longest announcement.
    static let maxBytes = 64

    /// An announcement's bytes.
    package static func message(nameplate: UInt32, port: UInt16) -> [UInt8] {
        Array("SLUICE-ANNOUNCE 1 \(nameplate) \(port)\n".utf8)
    }

    /// Parses an announcement: its nameplate and TCP port, or nil. A pure function of a
    /// stranger's datagram.
    package static func parse(_ bytes: [UInt8]) -> (nameplate: UInt32, port: UInt16)? {
        guard bytes.count <= maxBytes, bytes.last == UInt8(ascii: "\n") else { return nil }
        let fields = bytes.dropLast().split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false)
        guard fields.count == 4, Array(fields[0]) == Array("SLUICE-ANNOUNCE".utf8), Array(fields[1]) == [0x31],
            let nameplate = number(fields[2], digits: 5), (1...WordCode.maxNameplate).contains(nameplate),
            let port = number(fields[3], digits: 5), (1...65535).contains(port)
        else { return nil }
        return (nameplate, UInt16(port))
    }

    private static func number(_ field: ArraySlice<UInt8>, digits: Int) -> UInt32? {
        guard (1...digits).contains(field.count), field.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return field.reduce(0) { $0 * 10 + UInt32($1 - 0x30) }
    }

    /// A UDP socket for announcements over IPv4 (`ipv6` false) or IPv6: bound to `port` to
    /// hear them (several receivers may share it; the IPv6 one takes IPv6 only, beside the
    /// IPv4 one), or unbound, with broadcast allowed, to send them.
    static func socket(hearing port: UInt16?, ipv6: Bool = false) throws(SluiceError) -> Int32 {
        let type = Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        let fd = try syscallValue("socket", "announcements") { Glibc.socket(ipv6 ? AF_INET6 : AF_INET, type, 0) }
        var on: Int32 = 1
        let size = socklen_t(MemoryLayout<Int32>.size)
        if ipv6 {
            _ = setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &on, size)
        } else {
            _ = setsockopt(fd, SOL_SOCKET, SO_BROADCAST, &on, size)
        }
        guard let port else { return fd }
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, size)
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, size)
        let any = SocketAddress(numericHost: ipv6 ? "::" : "0.0.0.0", port: port)
        let bound = (try? any?.withSockAddr { sa, length throws(SluiceError) -> Int32 in bind(fd, sa, length) }) ?? -1
        guard bound == 0 else {
            let error = SluiceError(.system(.current), operation: "bind", subject: "UDP port \(port) (announcements)")
            close(fd)
            throw error
        }
        return fd
    }

    /// Sends `message` on `port` to each local IPv4 network's broadcast address, to
    /// 255.255.255.255 and to this host (a receiver on the same machine hears it even where
    /// broadcasts do not come back) from `fd`, and to every IPv6 link's nodes (ff02::1 on each
    /// interface) from `fd6` when there is one.
    static func send(_ message: [UInt8], from fd: Int32, ipv6 fd6: Int32?, to port: UInt16) {
        let everyone = ["255.255.255.255", "127.0.0.1"].compactMap { SocketAddress(numericHost: $0, port: port) }
        var targets = (SocketAddress.broadcastAddresses(port: port) + everyone).map { (fd, $0) }
        if let fd6 { targets += SocketAddress.linkAllNodesAddresses(port: port).map { (fd6, $0) } }
        for (socket, address) in targets {
            _ = try? address.withSockAddr { sa, length throws(SluiceError) -> Int in
                message.withUnsafeBytes { sendto(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), sa, length) }
            }
        }
    }

    /// Waits (until `deadline`) for the announcement of `nameplate` on `port`, over IPv4 or
    /// IPv6 (where this host has it); the address it came from with the port it names (a
    /// link-local IPv6 one with its interface).
    package static func find(nameplate: UInt32, port: UInt16, deadline: UInt64) throws(SluiceError) -> SocketAddress {
        var sockets = [try socket(hearing: port)]
        if let fd6 = try? socket(hearing: port, ipv6: true) { sockets.append(fd6) }
        defer { sockets.forEach { close($0) } }
        var buffer = [UInt8](repeating: 0, count: maxBytes + 1)
        while true {
            let ready = try BlockingSocket.readable(sockets, deadline: deadline)
            guard ready.contains(true) else {
                throw SluiceError(
                    .timedOut, operation: "find", subject: "nameplate \(nameplate)",
                    detail: "no sender announced it on this network (for one elsewhere, give --relay)")
            }
            for (fd, isReady) in zip(sockets, ready) where isReady {
                var from = sockaddr_storage()
                var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
                let n = withUnsafeMutablePointer(to: &from) { pointer in
                    pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                        buffer.withUnsafeMutableBytes { recvfrom(fd, $0.baseAddress, $0.count, 0, sa, &length) }
                    }
                }
                guard n > 0, let heard = parse(Array(buffer[0..<n])), heard.nameplate == nameplate else { continue }
                let sender = withUnsafePointer(to: &from) { SocketAddress(sockaddr: $0, length: length) }
                if let address = sender?.replacingPort(heard.port) { return address }
            }
        }
    }
}

extension SenderRendezvous {
    /// `send` with no relay: a nameplate of its own, a door on every interface, and
    /// announcements on the local network until the receiver comes through the door with the
    /// code (`waitForLocalReceiver`).
    package static func local(wordCount: Int, announcePort: UInt16) throws(SluiceError) -> LocalSender {
        let door = try BlockingListener()
        let fd = try LocalAnnounce.socket(hearing: nil)
        let fd6 = try? LocalAnnounce.socket(hearing: nil, ipv6: true)
        guard let code = WordCode.generate(nameplate: UInt32.random(in: 1...9999), wordCount: wordCount),
            let password = code.passwordScalar
        else {
            close(fd)
            fd6.map { _ = close($0) }
            throw SluiceError(.unavailable, operation: "code", detail: "no random bytes, or libcrypto failed")
        }
        return LocalSender(
            code: code, password: password, door: door, announcers: (fd, fd6), port: announcePort)
    }
}

/// The sender's side of meeting on the local network (`SenderRendezvous.local`).
package final class LocalSender {
    /// The code to show.
    package let code: WordCode
    private let password: [UInt8]
    private let door: BlockingListener
    /// The sockets announcements go out of: IPv4, and IPv6 where this host has it.
    private let announcers: (ipv4: Int32, ipv6: Int32?)
    private let port: UInt16

    init(code: WordCode, password: [UInt8], door: BlockingListener, announcers: (Int32, Int32?), port: UInt16) {
        (self.code, self.password, self.door, self.announcers, self.port) = (code, password, door, announcers, port)
    }

    deinit {
        close(announcers.ipv4)
        announcers.ipv6.map { _ = close($0) }
    }

    /// Announces until a receiver comes through the door (until `pairingDeadline`), runs the
    /// code exchange with it (the first to come has the one guess), offers `streams`
    /// connections and takes as many as it accepts, all direct.
    package func waitForReceiver(streams: Int, pairingDeadline: UInt64, exchangeTime: UInt64 = Rendezvous.exchangeTime)
        throws(SluiceError) -> Rendezvous
    {
        let announcement = LocalAnnounce.message(nameplate: code.nameplate, port: door.port)
        var met: (socket: BlockingSocket, key: CodeKey)?
        while met == nil {
            LocalAnnounce.send(announcement, from: announcers.ipv4, ipv6: announcers.ipv6, to: port)
            let next = min(pairingDeadline, monotonicNanoseconds() &+ LocalAnnounce.interval)
            if try BlockingSocket.readable([door.descriptor], deadline: next)[0], let socket = door.accept() {
                // Anyone may come to the door: one who sends no share (a probe, a scanner, a
                // silent connection, given 5 s) made no guess, and the announcing goes on; one
                // who sends a share has the one guess.
                let attempt = min(monotonicNanoseconds() &+ exchangeTime, monotonicNanoseconds() &+ 5_000_000_000)
                do {
                    let key = try CodeHandshake.run(
                        on: socket, password: password, role: .sender,
                        context: Rendezvous.localContext(code.nameplate), deadline: attempt)
                    met = (socket, key)
                } catch {
                    guard error.code == .protocolViolation else { throw error }
                }
            } else if monotonicNanoseconds() >= pairingDeadline {
                throw SluiceError(.timedOut, operation: "announce", detail: "no receiver came for the code")
            }
        }
        guard let (socket, key) = met else { throw SluiceError(.cancelled, operation: "announce") }
        let deadline = monotonicNanoseconds() &+ exchangeTime
        guard let offer = ReachOffer(streams: streams, relayAllowed: false),
            let sealed = key.seal(offer.encoded, from: .sender)
        else { throw SluiceError(.invalidArgument, operation: "offer", detail: "\(streams) connections") }
        try Rendezvous.writeSealed(sealed, to: socket, deadline: deadline)
        guard
            let accepted = ReachAnswer.parse(
                try Rendezvous.readSealed(from: socket, key: key, by: .receiver, deadline: deadline)),
            accepted.streams <= streams, accepted.route == .direct
        else { throw Rendezvous.badOffer }
        var sockets = [socket]
        while sockets.count < accepted.streams {
            guard try BlockingSocket.readable([door.descriptor], deadline: deadline)[0] else {
                throw SluiceError(.timedOut, operation: "direct", detail: "the receiver's connections did not come")
            }
            if let more = Rendezvous.admit(door, key: key, index: sockets.count, deadline: deadline) {
                sockets.append(more)
            }
        }
        return Rendezvous(sockets: sockets, key: key, direct: true)
    }
}

extension Rendezvous {
    /// What binds a key made on the local network: the protocol and the nameplate (another
    /// context than a relay's, so a code cannot be replayed from one to the other).
    static func localContext(_ nameplate: UInt32) -> [UInt8] {
        Array("sluice local v1 nameplate \(nameplate)".utf8)
    }

    /// `receive CODE` with no relay: finds the sender's announcement of the code's nameplate on
    /// `announcePort`, connects to it, runs the code exchange, and makes as many of the offered
    /// connections as it takes (at most `maxStreams`), all before `deadline`.
    package static func findLocal(code: WordCode, announcePort: UInt16, maxStreams: Int, deadline: UInt64)
        throws(SluiceError) -> Rendezvous
    {
        // scrypt runs while the sender's announcement is awaited and its door reached; it has
        // ended when this returns, on an error too (see `join`).
        let pending = code.beginPasswordScalar()
        defer { _ = pending.wait() }
        let address = try LocalAnnounce.find(nameplate: code.nameplate, port: announcePort, deadline: deadline)
        guard let socket = BlockingSocket.connectAll([address], deadline: deadline).first else {
            throw SluiceError(
                .unavailable, operation: "connect", subject: address.description, detail: "the sender announced it")
        }
        guard let password = pending.wait() else { throw scryptFailed }
        let key = try CodeHandshake.run(
            on: socket, password: password, role: .receiver, context: localContext(code.nameplate), deadline: deadline)
        guard let offer = ReachOffer.parse(try readSealed(from: socket, key: key, by: .sender, deadline: deadline)),
            let accepted = ReachAnswer(streams: min(offer.streams, max(1, maxStreams)), route: .direct),
            let sealed = key.seal(accepted.encoded, from: .receiver)
        else { throw badOffer }
        try writeSealed(sealed, to: socket, deadline: deadline)
        var sockets = [socket]
        for index in 1..<accepted.streams {
            guard let more = reach([address], key: key, index: index, deadline: deadline) else {
                throw SluiceError(
                    .unavailable, operation: "direct", subject: address.description,
                    detail: "connection \(index + 1) could not be made")
            }
            sockets.append(more.socket)
        }
        return Rendezvous(sockets: sockets, key: key, direct: true)
    }
}
