import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// True once the zlib stages are wired into the CLI (`-z` no longer fails with 69).
let compressionIsBuiltIn: Bool = {
    guard let outcome = try? sluice("copy", "-z", "-", "-", stdin: Data()) else { return false }
    return !outcome.stderrText.contains("not built into this version")
}()

/// True once the socket endpoints are wired into the CLI.
let socketsAreBuiltIn: Bool = {
    guard let outcome = try? sluice("copy", "-", "unix:/nonexistent/sluice.sock", stdin: Data()) else { return false }
    return !outcome.stderrText.contains("not built into this version")
}()

/// A TCP port that was free a moment ago: bound to 127.0.0.1 port 0, read back, released.
func freePort() throws -> UInt16 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw POSIXError(.EIO) }
    defer { close(fd) }
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
    guard bound else { throw POSIXError(.EADDRINUSE) }
    return UInt16(bigEndian: address.sin_port)
}

/// Runs `sluice` until it is not refused (the listener may not be up yet), for at most ~5 s.
func sluiceUntilAccepted(_ arguments: [String]) throws -> Outcome {
    var outcome = try sluice(arguments)
    var tries = 0
    while outcome.status == 69 && outcome.stderrText.contains("refused") && tries < 100 {
        usleep(50_000)
        outcome = try sluice(arguments)
        tries += 1
    }
    return outcome
}

/// The tests of what waits for the compression and socket branches. Each switches itself on
/// once the feature is wired in (see the `// WIRE:` comments), and the "not built in" tests in
/// CopyCommandTests switch themselves off.
@Suite struct WiredFeatureTests {
    @Test(.enabled(if: compressionIsBuiltIn))
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

    @Test(.enabled(if: socketsAreBuiltIn))
    func compressedCopyOverAUnixSocket() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(2_000_000)
            try write(data, to: "\(dir)/in")
            let receiver = try Running(sluiceBinary, ["copy", "unix-listen:\(dir)/s", "\(dir)/out"])
            var waited = 0
            while !FileManager.default.fileExists(atPath: "\(dir)/s") && waited < 100 {
                usleep(50_000)
                waited += 1
            }
            #expect(try sluice("copy", "\(dir)/in", "unix:\(dir)/s").status == 0)
            #expect(receiver.wait().status == 0)
            #expect(contents("\(dir)/out") == data)
            #expect(!FileManager.default.fileExists(atPath: "\(dir)/s"))
        }
    }

    @Test(.enabled(if: socketsAreBuiltIn))
    func copyOverTCP() throws {
        try withTemporaryDirectory { dir in
            let data = randomBytes(3_000_000)
            try write(data, to: "\(dir)/in")
            let port = try freePort()
            let receiver = try Running(sluiceBinary, ["copy", "tcp-listen:127.0.0.1:\(port)", "\(dir)/out"])
            let sender = try sluiceUntilAccepted(["copy", "\(dir)/in", "tcp:127.0.0.1:\(port)"])
            #expect(sender.status == 0)
            #expect(receiver.wait().status == 0)
            #expect(contents("\(dir)/out") == data)
        }
    }

    @Test(.enabled(if: socketsAreBuiltIn))
    func refusedAndUnknownHostAreUnavailable() throws {
        let refused = try sluice("copy", "-", "tcp:127.0.0.1:\(try freePort())", stdin: Data("x".utf8))
        #expect(refused.status == 69)
        #expect(refused.stderrLines.count == 1)
        #expect(refused.stderrText.contains("127.0.0.1"))
        let unknown = try sluice("copy", "-", "tcp:no-such-host.invalid:9", stdin: Data("x".utf8))
        #expect(unknown.status == 69)
        #expect(unknown.stderrText.contains("no-such-host.invalid"))
    }

    @Test(.enabled(if: socketsAreBuiltIn))
    func interruptedListenerRemovesItsSocketFile() throws {
        try withTemporaryDirectory { dir in
            let receiver = try Running(sluiceBinary, ["copy", "unix-listen:\(dir)/s", "\(dir)/out"])
            var waited = 0
            while !FileManager.default.fileExists(atPath: "\(dir)/s") && waited < 100 {
                usleep(50_000)
                waited += 1
            }
            receiver.signal(SIGINT)
            #expect(receiver.wait().status == 130)
            #expect(directoryEntries(dir).isEmpty)
        }
    }
}
