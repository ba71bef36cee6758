import Foundation

/// A Foundation stream's failure as a `SluiceError`: its own error if it is one (a bridged
/// sluice stream), else an I/O error that carries Foundation's text.
private func foundationFailure(_ stream: Stream, _ operation: String, _ name: String) -> SluiceError {
    if let error = stream.streamError as? SluiceError { return error }
    let detail = stream.streamError.map { "\($0)" } ?? "the Foundation stream failed"
    return SluiceError(.system(.ioError), operation: operation, subject: name, detail: detail)
}

/// A Foundation `InputStream` as the bytes of a sluice `ReadStream` (see `ReadStream.reading(_:)`).
final class FoundationInputSource: ByteSource {
    let input: InputStream
    let name: String

    init(_ input: InputStream, name: String) {
        self.input = input
        self.name = name
    }

    func open(readiness: StreamReadiness) throws(SluiceError) {
        if input.streamStatus == .notOpen { input.open() }
        if input.streamStatus == .error { throw failure("open") }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        guard let base = buffer.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return .processed(0) }
        let n = input.read(base, maxLength: buffer.count)
        if n < 0 { throw failure("read") }
        return .processed(n)
    }

    func close() { input.close() }

    private func failure(_ operation: String) -> SluiceError {
        foundationFailure(input, operation, name)
    }
}

/// A Foundation `OutputStream` as the destination of a sluice `WriteStream`.
final class FoundationOutputSink: ByteSink {
    let output: OutputStream
    let name: String

    init(_ output: OutputStream, name: String) {
        self.output = output
        self.name = name
    }

    func open(readiness: StreamReadiness) throws(SluiceError) {
        if output.streamStatus == .notOpen { output.open() }
        if output.streamStatus == .error { throw failure("open") }
    }

    func write(from buffer: UnsafeRawBufferPointer) throws(SluiceError) -> IOResult<Int> {
        guard let base = buffer.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return .processed(0) }
        let n = output.write(base, maxLength: buffer.count)
        if n < 0 { throw failure("write") }
        return .processed(n)
    }

    func close() { output.close() }

    private func failure(_ operation: String) -> SluiceError {
        foundationFailure(output, operation, name)
    }
}

extension ReadStream {
    /// Any Foundation `InputStream` driven as a sluice stream on the event loop, so that a
    /// `Pipeline`, `chunks()` or a delegate can read it. The Foundation stream is opened by
    /// `open()` (if it is not open yet) and closed by `close()`.
    ///
    /// Foundation's streams on Linux have no readiness: each `read` is a blocking call, served
    /// from the loop's ready queue as a regular file is. Data, file and URL streams answer at
    /// once; a stream that can wait for bytes (a bridged socket) would hold the loop's thread.
    public static func reading(_ input: InputStream, name: String = "InputStream") -> ReadStream {
        .custom(FoundationInputSource(input, name: name), name: name)
    }
}

extension WriteStream {
    /// Any Foundation `OutputStream` driven as a sluice stream on the event loop (see
    /// `ReadStream.reading(_:name:)`). A fixed-capacity stream that is full ends the stream.
    public static func writing(_ output: OutputStream, name: String = "OutputStream") -> WriteStream {
        .custom(FoundationOutputSink(output, name: name), name: name)
    }
}
