import FoundationEssentials

/// A stream to read bytes from, as NSInputStream. Create one with a factory
/// (`ReadStream.file(atPath:)`, `.memory(_:)`, `.standardInput`, `boundPair(bufferSize:)`, or
/// a socket pair), set a delegate, schedule it on a loop, open it, read on `hasBytesAvailable`.
public class ReadStream: ByteStream {
    override var readinessEvent: StreamEvent { .hasBytesAvailable }

    /// Reads up to `maxLength` bytes into `buffer`. Returns the count read, 0 at the end,
    /// or -1 on error (`streamError` says why). Blocks only if no byte is ready, which never
    /// happens in answer to `hasBytesAvailable`.
    public func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength: Int) -> Int {
        read(into: UnsafeMutableRawBufferPointer(start: buffer, count: max(0, maxLength)))
    }

    /// Reads into `buffer`; as `read(_:maxLength:)`.
    public func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        blocking({ tryRead(into: buffer) }, waitingWith: waitUntilReadable)
    }

    /// Reads without blocking: `.wouldBlock` when nothing is ready, `.processed(0)` at end,
    /// `.processed(-1)` on error. Re-arms `hasBytesAvailable` either way.
    public func tryRead(into buffer: UnsafeMutableRawBufferPointer) -> IOResult<Int> {
        attempt("read", bytes: buffer.count, during: .reading) { () throws(SluiceError) in
            try readPrimitive(buffer)
        }
    }

    /// Reads as `tryRead`, then on into the rest of `buffer` while reads find bytes. A short
    /// read from a socket is one segment's worth, and more has often arrived since: reading on
    /// (as iperf3's receiver does) gives fuller buffers and one readiness wait per buffer rather
    /// than per segment. A read that finds nothing re-arms as usual; the end or an error met
    /// after some bytes is reported by its event, and by the next read.
    package func tryReadFilling(into buffer: UnsafeMutableRawBufferPointer) -> IOResult<Int> {
        let first = tryRead(into: buffer)
        guard case .processed(var n) = first, n > 0 else { return first }
        while n < buffer.count, case .processed(let more) = tryRead(into: .init(rebasing: buffer[n...])), more > 0 {
            n += more
        }
        return .processed(n)
    }

    /// For streams whose bytes already sit in memory that stays valid while the stream lives:
    /// the next bytes (at most `maxLength`), to use in place instead of copying, consumed as a
    /// read would consume them. An empty buffer at the end; nil when the stream cannot lend (a
    /// file, a socket), or is not open. Like NSInputStream's `getBuffer(_:length:)`, which
    /// pipelines use to skip a copy.
    func lend(upTo maxLength: Int) -> UnsafeRawBufferPointer? {
        guard streamStatus == .open, maxLength > 0, let lent = lendPrimitive(upTo: maxLength) else { return nil }
        if lent.isEmpty { reachedEnd() } else { rearm() }
        return lent
    }

    /// True when a read would return at once (with bytes or with the end), as NSInputStream.
    public var hasBytesAvailable: Bool { streamStatus == .open && bytesAvailablePrimitive }

    /// Reads everything to the end (polling mode: the stream must not be scheduled on a loop,
    /// or the call must be made on that loop's thread). Opens the stream if it is not open yet.
    /// Throws the stream's error (a closed stream: `.closed`). Memory grows with what is read:
    /// for input of unknown size, read in chunks or use `chunks()`.
    public func readToEnd(chunkSize: Int = 65536) throws(SluiceError) -> Data {
        if streamStatus == .notOpen { open() }
        var out = Data()
        var buffer = [UInt8](repeating: 0, count: max(1, chunkSize))
        while true {
            let n = buffer.withUnsafeMutableBytes { read(into: $0) }
            if n < 0 {
                throw streamError ?? SluiceError(.system(.ioError), operation: "read", subject: name)
            }
            if n == 0 { return out }
            out.append(contentsOf: buffer[0..<n])
        }
    }

    // MARK: Hooks

    func readPrimitive(_ buffer: UnsafeMutableRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        .processed(0)
    }
    /// See `lend(upTo:)`; nil when the kind keeps no bytes in memory.
    func lendPrimitive(upTo maxLength: Int) -> UnsafeRawBufferPointer? { nil }
    /// Polling mode after `.wouldBlock`: wait until a read can make progress.
    func waitUntilReadable() throws(SluiceError) { try streamCore?.waitUntilReady(self, side: .reader) }
    var bytesAvailablePrimitive: Bool { streamCore?.isReady(self, side: .reader) ?? true }
}

