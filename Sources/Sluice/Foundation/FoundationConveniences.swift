import Foundation

/// What Apple's Foundation has and Linux's lacks: `Stream.getBoundStreams` and
/// `Stream.getStreamsToHost` sit under `#if false` in swift-corelibs-foundation. These give the
/// same calls, with sluice streams behind Foundation's types.
extension Stream {
    /// A bound pair as Foundation streams, as Apple's `getBoundStreams(withBufferSize:…)`:
    /// what is written to `output` is read from `input`, through a buffer of `bufferSize`
    /// bytes (a full buffer blocks the writer). Each end may be used on its own thread.
    public static func boundStreams(bufferSize: Int) -> (input: InputStream, output: OutputStream) {
        let (read, write) = boundPair(bufferSize: max(1, bufferSize))
        return (BridgedInputStream(read), BridgedOutputStream(write))
    }

    /// Apple's spelling of `boundStreams(bufferSize:)`.
    public class func getBoundStreams(
        withBufferSize bufferSize: Int, inputStream: inout InputStream?, outputStream: inout OutputStream?
    ) {
        (inputStream, outputStream) = boundStreams(bufferSize: bufferSize)
    }

    /// A TCP connection to `host:port` as Foundation streams, as Apple's
    /// `getStreamsToHost(withName:port:…)`. Opening either stream connects (blocking, in
    /// polling mode); a failure shows as status `.error` with `streamError` naming the address.
    /// Use both streams from one thread at a time.
    public static func streamsToHost(name host: String, port: Int) -> (input: InputStream, output: OutputStream) {
        let (read, write) = Socket.connect(host: host, port: UInt16(clamping: port))
        return (BridgedInputStream(read), BridgedOutputStream(write))
    }

    /// Apple's spelling of `streamsToHost(name:port:)`.
    public class func getStreamsToHost(
        withName hostname: String, port: Int, inputStream: inout InputStream?, outputStream: inout OutputStream?
    ) {
        (inputStream, outputStream) = streamsToHost(name: hostname, port: port)
    }
}

/// Gives `ReadStream` and `WriteStream` Foundation's URL initialisers (`ReadStream(url:)`,
/// `WriteStream(url:append:)`). The initialisers return one of sluice's stream kinds, so they
/// are written as protocol-extension initialisers; the protocol has no other use.
public protocol URLStreamInitializable {}

extension ReadStream: URLStreamInitializable {}
extension WriteStream: URLStreamInitializable {}

extension URLStreamInitializable where Self: ReadStream {
    /// A stream reading the file at `url`, as `InputStream(url:)`: nil unless `url` is a file
    /// URL. As with Foundation, a missing file shows at `open()` (status `.error`).
    /// Called on a subclass of your own, it returns nil (the stream made is sluice's kind).
    public init?(url: URL) {
        guard url.isFileURL, let stream = ReadStream.file(atPath: url.path) as? Self else { return nil }
        self = stream
    }
}

extension URLStreamInitializable where Self: WriteStream {
    /// A stream writing the file at `url`, as `OutputStream(url:append:)`: created if missing,
    /// truncated or appended to. Nil unless `url` is a file URL (or when called on a subclass).
    public init?(url: URL, append shouldAppend: Bool) {
        let mode: FileWriteMode = shouldAppend ? .append : .truncate
        guard url.isFileURL, let stream = WriteStream.file(atPath: url.path, mode: mode) as? Self else { return nil }
        self = stream
    }
}

extension Data {
    /// Everything `stream` holds, read to the end in polling mode (opened if need be).
    /// Throws the stream's error. Memory grows with the input: for input of unknown size use
    /// `chunks()`.
    public init(reading stream: ReadStream) throws(SluiceError) {
        self = try stream.readToEnd()
    }
}
