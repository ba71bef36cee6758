import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A blocking TCP socket from `source` (a loopback address) to 127.0.0.1:`port`, or nil.
func connect(from source: String, toLoopbackPort port: UInt16) -> Int32? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    var local = sockaddr_in()
    local.sin_family = sa_family_t(AF_INET)
    local.sin_addr.s_addr = inet_addr(source)
    var remote = loopback(port: port)
    let connected =
        withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        && withUnsafePointer(to: &remote) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    guard connected else {
        close(fd)
        return nil
    }
    return fd
}

/// The resident set of process `pid`, in KiB (VmRSS in /proc).
func residentKiB(of pid: Int32) -> Int? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
        let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
    else { return nil }
    return Int(line.split(separator: " ").dropFirst().first ?? "")
}

/// Raises this process's open-file limit as far as the hard limit allows: the floods hold
/// hundreds of sockets while other tests run.
let testDescriptorsRaised: Bool = {
    var limit = rlimit()
    guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return false }
    limit.rlim_cur = limit.rlim_max
    return setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0
}()

/// Strangers who connect and then say nothing (or start a TLS handshake and stall) hold no
/// session slot: a real sender from another address is served at once, and the receiver's
/// memory stays bounded.
@Suite(.ownThreads) struct StrangerFloodTests {
    @Test(arguments: [false, true])
    func idleStrangersDoNotLockOutASender(insecure: Bool) throws {
        #expect(testDescriptorsRaised)
        try withTemporaryDirectory { dir in
            let inbox = "\(dir)/in"
            mkdir(inbox, 0o755)
            let data = randomBytes(300_000, seed: 71)
            try write(data, to: "\(dir)/real.bin")
            let auth = insecure ? ["--insecure"] : []
            let receiver = try ReceiverProcess(auth + ["--dir", inbox])
            let port = try receiver.port()
            var held: [Int32] = []
            defer { for fd in held { close(fd) } }
            // 64 TLS handshakes that stop inside the ClientHello (a record announcing 512 bytes,
            // 16 of them sent), then 300 connections that send the magic and nothing more; all
            // from 127.0.0.2.
            let header: [UInt8] = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]
            let partialHello = header + [UInt8](repeating: 7, count: 11)
            for index in 0..<364 {
                guard let fd = connect(from: "127.0.0.2", toLoopbackPort: port) else { continue }
                held.append(fd)
                let bytes = index < 64 ? partialHello : Array("SLUICE\r\n".utf8)
                _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            }
            #expect(held.count > 300)
            let sent = try Running(sluiceBinary, ["send"] + auth + ["\(dir)/real.bin", "127.0.0.1:\(port)"]).wait(
                within: .seconds(30))
            #expect(sent.status == 0, "\(sent.stderrText)")
            #expect(contents("\(inbox)/real.bin") == data)
            // Bounded by the waiting connections' caps, not by how many strangers came.
            let rss = residentKiB(of: receiver.process.processIdentifier)
            #expect(rss != nil && rss! < 96 << 10, "receiver RSS \(String(describing: rss)) KiB")
            #expect(receiver.stderrText.contains("real.bin"), "\(receiver.stderrText)")
            _ = receiver.stop()
        }
    }
}
