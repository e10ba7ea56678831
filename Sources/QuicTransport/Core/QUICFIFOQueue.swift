/// A first-in, first-out queue over an array and the index of its head: taking from the front
/// moves nothing, and the taken prefix is dropped in one move once it is most of the array,
/// so draining a queue costs linear time however long it grew. The core's queues (streams to
/// write, datagrams to send) use it; the core does without NIO's `CircularBuffer`, being
/// sans-I/O.
struct QUICFIFOQueue<Element> {
    private var elements: [Element] = []
    private var head = 0

    var isEmpty: Bool { head == elements.count }

    var first: Element? { isEmpty ? nil : elements[head] }

    mutating func append(_ element: Element) { elements.append(element) }

    /// Takes the first element off; the queue must not be empty.
    mutating func removeFirst() {
        head += 1
        if head == elements.count {
            elements.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 64 && head * 2 > elements.count {
            elements.removeFirst(head)
            head = 0
        }
    }
}
