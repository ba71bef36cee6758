import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Real NAT on this machine, built of network namespaces: a public network (a bridge) where the
/// relay runs, and two homes, each a host behind a router that masquerades (nftables) onto the
/// public network. Nothing on the public side, nor the other home, can open a connection into a
/// home.
final class NATLab: @unchecked Sendable {
    /// Why namespaces cannot be made here (not root, no `ip` or `nft`), or nil.
    static let unavailable: String? = {
        guard getuid() == 0 else { return "network namespaces need root" }
        for tool in ["/usr/sbin/ip", "/usr/sbin/nft"] where !FileManager.default.isExecutableFile(atPath: tool) {
            return "\(tool) is not installed (iproute2, nftables)"
        }
        let probe = "sluice-probe-\(getpid())"
        guard
            (try? NATLab.run(
                "ip netns add \(probe) && ip -n \(probe) link add b0 type bridge && "
                    + "ip netns exec \(probe) nft add table ip nat; status=$?; ip netns del \(probe); exit $status"))
                == 0
        else { return "cannot make a network namespace with a bridge and an nftables table here" }
        return nil
    }()

    /// The namespaces' names, unique to this run.
    let pub: String
    let homeA: String
    let homeB: String
    /// The two routers, each also a host on the public network (a LAN of two machines).
    let routers: [String]
    /// The relay's address on the public network.
    static let relayHost = "203.0.113.1"

    init() throws {
        let tag = "\(getpid() % 100_000)-\(UInt32.random(in: 0..<100_000))"
        (pub, homeA, homeB) = ("sl-pub-\(tag)", "sl-a-\(tag)", "sl-b-\(tag)")
        routers = ["sl-ra-\(tag)", "sl-rb-\(tag)"]
        var script = """
            set -e
            for ns in \(pub) \(homeA) \(homeB) \(routers[0]) \(routers[1]); do
                ip netns add $ns; ip -n $ns link set lo up
            done
            ip -n \(pub) link add br0 type bridge; ip -n \(pub) link set br0 up
            ip -n \(pub) addr add \(Self.relayHost)/24 dev br0

            """
        for (index, (router, home)) in zip(routers, [homeA, homeB]).enumerated() {
            let n = index + 1
            script += """
                ip link add wan netns \(router) type veth peer name p\(n) netns \(pub)
                ip -n \(pub) link set p\(n) master br0; ip -n \(pub) link set p\(n) up
                ip -n \(router) addr add 203.0.113.\(n + 1)/24 dev wan; ip -n \(router) link set wan up
                ip link add lan netns \(router) type veth peer name eth0 netns \(home)
                ip -n \(router) addr add 10.\(n).0.1/24 dev lan; ip -n \(router) link set lan up
                ip -n \(home) addr add 10.\(n).0.2/24 dev eth0; ip -n \(home) link set eth0 up
                ip -n \(home) route add default via 10.\(n).0.1
                ip netns exec \(router) sysctl -qw net.ipv4.ip_forward=1
                ip netns exec \(router) nft -f - <<'EOF'
                table ip nat {
                    chain post { type nat hook postrouting priority 100; oifname "wan" masquerade; }
                }
                table ip filter {
                    chain through { type filter hook forward priority 0; policy drop;
                        ct state established,related accept; iifname "lan" oifname "wan" accept; }
                }
                EOF

                """
        }
        guard try Self.run(script) == 0 else {
            tearDown()
            throw ReceiverError(message: "could not build the NAT lab")
        }
    }

    deinit { tearDown() }

    private func tearDown() {
        _ = try? Self.run(
            ([pub, homeA, homeB] + routers).map { "ip netns del \($0) 2>/dev/null" }.joined(separator: "; ") + "; true")
    }

    /// The prefix that runs a program inside namespace `name`.
    func inside(_ name: String) -> [String] { ["/usr/sbin/ip", "netns", "exec", name] }

