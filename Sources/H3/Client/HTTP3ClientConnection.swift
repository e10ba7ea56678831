import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
@_spi(StreamTable) import QuicTransport

/// One HTTP/3 connection to one authority: a QUIC client with an `HTTP3Codec` attached, and
/// the requests in flight on it (RFC 9114 §4).
///
/// Loop-confined: every method runs on `eventLoop`, where the codec runs inside the core.
// @unchecked Sendable: all state is touched only on `eventLoop`; `HTTP3Client` hops there. For
// the same reason, and because no access to a property spans a call that can reach it again
// (the closures given to `removeAll` only compare), its state skips Swift's
// run-time exclusivity check, as the server connection's does: a request read several.
final class HTTP3ClientConnection: @unchecked Sendable {
    enum State {
        case connecting
        case ready
        /// The server sent GOAWAY (RFC 9114 §5.2): no new requests here.
        case draining
        case failed(HTTP3ClientError)
    }

    /// A request waiting for the handshake or for stream credit.
    ///
    /// A class: the queue (`CircularBuffer`, whose slots are optionals) copies an element in
    /// and out through generic code, and each copy of a struct retained and released its five
    /// references, some sixteen of each a request.
    final class Pending {
        let fields: [(name: String, value: String)]
        let body: [UInt8]?
        let bodyStream: AsyncThrowingStream<[UInt8], any Error>?
        let trailers: [(name: String, value: String)]?
        let exchange: HTTP3Exchange

        init(
            fields: [(name: String, value: String)],
            body: [UInt8]?,
            bodyStream: AsyncThrowingStream<[UInt8], any Error>?,
            trailers: [(name: String, value: String)]?,
            exchange: HTTP3Exchange
        ) {
            self.fields = fields
            self.body = body
            self.bodyStream = bodyStream
            self.trailers = trailers
            self.exchange = exchange
        }
    }

    let eventLoop: QUICEventLoop
    let logger: Logger
    @exclusivity(unchecked) private(set) var state: State = .connecting
    @exclusivity(unchecked) private var connector: QUICClientConnector?
    @exclusivity(unchecked) private var driver: QUICConnectionDriver?
    @exclusivity(unchecked) private var codec: HTTP3Codec?
    /// Streams request bodies that come from an AsyncThrowingStream.
    @exclusivity(unchecked) private var pump: HTTP3BodyPump?
    /// Requests waiting for a stream, oldest first. A ring buffer: a caller may queue
    /// thousands at once (h3get with many URLs) while the server grants 100 streams, and an
    /// array's `removeFirst` moved all the rest on every send (quadratic in the queue).
    @exclusivity(unchecked) private var pending = CircularBuffer<Pending>()
    /// Requests sent in 0-RTT, kept until the handshake says whether the server took them.
    @exclusivity(unchecked) private var sentEarly: [Pending] = []
    @exclusivity(unchecked) private var exchanges = QUICStreamTable<HTTP3Exchange>()
    /// Callers of `whenReady()` waiting for the handshake.
    @exclusivity(unchecked) private var readyWaiters: [EventLoopPromise<HTTP3ConnectionInfo>] = []
    /// Runs once the connection is over, with it, so the client can forget it.
    @exclusivity(unchecked) var onClosed: ((HTTP3ClientConnection) -> Void)?
    /// Succeeds once the key update `initiatesKeyUpdate` asks for is complete, and fails when
    /// the connection ends before; nil without one.
    private let keyUpdate: EventLoopPromise<Void>?
    /// Whether the update began (at handshake confirmation) or was given up (`keyUpdateOutcome`).
    @exclusivity(unchecked) private var keyUpdateSettled = false

    /// The key update's outcome, for a caller done with the connection: one that has not even
    /// completed its handshake by then (a slow or blocked UDP path, where TCP served the
    /// requests) will not update its keys for this caller, and fails at once. Nil without one.
    func keyUpdateOutcome() -> EventLoopFuture<Void>? {
        eventLoop.assertInEventLoop()
        if case .connecting = state { giveUpKeyUpdate("the HTTP/3 connection had not completed its handshake") }
        return keyUpdate?.futureResult
    }

