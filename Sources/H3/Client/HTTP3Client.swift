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
import NIOPosix
import QuicTransport
import Synchronization

/// An HTTP/3 client (RFC 9114): requests to one authority share one QUIC connection and run
/// concurrently on their own streams.
///
/// Types come from swift-http-types. The response body arrives as an `AsyncSequence` of byte
/// chunks; `collect()` gathers it whole.
public final class HTTP3Client: Sendable {
    /// How the client's QUIC connections are made: certificate checks, where to connect,
    /// timeouts, qlog, session resumption and 0-RTT.
    public struct Configuration: Sendable {
        /// How to check the server certificate; the system trust store by default.
        public var certificateVerification: CertificateVerification = .systemTrustStore
        /// SNI and the name to verify, when it is not the URL's host.
        public var serverName: String?
        /// Connect here instead of the URL's host and port (curl's `--resolve`/`--connect-to`).
        public var connectTo: (host: String, port: UInt16)?
        /// Where to write qlog traces; defaults to `$QLOGDIR`.
        public var qlogDirectory: String? = ProcessInfo.processInfo.environment["QLOGDIR"]
        /// How long the connection may stay silent (RFC 9000 §10.1); 60 s, as curl's HTTP/3. It
        /// also bounds the handshake, whose probes back off 1, 2, 4, … s on a lossy path.
        public var idleTimeoutMilliseconds = 60_000
        /// Count losses for `HTTP3Response.statistics()` (see `NWProtocolQUIC.Options.tracksLosses`).
        public var tracksLosses = false
        /// Keep session tickets here and resume with them (see `TLSOptions.sessionTicketStore`).
        public var sessionTicketStore: QUICSessionTicketStore?
        /// The AEADs to offer (RFC 9001 §5.3).
        public var cipherSuites: [QUICCipherSuite] = QUICCipherSuite.allCases
        /// With a ticket for the server in `sessionTicketStore`, send the first GET, HEAD and
        /// OPTIONS requests without a body in 0-RTT (Network.framework's `allowFastOpen`); they
        /// are sent again if the server refuses early data. 0-RTT can be replayed by an attacker
        /// (RFC 8446 §8, RFC 9114 §10.9), so only safe methods ride in it.
        public var allowsEarlyData = false
        /// Start one 1-RTT key update (RFC 9001 §6) as soon as each handshake is confirmed.
        public var initiatesKeyUpdate = false
        /// Move each connection to a new local UDP port once its handshake is confirmed, with path
        /// validation (RFC 9000 §9.2), as a client whose network changed would.
        public var migratesAfterHandshake = false

