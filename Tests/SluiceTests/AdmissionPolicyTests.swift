import Testing

@testable import Sluice

/// `AdmissionPolicy`, the rule `receive` and a `tls-listen:` copy share for connections that
/// wait to authenticate: played with ids, addresses and times, no socket.
@Suite struct AdmissionPolicyTests {
    static let second: UInt64 = 1_000_000_000
    let policy = AdmissionPolicy(maximumWaiting: 6, maximumPerAddress: 3, grace: .seconds(1))

    /// `count` connections from `address`, ids from `first`, all waiting since `since`.
    func waiting(_ address: String, _ count: Int, first: Int, since: UInt64) -> [AdmissionPolicy.Waiting] {
        (0..<count).map { AdmissionPolicy.Waiting(id: first + $0, address: address, since: since) }
    }

    @Test("Under both caps a newcomer waits, and nobody is pushed out")
    func underTheCaps() {
        let now = 10 * Self.second
        #expect(policy.admit(from: "a", among: [], at: now) == .wait)
        #expect(policy.admit(from: "a", among: waiting("a", 2, first: 0, since: 0), at: now) == .wait)
        #expect(policy.admit(from: "b", among: waiting("a", 3, first: 0, since: 0), at: now) == .wait)
    }

    @Test("Past its address's cap, a newcomer pushes out its own address's oldest, never another's")
    func perAddress() {
        let now = 10 * Self.second
        let other = waiting("b", 1, first: 0, since: 0)
        let own = waiting("a", 3, first: 1, since: 0)
        #expect(policy.admit(from: "a", among: other + own, at: now) == .waitDropping(1))
    }

    @Test("Past the overall cap, the address with the most waiting gives up its oldest")
    func overall() {
        let now = 10 * Self.second
        // 3 from a flood, 2 from b, 1 from c: full. d's newcomer pushes out the flood's oldest.
        let all =
            waiting("b", 2, first: 0, since: 0) + waiting("flood", 3, first: 2, since: 0)
            + waiting("c", 1, first: 5, since: 0)
        #expect(policy.admit(from: "d", among: all, at: now) == .waitDropping(2))
        // Between addresses with as many waiting, the one whose oldest is oldest.
        let even =
            waiting("x", 2, first: 4, since: 0) + waiting("y", 2, first: 0, since: 0)
            + waiting("z", 2, first: 2, since: 0)
        #expect(policy.admit(from: "d", among: even, at: now) == .waitDropping(0))
    }

    @Test("Within the grace nobody is pushed out: a burst waits up to twice the caps, then is refused")
    func grace() {
        let now = 10 * Self.second
        let young = now - Self.second / 2
        // Its own address full of young ones: waits, up to twice the cap.
        #expect(policy.admit(from: "a", among: waiting("a", 3, first: 0, since: young), at: now) == .wait)
        #expect(policy.admit(from: "a", among: waiting("a", 5, first: 0, since: young), at: now) == .wait)
        #expect(policy.admit(from: "a", among: waiting("a", 6, first: 0, since: young), at: now) == .refuse)
        // One old among young ones: that one goes, whatever its id.
        let mixed = waiting("a", 2, first: 0, since: young) + waiting("a", 1, first: 7, since: now - 2 * Self.second)
        #expect(policy.admit(from: "a", among: mixed, at: now) == .waitDropping(7))
        // Overall: twice the cap of young ones, and the newcomer is refused.
        let many = (0..<12).map { AdmissionPolicy.Waiting(id: $0, address: "h\($0 % 6)", since: young) }
        #expect(policy.admit(from: "new", among: many, at: now) == .refuse)
        #expect(policy.admit(from: "new", among: Array(many.prefix(11)), at: now) == .wait)
        // A time before a connection's start (a clock read on another thread) is not past the grace.
        #expect(policy.admit(from: "a", among: waiting("a", 3, first: 0, since: now + 1), at: now) == .wait)
    }

    @Test("A flood from one address never pushes out another address's connection")
    func flood() {
        var all = waiting("client", 1, first: 0, since: 0)
        var now = Self.second
        var nextID = 1
        for _ in 0..<1000 {
            now += Self.second / 10
            switch policy.admit(from: "flood", among: all, at: now) {
            case .wait:
                break
            case .waitDropping(let id):
                #expect(id != 0, "the client was pushed out")
                all.removeAll { $0.id == id }
            case .refuse:
                continue
            }
            all.append(.init(id: nextID, address: "flood", since: now))
            nextID += 1
            #expect(all.filter { $0.address == "flood" }.count <= 2 * policy.maximumPerAddress)
        }
        #expect(all.contains { $0.id == 0 })
    }
}
