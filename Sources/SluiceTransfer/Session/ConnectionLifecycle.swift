/// How a `WireConnection` ends: whether it still reads, whether its peer has closed, and how
/// it closes itself, changed only by `handle(_:)`, one exhaustive `switch` over (phase, event).
///
/// A connection is open until its peer closes its sending direction (`peerClosed`: nothing
/// more is read, writing goes on) or its owner asks it to close once what is buffered is
/// written. Then it either closes (`closingWhenFlushed`), or shuts its own sending direction
/// and reads and drops what the peer still sends until the peer closes too
/// (`flushingBeforeDrain`, then `draining`), so that closing does not reset the connection
/// under the last message. `close` ends it at once from any phase.
///
/// Every event can come in every phase (a stream reports after its owner closed it, an owner
/// closes a connection that failed meanwhile): none is an error. What comes too late is
/// ignored, and a second request to close after flushing leaves the first one's way.
struct ConnectionLifecycle: Equatable, Sendable {
    enum Phase: Equatable, Sendable {
        /// Reading and writing.
        case open
        /// The peer closed its sending direction (its end was read): nothing more is read,
        /// writing goes on.
        case peerClosed
        /// Asked to close once everything buffered is written; nothing is read meanwhile.
        case closingWhenFlushed
        /// Asked to close after flushing and draining: what is buffered is written first, and
        /// what the peer sends meanwhile is left unread.
        case flushingBeforeDrain
        /// Everything was written and the sending direction shut: what the peer still sends is
        /// read and dropped until it closes.
        case draining
        /// Both streams are closed and off the loop: nothing more happens.
        case closed
    }

    enum Event: Equatable, Sendable {
        /// A read found the end of what the peer sends.
        case peerEnded
        /// The owner asks to close once everything buffered is written, draining the input
        /// meanwhile when `drainingInput` (`WireConnection.closeAfterFlush`).
        case closeAfterFlush(drainingInput: Bool)
        /// The outbound buffer is empty: everything buffered was written.
        case flushed
        /// Close now: the owner asks (`WireConnection.close`), a stream failed, a drain found
        /// the peer's end, or the wait for it ran out.
        case close
    }

    /// What the connection does after an event.
    enum Effect: Equatable, Sendable {
        /// Nothing more than the phase says.
        case nothing
        /// The event came too late to matter (the connection closes or closed): ignore it.
        case ignore
        /// Tell the owner the peer closed (`wirePeerClosed`): once per connection.
        case reportPeerClosed
        /// Write what is buffered (the connection reports `flushed` once it is all out).
        case flush
        /// Shut the sending direction and start draining the input.
        case shutOutputAndDrain
        /// Read and drop what the peer sent, closing at its end.
        case drain
        /// Close both streams, leave the loop and run `onClose`: once per connection.
        case closeStreams
    }

    private(set) var phase: Phase = .open

    /// A connection just made: open.
    init() {}

    /// Reads are allowed: the connection is open and its peer has not closed.
    var reads: Bool { phase == .open }

    /// The peer closed its sending direction, and the connection has not been asked to close.
    var peerHasClosed: Bool { phase == .peerClosed }

    /// What the peer sends is dropped rather than read into the inbound buffer.
    var drainsInput: Bool {
        switch phase {
        case .flushingBeforeDrain, .draining: return true
        case .open, .peerClosed, .closingWhenFlushed, .closed: return false
        }
    }

    /// The connection is closed.
    var isClosed: Bool { phase == .closed }

    /// Takes `event`: moves to the phase it leads to and returns what the connection does.
    /// Every (phase, event) pair is spelled out, none by a wildcard: a new phase or event does
    /// not compile until each pair it makes is decided.
    mutating func handle(_ event: Event) -> Effect {
        switch (phase, event) {
        case (.open, .peerEnded):
            phase = .peerClosed
            return .reportPeerClosed
        case (.open, .closeAfterFlush(let draining)), (.peerClosed, .closeAfterFlush(let draining)):
            phase = draining ? .flushingBeforeDrain : .closingWhenFlushed
            return .flush
        case (.open, .flushed), (.peerClosed, .flushed):
            return .nothing  // written out while the connection stays open
        case (.peerClosed, .peerEnded):
            return .ignore  // its end reported again (by a read and by an event)

        // Asked to close: the first request decides; the peer's end is no longer reported.
        case (.closingWhenFlushed, .flushed):
            phase = .closed
            return .closeStreams
        case (.flushingBeforeDrain, .flushed):
            phase = .draining
            return .shutOutputAndDrain
        case (.draining, .flushed):
            return .drain
        case (.closingWhenFlushed, .peerEnded), (.flushingBeforeDrain, .peerEnded), (.draining, .peerEnded):
            return .ignore  // a drain reads the end itself
        case (.closingWhenFlushed, .closeAfterFlush), (.flushingBeforeDrain, .closeAfterFlush),
            (.draining, .closeAfterFlush):
            return .ignore

        case (.open, .close), (.peerClosed, .close), (.closingWhenFlushed, .close), (.flushingBeforeDrain, .close),
            (.draining, .close):
            phase = .closed
            return .closeStreams

        // Closed: streams and owners that report late are ignored.
        case (.closed, .peerEnded), (.closed, .closeAfterFlush), (.closed, .flushed), (.closed, .close):
            return .ignore
        }
    }
}
