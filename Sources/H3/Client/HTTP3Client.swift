#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import CQuicShims
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport
import Synchronization

/// An HTTP/3 client (RFC 9114): requests to one authority share one QUIC connection and run
/// concurrently on their own streams.
///
/// Types come from swift-http-types. The response body arrives as an `AsyncSequence` of byte
/// chunks; `collect()` gathers it whole.
public final class HTTP3Client: Sendable {
    /// The configuration every connection of this client is made with.
    public let configuration: Configuration
    private let eventLoop: QUICEventLoop
    private let logger: Logger
    private let connections = NIOLockedValueBox([Origin: HTTP3ClientConnection]())
    /// The connections that `Configuration.initiatesKeyUpdate` asks to update their keys.
    private let keyUpdating = NIOLockedValueBox([HTTP3ClientConnection]())
    private let loopExecutor: EventLoopTaskExecutor

    /// A pooled connection's host and port: a key made without formatting a string.
    private struct Origin: Hashable {
        let host: String
        let port: UInt16
    }

    /// The thread this client's connections run on, as a task executor (SE-0417), much as a
    /// Network.framework connection runs on the queue it is started on.
    ///
    /// A task that sends requests and reads responses with this as its preference
    /// (`withTaskExecutorPreference(client.taskExecutor) { … }`, or
    /// `group.addTask(executorPreference:)`) runs beside the connections' I/O: a response wakes
    /// its reader on the same thread, with no hop to the global pool and back. Such a task must
    /// not block, since the connections wait while it runs. h3load runs its requests this way.
    public var taskExecutor: any TaskExecutor { loopExecutor }
    /// The QUIC connections this client made that are still in memory, closed or not.
    package let liveConnections: QUICLiveConnections

    /// Creates a client; it opens no connection until the first request or `connect(host:port:)`.
    public convenience init(configuration: Configuration = Configuration()) {
        self.init(configuration: configuration, liveConnections: QUICLiveConnections())
    }

    /// A client whose connections join `liveConnections` and run on `eventLoop`, which an owner
    /// of several clients (`HTTPSession`, one client per target) shares among them.
    package init(configuration: Configuration, liveConnections: QUICLiveConnections, eventLoop: QUICEventLoop = QUICClientLoops.next()) {
        self.configuration = configuration
        self.liveConnections = liveConnections
        self.eventLoop = eventLoop
        self.loopExecutor = EventLoopTaskExecutor(eventLoop: eventLoop)
        self.logger = Logger(label: "h3.client")
    }

    /// Sends `request` and waits for the response head; the body follows in `HTTP3Response.body`.
    ///
    /// With a `priority`, the request carries it in the `priority` field (RFC 9218 §5); the
    /// request's own `priority` field wins if it has one. Cancelling the task that awaits
    /// resets the request with H3_REQUEST_CANCELLED.
    ///
    /// It runs on the caller's executor (`nonisolated(nonsending)`, SE-0461), as reading the
    /// response body does: a call makes no hop of its own, which matters most to a task on
    /// ``taskExecutor``.
    nonisolated(nonsending) public func execute(
        _ request: HTTPRequest,
        body: [UInt8]? = nil,
        trailers: HTTPFields? = nil,
        priority: HTTPPriority? = nil
    ) async throws -> HTTP3Response {
        try await execute(request, body: body, bodyStream: nil, trailers: trailers, priority: priority)
    }

    /// Sends `request` with a body produced piece by piece (an upload): the next piece is taken
    /// only while less than 4 MiB waits for the server's acknowledgement. Not retried on GOAWAY,
    /// since a stream cannot be replayed.
    nonisolated(nonsending) public func execute(
        _ request: HTTPRequest,
        bodyStream: AsyncThrowingStream<[UInt8], any Error>,
        trailers: HTTPFields? = nil,
        priority: HTTPPriority? = nil
    ) async throws -> HTTP3Response {
        try await execute(request, body: nil, bodyStream: bodyStream, trailers: trailers, priority: priority)
    }

