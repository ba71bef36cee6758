import Sluice
import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

extension SendSession {
    /// How long `send --relay` waits for the receiver at most: the relay ends the wait sooner
    /// (its nameplates expire, by default after 10 minutes).
    static let relayWait: UInt64 = 24 * 3600 * 1_000_000_000

    /// `send --relay`: checks the paths, asks the relay for a nameplate, prints the code, waits
    /// for the receiver who types it, and runs the code exchange; the connections met (as many
    /// as the receiver accepts of `--streams`), as stream pairs, the first first.
    static func meetAtRelay(_ options: SendOptions) -> Result<(Rendezvous, [(ReadStream, WriteStream)]), CLIError> {
        // A path that is not there is said before anyone is asked to type a code.
        for path in options.paths where path != "-" {
            var info = stat()
            guard lstat(path, &info) == 0 else {
                return .failure(CLIError(.noInput, "\(path): \(String(cString: strerror(errno)))"))
            }
        }
        let exchangeTime = options.timeoutSeconds.map { UInt64($0 * 1e9) } ?? Rendezvous.exchangeTime
        let relay = options.relay
        let meeting = Result { () throws(SluiceError) -> Rendezvous in
            let pairingDeadline = monotonicNanoseconds() &+ relayWait
            guard let relay else {
                let sender = try SenderRendezvous.local(wordCount: options.codeWords, announcePort: options.lanPort)
                // The code is shown even with --quiet: without it no receiver can join.
                Terminal.report("code: \(sender.code)")
                if !options.quiet {
                    let port = options.lanPort == LocalAnnounce.defaultPort ? "" : "--lan-port \(options.lanPort) "
                    Terminal.report("on the receiving side (this network): sluice receive \(port)\(sender.code)")
                }
                return try sender.waitForReceiver(
                    streams: options.streams, pairingDeadline: pairingDeadline, exchangeTime: exchangeTime)
            }
            let sender = try SenderRendezvous(
                relay: relay, wordCount: options.codeWords, deadline: monotonicNanoseconds() &+ exchangeTime)
            Terminal.report("code: \(sender.code)")
            if !options.quiet {
                Terminal.report("on the receiving side: sluice receive --relay \(relay) \(sender.code)")
            }
            return try sender.waitForReceiver(
                streams: options.streams, routes: options.routes, pairingDeadline: pairingDeadline,
                exchangeTime: exchangeTime)
        }
        switch meeting {
        case .success(let rendezvous):
            if !options.quiet {
                let count = rendezvous.sockets.count
                let connections = count == 1 ? "one connection" : "\(count) connections"
                Terminal.report(
                    rendezvous.direct
                        ? "sending directly to the receiver (\(connections))"
                        : "sending through the relay (\(connections))")
            }
            return RelayChoice.streams(rendezvous).map { (rendezvous, $0) }
        case .failure(let error):
            return .failure(RelayChoice.failure(error, relay.map { "send --relay \($0)" } ?? "send"))
        }
    }
}
