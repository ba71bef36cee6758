import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A running `sluice` whose stderr is read as it comes, so that a line it prints (the relay's
/// address, the sender's code) can be waited for while it runs.
final class LiveSluice: @unchecked Sendable {
    let process = Process()
    private let errors = Pipe()
    private let output = Pipe()
    private let lock = NSLock()
    private var errData = Data()
    private var outData = Data()
    private let done = DispatchGroup()

    /// Starts `sluice ARGUMENTS` (with the tests' key file for send and receive, unless they
    /// authenticate otherwise or `keyed` is false).
    /// `inside` runs it through another program first (`ip netns exec NAME`).
    init(_ arguments: [String], environment: [String: String] = [:], keyed: Bool = true, inside: [String] = [])
        throws
    {
        precondition(brokenPipesIgnored)
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let arguments = keyed ? withTestKey(arguments) : arguments
        if let program = inside.first {
            process.executableURL = URL(fileURLWithPath: program)
            process.arguments = Array(inside.dropFirst()) + [sluiceBinary.path] + arguments
        } else {
            process.executableURL = sluiceBinary
            process.arguments = arguments
        }
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        for (pipe, isError) in [(errors, true), (output, false)] {
            done.enter()
            let handle = pipe.fileHandleForReading
            Thread.detachNewThread { [self] in
                while true {
                    let chunk = handle.availableData
                    if chunk.isEmpty { break }
                    lock.withLock { isError ? errData.append(chunk) : outData.append(chunk) }
                }
                done.leave()
            }
        }
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    var stderrText: String { lock.withLock { String(decoding: errData, as: UTF8.self) } }
    var stdoutText: String { lock.withLock { String(decoding: outData, as: UTF8.self) } }

    /// The first capture of `pattern` in stderr, waiting for it (at most 20 s, or until the
    /// program ends without printing it).
    func line(_ pattern: Regex<(Substring, Substring)>) throws -> String {
        var found: String?
        _ = waitUntil(.seconds(20)) {
            if let match = stderrText.firstMatch(of: pattern) { found = String(match.output.1) }
            return found != nil || !process.isRunning
        }
        if found == nil, let match = stderrText.firstMatch(of: pattern) { found = String(match.output.1) }
        guard let found else { throw ReceiverError(message: "never printed \(pattern): \(stderrText)") }
        return found
    }

    /// Waits for the end (at most `seconds`, then SIGKILL).
    func wait(seconds: Double = 30) -> (status: Int32, stderr: String) {
        if !waitUntil(.seconds(seconds), { !process.isRunning }) { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        done.wait()
        return (process.terminationStatus, stderrText)
    }
}

/// A `sluice relay` on a free port of 127.0.0.1.
final class RunningRelay: @unchecked Sendable {
    let live: LiveSluice
    let port: UInt16
    let host: String

    /// `sluice relay --listen HOST:0 ARGUMENTS`, run `inside` another program if given.
    init(_ arguments: [String] = [], host: String = "127.0.0.1", inside: [String] = []) throws {
        live = try LiveSluice(["relay", "--listen", "\(host):0"] + arguments, inside: inside)
        let text = try live.line(/relaying on [0-9.]+:([0-9]+)/)
        guard let port = UInt16(text) else { throw ReceiverError(message: "relay port '\(text)'") }
        (self.port, self.host) = (port, host)
    }

    var address: String { "\(host):\(port)" }

    /// Stops it (SIGTERM) and returns how it ended and what it printed on stdout.
    func stop() -> (status: Int32, stderr: String, stdout: String) {
        live.process.terminate()
        let (status, stderr) = live.wait()
        return (status, stderr, live.stdoutText)
    }
}

/// A TCP proxy on 127.0.0.1 in front of `targetPort`, for any number of connections, that
/// keeps every byte it passes either way: what a relay (or anyone on the path) sees.
final class CapturingProxy: @unchecked Sendable {
    let port: UInt16
    private let listener: Int32
    private let lock = NSLock()
    private var seen = Data()

    init(to targetPort: UInt16) throws {
        let (fd, port) = try boundLoopbackSocket()
        guard listen(fd, 64) == 0 else {
            close(fd)
            throw POSIXError(.EADDRINUSE)
        }
        (listener, self.port) = (fd, port)
        Thread.detachNewThread { [self] in
            while true {
                let client = accept(listener, nil, nil)
                guard client >= 0 else { return }
                guard let server = connectToLoopback(port: targetPort) else {
                    close(client)
                    continue
                }
                Thread.detachNewThread { [self] in forward(client, server) }
            }
        }
    }

    deinit { shutdown(listener, Int32(SHUT_RDWR)) }

    /// Everything passed so far, both directions.
    var captured: Data { lock.withLock { seen } }

    private func forward(_ client: Int32, _ server: Int32) {
        defer {
            close(client)
            close(server)
        }
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        var fds = [
            pollfd(fd: client, events: Int16(POLLIN), revents: 0),
            pollfd(fd: server, events: Int16(POLLIN), revents: 0),
        ]
        var open = [true, true]
        while open[0] || open[1] {
            guard poll(&fds, 2, 60_000) > 0 else { return }
            for index in 0..<2 where fds[index].revents != 0 && open[index] {
                let (from, to) = index == 0 ? (client, server) : (server, client)
                let n = buffer.withUnsafeMutableBytes { recv(from, $0.baseAddress, $0.count, 0) }
                if n <= 0 {
                    // The end passed on as an end of the other direction.
                    open[index] = false
                    fds[index].events = 0
                    shutdown(to, Int32(SHUT_WR))
                    continue
                }
                lock.withLock { seen.append(contentsOf: buffer[0..<n]) }
                var sent = 0
                while sent < n {
                    let m = buffer.withUnsafeBytes { send(to, $0.baseAddress! + sent, n - sent, Int32(MSG_NOSIGNAL)) }
                    if m <= 0 { return }
                    sent += m
                }
            }
        }
    }
}

/// `sluice send --relay ADDRESS ARGUMENTS`, running, and the code it printed.
/// `command` replaces `send --relay ADDRESS ARGUMENTS` (a sender with no relay).
func relaySender(
    _ relay: String, _ arguments: [String], environment: [String: String] = [:], inside: [String] = [],
    command: [String]? = nil
) throws -> (LiveSluice, String) {
    let sender = try LiveSluice(
        command ?? ["send", "--relay", relay] + arguments, environment: environment, keyed: false, inside: inside)
    let code = try sender.line(/code: ([0-9]+-[a-z-]+)\n/)
    return (sender, code)
}
