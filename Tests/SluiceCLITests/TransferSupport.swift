import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A running `sluice receive`, its stderr read as it comes so the port it prints can be used.
final class ReceiverProcess: @unchecked Sendable {
    let process = Process()
    private let errors = Pipe()
    private let lock = NSLock()
    private var errData = Data()
    private let done = DispatchGroup()

    /// Starts `sluice receive ARGUMENTS --listen 127.0.0.1:0` (unless `--listen` is given).
    /// With `pairingCode`, the receiver makes a one-time code (printed on stderr) instead of
    /// using the tests' key file.
    /// With `fileSizeLimit` (KiB), the receiver runs under that `RLIMIT_FSIZE` with `SIGXFSZ`
    /// ignored: its writes past the limit fail with EFBIG, as on a disk that fills up. With
    /// `openFileLimit`, under that `RLIMIT_NOFILE` (`ulimit -n`: soft and hard, or with
    /// `softOnly` the soft limit alone, which the receiver may raise). With `umask` (octal), under
    /// that file-creation mask.
    init(
        _ arguments: [String], pairingCode: Bool = false, environment: [String: String] = [:],
        fileSizeLimit: Int? = nil, openFileLimit: Int? = nil, softOnly: Bool = false, umask: String? = nil
    ) throws {
        precondition(brokenPipesIgnored)
        process.executableURL = sluiceBinary
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        var arguments = ["receive"] + arguments
        if !arguments.contains("--listen") { arguments += ["--listen", "127.0.0.1:0"] }
        process.arguments = pairingCode ? arguments : withTestKey(arguments)
        var limits: [String] = []
        // bash's ulimit counts KiB; an ignored signal stays ignored across exec.
        if let fileSizeLimit { limits.append("trap '' XFSZ; ulimit -f \(fileSizeLimit)") }
        if let openFileLimit { limits.append("ulimit \(softOnly ? "-S " : "")-n \(openFileLimit)") }
        if let umask { limits.append("umask \(umask)") }
        if !limits.isEmpty {
            process.arguments =
                ["-c", limits.joined(separator: " && ") + " && exec \"$0\" \"$@\"", sluiceBinary.path]
                + (process.arguments ?? [])
            process.executableURL = URL(fileURLWithPath: "/bin/bash")
        }
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = errors
        try process.run()
        done.enter()
        let handle = errors.fileHandleForReading
        Thread.detachNewThread { [self] in
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                lock.withLock { errData.append(chunk) }
            }
            done.leave()
        }
    }

    var stderrText: String { lock.withLock { String(decoding: errData, as: UTF8.self) } }

    /// The port from `sluice: receiving into DIR on 127.0.0.1:PORT`, waiting up to 10 s.
    func port() throws -> UInt16 {
        for _ in 0..<1000 {
            let text = stderrText
            if let match = text.firstMatch(of: /receiving into .* on 127\.0\.0\.1:([0-9]+)\n/) {
                return UInt16(match.output.1)!
            }
            if !process.isRunning { break }
            usleep(10_000)
        }
        throw ReceiverError(message: "no port printed: \(stderrText)")
    }

    /// `127.0.0.1:PORT`.
    func address() throws -> String { "127.0.0.1:\(try port())" }

    func signal(_ number: Int32) { kill(process.processIdentifier, number) }

    /// Waits for the exit (at most `seconds`, then SIGKILL) and returns status and stderr.
    func wait(seconds: Double = 20) -> (status: Int32, stderr: String) {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning { signal(SIGKILL) }
        process.waitUntilExit()
        done.wait()
        return (process.terminationStatus, stderrText)
    }

    /// Stops a receiver that serves on (SIGINT) and returns how it ended.
    func stop() -> (status: Int32, stderr: String) {
        signal(SIGINT)
        return wait()
    }
}

struct ReceiverError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}

/// Mode bits (`st_mode & 0o7777`) and mtime seconds of `path`, without following a link.
func modeAndMtime(_ path: String) -> (mode: UInt32, mtime: Int) {
    var st = stat()
    guard lstat(path, &st) == 0 else { return (0, -1) }
    return (UInt32(st.st_mode & 0o7777), Int(st.st_mtim.tv_sec))
}

/// Sets the mtime of `path` to `seconds` since the epoch.
func setMtime(_ path: String, _ seconds: Int) {
    var times = [
        timespec(tv_sec: seconds, tv_nsec: 0), timespec(tv_sec: seconds, tv_nsec: 0),
    ]
    utimensat(AT_FDCWD, path, &times, 0)
}

/// Runs `diff -r a b`: true when the trees are identical.
func treesIdentical(_ a: String, _ b: String) throws -> Bool {
    let diff = Process()
    diff.executableURL = URL(fileURLWithPath: "/usr/bin/diff")
    diff.arguments = ["-r", a, b]
    diff.standardOutput = FileHandle.nullDevice
    diff.standardError = FileHandle.nullDevice
    try diff.run()
    diff.waitUntilExit()
    return diff.terminationStatus == 0
}

/// The JSON object on the last line of `text` that starts with `{`.
func lastJSONObject(_ text: String) -> [String: Any]? {
    guard let line = text.split(separator: "\n").last(where: { $0.hasPrefix("{") }) else { return nil }
    return (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
}
