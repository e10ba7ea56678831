#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import QuicTransport

/// An HTTP/3 server (RFC 9114): every QUIC connection runs an `HTTP3Codec`, and each complete
/// request goes to the handler, whose response is sent back on the request's stream.
///
/// Without a certificate it generates a self-signed one for `localhost`, `127.0.0.1` and `::1`.
public final class HTTP3Server: Sendable {
    /// Called once per request as soon as its head arrives; a thrown error becomes a 500.
    ///
    /// It starts at once on the connection's event loop (`Task.immediate`, SE-0472) and, if it
    /// suspends, resumes there (its executor preference, SE-0417), beside that connection's
    /// I/O, so it must not block: hand blocking or long computing work to `Task.detached` or a
    /// thread pool and await it there.
    public typealias Handler = @Sendable (HTTP3ServerRequest) async throws -> HTTP3ServerResponse

    /// Answers a request on the connection's event loop without a task, as soon as its head
    /// arrives: return the response, or nil to pass the request on to the ``Handler``.
    ///
    /// For answers that need no waiting, such as a file the process can open at once: no task
    /// is created, which saves about a tenth of a small GET's cost. It runs beside the
    /// connection's I/O, so it must neither block nor take long, and it cannot read the request
    /// body (the body is still arriving; hand such requests to the handler).
    public typealias Responder = @Sendable (HTTP3ServerRequest) -> HTTP3ServerResponse?

    /// Where the server listens, its certificate, and how its QUIC connections behave.
    public struct Configuration: Sendable {
        /// The address or host name to listen on: by default `localhost`, loopback only.
        ///
        /// - `localhost` listens on `::1` and `127.0.0.1`, one socket each, because browsers
        ///   and curl look for it at both (RFC 6761 §6.3; Chromium tries `::1` first).
        /// - `::` listens on every address of both IP versions with one dual-stack socket
        ///   (`IPV6_V6ONLY` off), as Apple's listeners do; IPv4 clients are then seen as
        ///   v4-mapped addresses (`::ffff:a.b.c.d`).
        /// - `0.0.0.0` is every IPv4 address; any other name, every address it resolves to.
        public var host = "localhost"
        /// The UDP port to listen on; 4433 by default, 0 picks a free one (`start()` returns it).
        public var port: UInt16 = 4433
        /// PEM files; when nil, `identity` or a generated self-signed certificate is used.
        public var certificateChainFile: String?
        /// The PEM private key for `certificateChainFile`, required with it and unused without it.
        public var privateKeyFile: String?
        /// A certificate and key to serve when `certificateChainFile` is nil; when this is nil too,
        /// one is generated for `localhost`, `127.0.0.1` and `::1`.
        public var identity: SelfSignedCertificate?
        /// Where to write a qlog trace per connection; defaults to `$QLOGDIR`, nil for none.
        public var qlogDirectory: String? = ProcessInfo.processInfo.environment["QLOGDIR"]
        /// Most connections served at once; past it clients get CONNECTION_REFUSED. A connection
        /// that has closed stops counting at once, although it lingers, small, for its closing
        /// or draining period (RFC 9000 §10.2).
        public var maximumConnections = 1024
        /// The most connections one client may hold at once, counted by IPv4 address or IPv6
        /// /64; nil, the default, for no limit. Only proven addresses count (a Retry token or a
        /// completed handshake), so spoofed Initials cannot use up another client's share; past
        /// it a client gets CONNECTION_REFUSED (RFC 9000 §20.1).
        public var maximumConnectionsPerAddress: Int?
        /// Validate client addresses with Retry (RFC 9000 §8.1.2).
        public var requiresAddressValidation = false
        /// Above this many handshakes in progress (per worker), require Retry of new clients
        /// until the count falls again (RFC 9000 §8.1.2), as quic-go does under load.
        public var addressValidationThreshold = 128
        /// How long a client may take, from opening a request stream, to send its whole header
        /// section; past it the stream is reset with H3_REQUEST_INCOMPLETE (RFC 9114 §4.1.2), so a
        /// client that trickles headers (slowloris) holds a stream for this long at most. Nil
        /// turns it off. 10 s by default, as nginx's `client_header_timeout` is there for HTTP/1.
        public var requestHeaderTimeout: Duration? = .seconds(10)
        /// Accept 0-RTT requests from resuming clients. They can be replayed (RFC 8446 §8, RFC
        /// 9114 §10.9): enable it only when the handler treats early requests as repeatable.
        public var acceptsEarlyData = false
        /// The congestion controller for responses.
        public var congestionControl: QUICCongestionControl = .cubic
        /// Also listen here (a numeric address; port 0 picks one) and offer it to clients as
        /// `preferred_address` (RFC 9000 §9.6): they may move there once the handshake is confirmed.
        public var preferredAddress: (host: String, port: UInt16)?
        /// How many workers serve the address, each on its own event loop and UDP socket, so
        /// the server uses that many cores. With more than one, the sockets share the port
        /// (`SO_REUSEPORT`) and the kernel steers each packet to the worker that owns its
        /// connection, by connection ID; at most 255. One by default, as a library should not
        /// take every core unasked; `h3serve` defaults to one per core.
        public var workers = 1
        /// Attach the kernel steering program to the workers' sockets; without it only
        /// hand-overs between workers steer (for tests of that path).
        package var steersInKernel = true
        /// Issue connection IDs that a QUIC-LB load balancer routes to this server
        /// (draft-ietf-quic-load-balancers-21 §5), so a connection stays on it when the client's
        /// address changes; nil, the default, issues unroutable IDs (§3.2).
        public var loadBalancer: QUICLoadBalancerConfiguration?
        /// Send `disable_active_migration` (RFC 9000 §18.2), so clients do not move to another
        /// address on their own: for a server behind a balancer that routes by the 4-tuple only.
        public var disablesActiveMigration = false

