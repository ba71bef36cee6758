import FoundationEssentials

/// Reads bytes held in memory, as `InputStream(data:)`.
final class MemoryReadStream: ReadStream {
    /// The bytes, at an address that stays valid while the stream lives (so they can be lent).
    private let bytes: UnsafeMutableRawBufferPointer
    private var index = 0

    init(bytes source: [UInt8]) {
        let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: source.count, alignment: 16)
        source.withUnsafeBytes { copy.copyMemory(from: $0) }
        bytes = copy
        super.init(name: "memory")
    }

    deinit { bytes.deallocate() }

    override func readPrimitive(_ buffer: UnsafeMutableRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        let n = min(buffer.count, bytes.count - index)
        if n == 0 { return .processed(0) }
        buffer.baseAddress!.copyMemory(from: bytes.baseAddress! + index, byteCount: n)
        index += n
        return .processed(n)
    }

    override func lendPrimitive(upTo maxLength: Int) -> UnsafeRawBufferPointer? {
        let n = min(maxLength, bytes.count - index)
        defer { index += n }
        return UnsafeRawBufferPointer(rebasing: bytes[index..<(index + n)])
    }

    override var bytesAvailablePrimitive: Bool { index < bytes.count }
    override var isAtEndWithoutReading: Bool { index >= bytes.count }

    override func property(forKey key: StreamPropertyKey) -> Any? {
        key == .fileCurrentOffset ? UInt64(index) : nil
    }
}

/// Writes to memory: growable (`toMemory()`) or with a fixed capacity (`toBuffer(capacity:)`),
/// where `hasSpaceAvailable` turns false and `write` returns 0 once full.
final class MemoryWriteStream: WriteStream {
    private var storage: [UInt8] = []
    private let capacity: Int?

    init(capacity: Int?) {
        self.capacity = capacity
        if let capacity { storage.reserveCapacity(capacity) }
        super.init(name: "memory")
    }

    override func writePrimitive(_ buffer: UnsafeRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        var n = buffer.count
        if let capacity { n = min(n, capacity - storage.count) }
        if n == 0 { return .processed(0) }
        storage.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        return .processed(n)
    }

    override var spaceAvailablePrimitive: Bool {
        guard let capacity else { return true }
        return storage.count < capacity
    }

    override var isReadyWithoutKernel: Bool { spaceAvailablePrimitive }
    override var isFullForever: Bool { capacity.map { storage.count >= $0 } ?? false }

    override func property(forKey key: StreamPropertyKey) -> Any? {
        switch key {
        case .dataWrittenToMemory: return Data(storage)
        case .fileCurrentOffset: return UInt64(storage.count)
        default: return nil
        }
    }

    /// The bytes written so far.
    var contents: [UInt8] { storage }
}

extension ReadStream {
    /// A stream reading `data`, as `InputStream(data:)`.
    public static func memory(_ data: Data) -> ReadStream { MemoryReadStream(bytes: [UInt8](data)) }

    /// A stream reading `bytes`.
    public static func memory(_ bytes: [UInt8]) -> ReadStream { MemoryReadStream(bytes: bytes) }
}

extension WriteStream {
    /// A growable in-memory stream, as `OutputStream.toMemory()`; its bytes are in
    /// `property(forKey: .dataWrittenToMemory)`.
    public static func toMemory() -> WriteStream { MemoryWriteStream(capacity: nil) }

    /// An in-memory stream that holds at most `capacity` bytes, as
    /// `OutputStream(toBuffer:capacity:)`.
    public static func toBuffer(capacity: Int) -> WriteStream {
        precondition(capacity >= 0, "capacity must not be negative")
        return MemoryWriteStream(capacity: capacity)
    }
}