    /// Fails the key update that never started, for `reason`.
    private func giveUpKeyUpdate(_ reason: String) {
        guard let keyUpdate, !keyUpdateSettled else { return }
        keyUpdateSettled = true
        keyUpdate.fail(QUICKeyUpdateError.didNotComplete(reason))
    }
    /// Handshake figures for `-v` and `-w`.
    @exclusivity(unchecked) private(set) var connectedAt: ContinuousClock.Instant?
    @exclusivity(unchecked) private(set) var negotiatedALPN: String?
    @exclusivity(unchecked) private(set) var qlogPath: String?
    /// Made when the handshake completes, from these instants and the path then.
    @exclusivity(unchecked) private(set) var establishment: HTTP3ConnectionEstablishment?
    private let startedAt = ContinuousClock.now
    @exclusivity(unchecked) private var resolvedAt: ContinuousClock.Instant?

    /// What to do once the handshake is confirmed (`HTTP3Client.Configuration`).
    private let initiatesKeyUpdate: Bool
    private let migratesAfterHandshake: Bool

    init(
        host: String,
        port: UInt16,
        configuration: HTTP3Client.Configuration,
        liveConnections: QUICLiveConnections? = nil,
        eventLoop: QUICEventLoop,
        logger: Logger
    ) {
        self.eventLoop = eventLoop
        self.logger = logger
        self.initiatesKeyUpdate = configuration.initiatesKeyUpdate
        self.keyUpdate = configuration.initiatesKeyUpdate ? eventLoop.makePromise() : nil
        self.migratesAfterHandshake = configuration.migratesAfterHandshake
        var quic = QUICConfiguration()
        quic.alpn = [HTTP3.alpn]
        quic.qlogDirectory = configuration.qlogDirectory
        quic.tracksLosses = configuration.tracksLosses
        quic.sessionTicketStore = configuration.sessionTicketStore
        quic.cipherSuites = configuration.cipherSuites
        quic.idleTimeoutMilliseconds = UInt64(configuration.idleTimeoutMilliseconds)
        quic.attemptsEarlyData = configuration.allowsEarlyData
        let connector = QUICClientConnector(
            host: configuration.connectTo?.host ?? host,
            port: configuration.connectTo?.port ?? port,
            configuration: quic,
            verification: configuration.certificateVerification,
            serverName: configuration.serverName ?? (configuration.connectTo != nil ? host : nil),
            makeCodec: { try HTTP3Codec(role: .client) },
            liveConnections: liveConnections,
            eventLoop: eventLoop,
            logger: logger
        )
        connector.onAttempt = { driver in
            if self.resolvedAt == nil { self.resolvedAt = .now }
            self.driver = driver
            self.codec = driver?.core.applicationCodec as? HTTP3Codec
            self.pump = driver.map { HTTP3BodyPump(driver: $0, logger: logger) }
            driver?.afterPass = { self.drainCodec() }
            self.sendPending()
        }
        connector.onEvents = { events in self.handle(events) }
        connector.onFailure = { failure in self.fail(HTTP3ClientError(failure)) }
        connector.onFinished = {
            self.fail(.connectionClosed(self.driver?.core.closeReason.map { "\($0)" } ?? "closed"))
            // The driver has dropped its hooks; dropping the driver and the connector here frees
            // the core (and closes its qlog trace).
            self.driver = nil
            self.codec = nil
            self.pump?.connectionClosed()
            self.pump = nil
            self.connector = nil
            self.onClosed?(self)
        }
        self.connector = connector
        connector.start()
    }

    /// Sends a request now or once the connection is ready.
    func submit(
        fields: [(name: String, value: String)],
        body: [UInt8]?,
        bodyStream: AsyncThrowingStream<[UInt8], any Error>? = nil,
        trailers: [(name: String, value: String)]? = nil,
        exchange: HTTP3Exchange
    ) {
        eventLoop.assertInEventLoop()
        switch state {
        case .failed(let error): exchange.fail(error)
        case .draining: exchange.fail(.requestRejected)
        case .connecting:
            pending.append(Pending(fields: fields, body: body, bodyStream: bodyStream, trailers: trailers, exchange: exchange))
            if canSendEarly {
                sendPending()
                driver?.schedulePass()
            }
        case .ready:
            pending.append(Pending(fields: fields, body: body, bodyStream: bodyStream, trailers: trailers, exchange: exchange))
            sendPending()
            // One pass writes what every request submitted in this turn of the loop queued: the
            // tasks that a datagram of responses wakes each send their next request in the same
            // turn, and a pass for each sealed a packet for each (0.6 packets per request under
            // h3load with 100 in flight, where gtlsclient sends 0.09).
            driver?.schedulePass()
        }
    }