        /// A configuration with every default.
        public init() {}
    }

    /// The configuration the server was created with.
    public let configuration: Configuration
    /// The certificate the server generated because the configuration named none.
    public let generatedCertificate: SelfSignedCertificate?
    private let handler: Handler
    private let responder: Responder?
    private let credentials: TLSCredentials
    private let logger: Logger
    private let workers = NIOLockedValueBox<QUICServerWorkerGroup?>(nil)
    /// Every worker's open connections; each is only used on its own loop.
    private let connections = NIOLockedValueBox<[ObjectIdentifier: HTTP3ServerConnection]>([:])
    /// The connections this server accepted that are still in memory, open or closed.
    package let liveConnections = QUICLiveConnections()

    /// Creates a server and loads its certificate, or generates one; nothing is bound before
    /// `start()`. Throws when a certificate file has no key, or a certificate cannot be loaded
    /// or generated.
    ///
    /// A `responder` answers first, without a task; the requests it passes on (nil) go to the
    /// `handler`.
    public init(configuration: Configuration, responder: Responder? = nil, handler: @escaping Handler) throws {
        self.configuration = configuration
        self.handler = handler
        self.responder = responder
        self.logger = Logger(label: "h3.server")
        if let chain = configuration.certificateChainFile {
            guard let key = configuration.privateKeyFile else { throw TLSError.missingFile(path: "(no private key given for \(chain))") }
            credentials = try .server(certificateChainFile: chain, privateKeyFile: key)
            generatedCertificate = nil
        } else {
            let identity = try configuration.identity ?? SelfSignedCertificate.generate()
            credentials = try .server(certificateChainPEM: identity.certificatePEM, privateKeyPEM: identity.privateKeyPEM)
            generatedCertificate = configuration.identity == nil ? identity : nil
        }
    }

    /// Binds the UDP socket and starts serving; returns the bound port.
    @discardableResult
    public func start() async throws -> UInt16 {
        var quic = QUICConfiguration()
        quic.alpn = [HTTP3.alpn]
        quic.qlogDirectory = configuration.qlogDirectory
        quic.congestionControl = configuration.congestionControl
        quic.disablesActiveMigration = configuration.disablesActiveMigration
        var endpointConfiguration = QUICEndpointCore.Configuration(quic: quic, credentials: credentials)
        endpointConfiguration.maximumConnections = configuration.maximumConnections
        endpointConfiguration.maximumConnectionsPerAddress = configuration.maximumConnectionsPerAddress.map { max(1, $0) }
        endpointConfiguration.requiresRetry = configuration.requiresAddressValidation
        endpointConfiguration.retryThreshold = max(0, configuration.addressValidationThreshold)
        endpointConfiguration.acceptsEarlyData = configuration.acceptsEarlyData
        let requestHeaderTimeout = configuration.requestHeaderTimeout.map(Self.nanoseconds)
        endpointConfiguration.makeApplicationCodec = {
            let codec = try! HTTP3Codec(role: .server)
            codec.tracksRequestHeads = requestHeaderTimeout != nil
            return codec
        }
        endpointConfiguration.liveConnections = liveConnections
        endpointConfiguration.loadBalancer = configuration.loadBalancer
        let handler = self.handler
        let responder = self.responder
        let logger = self.logger
        let connections = self.connections
        let workers = try await QUICServerWorkerGroup.bind(
            host: configuration.host,
            port: Int(configuration.port),
            preferred: configuration.preferredAddress.map { ($0.host, Int($0.port)) },
            configuration: endpointConfiguration,
            workerCount: configuration.workers,
            kernelSteering: configuration.steersInKernel,
            logger: logger
        ) { driver in
            let connection = HTTP3ServerConnection(
                driver: driver, responder: responder, handler: handler, requestHeaderTimeout: requestHeaderTimeout, logger: logger
            )
            connection.attach()
            let key = ObjectIdentifier(connection)
            connections.withLockedValue { $0[key] = connection }
            connection.onFinished = { connections.withLockedValue { $0[key] = nil } }
        }
        self.workers.withLockedValue { $0 = workers }
        return workers.port
    }

    /// How many connections are open now, handshakes and closing or draining periods included.
    public func connectionCount() async -> Int {
        guard let workers = workers.withLockedValue({ $0 }) else { return 0 }
        return await workers.connectionCount()
    }

    /// The bound `preferred_address` (`HOST:PORT`) once started, if one was configured.
    public var boundPreferredAddress: String? {
        workers.withLockedValue { $0?.preferredAddress?.description }
    }

    /// Datagrams one worker received for another worker's connection and handed over. With the
    /// kernel steering by connection ID this stays at zero in steady state.
    public var handOvers: Int { workers.withLockedValue { $0?.handOvers ?? 0 } }

