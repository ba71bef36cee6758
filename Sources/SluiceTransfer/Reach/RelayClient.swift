import Sluice

/// What a client of `sluice relay` says and hears before it is paired (the relay protocol,
/// version 1; sluice(1), RELAY): one hello line out, one answer line in, then nothing until
/// `PAIRED`. The relay learns a nameplate or a token, never a peer's address or a secret.
package enum RelayClient {
    /// The relay's port when an address names none.
    package static let defaultPort: UInt16 = 9009
    /// The longest line either side sends, newline included.
    package static let maxLine = 128

    /// The sender's request for a nameplate.
    package static let open = Array("SLUICE-RELAY 1 OPEN\n".utf8)

    /// The receiver's request to be paired with the sender waiting under `nameplate`.
    package static func join(_ nameplate: UInt32) -> [UInt8] {
        Array("SLUICE-RELAY 1 JOIN \(nameplate)\n".utf8)
    }

    /// A further connection of a transfer, paired with the peer's that shows the same token.
    package static func stream(_ token: String) -> [UInt8] {
        Array("SLUICE-RELAY 1 STREAM \(token)\n".utf8)
    }

    /// An answer of the relay.
    package enum Answer: Equatable, Sendable {
        /// `NAMEPLATE n`: the sender's nameplate, waiting for a receiver.
        case nameplate(UInt32)
        /// `PAIRED`: from now on the bytes are the peer's.
        case paired
        /// `ERR reason`: the relay refused, and closes.
        case refused(Refusal)
    }

    /// Why the relay refused.
    package enum Refusal: Equatable, Sendable {
        /// `busy`: too many connections (from this address, or in all), or no nameplate free.
        case busy
        /// `expired`: nobody joined the nameplate (or token) in its time.
        case expired
        /// `claimed`: someone joined this nameplate (or token) already.
        case claimed
        /// `unknown`: no sender waits under this nameplate.
        case unknown
        /// `bad hello`, or a reason this version does not know (kept, sanitized, for the message).
        case other(String)
    }

    /// Parses one answer line (without its newline); nil when it is none of the answers. A pure
    /// function of the relay's bytes.
    package static func parse(answer line: [UInt8]) -> Answer? {
        guard line.count < maxLine, line.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else { return nil }
        let text = String(decoding: line, as: UTF8.self)
        if text == "PAIRED" { return .paired }
        if text.hasPrefix("NAMEPLATE ") {
            let digits = text.dropFirst("NAMEPLATE ".count)
            guard (1...5).contains(digits.count), digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                let value = UInt32(digits), (1...WordCode.maxNameplate).contains(value)
            else { return nil }
            return .nameplate(value)
        }
        if text.hasPrefix("ERR ") {
            let reason = String(text.dropFirst(4))
            switch reason {
            case "busy": return .refused(.busy)
            case "expired": return .refused(.expired)
            case "claimed": return .refused(.claimed)
            case "unknown": return .refused(.unknown)
            default: return .refused(.other(reason))
            }
        }
        return nil
    }
}