/// A stream to write bytes to, as NSOutputStream. Create one with a factory
/// (`WriteStream.file(atPath:)`, `.toMemory()`, `.toBuffer(capacity:)`, `.standardOutput`,
/// `boundPair(bufferSize:)`, or a socket pair) and write on `hasSpaceAvailable`. A delegate
/// offered space with nothing to write should set a flag and write as soon as data arrives:
/// no further `hasSpaceAvailable` comes until it writes.
public class WriteStream: ByteStream {
    override var readinessEvent: StreamEvent { .hasSpaceAvailable }
    override var side: StreamSide { .writer }

    /// Writes up to `maxLength` bytes from `buffer`. Returns the count accepted (may be fewer),
    /// 0 when a fixed-capacity stream is full, or -1 on error.
    public func write(_ buffer: UnsafePointer<UInt8>, maxLength: Int) -> Int {
        write(from: UnsafeRawBufferPointer(start: buffer, count: max(0, maxLength)))
    }

    /// Writes from `buffer`; as `write(_:maxLength:)`.
    public func write(from buffer: UnsafeRawBufferPointer) -> Int {
        blocking({ tryWrite(from: buffer) }, waitingWith: waitUntilWritable)
    }

    /// Writes all of `bytes` (polling mode). Returns false on error or when full.
    @discardableResult
    public func write<Bytes: Collection<UInt8>>(all bytes: Bytes) -> Bool {
        let array = Array(bytes)
        return array.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = write(from: UnsafeRawBufferPointer(rebasing: raw[offset...]))
                if n <= 0 { return false }
                offset += n
            }
            return true
        }
    }

    /// Writes without blocking: `.wouldBlock` when no space, `.processed(-1)` on error.
    /// Re-arms `hasSpaceAvailable` either way.
    public func tryWrite(from buffer: UnsafeRawBufferPointer) -> IOResult<Int> {
        attempt("write", bytes: buffer.count, during: .writing) { () throws(SluiceError) in
            try writePrimitive(buffer)
        }
    }

    /// True when a write would not block, as NSOutputStream.
    public var hasSpaceAvailable: Bool { streamStatus == .open && spaceAvailablePrimitive }

    // MARK: Hooks

    func writePrimitive(_ buffer: UnsafeRawBufferPointer) throws(SluiceError) -> IOResult<Int> { .processed(0) }
    func waitUntilWritable() throws(SluiceError) { try streamCore?.waitUntilReady(self, side: .writer) }
    var spaceAvailablePrimitive: Bool { streamCore?.isReady(self, side: .writer) ?? true }
    /// For kinds that copy what they are given into memory of their own before writing it
    /// (`DirectFileWriteStream`): that memory's free space (at most `maxLength` bytes), for a
    /// pipeline with nothing between its ends to read the source straight into, skipping its
    /// chunk and the copy out of it. nil when the kind has none, or has none now.
    func lendSpace(upTo maxLength: Int) -> UnsafeMutableRawBufferPointer? { nil }
    /// The first `count` bytes of the space `lendSpace` gave now hold the next bytes of the
    /// stream: they count as written. Throws what writing them threw (the stream has failed).
    func takeLentSpace(_ count: Int) throws(SluiceError) {}
    /// What was written here will not be used (the pipeline writing it failed): take back
    /// what the stream made that did not exist before it opened. A file stream removes the
    /// file it created (never one that was there); other kinds made nothing, and do nothing.
    /// Called once the stream is closed.
    func abandon() {}
}