    /// The first eight datagrams handed over, described, for diagnosing why the kernel's
    /// steering missed them.
    package var handOverSamples: [String] { workers.withLockedValue { $0?.handOverSamples ?? [] } }

    /// What each worker has done so far, in worker order; empty before `start()`.
    public func workerStatistics() async -> [QUICServerWorkerStatistics] {
        guard let workers = workers.withLockedValue({ $0 }) else { return [] }
        return await workers.statistics()
    }

    /// Whether the kernel steers packets to workers by connection ID (more than one worker, and
    /// the reuseport program attached).
    public var isSteeredByKernel: Bool { workers.withLockedValue { $0?.isSteeredByKernel ?? false } }

    /// Shuts down gracefully (RFC 9114 §5.2): GOAWAY on every connection, requests already
    /// received finish, newer ones are rejected with H3_REQUEST_REJECTED so clients can retry
    /// elsewhere, new connections are refused, and the socket closes once all connections have
    /// ended or after `gracePeriod`.
    public func shutdown(gracePeriod: Duration = .seconds(10)) {
        _ = beginShutdown(gracePeriod: gracePeriod)
    }

    /// Sends GOAWAY on every open connection and closes each once its requests are done, but
    /// keeps accepting new connections: clients move their next requests to a fresh one.
    /// Starts every open connection's shutdown (a no-op for one already shutting down).
    public func rotateConnections() {
        for connection in connections.withLockedValue({ Array($0.values) }) {
            connection.eventLoop.execute { connection.beginShutdown() }
        }
    }

    /// Like `shutdown(gracePeriod:)`, and returns once the socket is closed.
    public func shutdownGracefully(gracePeriod: Duration = .seconds(10)) async {
        try? await beginShutdown(gracePeriod: gracePeriod)?.get()
    }

    /// A duration in whole nanoseconds, none below zero.
    static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(clamping: seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }

    private func beginShutdown(gracePeriod: Duration) -> EventLoopFuture<Void>? {
        guard let workers = workers.withLockedValue({ workers in defer { workers = nil }; return workers }) else { return nil }
        let timeout = TimeAmount.nanoseconds(Int64(clamping: Self.nanoseconds(gracePeriod)))
        // Refuse first, so no connection arrives after the GOAWAYs went out.
        let closed = workers.closeWhenDrained(timeout: timeout)
        rotateConnections()
        return closed
    }
}

/// A request as the handler sees it: the head at once, the body as it arrives.
public struct HTTP3ServerRequest: Sendable {
    /// The request head: method, scheme, authority, path and header fields. For a request the
    /// server received, it is built from the field section the first time it is read, and kept.
    public var head: HTTPRequest { source.head }
    /// The request body; reading it is what lets the client send more (QUIC flow control).
    public let body: HTTP3RequestBody
    /// The QUIC stream that carries it (RFC 9114 §4.1).
    public let streamID: Int64
    /// The head, or the field section it is built from.
    let source: HTTP3RequestHeadSource
    /// The connection's version and client address, shared by all its requests; nil for a
    /// request made with the public initializer.
    let origin: HTTPServerRequestOrigin?

    /// The HTTP version that carried the request, as an access log writes it: `HTTP/3`,
    /// `HTTP/2.0` or `HTTP/1.1` (RFC 9114, RFC 9113, RFC 9112). A request made with the
    /// public initializer says `HTTP/3`.
    public var protocolVersion: String { origin?.protocolVersion ?? HTTPServerRequestOrigin.http3 }
    /// The client's IP address, without its port, as the connection first came from; nil
    /// when unknown (a request made with the public initializer).
    public var remoteAddress: String? { origin?.remoteAddress }

    /// The request method (RFC 9110 §9), read without building ``head``.
    public var method: HTTPRequest.Method { source.method }
    /// The `:path` pseudo-header field (RFC 9114 §4.3.1), read without building ``head``.
    public var path: String? { source.path }

    /// A header field's value as `HTTPFields` gives it (repeated fields joined by commas), read
    /// without building ``head``: a responder that looks at one or two fields skips the work
    /// of the whole head.
    public func headerField(_ name: HTTPField.Name) -> String? { source[name] }

    /// The priority the client asked for in the `priority` field (RFC 9218 §5), or the default.
    public var priority: HTTPPriority {
        source[.priority].map(HTTPPriority.init(fieldValue:)) ?? .default
    }

    /// A request with a complete body, for handlers called directly (tests, composition).
    public init(head: HTTPRequest, body: [UInt8] = [], streamID: Int64 = 0, trailers: HTTPFields? = nil) {
        self.init(head: head, body: body, streamID: streamID, trailers: trailers, origin: nil)
    }

    /// A request with a complete body that came over `origin` (the TCP server's).
    init(head: HTTPRequest, body: [UInt8], streamID: Int64 = 0, trailers: HTTPFields?, origin: HTTPServerRequestOrigin?) {
        self.source = HTTP3RequestHeadSource(head)
        self.body = HTTP3RequestBody(complete: body, trailers: trailers)
        self.streamID = streamID
        self.origin = origin
    }

    init(source: HTTP3RequestHeadSource, body: HTTP3RequestBody, streamID: Int64, origin: HTTPServerRequestOrigin? = nil) {
        self.source = source
        self.body = body
        self.streamID = streamID
        self.origin = origin
    }
}

