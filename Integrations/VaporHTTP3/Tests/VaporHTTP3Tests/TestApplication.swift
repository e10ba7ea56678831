import AsyncHTTPClient
import Crypto
import Foundation
import H3
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport
import Vapor
import VaporHTTP3

/// A to-do item, as the routes under test exchange it.
struct Todo: Content, Equatable {
    var id: Int?
    var title: String
}

/// What `/upload` answers: how many bytes arrived and their SHA-256.
struct UploadDigest: Content, Equatable {
    var size: Int
    var sha256: String
}

/// A gate a route waits at until the test opens it, and tells the test it has arrived.
final class Gate: Sendable {
    private let arrivals = AsyncStream<Void>.makeStream()
    private let opening = NIOLockedValueBox<[CheckedContinuation<Void, Never>]?>([])

    /// Called by the route: reports arrival, then waits for `open()`.
    func pass() async {
        arrivals.continuation.yield()
        await withCheckedContinuation { continuation in
            let isOpen = opening.withLockedValue { waiting in
                guard waiting != nil else { return true }
                waiting!.append(continuation)
                return false
            }
            if isOpen { continuation.resume() }
        }
    }

    /// Waits until a route has arrived at the gate.
    func arrival() async {
        var iterator = arrivals.stream.makeAsyncIterator()
        _ = await iterator.next()
    }

    /// Lets every route at the gate, and every later one, through.
    func open() {
        let waiting = opening.withLockedValue { waiting in defer { waiting = nil }; return waiting ?? [] }
        for continuation in waiting { continuation.resume() }
    }
}

/// The deterministic bytes `/download` sends and uploads carry: byte i is i mod 251.
func patternBytes(offset: Int, count: Int) -> [UInt8] {
    (offset..<offset + count).map { UInt8($0 % 251) }
}

/// SHA-256 of `patternBytes(0, total)`, as lowercase hex.
func patternDigest(total: Int) -> String {
    var hasher = SHA256()
    var offset = 0
    while offset < total {
        let count = min(1 << 20, total - offset)
        hasher.update(data: patternBytes(offset: offset, count: count))
        offset += count
    }
    return hex(hasher.finalize())
}

func hex(_ digest: some Sequence<UInt8>) -> String {
    digest.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
}

/// A Vapor application serving the routes under test over TCP and HTTP/3 on loopback.
struct TestServer {
    let app: Application
    let identity: SelfSignedCertificate
    let gate = Gate()
    /// Bytes the `/download` route has written so far.
    let writes = NIOLockedValueBox(0)
    /// Bytes the test's upload has handed to the client so far, and what that was when the
    /// streaming upload route got its first chunk.
    let uploadSent = NIOLockedValueBox(0)
    let uploadSentAtFirstChunk = NIOLockedValueBox<Int?>(nil)

    var tcpPort: Int { app.http.server.shared.localAddress!.port! }
    var http3Port: UInt16 { app.http3.port! }

