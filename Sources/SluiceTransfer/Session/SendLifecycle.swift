/// The life of one outgoing file (or range of one, or stream) at the sender, from the moment it
/// is open and announced to the moment its data stops: what its sender may do with it in each
/// phase, changed only by `handle(_:)`, one exhaustive `switch` over (phase, event), as
/// `FileLifecycle` is the receiver's.
///
/// Its data goes out once ACCEPT came (or at once, sent eager), after the bytes the receiver
/// holds are hashed (`hashingPrefix`), or, sent as a delta, once the match found its first
/// operations (`matching`). A compressed file's source ends before its deflate stream does
/// (`drainingCompression`, `compressionDrained`). Once every byte is out a worker may be asked
/// whether the file changed meanwhile (`checkingChange`), then its digest is finished
/// (`finishing`): END goes next. It is `closed` when its data stops, whatever stops it (END
/// went, a read failed, the receiver answered it, the session ended).
///
/// Waiting for the connection's room, the hasher's or the next read is not a phase: `produce`
/// stops and whatever has room calls it again, so the phase says only whether it may go on.
///
/// A stream source's readiness (it said it has bytes, its end or an error, and no read has
/// answered that yet) is kept beside the phase, changed by the same `switch`: a stream is read
/// only when it said so, even before ACCEPT.
///
/// An event that makes no sense in a phase (a second ACCEPT, a read once the source ended) is
/// an internal error with a message, never a crash: the session that meets one ends.
struct SendLifecycle: Equatable, Sendable {
    enum Phase: Equatable, Sendable {
        /// Opened and announced: no data until ACCEPT.
        case awaitingAccept
        /// A worker hashes the bytes the receiver holds into the digest: data goes after.
        case hashingPrefix
        /// Sent as a delta: the match runs on a worker and has found no operation yet.
        case matching
        /// Its data goes out, as the connection, the hasher and the reads have room.
        case sending
        /// A compressed file's source has ended: its deflate stream is finished.
        case drainingCompression
        /// The deflate stream is finished: once its last bytes are out, so is the file's data.
        case compressionDrained
        /// Every byte is out: a worker tells whether the file changed while it was sent.
        case checkingChange
        /// The digest (and the held bytes' SHA-256, and a range's whole-file digest) is being
        /// finished: nothing more goes out, END next.
        case finishing
        /// Its data stopped (END went, it failed, it was answered, the session ended): let go.
        case closed
    }

    enum Event: Equatable, Sendable {
        /// ACCEPT (or an eager start): the data goes out now.
        case start
        /// ACCEPT for a file whose held bytes a worker hashes into the digest first.
        case hashPrefix
        /// ACCEPT for a file sent as a delta: the match starts on a worker.
        case match
        /// The held bytes are hashed: the data may go out.
        case prefixHashed
        /// The match found more operations.
        case opsFound
        /// A compressed file's source has no more bytes: its deflate stream is finished next.
        /// (An uncompressed file's data is out at its source's end: `dataOut`.)
        case sourceEnded
        /// A step of the deflate stream said it is finished.
        case compressionFinished
        /// Every byte of the data is out; with `checkChange`, a worker is asked whether the file
        /// changed while it was sent before its digest is finished.
        case dataOut(checkChange: Bool)
        /// The worker told whether the file changed.
        case changeChecked
        /// The stream source said it has bytes (or its end, or an error).
        case sourceReadable
        /// A read of the stream source is about to be tried: it takes the readiness.
        case streamRead
        /// Its data stops (the machine's `stopData`, or the session's end).
        case close
    }

    /// What the sender does after an event.
    enum Effect: Equatable, Sendable {
        /// Nothing more than the phase says.
        case nothing
        /// The event came after the file was let go, or is one already taken: ignore it.
        case ignore
        /// Data may go out: call `produce`.
        case produce
        /// Read the stream source (it said it is readable; that is taken now).
        case read
        /// Ask the worker whether the file changed while it was sent.
        case checkChange
        /// Finish the digest; END goes once it is ready.
        case finishDigest
        /// Let go before its digest was finished: the hasher drops what it holds of it.
        case discardDigest
    }

    /// An event its phase cannot take: a fault of the sender, not of the peer.
    struct IllegalTransition: Error, Equatable, Sendable, CustomStringConvertible {
        let phase: Phase
        let event: Event
        var description: String { "internal error: a sent file in phase \(phase) cannot take \(event)" }
    }

    private(set) var phase: Phase = .awaitingAccept
    /// The stream source said it is readable and no read has taken that yet.
    private(set) var sourceReadable = false

    /// A file just opened and announced: `awaitingAccept`.
    init() {}

    /// Its data may go out now (reads, compression, or the end of its deflate stream).
    var isProducing: Bool {
        switch phase {
        case .sending, .drainingCompression, .compressionDrained: return true
        case .awaitingAccept, .hashingPrefix, .matching, .checkingChange, .finishing, .closed: return false
        }
    }