/// Why a request body ended before the client's FIN, as a server handler reading it sees it.
public enum HTTP3RequestBodyError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The client reset the request stream (RESET_STREAM, RFC 9000 §19.4) with this code; the
    /// client cancelling is H3_REQUEST_CANCELLED (RFC 9114 §4.1.1).
    case clientReset(HTTP3ErrorCode)
    /// The QUIC connection ended first.
    case connectionClosed(String)

    public var description: String {
        switch self {
        case .clientReset(let code): return "the client reset the request with \(code)"
        case .connectionClosed(let reason): return "the connection closed before the request body ended: \(reason)"
        }
    }
}

/// A request body as byte chunks, in order, ending at the client's FIN (RFC 9114 §4.1).
public struct HTTP3RequestBody: AsyncSequence, Sendable {
    public typealias Element = [UInt8]

    /// Nil for a request that ended with its head (a GET, say): nothing to stream, nothing to
    /// allocate for it, and nothing to count when the request is copied.
    private let storage: Storage?

    /// A streamed body's parts, behind one reference.
    private final class Storage: Sendable {
        let stream: AsyncThrowingStream<[UInt8], any Error>
        let trailers: NIOLockedValueBox<HTTPFields?>
        let consumed: @Sendable (Int) -> Void

        init(stream: AsyncThrowingStream<[UInt8], any Error>, trailers: NIOLockedValueBox<HTTPFields?>, consumed: @escaping @Sendable (Int) -> Void) {
            self.stream = stream
            self.trailers = trailers
            self.consumed = consumed
        }
    }

    init(stream: AsyncThrowingStream<[UInt8], any Error>, trailers: NIOLockedValueBox<HTTPFields?>, consumed: @escaping @Sendable (Int) -> Void) {
        storage = Storage(stream: stream, trailers: trailers, consumed: consumed)
    }

    init(complete bytes: [UInt8], trailers: HTTPFields?) {
        guard !bytes.isEmpty || trailers != nil else {
            self = .empty
            return
        }
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: [UInt8].self)
        if !bytes.isEmpty { continuation.yield(bytes) }
        continuation.finish()
        self.init(stream: stream, trailers: NIOLockedValueBox(trailers), consumed: { _ in })
    }

    private init() {
        storage = nil
    }

    /// No body and no trailers.
    static let empty = HTTP3RequestBody()

    public func makeAsyncIterator() -> Iterator {
        guard let storage else { return Iterator(base: nil, consumed: { _ in }) }
        return Iterator(base: storage.stream.makeAsyncIterator(), consumed: storage.consumed)
    }

    /// Hands out the body's chunks in order, crediting QUIC flow control for each one taken.
    public struct Iterator: AsyncIteratorProtocol {
        var base: AsyncThrowingStream<[UInt8], any Error>.Iterator?
        let consumed: @Sendable (Int) -> Void

        public mutating func next() async throws -> [UInt8]? {
            guard let chunk = try await base?.next() else { return nil }
            consumed(chunk.count)
            return chunk
        }
    }

    /// The whole body.
    public func collect() async throws -> [UInt8] {
        var all: [UInt8] = []
        for try await chunk in self { all += chunk }
        return all
    }

    /// Trailer fields the client sent after the body; known once the body has ended.
    public var trailers: HTTPFields? { storage?.trailers.withLockedValue { $0 } }
}

/// A handler's answer: the head, then the body as bytes, a stream of pieces, or a file region,
/// and trailers.
public struct HTTP3ServerResponse: Sendable {
    /// The status and header fields.
    public var head: HTTPResponse {
        get { storage.head.response }
        set { uniqueStorage().head = .given(newValue) }
    }
    /// The head as given, or made and encoded ahead of time by whoever answers with the same
    /// head many times (`HTTP3FileHandler`, per open file). Any change to `head` leaves the
    /// prepared one.
    var storedHead: HTTP3ResponseHead { storage.head }
    /// The prepared head, while the response carries one.
    var prepared: HTTP3PreparedHead? {
        if case .prepared(let prepared) = storage.head { return prepared }
        return nil
    }
    /// The body bytes, sent before any `bodyStream`; empty by default.
    public var body: [UInt8] {
        get { storage.body }
        // In place, so appending to a response's body does not copy what it has.
        _modify {
            let storage = uniqueStorage()
            yield &storage.body
        }
    }
    /// A body produced piece by piece, sent after `body`; the server pulls the next piece only
    /// while less than `HTTP3BodyPump.bufferLimit` (4 MiB) waits for acknowledgement.
    public var bodyStream: AsyncThrowingStream<[UInt8], any Error>? {
        get { storage.bodyStream }
        set {
            let storage = uniqueStorage()
            storage.bodyStream = newValue
            storage.hasBodyStream = newValue != nil
        }
    }
    /// Whether the body goes on in a `bodyStream`.
    var hasBodyStream: Bool { storage.hasBodyStream }
    /// Whether it carries any content: bytes, a file or a stream.
    var hasContent: Bool { !storage.body.isEmpty || storage.file != nil || storage.hasBodyStream }
    /// Overrides the client's priority for this response (RFC 9218 §8: the server decides).
    public var priority: HTTPPriority? {
        get { storage.priority }
        set { uniqueStorage().priority = newValue }
    }
    /// Trailer fields sent after the body (RFC 9114 §4.1).
    public var trailers: HTTPFields? {
        get { storage.trailers }
        set { uniqueStorage().trailers = newValue }
    }
    /// A file region sent as the body instead of `body` and `bodyStream` (`HTTP3FileHandler`
    /// sets it): HTTP/3 reads it as the client acknowledges, with no copy through the handler.
    package var file: HTTP3FileRegion? {
        get { storage.file }
        set { uniqueStorage().file = newValue }
    }

