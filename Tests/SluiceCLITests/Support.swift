import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The built `sluice`, next to the test bundle.
let sluiceBinary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    .appendingPathComponent("sluice")

/// A key file for the tests' transfers, made once by `sluice keygen`: `send` and `receive`
/// authenticate by default, so the tests run them as users do (TLS 1.3 with a PSK), unless a
/// test says otherwise (`--insecure`, `--key-file`, `--code-file`).
let testKeyFile: String = {
    // Written here, as `sluice keygen` writes it, rather than by running it: this runs inside
    // a global's initializer, where starting a process could deadlock with tests starting theirs.
    let directory = NSTemporaryDirectory() + "sluice-test-key-\(getpid())"
    mkdir(directory, 0o700)
    let path = directory + "/key"
    var random = SystemRandomNumberGenerator()
    let hex = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &random)) }.joined()
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    let line = Array("sluice-key-v1 \(hex)\n".utf8)
    _ = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    close(fd)
    return path
}()

/// `arguments` of `sluice send` or `receive` with the tests' key file, unless they choose how to
/// authenticate themselves.
func withTestKey(_ arguments: [String]) -> [String] {
    guard let command = arguments.first, command == "send" || command == "receive" else { return arguments }
    let chosen = arguments.contains {
        $0 == "--insecure" || $0.hasPrefix("--key-file") || $0.hasPrefix("--code-file") || $0.hasPrefix("--relay")
    }
    return chosen ? arguments : [command, "--key-file", testKeyFile] + arguments.dropFirst()
}

/// The package's root directory, from this file's place in it.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// How a program run ended.
struct Outcome: Sendable {
    var status: Int32
    var stdout: Data
    var stderr: Data

    var stderrText: String { String(decoding: stderr, as: UTF8.self) }
    var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
    /// The lines of stderr, without the final newline.
    var stderrLines: [Substring] { stderrText.split(separator: "\n", omittingEmptySubsequences: false).dropLast() }
}

/// Writing to a child that has exited must fail with EPIPE, not kill the test process. Also
/// gives the children a state directory of their own (`XDG_STATE_HOME`: where `send` keeps its
/// resume key), so that the tests write nothing under the user's home.
let brokenPipesIgnored: Bool = {
    signal(SIGPIPE, SIG_IGN)
    let state = NSTemporaryDirectory() + "sluice-test-state-\(getpid())"
    mkdir(state, 0o700)
    setenv("XDG_STATE_HOME", state, 1)
    return true
}()

/// The resume key `send` uses in these tests (made by the first authenticated send).
var testResumeKeyPath: String {
    precondition(brokenPipesIgnored)
    return String(cString: getenv("XDG_STATE_HOME")) + "/sluice/resume.key"
}

/// A program running with pipes on its three standard descriptors, read in the background so
/// it never blocks on a full pipe.
final class Running: @unchecked Sendable {
    let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private let errors = Pipe()
    private let lock = NSLock()
    private var outData = Data()
    private var errData = Data()
    private let group = DispatchGroup()

    init(_ executable: URL = sluiceBinary, _ arguments: [String], environment: [String: String] = [:]) throws {
        precondition(brokenPipesIgnored)
        process.executableURL = executable
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        process.arguments = executable == sluiceBinary ? withTestKey(arguments) : arguments
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        for (pipe, isOutput) in [(output, true), (errors, false)] {
            group.enter()
            let handle = pipe.fileHandleForReading
            Thread.detachNewThread { [self] in
                let data = handle.readDataToEndOfFile()
                lock.withLock {
                    if isOutput { outData = data } else { errData = data }
                }
                group.leave()
            }
        }
    }

    /// A test that fails before waiting must not leave its child running (a listener would
    /// wait forever).
    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    var pid: Int32 { process.processIdentifier }

    func write(_ data: Data) {
        try? input.fileHandleForWriting.write(contentsOf: data)
    }

    func closeInput() {
        try? input.fileHandleForWriting.close()
    }

    func signal(_ number: Int32) {
        kill(pid, number)
    }

