/// How a `RelayServer` listens, and the limits it keeps strangers to.
public struct RelayOptions: Sendable, Hashable {
    /// The address to listen on: a numeric address or a name; nil for every interface.
    public var host: String?
    /// The port to listen on; 0 for any free port (`RelayServer.address` tells which).
    public var port: UInt16 = 9009
    /// How long a nameplate or stream token waits for its peer, and how long a used one is
    /// remembered (a second claim is refused until then). Default 10 minutes.
    public var expire: Duration = .seconds(600)
    /// A pair that moves no byte either way for this long is cut. Default 10 minutes.
    public var idle: Duration = .seconds(600)
    /// How long a new connection has to send its whole hello. Default 10 s.
    public var helloTimeout: Duration = .seconds(10)
    /// Connections held at once, all told (waiting, paired, saying hello); the next is told
    /// `ERR busy`. Default 4096.
    public var maxConnections = 4096
    /// Connections held at once from one source address. Default 64.
    public var maxPerAddress = 64
    /// Nameplates and stream tokens one source address may hold at once, waiting or used (a
    /// used one is held until it would have expired): without it, a client pairing with itself
    /// and hanging up in a loop could use up all 99,999 nameplates. Default 256.
    public var maxKeysPerAddress = 256
    /// Bytes a second each pair may move (both directions together); nil for no limit.
    public var rateLimit: Int?
    /// Bytes a second the relay moves in all; nil for no limit.
    public var rateLimitTotal: Int?
    /// The bytes each direction of a pair may hold in its pipe (the kernel may give less):
    /// what the relay buffers between a sender and a receiver that reads more slowly. Default
    /// 1 MiB (Linux's `pipe-max-size` for an unprivileged process): fewer, larger splices cost
    /// less CPU per GiB (0.29–0.32 s against 0.43 s with 256 KiB in Benchmarks/relay.sh).
    public var pipeCapacity = 1024 * 1024

    /// The defaults: every interface, port 9009.
    public init() {}
}

/// What a `RelayServer` did, counted since it started.
public struct RelayStatistics: Sendable, Hashable {
    /// Pairs made (a nameplate joined, or a stream token's second connection).
    public var pairsMade = 0
    /// Pairs ended (both directions ended, a reset, idle, or the relay stopping).
    public var pairsEnded = 0
    /// Bytes spliced, both directions of every ended pair together.
    public var bytesRelayed: UInt64 = 0
    /// Nameplates handed out (OPEN).
    public var nameplatesOpened = 0
    /// Nameplates and stream tokens whose waiting connection was told `ERR expired`.
    public var expired = 0
    /// JOINs and STREAMs refused with `ERR claimed`.
    public var claimedRefused = 0
    /// JOINs refused with `ERR unknown`.
    public var unknownRefused = 0
    /// Connections refused with `ERR busy` (a cap reached, or no nameplate free).
    public var busyRefused = 0
    /// Connections refused with `ERR bad hello`.
    public var badHello = 0
    /// Connections closed for sending before `PAIRED`.
    public var earlyBytes = 0
    /// Connections closed without a complete hello (timeout, or end of stream).
    public var noHello = 0
    /// Pairs cut for idleness.
    public var idleCut = 0
    /// The most connections held at once.
    public var peakConnections = 0
    /// Seconds since the server started.
    public var seconds = 0.0

    public init() {}
}
