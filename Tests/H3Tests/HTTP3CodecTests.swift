import CQuicShims
import H3
import QuicTestSupport
import QuicTransport
import Testing

/// nghttp3 on both ends of an in-memory QUIC pair (real ngtcp2 and GnuTLS, virtual clock).
@Suite("HTTP3Codec in memory")
struct HTTP3CodecTests {
    static func configuration() -> QUICConfiguration {
        var configuration = QUICConfiguration()
        configuration.alpn = [HTTP3.alpn]
        return configuration
    }

    /// A pair whose server answers every request with 200 and `body(path)`.
    static func makePair(
        lossRate: Double = 0,
        body: @escaping @Sendable (String) -> [UInt8]
    ) throws -> (InMemoryPair, HTTP3Codec, ServerBox) {
        try makePair(lossRate: lossRate) { server, event in
            guard case .headers(let stream, let fields, false) = event else { return }
            let path = fields.pairs.first { $0.name == ":path" }?.value ?? "/"
            let payload = body(path)
            try? server.submitResponse(
                streamID: stream,
                headers: [(":status", "200"), ("content-length", "\(payload.count)")],
                body: payload
            )
        }
    }

    /// A pair whose server codec's every event goes to `serve`, after each step. The client's
    /// core talks to `wrappingClient(client)`, the client codec itself unless a test watches it.
    static func makePair(
        lossRate: Double = 0,
        seed: UInt64 = 3,
        wrappingClient: (HTTP3Codec) -> any QUICApplicationCodec = { $0 },
        serve: @escaping (HTTP3Codec, HTTP3Event) -> Void
    ) throws -> (InMemoryPair, HTTP3Codec, ServerBox) {
        let client = try HTTP3Codec(role: .client)
        let box = ServerBox()
        let pair = try InMemoryPair(
            clientConfiguration: configuration(),
            serverConfiguration: configuration(),
            seed: seed,
            clientCodec: wrappingClient(client),
            serverCodec: { box.make() }
        )
        pair.lossRate = lossRate
        pair.afterStep = {
            guard let server = box.codec else { return }
            for event in server.takeEvents() { serve(server, event) }
        }
        return (pair, client, box)
    }

    /// Holds the server's codec, which the endpoint creates for its first connection.
    // @unchecked Sendable: `codec` is set and read only by the thread that steps the pair: the
    // endpoint makes the codec inside a step, and `afterStep` runs on the same thread.
    final class ServerBox: @unchecked Sendable {
        var codec: HTTP3Codec?
        func make() -> any QUICApplicationCodec {
            let codec = try! HTTP3Codec(role: .server)
            self.codec = codec
            return codec
        }
    }

    static func request(_ path: String) -> [(name: String, value: String)] {
        [(":method", "GET"), (":scheme", "https"), (":authority", "localhost"), (":path", path)]
    }

    /// Runs until the response on `stream` ends; returns its status and body.
    static func response(_ pair: InMemoryPair, _ client: HTTP3Codec, stream: Int64) throws -> (status: String?, body: [UInt8]) {
        var status: String?
        var body: [UInt8] = []
        var ended = false
        try pair.run(until: {
            for event in client.takeEvents() {
                switch event {
                case .headers(stream, let fields, false): status = fields.pairs.first { $0.name == ":status" }?.value
                case .data(stream, let bytes): body += bytes
                case .end(stream): ended = true
                default: break
                }
            }
            return ended
        })
        return (status, body)
    }

    @Test func getReturnsStatusAndBody() throws {
        let (pair, client, _) = try Self.makePair { path in Array("hello from \(path)".utf8) }
        try pair.run(until: { pair.client.isHandshakeCompleted })
        let stream = try #require(try client.submitRequest(headers: Self.request("/index.html"), body: nil))
        #expect(stream == 0)
        let (status, body) = try Self.response(pair, client, stream: stream)
        #expect(status == "200")
        #expect(String(decoding: body, as: UTF8.self) == "hello from /index.html")
    }

    /// A request stream that opens on the server with the client's STOP_SENDING, before any
    /// byte, and is then reset never reaches nghttp3, whose stream_close callback reports
    /// nothing for it. The server's codec reports the end itself and counts the stream closed,
    /// so a server draining for shutdown does not wait out its grace period for it.
    @Test func aRequestCancelledBeforeItsFirstByteIsReportedClosed() throws {
        var closed: [Int64] = []
        let (pair, client, box) = try Self.makePair { _, event in
            if case .closed(let stream, _) = event { closed.append(stream) }
        }
        try pair.run(until: { client.isEstablished && box.codec?.isEstablished == true })
        let stream = try #require(try pair.client.openCodecBidirectionalStream())
        let cancelled = HTTP3ErrorCode.requestCancelled.rawValue
        // STOP_SENDING alone opens the stream on the server (ngtcp2 calls stream_open); a
        // RESET_STREAM first would not.
        pair.client.shutdownCodecStream(streamID: stream, code: cancelled, read: true, write: false)
        try pair.run(until: { box.codec?.openRequestStreams == 1 })
        pair.client.shutdownCodecStream(streamID: stream, code: cancelled, read: false, write: true)
        try pair.run(until: { closed.contains(stream) })
        #expect(box.codec?.openRequestStreams == 0)
    }

