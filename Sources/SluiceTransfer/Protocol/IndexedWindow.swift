/// A list indexed from where it was begun that can forget its first elements: element `i` stays
/// element `i` once those before it are forgotten (`startIndex` moves up), so indices handed out
/// stay valid for what is kept. `send --watch` keeps its entries (and what goes with them by
/// index) in these, and forgets those answered: memory follows what is in flight, not the
/// tree's size or the session's length.
///
/// Its `count` is the number of elements kept; the index the next one appended takes is
/// `endIndex`.
struct IndexedWindow<Element>: RandomAccessCollection, MutableCollection, ExpressibleByArrayLiteral {
    /// The index of the first element kept.
    private(set) var startIndex = 0
    /// The elements kept, after `head` forgotten ones whose storage has not gone yet.
    private var stored: [Element]
    private var head = 0

    init(_ elements: [Element] = []) { stored = elements }

    init(arrayLiteral elements: Element...) { stored = elements }

    var endIndex: Int { startIndex + stored.count - head }

    /// Borrowed in place, as an array's element is: `window[i].field` reads the field without
    /// copying the element (a sender's entry holds several strings and arrays), and changes one
    /// in place.
    subscript(position: Int) -> Element {
        _read { yield stored[position - startIndex + head] }
        _modify { yield &stored[position - startIndex + head] }
    }

    /// Appends `elements`, indexed from `endIndex` on.
    mutating func append<S: Sequence>(contentsOf elements: S) where S.Element == Element {
        stored.append(contentsOf: elements)
    }

    mutating func append(_ element: Element) { stored.append(element) }

    /// Inserts `element` at index `position` (kept, or `endIndex`): those from it on move up one.
    mutating func insert(_ element: Element, at position: Int) {
        stored.insert(element, at: position - startIndex + head)
    }

    static func += <S: Sequence>(window: inout IndexedWindow, elements: S) where S.Element == Element {
        window.append(contentsOf: elements)
    }

    /// Forgets the elements before index `bound` (from `startIndex` up to it, not past
    /// `endIndex`); the others keep their indices. The storage of those forgotten goes once
    /// they are as many as those kept (a copy of those kept), so that forgetting a few at a
    /// time costs a constant per element, and what is stored is at most twice what is kept.
    mutating func forget(below bound: Int) {
        let dropped = Swift.min(bound, endIndex) - startIndex
        guard dropped > 0 else { return }
        head += dropped
        startIndex += dropped
        if head >= stored.count - head {
            stored = Array(stored[head...])
            head = 0
        }
    }
}

extension IndexedWindow: Equatable where Element: Equatable {
    static func == (lhs: IndexedWindow, rhs: IndexedWindow) -> Bool {
        lhs.startIndex == rhs.startIndex && lhs.elementsEqual(rhs)
    }
}

extension IndexedWindow: Sendable where Element: Sendable {}
