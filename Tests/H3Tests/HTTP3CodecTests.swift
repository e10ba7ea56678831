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
        let client = try HTTP3Codec(role: .client)
        let box = ServerBox()
        let pair = try InMemoryPair(
            clientConfiguration: configuration(),
            serverConfiguration: configuration(),
            seed: 3,
            clientCodec: client,
            serverCodec: { box.make() }
        )
        pair.lossRate = lossRate
        pair.afterStep = {
            guard let server = box.codec else { return }
            for event in server.takeEvents() {
                if case .headers(let stream, let fields, false) = event {
                    let path = fields.first { $0.name == ":path" }?.value ?? "/"
                    let payload = body(path)
                    try? server.submitResponse(
                        streamID: stream,
                        headers: [(":status", "200"), ("content-length", "\(payload.count)")],
                        body: payload
                    )
                }
            }
        }
        return (pair, client, box)
    }

    /// Holds the server's codec, which the endpoint creates for its first connection.
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
                case .headers(stream, let fields, false): status = fields.first { $0.name == ":status" }?.value
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
}
