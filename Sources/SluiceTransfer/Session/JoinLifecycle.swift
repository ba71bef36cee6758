/// The life of a transfer over several connections (`ParallelTransferSender`), from the first
/// connection's JOIN to the end of the last connection: whether the others may start, whether
/// everything goes over the first, whether the walk goes on; changed only by `handle(_:)`, one
/// exhaustive `switch` over (phase, event).
///
/// The first connection joins the receiver under the transfer's id; once admitted (`joined`),
/// the others start. A receiver that offers no streams declines, and the first carries
/// everything (`declined`). Once the first connection ends, the others never start and the
/// walk stops (`leadEnded`); once every connection has, the transfer is over (`done`). The user
/// may cancel at any time: the walk stops and no other connection starts, but the receiver's
/// answer, if it comes, is still taken.
///
/// An event that makes no sense in a phase (a second answer to the JOIN, an end after the
/// transfer's) is an internal error with a message, never a crash; the phase stays as it was.
struct JoinLifecycle: Equatable, Sendable {
    /// What the receiver answered the first connection.
    enum Answer: Equatable, Sendable {
        /// No answer yet.
        case none
        /// Admitted to the transfer: the other connections join it too.
        case joined
        /// It offers no streams: everything goes over the first connection.
        case declined
    }

    enum Phase: Equatable, Sendable {
        /// The first connection waits for the receiver's answer.
        case joining
        /// The first connection was admitted, and the others started.
        case joined
        /// The receiver offers no streams: the first connection carries everything.
        case declined
        /// The user cancelled (with the receiver's answer so far): the walk stops and no other
        /// connection starts.
        case cancelled(Answer)
        /// The first connection ended: the others never start (or end with what they have),
        /// and the walk stops.
        case leadEnded(Answer)
        /// Every connection ended: the summary is made.
        case done(Answer)
    }

    enum Event: Equatable, Sendable {
        /// The receiver admitted the first connection (JOINED).
        case joined
        /// The receiver offers no streams.
        case declined
        /// The user cancels the transfer.
        case cancel
        /// The first connection ended.
        case leadEnded
        /// Every connection has ended.
        case allEnded
    }

    /// What the sender does after an event.
    enum Effect: Equatable, Sendable {
        /// Nothing more than the phase says.
        case nothing
        /// Report the first connection joined and start the others.
        case startOthers
        /// Report the first connection joined; the others do not start (cancelled).
        case reportJoined
        /// Warn, and send every entry over the first connection.
        case fallBack
        /// What is held for the other connections never goes: they end with what they have,
        /// and the walk stops.
        case stopOthers
        /// Make the transfer's summary and complete.
        case finish
    }

    /// An event its phase cannot take: a fault of the sender, not of the peer.
    struct IllegalTransition: Error, Equatable, Sendable, CustomStringConvertible {
        let phase: Phase
        let event: Event
        var description: String {
            "internal error: a transfer over several connections in phase \(phase) cannot take \(event)"
        }
    }

    private(set) var phase: Phase = .joining

    /// A transfer whose first connection is about to join.
    init() {}

    /// The receiver offers no streams: one connection carries everything.
    var declined: Bool { answer == .declined }

    /// What the receiver answered the first connection so far.
    var answer: Answer {
        switch phase {
        case .joining: return .none
        case .joined: return .joined
        case .declined: return .declined
        case .cancelled(let answer), .leadEnded(let answer), .done(let answer): return answer
        }
    }

    /// The walk goes on: neither cancelled nor ended, and the first connection runs.
    var walks: Bool {
        switch phase {
        case .joining, .joined, .declined: return true
        case .cancelled, .leadEnded, .done: return false
        }
    }

    /// Takes `event`: moves to the phase it leads to and returns what the sender does. Every
    /// (phase, event) pair is spelled out, none by a wildcard: a new phase or event does not
    /// compile until each pair it makes is decided. An illegal one leaves the phase as it was.
    mutating func handle(_ event: Event) throws(IllegalTransition) -> Effect {
        switch (phase, event) {
        // The receiver's answer to the first connection.
        case (.joining, .joined):
            phase = .joined
            return .startOthers
        case (.joining, .declined):
            phase = .declined
            return .fallBack
        case (.cancelled(.none), .joined):
            phase = .cancelled(.joined)
            return .reportJoined
        case (.cancelled(.none), .declined):
            phase = .cancelled(.declined)
            return .fallBack
        case (.joined, .joined), (.joined, .declined), (.declined, .joined), (.declined, .declined),
            (.cancelled(.joined), .joined), (.cancelled(.joined), .declined), (.cancelled(.declined), .joined),
            (.cancelled(.declined), .declined):
            throw IllegalTransition(phase: phase, event: event)  // answered once

        // Cancelled: the walk stops, no other connection starts.
        case (.joining, .cancel):
            phase = .cancelled(.none)
            return .nothing
        case (.joined, .cancel):
            phase = .cancelled(.joined)
            return .nothing
        case (.declined, .cancel):
            phase = .cancelled(.declined)
            return .nothing
        case (.cancelled, .cancel), (.leadEnded, .cancel), (.done, .cancel):
            return .nothing  // stopped already

        // The first connection ends, then every one.
        case (.joining, .leadEnded), (.joined, .leadEnded), (.declined, .leadEnded), (.cancelled, .leadEnded):
            phase = .leadEnded(answer)
            return .stopOthers
        case (.leadEnded(let answer), .allEnded):
            phase = .done(answer)
            return .finish
        case (.joining, .allEnded), (.joined, .allEnded), (.declined, .allEnded), (.cancelled, .allEnded):
            throw IllegalTransition(phase: phase, event: event)  // the first connection is one of all
        case (.leadEnded, .joined), (.leadEnded, .declined), (.leadEnded, .leadEnded):
            throw IllegalTransition(phase: phase, event: event)  // the first connection says nothing more
        case (.done, .allEnded):
            return .nothing  // seen again by an end that ran inside the last one's
        case (.done, .joined), (.done, .declined), (.done, .leadEnded):
            throw IllegalTransition(phase: phase, event: event)
        }
    }
}