    /// A server encodes responses with QPACK's static table and literals only, as quic-go's,
    /// quiche's and nginx's do (RFC 9204 §2.1.1 lets an encoder never use the dynamic table).
    /// Response fields change from response to response (content-length, dates, ETags), so
    /// inserting them saves few bytes, and each section that referred to the table would cost
    /// the client a Section Acknowledgment and the server its decoding (§4.4.1): about 1,250
    /// instructions of the server's 28,500 per GET under `h3load -m 50`. Here twenty responses
    /// repeat a field that a dynamic table would have taken; the server's encoder stream carries
    /// its stream type and nothing else, and every field still arrives.
    @Test func responsesLeaveTheDynamicTableUnused() throws {
        let repeated = ("x-served-by", "an-origin-server-with-a-long-name.example")
        var counting: StreamByteCounter?
        let (pair, client, _) = try Self.makePair(wrappingClient: { client in
            let counter = StreamByteCounter(client)
            counting = counter
            return counter
        }) { server, event in
            guard case .headers(let stream, _, false) = event else { return }
            try? server.submitResponse(
                streamID: stream,
                headers: [(":status", "200"), ("content-type", "text/plain; charset=us-ascii"), repeated, ("content-length", "2")],
                body: Array("ok".utf8)
            )
        }
        let counted = try #require(counting)
        try pair.run(until: { pair.client.isHandshakeCompleted })
        for index in 0..<20 {
            let stream = try #require(try client.submitRequest(headers: Self.request("/\(index)"), body: nil))
            var fields: [(name: String, value: String)] = []
            var ended = false
            try pair.run(until: {
                for event in client.takeEvents() {
                    if case .headers(stream, let received, false) = event { fields = received.pairs }
                    if case .end(stream) = event { ended = true }
                }
                return ended
            })
            #expect(fields.contains { $0 == repeated }, "response \(index) lost its field: \(fields)")
        }
        // Server-initiated unidirectional streams (RFC 9000 §2.1); the QPACK encoder stream
        // begins with its type, 0x02 (RFC 9204 §4.2).
        let encoderStreams = counted.firstByte.filter { $0.key & 0x3 == 0x3 && $0.value == 0x02 }.map(\.key)
        #expect(encoderStreams.count == 1, "the server's QPACK encoder stream was not seen: \(counted.firstByte)")
        for stream in encoderStreams {
            #expect(counted.bytes[stream] == 1, "the server's encoder stream carried \(counted.bytes[stream] ?? 0) bytes: it used the dynamic table")
        }
    }

    /// Passes everything to the codec it wraps, counting the bytes each stream delivered and
    /// keeping each stream's first byte.
    final class StreamByteCounter: QUICApplicationCodec {
        let codec: any QUICApplicationCodec
        var bytes: [Int64: Int] = [:]
        var firstByte: [Int64: UInt8] = [:]
        init(_ codec: any QUICApplicationCodec) { self.codec = codec }

        func connectionEstablished(_ core: QUICConnectionCore) throws { try codec.connectionEstablished(core) }
        func streamOpened(streamID: Int64) { codec.streamOpened(streamID: streamID) }
        func receive(streamID: Int64, bytes received: UnsafeRawBufferPointer, fin: Bool) throws -> Int {
            if firstByte[streamID] == nil, let first = received.first { firstByte[streamID] = first }
            bytes[streamID, default: 0] += received.count
            return try codec.receive(streamID: streamID, bytes: received, fin: fin)
        }
        func acknowledged(streamID: Int64, bytes: UInt64) throws { try codec.acknowledged(streamID: streamID, bytes: bytes) }
        func peerReset(streamID: Int64, code: UInt64) throws { try codec.peerReset(streamID: streamID, code: code) }
        func streamClosed(streamID: Int64, code: UInt64?) throws { try codec.streamClosed(streamID: streamID, code: code) }
        func nextStreamData(into vectors: UnsafeMutableBufferPointer<ngtcp2_vec>) throws -> (streamID: Int64, count: Int, fin: Bool)? {
            try codec.nextStreamData(into: vectors)
        }
        func didWrite(streamID: Int64, bytes: Int) throws { try codec.didWrite(streamID: streamID, bytes: bytes) }
        func setBlocked(streamID: Int64, _ blocked: Bool) throws { try codec.setBlocked(streamID: streamID, blocked) }
        func writeShutDown(streamID: Int64) throws { try codec.writeShutDown(streamID: streamID) }
        var needsPass: Bool { codec.needsPass }
    }

