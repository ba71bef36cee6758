import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A TCP port that was free a moment ago: bound to 127.0.0.1 port 0, read back, released.
func freePort() throws -> UInt16 {
    let (fd, port) = try boundLoopbackSocket()
    close(fd)
    return port
}

/// A TCP socket bound to a free port of 127.0.0.1 (not listening), and the port.
func boundLoopbackSocket() throws -> (Int32, UInt16) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw POSIXError(.EIO) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
            bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
        }
    }
    guard bound else {
        close(fd)
        throw POSIXError(.EADDRINUSE)
    }
    return (fd, UInt16(bigEndian: address.sin_port))
}

/// Runs `body` with a port of 127.0.0.1 that refuses connections while it runs: a socket
/// bound there without SO_REUSEADDR, and not listening, holds it, so no other test's listener
/// can take it in between (as it could a port from `freePort()`).
func withRefusingPort<T>(_ body: (UInt16) throws -> T) throws -> T {
    let (fd, port) = try boundLoopbackSocket()
    defer { close(fd) }
    return try body(port)
}

/// Runs `sluice` once something listens on 127.0.0.1:`port` (a listener started just before
/// may not be up yet); if nothing does within 10 s, runs it anyway, to fail with its status.
func sluiceWhenListening(on port: UInt16, _ arguments: [String]) throws -> Outcome {
    waitUntil { isListening(port: port) }
    return try sluice(arguments)
}

/// Waits until `path` exists (a Unix listener's socket file), for at most 10 s.
func waitForFile(_ path: String) {
    waitUntil { FileManager.default.fileExists(atPath: path) }
}

/// `sluice copy` over sockets and with compression, against itself and against real peers.
@Suite(.ownThreads) struct NetworkAndCompressionTests {
    @Test
    func compressedCopyIsReadableByGzipAndRoundTrips() throws {
        try withTemporaryDirectory { dir in
            let data = Data((0..<400_000).map { UInt8(truncatingIfNeeded: $0 / 7) })
            try write(data, to: "\(dir)/in")
            let compress = try sluice("copy", "-z", "--stats=json", "\(dir)/in", "\(dir)/in.gz")
            #expect(compress.status == 0)
            let stats = try #require(try JSONSerialization.jsonObject(with: compress.stderr) as? [String: Any])
            #expect((stats["ratio"] as? Double ?? 0) > 1)
            let gunzip = try Running(URL(fileURLWithPath: "/usr/bin/gzip"), ["-dc", "\(dir)/in.gz"]).wait()
            #expect(gunzip.stdout == data)
            #expect(try sluice("copy", "-d", "\(dir)/in.gz", "\(dir)/back").status == 0)
            #expect(contents("\(dir)/back") == data)
            let truncated = try #require(contents("\(dir)/in.gz")).prefix(100)
            try write(Data(truncated), to: "\(dir)/cut.gz")
            let failed = try sluice("copy", "-d", "\(dir)/cut.gz", "\(dir)/cut")
            #expect(failed.status == 65)
            #expect(failed.stderrLines.count == 1)
            #expect(directoryEntries(dir).contains("cut") == false)
        }
    }

