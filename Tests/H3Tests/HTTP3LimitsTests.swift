import Foundation
import H3
import HTTPTypes
import QuicTestSupport
import QuicTransport
import Testing

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
        // A HEADERS frame (type 0x01) announcing 100 bytes, and then only 3 of them. The clock
        // starts before the send: the server's starts when the stream arrives, which is later.
        let opened = ContinuousClock.now
        try await stream.send(content: Data([0x01, 0x40, 0x64, 0x00, 0x00, 0xd1]), isComplete: false)
        var resetCode: UInt64?
        do {
            try await within(10) { while true { _ = try await stream.receive() } }
        } catch let NWError.quic(error) where error.kind == .streamReset {
            resetCode = error.applicationErrorCode
        }
        let waited = ContinuousClock.now - opened
        #expect(resetCode == 0x010d /* H3_REQUEST_INCOMPLETE */, "the stream ended with \(String(describing: resetCode))")
        #expect(waited >= .milliseconds(500), "reset after \(waited), before the 500 ms timeout")

        var clientConfiguration = HTTP3Client.Configuration()
        clientConfiguration.certificateVerification = .pinnedSHA256(try #require(server.generatedCertificate).sha256Fingerprint)
        let client = HTTP3Client(configuration: clientConfiguration)
        defer { Task { await client.close() } }
        let slow = try await client.execute(HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/slow"))
        #expect(slow.head.status == .ok, "a slow handler is not a slow client")
        #expect(try await slow.body.collect() == Array("ok\n".utf8))
    }

    /// h3serve's `--request-header-timeout` reaches its server: aioquic's request whose header
    /// section stops halfway is reset with H3_REQUEST_INCOMPLETE once the half second has passed
    /// (RFC 9114 §4.1.2), and the same connection's next GET is answered.
    @Test func h3serveResetsAHeaderSectionThatNeverCompletesAfterItsFlag() async throws {
        let served = try makeServedRoot("slowloris", file: "small.bin", size: 1000, multiplier: 7)
        defer { try? FileManager.default.removeItem(at: served.root) }
        let (server, port) = try await startH3serve(root: served.root, ["--no-tcp", "--workers", "1", "--request-header-timeout", "0.5"])
        defer { server.stop() }

        let slow = try await Self.abuse("slowloris", port: port)
        #expect(slow["outcome"] as? String == "stream-reset" && slow["error_code"] as? Int == 0x010d, "\(slow)")
        let waited = try #require(slow["seconds"] as? Double, "\(slow)")
        #expect(waited >= 0.5, "reset after \(waited) s, before the 0.5 s timeout")
        #expect(slow["then_status"] as? Int == 200, "the connection must serve on after the reset: \(slow)")
        #expect(server.isRunning, "h3serve stopped: \(server.standardError.suffix(1500))")
    }

    /// `maximumConnections` counts connections served, not the ones that linger for their
    /// closing or draining period (RFC 9000 §10.2): a server at its limit takes new clients as
    /// soon as the old ones have closed. Before, they were refused with CONNECTION_REFUSED for
    /// 3 PTO after each close. The new clients connect at once: each `close()` has sent its
    /// CONNECTION_CLOSE, which reaches the one server socket before their Initials.
    @Test func aServerAtItsLimitTakesNewClientsAsSoonAsOldOnesLeave() async throws {
        var configuration = HTTP3Server.Configuration()
        configuration.port = 0
        configuration.maximumConnections = 2
        let server = try HTTP3Server(configuration: configuration) { _ in
            HTTP3ServerResponse(status: .ok, body: Array("ok\n".utf8))
        }
        let port = try await server.start()
        defer { server.shutdown(gracePeriod: .zero) }
        var clientConfiguration = HTTP3Client.Configuration()
        clientConfiguration.certificateVerification = .pinnedSHA256(try #require(server.generatedCertificate).sha256Fingerprint)
        let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/")

        for round in 1...3 {
            let clients = [HTTP3Client(configuration: clientConfiguration), HTTP3Client(configuration: clientConfiguration)]
            for client in clients {
                let response = try await within(10) { try await client.execute(request) }
                #expect(response.head.status == .ok, "round \(round)")
                #expect(try await response.body.collect() == Array("ok\n".utf8))
            }
            for client in clients { await client.close() }
        }
        #expect(await eventually { server.liveConnections.holdingConnectionState == 0 })
    }

    /// What one run of `h3_abuse.py ATTACK` against `port` saw the server do.
    static func abuse(_ attack: String, port: UInt16, _ extra: [String] = []) async throws -> [String: Any] {
        let run = try ChildProcess(try TestEnvironment.python(), [
            TestEnvironment.aioquicScript("h3_abuse.py"), attack, "https://127.0.0.1:\(port)/small.bin", "-k", "--timeout", "10",
        ] + extra)
        let status = try await run.waitForExit(seconds: 60)
        let line = try #require(run.standardOutput.split(separator: "\n").last, "h3_abuse.py printed nothing (exit \(status)): \(run.standardError)")
        return try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
    }

    /// Peers that break the protocol's limits (RFC 9000 §4.6, RFC 9204 §4.3.1, RFC 9114 §4.2.2)
    /// against a real h3serve, from aioquic: each gets the answer the RFCs name, and the server
    /// serves on, to the abusers' other requests where the error is the stream's and to new
    /// clients throughout.
    @Test func protocolLimitsGetTheirErrorsAndTheServerServesOn() async throws {
        let served = try makeServedRoot("limits", file: "small.bin", size: 1000, multiplier: 7)
        defer { try? FileManager.default.removeItem(at: served.root) }
        let (server, port) = try await startH3serve(root: served.root, ["--no-tcp", "--workers", "1"])
        defer { server.stop() }

        // One stream beyond initial_max_streams_bidi: STREAM_LIMIT_ERROR (RFC 9000 §4.6).
        let streams = try await Self.abuse("stream-limit", port: port)
        #expect(streams["outcome"] as? String == "connection-closed" && streams["error_code"] as? Int == 0x4, "\(streams)")
        // A dynamic table larger than SETTINGS_QPACK_MAX_TABLE_CAPACITY: QPACK_ENCODER_STREAM_ERROR.
        let table = try await Self.abuse("qpack-capacity", port: port)
        #expect(table["outcome"] as? String == "connection-closed" && table["error_code"] as? Int == 0x201, "\(table)")
        // A header section of about 103 KB in fields of 1 KB: 431, and the connection goes on.
        let section = try await Self.abuse("big-headers", port: port, ["--size", "1000", "--fields", "100"])
        #expect(section["status"] as? Int == 431, "\(section)")
        #expect(section["then_status"] as? Int == 200, "the connection must serve on after a 431: \(section)")
        // A section just under SETTINGS_MAX_FIELD_SECTION_SIZE is served.
        let under = try await Self.abuse("big-headers", port: port, ["--size", "30000", "--fields", "2"])
        #expect(under["status"] as? Int == 200, "\(under)")
        // One field line over 64 KiB stops nghttp3's QPACK decoder: the connection closes with
        // QPACK_DECOMPRESSION_FAILED and says why.
        let field = try await Self.abuse("big-headers", port: port, ["--size", "70000"])
        #expect(field["outcome"] as? String == "connection-closed" && field["error_code"] as? Int == 0x200, "\(field)")
        #expect((field["reason"] as? String)?.contains("64 KiB") == true, "\(field)")

        #expect(server.isRunning, "h3serve stopped: \(server.standardError.suffix(1500))")
        let fresh = try ChildProcess(try TestEnvironment.python(), [
            TestEnvironment.aioquicScript("h3_client.py"), "-k", "https://127.0.0.1:\(port)/small.bin",
        ])
        #expect(try await fresh.waitForExit(seconds: 30) == 0, "a new client after the abuse: \(fresh.standardError.suffix(800))")
        #expect(fresh.standardOutput.contains("\"status\": 200"), "\(fresh.standardOutput)")
    }
}
