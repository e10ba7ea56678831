import Crypto
import Foundation
import H3
import Hummingbird
import HummingbirdHTTP3
import NIOCore

/// The application's routes: a JSON API, a streamed download, a streamed upload and a page.
public enum TodosRouter {
    /// The byte at `offset` of every generated body: a pattern a client can check.
    public static func patternByte(_ offset: Int) -> UInt8 { UInt8(truncatingIfNeeded: offset % 251) }

    /// The router both transports serve; `http3Port` is advertised in `Alt-Svc`.
    public static func make(http3Port: UInt16) throws -> Router<TodosRequestContext> {
        let store = TodoStore()
        let page = try pageBytes()
        let router = Router(context: TodosRequestContext.self)
        router.add(middleware: AltSvcMiddleware(http3Port: http3Port))

        router.get("/") { _, _ in
            Response(status: .ok, headers: [.contentType: "text/html; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(bytes: page)))
        }
        router.get("/todos") { _, _ in await store.all() }
        router.post("/todos") { request, context -> EditedResponse<Todo> in
            let new = try await request.decode(as: NewTodo.self, context: context)
            guard !new.title.isEmpty else { throw HTTPError(.badRequest, message: "a todo needs a title") }
            return EditedResponse(status: .created, response: await store.add(title: new.title))
        }
        router.delete("/todos/:id") { _, context -> HTTPResponse.Status in
            let id = try context.parameters.require("id", as: Int.self)
            guard await store.remove(id: id) else { throw HTTPError(.notFound, message: "no todo \(id)") }
            return .noContent
        }
        // `bytes` of the pattern, produced as the client takes them; `?trailer` adds a trailer.
        router.get("/stream") { request, _ -> Response in
            let total = request.uri.queryParameters.get("bytes", as: Int.self) ?? 1 << 20
            let sendsTrailer = request.uri.queryParameters["trailer"] != nil
            guard total >= 0 else { throw HTTPError(.badRequest, message: "bytes must not be negative") }
            return Response(status: .ok, headers: [.contentType: "application/octet-stream"], body: ResponseBody(contentLength: total) { writer in
                let piece = 64 << 10
                var offset = 0
                while offset < total {
                    let count = min(piece, total - offset)
                    try await writer.write(ByteBuffer(bytes: (offset..<offset + count).lazy.map(patternByte)))
                    offset += count
                }
                // A trailer (RFC 9110 §6.5), known only now: what was sent.
                // With `?trailer`, a trailer (RFC 9110 §6.5) known only now: what was sent.
                try await writer.finish(sendsTrailer ? [.init("x-bytes-sent")!: "\(offset)"] : nil)
            })
        }
        // Reads the body as it arrives, however large, and answers with its size and SHA-256.
        router.post("/upload") { request, _ -> UploadReceipt in
            var hash = SHA256()
            var bytes = 0
            for try await buffer in request.body {
                buffer.withUnsafeReadableBytes { hash.update(bufferPointer: $0) }
                bytes += buffer.readableBytes
            }
            return UploadReceipt(bytes: bytes, sha256: hash.finalize().map { String(format: "%02x", $0) }.joined())
        }
        // 1 KiB, for the benchmark (scripts/bench-frameworks), beside todos-bare's same answer.
        let kib = ByteBuffer(bytes: TodosKiB.body)
        router.get("/kib") { _, _ in
            Response(status: .ok, headers: [.contentType: "application/octet-stream"], body: .init(byteBuffer: kib))
        }
        // What the server knows of the request: for the tests, and for curious users.
        router.get("/whoami") { request, context -> Whoami in
            Whoami(address: context.remoteAddress?.ipAddress, port: context.remoteAddress?.port, priority: request.priority.fieldValue)
        }
        // Answered at the urgency the client asked for, raised to 0 when `?urgent` is given.
        router.get("/priority") { request, _ -> Response in
            var response = Response(status: .ok, body: .init(byteBuffer: ByteBuffer(string: request.priority.fieldValue)))
            if request.uri.queryParameters["urgent"] != nil { response.setPriority(HTTPPriority(urgency: 0)) }
            return response
        }
        return router
    }

    static func pageBytes() throws -> [UInt8] {
        guard let url = Bundle.module.url(forResource: "index", withExtension: "html", subdirectory: "Public") else {
            throw HTTPError(.internalServerError, message: "Public/index.html is missing from the bundle")
        }
        return Array(try Data(contentsOf: url))
    }
}

/// The benchmark route's body: 1 KiB.
public enum TodosKiB {
    public static let body = [UInt8](repeating: 0x61, count: 1024)
}

/// `/upload`'s answer.
public struct UploadReceipt: ResponseCodable, Sendable {
    public var bytes: Int
    public var sha256: String
}

/// `/whoami`'s answer.
public struct Whoami: ResponseCodable, Sendable {
    public var address: String?
    public var port: Int?
    public var priority: String
}
