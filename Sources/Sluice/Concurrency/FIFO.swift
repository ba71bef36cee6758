/// A first-in first-out queue whose `removeFirst` neither moves what follows nor keeps what it
/// took: the front is an index, a taken slot is emptied at once (a consumer that drops the
/// element frees it), and the storage is compacted once most of it has been taken, so what the
/// queue holds is bounded by what is in it. (An array's own `removeFirst` moves every element
/// after the first: a BATCH's hundred answers queued behind a staged file cost a hundred moves
/// of the rest each.)
package struct FIFO<Element> {
    private var storage: [Element?] = []
    private var head = 0

    /// An empty queue.
    package init() {}

    package var isEmpty: Bool { head == storage.count }
    var count: Int { storage.count - head }
    /// The oldest element, still queued.
    package var first: Element? { isEmpty ? nil : storage[head] }

    package mutating func append(_ element: Element) {
        storage.append(element)
    }

    /// Takes the oldest element out; nil when empty.
    @discardableResult
    package mutating func removeFirst() -> Element? {
        guard !isEmpty else { return nil }
        let element = storage[head]
        storage[head] = nil
        head += 1
        if head == storage.count {
            removeAll()
        } else if head >= 16 && head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
        return element
    }

    mutating func removeAll() {
        storage.removeAll(keepingCapacity: true)
        head = 0
    }
}

extension FIFO: Sendable where Element: Sendable {}

extension FIFO: Equatable where Element: Equatable {
    /// Equal when they hold the same elements in the same order, wherever their fronts are.
    package static func == (a: FIFO, b: FIFO) -> Bool {
        a.storage[a.head...].elementsEqual(b.storage[b.head...])
    }
}
