import Sluice

/// The life of one incoming file (or range of one) at the receiver, from the moment it is open
/// to the moment it is stored or let go: what its session may do with it in each phase, changed
/// only by `handle(_:)`, one exhaustive `switch` over (phase, event).
///
/// Its session holds the file's descriptors, but lends them to a worker while the bytes held
/// from an interrupted transfer are hashed (`checkingPrefix`) and while the verified file is
/// stored (`committing`): a file let go then is not abandoned under that work. A file let go
/// while a prefix is hashed is abandoned when the hash is done (`releasing`); one let go while
/// it is committed is closed by its commit, whatever that finds.
///
/// An event that makes no sense in a phase (a second commit, data after the file was let go)
/// is an internal error with a message, never a crash: the session that meets one ends.
struct FileLifecycle: Equatable, Sendable {
    enum Phase: Equatable, Sendable {
        /// A worker hashes the bytes held from an interrupted transfer, with the file's
        /// descriptor: no data is taken until it is done.
        case checkingPrefix
        /// Data arrives and is written and hashed.
        case receiving
        /// The hasher's slots are full: the data path takes nothing until it has room.
        case waitingForRoom
        /// END arrived for a compressed file: the worker flushes its decompressor into it.
        case finishing
        /// The digest of what was written (and the SHA-256 of the held bytes) is computed.
        case verifying
        /// Verified: a worker stores it (commits, stages, or reads a ranged file back whole)
        /// and closes its descriptors.
        case committing
        /// Let go while a worker hashes its prefix: abandoned (the partial kept when `keep`)
        /// once that is done.
        case releasing(keep: Bool)
        /// Stored, failed, or let go: nothing more happens to it.
        case finished
    }

    enum Event: Equatable, Sendable {
        /// The file holds bytes from an interrupted transfer, which a worker hashes into its
        /// digest before any data is taken (sent before any data).
        case checkPrefix
        /// The held prefix's hash is done (whether it could be read is the session's to say).
        case prefixChecked
        /// The hasher had no room for the next bytes.
        case hasherFull
        /// The hasher has room again.
        case room
        /// END arrived for a compressed file: its worker flushes the decompressor.
        case endArrived
        /// The machine asked for the file's digest (COMMIT or RANGE-END).
        case verify
        /// The digests were computed: the file is stored by a worker.
        case commit
        /// A write to it failed.
        case writeFailed
        /// It failed where it stands (a digest mismatch, a prefix that cannot be read): its
        /// session abandons it.
        case failed
        /// Its commit is done, stored or refused (the commit closed the descriptors), or a
        /// verified range that was not its file's last is done.
        case stored
        /// The machine let it go (a refusal, a failure, the session's end).
        case drop(keep: Bool)
    }

    /// What the session does after an event.
    enum Effect: Equatable, Sendable {
        /// Nothing more than the phase says.
        case nothing
        /// The event came after the file was let go, or was not waited for: ignore it.
        case ignore
        /// The prefix is checked: tell the machine the file is open.
        case proceed
        /// Fail the file with the write's error (the machine lets it go).
        case failWrite
        /// Abandon the file now (after the writes queued for it), keeping the partial when `keep`.
        case abandon(keep: Bool)
    }

    /// An event its phase cannot take: a fault of the session, not of the peer.
    struct IllegalTransition: Error, Equatable, Sendable, CustomStringConvertible {
        let phase: Phase
        let event: Event
        var description: String { "internal error: a received file in phase \(phase) cannot take \(event)" }
    }

    private(set) var phase: Phase

    /// A file just opened: `receiving`, or `checkingPrefix` after `checkPrefix`.
    init() {
        phase = .receiving
    }

    /// Data may be taken now.
    var takesData: Bool { phase == .receiving }

    /// The data path waits for the hasher.
    var waitsForRoom: Bool { phase == .waitingForRoom }

    /// The file is still its session's to write: received, flushed or waiting for room.
    var isOpenForData: Bool {
        switch phase {
        case .receiving, .waitingForRoom, .finishing: return true
        case .checkingPrefix, .verifying, .committing, .releasing, .finished: return false
        }
    }