    /// Every part, behind one reference that copies share until one of them changes.
    ///
    /// Held inline, the parts made a response a large value: the server moved it from the
    /// handler through an optional, whose destruction went through the type's metadata (a
    /// call of about 150 instructions), and each copy and destruction counted every reference
    /// in it. Behind one reference, a response the file handler keeps for a file (its 200 and
    /// its reply to HEAD) is handed out by counting that one reference.
    private var storage: Storage

    // @unchecked Sendable: a storage is changed only through `uniqueStorage()`, while one
    // response holds it; once shared, it is only read. For the same reason its properties
    // skip Swift's run-time exclusivity check: each read of one that the optimizer left
    // checked was a call into the runtime and a lookup of its thread-local access set.
    private final class Storage: @unchecked Sendable {
        @exclusivity(unchecked) var head: HTTP3ResponseHead
        @exclusivity(unchecked) var body: [UInt8]
        @exclusivity(unchecked) var bodyStream: AsyncThrowingStream<[UInt8], any Error>?
        /// Kept apart from `bodyStream`: telling that stream from nil goes through its type's
        /// metadata (the concurrency library is built for library evolution), and every
        /// response asks.
        @exclusivity(unchecked) var hasBodyStream = false
        @exclusivity(unchecked) var priority: HTTPPriority?
        @exclusivity(unchecked) var trailers: HTTPFields?
        @exclusivity(unchecked) var file: HTTP3FileRegion?

        init(head: HTTP3ResponseHead, body: [UInt8], file: HTTP3FileRegion?) {
            self.head = head
            self.body = body
            self.file = file
        }

        func copy() -> Storage {
            let copy = Storage(head: head, body: body, file: file)
            copy.bodyStream = bodyStream
            copy.hasBodyStream = hasBodyStream
            copy.priority = priority
            copy.trailers = trailers
            return copy
        }
    }

    /// The storage, made this response's own first if another shares it.
    private mutating func uniqueStorage() -> Storage {
        if !isKnownUniquelyReferenced(&storage) { storage = storage.copy() }
        return storage
    }

    /// A response with this head and body.
    public init(head: HTTPResponse, body: [UInt8] = []) {
        storage = Storage(head: .given(head), body: body, file: nil)
    }

    /// A response with a head made ahead of time, and a file region as its body or none.
    init(prepared: HTTP3PreparedHead, file: HTTP3FileRegion?) {
        storage = Storage(head: .prepared(prepared), body: [], file: file)
    }

    /// A response with this head and a file region as its body, or none.
    init(head: HTTPResponse, file: HTTP3FileRegion?) {
        storage = Storage(head: .given(head), body: [], file: file)
    }

    /// A response with this status, header fields and body.
    public init(status: HTTPResponse.Status, headerFields: HTTPFields = [:], body: [UInt8] = []) {
        self.init(head: HTTPResponse(status: status, headerFields: headerFields), body: body)
    }
}

/// One server-side HTTP/3 connection: collects requests from the codec, runs the handler, and
/// submits responses on the loop.
// @unchecked Sendable: all state is touched only on the driver's event loop. For the same
// reason, and because no access to a property spans a call that can reach it again, its state
// skips Swift's run-time exclusivity check (`@exclusivity(unchecked)`), as the codec's does.
final class HTTP3ServerConnection: @unchecked Sendable {
    /// A request whose handler is running and whose body may still be arriving.
    private struct Incoming {
        let body: AsyncThrowingStream<[UInt8], any Error>.Continuation
        let trailers: NIOLockedValueBox<HTTPFields?>
        /// Body bytes handed to the handler whose credit has not come back yet.
        var unread = 0
    }

    private let driver: QUICConnectionDriver
    /// `driver.core`, kept here too: a `let` of this class is read without a reference count,
    /// while `driver.core`, a property from another module, is retained around each use.
    private let core: QUICConnectionCore
    private let responder: HTTP3Server.Responder?
    private let handler: HTTP3Server.Handler
    private let logger: Logger
    @exclusivity(unchecked) private var incoming: [Int64: Incoming] = [:]
    /// Requests the server stopped reading once their response was complete
    /// (`stopReadingRequest`), until their streams close: what their handlers still read was
    /// credited then.
    @exclusivity(unchecked) private var stoppedReading: Set<Int64> = []
    /// `HTTP/3` and the client's address, made once: each request holds it by one reference.
    private let origin: HTTPServerRequestOrigin
    /// Credit for request bytes handlers have read. Weak: request bodies live in handler tasks
    /// that can outlast the connection, and a strong capture would make it hold itself.
    private lazy var flowCredit = HTTP3FlowCredit(eventLoop: driver.eventLoop) { [weak self] credits in
        guard let self else { return }
        for (streamID, bytes) in credits { self.credit(bytes, readFrom: streamID) }
        self.driver.afterInput()
    }
    @exclusivity(unchecked) private var isShuttingDown = false
    @exclusivity(unchecked) var onFinished: (() -> Void)?
    /// Handlers run on this connection's loop: a response is submitted where it was produced,
    /// and the responses to one batch of requests leave in one pass.
    private lazy var handlerExecutor = EventLoopTaskExecutor(eventLoop: driver.eventLoop)
    /// Streams response bodies that come from an AsyncThrowingStream; made for the first one.
    /// Not a lazy property: every closed stream asks it, and a lazy one is checked for
    /// exclusive access at run time on each read.
    @exclusivity(unchecked) private var pump: HTTP3BodyPump?

