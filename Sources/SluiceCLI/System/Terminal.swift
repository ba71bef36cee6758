import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The terminal facts the command needs, and unbuffered writes to the standard descriptors.
enum Terminal {
    /// True when `fd` is a terminal (`isatty(3)`).
    static func isTerminal(_ fd: Int32) -> Bool { isatty(fd) == 1 }

    /// The width of the terminal on `fd` (`TIOCGWINSZ`), else `$COLUMNS`, else 80.
    static func columns(of fd: Int32) -> Int {
        var size = winsize()
        if ioctl(fd, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 { return Int(size.ws_col) }
        if let text = getenv("COLUMNS"), let value = Int(String(cString: text)), value > 0 { return value }
        return 80
    }

    /// Writes all of `text` to `fd`, retrying after EINTR (`retryingOnInterrupt`) and partial
    /// writes, waiting while a non-blocking `fd` is full; gives up on any other error (there is
    /// nowhere left to report it).
    static func write(_ text: String, to fd: Int32 = 2) {
        var text = text
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = retryingOnInterrupt { Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset) }
                if n > 0 {
                    offset += n
                } else if n < 0 && errno == EAGAIN {
                    var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    _ = poll(&pfd, 1, -1)
                } else {
                    return
                }
            }
        }
    }

    /// `sluice: MESSAGE` on stderr, one line.
    static func report(_ message: String) {
        write("sluice: \(message)\n", to: 2)
    }
}
