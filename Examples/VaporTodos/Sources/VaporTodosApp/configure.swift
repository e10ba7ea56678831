import Crypto
import Foundation
import H3
import NIOConcurrencyHelpers
import QuicTransport
import Vapor
import VaporHTTP3

/// Sets the application up: the static page, the to-do API, streaming routes, and HTTP/3
/// beside Vapor's HTTP server with `Alt-Svc` on every TCP response.
public func configure(_ app: Application) async throws {
    app.middleware.use(FileMiddleware(publicDirectory: app.directory.publicDirectory, defaultFile: "index.html"))

    // The one line that adds HTTP/3; the rest of this block picks its certificate.
    app.servers.use(.http3(try http3Configuration(for: app)))

    try routes(app, store: TodoStore())
}

/// PEM files from `TLS_CERT` and `TLS_KEY`, or a self-signed certificate for localhost made now
/// and written to `localhost-cert.pem` so that clients can trust it (`curl --cacert`).
func http3Configuration(for app: Application) throws -> Application.HTTP3.Configuration {
    var configuration: Application.HTTP3.Configuration
    if let chain = Environment.get("TLS_CERT"), let key = Environment.get("TLS_KEY") {
        configuration = .init(certificateChainFile: chain, privateKeyFile: key)
    } else {
        let identity = try SelfSignedCertificate.generate()
        let path = app.directory.workingDirectory + "localhost-cert.pem"
        try identity.certificatePEM.write(toFile: path, atomically: true, encoding: .utf8)
        app.logger.notice("HTTP/3 uses a self-signed certificate for localhost: \(path), SHA-256 \(identity.sha256FingerprintHex)")
        configuration = .init()
        configuration.server.identity = identity
    }
    return configuration
}

/// A to-do item.
public struct Todo: Content, Equatable, Sendable {
    public var id: Int?
    public var title: String

    public init(id: Int? = nil, title: String) {
        self.id = id
        self.title = title
    }
}

/// What `/kib` answers: 1 KiB, the same as the benchmark's bare HTTP3Server handler.
public enum TodosKiB {
    public static let body = [UInt8](repeating: 0x61, count: 1024)
}

/// `GET /kib`, 1 KiB, for the benchmark (`scripts/bench-frameworks`): the trivial route it
/// serves through the adapter, beside `vapor-todos-bare`'s same answer from a bare handler.
public func addKiBRoute(to app: Application) {
    let kib = ByteBuffer(bytes: TodosKiB.body)
    app.get("kib") { _ in
        Response(status: .ok, headers: ["content-type": "application/octet-stream"], body: .init(buffer: kib))
    }
}

/// What `/upload` answers.
public struct UploadDigest: Content, Equatable, Sendable {
    public var size: Int
    public var sha256: String
}

/// The to-do list, in memory.
final class TodoStore: Sendable {
    private let state = NIOLockedValueBox<(nextID: Int, todos: [Int: Todo])>((1, [:]))

    func all() -> [Todo] { state.withLockedValue { $0.todos.values.sorted { $0.id! < $1.id! } } }

    func add(title: String) -> Todo {
        state.withLockedValue { state in
            let todo = Todo(id: state.nextID, title: title)
            state.todos[state.nextID] = todo
            state.nextID += 1
            return todo
        }
    }

    func remove(id: Int) -> Bool { state.withLockedValue { $0.todos.removeValue(forKey: id) != nil } }
}

/// The JSON API and the streaming routes.
func routes(_ app: Application, store: TodoStore) throws {
    app.get("todos") { _ in store.all() }

    app.post("todos") { req -> Response in
        let todo = store.add(title: try req.content.decode(Todo.self).title)
        let response = Response(status: .created)
        try response.content.encode(todo)
        return response
    }

    app.delete("todos", ":id") { req -> HTTPStatus in
        guard let id = req.parameters.get("id", as: Int.self), store.remove(id: id) else { throw Abort(.notFound) }
        return .noContent
    }

    // N bytes (byte i is i mod 251), written as the client takes them: over HTTP/3 each write
    // waits for QUIC flow control, over TCP for the socket.
    app.get("stream") { req -> Response in
        let total = try req.query.get(Int.self, at: "bytes")
        guard total >= 0 else { throw Abort(.badRequest) }
        return Response(status: .ok, streamingBody: { writer in
            var offset = 0
            while offset < total {
                let count = min(64 * 1024, total - offset)
                try await writer.writeBuffer(ByteBuffer(bytes: (offset..<offset + count).map { UInt8($0 % 251) }))
                offset += count
            }
        })
    }

    addKiBRoute(to: app)

    // Size and SHA-256 of the body, hashed piece by piece as it arrives, on either protocol.
    app.on(.POST, "upload", body: .stream) { req -> UploadDigest in
        var hasher = SHA256()
        var size = 0
        for try await buffer in req.streamedBody {
            hasher.update(data: buffer.readableBytesView)
            size += buffer.readableBytes
        }
        let digest = hasher.finalize().map { byte in (byte < 16 ? "0" : "") + String(byte, radix: 16) }.joined()
        return UploadDigest(size: size, sha256: digest)
    }.streamsHTTP3RequestBody()
}
