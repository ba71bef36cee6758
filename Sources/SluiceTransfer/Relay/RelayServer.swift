import CSluiceLinux
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The rendezvous and relay server of `sluice relay` (relay protocol version 1): a sender asks
/// for a nameplate, a receiver joins it, and the relay pairs the two connections and splices
/// their bytes both ways (`splice(2)` through a pipe per direction, no copy through user
/// space). It sees the nameplate or stream token, byte counts and the peers' addresses; after
/// `PAIRED`, only what the peers send each other (the PAKE's messages, then TLS ciphertext).
///
/// Strangers reach it, so it keeps them to limits: a hello within `helloTimeout`, connections
/// per address and in all (`ERR busy`), waiting nameplates and tokens expire, idle pairs are
/// cut, optional rate limits per pair and in all.
///
/// ```swift
/// var options = RelayOptions()
/// options.port = 0
/// let relay = try RelayServer(options) { line in print(line) }
/// print("relaying on \(relay.address)")
/// relay.run()          // until stop(), from any thread
/// print(relay.statistics.pairsMade)
/// ```
///
/// `init` binds and listens; `run` serves on the calling thread until `stop`.
public final class RelayServer: @unchecked Sendable {
    /// The address listened on; for port 0, with the port the kernel chose.
    public let address: SocketAddress
    public let options: RelayOptions

    private let loop: EventLoop
    private let listenFD: Int32
    private let log: @Sendable (String) -> Void
    private let counters = Mutex(RelayStatistics())
    private let startedAt: UInt64

    // The loop's state (used on its thread only).
    private var rendezvous: RelayRendezvous
    private var connections: [UInt64: RelayConnection] = [:]
    private var perAddress: [String: Int] = [:]
    private var expiryTimers: [RelayRendezvous.Key: LoopTimer] = [:]
    /// Who opened each nameplate or first waited on each token (its host), and how many of
    /// those each host holds, waiting or burned: `maxKeysPerAddress` bounds them.
    private var keyOwners: [RelayRendezvous.Key: String] = [:]
    private var keysByHost: [String: Int] = [:]
    private var nextID: UInt64 = 0
    private var acceptPause: LoopTimer?
    private var stopping = false
    private var random = SystemRandomNumberGenerator()
    /// `--rate-limit-total`: the relay's bucket, and the pairs waiting for it.
    private(set) var totalLimiter: RateLimiter?
    private var totalWaiters: [ObjectIdentifier: RelayPair] = [:]
    /// SIGPIPE is not ignored by the process: keep it off each splice into a socket.
    let suppressSIGPIPE = !isSIGPIPEIgnored()

    /// Binds `options.host`:`options.port` and listens. `log` is called on the relay's thread
    /// with one line per pairing, pair ended, expiry and refusal.
    public init(_ options: RelayOptions, log: @escaping @Sendable (String) -> Void = { _ in }) throws(SluiceError) {
        self.options = options
        self.log = log
        loop = try Self.makeLoop()
        let addresses = try Socket.resolve(host: options.host, port: options.port, passive: true)
        var lastError = SluiceError(.system(.invalidArgument), operation: "listen", subject: options.host)
        var bound: (Int32, SocketAddress)?
        for candidate in addresses {
            switch Self.listen(on: candidate) {
            case .success(let result):
                bound = result
            case .failure(let error):
                lastError = error
            }
            if bound != nil { break }
        }
        guard let (fd, address) = bound else { throw lastError }
        listenFD = fd
        self.address = address
        rendezvous = RelayRendezvous(lifetime: options.expire.nanoseconds)
        startedAt = monotonicNanoseconds()
    }

    deinit {
        closeDescriptor(listenFD)
    }

    /// The relay's own event loop.
    private static func makeLoop() throws(SluiceError) -> EventLoop {
        switch Result(catching: { try EventLoop() }) {
        case .success(let loop): return loop
        case .failure(let error):
            throw (error as? SluiceError) ?? SluiceError(.unavailable, operation: "event loop")
        }
    }