    /// `HTTP3Server.Configuration.requestHeaderTimeout` in nanoseconds, nil when off.
    private let requestHeaderTimeout: UInt64?
    /// Fires when the oldest request stream still without its header section runs out of time.
    @exclusivity(unchecked) private var requestHeaderTimer: Scheduled<Void>?

    init(
        driver: QUICConnectionDriver,
        responder: HTTP3Server.Responder? = nil,
        handler: @escaping HTTP3Server.Handler,
        requestHeaderTimeout: UInt64? = nil,
        logger: Logger
    ) {
        self.driver = driver
        self.core = driver.core
        self.responder = responder
        self.handler = handler
        self.requestHeaderTimeout = requestHeaderTimeout
        self.logger = logger
        self.origin = HTTPServerRequestOrigin(protocolVersion: HTTPServerRequestOrigin.http3, remoteAddress: driver.core.path.remote.host)
    }

    /// The codec as `attach` found it, unretained: the core owns it.
    @exclusivity(unchecked) private var attachedCodec: Unmanaged<HTTP3Codec>?

    /// Lends the codec to `body` without a reference count or a cast, as long as it is still
    /// the connection's (the core drops it once the connection is over). What runs on every
    /// pass and every response uses it: `core.applicationCodec` retains, checks the type and
    /// releases each time.
    private func withCodec<Result>(_ body: (HTTP3Codec) -> Result) -> Result? {
        guard let attachedCodec, let current = core.applicationCodecID,
              attachedCodec._withUnsafeGuaranteedRef({ ObjectIdentifier($0) == current })
        else { return nil }
        return attachedCodec._withUnsafeGuaranteedRef(body)
    }

    /// The codec, counted, for what runs now and then (shutdown, the request header timer).
    private var codec: HTTP3Codec? { withCodec { $0 } }

    /// The driver keeps this connection alive through its hooks until the QUIC connection ends,
    /// and drops them then.
    func attach() {
        attachedCodec = (core.applicationCodec as? HTTP3Codec).map(Unmanaged.passUnretained)
        driver.afterPass = { self.drainCodec() }
        let previous = driver.onFinished
        driver.onFinished = { finished in
            previous?(finished)
            self.connectionEnded()
        }
    }

    /// The QUIC connection is over: request bodies still arriving fail, response producers stop,
    /// and the server forgets this connection.
    private func connectionEnded() {
        let reason = core.closeReason.map { "\($0)" } ?? "closed"
        for (_, request) in incoming { request.body.finish(throwing: HTTP3RequestBodyError.connectionClosed(reason)) }
        incoming.removeAll()
        requestHeaderTimer?.cancel()
        requestHeaderTimer = nil
        pump?.connectionClosed()
        onFinished?()
        onFinished = nil
    }

    /// The loop this connection lives on.
    var eventLoop: any EventLoop { driver.eventLoop }

    /// GOAWAY now with the largest ID, the final GOAWAY a moment later, then close when idle.
    func beginShutdown() {
        guard !isShuttingDown, let codec else { return }
        isShuttingDown = true
        guard codec.isEstablished else {
            // No HTTP/3 yet (the handshake is still running or failed): nothing to announce.
            core.close(applicationErrorCode: HTTP3ErrorCode.noError.rawValue, reason: "", now: QUICConnectionDriver.now())
            driver.afterInput()
            return
        }
        try? codec.submitShutdownNotice()
        driver.afterInput()
        // RFC 9114 §5.2: allow at least a round trip for requests already in flight.
        let rtt = Int64(clamping: HTTP3Server.nanoseconds(core.pathStatistics.smoothedRTT))
        let delay = TimeAmount.nanoseconds(max(2 * rtt, 50_000_000))
        // Never cancelled: if the connection ends first, the task finds no codec.
        _ = driver.eventLoop.scheduleTask(in: delay) {
            try? self.codec?.shutdown()
            self.driver.afterInput()
            self.closeIfIdle()
        }
    }

    private func closeIfIdle() {
        guard isShuttingDown, (codec?.openRequestStreams ?? 0) == 0 else { return }
        core.close(applicationErrorCode: HTTP3ErrorCode.noError.rawValue, reason: "", now: QUICConnectionDriver.now())
        driver.afterInput()
    }

    /// Arms the request header timer for the oldest request stream still waiting for its header
    /// section, unless it is armed already.
    private func armRequestHeaderTimer(now: UInt64) {
        guard let timeout = requestHeaderTimeout, requestHeaderTimer == nil,
            let oldest = codec?.oldestAwaitingRequestHead
        else { return }
        let due = oldest &+ timeout
        let delay = TimeAmount.nanoseconds(Int64(clamping: due > now ? due - now : 0))
        requestHeaderTimer = driver.eventLoop.scheduleTask(in: delay) { self.resetLateRequestHeads() }
    }

