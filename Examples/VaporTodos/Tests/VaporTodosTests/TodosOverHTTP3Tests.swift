import AsyncHTTPClient
import ExampleTesting
import Foundation
import H3
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import Testing
import Vapor
import VaporTodosApp

/// The example application served over HTTP/3 by `app.servers.use(.http3(…))`, checked against
/// Vapor's own HTTP/1.1 server on TCP and with large bodies and a shutdown.
@Suite("VaporTodos over HTTP/3", .serialized, .timeLimit(.minutes(6)))
struct TodosOverHTTP3Tests {
    /// The page and the JSON API's requests, in order: list, create, create an invalid one,
    /// delete, delete what is gone, list again, and a path nothing serves.
    static let script: [(method: HTTPRequest.Method, path: String, body: String?)] = [
        (.get, "/", nil),
        (.get, "/todos", nil),
        (.post, "/todos", #"{"title":"Try HTTP/3"}"#),
        (.post, "/todos", #"{"name":"no title"}"#),
        (.get, "/todos", nil),
        (.delete, "/todos/1", nil),
        (.delete, "/todos/1", nil),
        (.get, "/todos", nil),
        (.get, "/todos/nothing-here", nil),
    ]

    /// The same script on a fresh application over each transport gives the same statuses and
    /// bodies; errors included, and all of HTTP/3's on one connection. Every TCP response
    /// names the HTTP/3 port in `Alt-Svc`.
    @Test func thePageAndTheAPIAnswerOverHTTP3AsOverTCP() async throws {
        let overHTTP3 = try await RunningTodos.start()
        let client = overHTTP3.http3Client()
        var http3: [Exchange] = []
        var connectionPorts = Set<UInt16>()
        do {
            for step in Self.script {
                var fields = HTTPFields()
                if step.body != nil { fields[.contentType] = "application/json" }
                let response = try await client.execute(overHTTP3.request(step.method, step.path, fields: fields), body: step.body.map { Array($0.utf8) })
                http3.append(Exchange(status: response.head.status.code, body: try await response.body.collect()))
                connectionPorts.insert(try #require(response.connection.establishment?.localPort))
            }
        } catch {
            client.shutdown()
            await overHTTP3.stop()
            throw error
        }
        client.shutdown()
        await overHTTP3.stop()
        #expect(connectionPorts.count == 1, "the requests took \(connectionPorts.count) connections")

        let overTCP = try await RunningTodos.start()
        let tcpClient = HTTPClient(eventLoopGroupProvider: .singleton)
        var tcp: [Exchange] = []
        do {
            for step in Self.script {
                var request = HTTPClientRequest(url: "http://127.0.0.1:\(overTCP.tcpPort)\(step.path)")
                request.method = .init(rawValue: step.method.rawValue)
                if let body = step.body {
                    request.headers.add(name: "content-type", value: "application/json")
                    request.body = .bytes(ByteBuffer(string: body))
                }
                let response = try await tcpClient.execute(request, timeout: .seconds(30))
                #expect(response.headers["alt-svc"] == [#"h3=":\#(overTCP.http3Port)"; ma=86400"#], "\(step.method) \(step.path)")
                tcp.append(Exchange(status: Int(response.status.code), body: Array(buffer: try await response.body.collect(upTo: 1 << 20))))
            }
        } catch {
            try? await tcpClient.shutdown()
            await overTCP.stop()
            throw error
        }
        try await tcpClient.shutdown()
        await overTCP.stop()
        #expect(http3 == tcp)
        #expect(http3.map(\.status) == [200, 200, 201, 400, 200, 204, 404, 200, 404])
        #expect(http3.first?.body.contains("<h1>To-dos</h1>") == true)
        #expect(http3[4].body == #"[{"id":1,"title":"Try HTTP\/3"}]"#)
    }

    /// 50 MB down from the streaming route and 50 MB up to the streaming upload route, each
    /// byte-exact (SHA-256), both paced by QUIC flow control.
    @Test func fiftyMegabytesGoEachWayByteExact() async throws {
        let todos = try await RunningTodos.start()
        let client = todos.http3Client()
        defer { client.shutdown() }
        let total = 50_000_000
        let expected = Pattern.sha256Hex(total: total)
        try await todos.stopping {
            let download = try await client.execute(todos.request(.get, "/stream?bytes=\(total)"))
            #expect(download.head.status == .ok)
            var received = 0
            var hash = IncrementalSHA256()
            for try await piece in download.body {
                received += piece.count
                hash.update(piece)
            }
            #expect(received == total)
            #expect(hash.hex == expected)

            let sent = NIOLockedValueBox(0)
            let upload = AsyncThrowingStream<[UInt8], any Error>(unfolding: {
                sent.withLockedValue { offset -> [UInt8]? in
                    guard offset < total else { return nil }
                    let count = min(256 << 10, total - offset)
                    defer { offset += count }
                    return Pattern.bytes(from: offset, count: count)
                }
            })
            let response = try await client.execute(todos.request(.post, "/upload"), bodyStream: upload)
            #expect(response.head.status == .ok)
            let digest = try JSONDecoder().decode(UploadDigest.self, from: Data(try await response.body.collect()))
            #expect(digest.size == total)
            #expect(digest.sha256 == expected)
        }
    }

    /// Vapor's shutdown sends GOAWAY (RFC 9114 §5.2): the download in flight runs to its end,
    /// and a request after it is refused.
    @Test func shutdownLetsADownloadInFlightFinish() async throws {
        let todos = try await RunningTodos.start(gracePeriod: .seconds(60))
        let client = todos.http3Client()
        defer { client.shutdown() }
        let total = 20_000_000
        let response = try await client.execute(todos.request(.get, "/stream?bytes=\(total)"))
        let late = todos.request(.get, "/todos")
        var iterator = response.body.makeAsyncIterator()
        let first = try await iterator.next() ?? []
        let stopping = Task { await todos.app.server.shutdown() }
        var received = first.count
        var hash = IncrementalSHA256()
        hash.update(first)
        while let piece = try await iterator.next() {
            received += piece.count
            hash.update(piece)
        }
        #expect(received == total, "the download in flight at shutdown ended after \(received) bytes")
        #expect(hash.hex == Pattern.sha256Hex(total: total))
        await stopping.value
        #expect(todos.app.http3.port == nil, "the HTTP/3 server has stopped")
        await #expect(throws: (any Error).self) {
            _ = try await client.execute(late)
        }
        await todos.stopped()
    }
}
