@testable import QuicTransport
import QuicTestSupport
import Testing

/// `NWConnectionGroup.InboundStreams` hands streams over as the `AsyncStream` it replaced did:
/// in order, buffered until read, ending after the last one once the tunnel ends, and ending
/// for a reader whose task is cancelled while it waits.
@Suite("Inbound streams sequence")
struct InboundStreamsTests {
    private static func unstartedStreams(_ count: Int) -> [NWConnection] {
        (0..<count).map { _ in NWConnection(host: "127.0.0.1", port: 9, using: .quic(alpn: ["test"])) }
    }

    @Test func streamsComeInOrderAndTheEndFollowsTheLast() async {
        let queue = InboundStreamQueue()
        let streams = Self.unstartedStreams(3)
        for stream in streams { queue.yield(stream) }
        queue.finish()
        queue.yield(Self.unstartedStreams(1)[0])  // after the end: dropped
        var read: [NWConnection] = []
        for await stream in NWConnectionGroup.InboundStreams(queue: queue) { read.append(stream) }
        #expect(read.count == 3 && zip(read, streams).allSatisfy { $0 === $1 })
    }

    @Test func aWaitingReaderGetsTheNextStream() async {
        let queue = InboundStreamQueue()
        let stream = Self.unstartedStreams(1)[0]
        let reader = Task { () -> NWConnection? in
            var iterator = NWConnectionGroup.InboundStreams(queue: queue).makeAsyncIterator()
            return await iterator.next()
        }
        // The reader must be parked, or the stream would only be buffered and polled.
        #expect(await eventually { queue.hasWaitingReader }, "the reader never waited")
        queue.yield(stream)
        #expect(await reader.value === stream)
    }

    @Test func aCancelledReaderEndsTheSequence() async {
        let queue = InboundStreamQueue()
        let reader = Task { () -> NWConnection? in
            var iterator = NWConnectionGroup.InboundStreams(queue: queue).makeAsyncIterator()
            return await iterator.next()
        }
        // Parked, so the cancellation handler ends the wait (not the check before parking).
        #expect(await eventually { queue.hasWaitingReader }, "the reader never waited")
        reader.cancel()
        #expect(await reader.value == nil)
        queue.yield(Self.unstartedStreams(1)[0])
        var iterator = NWConnectionGroup.InboundStreams(queue: queue).makeAsyncIterator()
        #expect(await iterator.next() == nil, "the sequence has ended")
    }
}
