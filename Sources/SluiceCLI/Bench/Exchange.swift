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