        /// A configuration with every default.
        public init() {}
    }

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
            } catch HTTP3ClientError.requestRejected where mayRetry {
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
    /// UTF-8 bytes in place, since every delimiter is ASCII: a `Character` split cost about 7k
    /// instructions per request, and one through `String.UTF8View`'s indices 1.2k (now 0.4k).
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

extension HTTP3ClientConnection {
    /// Failed or draining after GOAWAY: new requests go to a new connection.
    var isFinished: Bool {
        switch state {
        case .failed, .draining: return true
        case .connecting, .ready: return false
        }
    }

    /// A snapshot for a response. Read off the loop, after the response head arrived: both
    /// fields are written once, on the loop, when the handshake completes, which is before any
    /// head, and the exchange's lock orders that write before the read.
    var info: HTTP3ConnectionInfo {
        HTTP3ConnectionInfo(alpn: negotiatedALPN, qlogPath: qlogPath, establishment: establishment)
    }
}

/// A received final response head (RFC 9114 §4.3.2), read from its field section as it came:
/// the status when the response arrives, the whole `HTTPResponse` only when asked for.
/// Building its `HTTPFields` cost about 3.6k instructions per response, which a caller that
/// reads only the status (a load generator, a health check) never needed.
///
/// The head, once built, is kept under a lock: callers may read it from any thread.
final class HTTP3ResponseHeadSource: Sendable {
    let status: HTTPResponse.Status
    /// The field section in wire order, `:status` included (`HTTPFields(_:)` leaves the
    /// pseudo-header fields out).
    private let fields: HTTP3ReceivedFields
    private let builtHead = Mutex<HTTPResponse?>(nil)

    init(status: HTTPResponse.Status, fields: HTTP3ReceivedFields) {
        self.status = status
        self.fields = fields
    }

    var head: HTTPResponse {
        builtHead.withLock { head in
            if let head { return head }
            let made = HTTPResponse(status: status, headerFields: HTTPFields(fields))
            head = made
            return made
        }
    }

    /// The values of the fields named `name` (lowercase, as HTTP/3 sends names, RFC 9114
    /// §4.2), joined by ", " as `HTTPFields` joins them; nil when there is none. Reads the
    /// field section without building the head.
    func value(ofFieldNamed name: String) -> String? {
        let lines = fields.lines(named: name)
        guard !lines.isEmpty else { return nil }
        return lines.map { fields.value(of: $0) }.joined(separator: ", ")
    }
}

/// Facts about the connection a response came on.
public struct HTTP3ConnectionInfo: Sendable {
    /// The ALPN protocol TLS negotiated (`h3`); nil if the handshake had not completed.
    public let alpn: String?
    /// The connection's qlog trace file; nil when qlog is off (no `qlogDirectory`).
    public let qlogPath: String?
    /// When and where the connection was established; nil if its handshake had not completed.
    public let establishment: HTTP3ConnectionEstablishment?
    /// Whether the connection was opened for this request (curl's `num_connects`), rather
    /// than found open.
    public let openedForRequest: Bool

    init(alpn: String?, qlogPath: String?, establishment: HTTP3ConnectionEstablishment? = nil, openedForRequest: Bool = false) {
        (self.alpn, self.qlogPath, self.establishment, self.openedForRequest) = (alpn, qlogPath, establishment, openedForRequest)
    }
}

/// A response head and its streaming body.
public struct HTTP3Response: Sendable {
    /// The final response head: status and fields, without pseudo-fields; interim (1xx)
    /// responses are skipped. Built from the field section on first use.
    public var head: HTTPResponse { source.head }
    /// The final response's status (RFC 9114 §4.3.2), read without building ``head``.
    public var status: HTTPResponse.Status { source.status }
    /// The response body, streamed as it arrives; its trailers follow it.
    public let body: HTTP3ResponseBody
    /// The connection the response came on.
    public let connection: HTTP3ConnectionInfo
    /// The received field section; `HTTPSession` reads Alt-Svc from it without the head.
    let source: HTTP3ResponseHeadSource

    init(source: HTTP3ResponseHeadSource, body: HTTP3ResponseBody, connection: HTTP3ConnectionInfo) {
        self.source = source
        self.body = body
        self.connection = connection
    }

    /// Changes the priority of the rest of this response (RFC 9218 §7: PRIORITY_UPDATE).
    public func updatePriority(_ priority: HTTPPriority) async throws {
        try await body.exchange.updatePriority(priority)
    }

    /// The connection's establishment report and its data-transfer report since it began.
    public func statistics() async -> HTTP3ConnectionStatistics? {
        await body.exchange.statistics()
    }
}

/// A QUIC connection's reports, as Network.framework gives them (see `NWConnectionGroup`).
public struct HTTP3ConnectionStatistics: Sendable {
    /// How the connection was established; nil until its handshake has completed.
    public let establishment: QUICEstablishmentReport?
    /// What the connection has sent and received since it began.
    public let transfer: QUICDataTransferReport
}

/// The response body as byte chunks, in order; ends at the peer's FIN (RFC 9114 §4.1).
public struct HTTP3ResponseBody: AsyncSequence, Sendable {
    public typealias Element = [UInt8]
    let exchange: HTTP3Exchange

    public func makeAsyncIterator() -> Iterator {
        Iterator(exchange: exchange)
    }

    /// Hands out chunks in order, and tells the connection each time one has been taken, which
    /// is when QUIC flow control lets the server send more (the response's backpressure).
    public struct Iterator: AsyncIteratorProtocol {
        let exchange: HTTP3Exchange

        nonisolated(nonsending) public mutating func next() async throws -> [UInt8]? {
            guard let chunk = try await exchange.nextChunk() else { return nil }
            exchange.consumed(chunk.count)
            return chunk
        }
    }

    /// The whole body.
    public func collect() async throws -> [UInt8] {
        var all: [UInt8] = []
        for try await chunk in self { all += chunk }
        return all
    }

    /// Trailer fields, once the body has ended (RFC 9114 §4.1).
    public var trailers: HTTPFields? { exchange.trailers }
}

/// Errors an HTTP/3 request can end with. The cases before the connection is up say how far it
/// got (name resolution, a QUIC answer, the TLS handshake, the certificate), so a caller can act
/// on them without reading messages; h3get maps them to curl's exit codes.
public enum HTTP3ClientError: Error, Sendable, CustomStringConvertible {
    /// The request cannot go over HTTP/3: it has no host, or its scheme is not `https`.
    case invalidRequest(String)
    /// The host name did not resolve.
    case cannotResolve(String)
    /// No QUIC server answered: the port was refused (ICMP port unreachable) or the network
    /// unreachable.
    case cannotConnect(String)
    /// The handshake did not finish in time: no answer, or no complete one (RFC 9000 §10.1).
    case handshakeTimedOut(String)
    /// The TLS handshake failed for a reason other than the server's certificate: a TLS alert
    /// either side sent as a CRYPTO_ERROR (RFC 9001 §4.8), such as no common ALPN.
    case tlsHandshakeFailed(String)
    /// This client refused the server's certificate: untrusted, expired, for another name, or
    /// not matching a pin (RFC 9001 §4.4).
    case certificateRejected(String)
    /// The connection failed for another reason: an error close after the handshake, or before
    /// it one that is neither TLS nor a timeout (stateless reset, no common QUIC version).
    case connectionFailed(String)
    /// The connection closed cleanly before the request finished.
    case connectionClosed(String)
    /// The request stream was reset or closed with this error code (RFC 9114 §8.1).
    case streamReset(HTTP3ErrorCode)
    /// The exchange broke HTTP/3's rules or could not be submitted: a response without a valid
    /// `:status`, or a stream that ended before its response did.
    case protocolError(String)
    /// The caller cancelled the request, which was reset with H3_REQUEST_CANCELLED.
    case cancelled
    /// The server did not process the request (GOAWAY or H3_REQUEST_REJECTED); safe to retry.
    case requestRejected

    public var description: String {
        switch self {
        case .invalidRequest(let reason): return "invalid request: \(reason)"
        case .cannotResolve(let reason), .cannotConnect(let reason), .handshakeTimedOut(let reason): return "cannot connect: \(reason)"
        case .tlsHandshakeFailed(let reason), .certificateRejected(let reason): return reason
        case .connectionFailed(let reason): return "connection failed: \(reason)"
        case .connectionClosed(let reason): return "connection closed: \(reason)"
        case .streamReset(let code): return "the server reset the request with \(code)"
        case .protocolError(let reason): return "HTTP/3 error: \(reason)"
        case .cancelled: return "request cancelled"
        case .requestRejected: return "the server rejected the request before processing it (H3_REQUEST_REJECTED or GOAWAY)"
        }
    }

    /// Why a connector gave up before any handshake could finish.
    init(_ failure: QUICClientConnector.Failure) {
        switch failure {
        case .resolution: self = .cannotResolve(failure.description)
        case .refused, .unreachable, .setup: self = .cannotConnect(failure.description)
        case .silent: self = .handshakeTimedOut(failure.description)
        }
    }

    /// Why a connection ended with requests unfinished: a clean close, a handshake that failed
    /// (certificate, TLS alert, timeout), or another failure.
    init(closedBy reason: QUICCloseReason, beforeHandshake: Bool) {
        switch reason {
        case _ where reason.isNoError: self = .connectionClosed(Self.describe(reason))
        case _ where !beforeHandshake: self = .connectionFailed(Self.describe(reason))
        case .handshakeFailed(_, _, .some): self = .certificateRejected(reason.description)
        case .handshakeFailed: self = .tlsHandshakeFailed(reason.description)
        case _ where reason.isCryptoError: self = .tlsHandshakeFailed("TLS handshake failed: \(reason)")
        case .handshakeTimeout, .idleTimeout: self = .handshakeTimedOut(reason.description)
        default: self = .connectionFailed(Self.describe(reason))
        }
    }

    /// A close reason with HTTP/3 error codes named (RFC 9114 §8.1).
    static func describe(_ reason: QUICCloseReason) -> String {
        switch reason {
        case .localApplicationClose(let code, let text):
            return "closed locally with \(HTTP3ErrorCode(rawValue: code))" + (text.isEmpty ? "" : ": \(text)")
        case .peerApplicationClose(let code, let text):
            return "the server closed the connection with \(HTTP3ErrorCode(rawValue: code))" + (text.isEmpty ? "" : ": \(text)")
        default:
            return "\(reason)"
        }
    }
}

/// One request's response, filled in on the connection's loop and read by the caller.
///
/// The body is handed over here rather than through an `AsyncThrowingStream`: the stream's
/// generic storage, instantiated at run time for every request, looked up its type metadata
/// on every operation, about a tenth of a small request's instructions on the client.
final class HTTP3Exchange: Sendable {
    /// How the body ended, as the reader sees it.
    private enum BodyEnd {
        /// The peer's FIN (RFC 9114 §4.1): the reader gets nil after the last chunk.
        case finished
        /// A stream or connection error, thrown once after the chunks that came before it.
        case failed(HTTP3ClientError)
        /// The reading task was cancelled; the request is reset with H3_REQUEST_CANCELLED.
        case cancelled
        /// The failure has been thrown; the reader gets nil from now on.
        case reported
    }

    private struct State {
        /// Where bytes the caller took earn back flow-control credit; set with `streamID`.
        var flowCredit: HTTP3FlowCredit?
        var head: Result<HTTP3ResponseHeadSource, HTTP3ClientError>?
        var headWaiter: UnsafeContinuation<HTTP3ResponseHeadSource, any Error>?
        var trailers: HTTPFields?
        var finished = false
        var streamID: Int64?
        /// The connection the request went to; set on the loop before any other use of it there.
        var connection: HTTP3ClientConnection?
        /// Whether the client opened `connection` for this exchange (curl's `num_connects`).
        var openedConnection = false
        /// Chunks not yet taken, from `nextChunk` on.
        var chunks: [[UInt8]] = []
        var nextChunk = 0
        var bodyEnd: BodyEnd?
        var bodyWaiter: UnsafeContinuation<[UInt8]?, any Error>?

        /// The next chunk, or how the body ended; nil when the reader must wait.
        mutating func takeReady() -> Result<[UInt8]?, any Error>? {
            if nextChunk < chunks.count {
                let chunk = chunks[nextChunk]
                nextChunk += 1
                if nextChunk == chunks.count {
                    chunks.removeAll()
                    nextChunk = 0
                }
                return .success(chunk)
            }
            switch bodyEnd {
            case nil: return nil
            case .finished, .reported: return .success(nil)
            case .cancelled: return finished ? .success(nil) : .failure(CancellationError())
            case .failed(let error):
                bodyEnd = .reported
                return .failure(error)
            }
        }

        /// Ends the body unless it has ended already.
        mutating func endBody(_ end: BodyEnd) {
            if bodyEnd == nil { bodyEnd = end }
        }
    }

    private let state = Mutex(State())
    private let eventLoop: any EventLoop

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    var isFinished: Bool { state.withLock { $0.finished } }

    var streamID: Int64? {
        get { state.withLock { $0.streamID } }
        set { state.withLock { $0.streamID = newValue } }
    }

    var connection: HTTP3ClientConnection? {
        get { state.withLock { $0.connection } }
        set { state.withLock { $0.connection = newValue } }
    }

    /// Records the connection the request goes on, and whether it was opened for it.
    func use(_ connection: HTTP3ClientConnection, opened: Bool) {
        state.withLock { state in
            state.connection = connection
            state.openedConnection = opened
        }
    }

    /// A snapshot of the connection for the response. Read after the head arrived, which is
    /// after the handshake wrote what it reports (see `HTTP3ClientConnection.info`).
    var connectionInfo: HTTP3ConnectionInfo {
        let (connection, opened) = state.withLock { ($0.connection, $0.openedConnection) }
        guard let connection else { return HTTP3ConnectionInfo(alpn: nil, qlogPath: nil) }
        return HTTP3ConnectionInfo(
            alpn: connection.negotiatedALPN, qlogPath: connection.qlogPath, establishment: connection.establishment,
            openedForRequest: opened
        )
    }

    var trailers: HTTPFields? { state.withLock { $0.trailers } }

    /// Set by the connection with the stream: the request is on `streamID`, and bytes the
    /// caller takes earn back flow-control credit through `flowCredit`.
    func sent(on streamID: Int64, flowCredit: HTTP3FlowCredit) {
        state.withLock { state in
            state.streamID = streamID
            state.flowCredit = flowCredit
        }
    }

    /// Credits flow control for bytes the caller took.
    func consumed(_ count: Int) {
        let (flowCredit, streamID) = state.withLock { ($0.flowCredit, $0.streamID) }
        if let flowCredit, let streamID { flowCredit.credit(streamID: streamID, bytes: count) }
    }

    /// Resets the request with H3_REQUEST_CANCELLED (RFC 9114 §4.1.1), on the loop.
    func cancelOnLoop() {
        eventLoop.execute { self.connection?.cancel(self) }
    }

    func updatePriority(_ priority: HTTPPriority) async throws {
        try await eventLoop.submit { try self.connection?.updatePriority(self, to: priority) }.get()
    }

    func statistics() async -> HTTP3ConnectionStatistics? {
        (try? await eventLoop.submit { self.connection?.statistics }.get()) ?? nil
    }

    nonisolated(nonsending) func head() async throws -> HTTP3ResponseHeadSource {
        try await withUnsafeThrowingContinuation { continuation in
            let ready: Result<HTTP3ResponseHeadSource, HTTP3ClientError>? = state.withLock { state in
                if let head = state.head { return head }
                state.headWaiter = continuation
                return nil
            }
            if let ready { continuation.resume(with: ready.mapError { $0 as any Error }) }
        }
    }

    /// The next body chunk; nil after the last. Throws the stream's error once, or
    /// `CancellationError` when the task was cancelled before the body ended, which also resets
    /// the request.
    nonisolated(nonsending) func nextChunk() async throws -> [UInt8]? {
        if !Task.isCancelled, let ready = state.withLock({ $0.takeReady() }) {
            return try ready.get()
        }
        return try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<[UInt8]?, any Error>) in
                let ready: Result<[UInt8]?, any Error>? = state.withLock { state in
                    if let ready = state.takeReady() { return ready }
                    state.bodyWaiter = continuation
                    return nil
                }
                if let ready { continuation.resume(with: ready) }
            }
        } onCancel: {
            cancelBody()
        }
    }

    /// The reading task was cancelled: wake the reader, and reset the request unless its body
    /// had already ended.
    private func cancelBody() {
        var ended = false
        changeBody { state in
            ended = state.bodyEnd != nil
            state.endBody(.cancelled)
        }
        if !ended { cancelOnLoop() }
    }

    /// Applies a change to the body's state, then hands a waiting reader what is ready for it.
    private func changeBody(_ change: (inout State) -> Void) {
        let wake = state.withLock { state -> (UnsafeContinuation<[UInt8]?, any Error>, Result<[UInt8]?, any Error>)? in
            change(&state)
            guard let waiter = state.bodyWaiter, let ready = state.takeReady() else { return nil }
            state.bodyWaiter = nil
            return (waiter, ready)
        }
        if let (waiter, ready) = wake { waiter.resume(with: ready) }
    }

    func receive(fields: HTTP3ReceivedFields, isTrailers: Bool) {
        if isTrailers {
            state.withLock { $0.trailers = HTTPFields(fields) }
            return
        }
        guard let status = fields.firstPseudoHeader(NGHTTP3_QPACK_TOKEN__STATUS), let code = Int(fields.value(of: status)) else {
            fail(.protocolError("response without a valid :status"))
            return
        }
        if (100..<200).contains(code) { return }  // Interim responses (RFC 9114 §4.1) carry no body.
        resolveHead(.success(HTTP3ResponseHeadSource(status: .init(code: code), fields: fields)))
    }

    func receive(body: [UInt8]) {
        changeBody { state in
            if state.bodyEnd == nil { state.chunks.append(body) }
        }
    }

    func finish() {
        changeBody { state in
            state.finished = true
            state.endBody(.finished)
        }
        resolveHead(.failure(.protocolError("the response ended without a head")))
    }

    func fail(_ error: HTTP3ClientError) {
        resolveHead(.failure(error))
        changeBody { $0.endBody(.failed(error)) }
    }

    private func resolveHead(_ result: Result<HTTP3ResponseHeadSource, HTTP3ClientError>) {
        let waiter: UnsafeContinuation<HTTP3ResponseHeadSource, any Error>? = state.withLock { state in
            guard state.head == nil else { return nil }
            state.head = result
            defer { state.headWaiter = nil }
            return state.headWaiter
        }
        waiter?.resume(with: result.mapError { $0 as any Error })
    }
}
