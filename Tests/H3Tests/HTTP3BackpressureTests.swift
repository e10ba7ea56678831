import H3
import QuicTestSupport
import QuicTransport
import Testing

/// Flow control holds a fast sender to what its reader takes (RFC 9000 §4.1), proven on the
/// in-memory pair's virtual clock: simulated seconds of a reader that takes nothing move no more
/// than the stream's initial window, and everything arrives once the reader reads. The loopback
/// tests of `HTTP3LoopbackTests` show the same end to end through `HTTP3Client` and `HTTP3Server`.
@Suite("HTTP3 backpressure in memory")
struct HTTP3BackpressureTests {
    static let total = 16 << 20
    static let piece = 256 << 10
    /// What the sender keeps queued beyond the acknowledged bytes, as `HTTP3BodyPump` does.
    static let queueLimit = 1 << 20
    /// Simulated time in which a reader that takes nothing must hold the sender back.
    static let idleReader: UInt64 = 5_000_000_000

    /// The sending side of one streamed body: appends pieces while its queue has room.
    final class Sender {
        var codec: HTTP3Codec?
        var stream: Int64?
        private(set) var produced = 0

        func pump() {
            guard let codec, let stream else { return }
            while produced < HTTP3BackpressureTests.total, codec.bufferedBodyBytes(streamID: stream) < HTTP3BackpressureTests.queueLimit {
                produced += HTTP3BackpressureTests.piece
                codec.appendBody(
                    streamID: stream,
                    [UInt8](repeating: 0x67, count: HTTP3BackpressureTests.piece),
                    finished: produced == HTTP3BackpressureTests.total
                )
            }
        }
    }

    /// The reading side: counts body bytes, and credits them back only once it reads.
    final class Reader {
        private(set) var received = 0
        private(set) var ended = false
        private var reads = false
        private var unread: [(codec: HTTP3Codec, stream: Int64, bytes: Int)] = []

        func take(_ events: [HTTP3Event], from codec: HTTP3Codec) {
            for event in events {
                switch event {
                case .data(let stream, let bytes):
                    received += bytes.count
                    unread.append((codec, stream, bytes.count))
                case .end: ended = true
                default: break
                }
            }
            if reads { startReading() }
        }

        /// Credits what has arrived so far, and from now on everything as it arrives.
        func startReading() {
            reads = true
            for (codec, stream, bytes) in unread { codec.consumeBody(streamID: stream, bytes: bytes) }
            unread.removeAll()
        }
    }

    /// Checks the bound while the reader takes nothing, then lets it read to the end.
    static func expectHeldBackThenDelivered(_ pair: InMemoryPair, sender: Sender, reader: Reader, window: UInt64) throws {
        pair.advance(by: idleReader)
        #expect(reader.received > 0, "the reader was never offered any of the body")
        #expect(reader.received <= Int(window), "\(reader.received) bytes crossed a \(window)-byte window the reader never credited")
        #expect(
            sender.produced <= reader.received + queueLimit + piece,
            "the sender produced \(sender.produced) bytes for a reader that took \(reader.received)"
        )
        #expect(sender.produced < total, "the whole body left before the reader read any")
        reader.startReading()
        try pair.run(until: { reader.ended })
        #expect(reader.received == total)
        #expect(sender.produced == total)
    }

    @Test func anUnreadResponseHoldsTheServerBack() throws {
        let sender = Sender()
        let reader = Reader()
        let (pair, client, _) = try HTTP3CodecTests.makePair { server, event in
            guard case .headers(let stream, _, false) = event else { return }
            try? server.submitResponse(streamID: stream, headers: [(":status", "200")], body: nil, streaming: true)
            sender.codec = server
            sender.stream = stream
        }
        let serve = pair.afterStep
        pair.afterStep = {
            serve?()
            sender.pump()
            reader.take(client.takeEvents(), from: client)
        }
        try pair.run(until: { pair.client.isHandshakeCompleted })
        _ = try #require(try client.submitRequest(headers: HTTP3CodecTests.request("/stream"), body: nil))
        try Self.expectHeldBackThenDelivered(
            pair, sender: sender, reader: reader,
            window: HTTP3CodecTests.configuration().initialMaxStreamDataBidirectionalLocal
        )
    }

    @Test func anUnreadUploadHoldsTheClientBack() throws {
        let sender = Sender()
        let reader = Reader()
        let (pair, client, _) = try HTTP3CodecTests.makePair { server, event in
            reader.take([event], from: server)
            if case .end(let stream) = event {
                try? server.submitResponse(streamID: stream, headers: [(":status", "204")], body: nil)
            }
        }
        let serve = pair.afterStep
        pair.afterStep = {
            serve?()
            sender.pump()
            _ = client.takeEvents()
        }
        try pair.run(until: { pair.client.isHandshakeCompleted })
        let request = HTTP3CodecTests.request("/upload").map { $0.name == ":method" ? (name: $0.name, value: "PUT") : $0 }
        sender.stream = try #require(try client.submitRequest(headers: request, body: nil, streaming: true))
        sender.codec = client
        try Self.expectHeldBackThenDelivered(
            pair, sender: sender, reader: reader,
            window: HTTP3CodecTests.configuration().initialMaxStreamDataBidirectionalRemote
        )
    }
}
