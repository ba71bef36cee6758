/// The entries a sender announced and has not heard answered, in the order they were announced
/// (`SenderMachine.unanswered`): answers come in that order, so the first leaves first, and
/// leaves in constant time. (An array's `removeFirst` moved every entry after it: a sender of
/// small files runs thousands of entries ahead of their answers, and each answer moved them
/// all.) The storage is compacted once most of it has left, so it holds about what waits.
struct AnswerOrder: Sendable {
    private var storage: [Int] = []
    private var head = 0

    /// None waits.
    init() {}

    var isEmpty: Bool { head == storage.count }
    /// How many wait.
    var count: Int { storage.count - head }
    /// The entry the next answer is for.
    var first: Int? { isEmpty ? nil : storage[head] }
    /// The entry announced last.
    var last: Int? { isEmpty ? nil : storage[storage.count - 1] }

    /// The entry `offset` places after the first (`self[0]` is the first).
    subscript(offset: Int) -> Int { storage[head + offset] }

    /// The smallest entry that waits (entries may be announced out of index order: a file
    /// announced again), or nil when none does.
    func min() -> Int? { storage[head...].min() }

    /// Whether `entry` waits for its answer.
    func contains(_ entry: Int) -> Bool { storage[head...].contains(entry) }

    /// `entry` was announced: its answer comes after those of the entries before it.
    mutating func append(_ entry: Int) {
        storage.append(entry)
    }

    /// The first entry's answer came. (Nothing to remove is a caller's error; nothing happens.)
    mutating func removeFirst() {
        guard !isEmpty else { return }
        head += 1
        if head == storage.count {
            storage.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 1024 && head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
    }
}
