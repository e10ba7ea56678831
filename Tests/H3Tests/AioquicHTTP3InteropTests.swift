import Foundation
import H3
import HTTPTypes
import QuicTestSupport
import QuicTransport
import Testing

/// HTTP/3 against aioquic 1.7.2's H3Connection (peers in Tests/Interop/aioquic), both ways.
@Suite("HTTP/3 interop with aioquic", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct AioquicHTTP3InteropTests {
    /// The body aioquic's `/bytes/N` serves: byte i is (i * 31 + 7) & 0xff.
    static func pattern(_ count: Int) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
    }

    /// An aioquic HTTP/3 server on a free port, with a certificate made here.
    static func startServer(_ extra: [String] = []) async throws -> (ChildProcess, Int, SelfSignedCertificate) {
        let python = try TestEnvironment.python()
        let identity = try SelfSignedCertificate.generate()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("aioquic-h3-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let cert = directory.appendingPathComponent("cert.pem").path
        let key = directory.appendingPathComponent("key.pem").path
        try identity.certificatePEM.write(toFile: cert, atomically: true, encoding: .utf8)
        try identity.privateKeyPEM.write(toFile: key, atomically: true, encoding: .utf8)
        let server = try ChildProcess(python, [TestEnvironment.aioquicScript("h3_server.py"), "--port", "0", "--cert", cert, "--key", key] + extra)
        let line = try await server.waitForLine(containing: "LISTENING")
        return (server, Int(line.split(separator: " ").last!)!, identity)
    }

    @Test func ourClientFetchesFromAioquic() async throws {
        let (server, port, identity) = try await Self.startServer()
        defer { server.stop() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        for size in [1_000_000, 50_000_000] {
            let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/bytes/\(size)")
            let response = try await client.execute(request)
            #expect(response.head.status == .ok)
            let body = try await response.body.collect()
            #expect(try SHA256.hash(body) == (try SHA256.hash(Self.pattern(size))), "sha256 of /bytes/\(size)")
        }
        let post = HTTPRequest(method: .post, scheme: "https", authority: "localhost:\(port)", path: "/echo")
        let echoed = try await client.execute(post, body: Array("to aioquic and back".utf8)).body.collect()
        #expect(echoed == Array("to aioquic and back".utf8))
    }

    @Test func aioquicClientFetchesFromH3serve() async throws {
        let python = try TestEnvironment.python()
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("h3serve-aioquic-\(UUID())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        for size in [1_000_000, 50_000_000] {
            try Data(Self.pattern(size)).write(to: root.appendingPathComponent("\(size).bin"))
        }
        let (server, port) = try await startH3serve(root: root)
        defer { server.stop() }
        let client = try ChildProcess(python, [
            TestEnvironment.aioquicScript("h3_client.py"), "-k", "https://127.0.0.1:\(port)/1000000.bin", "https://127.0.0.1:\(port)/50000000.bin",
            "https://127.0.0.1:\(port)/absent", "--timeout", "100",
        ])
        // 51 MB through Python's QUIC stack: seconds when idle, much longer on a busy machine.
        #expect(try await client.waitForExit(seconds: 110) == 0, "\(client.standardError)")
        let results = client.standardOutput.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        #expect(results.count == 3)
        for size in [1_000_000, 50_000_000] {
            let result = results.first { ($0["url"] as? String)?.hasSuffix("/\(size).bin") == true }
            #expect(result?["status"] as? Int == 200)
            #expect(result?["sha256"] as? String == Hex.encode(try SHA256.hash(Self.pattern(size))))
        }
        #expect(results.first { ($0["url"] as? String)?.hasSuffix("/absent") == true }?["status"] as? Int == 404)
    }

    /// A client pinned to the server's certificate.
    static func client(trusting identity: SelfSignedCertificate) -> HTTP3Client {
        var configuration = HTTP3Client.Configuration()
        configuration.certificateVerification = .pinnedSHA256(identity.sha256Fingerprint)
        return HTTP3Client(configuration: configuration)
    }

    /// Runs `body` with an aioquic server that refuses its first `count` requests
    /// (`--reject-requests`), a client that trusts it, and a GET of 1000 pattern bytes.
    static func withServer(
        rejecting count: Int, _ body: (ChildProcess, HTTP3Client, HTTPRequest) async throws -> Void
    ) async throws {
        let (server, port, identity) = try await Self.startServer(["--reject-requests", "\(count)"])
        defer { server.stop() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        try await body(server, client, HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/bytes/1000"))
    }

    /// How many requests the server says it rejected, read once `expected` have been reported
    /// (or the wait ran out): the line is written before the reset leaves, but this process
    /// reads the server's output on its own thread.
    static func rejections(by server: ChildProcess, expected: Int) async -> Int {
        func count() -> Int { server.standardOutput.components(separatedBy: "REJECTED").count - 1 }
        _ = await eventually(within: 5) { count() >= expected }
        return count()
    }

    /// RFC 9114 §4.1.1: a request the server refused unprocessed (H3_REQUEST_REJECTED) may be
    /// sent again. `execute` sends it once more, and the caller sees only the response.
    @Test func aRejectedRequestIsSentAgainAndAnswered() async throws {
        try await Self.withServer(rejecting: 1) { server, client, request in
            let response = try await client.execute(request)
            #expect(response.head.status == .ok)
            #expect(try await response.body.collect() == Self.pattern(1000))
            #expect(await Self.rejections(by: server, expected: 1) == 1, "\(server.standardOutput)")
        }
    }

    /// The retry happens once: a request rejected twice fails with `requestRejected`, and the
    /// client goes on serving later requests.
    @Test func aRequestRejectedTwiceFailsAsRejected() async throws {
        try await Self.withServer(rejecting: 2) { server, client, request in
            do {
                _ = try await client.execute(request)
                Issue.record("a request rejected twice was answered")
            } catch let error as HTTP3ClientError where error.code == .requestRejected {
            } catch {
                Issue.record("expected requestRejected, got \(error)")
            }
            #expect(await Self.rejections(by: server, expected: 2) == 2, "\(server.standardOutput)")
            let response = try await client.execute(request)
            #expect(try await response.body.collect() == Self.pattern(1000))
        }
    }

    @Test func aServerThatSendsDataBeforeHeadersIsAProtocolError() async throws {
        let (server, port, identity) = try await Self.startServer(["--misbehave", "data-before-headers"])
        defer { server.stop() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/anything")
        do {
            _ = try await client.execute(request)
            Issue.record("a DATA frame before HEADERS was accepted")
        } catch let error as HTTP3ClientError {
            // RFC 9114 §4.1: a DATA frame before HEADERS is H3_FRAME_UNEXPECTED, a connection error.
            #expect("\(error)".contains("H3_FRAME_UNEXPECTED"), "\(error)")
        }
    }
}
