import Foundation
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// The rsync algorithm's parts: block sizes, the rolling checksum, and the match rebuilding the
/// new file from the old one, on real files.
@Suite("Delta: the rsync algorithm", .ownThreads)
struct DeltaTests {
    /// Rebuilds the sender's file from `ops` and the basis, as the receiver does.
    static func rebuild(_ ops: [DeltaOp], new: [UInt8], basis: [UInt8], blockSize: Int) -> [UInt8] {
        var out: [UInt8] = []
        for op in ops {
            switch op {
            case .literal(let offset, let length): out += new[Int(offset)..<Int(offset + length)]
            case .copy(let index, let count):
                let start = Int(index) * blockSize
                out += basis[start..<min(basis.count, start + Int(count) * blockSize)]
            }
        }
        return out
    }

    /// The match of `new` against `basis` (from `start`, its digest of the whole file or of the
    /// bytes from `start` as `wholeDigest` says, which it checks): the operations, what they
    /// rebuild, and the block size.
    static func match(
        new: [UInt8], basis: [UInt8], in root: String, from start: Int = 0, wholeDigest: Bool = true
    ) throws -> ([DeltaOp], [UInt8], Int) {
        try writeFile(root + "/basis", basis)
        try writeFile(root + "/new", new)
        let basisFD = open(root + "/basis", O_RDONLY)
        let newFD = open(root + "/new", O_RDONLY)
        defer {
            close(basisFD)
            close(newFD)
        }
        let blockSize = Delta.blockSize(forBasis: UInt64(basis.count))
        let count = Int(Delta.blockCount(UInt64(basis.count), blockSize))
        let signatures = try #require(
            Delta.signatures(of: basisFD, size: UInt64(basis.count), blockSize: blockSize, first: 0, count: count))
        var table = DeltaBasis(blockSize: blockSize, size: UInt64(basis.count))
        table.add(signatures)
        let (ops, digest) = try #require(
            DeltaMatcher.match(
                fd: newFD, size: UInt64(new.count), from: UInt64(start), wholeDigest: wholeDigest, basis: table,
                digest: .sha256))
        #expect(digest == SHA256Digest.hash(wholeDigest ? new : Array(new[start...])), "from \(start)")
        return (ops, try #require(rebuild(ops, new: new, basis: basis, blockSize: blockSize) as [UInt8]?), blockSize)
    }

    @Test("Block sizes follow rsync's rule; the rolling checksum equals the checksum of the moved window")
    func blockSizesAndRolling() {
        #expect(Delta.blockSize(forBasis: 1000) == 700)
        #expect(Delta.blockSize(forBasis: 1 << 30) == 32768)
        #expect(Delta.blockSize(forBasis: 1 << 40) == 128 << 10)
        let bytes = randomBytes(5000, seed: 3)
        bytes.withUnsafeBytes { raw in
            var sum = Delta.weak(UnsafeRawBufferPointer(rebasing: raw[0..<700]))
            for start in 1..<2000 {
                sum = Delta.roll(sum, out: raw[start - 1], in: raw[start + 699], length: 700)
                #expect(sum == Delta.weak(UnsafeRawBufferPointer(rebasing: raw[start..<start + 700])))
            }
        }
    }

    @Test("The rolling checksum is rsync's, byte by byte, whatever the length: what an older peer computes")
    func weakChecksumIsTheDefinition() {
        // `a` the sum of the bytes, `b` the sum of each running `a`, both modulo 2^16: one byte
        // at a time, as the checksum is defined, against the one computed in vector lanes.
        func definition(_ bytes: ArraySlice<UInt8>) -> UInt32 {
            var (a, b): (UInt32, UInt32) = (0, 0)
            for byte in bytes {
                a &+= UInt32(byte)
                b &+= a
            }
            return (a & 0xFFFF) | (b & 0xFFFF) << 16
        }
        let random = randomBytes(70_000, seed: 17)
        let ones = [UInt8](repeating: 0xFF, count: 70_000)
        for bytes in [random, ones] {
            for length in Array(0...70) + [700, 4095, 32768, 65536, 65537] {
                for offset in [0, 3] {
                    let slice = bytes[offset..<offset + length]
                    let weak = slice.withUnsafeBytes { Delta.weak($0) }
                    #expect(weak == definition(slice), "length \(length) at \(offset)")
                }
            }
        }
    }

    @Test("Changes in place, an insertion, a deletion, a grown and a shrunk file rebuild exactly")
    func matchRebuilds() throws {
        try withTemporaryDirectory { root in
            let basis = randomBytes(3 << 20, seed: 1)
            var inPlace = basis
            for offset in stride(from: 4096, to: inPlace.count, by: 700_001) { inPlace[offset] ^= 0xFF }
            let inserted = Array(basis[0..<1_000_000]) + randomBytes(777, seed: 9) + Array(basis[1_000_000...])
            let deleted = Array(basis[0..<500_000]) + Array(basis[500_123...])
            let grown = basis + randomBytes(100_000, seed: 5)
            let shrunk = Array(basis[0..<(2 << 20) + 12345])
            for (name, new) in [
                ("same", basis), ("in place", inPlace), ("inserted", inserted), ("deleted", deleted), ("grown", grown),
                ("shrunk", shrunk),
            ] {
                let (ops, rebuilt, blockSize) = try Self.match(new: new, basis: basis, in: root)
                #expect(rebuilt == new, "\(name)")
                let literal = ops.reduce(UInt64(0)) {
                    if case .literal(_, let length) = $1 { return $0 + length }
                    return $0
                }
                // Little but the changed blocks goes as bytes.
                #expect(
                    literal <= UInt64(new.count - basis.count > 0 ? new.count - basis.count : 0) + 8
                        * UInt64(blockSize), "\(name): \(literal) literal bytes")
            }
        }
    }

    @Test(
        "The match from an offset: operations for the bytes after it alone, the digest of the whole file or of the rest"
    )
    func matchFromAnOffset() throws {
        try withTemporaryDirectory { root in
            let basis = randomBytes(1 << 20, seed: 90)
            let new = Array(basis[0..<(300 << 10)]) + randomBytes(100_000, seed: 91_007) + Array(basis[(300 << 10)...])
            // At 0, inside a block, inside the new bytes, at the last byte, at the end.
            for start in [0, 12_345, (300 << 10) + 50_000, new.count - 1, new.count] {
                for whole in [true, false] {
                    let (ops, rebuilt, blockSize) = try Self.match(
                        new: new, basis: basis, in: root, from: start, wholeDigest: whole)
                    #expect(rebuilt == Array(new[start...]), "from \(start)")
                    let literal = ops.reduce(UInt64(0)) {
                        if case .literal(_, let length) = $1 { return $0 + length }
                        return $0
                    }
                    #expect(literal <= 100_000 + 2 * UInt64(blockSize), "from \(start): \(literal) literal bytes")
                }
            }
        }
    }
}