    /// A listening socket on `address` (`SO_REUSEADDR`, a backlog of 1024).
    private static func listen(on address: SocketAddress) -> Result<(Int32, SocketAddress), SluiceError> {
        Result { () throws(SluiceError) in
            let fd = try Socket.makeSocket(for: address)
            do throws(SluiceError) {
                try Socket.setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1, address.description)
                try address.withSockAddr { sa, length throws(SluiceError) in
                    _ = try syscallValue("bind", address.description) { Glibc.bind(fd, sa, length) }
                }
                try syscallValue("listen", address.description) { Glibc.listen(fd, 1024) }
                return (fd, try SocketAddress.local(of: fd))
            } catch {
                closeDescriptor(fd)
                throw error
            }
        }
    }

    // MARK: Running

    /// Serves on the calling thread until `stop()`; then closes every connection (pairs are
    /// cut, and counted) and returns.
    public func run() {
        loop.execute { [self] in start() }
        loop.run()
    }

    /// Stops `run` (any thread): no more connections are accepted and those held are closed.
    public func stop() {
        loop.execute { [self] in shutDown() }
    }

    /// What the relay did so far (any thread).
    public var statistics: RelayStatistics {
        var snapshot = counters.withLock { $0 }
        snapshot.seconds = Double(monotonicNanoseconds() - startedAt) / 1e9
        return snapshot
    }

    /// Updates the statistics (under their lock: `statistics` is read from any thread).
    private func count(_ change: (inout RelayStatistics) -> Void) {
        counters.withLock { change(&$0) }
    }

    /// On the loop, as `run` starts: keeps the loop running, makes the total rate limiter, and
    /// starts accepting.
    private func start() {
        loop.retainSource()
        if let total = options.rateLimitTotal {
            totalLimiter = RateLimiter(bytesPerSecond: total, loop: { [weak self] in self?.loop }) { [weak self] in
                self?.resumeTotalWaiters()
            }
        }
        if !watchListener() { log("cannot watch the listening socket; stopping") }
    }

    /// Watches the listening socket; false (and the relay stops) when the loop refuses it.
    private func watchListener() -> Bool {
        let result = Result { () throws(SluiceError) in
            try loop.watch(fd: listenFD, interest: .read) { [weak self] _ in self?.acceptAll() }
        }
        if case .success = result { return true }
        shutDown()
        return false
    }

    /// Stops accepting, closes every connection (pairs end as `.stopped`) and ends `run`.
    private func shutDown() {
        guard !stopping else { return }
        stopping = true
        acceptPause?.cancel()
        loop.unwatch(fd: listenFD)
        for connection in Array(connections.values) {
            if case .paired(let pair, _) = connection.phase {
                pair.close(.stopped)
            } else {
                drop(connection)
            }
        }
        for timer in expiryTimers.values { timer.cancel() }
        expiryTimers.removeAll()
        totalLimiter?.cancel()
        totalWaiters.removeAll()
        loop.releaseSource()
        loop.stop()
    }

    // MARK: Accepting

    /// The listening socket is readable: accept what is pending (a bounded number per turn).
    private func acceptAll() {
        for _ in 0..<64 {
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let flags = Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
            let fd = withUnsafeMutablePointer(to: &storage) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                    retryingOnInterrupt { accept4(listenFD, sa, &length, flags) }
                }
            }
            guard fd >= 0 else {
                switch errno {
                case EAGAIN, EWOULDBLOCK:
                    return
                case ECONNABORTED, EPROTO, EPERM, ENETDOWN, ENOPROTOOPT, EHOSTDOWN, ENONET, EHOSTUNREACH, EOPNOTSUPP,
                    ENETUNREACH:
                    continue
                default:
                    // Out of descriptors or memory: pause, so that closing connections frees some.
                    pauseAccepting()
                    return
                }
            }
            let peer = withUnsafeBytes(of: &storage) { raw in
                raw.baseAddress.flatMap { SocketAddress(sockaddr: $0, length: length) }
            }
            admit(fd, peer: peer)
        }
    }

    /// Stops accepting for 100 ms (out of descriptors or memory), so that closing connections
    /// can free some.
    private func pauseAccepting() {
        guard acceptPause == nil else { return }
        loop.setInterest(fd: listenFD, [])
        acceptPause = loop.schedule(after: .milliseconds(100)) { [weak self] in
            guard let self, !self.stopping else { return }
            self.acceptPause = nil
            self.loop.setInterest(fd: self.listenFD, .read)
        }
    }

    /// A new connection: refused when a cap is reached, else given the hello timeout.
    private func admit(_ fd: Int32, peer address: SocketAddress?) {
        let peer = address?.description ?? "?"
        let host = address?.capSource ?? peer
        if connections.count >= options.maxConnections || perAddress[host, default: 0] >= options.maxPerAddress {
            count { $0.busyRefused += 1 }
            log("refused \(peer): busy (\(connections.count) connections, \(perAddress[host, default: 0]) from it)")
            RelayConnection.refuse(fd: fd, with: "ERR busy\n")
            return
        }
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        nextID &+= 1
        let connection = RelayConnection(id: nextID, fd: fd, peer: peer, host: host, loop: loop) {
            [weak self] connection, readiness in
            self?.ready(connection, readiness)
        }
        guard connection.want(.read) else {
            closeDescriptor(fd)
            return
        }
        connections[connection.id] = connection
        perAddress[host, default: 0] += 1
        let held = connections.count
        count { $0.peakConnections = max($0.peakConnections, held) }
        connection.helloTimer = loop.schedule(after: options.helloTimeout) { [weak self, weak connection] in
            guard let self, let connection, case .hello = connection.phase else { return }
            connection.helloTimer = nil
            self.count { $0.noHello += 1 }
            self.drop(connection)
        }
    }

    /// Closes a connection that is not paired and forgets it.
    private func drop(_ connection: RelayConnection) {
        if case .waiting(let key) = connection.phase {
            rendezvous.leave(key, connection: connection.id)
            if rendezvous.slots[key] == nil {
                expiryTimers.removeValue(forKey: key)?.cancel()
                released(key)
            }
        }
        connection.close()
        forget(connection)
    }

    /// Drops `connection` from the tables and the per-address count.
    private func forget(_ connection: RelayConnection) {
        guard connections.removeValue(forKey: connection.id) != nil else { return }
        let left = perAddress[connection.host, default: 1] - 1
        perAddress[connection.host] = left > 0 ? left : nil
    }

    // MARK: Events

    /// Readiness of a connection, handled as its phase says.
    private func ready(_ connection: RelayConnection, _ readiness: Readiness) {
        switch connection.phase {
        case .hello(let received):
            readHello(connection, received)
        case .waiting(let key):
            // A waiting client sends nothing until PAIRED: a byte is a violation, the end of
            // stream (or an error) means it left. Either way its nameplate is free again.
            switch connection.receive(upTo: 1) {
            case .nothing:
                return
            case .bytes:
                count { $0.earlyBytes += 1 }
                log("closed \(connection.peer): sent bytes before PAIRED (\(key))")
            case .end, .failed:
                break
            }
            drop(connection)
        case .paired(let pair, let side):
            pair.ready(side: side, readiness)
        case .closed:
            break
        }
    }

    /// Reads more of a hello (never past what the longest hello needs) and acts on it once
    /// complete.
    private func readHello(_ connection: RelayConnection, _ received: [UInt8]) {
        var buffer = received
        switch connection.receive(upTo: RelayHello.maximumLength - buffer.count) {
        case .nothing:
            return
        case .end, .failed:
            count { $0.noHello += 1 }
            drop(connection)
            return
        case .bytes(let bytes):
            buffer += bytes
        }
        switch RelayHello.parse(buffer) {
        case .incomplete:
            connection.phase = .hello(buffer)
        case .bad:
            count { $0.badHello += 1 }
            log("refused \(connection.peer): bad hello")
            refuse(connection, "ERR bad hello\n")
        case .hello(let hello, let length):
            connection.helloTimer?.cancel()
            connection.helloTimer = nil
            guard buffer.count == length else {
                count { $0.earlyBytes += 1 }
                log("closed \(connection.peer): sent bytes before PAIRED")
                drop(connection)
                return
            }
            serve(connection, hello)
        }
    }

    /// Answers `connection` with an `ERR` line and closes it.
    private func refuse(_ connection: RelayConnection, _ line: String) {
        connection.stopWatching()
        connection.helloTimer?.cancel()
        connection.helloTimer = nil
        connection.phase = .closed
        forget(connection)
        RelayConnection.refuse(fd: connection.fd, with: line)
    }

    /// Acts on a complete hello: OPEN, JOIN or STREAM.
    private func serve(_ connection: RelayConnection, _ hello: RelayHello) {
        let now = monotonicNanoseconds()
        switch hello {
        case .open:
            guard keysByHost[connection.host, default: 0] < options.maxKeysPerAddress else {
                count { $0.busyRefused += 1 }
                log("refused \(connection.peer): busy (\(options.maxKeysPerAddress) nameplates from it in use)")
                refuse(connection, "ERR busy\n")
                return
            }
            guard let (nameplate, forgotten) = rendezvous.open(connection: connection.id, now: now, using: &random)
            else {
                count { $0.busyRefused += 1 }
                log("refused \(connection.peer): busy (no nameplate free)")
                refuse(connection, "ERR busy\n")
                return
            }
            for key in forgotten {
                expiryTimers.removeValue(forKey: key)?.cancel()
                released(key)
            }
            let key = RelayRendezvous.Key.nameplate(nameplate)
            own(key, connection.host)
            connection.phase = .waiting(key)
            count { $0.nameplatesOpened += 1 }
            scheduleExpiry(key)
            if !connection.send("NAMEPLATE \(nameplate)\n") { drop(connection) }
        case .join(let nameplate):
            claimed(connection, .nameplate(nameplate), rendezvous.join(nameplate: nameplate, connection: connection.id))
        case .stream(let token):
            let key = RelayRendezvous.Key.stream(token)
            if rendezvous.slots[key] == nil && keysByHost[connection.host, default: 0] >= options.maxKeysPerAddress {
                count { $0.busyRefused += 1 }
                log("refused \(connection.peer): busy (\(options.maxKeysPerAddress) nameplates from it in use)")
                refuse(connection, "ERR busy\n")
                return
            }
            claimed(connection, key, rendezvous.stream(token: token, connection: connection.id, now: now))
        }
    }

    /// Does what a JOIN or STREAM came to: pair, wait, or refuse.
    private func claimed(_ connection: RelayConnection, _ key: RelayRendezvous.Key, _ claim: RelayRendezvous.Claim) {
        switch claim {
        case .paired(let waiterID):
            guard let waiter = connections[waiterID] else {
                refuse(connection, "ERR unknown\n")
                return
            }
            pair(waiter, connection, key)
        case .waiting:
            own(key, connection.host)
            connection.phase = .waiting(key)
            scheduleExpiry(key)
        case .claimed:
            count { $0.claimedRefused += 1 }
            log("refused \(connection.peer): \(key) claimed")
            refuse(connection, "ERR claimed\n")
        case .unknown:
            count { $0.unknownRefused += 1 }
            log("refused \(connection.peer): \(key) unknown")
            refuse(connection, "ERR unknown\n")
        }
    }

    /// Sets the timer that expires `key` after `--expire`.
    private func scheduleExpiry(_ key: RelayRendezvous.Key) {
        expiryTimers.removeValue(forKey: key)?.cancel()
        expiryTimers[key] = loop.schedule(after: options.expire) { [weak self] in
            self?.expire(key)
        }
    }

    /// `key`'s timer fired: a waiter is told `ERR expired`, a burned key forgotten.
    private func expire(_ key: RelayRendezvous.Key) {
        expiryTimers.removeValue(forKey: key)
        let expiry = rendezvous.expire(key, now: monotonicNanoseconds())
        if expiry != .nothing { released(key) }
        switch expiry {
        case .waiterExpired(let id):
            guard let connection = connections[id] else { return }
            count { $0.expired += 1 }
            log("expired \(key) (\(connection.peer))")
            refuse(connection, "ERR expired\n")
        case .forgotten, .nothing:
            break
        }
    }

    /// `key` was opened (or first waited on) from `host`.
    private func own(_ key: RelayRendezvous.Key, _ host: String) {
        keyOwners[key] = host
        keysByHost[host, default: 0] += 1
    }

    /// `key` is free again: its host holds one fewer.
    private func released(_ key: RelayRendezvous.Key) {
        guard let host = keyOwners.removeValue(forKey: key) else { return }
        let left = keysByHost[host, default: 1] - 1
        keysByHost[host] = left > 0 ? left : nil
    }

    // MARK: Pairs

    /// Pairs two connections: `PAIRED` to both, then their bytes are spliced.
    private func pair(_ first: RelayConnection, _ second: RelayConnection, _ key: RelayRendezvous.Key) {
        let made = Result { () throws(SluiceError) in try RelayPair(first, second, key: key, server: self) }
        guard case .success(let pair) = made else {
            log("cannot pair \(first.peer) and \(second.peer) (\(key)): no pipe")
            drop(first)
            drop(second)
            return
        }
        first.phase = .paired(pair, side: 0)
        second.phase = .paired(pair, side: 1)
        count { $0.pairsMade += 1 }
        let label: String
        if case .nameplate(let n) = key { label = "nameplate \(n)" } else { label = "stream" }
        log("paired \(label): \(first.peer) <-> \(second.peer)")
        guard first.send("PAIRED\n"), second.send("PAIRED\n") else {
            pair.close(.reset)
            return
        }
        if let rate = options.rateLimit {
            pair.limiter = RateLimiter(bytesPerSecond: rate, loop: { [weak self] in self?.loop }) {
                [weak pair] in pair?.resumeFromRate()
            }
        }
        scheduleIdleCheck(pair, after: options.idle)
        pair.updateInterest()
    }

    /// Checks `pair` for idleness after `delay`: cut when nothing moved for `--idle`, else
    /// checked again when it could next be.
    private func scheduleIdleCheck(_ pair: RelayPair, after delay: Duration) {
        pair.idleTimer = loop.schedule(after: delay) { [weak self, weak pair] in
            guard let self, let pair, !pair.isClosed else { return }
            let idle = self.options.idle.nanoseconds
            let quiet = monotonicNanoseconds() &- pair.lastActivity
            if quiet >= idle {
                self.count { $0.idleCut += 1 }
                pair.close(.idle)
            } else {
                self.scheduleIdleCheck(pair, after: .nanoseconds(Int64(clamping: idle - quiet)))
            }
        }
    }

    /// Called by a pair as it closes: its connections are closed and forgotten, and a line
    /// says what it carried.
    func pairEnded(_ pair: RelayPair, _ why: RelayPairEnd) {
        for end in pair.ends {
            end.close()
            forget(end)
        }
        totalWaiters.removeValue(forKey: ObjectIdentifier(pair))
        let forward = pair.flows[0].bytes
        let backward = pair.flows[1].bytes
        let seconds = Double(monotonicNanoseconds() - pair.started) / 1e9
        count {
            $0.pairsEnded += 1
            $0.bytesRelayed += forward + backward
        }
        let label: String
        if case .nameplate(let n) = pair.key { label = "nameplate \(n)" } else { label = "stream" }
        let tenths = (seconds * 1000).rounded() / 1000
        log(
            "ended \(label): \(pair.ends[0].peer) <-> \(pair.ends[1].peer): \(forward) bytes ->, \(backward) bytes <-, "
                + "\(tenths) s (\(why.rawValue))")
    }

    /// A pair waits for the relay's rate limit: its timer resumes it.
    func waitForTotalRate(_ pair: RelayPair) {
        totalWaiters[ObjectIdentifier(pair)] = pair
    }

    /// The total rate limiter's wait is over: every pair that waited for it reads again.
    private func resumeTotalWaiters() {
        let waiting = totalWaiters.values
        totalWaiters.removeAll()
        for pair in waiting { pair.resumeFromRate() }
    }
}