    /// Slowloris (RFC 9114 §10.5): request streams whose header section has not arrived within
    /// `requestHeaderTimeout` are reset with H3_REQUEST_INCOMPLETE (§4.1.2).
    private func resetLateRequestHeads() {
        requestHeaderTimer = nil
        guard let codec, let timeout = requestHeaderTimeout else { return }
        let now = QUICConnectionDriver.now()
        let late = codec.requestHeads(openedBefore: now > timeout ? now - timeout : 0)
        if !late.isEmpty {
            logger.info("reset requests whose header section did not arrive in time", metadata: ["streams": "\(late)"])
            for streamID in late { codec.cancel(streamID: streamID, code: .requestIncomplete) }
            driver.afterInput()
        }
        armRequestHeaderTimer(now: now)
    }

    /// Runs in every pass of the driver, usually twice, and mostly finds nothing: the events
    /// are handled out of line, so a pass without any pays no more than these checks. Inlined,
    /// the handling made every call set up room for a request body's stream and continuation,
    /// about 240 instructions.
    private func drainCodec() -> Bool {
        withCodec { codec in
            if requestHeaderTimeout != nil, requestHeaderTimer == nil, codec.oldestAwaitingRequestHead != nil {
                armRequestHeaderTimer(now: QUICConnectionDriver.now())
            }
            guard codec.hasEvents else { return false }
            codec.handOverEvents(handle)
            return true
        } ?? false
    }

    /// What each event means for the requests in progress. Anything that touches a request
    /// body's continuation is out of line, as `HTTP3BodyPump`'s calls are: those types come
    /// from the resilient standard library, and a function holding one looks up its metadata
    /// (seven lookups here) on every call, before its first event, while most passes carry
    /// only request heads and stream closes.
    @inline(never)
    private func handle(_ events: [HTTP3Event]) {
        var skipsEndOf: Int64?
        // Each event is read where it lies: a copy of one is a call through the enum's metadata.
        for index in events.indices {
            switch events[index] {
            case .headers(let streamID, let fields, false):
                // The FIN right behind the head: a request without a body.
                var endsHere = false
                if index + 1 < events.count, case .end(let ended) = events[index + 1], ended == streamID {
                    endsHere = true
                    skipsEndOf = streamID
                }
                start(streamID: streamID, fields: fields, hasBody: !endsHere)
            case .headers(let streamID, let fields, true):
                receivedTrailers(fields, on: streamID)
            case .data(let streamID, let bytes):
                receivedBody(bytes, on: streamID)
            case .end(let streamID) where streamID == skipsEndOf:
                skipsEndOf = nil
            case .end(let streamID):
                endBody(of: streamID, throwing: nil)
            case .reset(let streamID, let code):
                endBody(of: streamID, throwing: HTTP3RequestBodyError.clientReset(code))
            case .closed(let streamID, let code):
                // Usually empty (requests without a body, or all read): skip the hashing then.
                if !incoming.isEmpty { endBody(of: streamID, throwing: HTTP3RequestBodyError.clientReset(code)) }
                if !stoppedReading.isEmpty { stoppedReading.remove(streamID) }
                pump?.streamClosed(streamID)
                if isShuttingDown { driver.eventLoop.execute { self.closeIfIdle() } }
            case .goaway:
                break
            case .bodyAcknowledged(let streamID):
                pump?.acknowledged(streamID)
            }
        }
    }

    /// Trailers for a request whose body the handler reads (RFC 9114 §4.1).
    @inline(never)
    private func receivedTrailers(_ fields: HTTP3ReceivedFields, on streamID: Int64) {
        incoming[streamID]?.trailers.withLockedValue { $0 = HTTPFields(fields) }
    }

    /// Body bytes for a request whose body the handler reads. Bytes of a request nobody reads
    /// any more (its response is complete) are credited at once.
    @inline(never)
    private func receivedBody(_ bytes: [UInt8], on streamID: Int64) {
        guard let index = incoming.index(forKey: streamID) else {
            codec?.consumeBody(streamID: streamID, bytes: bytes.count)
            return
        }
        incoming.values[index].unread += bytes.count
        incoming.values[index].body.yield(bytes)
    }

    /// Credit for body bytes a handler has read (RFC 9000 §4.1), unless its request was
    /// stopped, which credited them already.
    private func credit(_ bytes: Int, readFrom streamID: Int64) {
        if !stoppedReading.isEmpty, stoppedReading.contains(streamID) { return }
        if let index = incoming.index(forKey: streamID) { incoming.values[index].unread -= bytes }
        codec?.consumeBody(streamID: streamID, bytes: bytes)
    }

    /// The response to `streamID` is complete while its request body is still arriving: the
    /// server reads no more of it (RFC 9114 §4.1.2), and the client is asked to stop with
    /// STOP_SENDING and H3_NO_ERROR. An error response to an upload, a redirect, or any handler
    /// that does not read the body ends that way, and the connection and its other requests go
    /// on. A handler still reading the body sees it end there.
    @inline(never)
    private func stopReadingRequest(_ streamID: Int64) {
        guard let request = incoming.removeValue(forKey: streamID) else { return }
        request.body.finish()
        stoppedReading.insert(streamID)
        withCodec { $0.stopReading(streamID: streamID, unreadBytes: request.unread) }
    }