    @discardableResult
    static func run(_ script: String) throws -> Int32 {
        let shell = Process()
        shell.executableURL = URL(fileURLWithPath: "/bin/sh")
        shell.arguments = ["-c", script]
        shell.standardOutput = FileHandle.nullDevice
        shell.standardError = FileHandle.nullDevice
        try shell.run()
        shell.waitUntilExit()
        return shell.terminationStatus
    }
}

/// Transfers through NAT: each peer behind its own masquerading router, the relay on the public
/// side, so no direct connection is possible and the relay carries the transfer; two peers in
/// one home go direct.
@Suite("Relay through NAT", .serialized, .ownThreads) struct RelayNATTests {
    @Test(.disabled(if: NATLab.unavailable != nil, Comment(rawValue: NATLab.unavailable ?? "")))
    func peersBehindTwoNATsMeetAndTransferThroughTheRelay() throws {
        let lab = try NATLab()
        try withTemporaryDirectory { dir in
            try FileManager.default.createDirectory(atPath: dir + "/src/sub", withIntermediateDirectories: true)
            try write(randomBytes(2 << 20, seed: 11), to: dir + "/src/big.bin")
            try write(Data("behind NAT\n".utf8), to: dir + "/src/sub/note.txt")
            try FileManager.default.createDirectory(atPath: dir + "/dst", withIntermediateDirectories: true)
            let relay = try RunningRelay(host: NATLab.relayHost, inside: lab.inside(lab.pub))
            // The relay is reachable from a home; a home is not reachable from the other.
            let (sender, code) = try relaySender(
                relay.address, ["--streams", "2", dir + "/src"], inside: lab.inside(lab.homeA))
            let receiver = try LiveSluice(
                ["receive", "--relay", relay.address, "-C", dir + "/dst", code], inside: lab.inside(lab.homeB))
            let received = receiver.wait(seconds: 60)
            let sent = sender.wait(seconds: 60)
            #expect(received.status == 0, "\(received.stderr)")
            #expect(sent.status == 0, "\(sent.stderr)")
            #expect(sent.stderr.contains("sending through the relay (2 connections)"), "\(sent.stderr)")
            #expect(received.stderr.contains("through relay"))
            #expect(try treesIdentical(dir + "/src", dir + "/dst/src"))
            // No direct connection is possible: with --no-relay the meeting ends with 69.
            let (direct, second) = try relaySender(relay.address, [dir + "/src"], inside: lab.inside(lab.homeA))
            let refused = try LiveSluice(
                ["receive", "--relay", relay.address, "--no-relay", "-C", dir + "/dst", second],
                inside: lab.inside(lab.homeB)
            ).wait(seconds: 60)
            #expect(refused.status == 69, "\(refused.stderr)")
            #expect(direct.wait(seconds: 60).status == 69)
            // A sender behind NAT and a receiver on the public side: the receiver cannot reach
            // the sender, so the sender dials the receiver's door (sealed to it), and they go
            // direct.
            try FileManager.default.createDirectory(atPath: dir + "/public", withIntermediateDirectories: true)
            let (behind, fourth) = try relaySender(
                relay.address, ["--streams", "2", dir + "/src"], inside: lab.inside(lab.homeA))
            let open = try LiveSluice(
                ["receive", "--relay", relay.address, "-C", dir + "/public", fourth], inside: lab.inside(lab.routers[1])
            ).wait(seconds: 60)
            let dialed = behind.wait(seconds: 60)
            #expect(open.status == 0, "\(open.stderr)")
            #expect(
                dialed.stderr.contains("sending directly to the receiver (2 connections)"),
                "\(dialed.stderr) \(open.stderr)")
            #expect(try treesIdentical(dir + "/src", dir + "/public/src"))
            // Two peers in one home reach each other: the relay carries only the meeting.
            try FileManager.default.createDirectory(atPath: dir + "/same", withIntermediateDirectories: true)
            let (neighbour, third) = try relaySender(relay.address, [dir + "/src"], inside: lab.inside(lab.homeA))
            let near = try LiveSluice(
                ["receive", "--relay", relay.address, "-C", dir + "/same", third], inside: lab.inside(lab.homeA)
            ).wait(seconds: 60)
            #expect(near.status == 0, "\(near.stderr)")
            #expect(near.stderr.contains("from the sender, directly"), "\(near.stderr)")
            #expect(neighbour.wait(seconds: 60).status == 0)
            #expect(try treesIdentical(dir + "/src", dir + "/same/src"))
            _ = relay.stop()
        }
    }

    /// A tree sent with a short code and no relay from one host to another (each a prefix that
    /// runs a program in its namespace): the sender announces on the network they share, the
    /// receiver hears it and comes straight to it.
    func transferOnTheLocalNetwork(from sending: [String], to receiving: [String], extra: [String] = []) throws {
        try withTemporaryDirectory { dir in
            try FileManager.default.createDirectory(atPath: dir + "/src", withIntermediateDirectories: true)
            try write(randomBytes(1 << 20, seed: 12), to: dir + "/src/data.bin")
            try FileManager.default.createDirectory(atPath: dir + "/dst", withIntermediateDirectories: true)
            let port = "\(UInt16.random(in: 20_000...60_000))"
            let (sender, code) = try relaySender(
                "", [], inside: sending, command: ["send", "--lan-port", port] + extra + [dir + "/src"])
            let received = try LiveSluice(
                ["receive", "--lan-port", port, "-C", dir + "/dst", code], keyed: false, inside: receiving
            ).wait(seconds: 60)
            let sent = sender.wait(seconds: 60)
            #expect(received.status == 0, "\(received.stderr)")
            #expect(sent.status == 0, "\(sent.stderr)")
            #expect(received.stderr.contains("found on the local network"), "\(received.stderr)")
            #expect(try treesIdentical(dir + "/src", dir + "/dst/src"))
        }
    }

    /// No relay anywhere: the sender announces its nameplate in broadcasts on the network both
    /// routers' public sides share; the receiver, another host, hears it.
    @Test(.disabled(if: NATLab.unavailable != nil, Comment(rawValue: NATLab.unavailable ?? "")))
    func twoHostsOnOneNetworkFindEachOtherWithNoServer() throws {
        let lab = try NATLab()
        try transferOnTheLocalNetwork(from: lab.inside(lab.routers[0]), to: lab.inside(lab.routers[1]))
    }

    /// Two hosts on a link with IPv6 alone (link-local addresses, no IPv4 but loopback's): the
    /// sender's announcement goes to ff02::1 on its interface, and the receiver connects to
    /// the link-local address it came from, through the interface it came in on. No IPv4 route
    /// joins the two: arriving at all says the IPv6 announcement was heard.
    @Test(.disabled(if: NATLab.unavailable != nil, Comment(rawValue: NATLab.unavailable ?? "")))
    func twoHostsOnAnIPv6OnlyLinkFindEachOther() throws {
        let tag = "\(getpid() % 100_000)-\(UInt32.random(in: 0..<100_000))"
        let (a, b) = ("sl-6a-\(tag)", "sl-6b-\(tag)")
        defer { _ = try? NATLab.run("ip netns del \(a); ip netns del \(b); true") }
        let built = try NATLab.run(
            """
            set -e
            ip netns add \(a); ip netns add \(b)
            ip link add v0 netns \(a) type veth peer name v1 netns \(b)
            for end in "\(a) v0 fe80::a" "\(b) v1 fe80::b"; do
                set -- $end
                ip -n $1 link set lo up; ip -n $1 link set $2 addrgenmode none; ip -n $1 link set $2 up
                ip -n $1 addr add $3/64 dev $2 nodad
            done
            """)
        try #require(built == 0, "could not build the IPv6 link")
        try transferOnTheLocalNetwork(
            from: ["/usr/sbin/ip", "netns", "exec", a], to: ["/usr/sbin/ip", "netns", "exec", b],
            extra: ["--streams", "2"])
    }
}
