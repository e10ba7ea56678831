@testable import QuicTransport
import Testing

/// The core's FIFO queue keeps order across the moves that drop its taken prefix.
@Suite("Core FIFO queue")
struct QUICFIFOQueueTests {
    @Test func orderHoldsAcrossCompactionAndEmptying() {
        var queue = QUICFIFOQueue<Int>()
        var taken: [Int] = []
        for value in 0..<200 { queue.append(value) }
        // Past 64 taken and more than half the array: the prefix is dropped in between.
        for _ in 0..<150 { taken.append(queue.first!); queue.removeFirst() }
        for value in 200..<260 { queue.append(value) }
        while let value = queue.first { taken.append(value); queue.removeFirst() }
        #expect(taken == Array(0..<260))
        #expect(queue.isEmpty && queue.first == nil)
        queue.append(7)
        #expect(queue.first == 7, "usable again once emptied")
    }
}