    @Test
    func compressedCopyOverAUnixSocket() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(2_000_000)
            try write(data, to: "\(dir)/in")
            let receiver = try Running(sluiceBinary, ["copy", "-d", "unix-listen:\(dir)/s", "\(dir)/out"])
            waitForFile("\(dir)/s")
            #expect(try sluice("copy", "-zzlib:1", "\(dir)/in", "unix:\(dir)/s").status == 0)
            #expect(receiver.wait().status == 0)
            #expect(contents("\(dir)/out") == data)
            #expect(!FileManager.default.fileExists(atPath: "\(dir)/s"))
        }
    }

    @Test
    func copyOverTCP() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(3_000_000)
            try write(data, to: "\(dir)/in")
            let port = try freePort()
            let receiver = try Running(sluiceBinary, ["copy", "tcp-listen:127.0.0.1:\(port)", "\(dir)/out"])
            let sender = try sluiceWhenListening(on: port, ["copy", "\(dir)/in", "tcp:127.0.0.1:\(port)"])
            #expect(sender.status == 0)
            #expect(receiver.wait().status == 0)
            #expect(contents("\(dir)/out") == data)
        }
    }

    @Test
    func refusedAndUnknownHostAreUnavailable() throws {
        let refused = try withRefusingPort { port in
            try sluice("copy", "-", "tcp:127.0.0.1:\(port)", stdin: Data("x".utf8))
        }
        #expect(refused.status == 69)
        #expect(refused.stderrLines.count == 1)
        #expect(refused.stderrText.contains("127.0.0.1"))
        let unknown = try sluice("copy", "-", "tcp:no-such-host.invalid:9", stdin: Data("x".utf8))
        #expect(unknown.status == 69)
        #expect(unknown.stderrText.contains("no-such-host.invalid"))
    }

    @Test
    func interruptedListenerRemovesItsSocketFile() throws {
        try withTemporaryDirectory { dir in
            let receiver = try Running(sluiceBinary, ["copy", "unix-listen:\(dir)/s", "\(dir)/out"])
            waitForFile("\(dir)/s")
            receiver.signal(SIGINT)
            #expect(receiver.wait().status == 130)
            #expect(directoryEntries(dir).isEmpty)
        }
    }

    @Test func compressedOverTCPFromSenderToListeningReceiver() throws {
        try withTemporaryDirectory { dir in
            let data = Data(String(repeating: "sluice moves bytes over the wire. ", count: 60_000).utf8)
            try write(data, to: "\(dir)/in")
            let port = try freePort()
            let receiver = try Running(sluiceBinary, ["copy", "-d", "tcp-listen:127.0.0.1:\(port)", "\(dir)/out"])
            let sender = try sluiceWhenListening(
                on: port, ["copy", "-z", "--stats=json", "\(dir)/in", "tcp:127.0.0.1:\(port)"])
            #expect(sender.status == 0)
            #expect(receiver.wait().status == 0)
            #expect(contents("\(dir)/out") == data)
            let stats = try #require(try JSONSerialization.jsonObject(with: sender.stderr) as? [String: Any])
            // What went over the wire is the compressed form.
            #expect((stats["bytes_written"] as? Int ?? .max) < data.count / 4)
        }
    }

    @Test func compressedToStdoutIsReadByGzip() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(700_000) + Data(repeating: 65, count: 300_000)
            try write(data, to: "\(dir)/in")
            let out = try sluice("copy", "-z", "\(dir)/in", "-")
            #expect(out.status == 0)
            try write(out.stdout, to: "\(dir)/in.gz")
            let gunzip = try Running(URL(fileURLWithPath: "/usr/bin/gzip"), ["-dc", "\(dir)/in.gz"]).wait()
            #expect(gunzip.status == 0)
            #expect(gunzip.stdout == data)
        }
    }

    @Test func corruptGzipIsADataError() throws {
        try withTemporaryDirectory { dir in
            let gz = try Running(URL(fileURLWithPath: "/usr/bin/gzip"), ["-c"])
            gz.write(Data(String(repeating: "corrupt me please ", count: 20_000).utf8))
            var bytes = [UInt8](gz.wait().stdout)
            bytes[bytes.count / 2] ^= 0xFF
            try write(Data(bytes), to: "\(dir)/bad.gz")
            let outcome = try sluice("copy", "-d", "\(dir)/bad.gz", "\(dir)/out")
            #expect(outcome.status == 65)
            #expect(outcome.stderrLines.count == 1)
            #expect(outcome.stderrText.hasPrefix("sluice: "))
            #expect(!FileManager.default.fileExists(atPath: "\(dir)/out"))
        }
    }

    @Test func copyToNetcatListener() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(2_000_000)
            try write(data, to: "\(dir)/in")
            let port = try freePort()
            let nc = try Running(URL(fileURLWithPath: "/bin/nc.openbsd"), ["-l", "127.0.0.1", "\(port)"])
            let sender = try sluiceWhenListening(on: port, ["copy", "\(dir)/in", "tcp:127.0.0.1:\(port)"])
            #expect(sender.status == 0)
            // nc -l exits once sluice shuts down its sending side.
            let received = nc.wait(closingInput: false)
            #expect(received.stdout == data)
        }
    }

    @Test func netcatIntoListeningCopy() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(2_000_000)
            try write(data, to: "\(dir)/in")
            let port = try freePort()
            let receiver = try Running(sluiceBinary, ["copy", "tcp-listen:127.0.0.1:\(port)", "\(dir)/out"])
            #expect(waitUntil { isListening(port: port) })
            let nc = try Running(URL(fileURLWithPath: "/bin/nc.openbsd"), ["-N", "127.0.0.1", "\(port)"])
            nc.write(data)
            #expect(nc.wait().status == 0)
            #expect(receiver.wait().status == 0)
            #expect(contents("\(dir)/out") == data)
        }
    }

    @Test func socatIntoListeningCopy() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(1_000_000)
            try write(data, to: "\(dir)/in")
            let port = try freePort()
            let receiver = try Running(sluiceBinary, ["copy", "tcp-listen:127.0.0.1:\(port)", "\(dir)/out"])
            #expect(waitUntil { isListening(port: port) })
            let socat = try Running(
                URL(fileURLWithPath: "/usr/bin/socat"), ["-u", "FILE:\(dir)/in", "TCP:127.0.0.1:\(port)"])
            #expect(socat.wait().status == 0)
            #expect(receiver.wait().status == 0)
            #expect(contents("\(dir)/out") == data)
        }
    }
}
