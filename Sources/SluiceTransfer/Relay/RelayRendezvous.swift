/// What the relay remembers between connections: the nameplates and stream tokens that wait
/// for a peer, and those already used (burned) until they would have expired. A value without
/// I/O: the server tells it what happened (with the time, on the monotonic clock in
/// nanoseconds) and does what it answers.
///
/// Connections are named by the server's numbers for them (`UInt64`).
struct RelayRendezvous {
    /// A nameplate or a stream token.
    enum Key: Hashable, CustomStringConvertible {
        case nameplate(Int)
        case stream(String)

        /// `nameplate 12`, `stream 3f2a…` (a token's first 8 digits: enough for a log).
        var description: String {
            switch self {
            case .nameplate(let n): return "nameplate \(n)"
            case .stream(let token): return "stream \(token.prefix(8))"
            }
        }
    }

    /// The state of a key in use.
    enum Slot: Equatable {
        /// A connection waits on it until `expires`.
        case waiting(connection: UInt64, expires: UInt64)
        /// It paired two connections; a further claim is refused until `expires`.
        case burned(expires: UInt64)

        var expires: UInt64 {
            switch self {
            case .waiting(_, let expires), .burned(let expires): return expires
            }
        }
    }

    /// What a JOIN or STREAM came to.
    enum Claim: Equatable {
        /// Paired with the connection that waited.
        case paired(with: UInt64)
        /// A STREAM with a new token: the connection now waits on it.
        case waiting
        /// The key paired two connections already (`ERR claimed`).
        case claimed
        /// No such nameplate waits (`ERR unknown`).
        case unknown
    }

    /// What an expiry timer found.
    enum Expiry: Equatable {
        /// The connection that waited is told `ERR expired` and closed.
        case waiterExpired(UInt64)
        /// A burned key was forgotten.
        case forgotten
        /// Nothing to do (the key was freed or used again since).
        case nothing
    }

    private(set) var slots: [Key: Slot] = [:]
    /// Nameplates in `slots` (waiting or burned): the numbers not free for OPEN.
    private(set) var nameplatesInUse = 0
    /// Burned nameplates in the order they were burned (with the expiry they were burned
    /// with, so an entry whose nameplate was forgotten and used again since is known stale):
    /// the first to forget when nameplates run short.
    private var burnedNameplates = FIFO<(nameplate: Int, expires: UInt64)>()
    /// Burned nameplates are remembered only while fewer than this many nameplates are in use;
    /// past it, OPEN forgets the oldest (a late JOIN of one is then told `ERR unknown` rather
    /// than `ERR claimed`). Waiting nameplates each hold a connection, and connections are
    /// capped far below it, so clients that pair with themselves and hang up, from however
    /// many addresses, cannot use up the nameplates.
    let rememberBurnedBelow: Int
    /// How long a waiting key lives, in nanoseconds.
    let lifetime: UInt64

    /// An empty table whose keys wait (and are remembered) `lifetime` nanoseconds.
    init(lifetime: UInt64, rememberBurnedBelow: Int = RelayHello.maximumNameplate / 2) {
        self.lifetime = lifetime
        self.rememberBurnedBelow = rememberBurnedBelow
    }

    /// Connections waiting on a nameplate or token.
    var waitingCount: Int {
        slots.values.reduce(0) { count, slot in
            if case .waiting = slot { return count + 1 }
            return count
        }
    }

    /// OPEN: a free nameplate for `connection`, which now waits on it, and the burned
    /// nameplates forgotten to make room (`rememberBurnedBelow`; their owners and timers are
    /// the caller's to release); nil when none is free. Chosen at random among the free ones,
    /// with few digits while few are in use.
    mutating func open(
        connection: UInt64, now: UInt64, using random: inout some RandomNumberGenerator
    ) -> (nameplate: Int, forgotten: [Key])? {
        var forgotten: [Key] = []
        while nameplatesInUse >= rememberBurnedBelow, let oldest = burnedNameplates.removeFirst() {
            let key = Key.nameplate(oldest.nameplate)
            guard slots[key] == .burned(expires: oldest.expires) else { continue }
            remove(key)
            forgotten.append(key)
        }
        guard let nameplate = freeNameplate(using: &random) else { return nil }
        insert(.nameplate(nameplate), .waiting(connection: connection, expires: now &+ lifetime))
        return (nameplate, forgotten)
    }