    /// Takes `event`: moves to the phase it leads to and returns what the session does. Every
    /// (phase, event) pair is spelled out, none by a wildcard: a new phase or event does not
    /// compile until each pair it makes is decided. An illegal one leaves the phase as it was.
    mutating func handle(_ event: Event) throws(IllegalTransition) -> Effect {
        switch (phase, event) {
        // Held bytes from an interrupted transfer are hashed first.
        case (.receiving, .checkPrefix):
            phase = .checkingPrefix
            return .nothing
        case (.checkingPrefix, .prefixChecked):
            phase = .receiving
            return .proceed
        case (.checkingPrefix, .failed):
            phase = .finished
            return .abandon(keep: false)
        case (.checkingPrefix, .drop(let keep)):
            phase = .releasing(keep: keep)
            return .nothing
        case (.checkingPrefix, .room), (.checkingPrefix, .writeFailed):
            return .ignore  // room comes whenever a slot frees; a worker's late report
        case (.checkingPrefix, .checkPrefix), (.checkingPrefix, .hasherFull), (.checkingPrefix, .endArrived),
            (.checkingPrefix, .verify), (.checkingPrefix, .commit), (.checkingPrefix, .stored):
            throw IllegalTransition(phase: phase, event: event)

        // Data arrives, is written and hashed.
        case (.receiving, .hasherFull):
            phase = .waitingForRoom
            return .nothing
        case (.receiving, .endArrived):
            phase = .finishing
            return .nothing
        case (.receiving, .verify):
            phase = .verifying
            return .nothing
        case (.receiving, .writeFailed):
            return .failWrite
        case (.receiving, .failed):
            phase = .finished
            return .abandon(keep: false)
        case (.receiving, .drop(let keep)):
            phase = .finished
            return .abandon(keep: keep)
        case (.receiving, .room):
            return .ignore  // room comes whenever a slot frees, waited for or not
        case (.receiving, .prefixChecked), (.receiving, .commit), (.receiving, .stored):
            throw IllegalTransition(phase: phase, event: event)

        case (.waitingForRoom, .room):
            phase = .receiving
            return .nothing
        case (.waitingForRoom, .writeFailed):
            return .failWrite
        case (.waitingForRoom, .failed):
            phase = .finished
            return .abandon(keep: false)
        case (.waitingForRoom, .drop(let keep)):
            phase = .finished
            return .abandon(keep: keep)
        case (.waitingForRoom, .checkPrefix), (.waitingForRoom, .prefixChecked), (.waitingForRoom, .hasherFull),
            (.waitingForRoom, .endArrived), (.waitingForRoom, .verify), (.waitingForRoom, .commit),
            (.waitingForRoom, .stored):
            throw IllegalTransition(phase: phase, event: event)

        case (.finishing, .verify):
            phase = .verifying
            return .nothing
        case (.finishing, .writeFailed):
            return .failWrite
        case (.finishing, .failed):
            phase = .finished
            return .abandon(keep: false)
        case (.finishing, .drop(let keep)):
            phase = .finished
            return .abandon(keep: keep)
        case (.finishing, .room):
            return .ignore
        case (.finishing, .checkPrefix), (.finishing, .prefixChecked), (.finishing, .hasherFull),
            (.finishing, .endArrived), (.finishing, .commit), (.finishing, .stored):
            throw IllegalTransition(phase: phase, event: event)

        // Verified, then stored by a worker.
        case (.verifying, .commit):
            phase = .committing
            return .nothing
        case (.verifying, .stored):
            phase = .finished  // a range verified that was not the file's last
            return .nothing
        case (.verifying, .failed):
            phase = .finished
            return .abandon(keep: false)
        case (.verifying, .drop(let keep)):
            phase = .finished
            return .abandon(keep: keep)
        case (.verifying, .room), (.verifying, .writeFailed):
            return .ignore  // the commit reports a failed write
        case (.verifying, .checkPrefix), (.verifying, .prefixChecked), (.verifying, .hasherFull),
            (.verifying, .endArrived), (.verifying, .verify):
            throw IllegalTransition(phase: phase, event: event)

        case (.committing, .stored):
            phase = .finished
            return .nothing
        case (.committing, .failed):
            phase = .finished  // a ranged file read back whole and found wrong: the worker is done with it
            return .abandon(keep: false)
        case (.committing, .drop):
            return .nothing  // the commit closes the descriptors whatever it finds
        case (.committing, .room), (.committing, .writeFailed):
            return .ignore  // the commit reports a failed write
        case (.committing, .checkPrefix), (.committing, .prefixChecked), (.committing, .hasherFull),
            (.committing, .endArrived), (.committing, .verify), (.committing, .commit):
            throw IllegalTransition(phase: phase, event: event)

        // Let go while its prefix is hashed: abandoned once the hash is done.
        case (.releasing(let keep), .prefixChecked), (.releasing(let keep), .failed):
            phase = .finished
            return .abandon(keep: keep)
        case (.releasing, .room), (.releasing, .writeFailed), (.releasing, .commit), (.releasing, .stored):
            return .ignore
        case (.releasing, .checkPrefix), (.releasing, .hasherFull), (.releasing, .endArrived),
            (.releasing, .verify), (.releasing, .drop):
            throw IllegalTransition(phase: phase, event: event)

        // Nothing more happens to it: a worker's answer about a file let go meanwhile is ignored.
        case (.finished, .prefixChecked), (.finished, .room), (.finished, .writeFailed), (.finished, .commit),
            (.finished, .failed), (.finished, .stored):
            return .ignore
        case (.finished, .checkPrefix), (.finished, .hasherFull), (.finished, .endArrived), (.finished, .verify),
            (.finished, .drop):
            throw IllegalTransition(phase: phase, event: event)
        }
    }
}
