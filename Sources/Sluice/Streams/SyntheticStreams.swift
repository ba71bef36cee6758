/// Reads `pattern` over and over until `count` bytes have been read: a source of any size in
/// bounded memory, for measuring throughput.
final class RepeatingReadStream: ReadStream {
    /// The pattern, at an address that stays valid while the stream lives (so it can be lent).
    private let pattern: UnsafeMutableRawBufferPointer
    private let total: UInt64
    private var produced: UInt64 = 0
    private let duration: UInt64?
    private var deadline: UInt64?

    init(pattern: [UInt8], count: UInt64, duration: Duration?) {
        precondition(!pattern.isEmpty, "pattern must not be empty")
        let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: pattern.count, alignment: 16)
        pattern.withUnsafeBytes { copy.copyMemory(from: $0) }
        self.pattern = copy
        total = count
        self.duration = duration?.nanoseconds
        super.init(name: "memory")
    }

    deinit { pattern.deallocate() }

    override func openPrimitive() throws(SluiceError) -> Bool {
        if let duration { deadline = monotonicNanoseconds() + duration }
        return true
    }

    private var timeIsUp: Bool {
        guard let deadline else { return false }
        return monotonicNanoseconds() >= deadline
    }

    override func readPrimitive(_ buffer: UnsafeMutableRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        if timeIsUp { return .processed(0) }
        let want = Int(min(UInt64(buffer.count), total - produced))
        if want == 0 { return .processed(0) }
        var filled = 0
        while filled < want {
            let offset = Int((produced + UInt64(filled)) % UInt64(pattern.count))
            let run = min(want - filled, pattern.count - offset)
            (buffer.baseAddress! + filled).copyMemory(from: pattern.baseAddress! + offset, byteCount: run)
            filled += run
        }
        produced += UInt64(want)
        return .processed(want)
    }

    override func lendPrimitive(upTo maxLength: Int) -> UnsafeRawBufferPointer? {
        if timeIsUp { return UnsafeRawBufferPointer(start: nil, count: 0) }
        let offset = Int(produced % UInt64(pattern.count))
        let n = Int(min(UInt64(min(maxLength, pattern.count - offset)), total - produced))
        produced += UInt64(n)
        return UnsafeRawBufferPointer(rebasing: pattern[offset..<(offset + n)])
    }

    override var bytesAvailablePrimitive: Bool { produced < total && !timeIsUp }
    override var isAtEndWithoutReading: Bool { produced >= total || timeIsUp }
}

/// Accepts and drops every byte, as `/dev/null` without the system call; optionally copying
/// each write into a scratch buffer first, as a consumer of the bytes in memory would.
final class DiscardWriteStream: WriteStream {
    private(set) var count: UInt64 = 0
    private let scratch: UnsafeMutableRawBufferPointer?

    init(scratchBytes: Int) {
        scratch = scratchBytes > 0 ? .allocate(byteCount: scratchBytes, alignment: 64) : nil
        super.init(name: scratchBytes > 0 ? "memory" : "discard")
    }

    deinit { scratch?.deallocate() }

    override func writePrimitive(_ buffer: UnsafeRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        var n = buffer.count
        if let scratch {
            n = min(n, scratch.count)
            scratch.baseAddress!.copyMemory(from: buffer.baseAddress!, byteCount: n)
        }
        count += UInt64(n)
        return .processed(n)
    }

    override func property(forKey key: StreamPropertyKey) -> Any? {
        key == .fileCurrentOffset ? count : nil
    }
}

extension ReadStream {
    /// A stream of `count` bytes made by repeating `pattern` (bounded memory whatever the
    /// count), ending early once `duration` has passed since it was opened.
    public static func repeating(_ pattern: [UInt8], count: UInt64 = .max, for duration: Duration? = nil)
        -> ReadStream
    {
        RepeatingReadStream(pattern: pattern, count: count, duration: duration)
    }
}

extension WriteStream {
    /// A stream that accepts and drops everything; its byte count is `fileCurrentOffset`.
    public static func discard() -> WriteStream { DiscardWriteStream(scratchBytes: 0) }

    /// A stream that copies every write into a reused buffer of `capacity` bytes and then drops
    /// it: an in-memory consumer of bounded size, for measuring memory → memory throughput.
    public static func toScratch(capacity: Int) -> WriteStream {
        precondition(capacity > 0, "capacity must be positive")
        return DiscardWriteStream(scratchBytes: capacity)
    }
}
