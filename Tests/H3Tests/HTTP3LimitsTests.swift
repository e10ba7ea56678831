import CommandLineSupport
import Foundation
import H3
import HTTPTypes
import QuicTestSupport
import QuicTransport
import Testing

struct Timeout: Error {}

/// Fails instead of hanging when `body` takes longer than `seconds`.
func within<T: Sendable>(_ seconds: Double, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withDeadline(seconds: TestEnvironment.scaled(seconds), timeoutError: { Timeout() }, body)
}

/// What the HTTP/3 server does to clients that abuse it, over real UDP on 127.0.0.1 (issue 16,
/// part 4). Each case checks that the abuse is cut off and that the server serves on.
@Suite("HTTP/3 server limits", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct HTTP3LimitsTests {
    /// A raw QUIC client speaking ALPN h3, for sending what no HTTP/3 client would.
    static func rawClient(port: UInt16) async throws -> NWConnectionGroup {
        let options = NWProtocolQUIC.Options(alpn: [HTTP3.alpn])
        options.tls.certificateVerification = .insecure
        let group = NWConnectionGroup(
            with: NWMultiplexGroup(to: .hostPort(host: "127.0.0.1", port: .init(integerLiteral: port))),
            using: NWParameters(quic: options)
        )
        group.start(queue: DispatchQueue(label: "raw-h3"))
        try await within(10) { try await group.waitUntilReady() }
        return group
    }

    /// Slowloris (RFC 9114 §10.5): a request stream whose header section never completes is
    /// reset with H3_REQUEST_INCOMPLETE once `requestHeaderTimeout` has passed, while a request
    /// whose handler takes longer than that is still answered.
    @Test func aHeaderSectionThatNeverCompletesIsResetAfterTheTimeout() async throws {
        var configuration = HTTP3Server.Configuration()
        configuration.port = 0
        configuration.requestHeaderTimeout = .milliseconds(500)
        let server = try HTTP3Server(configuration: configuration) { request in
            if request.head.path == "/slow" { try await Task.sleep(for: .milliseconds(1500)) }
            return HTTP3ServerResponse(status: .ok, body: Array("ok\n".utf8))
        }
        let port = try await server.start()
        defer { server.shutdown(gracePeriod: .zero) }

        let group = try await Self.rawClient(port: port)
        defer { group.cancel() }
        let stream = try #require(NWConnection(from: group))
        stream.start(queue: DispatchQueue(label: "slowloris"))
        // A HEADERS frame (type 0x01) announcing 100 bytes, and then only 3 of them.
        try await stream.send(content: Data([0x01, 0x40, 0x64, 0x00, 0x00, 0xd1]), isComplete: false)
        let opened = ContinuousClock.now
        var resetCode: UInt64?
        do {
            try await within(10) { while true { _ = try await stream.receive() } }
        } catch let NWError.quic(error) where error.kind == .streamReset {
            resetCode = error.applicationErrorCode
        }
        let waited = ContinuousClock.now - opened
        #expect(resetCode == 0x010d /* H3_REQUEST_INCOMPLETE */, "the stream ended with \(String(describing: resetCode))")
        #expect(waited >= .milliseconds(400), "reset after \(waited), before the timeout")

        var clientConfiguration = HTTP3Client.Configuration()
        clientConfiguration.certificateVerification = .pinnedSHA256(try #require(server.generatedCertificate).sha256Fingerprint)
        let client = HTTP3Client(configuration: clientConfiguration)
        defer { Task { await client.close() } }
        let slow = try await client.execute(HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/slow"))
        #expect(slow.head.status == .ok, "a slow handler is not a slow client")
        #expect(try await slow.body.collect() == Array("ok\n".utf8))
    }
}
