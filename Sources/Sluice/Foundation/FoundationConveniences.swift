import Foundation

/// What Apple's Foundation has and Linux's lacks: `Stream.getBoundStreams` and
/// `Stream.getStreamsToHost` sit under `#if false` in swift-corelibs-foundation. These give the
/// same calls, with sluice streams behind Foundation's types.
extension Stream {
    /// A bound pair as Foundation streams, as Apple's `getBoundStreams(withBufferSize:…)`:
    /// what is written to `output` is read from `input`, through a buffer of `bufferSize`
    /// bytes (a full buffer blocks the writer). Each end may be used on its own thread; as
    /// Foundation's streams are not `Sendable`, hand one over from a `nonisolated(unsafe)`
    /// constant (`nonisolated(unsafe) let (input, output) = Stream.boundStreams(…)`) and use it
    /// on that thread alone.
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