    /// Succeeds once the handshake completes, fails when the connection does.
    func whenReady() -> EventLoopFuture<HTTP3ConnectionInfo> {
        eventLoop.assertInEventLoop()
        switch state {
        case .ready, .draining: return eventLoop.makeSucceededFuture(info)
        case .failed(let error): return eventLoop.makeFailedFuture(error)
        case .connecting:
            let promise = eventLoop.makePromise(of: HTTP3ConnectionInfo.self)
            readyWaiters.append(promise)
            return promise.futureResult
        }
    }

    /// The transport's reports for the whole connection so far; nil once it is gone.
    var statistics: HTTP3ConnectionStatistics? {
        guard let core = driver?.core else { return nil }
        return HTTP3ConnectionStatistics(establishment: core.establishmentReport, transfer: core.lifetimeDataTransferReport)
    }

    /// Cancels one request with H3_REQUEST_CANCELLED (RFC 9114 §4.1.1).
    func cancel(_ exchange: HTTP3Exchange) {
        eventLoop.assertInEventLoop()
        guard let streamID = exchange.streamID, exchanges[streamID] === exchange else {
            pending.removeAll { $0.exchange === exchange }
            return
        }
        codec?.cancel(streamID: streamID, code: .requestCancelled)
        exchanges[streamID] = nil
        sentEarly.removeAll { $0.exchange === exchange }
        exchange.fail(.cancelled)
        driver?.runPass()
    }

    /// Changes an in-flight request's priority; nghttp3 sends PRIORITY_UPDATE (RFC 9218 §7.1).
    func updatePriority(_ exchange: HTTP3Exchange, to priority: HTTPPriority) throws {
        eventLoop.assertInEventLoop()
        guard let streamID = exchange.streamID, exchanges[streamID] === exchange, let codec else { return }
        try codec.setPriority(streamID: streamID, priority)
        driver?.runPass()
    }

    /// Closes the connection with H3_NO_ERROR.
    func close() {
        eventLoop.assertInEventLoop()
        connector?.stop()
        guard let driver else { return }
        driver.core.close(applicationErrorCode: HTTP3ErrorCode.noError.rawValue, reason: "", now: QUICConnectionDriver.now())
        driver.runPass()
    }

    private func handle(_ events: [QUICConnectionEvent]) {
        for event in events {
            switch event {
            case .earlyDataRejected:
                restartAfterRejectedEarlyData()
            case .handshakeCompleted:
                sentEarly.removeAll()
                state = .ready
                let now = ContinuousClock.now
                connectedAt = now
                negotiatedALPN = driver?.core.negotiatedALPN
                qlogPath = driver?.core.qlogPath
                if let path = driver?.core.path {
                    establishment = HTTP3ConnectionEstablishment(
                        startedAt: startedAt, resolvedAt: resolvedAt ?? startedAt, connectedAt: now,
                        remoteAddress: path.remote.host, remotePort: path.remote.port, localAddress: path.local.host, localPort: path.local.port
                    )
                }
                for waiter in readyWaiters { waiter.succeed(info) }
                readyWaiters.removeAll()
                sendPending()
            case .handshakeConfirmed:
                if let keyUpdate, !keyUpdateSettled,
                    let update = connector?.initiateKeyUpdate().flatMapErrorThrowing({ throw NWError.reported($0) })
                {
                    keyUpdateSettled = true
                    update.whenFailure { [logger] error in logger.warning("key update failed: \(error)") }
                    update.cascade(to: keyUpdate)
                }
                if migratesAfterHandshake {
                    connector?.migrate().whenComplete { [logger] result in
                        switch result {
                        case .success(let path): logger.info("migrated to \(path.local)")
                        case .failure(let error): logger.warning("\(NWError.reported(error))")
                        }
                    }
                }
            case .streamCreditAvailable:
                sendPending()
            case .closed(let reason):
                let beforeHandshake: Bool
                if case .connecting = state { beforeHandshake = true } else { beforeHandshake = false }
                fail(HTTP3ClientError(closedBy: reason, beforeHandshake: beforeHandshake))
            default:
                break
            }
        }
    }

    /// Whether requests may go out in 0-RTT now: the core is attempting it and its codec runs.
    private var canSendEarly: Bool {
        guard case .connecting = state, let core = driver?.core else { return false }
        return codec != nil && core.earlyDataAttempted && core.canOpenStreams
    }

    /// Only safe, bodiless requests ride in 0-RTT, which an attacker can replay (RFC 9114 §10.9).
    private static func isReplaySafe(_ request: Pending) -> Bool {
        let method = request.fields.first { $0.name == ":method" }?.value
        return ["GET", "HEAD", "OPTIONS"].contains(method ?? "") && (request.body ?? []).isEmpty
            && request.bodyStream == nil && request.trailers == nil
    }

