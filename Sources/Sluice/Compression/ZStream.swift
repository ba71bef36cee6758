import CZlib

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A zeroed `z_stream` at a stable heap address: zlib keeps pointers back to it in its state,
/// so it must never move the way a Swift stored struct may.
func allocateZStream() -> UnsafeMutablePointer<z_stream> {
    let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
    stream.initialize(to: z_stream())
    return stream
}

/// Frees what `allocateZStream` allocated (after `deflateEnd`/`inflateEnd`).
func releaseZStream(_ stream: UnsafeMutablePointer<z_stream>) {
    stream.deinitialize(count: 1)
    stream.deallocate()
}

/// A buffer length as much as a z_stream's 32-bit `avail_in`/`avail_out` can hold; larger buffers
/// are served over several calls.
@inline(__always)
func zLength(_ count: Int) -> UInt32 {
    UInt32(truncatingIfNeeded: min(count, Int(UInt32.max)))
}

/// One zlib call (`deflate` or `inflate`) over `input` and `output`: points the stream at the
/// buffers, makes the call, and clears the pointers again so zlib never holds on to memory it
/// does not own. Returns the bytes consumed and produced, and zlib's return code.
func zCall(
    _ stream: UnsafeMutablePointer<z_stream>, _ input: UnsafeRawBufferPointer, _ output: UnsafeMutableRawBufferPointer,
    _ call: (UnsafeMutablePointer<z_stream>) -> Int32
) -> (consumed: Int, produced: Int, rc: Int32) {
    let availIn = zLength(input.count)
    let availOut = zLength(output.count)
    stream.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress?.assumingMemoryBound(to: Bytef.self))
    stream.pointee.avail_in = availIn
    stream.pointee.next_out = output.baseAddress?.assumingMemoryBound(to: Bytef.self)
    stream.pointee.avail_out = availOut
    let rc = call(stream)
    let consumed = Int(availIn - stream.pointee.avail_in)
    let produced = Int(availOut - stream.pointee.avail_out)
    stream.pointee.next_in = nil
    stream.pointee.avail_in = 0
    stream.pointee.next_out = nil
    stream.pointee.avail_out = 0
    return (consumed, produced, rc)
}

/// zlib's text for the last error of `stream` (`msg`), or `fallback` when it set none.
func zMessage(_ stream: UnsafeMutablePointer<z_stream>, fallback: String) -> String {
    guard let msg = stream.pointee.msg else { return fallback }
    return String(cString: msg)
}

/// The error for a failed `deflateInit2`/`inflateInit2`: out of memory is the world's fault,
/// anything else (bad parameters, mismatched library version) is a bug.
func zInitError(_ rc: Int32, operation: String, subject: String) -> SluiceError {
    guard rc == Z_MEM_ERROR else {
        preconditionFailure("\(operation)Init2 returned \(rc) (zlib \(String(cString: zlibVersion())))")
    }
    return SluiceError(.system(Errno(rawValue: ENOMEM)), operation: operation, subject: subject)
}
