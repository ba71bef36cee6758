import Testing

@testable import SluiceTransfer

@Suite("The order answers are awaited in")
struct AnswerOrderTests {
    @Test("Entries leave in the order they were announced, however many wait and however the storage is compacted")
    func order() {
        var order = AnswerOrder()
        #expect(order.isEmpty && order.first == nil && order.last == nil)
        var model: [Int] = []
        var next = 0
        // Thousands ahead of their answers, as a sender of small files runs, with the storage
        // compacted along the way; then drained, and used again.
        for round in 0..<3 {
            for step in 0..<5000 {
                order.append(next)
                model.append(next)
                next += 1
                if step % 3 == round {
                    order.removeFirst()
                    model.removeFirst()
                }
                #expect(order.count == model.count)
                #expect(order.first == model.first && order.last == model.last)
            }
            #expect(order.contains(model[model.count / 2]) && !order.contains(-1))
            #expect(order[1] == model[1])
            while !model.isEmpty {
                #expect(order.first == model.removeFirst())
                order.removeFirst()
            }
            #expect(order.isEmpty && order.count == 0)
            order.removeFirst()  // nothing to remove: nothing happens
            #expect(order.isEmpty)
        }
    }
}
