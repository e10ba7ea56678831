#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport

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

    let driver: QUICConnectionDriver
    /// `driver.core`, kept here too: a `let` of this class is read without a reference count,
    /// while `driver.core`, a property from another module, is retained around each use.
    private let core: QUICConnectionCore
    private let responder: HTTP3Server.Responder?
    private let promiseResponder: HTTP3Server.PromiseResponder?
    private let handler: HTTP3Server.Handler
    let logger: Logger
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
        self.driver.runPass()
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
    let requestHeaderTimeout: UInt64?
    /// Fires when the oldest request stream still without its header section runs out of time.
    @exclusivity(unchecked) var requestHeaderTimer: Scheduled<Void>?

    init(
        driver: QUICConnectionDriver,
        responder: HTTP3Server.Responder? = nil,
        promiseResponder: HTTP3Server.PromiseResponder? = nil,
        handler: @escaping HTTP3Server.Handler,
        requestHeaderTimeout: UInt64? = nil,
        logger: Logger
    ) {
        self.driver = driver
        self.core = driver.core
        self.responder = responder
        self.promiseResponder = promiseResponder
        self.handler = handler
        self.requestHeaderTimeout = requestHeaderTimeout
        self.logger = logger
        let path = driver.core.path
        self.origin = HTTPServerRequestOrigin(
            protocolVersion: HTTPServerRequestOrigin.http3,
            remote: try? SocketAddress(ipAddress: path.remote.host, port: Int(path.remote.port)),
            local: try? SocketAddress(ipAddress: path.local.host, port: Int(path.local.port)),
            eventLoop: driver.eventLoop
        )
    }

    /// The codec as `attach` found it, unretained: the core owns it.
    @exclusivity(unchecked) private var attachedCodec: Unmanaged<HTTP3Codec>?

    /// Lends the codec to `body` without a reference count or a cast, as long as it is still
    /// the connection's (the core drops it once the connection is over). What runs on every
    /// pass and every response uses it: `core.applicationCodec` retains, checks the type and
    /// releases each time.
    private func withAttachedCodec<Result>(_ body: (HTTP3Codec) -> Result) -> Result? {
        guard let attachedCodec, let current = core.applicationCodecID,
              attachedCodec._withUnsafeGuaranteedRef({ ObjectIdentifier($0) == current })
        else { return nil }
        return attachedCodec._withUnsafeGuaranteedRef(body)
    }

    /// The codec, counted, for what runs now and then (shutdown, the request header timer).
    var codec: HTTP3Codec? { withAttachedCodec { $0 } }

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
            driver.runPass()
            return
        }
        try? codec.submitShutdownNotice()
        driver.runPass()
        // RFC 9114 §5.2: allow at least a round trip for requests already in flight.
        let rtt = Int64(clamping: HTTP3Server.nanoseconds(core.pathStatistics.smoothedRTT))
        let delay = TimeAmount.nanoseconds(max(2 * rtt, 50_000_000))
        // Never cancelled: if the connection ends first, the task finds no codec.
        _ = driver.eventLoop.scheduleTask(in: delay) {
            try? self.codec?.shutdown()
            self.driver.runPass()
            self.closeIfIdle()
        }
    }

    private func closeIfIdle() {
        guard isShuttingDown, (codec?.openRequestStreams ?? 0) == 0 else { return }
        core.close(applicationErrorCode: HTTP3ErrorCode.noError.rawValue, reason: "", now: QUICConnectionDriver.now())
        driver.runPass()
    }

    /// Runs in every pass of the driver, usually twice, and mostly finds nothing: the events
    /// are handled out of line, so a pass without any pays no more than these checks. Inlined,
    /// the handling made every call set up room for a request body's stream and continuation.
    private func drainCodec() -> Bool {
        withAttachedCodec { codec in
            if requestHeaderTimeout != nil, requestHeaderTimer == nil, codec.oldestAwaitingRequestHead != nil {
                armRequestHeaderTimer(now: QUICConnectionDriver.now())
            }
            guard codec.hasEvents else { return false }
            codec.drainEvents(handle)
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
        withAttachedCodec { $0.stopReading(streamID: streamID, unreadBytes: request.unread) }
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
        if let promiseResponder {
            let promise = HTTP3ResponsePromise(connection: self, streamID: streamID, toHead: request.method == .head)
            if promiseResponder(request, promise) {
                promise.take()
                return
            }
            promise.void()
        }
        runHandler(for: request)
    }

    /// Sends what a ``HTTP3ResponsePromise`` completed with, on this connection's loop; an error
    /// answers 500, as a handler's does.
    func answer(_ streamID: Int64, with result: Result<HTTP3ServerResponse, any Error>, toHead: Bool) {
        switch result {
        case .success(let response):
            respond(streamID: streamID, response, toHead: toHead)
        case .failure(let error):
            respond(streamID: streamID, internalError(error, streamID: streamID), toHead: toHead)
        }
    }

    /// The 500 for a handler's or a promise's error, which is logged.
    private func internalError(_ error: any Error, streamID: Int64) -> HTTP3ServerResponse {
        logger.warning("handler failed", metadata: ["stream": "\(streamID)", "error": "\(error)"])
        return HTTP3ServerResponse(status: .internalServerError, body: Array("internal error\n".utf8))
    }

    /// Starts the async handler on `request`. Out of line, as the other places that hold a
    /// standard-library generic (here a task's priority): requests a responder answers at once
    /// should not look up its metadata.
    @inline(never)
    private func runHandler(for request: HTTP3ServerRequest) {
        let streamID = request.streamID
        let isHead = request.method == .head
        let handler = self.handler
        // Started at once, on this loop (SE-0472): a handler that answers without suspending
        // responds within this pass, with no enqueue and no hop. One that suspends resumes on
        // the connection's loop, its preferred executor.
        Task.immediate(executorPreference: handlerExecutor) {
            let response: HTTP3ServerResponse
            do {
                response = try await handler(request)
            } catch {
                response = self.internalError(error, streamID: streamID)
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
        withAttachedCodec { codec in submit(response, on: streamID, to: codec, withContent: !toHead) }
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
                body: !withContent || response.givenBody.isEmpty || file != nil ? nil : response.givenBody,
                bodyBuffer: !withContent || file != nil ? nil : response.bodyBuffer,
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
        bodyPump().pump(streamID: streamID, from: stream, trailersAtEnd: response.trailersAfterBodyStream) {
            self.stopReadingRequest(streamID)
        }
    }

    /// A response nghttp3 would not take: logged, and its stream reset with
    /// H3_INTERNAL_ERROR (RFC 9114 §8.1).
    @inline(never)
    private func refuse(_ streamID: Int64, to codec: HTTP3Codec, because error: any Error) {
        logger.warning("cannot submit response", metadata: ["stream": "\(streamID)", "error": "\(error)"])
        codec.cancel(streamID: streamID, code: .internalError)
    }
}
