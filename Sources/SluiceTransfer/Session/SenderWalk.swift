/// The state of a `TransferSender`'s walk of its sources (`TransferSender+Walk`): the walk
/// while it has more to list, whether a step of it runs on a worker or is held, how far a step
/// goes and how far ahead of the announcements the walk may run, and which kinds of entries the
/// receiver will not take were already warned about. Changed only by its methods; the sender
/// hands out the steps.
struct SenderWalk {
    /// A kind of entry the receiver may not take, warned about once.
    enum Unsent: Hashable {
        case symlinks, hardLinks, specials
    }

    /// The walk below what `init` checked: nil once it has ended (or for a sender without one).
    private(set) var walk: SourceWalk?
    /// A step runs on a worker.
    private(set) var running = false
    /// While set, no step starts (for tests: a walk held up).
    private(set) var held = false
    /// Entries a step lists at most (for tests, fewer).
    private(set) var step = TransferSender.walkStepEntries
    /// Entries listed ahead of the announcements beyond which the walk waits (for tests, fewer).
    private(set) var ahead = TransferSender.walkAheadEntries
    /// Hears the walk's warnings (the `warning` given to the sender's `init`).
    private(set) var warning: ((String) -> Void)?
    /// Called on the loop after each step's entries were added (how many): for tests.
    private(set) var onStep: ((Int) -> Void)?
    private var warned: Set<Unsent> = []

    /// No walk: entries are given (`ParallelTransferSender`'s connections).
    init() {}

    /// The walk of `walk`, its warnings to `warning`.
    init(_ walk: SourceWalk, warning: ((String) -> Void)?) {
        self.walk = walk
        self.warning = warning
    }

    /// Starts a step if one may start (none runs, not held, not ended, fewer than `ahead`
    /// entries `waiting` to be announced): the walk and how many entries it lists; nil otherwise.
    mutating func startStep(waiting: Int) -> (SourceWalk, limit: Int)? {
        guard let walk, !running, !held, waiting < ahead else { return nil }
        running = true
        return (walk, step)
    }

    /// A step is done; with `last`, the walk has ended (or is not wanted any more).
    mutating func stepDone(last: Bool) {
        running = false
        if last { walk = nil }
    }

    /// Holds the walk, or lets it go on (`TransferSender.walkHeld`).
    mutating func hold(_ held: Bool) {
        self.held = held
    }

    /// Sets how many entries a step lists, and how far ahead it may run (for tests).
    mutating func limit(step: Int? = nil, ahead: Int? = nil) {
        if let step { self.step = step }
        if let ahead { self.ahead = ahead }
    }

    /// Sets what hears of each step (for tests).
    mutating func observeSteps(_ onStep: ((Int) -> Void)?) {
        self.onStep = onStep
    }

    /// Whether `kind` is warned about now: true the first time only.
    mutating func warnsFirst(about kind: Unsent) -> Bool {
        warned.insert(kind).inserted
    }
}
