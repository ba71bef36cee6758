/// A first-in first-out queue whose `removeFirst` does not move what follows: the front is an
/// index, and the storage is compacted once most of it has been taken. (An array's own
/// `removeFirst` moves every element after the first: a BATCH's hundred answers queued behind a
/// staged file cost a hundred moves of the rest each.)
struct FIFO<Element: Equatable & Sendable>: Equatable, Sendable {
    private var storage: [Element] = []
    private var head = 0

    var isEmpty: Bool { head == storage.count }
    var count: Int { storage.count - head }
    var first: Element? { isEmpty ? nil : storage[head] }

    mutating func append(_ element: Element) {
        storage.append(element)
    }

    /// Takes the first element; nil when empty.
    @discardableResult
    mutating func removeFirst() -> Element? {
        guard !isEmpty else { return nil }
        let element = storage[head]
        head += 1
        if head == storage.count {
            storage.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 64 && head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
        return element
    }

    static func == (a: FIFO, b: FIFO) -> Bool {
        a.storage[a.head...].elementsEqual(b.storage[b.head...])
    }
}