    /// The request body of `streamID` ends: complete (`error` nil) or cut short.
    @inline(never)
    private func endBody(of streamID: Int64, throwing error: HTTP3RequestBodyError?) {
        guard let request = incoming.removeValue(forKey: streamID) else { return }
        if let error { request.body.finish(throwing: error) } else { request.body.finish() }
    }

    /// Calls the handler as soon as the request head is in; the body follows as it arrives.
    private func start(streamID: Int64, fields: HTTP3ReceivedFields, hasBody: Bool) {
        guard let source = HTTP3RequestHeadSource(fields: fields) else {
            respond(streamID: streamID, HTTP3ServerResponse(status: .badRequest, body: Array("malformed request\n".utf8)))
            return
        }
        let request = HTTP3ServerRequest(
            source: source, body: hasBody ? incomingBody(streamID: streamID) : .empty, streamID: streamID, origin: origin
        )
        if let responder, let response = responder(request) {
            respond(streamID: streamID, response, toHead: response.hasContent && request.method == .head)
            return
        }
        runHandler(for: request)
    }

    /// Starts the async handler on `request`. Out of line, as the other places that hold a
    /// standard-library generic (here a task's priority): requests a responder answers at once
    /// should not look up its metadata.
    @inline(never)
    private func runHandler(for request: HTTP3ServerRequest) {
        let streamID = request.streamID
        let isHead = request.method == .head
        let handler = self.handler
        let logger = self.logger
        // Started at once, on this loop (SE-0472): a handler that answers without suspending
        // responds within this pass, with no enqueue and no hop. One that suspends resumes on
        // the connection's loop, its preferred executor.
        Task.immediate(executorPreference: handlerExecutor) {
            let response: HTTP3ServerResponse
            do {
                response = try await handler(request)
            } catch {
                logger.warning("handler failed", metadata: ["stream": "\(streamID)", "error": "\(error)"])
                response = HTTP3ServerResponse(status: .internalServerError, body: Array("internal error\n".utf8))
            }
            // A handler may have moved itself elsewhere (Task.detached work, another executor).
            if self.driver.eventLoop.inEventLoop {
                self.respond(streamID: streamID, response, toHead: isHead)
            } else {
                self.driver.eventLoop.execute { self.respond(streamID: streamID, response, toHead: isHead) }
            }
        }
    }

    /// A request body that arrives as the peer sends it. Out of line: the stream and its
    /// continuation need room set aside on entry, and a request without a body (most of them)
    /// should not pay for that.
    @inline(never)
    private func incomingBody(streamID: Int64) -> HTTP3RequestBody {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: [UInt8].self)
        let trailers = NIOLockedValueBox<HTTPFields?>(nil)
        incoming[streamID] = Incoming(body: continuation, trailers: trailers)
        let flowCredit = self.flowCredit
        return HTTP3RequestBody(stream: stream, trailers: trailers) { count in
            flowCredit.credit(streamID: streamID, bytes: count)
        }
    }

    private func bodyPump() -> HTTP3BodyPump {
        if let pump { return pump }
        let made = HTTP3BodyPump(driver: driver, logger: logger)
        pump = made
        return made
    }

    /// Submits `response`; `toHead`, the answer to a HEAD request, goes without its content
    /// (RFC 9110 §9.3.2), whatever the handler gave: content there is a malformed response, and
    /// a client's nghttp3 closes the whole connection over it (RFC 9114 §4.1.2).
    private func respond(streamID: Int64, _ response: HTTP3ServerResponse, toHead: Bool = false) {
        withCodec { codec in submit(response, on: streamID, to: codec, withContent: !toHead) }
    }

    private func submit(_ response: HTTP3ServerResponse, on streamID: Int64, to codec: HTTP3Codec, withContent: Bool) {
        let fields = HTTP3ResponseFieldSection(response.storedHead)
        do {
            if let priority = response.priority { try codec.setPriority(streamID: streamID, priority) }
            // A file is the whole body: `body` and `bodyStream` are not sent with one.
            let file = withContent ? response.file : nil
            let streaming = withContent && file == nil && response.hasBodyStream
            try codec.submitResponse(
                streamID: streamID,
                headers: fields,
                body: !withContent || response.body.isEmpty || file != nil ? nil : response.body,
                file: file,
                streaming: streaming,
                trailers: withContent ? response.trailers.map(\.pairs) : nil
            )
            if streaming {
                pumpBody(of: response, on: streamID)
            } else if !incoming.isEmpty, incoming[streamID] != nil {
                stopReadingRequest(streamID)
            }
        } catch {
            refuse(streamID, to: codec, because: error)
        }
        driver.schedulePass()
    }

    /// Starts pumping a response's body stream into its HTTP/3 stream.
    @inline(never)
    private func pumpBody(of response: HTTP3ServerResponse, on streamID: Int64) {
        guard let stream = response.bodyStream else { return }
        // The handler may read the request body while its response streams: only a complete
        // response stops the request.
        bodyPump().pump(streamID: streamID, from: stream) { self.stopReadingRequest(streamID) }
    }

    /// A response nghttp3 would not take: logged, and its stream reset with
    /// H3_INTERNAL_ERROR (RFC 9114 §8.1).
    @inline(never)
    private func refuse(_ streamID: Int64, to codec: HTTP3Codec, because error: any Error) {
        logger.warning("cannot submit response", metadata: ["stream": "\(streamID)", "error": "\(error)"])
        codec.cancel(streamID: streamID, code: .internalError)
    }
}
