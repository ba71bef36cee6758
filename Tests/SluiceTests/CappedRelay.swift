@testable import Sluice

/// A TCP relay on a loop between clients and `target` (127.0.0.1) that caps each connection's
/// client-to-target direction at `bytesPerSecond` (the target's answers pass freely), counts
/// the bytes each connection carried, and can cut a connection: a link that shapes each flow,
/// as the ones `send --streams` is for.
final class CappedRelay {
    let listener: SocketListener
    let loop: EventLoop
    let target: UInt16
    let bytesPerSecond: Int
    /// Per connection, in the order accepted: the copier toward the target and the one back.
    private(set) var connections: [(up: LoopCopier, down: LoopCopier)] = []
    /// Connection `index` is cut once its client-to-target bytes reach `bytes`.
    var cutAfter: (index: Int, bytes: Int)?

    init(to target: UInt16, bytesPerSecond: Int, on loop: EventLoop) throws {
        self.loop = loop
        self.target = target
        self.bytesPerSecond = bytesPerSecond
        listener = try Socket.listen(host: "127.0.0.1", port: 0)
        try listener.accept(on: loop) { [unowned self] input, output, _ in
            let index = connections.count
            let (upIn, upOut) = Socket.connect(host: "127.0.0.1", port: target)
            let up = LoopCopier(source: input, sink: upOut, chunkSize: 16 << 10, bytesPerSecond: bytesPerSecond)
            let down = LoopCopier(source: upIn, sink: output, chunkSize: 16 << 10)
            up.onBytes = { [unowned self, unowned up] in
                if let cut = cutAfter, cut.index == index, up.total >= cut.bytes {
                    cutAfter = nil
                    self.cut(index)
                }
            }
            connections.append((up, down))
            up.start(on: loop)
            down.start(on: loop)
        }
    }

    deinit { listener.close() }

    var port: UInt16 { listener.port }

    /// Bytes each connection carried toward the target.
    var bytesPerConnection: [Int] { connections.map(\.up.total) }

    /// Cuts connection `index` at once, both ways (its client and the target see it end).
    func cut(_ index: Int) {
        let (up, down) = connections[index]
        up.cut()
        down.cut()
    }
}
