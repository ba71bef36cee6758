import Sluice

/// Reads exactly `count` bytes from `stream` on its loop, then calls `done` with them (nil if the
/// stream ended or failed first). Follows the event rule: reads only on `hasBytesAvailable`.
final class ExactReader {
    private let stream: ReadStream
    private var buffer: [UInt8]
    private var filled = 0
    private var done: (([UInt8]?) -> Void)?

    init(_ stream: ReadStream, count: Int, done: @escaping ([UInt8]?) -> Void) {
        self.stream = stream
        buffer = [UInt8](repeating: 0, count: count)
        self.done = done
        stream.eventHandler = { [self] _, event in handle(event) }
        // The stream may have offered bytes to someone else already: read once now.
        if stream.streamStatus == .open { handle(.hasBytesAvailable) }
    }

    private func handle(_ event: StreamEvent) {
        guard done != nil else { return }
        switch event {
        case .hasBytesAvailable:
            let n = buffer.withUnsafeMutableBytes { raw in
                stream.tryRead(into: UnsafeMutableRawBufferPointer(rebasing: raw[filled...]))
            }
            switch n {
            case .processed(let count) where count > 0:
                filled += count
                if filled == buffer.count { finish(buffer) }
            case .processed:
                finish(nil)
            case .wouldBlock:
                break
            }
        case .endEncountered, .errorOccurred:
            finish(nil)
        default:
            break
        }
    }

    private func finish(_ bytes: [UInt8]?) {
        stream.eventHandler = nil
        let callback = done
        done = nil
        callback?(bytes)
    }
}

/// Writes all of `bytes` to `stream` on its loop, then calls `done` (false if it failed).
/// Writes on `hasSpaceAvailable`; the first offer may already have been consumed by someone
/// else, so it also tries once at the start.
final class AllWriter {
    private let stream: WriteStream
    private let bytes: [UInt8]
    private var sent = 0
    private var done: ((Bool) -> Void)?

    init(_ stream: WriteStream, bytes: [UInt8], done: @escaping (Bool) -> Void) {
        self.stream = stream
        self.bytes = bytes
        self.done = done
        stream.eventHandler = { [self] _, event in handle(event) }
        if stream.streamStatus == .open { push() }
    }

    private func handle(_ event: StreamEvent) {
        switch event {
        case .hasSpaceAvailable: push()
        case .errorOccurred, .endEncountered: finish(false)
        default: break
        }
    }

    private func push() {
        guard done != nil else { return }
        let outcome = bytes.withUnsafeBytes { stream.tryWrite(from: UnsafeRawBufferPointer(rebasing: $0[sent...])) }
        switch outcome {
        case .processed(let n) where n > 0:
            sent += n
            if sent == bytes.count { finish(true) }
        case .processed:
            finish(false)
        case .wouldBlock:
            break
        }
    }

    private func finish(_ ok: Bool) {
        stream.eventHandler = nil
        let callback = done
        done = nil
        callback?(ok)
    }
}

extension Array where Element == UInt8 {
    mutating func appendBigEndian<T: FixedWidthInteger>(_ value: T) {
        Swift.withUnsafeBytes(of: value.bigEndian) { append(contentsOf: $0) }
    }

    func readBigEndian<T: FixedWidthInteger>(_: T.Type, at offset: Int) -> T {
        var value = T.zero
        for i in 0..<MemoryLayout<T>.size { value = value << 8 | T(self[offset + i]) }
        return value
    }
}

/// The first bytes a bench client sends on each connection: magic, flags and how long to run
/// (16 bytes); with the `group` flag, 8 more that say which run of several connections
/// (`bench -P N`) this one belongs to. A single-stream client sends the 16 bytes alone, as
/// before groups existed, so a server of either age serves it.
///
/// Read by the server from anyone who connects: every field is bounded here, and anything
/// else is refused (nil), never trusted.
struct BenchHello: Hashable, Sendable {
    static let magic = Array("SLBENCH1".utf8)
    /// The header every client sends.
    static let size = 16
    /// The group's bytes after the header, when the header's `group` flag is set.
    static let groupSize = 8
    /// The most connections one run may have (`-P`).
    static let maxStreams = 128

    private static let reverseFlag: UInt32 = 1
    private static let compressFlag: UInt32 = 2
    private static let groupFlag: UInt32 = 4

    /// One connection of a run of `count` (`bench -P`): the run's random id and this
    /// connection's place in it, from 0.
    struct Group: Hashable, Sendable {
        var id: UInt32
        var count: Int
        var index: Int
    }

    var reverse: Bool
    var compress: Bool
    var milliseconds: UInt32
    var group: Group?

    init(reverse: Bool, compress: Bool, milliseconds: UInt32, group: Group? = nil) {
        self.reverse = reverse
        self.compress = compress
        self.milliseconds = milliseconds
        self.group = group
        expectsGroup = group != nil
    }

    var bytes: [UInt8] {
        var out = Self.magic
        var flags = (reverse ? Self.reverseFlag : 0) | (compress ? Self.compressFlag : 0)
        if group != nil { flags |= Self.groupFlag }
        out.appendBigEndian(flags)
        out.appendBigEndian(milliseconds)
        if let group {
            out.appendBigEndian(group.id)
            out.appendBigEndian(UInt16(truncatingIfNeeded: group.count))
            out.appendBigEndian(UInt16(truncatingIfNeeded: group.index))
        }
        return out
    }

    /// Parses the 16-byte header; nil if it is not a bench client's. A header with the group
    /// flag leaves `group` nil and `expectsGroup` true: the caller reads `groupSize` more bytes
    /// and passes them to `readGroup`.
    init?(header bytes: [UInt8]) {
        guard bytes.count == Self.size, Array(bytes[0..<8]) == Self.magic else { return nil }
        let flags = bytes.readBigEndian(UInt32.self, at: 8)
        guard flags & ~(Self.reverseFlag | Self.compressFlag | Self.groupFlag) == 0 else { return nil }
        reverse = flags & Self.reverseFlag != 0
        compress = flags & Self.compressFlag != 0
        expectsGroup = flags & Self.groupFlag != 0
        milliseconds = bytes.readBigEndian(UInt32.self, at: 12)
        guard milliseconds <= 3_600_000 else { return nil }
    }

    /// The header said a group follows.
    private(set) var expectsGroup = false

    /// Reads the group's 8 bytes: false (and no group) unless its count is 1 to `maxStreams`
    /// and its index below the count.
    mutating func readGroup(_ bytes: [UInt8]) -> Bool {
        guard expectsGroup, bytes.count == Self.groupSize else { return false }
        let count = Int(bytes.readBigEndian(UInt16.self, at: 4))
        let index = Int(bytes.readBigEndian(UInt16.self, at: 6))
        guard (1...Self.maxStreams).contains(count), index < count else { return false }
        group = Group(id: bytes.readBigEndian(UInt32.self, at: 0), count: count, index: index)
        return true
    }
}