/// The message the sender seals with the code's key before TLS starts: how many connections
/// it would use, whether the relay may carry them, and where the receiver may reach it
/// directly. Sealed, so nothing of it (the addresses least of all) reaches the relay.
package struct ReachOffer: Equatable, Sendable {
    /// This version of the message.
    static let version: UInt8 = 1
    /// The most connections an offer may name.
    package static let maxStreams = 64
    /// The most addresses an offer carries.
    package static let maxAddresses = 16
    /// The most bytes a sealed message may take on the wire.
    package static let maxSealed = 512

    /// Connections for the transfer: 1 to `maxStreams`.
    package var streams: Int
    /// False with the sender's `--no-relay`: direct, or not at all.
    package var relayAllowed: Bool
    /// False with the sender's `--no-direct`: it neither listens nor dials.
    package var directAllowed: Bool
    /// Where the sender listens for a direct connection (none with `--no-direct`).
    package var addresses: [SocketAddress]

    package init?(
        streams: Int, relayAllowed: Bool = true, directAllowed: Bool = true, addresses: [SocketAddress] = []
    ) {
        guard (1...Self.maxStreams).contains(streams), addresses.count <= Self.maxAddresses,
            addresses.allSatisfy({ $0.addressBytes != nil && $0.port != nil })
        else { return nil }
        (self.streams, self.relayAllowed, self.directAllowed) = (streams, relayAllowed, directAllowed)
        self.addresses = addresses
    }

    /// The message's bytes: version, streams, flags (1: relay allowed, 2: direct allowed), then
    /// the addresses (`encode(_:)`).
    package var encoded: [UInt8] {
        [Self.version, UInt8(streams), (relayAllowed ? 1 : 0) | (directAllowed ? 2 : 0)] + Self.encode(addresses)
    }

    /// Parses a message; nil for any other version, a count or length out of range, or bytes
    /// left over. A pure function of the peer's bytes (which only the holder of the code could
    /// seal).
    package static func parse(_ bytes: [UInt8]) -> ReachOffer? {
        guard bytes.count >= 4, bytes[0] == version, bytes[2] <= 3, let addresses = addresses(bytes, from: 3) else {
            return nil
        }
        return ReachOffer(
            streams: Int(bytes[1]), relayAllowed: bytes[2] & 1 != 0, directAllowed: bytes[2] & 2 != 0,
            addresses: addresses)
    }

    /// A list of addresses: its count, then each as its length (4 or 16), its bytes and its
    /// port (big-endian).
    static func encode(_ addresses: [SocketAddress]) -> [UInt8] {
        var out: [UInt8] = [UInt8(addresses.count)]
        for address in addresses {
            let raw = address.addressBytes ?? []
            let port = address.port ?? 0
            out += [UInt8(raw.count)] + raw + [UInt8(port >> 8), UInt8(port & 0xFF)]
        }
        return out
    }

    /// The list of addresses at `start`, which must run to the end of `bytes`; nil for a count
    /// over `maxAddresses`, a length or port out of range, or bytes left over.
    static func addresses(_ bytes: [UInt8], from start: Int) -> [SocketAddress]? {
        guard start < bytes.count, Int(bytes[start]) <= maxAddresses else { return nil }
        var addresses: [SocketAddress] = []
        var at = start + 1
        for _ in 0..<Int(bytes[start]) {
            guard at < bytes.count else { return nil }
            let length = Int(bytes[at])
            guard length == 4 || length == 16, at + 1 + length + 2 <= bytes.count else { return nil }
            let raw = Array(bytes[(at + 1)..<(at + 1 + length)])
            let port = UInt16(bytes[at + 1 + length]) << 8 | UInt16(bytes[at + 2 + length])
            guard port != 0, let address = SocketAddress(addressBytes: raw, port: port) else { return nil }
            addresses.append(address)
            at += 1 + length + 2
        }
        return at == bytes.count ? addresses : nil
    }
}

/// The receiver's sealed answer to a `ReachOffer`, and the sender's sealed decision after a
/// `reverse` answer: how many connections (at most those offered) and which way they go.
package struct ReachAnswer: Equatable, Sendable {
    /// Which way the transfer's connections go.
    package enum Route: UInt8, Sendable {
        /// Direct: the dialer reached the other side's door.
        case direct = 1
        /// Through the relay.
        case relay = 2
        /// Neither: no direct connection, and the relay is not allowed (`--no-relay`).
        case none = 3
        /// The receiver could not reach the sender: the sender is to try the receiver's
        /// `addresses`, then decide (an answer only).
        case reverse = 4
    }

    package var streams: Int
    package var route: Route
    /// False with the receiver's `--no-relay`.
    package var relayAllowed: Bool
    /// With `reverse`: where the receiver listens.
    package var addresses: [SocketAddress]

    package init?(streams: Int, route: Route, relayAllowed: Bool = true, addresses: [SocketAddress] = []) {
        guard (1...ReachOffer.maxStreams).contains(streams), addresses.count <= ReachOffer.maxAddresses,
            addresses.allSatisfy({ $0.addressBytes != nil && $0.port != nil })
        else { return nil }
        (self.streams, self.route, self.relayAllowed, self.addresses) = (streams, route, relayAllowed, addresses)
    }

    /// The message's bytes: version, streams, route, flags (1: relay allowed), addresses.
    package var encoded: [UInt8] {
        [ReachOffer.version, UInt8(streams), route.rawValue, relayAllowed ? 1 : 0] + ReachOffer.encode(addresses)
    }

    /// Parses an answer; nil for any other version, a count, route or length out of range.
    package static func parse(_ bytes: [UInt8]) -> ReachAnswer? {
        guard bytes.count >= 5, bytes[0] == ReachOffer.version, let route = Route(rawValue: bytes[2]), bytes[3] <= 1,
            let addresses = ReachOffer.addresses(bytes, from: 4)
        else { return nil }
        return ReachAnswer(streams: Int(bytes[1]), route: route, relayAllowed: bytes[3] == 1, addresses: addresses)
    }
}
