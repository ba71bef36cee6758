import CSluiceLinux

#if canImport(Glibc)
    import Glibc
#endif

/// One direction of a pair: the bytes from one connection to the other, through a pipe of
/// its own with `splice(2)` (never through the relay's memory). The pipe is the only buffer:
/// nothing more is read from the source than the pipe can hold, so a peer that does not read
/// stalls its own pair and nothing else.
final class RelayFlow {
    let pipeRead: Int32
    let pipeWrite: Int32
    /// What the pipe may hold.
    let capacity: Int
    /// Bytes in the pipe now.
    var held = 0
    /// A splice in would have blocked with bytes in the pipe: the pipe may be full (its slots
    /// are pages and a socket's pieces can be smaller), so read again only after a splice out.
    var pipeFull = false
    /// The source's end of stream was read.
    var sourceEnded = false
    /// The end was passed on: the destination's write side is shut down.
    var finished = false
    /// Waiting for a rate limiter's timer.
    var rateWaiting = false
    /// Bytes moved out of the pipe into the destination.
    var bytes: UInt64 = 0

    /// A flow with a pipe of its own, holding about `wanted` bytes (`makeKernelPipe`).
    init(capacity wanted: Int) throws(SluiceError) {
        let made = try makeKernelPipe(capacity: wanted, subject: "relay pipe")
        pipeRead = made.read
        pipeWrite = made.write
        capacity = min(wanted, made.capacity)
    }

    /// Whether more may be read from the source now.
    var canTakeIn: Bool { !sourceEnded && !pipeFull && !rateWaiting && held < capacity }

    /// Closes the pipe.
    func close() {
        closeDescriptor(pipeRead)
        closeDescriptor(pipeWrite)
    }
}

/// Why a pair ended, for the log.
enum RelayPairEnd: String {
    /// Both directions passed on their end of stream.
    case ended = "both ends done"
    /// A connection was reset or failed.
    case reset = "a connection reset or failed"
    /// Nothing moved for `--idle`.
    case idle = "idle"
    /// The relay stopped.
    case stopped = "relay stopped"
}

/// Two connections the relay paired, and the bytes it splices between them both ways.
///
/// Driven by readiness on the server's loop: a readable end is spliced into its flow's pipe
/// (as much as the pipe has room for and the rate limits allow) and the pipe at once into the
/// other end; what the other end cannot take stays in the pipe, with interest in its
/// writability. End of stream from one end is passed on as `shutdown(SHUT_WR)` of the other;
/// the pair ends when both directions have, or at the first error.
final class RelayPair {
    /// The two connections; flow `i` goes from `ends[i]` to `ends[1 - i]`.
    let ends: [RelayConnection]
    let flows: [RelayFlow]
    /// The nameplate or stream token that paired them.
    let key: RelayRendezvous.Key
    let started: UInt64
    /// The last time a byte moved (monotonic nanoseconds).
    var lastActivity: UInt64
    var idleTimer: LoopTimer?
    /// `--rate-limit`: this pair's bucket.
    var limiter: RateLimiter?
    private(set) var isClosed = false
    private unowned let server: RelayServer

    /// Pairs `a` and `b` (paired by `key`), with a pipe per direction; throws when the kernel
    /// gives no pipe (out of descriptors).
    init(_ a: RelayConnection, _ b: RelayConnection, key: RelayRendezvous.Key, server: RelayServer) throws(SluiceError)
    {
        let first = try RelayFlow(capacity: server.options.pipeCapacity)
        let second: RelayFlow
        do {
            second = try RelayFlow(capacity: server.options.pipeCapacity)
        } catch {
            first.close()
            throw error
        }
        ends = [a, b]
        flows = [first, second]
        self.key = key
        self.server = server
        started = monotonicNanoseconds()
        lastActivity = started
    }

    /// The most a pump moves before it lets the loop serve others.
    private static let turnsPerEvent = 16

    /// Readiness of `ends[side]`.
    func ready(side: Int, _ readiness: Readiness) {
        guard !isClosed else { return }
        let interest = ends[side].interest
        if interest.contains(.read) || readiness.contains(.error) { pump(side) }
        if !isClosed && (interest.contains(.write) || readiness.contains(.error)) { pump(1 - side) }
        guard !isClosed else { return }
        if readiness.contains(.error) {
            close(.reset)
        } else if interest.isEmpty {
            // A hang-up reported with nothing asked for (its flow's pipe is full): stop
            // watching until the pair wants the end again, or epoll reports it at every turn.
            ends[side].stopWatching()
        }
    }

