#if canImport(Glibc)
    import Glibc
#endif

/// The process's file-creation mask (`umask`): the permission bits a receiver takes away from
/// the modes a sender sends, as `cp` without `-p` does.
package enum FileCreationMask {
    /// The mask now, read without changing it from the `Umask:` line of `/proc/self/status`
    /// (Linux 4.7 and later). Only where that cannot be read is it read with `umask(2)`, which
    /// sets it: to 0o077 and back, so that a file another thread creates in that moment gets
    /// fewer permissions, never more.
    package static func current() -> UInt32 {
        if let status = statusText(), let mask = parse(status: status) { return mask }
        let previous = umask(0o077)
        umask(previous)
        return UInt32(previous) & 0o777
    }

    /// The mask on the `Umask:` line of a `/proc/PID/status` text (`Umask:\t0022`), or nil.
    static func parse(status: String) -> UInt32? {
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Umask:") }) else { return nil }
        let digits = line.dropFirst("Umask:".count).drop { $0 == " " || $0 == "\t" }
        guard let mask = UInt32(digits, radix: 8), mask <= 0o777 else { return nil }
        return mask
    }

    /// `/proc/self/status`, or nil where it cannot be read.
    private static func statusText() -> String? {
        guard case .success(let fd) = openFile("/proc/self/status", flags: O_RDONLY | O_CLOEXEC, permissions: 0)
        else { return nil }
        defer { closeDescriptor(fd) }
        var text: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let read = buffer.withUnsafeMutableBytes { bytes in
                Result { () throws(SluiceError) in
                    try syscallValue("read", "/proc/self/status") { Glibc.read(fd, bytes.baseAddress, bytes.count) }
                }
            }
            guard case .success(let count) = read else { return nil }
            if count == 0 { return String(decoding: text, as: UTF8.self) }
            text += buffer[0..<count]
        }
    }
}
