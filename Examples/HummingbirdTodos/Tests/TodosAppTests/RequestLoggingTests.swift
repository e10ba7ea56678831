import Foundation
import H3
import HTTPTypes
import Hummingbird
import HummingbirdHTTP3
import Logging
import NIOCore
import QuicTransport
import ServiceLifecycle
import Testing

/// A request's logger over HTTP/3 is what Hummingbird gives it over TCP: its messages carry
/// `hb.request.id`, the same ID `context.id` reads, and the application's own metadata.
@Suite("Hummingbird request logging over HTTP/3", .serialized, .timeLimit(.minutes(2)))
struct RequestLoggingTests {
    @Test func eachRequestLogsWithItsOwnID() async throws {
        let logs = CapturedLogs()
        var logger = Logger(label: "RequestLoggingTests") { _ in CapturingLogHandler(logs: logs) }
        logger.logLevel = .info
        logger[metadataKey: "app"] = "todos"
        let responder = CallbackResponder<BasicRequestContext> { _, context in
            context.logger.info("answering", metadata: ["route": "/id"])
            return Response(status: .ok, body: .init(byteBuffer: ByteBuffer(string: context.id)))
        }
        var configuration = HTTP3Server.Configuration()
        configuration.host = "127.0.0.1"
        configuration.port = 0
        let identity = try SelfSignedCertificate.generate()
        configuration.identity = identity
        let (bound, report) = AsyncStream<UInt16>.makeStream()
        let service = HTTP3Service(responder: responder, configuration: configuration, logger: logger) { report.yield($0) }
        let group = ServiceGroup(configuration: .init(services: [service], gracefulShutdownSignals: [], logger: logger))
        let running = Task { try await group.run() }
        var port: UInt16 = 0
        for await reported in bound {
            port = reported
            break
        }

        var clientConfiguration = HTTP3Client.Configuration()
        clientConfiguration.certificateVerification = .pinnedSHA256(identity.sha256Fingerprint)
        let client = HTTP3Client(configuration: clientConfiguration)
        var ids: [String] = []
        for _ in 0..<3 {
            let request = HTTPRequest(method: .get, scheme: "https", authority: "127.0.0.1:\(port)", path: "/id")
            let response = try await client.execute(request)
            ids.append(String(decoding: try await response.body.collect(), as: UTF8.self))
        }
        client.shutdown()
        await group.triggerGracefulShutdown()
        _ = try? await running.value

        #expect(Set(ids).count == 3, "request IDs: \(ids)")
        let answered = logs.events.filter { $0.message == "answering" }
        try #require(answered.count == 3, "logged: \(logs.events.map(\.message))")
        #expect(answered.map { $0.metadata["hb.request.id"]?.description } == ids)
        #expect(answered.allSatisfy { $0.metadata["app"] == "todos" && $0.metadata["route"] == "/id" })
    }
}

/// What `CapturingLogHandler` was given: each message with the metadata it would print, the
/// handler's own under the message's.
// @unchecked Sendable: `captured` is read and written only under `lock`.
final class CapturedLogs: @unchecked Sendable {
    struct Event {
        var message: String
        var metadata: Logger.Metadata
    }

    private let lock = NSLock()
    private var captured: [Event] = []
    var events: [Event] { lock.withLock { captured } }
    func append(_ event: Event) { lock.withLock { captured.append(event) } }
}

/// A log handler that records instead of printing, holding metadata as swift-log's own
/// handlers do.
struct CapturingLogHandler: LogHandler {
    let logs: CapturedLogs
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .info

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        logs.append(.init(message: event.message.description, metadata: metadata.merging(event.metadata ?? [:]) { _, explicit in explicit }))
    }
}