    /// Moves bytes along flow `index`: from its source into the pipe, from the pipe into its
    /// destination, until neither can go on (or a turn's share is done).
    func pump(_ index: Int) {
        let flow = flows[index]
        let source = ends[index]
        let destination = ends[1 - index]
        var moved = false
        for _ in 0..<Self.turnsPerEvent {
            var progressed = false
            if flow.canTakeIn {
                let allowed = allowance(flow.capacity - flow.held, for: flow)
                if allowed > 0 {
                    switch splice(source.fd, flow.pipeWrite, allowed, "recv") {
                    case .success(.processed(0)):
                        flow.sourceEnded = true
                    case .success(.processed(let n)):
                        flow.held += n
                        limiter?.spend(n)
                        server.totalLimiter?.spend(n)
                        progressed = true
                    case .success(.wouldBlock):
                        if flow.held > 0 { flow.pipeFull = true }
                    case .failure:
                        close(.reset)
                        return
                    }
                }
            }
            if flow.held > 0 {
                switch splice(flow.pipeRead, destination.fd, flow.held, "send", suppress: server.suppressSIGPIPE) {
                case .success(.processed(let n)):
                    flow.held -= n
                    flow.bytes += UInt64(n)
                    flow.pipeFull = false
                    progressed = n > 0
                case .success(.wouldBlock):
                    break
                case .failure:
                    close(.reset)
                    return
                }
            }
            if flow.sourceEnded && flow.held == 0 && !flow.finished {
                flow.finished = true
                _ = Glibc.shutdown(destination.fd, Int32(SHUT_WR))
            }
            moved = moved || progressed
            if !progressed { break }
        }
        if moved { lastActivity = monotonicNanoseconds() }
        if flows[0].finished && flows[1].finished {
            close(.ended)
            return
        }
        updateInterest()
    }

    /// How much of `wanted` the rate limits let into `flow`'s pipe now; 0 when they make it
    /// wait (a timer resumes it).
    private func allowance(_ wanted: Int, for flow: RelayFlow) -> Int {
        var allowed = wanted
        if let limiter {
            allowed = limiter.take(wanted: allowed)
            if allowed == 0 {
                flow.rateWaiting = true
                return 0
            }
        }
        if let total = server.totalLimiter {
            allowed = total.take(wanted: allowed)
            if allowed == 0 {
                flow.rateWaiting = true
                server.waitForTotalRate(self)
                return 0
            }
        }
        return allowed
    }

    /// A rate limiter's wait is over: read again.
    func resumeFromRate() {
        guard !isClosed else { return }
        for (index, flow) in flows.enumerated() where flow.rateWaiting {
            flow.rateWaiting = false
            pump(index)
            if isClosed { return }
        }
    }

    /// Each end asks for reading while its outgoing flow can take bytes in, and for writing
    /// while its incoming flow holds bytes it could not pass on.
    func updateInterest() {
        for side in 0..<2 {
            var interest: Interest = []
            if flows[side].canTakeIn { interest.insert(.read) }
            if flows[1 - side].held > 0 { interest.insert(.write) }
            if !ends[side].want(interest) {
                close(.reset)
                return
            }
        }
    }

    /// `splice(2)` of at most `count` bytes, one end a pipe.
    private func splice(
        _ from: Int32, _ to: Int32, _ count: Int, _ operation: String, suppress: Bool = false
    ) -> Result<IOResult<Int>, SluiceError> {
        Result { () throws(SluiceError) in
            try spliceBytes(from, to, count: count, subject: operation, suppressingSIGPIPE: suppress)
        }
    }

    /// Ends the pair: both connections and both pipes closed, timers cancelled, the server told.
    func close(_ why: RelayPairEnd) {
        guard !isClosed else { return }
        isClosed = true
        idleTimer?.cancel()
        idleTimer = nil
        limiter?.cancel()
        limiter = nil
        for flow in flows { flow.close() }
        server.pairEnded(self, why)
    }
}