    /// Starts the application with `.http3`, the certificate in PEM files when `usesPEMFiles`.
    static func start(usesPEMFiles: Bool = false, http3Port: UInt16? = 0, advertisesHTTP3: Bool = true) async throws -> TestServer {
        let identity = try SelfSignedCertificate.generate()
        let app = try await Application.make(.testing)
        var configuration: Application.HTTP3.Configuration
        if usesPEMFiles {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("vapor-http3-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let chain = directory.appendingPathComponent("cert.pem").path
            let key = directory.appendingPathComponent("key.pem").path
            try identity.certificatePEM.write(toFile: chain, atomically: true, encoding: .utf8)
            try identity.privateKeyPEM.write(toFile: key, atomically: true, encoding: .utf8)
            configuration = .init(certificateChainFile: chain, privateKeyFile: key)
        } else {
            configuration = .init()
            configuration.server.identity = identity
        }
        configuration.port = http3Port
        configuration.advertisesAlternativeService = advertisesHTTP3
        configuration.maximumBodySize = "64mb"
        configuration.shutdownGracePeriod = .seconds(20)
        app.servers.use(.http3(configuration))
        app.http.server.configuration.hostname = "127.0.0.1"
        app.http.server.configuration.port = 0
        let server = TestServer(app: app, identity: identity)
        server.routes()
        do {
            try await app.server.start(address: nil)
        } catch {
            try? await app.asyncShutdown()
            throw error
        }
        return server
    }

    func stop() async throws {
        gate.open()
        await app.server.shutdown()
        try await app.asyncShutdown()
    }

    func routes() {
        let gate = self.gate
        app.get("todos") { _ in
            [Todo(id: 1, title: "write the bridge"), Todo(id: 2, title: "test it")]
        }
        app.post("todos") { req -> Response in
            var todo = try req.content.decode(Todo.self)
            todo.id = todo.title.count
            let response = Response(status: .created)
            try response.content.encode(todo)
            return response
        }
        app.delete("todos", ":id") { req -> HTTPStatus in
            guard req.parameters.get("id", as: Int.self) == 1 else { throw Abort(.notFound) }
            return .noContent
        }
        app.get("missing") { _ -> String in
            throw Abort(.notFound)
        }
        app.get("boom") { _ -> String in
            struct Boom: Error {}
            throw Boom()
        }
        app.on(.POST, "upload", body: .collect(maxSize: "64mb")) { req -> UploadDigest in
            guard let body = req.body.data else { throw Abort(.badRequest) }
            return UploadDigest(size: body.readableBytes, sha256: hex(SHA256.hash(data: body.readableBytesView)))
        }
        let uploadSent = self.uploadSent
        let uploadSentAtFirstChunk = self.uploadSentAtFirstChunk
        app.on(.POST, "upload-streamed", body: .stream) { req -> UploadDigest in
            var hasher = SHA256()
            var size = 0
            for try await chunk in req.streamedBody {
                if size == 0 { uploadSentAtFirstChunk.withLockedValue { $0 = uploadSent.withLockedValue { $0 } } }
                hasher.update(data: chunk.readableBytesView)
                size += chunk.readableBytes
            }
            return UploadDigest(size: size, sha256: hex(hasher.finalize()))
        }.streamsHTTP3RequestBody()
        // Paced by QUIC over HTTP/3; `writes` counts the pieces the route has handed over.
        let writes = self.writes
        app.get("download") { req -> Response in
            let total = try req.query.get(Int.self, at: "bytes")
            return Response(status: .ok, streamingBody: { writer in
                var offset = 0
                while offset < total {
                    let count = min(64 * 1024, total - offset)
                    try await writer.writeBuffer(ByteBuffer(bytes: patternBytes(offset: offset, count: count)))
                    writes.withLockedValue { $0 += count }
                    offset += count
                }
            })
        }
        // Vapor's own stream body, which the bridge collects before sending.
        app.get("collected-download") { req -> Response in
            let total = try req.query.get(Int.self, at: "bytes")
            return Response(status: .ok, body: .init(asyncStream: { writer in
                var offset = 0
                while offset < total {
                    let count = min(64 * 1024, total - offset)
                    try await writer.writeBuffer(ByteBuffer(bytes: patternBytes(offset: offset, count: count)))
                    offset += count
                }
                try await writer.write(.end)
            }))
        }
        app.get("priority") { req -> String in
            guard let http3 = req.http3 else { return "tcp" }
            let asked = http3.priority
            http3.priority = HTTPPriority(urgency: 0)
            return "u=\(asked.urgency) i=\(asked.incremental) now=\(http3.priority.fieldValue)"
        }
        app.post("trailers") { req -> String in
            let asked = req.http3?.requestTrailers?[HTTPField.Name("x-request-note")!] ?? "none"
            req.http3?.responseTrailers = [HTTPField.Name("x-response-note")!: "echo \(asked)"]
            return "\(req.body.data?.readableBytes ?? 0) bytes"
        }
        app.get("remote") { req -> String in
            "\(req.remoteAddress?.ipAddress ?? "none") \(req.remoteAddress?.port ?? -1) \(req.version.major) \(req.eventLoop.inEventLoop)"
        }
        app.get("slow") { _ -> String in
            await gate.pass()
            return "finished"
        }
    }

    /// An HTTP/3 client that trusts only this server's certificate.
    func http3Client() -> HTTP3Client {
        var configuration = HTTP3Client.Configuration()
        configuration.certificateVerification = .pinnedSHA256(identity.sha256Fingerprint)
        return HTTP3Client(configuration: configuration)
    }

    func http3Request(_ method: HTTPRequest.Method, _ path: String, contentType: String? = nil) -> HTTPRequest {
        var request = HTTPRequest(method: method, scheme: "https", authority: "localhost:\(http3Port)", path: path)
        if let contentType { request.headerFields[.contentType] = contentType }
        return request
    }
}