    /// The server refused 0-RTT: ngtcp2 forgot the streams, and the core replaced the codec
    /// that had opened them with a fresh one on 1-RTT. The early requests go back to the front
    /// of the queue, to be sent again in order now that the handshake is complete.
    private func restartAfterRejectedEarlyData() {
        codec = driver?.core.applicationCodec as? HTTP3Codec
        logger.debug("0-RTT refused; sending \(sentEarly.count) request(s) again")
        for request in sentEarly {
            if let streamID = request.exchange.streamID { exchanges[streamID] = nil }
            request.exchange.streamID = nil
        }
        pending.insert(contentsOf: sentEarly, at: pending.startIndex)
        sentEarly.removeAll()
    }

    private func sendPending() {
        let early = canSendEarly
        guard let codec else { return }
        switch state {
        case .ready: break
        case .connecting where early: break
        default: return
        }
        while let next = pending.first {
            if early && !Self.isReplaySafe(next) { return }
            do {
                guard let streamID = try codec.submitRequest(
                    headers: next.fields,
                    body: next.body,
                    streaming: next.bodyStream != nil,
                    trailers: next.trailers
                ) else { return }
                if let stream = next.bodyStream { pump?.pump(streamID: streamID, from: stream) }
                pending.removeFirst()
                if early { sentEarly.append(next) }
                exchanges[streamID] = next.exchange
                // Body bytes earn flow-control credit back only as the caller reads them.
                next.exchange.sent(on: streamID, flowCredit: flowCredit)
            } catch {
                pending.removeFirst()
                next.exchange.fail(.protocolError("\(error)"))
            }
        }
    }

    /// Credit for response bytes the callers have read. Response bodies outlive the connection,
    /// so its hold on this connection is let go (`detach`) once the connection has failed or is
    /// over, as the connector's hooks are. A weak capture would not need that, but an object
    /// referred to weakly keeps its reference counts in a side table, and every retain of this
    /// connection then took the slow path, about ten times a request.
    private lazy var flowCredit = HTTP3FlowCredit(eventLoop: eventLoop) { credits in
        for (streamID, bytes) in credits { self.codec?.consumeBody(streamID: streamID, bytes: bytes) }
        self.driver?.runPass()
    }

    /// Hands the codec's parsed frames to the waiting requests.
    private func drainCodec() -> Bool {
        guard let codec else { return false }
        let events = codec.takeEvents()
        for event in events {
            switch event {
            case .headers(let streamID, let fields, let isTrailers):
                exchanges[streamID]?.receive(fields: fields, isTrailers: isTrailers)
            case .data(let streamID, let bytes):
                exchanges[streamID]?.receive(body: bytes)
            case .end(let streamID):
                exchanges.removeValue(forKey: streamID)?.finish()
            case .reset(let streamID, let code):
                exchanges.removeValue(forKey: streamID)?.fail(code == .requestRejected ? .requestRejected : .streamReset(code))
            case .closed(let streamID, let code):
                pump?.streamClosed(streamID)
                if let exchange = exchanges.removeValue(forKey: streamID) {
                    switch code {
                    case .noError: exchange.fail(.protocolError("stream closed before the response ended"))
                    case .requestRejected: exchange.fail(.requestRejected)
                    default: exchange.fail(.streamReset(code))
                    }
                }
            case .bodyAcknowledged(let streamID):
                pump?.acknowledged(streamID)
            case .goaway(let lastID):
                // Requests at or past the last ID were not and will not be processed: retry them elsewhere.
                state = .draining
                for request in pending { request.exchange.fail(.requestRejected) }
                pending.removeAll()
                for (streamID, exchange) in exchanges.entries where streamID >= lastID {
                    exchanges[streamID] = nil
                    exchange.fail(.requestRejected)
                }
            }
        }
        return !events.isEmpty
    }

    private func fail(_ error: HTTP3ClientError) {
        if case .failed = state { return }
        state = .failed(error)
        // Once started, the update fails by itself when the connection ends.
        giveUpKeyUpdate("the HTTP/3 connection ended before its handshake was confirmed (\(error))")
        flowCredit.detach()
        for waiter in readyWaiters { waiter.fail(error) }
        readyWaiters.removeAll()
        for request in pending { request.exchange.fail(error) }
        pending.removeAll()
        for (_, exchange) in exchanges.entries { exchange.fail(error) }
        exchanges.removeAll()
        sentEarly.removeAll()
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