    /// Waits for the end (closing stdin first unless told not to) for at most `limit`, then
    /// kills the program: a test fails rather than hangs when an exit it waits for never comes.
    func wait(closingInput: Bool = true, within limit: Duration) -> Outcome {
        if closingInput { closeInput() }
        if !waitUntil(limit, { !process.isRunning }) { kill(pid, SIGKILL) }
        return wait(closingInput: closingInput)
    }

    /// Waits for the end (closing stdin first unless told not to).
    func wait(closingInput: Bool = true) -> Outcome {
        if closingInput { closeInput() }
        process.waitUntilExit()
        group.wait()
        if !closingInput { closeInput() }
        return lock.withLock { Outcome(status: process.terminationStatus, stdout: outData, stderr: errData) }
    }
}

/// Runs `sluice` with `arguments`, feeding it `stdin`.
@discardableResult
func sluice(_ arguments: [String], stdin: Data? = nil) throws -> Outcome {
    let running = try Running(sluiceBinary, arguments)
    if let stdin { running.write(stdin) }
    return running.wait()
}

@discardableResult
func sluice(_ arguments: String..., stdin: Data? = nil) throws -> Outcome {
    try sluice(arguments, stdin: stdin)
}

/// A temporary directory, removed when `body` returns.
func withTemporaryDirectory<T>(_ body: (String) throws -> T) throws -> T {
    let path = NSTemporaryDirectory() + "sluice-cli-test-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try body(path)
}

/// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
func randomBytes(_ count: Int, seed: UInt64 = 0x9E37_79B9_7F4A_7C15) -> Data {
    var state = seed | 1
    var out = Data(count: count)
    out.withUnsafeMutableBytes { (raw: UnsafeMutableRawBufferPointer) in
        var i = 0
        while i < count {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            withUnsafeBytes(of: state) { word in
                for j in 0..<min(8, count - i) { raw[i + j] = word[j] }
            }
            i += 8
        }
    }
    return out
}

/// The names in `directory`, hidden ones included.
func directoryEntries(_ directory: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
}

func write(_ data: Data, to path: String) throws {
    try data.write(to: URL(fileURLWithPath: path))
}

/// Writes a secret (a pairing code) that only its owner may read, as `send --code-file` requires.
func writeSecret(_ text: String, to path: String) throws {
    try write(Data(text.utf8), to: path)
    chmod(path, 0o600)
}

func contents(_ path: String) -> Data? {
    FileManager.default.contents(atPath: path)
}

/// Waits until `condition` holds or `limit` passes; returns whether it holds. For what another
/// process brings about (a file appears, a port listens, a line is printed): the deadline only
/// bounds a failure, and the short pause between checks only spares the CPU.
@discardableResult
func waitUntil(_ limit: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now.advanced(by: limit)
    while !condition() {
        if ContinuousClock.now >= deadline { return condition() }
        usleep(2_000)
    }
    return true
}

/// 127.0.0.1:`port` as a socket address.
func loopback(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = port.bigEndian
    return address
}

/// A blocking TCP socket connected to 127.0.0.1:`port` (to close), or nil if it cannot connect.
func connectToLoopback(port: UInt16) -> Int32? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    var address = loopback(port: port)
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
        }
    }
    guard connected else {
        close(fd)
        return nil
    }
    return fd
}

/// Whether a socket listens on TCP 127.0.0.1:`port` (a LISTEN line in /proc/net/tcp).
func isListening(port: UInt16) -> Bool {
    guard let table = try? String(contentsOfFile: "/proc/net/tcp", encoding: .utf8) else { return false }
    let local = String(format: "0100007F:%04X", port)
    return table.split(separator: "\n").contains { line in
        let fields = line.split(separator: " ")
        return fields.count > 3 && fields[1] == local && fields[3] == "0A"
    }
}

/// The size of the file at `path`, or nil if there is none.
func fileSize(_ path: String) -> Int? {
    var st = stat()
    return lstat(path, &st) == 0 ? Int(st.st_size) : nil
}
