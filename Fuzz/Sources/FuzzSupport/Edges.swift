@testable import Sluice
@testable import SluiceTransfer

/// The numbers at the edges of what a file's offset (`off_t`, `Int64`) and a wire field
/// (`UInt64`) hold — 2^63 - 1, 2^63 and 2^64 - 1, give or take one — put into decoded frames now
/// and then. libFuzzer rarely makes those eight bytes by itself, and a peer's number at one of
/// them is where a conversion or a sum traps; the targets move a frame's sizes, offsets,
/// lengths and counts onto them (still a frame the decoder could have made), and the protocol
/// machines must answer as for any other number.
enum Edges {
    static let values: [UInt64] = [
        UInt64(Int64.max) - 1, UInt64(Int64.max), UInt64(Int64.max) + 1, UInt64(Int64.max) + 2, .max - 1, .max,
    ]

    /// An edge value.
    static func value(_ choices: inout Choices) -> UInt64 { values[choices.below(values.count)] }

    /// `number`, or half the time an edge value.
    static func maybe(_ number: UInt64, _ choices: inout Choices) -> UInt64 {
        choices.below(2) == 0 ? value(&choices) : number
    }

    /// `frame` with some of its numbers at the edges; one in `odds` frames, others unchanged.
    static func frame(_ frame: Frame, _ choices: inout Choices, odds: Int = 8) -> Frame {
        guard choices.below(odds) == 0 else { return frame }
        switch frame {
        case .file(var header):
            // A size only where one is known: FILE says 0 otherwise.
            if header.sizeKnown { header.size = value(&choices) }
            return .file(header)
        case .range(var header):
            header.range.start = maybe(header.range.start, &choices)
            header.range.length = maybe(header.range.length, &choices)
            header.entry.size = maybe(header.entry.size, &choices)
            return .range(header)
        case .hole:
            return .hole(length: value(&choices))
        case .copy(let index, let count):
            return .copy(index: maybe(index, &choices), count: choices.below(2) == 0 ? .max : count)
        case .check(var check):
            check.size = value(&choices)
            return .check(check)
        case .end(_, let digest):
            return .end(size: value(&choices), digest: digest)
        case .rangeEnd(_, let digest, let fileDigest):
            return .rangeEnd(length: value(&choices), digest: digest, fileDigest: fileDigest)
        case .accept(_, let vouched):
            return .accept(offset: value(&choices), vouched: vouched)
        case .signatures(var batch):
            batch.size = maybe(batch.size, &choices)
            batch.first = maybe(batch.first, &choices)
            return .signatures(batch)
        case .hello, .directory, .abort, .bye, .join, .held, .link, .xattr, .owner, .prune, .gone, .token, .special,
            .batch, .joined, .stored, .refused, .failed, .have, .error, .move, .remove:
            return frame
        }
    }
}
