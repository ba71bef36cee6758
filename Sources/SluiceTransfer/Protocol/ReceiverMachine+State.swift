/// What a `ReceiverMachine`'s state says to its driver: whether it takes messages now, where
/// the session stands, and what it sends first.
extension ReceiverMachine {
    /// Whether a resumed file's held bytes are checked with SHA-256 apart (HELD before END):
    /// both sides list `held-sha256`.
    var checksHeld: Bool { settings.resume && peerChecksHeld }

    /// Whether held bytes may be continued at all: only when a cryptographic digest checks
    /// them, HELD's or the agreed one. XXH3-128 resists no crafted collision, so with a sender
    /// that agreed only that, a partial starts over.
    var continuesHeld: Bool { checksHeld || digest == .sha256 }

    /// False while the machine waits for the outcome of an action: hand it no messages then.
    var acceptsMessages: Bool {
        switch state {
        case .awaitingMagic, .awaitingHello, .idle, .receiving, .discarding: return true
        case .joining, .storing, .finishing, .committing, .settling, .ended: return false
        }
    }

    /// True when the next message is the session's first after HELLO: its first entry, JOIN
    /// or BYE, the point where `settings.mustJoin` decides.
    var awaitsFirstRequest: Bool {
        guard case .idle = state else { return false }
        return !requested
    }

    var hasEnded: Bool {
        if case .ended = state { return true }
        return false
    }

    /// True once the peer's HELLO was taken (and the session has not ended): the point where
    /// a connection stops being a stranger waiting to be admitted.
    var saidHello: Bool {
        switch state {
        case .awaitingMagic, .awaitingHello, .ended: return false
        case .idle, .receiving, .discarding, .joining, .storing, .finishing, .committing, .settling: return true
        }
    }

    /// True while a file's data may arrive (its buffers are worth growing).
    var isReceivingFile: Bool {
        if case .receiving = state { return true }
        return false
    }

    /// The magic and HELLO to send first.
    func start() -> [ReceiverAction] {
        [.send(.hello(version: Wire.version, capabilities: capabilities))]
    }
}

/// The state's payloads moved out in place: a file's request and all, which a
/// `switch (state, outcome)` copied into a tuple for every outcome (and destroyed after). The
/// machine takes the payload, leaving the state `.idle`, and sets the next state with it: the
/// optimiser makes that a move, with no copy and no reference counted.
extension ReceiverMachine.State {
    /// The states that hold the file being received.
    enum FilePhase {
        case receiving, finishing, committing
    }

    /// The file of `phase`'s state, moved out and the state left `.idle` (the caller sets the
    /// next one); nil, the state unchanged, in any other state.
    @inline(__always)
    mutating func takeFile(_ phase: FilePhase) -> ReceiverMachine.IncomingFile? {
        switch phase {
        case .receiving:
            guard case .receiving(let file) = self else { return nil }
            self = .idle
            return file
        case .finishing:
            guard case .finishing(let file) = self else { return nil }
            self = .idle
            return file
        case .committing:
            guard case .committing(let file) = self else { return nil }
            self = .idle
            return file
        }
    }

    /// What `.storing` waits for, moved out and the state left `.idle`; nil, the state
    /// unchanged, in any other state.
    @inline(__always)
    mutating func takePending() -> ReceiverMachine.Pending? {
        guard case .storing(let pending) = self else { return nil }
        self = .idle
        return pending
    }
}