    @inline(__always) nonisolated(nonsending) private func execute(
        _ request: HTTPRequest,
        body: [UInt8]?,
        bodyStream: AsyncThrowingStream<[UInt8], any Error>?,
        trailers: HTTPFields?,
        priority: HTTPPriority?
    ) async throws -> HTTP3Response {
        guard let authority = request.authority, let (host, port) = Self.split(authority: authority) else {
            throw HTTP3ClientError.invalidRequest("the request has no authority (host)")
        }
        guard request.scheme == "https" else {
            throw HTTP3ClientError.invalidRequest("HTTP/3 needs an https:// URL, not \(request.scheme ?? "no scheme")")
        }
        var fields = request.headerFields.pairs(after: [
            (":method", request.method.rawValue), (":scheme", "https"), (":authority", authority),
            (":path", request.path ?? "/"),
        ])
        if let priority, request.headerFields[HTTPField.Name.priority] == nil { fields.append(("priority", priority.fieldValue)) }
        if let body, request.headerFields[.contentLength] == nil { fields.append(("content-length", "\(body.count)")) }

        // A request the server rejected unprocessed (GOAWAY, H3_REQUEST_REJECTED) is retried once
        // on a new connection, as RFC 9114 §4.1.1 allows. One call site, so `send` is inlined.
        var mayRetry = bodyStream == nil
        while true {
            do {
                return try await send(fields: fields, body: body, bodyStream: bodyStream, trailers: trailers?.pairs, host: host, port: port)
            } catch let error as HTTP3ClientError where mayRetry && error.code == .requestRejected {
                mayRetry = false
            }
        }
    }

    @inline(__always) nonisolated(nonsending) private func send(
        fields: [(name: String, value: String)],
        body: [UInt8]?,
        bodyStream: AsyncThrowingStream<[UInt8], any Error>?,
        trailers: [(name: String, value: String)]?,
        host: String,
        port: UInt16
    ) async throws -> HTTP3Response {
        // The request goes to the loop without waiting for it there: the loop runs this before
        // anything else the exchange asks of it (a cancel, a priority change), and the first
        // thing to wait for is the response head.
        let exchange = HTTP3Exchange(eventLoop: eventLoop)
        // A task on `taskExecutor` is on the loop already, and submits with no hop.
        if eventLoop.inEventLoop {
            submit(fields: fields, body: body, bodyStream: bodyStream, trailers: trailers, host: host, port: port, exchange: exchange)
        } else {
            eventLoop.execute {
                self.submit(fields: fields, body: body, bodyStream: bodyStream, trailers: trailers, host: host, port: port, exchange: exchange)
            }
        }
        let head = try await withTaskCancellationHandler {
            try await exchange.head()
        } onCancel: {
            exchange.cancelOnLoop()
        }
        return HTTP3Response(source: head, body: HTTP3ResponseBody(exchange: exchange), connection: exchange.connectionInfo)
    }

    /// Hands a request to the connection for `host:port`. On the loop.
    private func submit(
        fields: [(name: String, value: String)],
        body: [UInt8]?,
        bodyStream: AsyncThrowingStream<[UInt8], any Error>?,
        trailers: [(name: String, value: String)]?,
        host: String,
        port: UInt16,
        exchange: HTTP3Exchange
    ) {
        let (connection, opened) = openConnection(host: host, port: port)
        exchange.use(connection, opened: opened)
        connection.submit(fields: fields, body: body, bodyStream: bodyStream, trailers: trailers, exchange: exchange)
    }

    /// Opens (or reuses) the connection for `host:port` and waits for its handshake, without
    /// sending a request: this is how a caller races HTTP/3 against TCP before committing a
    /// request to either (the Happy Eyeballs step of `HTTPSession`).
    public func connect(host: String, port: UInt16) async throws -> HTTP3ConnectionInfo {
        let ready = try await eventLoop.submit { () -> EventLoopFuture<HTTP3ConnectionInfo> in
            self.connection(host: host, port: port).whenReady()
        }.get()
        return try await ready.get()
    }

    /// The live pooled connection for `host:port`, created when there is none. On the loop.
    private func connection(host: String, port: UInt16) -> HTTP3ClientConnection {
        openConnection(host: host, port: port).connection
    }

