import H3
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOEmbedded
import TodosApp

/// `todos-bare --hummingbird-only COUNT`: Hummingbird's own work for COUNT requests of `/kib`,
/// with no transport at all, so that the benchmark can tell the framework's cost per request
/// from its adapter's.
///
/// Each request takes the steps Hummingbird's `Application` takes for every request it serves
/// over TCP, in their cheapest form: a head (`HTTPRequest`, which `Request` is made from and the
/// bare handler never needs), a logger tagged with a `RequestID` (held back, as the adapter
/// holds it), a `BasicRequestContext` from its source, the responder's `Response`, a `Date`
/// field from `HTTPDateField`, as the adapter adds it, and the body written out, here to a
/// writer that only counts it. The benchmark runs it under callgrind at two counts: the
/// difference, divided by the difference in requests, is the cost per request, with start-up
/// cancelled out.
enum HummingbirdOnly {
    static func run(count: Int) async throws {
        let kib = ByteBuffer(bytes: TodosKiB.body)
        let responder = CallbackResponder<BasicRequestContext> { _, _ in
            Response(status: .ok, headers: [.contentType: "application/octet-stream"], body: .init(byteBuffer: kib))
        }
        let channel = EmbeddedChannel()
        let logger = Logger(label: "todos-bare")
        let dates = HTTPDateField()
        var written = 0
        for _ in 0..<count {
            var head = HTTPRequest(method: .get, scheme: "https", authority: "127.0.0.1:4433", path: "/kib")
            head.headerFields[.userAgent] = "h3load/0.1"
            var requestLogger = logger
            requestLogger.handler = DeferredMetadataLogHandler(base: logger.handler, metadata: ["hb.request.id": .stringConvertible(RequestID())])
            let context = BasicRequestContext(source: ApplicationRequestContextSource(channel: channel, logger: requestLogger))
            var response = try await responder.respond(to: Request(head: head, body: RequestBody(buffer: ByteBuffer())), context: context)
            response.headers.append(dates.current)
            let counter = CountingWriter()
            try await response.body.write(counter)
            written += counter.count.bytes
        }
        guard written == count * TodosKiB.body.count else { throw ShortBodies(requests: count, bytes: written) }
        print("todos-bare: \(count) requests through Hummingbird alone")
    }

    struct ShortBodies: Error, CustomStringConvertible {
        let requests: Int
        let bytes: Int
        var description: String { "\(requests) responses wrote \(bytes) bytes, not \(requests) KiB" }
    }

    /// Counts what a body writes, and keeps nothing.
    private struct CountingWriter: ResponseBodyWriter {
        final class Count { var bytes = 0 }
        let count = Count()
        mutating func write(_ buffer: ByteBuffer) async throws { count.bytes += buffer.readableBytes }
        consuming func finish(_ trailingHeaders: HTTPFields?) async throws {}
    }
}