    @Test func largeBodiesSurviveLoss() throws {
        let payload = (0..<2_000_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 1) }
        let (pair, client, _) = try Self.makePair(lossRate: 0.03) { _ in payload }
        try pair.run(until: { pair.client.isHandshakeCompleted })
        let stream = try #require(try client.submitRequest(headers: Self.request("/big"), body: nil))
        let (status, body) = try Self.response(pair, client, stream: stream)
        #expect(status == "200")
        #expect(body == payload)
        #expect(pair.droppedPackets > 0)
    }

    @Test func concurrentRequestsShareOneConnection() throws {
        let (pair, client, _) = try Self.makePair { path in Array(path.utf8) }
        try pair.run(until: { pair.client.isHandshakeCompleted })
        var streams: [Int64] = []
        for index in 0..<20 {
            streams.append(try #require(try client.submitRequest(headers: Self.request("/r\(index)"), body: nil)))
        }
        #expect(streams == (0..<20).map { Int64($0 * 4) })
        var bodies: [Int64: [UInt8]] = [:]
        var ended = Set<Int64>()
        try pair.run(until: {
            for event in client.takeEvents() {
                if case .data(let stream, let bytes) = event { bodies[stream, default: []] += bytes }
                if case .end(let stream) = event { ended.insert(stream) }
            }
            return ended.count == streams.count
        })
        for (index, stream) in streams.enumerated() {
            #expect(bodies[stream] == Array("/r\(index)".utf8))
        }
    }

    /// A request's HEADERS frame, QPACK-encoded from the static table only (RFC 9204 §4.5):
    /// GET, https, authority localhost, and `path`.
    static func headersFrame(path: String) -> [UInt8] {
        let authority = Array("localhost".utf8), pathBytes = Array(path.utf8)
        var section: [UInt8] = [0x00, 0x00, 0xD1, 0xD7]  // prefix; :method GET (17); :scheme https (23)
        section += [0x50, UInt8(authority.count)] + authority  // :authority (static name 0), literal value
        section += [0x51, UInt8(pathBytes.count)] + pathBytes  // :path (static name 1), literal value
        return [0x01, UInt8(section.count)] + section  // HEADERS, length (one-byte varint)
    }

    /// A HEADERS frame cut across packets pauses its field section after the fields it has so
    /// far; another stream's section decoded meanwhile must neither take nor lose them.
    @Test func aFieldSectionCutAcrossPacketsResumesIntact() throws {
        let box = ServerBox()
        var requests: [(stream: Int64, fields: [(name: String, value: String)])] = []
        let pair = try InMemoryPair(clientConfiguration: Self.configuration(), serverConfiguration: Self.configuration(), seed: 3) { box.make() }
        pair.afterStep = {
            for case .headers(let stream, let fields, false) in box.codec?.takeEvents() ?? [] { requests.append((stream, fields.pairs)) }
        }
        try pair.run(until: { pair.client.isHandshakeCompleted })
        // A plain QUIC client writes the frames itself, so the cut falls where the test puts it:
        // after :method and :scheme, inside :authority.
        let first = try #require(try pair.client.openStream(bidirectional: true))
        let second = try #require(try pair.client.openStream(bidirectional: true))
        let firstFrame = Self.headersFrame(path: "/first")
        try firstFrame[..<8].withUnsafeBytes { try pair.client.send(streamID: first, bytes: $0, fin: false, token: 1) }
        try pair.run(until: { pair.clientEvents.contains(.streamSendCompleted(streamID: first, token: 1, error: nil)) })
        try Self.headersFrame(path: "/second").withUnsafeBytes { try pair.client.send(streamID: second, bytes: $0, fin: true, token: 2) }
        try pair.run(until: { !requests.isEmpty })
        try firstFrame[8...].withUnsafeBytes { try pair.client.send(streamID: first, bytes: $0, fin: true, token: 3) }
        try pair.run(until: { requests.count == 2 })

        let expected = { (path: String) in Self.request(path).map { "\($0.name): \($0.value)" } }
        #expect(requests.map(\.stream) == [second, first])
        #expect(requests[0].fields.map { "\($0.name): \($0.value)" } == expected("/second"))
        #expect(requests[1].fields.map { "\($0.name): \($0.value)" } == expected("/first"))
    }
}
