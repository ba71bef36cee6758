import Testing

@testable import SluiceTransfer

@Suite("The receiver's answers queued behind staged files")
struct QueuedAnswersTests {
    /// A staged file's answer, told apart by its offset.
    static func staged(_ tag: UInt64) -> ReceiverMachine.QueuedAnswer {
        .staged(
            ReceiverMachine.IncomingFile(
                request: EntryRequest(
                    components: ["f\(tag)"], relative: "f\(tag)",
                    header: EntryHeader(mode: 0o644, mtimeSeconds: 0, mtimeNanoseconds: 0, path: Array("f\(tag)".utf8))),
                offset: tag))
    }

    /// A ready answer, told apart by its offset.
    static func ready(_ tag: UInt64) -> ReceiverMachine.QueuedAnswer {
        .ready([.send(.accept(offset: tag, vouched: false))])
    }

    @Test("Answers leave in the order they were queued, across the ring's wrap and growth, each only as its kind")
    func order() {
        var queue = QueuedAnswers()
        var model: [ReceiverMachine.QueuedAnswer] = []
        var next: UInt64 = 0
        for round in 0..<3 {
            for step in 0..<700 {
                let answer = step % 3 == 0 ? Self.staged(next) : Self.ready(next)
                queue.append(answer)
                model.append(answer)
                next += 1
                if step % 4 == round {
                    pop(&queue, &model)
                }
                #expect(queue.count == model.count)
            }
            while !model.isEmpty { pop(&queue, &model) }
            #expect(queue.isEmpty && queue.popStaged() == nil && queue.popReady() == nil)
        }
    }

    /// Takes the first answer out of both, checking the queue gives it only as its own kind.
    private func pop(_ queue: inout QueuedAnswers, _ model: inout [ReceiverMachine.QueuedAnswer]) {
        switch model.removeFirst() {
        case .staged(let file):
            #expect(queue.popReady() == nil, "a staged file's answer is not taken as a ready one")
            #expect(queue.popStaged() == file)
        case .ready(let actions):
            #expect(queue.popStaged() == nil, "a ready answer is not taken as a staged file's")
            #expect(queue.popReady() == actions)
        }
    }

    @Test("Two queues holding the same answers are equal wherever their fronts are")
    func equality() {
        var a = QueuedAnswers()
        var b = QueuedAnswers()
        for tag in 0..<20 { a.append(Self.ready(UInt64(tag))) }
        for _ in 0..<18 { _ = a.popReady() }
        for tag in 18..<20 { b.append(Self.ready(UInt64(tag))) }
        #expect(a == b)
        b.append(Self.staged(1))
        #expect(a != b)
    }
}
