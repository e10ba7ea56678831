import AsyncHTTPClient
import ExampleTesting
import Foundation
import H3
import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOSSL
import TodosApp
import Testing

/// The example Hummingbird application served over HTTP/3 by `HTTP3Service`, checked against
/// its own TCP server and with real clients.
@Suite("Hummingbird over HTTP/3", .serialized)
struct TodosOverHTTP3Tests {
    /// The JSON API's requests, in order: list, create, create an invalid one, delete, delete
    /// what is gone, list again.
    static let script: [(method: HTTPRequest.Method, path: String, body: String?)] = [
        (.get, "/todos", nil),
        (.post, "/todos", #"{"title":"Try HTTP/3"}"#),
        (.post, "/todos", #"{"title":""}"#),
        (.delete, "/todos/1", nil),
        (.delete, "/todos/1", nil),
        (.get, "/todos", nil),
        (.get, "/todos/nothing-here", nil),
    ]

    @Test func theJSONAPIAnswersOverHTTP3AsItDoesOverTCP() async throws {
        let overHTTP3 = try await RunningTodos.start()
        let client = overHTTP3.http3Client()
        var http3: [Exchange] = []
        var connectionPorts = Set<UInt16>()
        for step in Self.script {
            var fields = HTTPFields()
            if step.body != nil { fields[.contentType] = "application/json" }
            let response = try await client.execute(overHTTP3.request(step.method, step.path, fields: fields), body: step.body.map { Array($0.utf8) })
            http3.append(Exchange(status: response.status.code, body: try await response.body.collect()))
            connectionPorts.insert(try #require(response.connection.establishment?.localPort))
        }
        client.shutdown()
        await overHTTP3.stop()
        // A failed request (400, 404) leaves the connection to the next one.
        #expect(connectionPorts.count == 1, "the requests took \(connectionPorts.count) connections")

        let overTCP = try await RunningTodos.start()
        defer { Task { await overTCP.stop() } }
        // BoringSSL takes no end-entity certificate (CA=false) as a trust anchor, so the TCP
        // side of this comparison does not verify; the HTTP/3 side pins the same key.
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .none
        let tcpClient = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(tlsConfiguration: tls))
        let tcp: [Exchange]
        do {
            tcp = try await Self.exchanges(overTCP, with: tcpClient)
        } catch {
            try? await tcpClient.shutdown()
            throw error
        }
        try await tcpClient.shutdown()
        #expect(http3 == tcp)
        #expect(http3.map(\.status) == [200, 201, 400, 204, 404, 200, 404])
    }

    /// The script's exchanges with the application's TCP server, each checked for `Alt-Svc`.
    static func exchanges(_ overTCP: RunningTodos, with tcpClient: HTTPClient) async throws -> [Exchange] {
        var tcp: [Exchange] = []
        for step in Self.script {
            var request = HTTPClientRequest(url: "https://localhost:\(overTCP.tcpPort)\(step.path)")
            request.method = HTTPMethod(rawValue: step.method.rawValue)
            if let body = step.body {
                request.headers.add(name: "content-type", value: "application/json")
                request.body = .bytes(ByteBuffer(string: body))
            }
            let response = try await tcpClient.execute(request, timeout: .seconds(30))
            #expect(response.headers["alt-svc"] == [#"h3=":\#(overTCP.http3Port)"; ma=86400"#])
            let body = try await response.body.collect(upTo: 1 << 20)
            tcp.append(Exchange(status: Int(response.status.code), body: Array(buffer: body)))
        }
        return tcp
    }

    @Test func fiftyMegabytesGoEachWayByteExact() async throws {
        let todos = try await RunningTodos.start()
        let client = todos.http3Client()
        defer { client.shutdown() }
        let total = 50_000_000
        let expected = Pattern.sha256Hex(total: total)

        let download = try await client.execute(todos.request(.get, "/stream?bytes=\(total)&trailer"))
        #expect(download.status == .ok)
        var received = 0
        var hash = IncrementalSHA256()
        for try await piece in download.body {
            received += piece.count
            hash.update(piece)
        }
        #expect(received == total)
        #expect(hash.hex == expected)
        #expect(download.body.trailers?[HTTPField.Name("x-bytes-sent")!] == "\(total)", "the trailer the route's writer gave at its end")

        let sent = Offset()
        let upload = AsyncThrowingStream<[UInt8], any Error>(unfolding: {
            let start = sent.advance(by: 256 << 10, upTo: total)
            guard start < total else { return nil }
            return Pattern.bytes(from: start, count: min(256 << 10, total - start))
        })
        let response = try await client.execute(todos.request(.post, "/upload"), bodyStream: upload)
        let receipt = try JSONDecoder().decode(UploadReceipt.self, from: Data(try await response.body.collect()))
        #expect(receipt.bytes == total)
        #expect(receipt.sha256 == expected)
        await todos.stop()
    }

    @Test func aRouteSeesTheClientsAddressAndPriority() async throws {
        let todos = try await RunningTodos.start()
        let client = todos.http3Client()
        defer { client.shutdown() }
        let response = try await client.execute(todos.request(.get, "/whoami", fields: [.priority: "u=1, i"]))
        let whoami = try JSONDecoder().decode(Whoami.self, from: Data(try await response.body.collect()))
        #expect(whoami.address == "127.0.0.1")
        #expect(whoami.port == Int(try #require(response.connection.establishment?.localPort)))
        #expect(whoami.priority == "u=1, i")
        // A handler that raises the urgency sends it back in the response's `priority` field.
        let raised = try await client.execute(todos.request(.get, "/priority?urgent", fields: [.priority: "u=5"]))
        #expect(raised.head.headerFields[.priority] == "u=0")
        #expect(String(decoding: try await raised.body.collect(), as: UTF8.self) == "u=5")
        await todos.stop()
    }

    @Test func gracefulShutdownLetsARequestInFlightFinish() async throws {
        try await Self.expectDownloadFinishesAcrossShutdown(gracePeriod: .seconds(30))
    }

    /// A streamed response whose writer gives trailers ends across a graceful shutdown. It
    /// used to hang until the grace period ran out whenever the body's end came after every
    /// byte had been sent and acknowledged: the trailers were submitted after the codec's last
    /// write call of the pass, and no later pass came (`HTTP3Codec.nextStreamData` now asks
    /// nghttp3 again).
    @Test func aDownloadWithATrailerFinishesAcrossShutdown() async throws {
        let todos = try await RunningTodos.start(gracePeriod: .seconds(20))
        let client = todos.http3Client()
        defer { client.shutdown() }
        let total = 4_000_000
        let response = try await client.execute(todos.request(.get, "/stream?bytes=\(total)&trailer"))
        var iterator = response.body.makeAsyncIterator()
        var received = try await iterator.next()?.count ?? 0
        let stopping = Task { await todos.stop() }
        let hang: (any Error)?
        do {
            while let piece = try await iterator.next() { received += piece.count }
            hang = nil
        } catch {
            hang = error
        }
        await stopping.value
        if let hang {
            Issue.record(hang, "the download with a trailer did not end across the shutdown")
        } else {
            #expect(received == total)
            #expect(response.body.trailers?[HTTPField.Name("x-bytes-sent")!] == "\(total)")
        }
    }

    @Test func aShortDownloadWithoutATrailerFinishesAcrossShutdown() async throws {
        try await Self.expectDownloadFinishesAcrossShutdown(total: 4_000_000, trailer: false, gracePeriod: .seconds(20))
    }

    static func expectDownloadFinishesAcrossShutdown(total: Int = 20_000_000, trailer: Bool = false, gracePeriod: Duration) async throws {
        let todos = try await RunningTodos.start(gracePeriod: gracePeriod)
        let client = todos.http3Client()
        defer { client.shutdown() }
        let path = "/stream?bytes=\(total)" + (trailer ? "&trailer" : "")
        let response = try await client.execute(todos.request(.get, path))
        var iterator = response.body.makeAsyncIterator()
        var received = try await iterator.next()?.count ?? 0
        let stopping = Task { await todos.stop() }
        while let piece = try await iterator.next() { received += piece.count }
        #expect(received == total, "the download in flight at shutdown ended after \(received) bytes")
        await stopping.value
        await #expect(throws: (any Error).self) {
            _ = try await client.execute(todos.request(.get, "/todos"))
        }
    }
}

/// How far an upload has got.
// @unchecked Sendable: an `AsyncThrowingStream(unfolding:)` calls its closure, the only user,
// one call at a time.
final class Offset: @unchecked Sendable {
    private var value = 0

    /// The offset before this step; moves on by `step`, at most to `end`.
    func advance(by step: Int, upTo end: Int) -> Int {
        defer { value = min(value + step, end) }
        return value
    }
}
