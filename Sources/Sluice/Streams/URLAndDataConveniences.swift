import FoundationEssentials

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
