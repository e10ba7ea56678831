import Crypto
import Foundation
import H3
import HTTPTypes
import QuicTransport
import Testing
import Vapor
import VaporHTTP3
import VaporTodosApp

/// The example's routes, served by `configure(_:)` on loopback, over HTTP/3.
@Suite("VaporTodos over HTTP/3", .serialized, .timeLimit(.minutes(2)))
struct VaporTodosTests {
    @Test func theAPIAndThePageAnswerOverHTTP3() async throws {
        let app = try await Application.make(.testing)
        app.directory = DirectoryConfiguration(workingDirectory: URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path + "/")
        try await configure(app)
        app.http.server.configuration.hostname = "127.0.0.1"
        app.http.server.configuration.port = 0
        app.http3.configuration.port = 0
        let identity = try SelfSignedCertificate.generate()
        app.http3.configuration.server.identity = identity
        try await app.server.start(address: nil)
        var clientConfiguration = HTTP3Client.Configuration()
        clientConfiguration.certificateVerification = .pinnedSHA256(identity.sha256Fingerprint)
        let client = HTTP3Client(configuration: clientConfiguration)
        let authority = "localhost:\(app.http3.port!)"
        func request(_ method: HTTPRequest.Method, _ path: String) -> HTTPRequest {
            HTTPRequest(method: method, scheme: "https", authority: authority, path: path)
        }
        do {
            let page = try await client.execute(request(.get, "/"))
            #expect(page.head.status == .ok)
            #expect(String(decoding: try await page.body.collect(), as: UTF8.self).contains("<h1>To-dos</h1>"))

            var post = request(.post, "/todos")
            post.headerFields[.contentType] = "application/json"
            let created = try await client.execute(post, body: Array(#"{"title":"try HTTP/3"}"#.utf8))
            #expect(created.head.status == .created)
            let todo = try JSONDecoder().decode(Todo.self, from: Data(try await created.body.collect()))
            #expect(todo.title == "try HTTP/3")
            let list = try await client.execute(request(.get, "/todos"))
            #expect(try JSONDecoder().decode([Todo].self, from: Data(try await list.body.collect())) == [todo])
            let deleted = try await client.execute(request(.delete, "/todos/\(todo.id!)"))
            #expect(deleted.head.status == .noContent)
            let again = try await client.execute(request(.delete, "/todos/\(todo.id!)"))
            #expect(again.head.status == .notFound)

            let bytes = (0..<1_000_000).map { UInt8($0 % 251) }
            let streamed = try await client.execute(request(.get, "/stream?bytes=\(bytes.count)"))
            #expect(try await streamed.body.collect() == bytes)
            let uploaded = try await client.execute(request(.post, "/upload"), body: bytes)
            let digest = try JSONDecoder().decode(UploadDigest.self, from: Data(try await uploaded.body.collect()))
            #expect(digest.size == bytes.count)
            #expect(digest.sha256 == SHA256.hash(data: bytes).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined())
        } catch {
            client.shutdown()
            await app.server.shutdown()
            try await app.asyncShutdown()
            throw error
        }
        client.shutdown()
        await app.server.shutdown()
        try await app.asyncShutdown()
    }
}
