import Sluice
import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

extension ReceiveSession {
    /// `receive CODE`: joins the sender waiting under the code's nameplate at the relay, runs
    /// the code exchange, and pairs the connections the sender offers (one unless the receiver
    /// takes parallel streams); as stream pairs, the first first.
    static func meetAtRelay(_ options: ReceiveOptions) -> Result<(Rendezvous, [(ReadStream, WriteStream)]), CLIError> {
        guard let code = options.code else { return .failure(CLIError(.usage, "receive: no code")) }
        let relay = options.relay
        // A directory that cannot take the files is said before the code is spent.
        var info = stat()
        var why: String?
        if stat(options.directory, &info) != 0 {
            why = String(cString: strerror(errno))
        } else if info.st_mode & S_IFMT != S_IFDIR {
            why = "not a directory"
        } else if access(options.directory, W_OK | X_OK) != 0 {
            why = String(cString: strerror(errno))
        }
        if let why { return .failure(CLIError(.cannotCreate, "receive into \(options.directory): \(why)")) }
        let time =
            options.idleSeconds == ReceiveOptions.defaultIdleSeconds
            ? Rendezvous.exchangeTime : UInt64(options.idleSeconds * 1e9)
        let meeting = Result { () throws(SluiceError) -> Rendezvous in
            let maxStreams = options.streams ? ReachOffer.maxStreams : 1
            let deadline = monotonicNanoseconds() &+ time
            guard let relay else {
                return try Rendezvous.findLocal(
                    code: code, announcePort: options.lanPort, maxStreams: maxStreams, deadline: deadline)
            }
            return try Rendezvous.join(
                relay: relay, code: code, maxStreams: maxStreams, routes: options.routes, deadline: deadline)
        }
        switch meeting {
        case .success(let rendezvous):
            return RelayChoice.streams(rendezvous).map { (rendezvous, $0) }
        case .failure(let error):
            return .failure(RelayChoice.failure(error, relay.map { "receive --relay \($0)" } ?? "receive"))
        }
    }
}
