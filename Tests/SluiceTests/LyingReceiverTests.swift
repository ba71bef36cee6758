import Dispatch
import Foundation
import Synchronization
import TestThreads
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// A receiver played by a script on a blocking socket: it says HELLO with `capabilities`, then
/// answers each frame the sender sends with what `respond` returns (bytes to write, or nil to
/// hang up).
private final class ScriptedReceiver: Sendable {
    let port: UInt16
    private let listener: Int32

    init(capabilities: Set<String>, respond: @escaping @Sendable (Frame) -> [UInt8]?) throws {
        (listener, port) = try listenOnLoopback()
        Thread.detachNewThread { [self] in serve(capabilities, respond) }
    }

    deinit { close(listener) }

    private func serve(_ capabilities: Set<String>, _ respond: @Sendable (Frame) -> [UInt8]?) {
        let fd = accept(listener, nil, nil)
        guard fd >= 0 else { return }
        defer { close(fd) }
        func send(_ bytes: [UInt8]) { _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } }
        send(Wire.magic + Frame.hello(version: 1, capabilities: capabilities).encoded)
        var decoder = FrameDecoder(direction: .toReceiver)
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            while true {
                let step = pending.withUnsafeBytes { decoder.next($0) }
                guard case .item(let item, let consumed) = step else { break }
                pending.removeFirst(consumed)
                guard case .frame(let frame) = item else { continue }
                guard let answer = respond(frame) else { return }
                send(answer)
            }
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { return }
            pending += buffer[0..<n]
        }
    }
}

/// A sender against receivers that lie about what they have.
@Suite("A sender and a receiver that lies", .ownThreads)
struct LyingReceiverTests {
    static func send(_ path: String, to receiver: ScriptedReceiverBox) throws -> TransferSummary {
        let loop = try EventLoop()
        var options = TransferSendOptions()
        options.sync = true
        let sender = try TransferSender(paths: [path], options: options)
        let (input, output) = Socket.connect(host: "127.0.0.1", port: receiver.port)
        let box = SummaryBox()
        sender.start(input: input, output: output, on: loop) { box.summary = $0 }
        #expect(runLoop(loop, for: .seconds(20)) { box.summary != nil })
        return try #require(box.summary)
    }

    /// SIGS for a basis of 2^60 bytes, out of order, of another block size, or more than the
    /// basis has: the sender ends the session as a violation and sends no data.
    @Test(arguments: ["huge", "largest", "out of order", "block size", "too many"])
    func signaturesThatLie(_ lie: String) throws {
        try withTemporaryDirectory { root in
            let file = root + "/big.bin"
            try writeFile(file, randomBytes(2 << 20, seed: 1))
            let basis: UInt64 = lie == "huge" ? 1 << 60 : lie == "largest" ? .max : 2 << 20
            let blockSize = lie == "block size" ? 4096 : Delta.blockSize(forBasis: basis)
            let signature = Delta.Signature(weak: 1, strong: 2)
            let count = lie == "too many" ? Int(Delta.blockCount(basis, blockSize)) + 1 : 1
            let batch = SignatureBatch(
                blockSize: blockSize, size: basis, first: lie == "out of order" ? 7 : 0,
                signatures: Array(repeating: signature, count: min(count, Delta.signaturesPerMessage)))
            let sawData = Mutex(false)
            let receiver = try ScriptedReceiver(capabilities: ["sha256", "sync", "delta"]) { frame in
                switch frame {
                case .check:
                    return Frame.have(HaveAnswer(status: .differs, differences: Wire.HaveDifference.mtime)).encoded
                case .file(let header) where header.delta:
                    var out: [UInt8] = []
                    var first = batch.first
                    var left = count
                    while left > 0 {
                        let n = min(left, Delta.signaturesPerMessage)
                        var part = batch
                        part.first = first
                        part.signatures = Array(repeating: signature, count: n)
                        out += Frame.signatures(part).encoded
                        first += UInt64(n)
                        left -= n
                    }
                    return out + Frame.accept(offset: 0).encoded
                case .copy:
                    sawData.withLock { $0 = true }
                    return []
                default:
                    return []
                }
            }
            let summary = try Self.send(file, to: ScriptedReceiverBox(receiver))
            #expect(summary.error?.code == .protocolViolation, "\(lie): \(String(describing: summary.error))")
            #expect(!sawData.withLock { $0 }, "\(lie): a COPY went out against lying signatures")
        }
    }
}

/// Hands a scripted receiver's port to the send helper.
struct ScriptedReceiverBox {
    fileprivate let receiver: ScriptedReceiver
    fileprivate init(_ receiver: ScriptedReceiver) { self.receiver = receiver }
    var port: UInt16 { receiver.port }
}