    /// The live pooled connection for `host:port`, and whether this call opened it. On the loop.
    private func openConnection(host: String, port: UInt16) -> (connection: HTTP3ClientConnection, opened: Bool) {
        eventLoop.assertInEventLoop()
        let key = Origin(host: host, port: port)
        return connections.withLockedValue { pool in
            if let existing = pool[key], !existing.isFinished { return (existing, false) }
            let created = HTTP3ClientConnection(
                host: host, port: port, configuration: self.configuration, liveConnections: self.liveConnections,
                eventLoop: self.eventLoop, logger: self.logger
            )
            // The pool, not the client, and no weak reference: an object referred to weakly keeps
            // its reference counts in a side table, which slows every retain of it (the client's,
            // once a request). The pool holds the connection only until this runs.
            if configuration.initiatesKeyUpdate { keyUpdating.withLockedValue { $0.append(created) } }
            created.onClosed = { [connections = self.connections] closed in
                connections.withLockedValue { pool in
                    if pool[key] === closed { pool[key] = nil }
                }
            }
            pool[key] = created
            return (created, true)
        }
    }

    /// Waits for the key updates that `Configuration.initiatesKeyUpdate` started (RFC 9001 §6)
    /// to complete, one per connection opened, and returns how many there were. Throws the
    /// first that failed (`QUICKeyUpdateError`), as one does whose connection ended first or has
    /// not completed its handshake by now. Call it before `close()`, which would cut short an
    /// update still under way.
    public func keyUpdatesCompleted() async throws -> Int {
        let connections = keyUpdating.withLockedValue { $0 }
        let updates = try await eventLoop.submit { connections.compactMap { $0.keyUpdateOutcome() } }.get()
        for update in updates { try await update.get() }
        return updates.count
    }

    /// Closes every connection with H3_NO_ERROR and returns once each has queued its
    /// CONNECTION_CLOSE and written its qlog record: call it before a process exits.
    public func close() async {
        let all = connections.withLockedValue { pool in
            defer { pool.removeAll() }
            return Array(pool.values)
        }
        try? await eventLoop.submit { for connection in all { connection.close() } }.get()
    }

    /// Closes every connection with H3_NO_ERROR.
    public func shutdown() {
        let all = connections.withLockedValue { pool in
            defer { pool.removeAll() }
            return Array(pool.values)
        }
        eventLoop.execute { for connection in all { connection.close() } }
    }

    /// Host and port of an `:authority` (RFC 3986 §3.2): `host`, `host:port`, `[v6]` or
    /// `[v6]:port`; the port is 443 when absent, and digits only (RFC 3986 §3.2.3). Scanned as
    /// UTF-8 bytes in place, since every delimiter is ASCII: a `Character` split, or one through
    /// `String.UTF8View`'s indices, cost several times more per request.
    static func split(authority: String) -> (String, UInt16)? {
        var authority = authority
        return authority.withUTF8 { bytes -> (String, UInt16)? in
            let hostRange: Range<Int>
            let portStart: Int?
            if bytes.first == UInt8(ascii: "[") {
                guard let close = bytes.firstIndex(of: UInt8(ascii: "]")) else { return nil }
                hostRange = 1..<close
                if close + 1 == bytes.count {
                    portStart = nil
                } else {
                    guard bytes[close + 1] == UInt8(ascii: ":") else { return nil }
                    portStart = close + 2
                }
            } else if let colon = bytes.firstIndex(of: UInt8(ascii: ":")) {
                hostRange = 0..<colon
                portStart = colon + 1
            } else {
                hostRange = 0..<bytes.count
                portStart = nil
            }
            guard !hostRange.isEmpty else { return nil }
            let host = String(decoding: UnsafeBufferPointer(rebasing: bytes[hostRange]), as: UTF8.self)
            guard let portStart else { return (host, 443) }
            // The port is digits only (RFC 3986 §3.2.3), at least one here.
            guard portStart < bytes.count else { return nil }
            var port = 0
            for byte in bytes[portStart...] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                port = port * 10 + Int(byte - UInt8(ascii: "0"))
                guard port <= Int(UInt16.max) else { return nil }
            }
            return (host, UInt16(port))
        }
    }
}
