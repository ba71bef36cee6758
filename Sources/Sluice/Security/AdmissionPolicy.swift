/// Who may wait on a listener to authenticate, and who makes room: the rule `sluice receive`
/// and a `tls-listen:` copy share. A connection that has not authenticated holds no session;
/// it waits apart, at most `maximumWaiting` of them and `maximumPerAddress` from one address
/// (as `HandshakeLimiter.key(for:)` counts it: an IPv6 /64 is one address). A newcomer past
/// either cap pushes out the oldest waiting connection — of its own address, or of the
/// address with the most waiting — never itself, so strangers who connect and say nothing,
/// however many, cannot keep a client from another address from its handshake.
///
/// A waiting connection younger than `grace` is not pushed out: a client authenticates
/// within a round trip or two, and a host opening many connections at once (accepted
/// together, before any is read) is not a flood. When every candidate is that young, the
/// newcomer waits too, up to twice the caps; beyond that it is refused at once.
///
/// A value without clocks or sockets: the caller passes what waits and the time, and acts
/// on the decision (drops the connection named, or closes the newcomer).
public struct AdmissionPolicy: Sendable, Equatable {
    /// The most connections waiting at once (before a burst's allowance).
    public var maximumWaiting: Int
    /// The most connections from one address waiting at once (before a burst's allowance).
    public var maximumPerAddress: Int
    /// How long a waiting connection is safe from being pushed out.
    public var grace: Duration

    public init(maximumWaiting: Int = 1024, maximumPerAddress: Int = 8, grace: Duration = .seconds(1)) {
        self.maximumWaiting = Swift.max(1, maximumWaiting)
        self.maximumPerAddress = Swift.max(1, maximumPerAddress)
        self.grace = grace
    }

    /// A connection waiting to authenticate.
    public struct Waiting: Sendable, Equatable {
        /// The caller's name for it; ids grow with arrival (the smallest is the oldest).
        public var id: Int
        /// Its address, as `HandshakeLimiter.key(for:)` gives it.
        public var address: String
        /// When it began to wait (`monotonicNanoseconds()`).
        public var since: UInt64

        public init(id: Int, address: String, since: UInt64) {
            self.id = id
            self.address = address
            self.since = since
        }
    }

    /// What to do with a newcomer.
    public enum Decision: Sendable, Equatable {
        /// It waits; nobody is pushed out.
        case wait
        /// It waits once the waiting connection `id` is dropped.
        case waitDropping(Int)
        /// Close it at once: a burst has filled twice the caps.
        case refuse
    }

    /// The decision for a connection from `address` arriving at `now` (nanoseconds, as
    /// `Waiting.since`) while `waiting` wait.
    public func admit(from address: String, among waiting: [Waiting], at now: UInt64) -> Decision {
        var byAddress: [String: [Waiting]] = [:]
        for connection in waiting { byAddress[connection.address, default: []].append(connection) }
        let ownCount = byAddress[address]?.count ?? 0
        let victims: [Waiting]
        if ownCount >= maximumPerAddress {
            victims = byAddress[address] ?? []
        } else if waiting.count >= maximumWaiting {
            // The address with the most waiting; between equals, the one whose oldest is oldest.
            let heaviest = byAddress.values.max { a, b in
                a.count != b.count
                    ? a.count < b.count : (a.map(\.id).min() ?? .max) > (b.map(\.id).min() ?? .max)
            }
            victims = heaviest ?? []
        } else {
            return .wait
        }
        let pastGrace = victims.filter { now >= $0.since && now - $0.since >= grace.nanoseconds }
        guard let oldest = pastGrace.min(by: { $0.id < $1.id }) else {
            return ownCount < 2 * maximumPerAddress && waiting.count < 2 * maximumWaiting ? .wait : .refuse
        }
        return .waitDropping(oldest.id)
    }
}
