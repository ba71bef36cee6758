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
