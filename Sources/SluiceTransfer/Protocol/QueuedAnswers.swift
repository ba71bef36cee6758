/// The receiver's answers held back behind a staged file's, oldest first
/// (`ReceiverMachine.queuedAnswers`): each leaves in constant time and is moved out, never
/// copied. (A `FIFO`'s `first` copied the answer to look at it, a file's request and all, and
/// its `removeFirst` copied it again: a sixth of the receiving loop's time on a tree of small
/// files went to copies of the machine's enums.) A ring that doubles when full: it holds room
/// for the most that waited at once.
struct QueuedAnswers: Equatable, Sendable {
    /// A ring: its capacity a power of two, the oldest answer at `head`, `count` from there on.
    private var ring: [ReceiverMachine.QueuedAnswer?] = []
    private var head = 0
    /// How many wait.
    private(set) var count = 0

    /// None waits.
    init() {}

    var isEmpty: Bool { count == 0 }

    /// `answer` waits behind those queued before it.
    mutating func append(_ answer: ReceiverMachine.QueuedAnswer) {
        if count == ring.count { grow() }
        ring[(head + count) & (ring.count - 1)] = answer
        count += 1
    }

    /// The first answer taken out if it is a staged file's (its file), else nil with nothing
    /// taken.
    mutating func popStaged() -> ReceiverMachine.IncomingFile? {
        guard count > 0, case .staged? = ring[head] else { return nil }
        guard case .staged(let file)? = takeFirst() else { return nil }
        return file
    }

    /// The first answer taken out if it is ready to go (its actions), else nil with nothing
    /// taken.
    mutating func popReady() -> [ReceiverAction]? {
        guard count > 0, case .ready? = ring[head] else { return nil }
        guard case .ready(let actions)? = takeFirst() else { return nil }
        return actions
    }

    /// The first answer, moved out of the ring.
    private mutating func takeFirst() -> ReceiverMachine.QueuedAnswer? {
        let first = ring[head].take()
        head = (head + 1) & (ring.count - 1)
        count -= 1
        return first
    }

    /// The answers in order, oldest first.
    private var inOrder: [ReceiverMachine.QueuedAnswer?] {
        (0..<count).map { ring[(head + $0) & (ring.count - 1)] }
    }

    /// Twice the room (16 at first), the answers moved to its start in order.
    private mutating func grow() {
        var larger = [ReceiverMachine.QueuedAnswer?](repeating: nil, count: max(16, ring.count * 2))
        for offset in 0..<count { larger[offset] = ring[(head + offset) & (ring.count - 1)].take() }
        ring = larger
        head = 0
    }

    /// Equal when they hold the same answers in the same order, wherever their fronts are.
    static func == (a: QueuedAnswers, b: QueuedAnswers) -> Bool {
        a.inOrder == b.inOrder
    }
}
