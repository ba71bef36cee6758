import Sluice

/// What a client of `sluice relay` says and hears before it is paired (the relay protocol,
/// version 1; sluice(1), RELAY): one hello line out, one answer line in, then nothing until
/// `PAIRED`. The relay learns a nameplate or a token, never a peer's address or a secret.
package enum RelayHello {
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

/// The one message each side seals with the code's key before TLS starts: how many
/// connections the transfer takes. The sender offers, the receiver answers with what it
/// accepts (at most what was offered).
package struct ReachOffer: Equatable, Sendable {
    /// This version of the message.
    static let version: UInt8 = 1
    /// The most connections an offer may name.
    package static let maxStreams = 64
    /// The most bytes a sealed message may take on the wire.
    package static let maxSealed = 256

    /// Connections for the transfer: 1 to `maxStreams`.
    package var streams: Int

    package init?(streams: Int) {
        guard (1...Self.maxStreams).contains(streams) else { return nil }
        self.streams = streams
    }

    /// The message's bytes.
    package var encoded: [UInt8] { [Self.version, UInt8(streams)] }

    /// Parses a message; nil for any other version, length or count out of range. A pure
    /// function of the peer's bytes (which only the holder of the code could seal).
    package static func parse(_ bytes: [UInt8]) -> ReachOffer? {
        guard bytes.count == 2, bytes[0] == version else { return nil }
        return ReachOffer(streams: Int(bytes[1]))
    }
}