    /// A nameplate not in use, or nil when all 99,999 are.
    private func freeNameplate(using random: inout some RandomNumberGenerator) -> Int? {
        let maximum = RelayHello.maximumNameplate
        guard nameplatesInUse < maximum else { return nil }
        // The smallest range of 1, 2, ... 5 digits at most a quarter full; a few random tries
        // there, then in the next; at the end a walk from a random start finds any free one.
        var top = 9
        while top < maximum && (nameplatesInUse + 1) * 4 > top { top = top * 10 + 9 }
        while true {
            for _ in 0..<8 {
                let n = Int.random(in: 1...top, using: &random)
                if slots[.nameplate(n)] == nil { return n }
            }
            if top >= maximum { break }
            top = top * 10 + 9
        }
        let start = Int.random(in: 1...maximum, using: &random)
        for offset in 0..<maximum {
            let n = (start - 1 + offset) % maximum + 1
            if slots[.nameplate(n)] == nil { return n }
        }
        return nil
    }

    /// JOIN of `nameplate` by `connection`.
    mutating func join(nameplate: Int, connection: UInt64) -> Claim {
        claim(.nameplate(nameplate), connection: connection, now: nil)
    }

    /// STREAM with `token` by `connection`: the first waits, the second pairs, a third is refused.
    mutating func stream(token: String, connection: UInt64, now: UInt64) -> Claim {
        claim(.stream(token), connection: connection, now: now)
    }

    /// `now` nil: a key nobody waits on is unknown (JOIN); else the connection waits on it (STREAM).
    private mutating func claim(_ key: Key, connection: UInt64, now: UInt64?) -> Claim {
        switch slots[key] {
        case .waiting(let waiter, let expires)?:
            slots[key] = .burned(expires: expires)
            if case .nameplate(let nameplate) = key {
                burnedNameplates.append((nameplate, expires))
                // Entries of nameplates since expired are dropped on the way, so the queue
                // holds about as many as are burned.
                while let first = burnedNameplates.first,
                    slots[.nameplate(first.nameplate)] != .burned(expires: first.expires)
                {
                    _ = burnedNameplates.removeFirst()
                }
            }
            return .paired(with: waiter)
        case .burned?:
            return .claimed
        case nil:
            guard let now else { return .unknown }
            insert(key, .waiting(connection: connection, expires: now &+ lifetime))
            return .waiting
        }
    }

    /// The connection waiting on `key` went away (end of stream, a reset, a stray byte): the
    /// key is free again. Does nothing when another connection, or none, waits on it.
    mutating func leave(_ key: Key, connection: UInt64) {
        guard case .waiting(let waiter, _)? = slots[key], waiter == connection else { return }
        remove(key)
    }

    /// `key`'s timer fired at `now`.
    mutating func expire(_ key: Key, now: UInt64) -> Expiry {
        guard let slot = slots[key], slot.expires <= now else { return .nothing }
        remove(key)
        switch slot {
        case .waiting(let connection, _): return .waiterExpired(connection)
        case .burned: return .forgotten
        }
    }

    /// Puts `slot` under `key`, counting a new nameplate.
    private mutating func insert(_ key: Key, _ slot: Slot) {
        if case .nameplate = key, slots[key] == nil { nameplatesInUse += 1 }
        slots[key] = slot
    }

    /// Forgets `key`, counting a nameplate freed.
    private mutating func remove(_ key: Key) {
        guard slots.removeValue(forKey: key) != nil else { return }
        if case .nameplate = key { nameplatesInUse -= 1 }
    }
}