    /// Takes `event`: moves to the phase it leads to and returns what the sender does. Every
    /// (phase, event) pair is spelled out, none by a wildcard: a new phase or event does not
    /// compile until each pair it makes is decided. An illegal one leaves the lifecycle as it was.
    mutating func handle(_ event: Event) throws(IllegalTransition) -> Effect {
        switch (phase, event) {
        // A stream's readiness is kept in any phase until a read takes it; produce decides.
        case (.awaitingAccept, .sourceReadable), (.hashingPrefix, .sourceReadable), (.matching, .sourceReadable),
            (.sending, .sourceReadable), (.drainingCompression, .sourceReadable),
            (.compressionDrained, .sourceReadable), (.checkingChange, .sourceReadable),
            (.finishing, .sourceReadable):
            sourceReadable = true
            return .produce
        case (.sending, .streamRead):
            guard sourceReadable else { return .nothing }  // not readable yet: wait for it
            sourceReadable = false
            return .read

        // Let go: what the hasher holds of it goes unless its digest is being finished.
        case (.awaitingAccept, .close), (.hashingPrefix, .close), (.matching, .close), (.sending, .close),
            (.drainingCompression, .close), (.compressionDrained, .close), (.checkingChange, .close):
            phase = .closed
            return .discardDigest
        case (.finishing, .close):
            phase = .closed
            return .nothing

        // ACCEPT: the data goes now, after the held bytes are hashed, or as the match finds it.
        case (.awaitingAccept, .start):
            phase = .sending
            return .produce
        case (.awaitingAccept, .hashPrefix):
            phase = .hashingPrefix
            return .nothing
        case (.awaitingAccept, .match):
            phase = .matching
            return .nothing
        case (.awaitingAccept, .prefixHashed), (.awaitingAccept, .opsFound), (.awaitingAccept, .sourceEnded),
            (.awaitingAccept, .compressionFinished), (.awaitingAccept, .dataOut), (.awaitingAccept, .changeChecked),
            (.awaitingAccept, .streamRead):
            throw IllegalTransition(phase: phase, event: event)

        case (.hashingPrefix, .prefixHashed):
            phase = .sending
            return .produce
        case (.hashingPrefix, .start), (.hashingPrefix, .hashPrefix), (.hashingPrefix, .match),
            (.hashingPrefix, .opsFound), (.hashingPrefix, .sourceEnded), (.hashingPrefix, .compressionFinished),
            (.hashingPrefix, .dataOut), (.hashingPrefix, .changeChecked), (.hashingPrefix, .streamRead):
            throw IllegalTransition(phase: phase, event: event)

        case (.matching, .opsFound):
            phase = .sending
            return .produce
        case (.matching, .start), (.matching, .hashPrefix), (.matching, .match), (.matching, .prefixHashed),
            (.matching, .sourceEnded), (.matching, .compressionFinished), (.matching, .dataOut),
            (.matching, .changeChecked), (.matching, .streamRead):
            throw IllegalTransition(phase: phase, event: event)

        // The data goes out.
        case (.sending, .opsFound):
            return .produce
        case (.sending, .sourceEnded):
            phase = .drainingCompression
            return .nothing
        case (.sending, .dataOut(let checkChange)), (.compressionDrained, .dataOut(let checkChange)):
            phase = checkChange ? .checkingChange : .finishing
            return checkChange ? .checkChange : .finishDigest
        case (.sending, .start), (.sending, .hashPrefix), (.sending, .match), (.sending, .prefixHashed),
            (.sending, .compressionFinished), (.sending, .changeChecked):
            throw IllegalTransition(phase: phase, event: event)

        case (.drainingCompression, .compressionFinished):
            phase = .compressionDrained
            return .nothing
        case (.drainingCompression, .start), (.drainingCompression, .hashPrefix), (.drainingCompression, .match),
            (.drainingCompression, .prefixHashed), (.drainingCompression, .opsFound),
            (.drainingCompression, .sourceEnded), (.drainingCompression, .dataOut),
            (.drainingCompression, .changeChecked), (.drainingCompression, .streamRead):
            throw IllegalTransition(phase: phase, event: event)

        case (.compressionDrained, .compressionFinished):
            return .nothing  // a step after the end (its output had to wait for the workers)
        case (.compressionDrained, .start), (.compressionDrained, .hashPrefix), (.compressionDrained, .match),
            (.compressionDrained, .prefixHashed), (.compressionDrained, .opsFound),
            (.compressionDrained, .sourceEnded), (.compressionDrained, .changeChecked),
            (.compressionDrained, .streamRead):
            throw IllegalTransition(phase: phase, event: event)

        // Every byte is out: whether it changed, then its digest.
        case (.checkingChange, .changeChecked):
            phase = .finishing
            return .finishDigest
        case (.checkingChange, .dataOut):
            return .ignore  // the end reached again (a write called back into `produce`)
        case (.checkingChange, .start), (.checkingChange, .hashPrefix), (.checkingChange, .match),
            (.checkingChange, .prefixHashed), (.checkingChange, .opsFound), (.checkingChange, .sourceEnded),
            (.checkingChange, .compressionFinished), (.checkingChange, .streamRead):
            throw IllegalTransition(phase: phase, event: event)

        case (.finishing, .dataOut), (.finishing, .opsFound):
            return .ignore  // the end reached again; the match's last report
        case (.finishing, .start), (.finishing, .hashPrefix), (.finishing, .match), (.finishing, .prefixHashed),
            (.finishing, .sourceEnded), (.finishing, .compressionFinished), (.finishing, .changeChecked),
            (.finishing, .streamRead):
            throw IllegalTransition(phase: phase, event: event)

        // Let go: a worker's late report is ignored; the sender's own steps are errors.
        case (.closed, .prefixHashed), (.closed, .opsFound), (.closed, .changeChecked), (.closed, .sourceReadable):
            return .ignore
        case (.closed, .start), (.closed, .hashPrefix), (.closed, .match), (.closed, .sourceEnded),
            (.closed, .compressionFinished), (.closed, .dataOut), (.closed, .streamRead), (.closed, .close):
            throw IllegalTransition(phase: phase, event: event)
        }
    }
}
