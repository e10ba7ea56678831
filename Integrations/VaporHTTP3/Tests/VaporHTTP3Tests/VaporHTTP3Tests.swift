import AsyncHTTPClient
import Foundation
import H3
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import Testing
import Vapor
import VaporHTTP3

/// A Vapor application with `app.servers.use(.http3(…))` over real loopback UDP and TCP: the same
/// routes answer the same over both, and HTTP/3's own features reach the route.
@Suite("Vapor over HTTP/3", .serialized, .timeLimit(.minutes(3)))
struct VaporHTTP3Tests {
    /// Status and body of one exchange, the same shape for either protocol.
    struct Exchange: Equatable, CustomStringConvertible {
        var status: Int
        /// The response's field names, sorted, without those that belong to one transport:
        /// TCP's `connection` and the `alt-svc` it advertises HTTP/3 with.
        var fieldNames: [String]
        var body: String
        var description: String { "\(status) \(fieldNames) \(body)" }

        /// `body` with JSON objects' keys sorted: Foundation's encoder writes them in no fixed order.
        init(status: Int, fieldNames: some Sequence<String>, body: [UInt8]) throws {
            self.status = status
            self.fieldNames = Set(fieldNames.map { $0.lowercased() }).subtracting(["connection", "alt-svc"]).sorted()
            if let object = try? JSONSerialization.jsonObject(with: Data(body), options: [.fragmentsAllowed]) {
                self.body = String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .fragmentsAllowed]), as: UTF8.self)
            } else {
                self.body = String(decoding: body, as: UTF8.self)
            }
        }
    }

    static let exchanges: [(HTTPRequest.Method, String, String?)] = [
        (.get, "/todos", nil),
        // The GET route's fields without its content (RFC 9110 §9.3.2).
        (.head, "/todos", nil),
        (.post, "/todos", #"{"title":"ship HTTP/3"}"#),
        (.delete, "/todos/1", nil),
        (.delete, "/todos/7", nil),
        (.get, "/missing", nil),
    ]

    /// GET, HEAD, POST and DELETE JSON routes answer over HTTP/3 (certificate from PEM files) exactly
    /// as they answer over TCP through Vapor's own server: status, body, and the same header
    /// fields, `date` among them.
    @Test func jsonRoutesAnswerTheSameOverHTTP3AndTCP() async throws {
        let server = try await TestServer.start(usesPEMFiles: true)
        let client = server.http3Client()
        let tcpClient = HTTPClient(eventLoopGroupProvider: .singleton)
        do {
            for (method, path, body) in Self.exchanges {
                let request = server.http3Request(method, path, contentType: body == nil ? nil : "application/json")
                let h3 = try await client.execute(request, body: body.map { Array($0.utf8) })
                let overHTTP3 = try Exchange(
                    status: h3.head.status.code, fieldNames: h3.head.headerFields.map(\.name.canonicalName), body: try await h3.body.collect())

                var tcpRequest = HTTPClientRequest(url: "http://127.0.0.1:\(server.tcpPort)\(path)")
                tcpRequest.method = .init(rawValue: method.rawValue)
                if let body {
                    tcpRequest.headers.add(name: "content-type", value: "application/json")
                    tcpRequest.body = .bytes(ByteBuffer(string: body))
                }
                let tcp = try await tcpClient.execute(tcpRequest, timeout: .seconds(30))
                let overTCP = try Exchange(
                    status: Int(tcp.status.code), fieldNames: tcp.headers.map(\.name), body: Array(buffer: try await tcp.body.collect(upTo: 1 << 20)))
                #expect(overHTTP3 == overTCP, "\(method) \(path)")
                #expect(overHTTP3.fieldNames.contains("date"), "RFC 9110 §6.6.1: \(method) \(path)")
            }
            let created = try await client.execute(server.http3Request(.post, "/todos", contentType: "application/json"), body: Array(#"{"title":"abc"}"#.utf8))
            #expect(created.head.status == .created)
            #expect(try JSONDecoder().decode(Todo.self, from: Data(try await created.body.collect())) == Todo(id: 3, title: "abc"))
        } catch {
            try? await tcpClient.shutdown()
            client.shutdown()
            try await server.stop()
            throw error
        }
        try await tcpClient.shutdown()
        client.shutdown()
        try await server.stop()
    }

    /// Responses over TCP, errors included, name the HTTP/3 port in `Alt-Svc` (RFC 7838); by
    /// default that is the port number TCP bound.
    @Test func tcpResponsesAdvertiseHTTP3InAltSvc() async throws {
        let server = try await TestServer.start(http3Port: nil)
        let tcpClient = HTTPClient(eventLoopGroupProvider: .singleton)
        #expect(Int(server.http3Port) == server.tcpPort, "the HTTP/3 port follows TCP's when none is configured")
        for path in ["/todos", "/missing"] {
            let response = try await tcpClient.execute(HTTPClientRequest(url: "http://127.0.0.1:\(server.tcpPort)\(path)"), timeout: .seconds(30))
            _ = try await response.body.collect(upTo: 1 << 20)
            let altSvc = response.headers.first(name: "alt-svc")
            #expect(altSvc?.hasPrefix("h3=\":\(server.http3Port)\"") == true, "\(path): \(altSvc ?? "no Alt-Svc")")
            let parsed = try AltServiceFieldValue(parsing: altSvc ?? "")
            #expect(parsed == .alternatives([AltService(protocolID: "h3", port: server.http3Port)]))
        }
        try await tcpClient.shutdown()
        let client = server.http3Client()
        let overHTTP3 = try await client.execute(server.http3Request(.get, "/todos"))
        _ = try await overHTTP3.body.collect()
        #expect(overHTTP3.head.headerFields[.altSvc] == nil, "HTTP/3 responses need no advertisement")
        client.shutdown()
        let http3Server = server.app.http3.server
        #expect(http3Server.altSvc == "h3=\":\(server.http3Port)\"; ma=86400")
        try await server.stop()
        #expect(http3Server.altSvc == nil, "a stopped server advertises nothing")
    }

    /// With `advertisesAlternativeService` off, TCP responses stay silent about HTTP/3, which
    /// still serves.
    @Test func anApplicationCanLeaveHTTP3Unadvertised() async throws {
        let server = try await TestServer.start(advertisesHTTP3: false)
        let tcpClient = HTTPClient(eventLoopGroupProvider: .singleton)
        let response = try await tcpClient.execute(HTTPClientRequest(url: "http://127.0.0.1:\(server.tcpPort)/todos"), timeout: .seconds(30))
        _ = try await response.body.collect(upTo: 1 << 20)
        #expect(response.status == .ok)
        #expect(response.headers.first(name: "alt-svc") == nil)
        try await tcpClient.shutdown()
        let client = server.http3Client()
        let overHTTP3 = try await client.execute(server.http3Request(.get, "/todos"))
        _ = try await overHTTP3.body.collect()
        #expect(overHTTP3.head.status == .ok)
        client.shutdown()
        try await server.stop()
    }

    /// 50 MB up and 50 MB down over HTTP/3, byte for byte (SHA-256), both paced by QUIC flow
    /// control: the route reads the upload as it arrives and writes the download as it leaves.
    @Test func fiftyMegabytesGoUpAndComeDownExactly() async throws {
        let total = 50_000_000
        let server = try await TestServer.start()
        let client = server.http3Client()
        let expected = patternDigest(total: total)

        // Streamed to a route marked `streamsHTTP3RequestBody()`: it reads the first chunk long
        // before the client has offered the whole body (a collected body would all be sent first).
        let offset = server.uploadSent
        let upload = AsyncThrowingStream<[UInt8], any Error>(unfolding: {
            offset.withLockedValue { offset -> [UInt8]? in
                guard offset < total else { return nil }
                let count = min(256 * 1024, total - offset)
                defer { offset += count }
                return patternBytes(offset: offset, count: count)
            }
        })
        var request = server.http3Request(.post, "/upload-streamed", contentType: "application/octet-stream")
        request.headerFields[.contentLength] = "\(total)"
        let uploaded = try await client.execute(request, bodyStream: upload)
        #expect(uploaded.head.status == .ok)
        let digest = try JSONDecoder().decode(UploadDigest.self, from: Data(try await uploaded.body.collect()))
        #expect(digest == UploadDigest(size: total, sha256: expected))
        let sentAtFirstChunk = try #require(server.uploadSentAtFirstChunk.withLockedValue { $0 })
        #expect(sentAtFirstChunk < 24 << 20, "the client had offered \(sentAtFirstChunk) bytes before the route read any")

        // A collecting route gets it whole, within the configured limit.
        let smaller = patternBytes(offset: 0, count: 5_000_000)
        let collected = try await client.execute(server.http3Request(.post, "/upload", contentType: "application/octet-stream"), body: smaller)
        #expect(collected.head.status == .ok)
        #expect(try JSONDecoder().decode(UploadDigest.self, from: Data(try await collected.body.collect())) == UploadDigest(size: smaller.count, sha256: hex(SHA256.hash(data: smaller))))

        let downloaded = try await client.execute(server.http3Request(.get, "/download?bytes=\(total)"))
        #expect(downloaded.head.status == .ok)
        var hasher = SHA256()
        var received = 0
        var largestLead = 0
        for try await chunk in downloaded.body {
            hasher.update(data: chunk)
            received += chunk.count
            // Paced by QUIC: the route is never far ahead of what has arrived. A body collected
            // before sending would be written whole before the first byte left.
            largestLead = max(largestLead, server.writes.withLockedValue { $0 } - received)
        }
        #expect(received == total)
        #expect(hex(hasher.finalize()) == expected)
        #expect(largestLead < 24 << 20, "the route ran \(largestLead) bytes ahead of the client")

        // Vapor's own stream body arrives whole too, collected by the bridge first.
        let collectedDownload = try await client.execute(server.http3Request(.get, "/collected-download?bytes=3000000"))
        #expect(try await collectedDownload.body.collect() == patternBytes(offset: 0, count: 3_000_000))
        client.shutdown()
        try await server.stop()
    }

    /// A body over the limit is answered 413 by the application's ErrorMiddleware, as over TCP.
    @Test func aBodyOverTheLimitIsRefusedWith413() async throws {
        let server = try await TestServer.start()
        let client = server.http3Client()
        let response = try await client.execute(server.http3Request(.post, "/todos", contentType: "application/json"), body: [UInt8](repeating: 0x20, count: 65 * 1024 * 1024))
        #expect(response.head.status == .contentTooLarge)
        let body = String(decoding: try await response.body.collect(), as: UTF8.self)
        #expect(body.contains("\"error\":true"), "\(body)")
        client.shutdown()
        try await server.stop()
    }

    /// A thrown `Abort(.notFound)` is a 404 from ErrorMiddleware, any other error its 500; the
    /// connection stays, and the next request on it succeeds.
    @Test func aThrownAbortIsA404AndTheConnectionGoesOn() async throws {
        let server = try await TestServer.start()
        let client = server.http3Client()
        let missing = try await client.execute(server.http3Request(.get, "/missing"))
        #expect(missing.head.status == .notFound)
        let body = String(decoding: try await missing.body.collect(), as: UTF8.self)
        #expect(try Exchange(status: 404, fieldNames: [], body: Array(body.utf8)).body == #"{"error":true,"reason":"Not Found"}"#)
        let boom = try await client.execute(server.http3Request(.get, "/boom"))
        #expect(boom.head.status == .internalServerError, "any other error is ErrorMiddleware's 500")
        _ = try await boom.body.collect()
        let next = try await client.execute(server.http3Request(.get, "/todos"))
        #expect(next.head.status == .ok)
        _ = try await next.body.collect()
        let first = missing.connection.establishment?.localPort
        #expect(first != nil && next.connection.establishment?.localPort == first, "the second request went on the same connection")
        client.shutdown()
        try await server.stop()
    }

    /// The route reads the client's RFC 9218 priority and may override it.
    @Test func theRouteReadsTheRequestPriority() async throws {
        let server = try await TestServer.start()
        let client = server.http3Client()
        let response = try await client.execute(server.http3Request(.get, "/priority"), priority: HTTPPriority(urgency: 1, incremental: true))
        #expect(String(decoding: try await response.body.collect(), as: UTF8.self) == "u=1 i=true now=u=0")
        let unmarked = try await client.execute(server.http3Request(.get, "/priority"))
        #expect(String(decoding: try await unmarked.body.collect(), as: UTF8.self) == "u=3 i=false now=u=0")
        client.shutdown()
        try await server.stop()
    }

    /// Trailers go both ways: the route reads the client's and sets its own, which Vapor's
    /// `Response` has no place for.
    @Test func trailersCrossBothWays() async throws {
        let server = try await TestServer.start()
        let client = server.http3Client()
        let response = try await client.execute(
            server.http3Request(.post, "/trailers"), body: Array("hello".utf8), trailers: [HTTPField.Name("x-request-note")!: "sent last"])
        #expect(String(decoding: try await response.body.collect(), as: UTF8.self) == "5 bytes")
        #expect(response.body.trailers?[HTTPField.Name("x-response-note")!] == "echo sent last")
        client.shutdown()
        try await server.stop()
    }

    /// `req.remoteAddress` is the client's address and port; the request says HTTP/3 and runs on
    /// its event loop.
    @Test func theRemoteAddressIsTheClients() async throws {
        let server = try await TestServer.start()
        let client = server.http3Client()
        let response = try await client.execute(server.http3Request(.get, "/remote"))
        let clientPort = try #require(response.connection.establishment?.localPort)
        #expect(String(decoding: try await response.body.collect(), as: UTF8.self) == "127.0.0.1 \(clientPort) 3 true")
        client.shutdown()
        try await server.stop()
    }

    /// Shutting the application's server down sends GOAWAY: the request in flight finishes, and
    /// later requests are refused.
    @Test func gracefulShutdownFinishesTheRequestInFlightAndRefusesNewOnes() async throws {
        let server = try await TestServer.start()
        let client = server.http3Client()
        defer { client.shutdown() }
        let request = server.http3Request(.get, "/slow")
        let late = server.http3Request(.get, "/todos")
        let tcpPort = server.tcpPort
        let inflight = Task { () throws -> (Int, String) in
            let response = try await client.execute(request)
            return (response.head.status.code, String(decoding: try await response.body.collect(), as: UTF8.self))
        }
        await server.gate.arrival()
        let shutdown = Task { await server.app.server.shutdown() }
        // TCP stops accepting at once; poll until it does, so the shutdown has begun.
        let tcpClient = HTTPClient(eventLoopGroupProvider: .singleton)
        let deadline = ContinuousClock.now + .seconds(20)
        var tcpRefused = false
        while !tcpRefused && ContinuousClock.now < deadline {
            do {
                let response = try await tcpClient.execute(HTTPClientRequest(url: "http://127.0.0.1:\(tcpPort)/todos"), timeout: .seconds(5))
                _ = try await response.body.collect(upTo: 1 << 20)
                try await Task.sleep(for: .milliseconds(20))
            } catch {
                tcpRefused = true
            }
        }
        try await tcpClient.shutdown()
        #expect(tcpRefused, "Vapor's TCP server stopped accepting")
        #expect(server.app.http3.port != nil, "HTTP/3 waits for its request in flight")
        server.gate.open()
        let (status, body) = try await inflight.value
        #expect(status == 200 && body == "finished", "the request in flight when GOAWAY went out completes")
        await shutdown.value
        #expect(server.app.http3.port == nil)
        await #expect(throws: (any Error).self) { _ = try await client.execute(late) }
        try await server.app.asyncShutdown()
    }
}
