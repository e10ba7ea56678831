import Dispatch
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// One QUIC tunnel (connection) as a Network.framework connection group: streams are
/// `NWConnection`s inside it, and datagrams (RFC 9221) go to and from the group itself.
///
/// Configure handlers, then `start(queue:)`. Handlers and completions run on that queue.
// @unchecked Sendable: handler properties, the state and the queue sit behind `lock`; everything
// under "Loop-confined" is read and written only on `eventLoop`.
public final class NWConnectionGroup: @unchecked Sendable {
    public enum State: Equatable, Sendable {
        case setup
        case waiting(NWError)
        case preparing
        case ready
        case failed(NWError)
        case cancelled
    }

    /// A datagram's message context on the group, as in Network.framework.
    public struct Message: Sendable {
        public static let `default` = Message()
        public init() {}
    }

    public let descriptor: NWMultiplexGroup
    public let parameters: NWParameters
    let eventLoop: any EventLoop
    let logger: Logger
    let options: NWProtocolQUIC.Options

    private let observable = ObservableState<State>(.setup) { state in
        switch state {
        case .failed, .cancelled: return true
        default: return false
        }
    }
    private let lock = NIOLock()
    private var _newConnectionHandler: (@Sendable (NWConnection) -> Void)?
    private var _receiveHandler: (@Sendable (Message, Data?, Bool) -> Void)?
    private var streamContinuations: [AsyncStream<NWConnection>.Continuation] = []
    private var datagramContinuations: [AsyncStream<Data>.Continuation] = []
    private let metadataObject = NWProtocolQUIC.Metadata(streamType: .bidirectional)

    // MARK: Loop-confined
    var driver: QUICConnectionDriver?
    var streams: [Int64: NWConnection] = [:]
    private var pendingOpens: [NWConnection] = []
    /// Streams and datagrams that arrived before `start(queue:)`, delivered once it runs.
    private var heldInbound: [NWConnection] = []
    private var heldDatagrams: [Data] = []
    private var started = false
    private var connector: QUICClientConnector?
    /// Runs once, on the loop, when the handshake completes (the listener delivers server groups then).
    var onEstablished: (() -> Void)?
    /// Runs once the group is finished and can be forgotten.
    var onFinished: (() -> Void)?
    /// Runs when an accepted tunnel closes before it was ever established (a failed handshake).
    var onHandshakeFailure: ((QUICCloseReason) -> Void)?

    /// A client tunnel to the descriptor's endpoint.
    public init(with descriptor: NWMultiplexGroup, using parameters: NWParameters) {
        self.descriptor = descriptor
        self.parameters = parameters
        self.options = parameters.quicOptions.copy()
        self.eventLoop = MultiThreadedEventLoopGroup.singleton.next()
        self.logger = Logger(label: "quic.group")
    }

    /// A server tunnel the listener accepted; already running on `driver`'s loop.
    init(accepted driver: QUICConnectionDriver, parameters: NWParameters, options: NWProtocolQUIC.Options, logger: Logger) {
        let remote = driver.core.path.remote
        self.descriptor = NWMultiplexGroup(to: .hostPort(host: .init(remote.host), port: .init(integerLiteral: remote.port)))
        self.parameters = parameters
        self.options = options
        self.eventLoop = driver.eventLoop
        self.logger = logger
        self.driver = driver
        // The driver keeps the group alive until the connection is over; finishing breaks the cycle.
        driver.eventHandler = { events in self.handle(events) }
        driver.onFinished = { [previous = driver.onFinished] finished in
            previous?(finished)
            self.connectionEnded()
        }
    }

    // MARK: Public API

    public var state: State { observable.current }

    public var stateUpdateHandler: (@Sendable (State) -> Void)? {
        get { observable.updateHandler }
        set { observable.updateHandler = newValue }
    }

    /// Called with each stream the peer opens; set it before `start(queue:)`.
    public var newConnectionHandler: (@Sendable (NWConnection) -> Void)? {
        get { lock.withLock { _newConnectionHandler } }
        set { lock.withLock { _newConnectionHandler = newValue } }
    }

    /// The tunnel's remote endpoint.
    public var remoteEndpoint: NWEndpoint? { descriptor.members.first }

    /// Connects (clients) or begins delivering events (accepted groups).
    public func start(queue: DispatchQueue) {
        observable.setQueue(queue)
        eventLoop.execute {
            guard !self.started else { return }
            self.started = true
            if self.driver == nil {
                self.setState(.preparing)
                self.connect()
            } else {
                // An accepted group is established already; replay that and the held streams.
                if let core = self.driver?.core, core.closeReason == nil { self.setState(.ready) }
                let held = self.heldInbound
                self.heldInbound.removeAll()
                for connection in held { self.deliverInbound(connection) }
                let datagrams = self.heldDatagrams
                self.heldDatagrams.removeAll()
                for datagram in datagrams { self.deliverDatagram(datagram) }
                if let reason = self.driver?.core.closeReason { self.finish(reason) }
            }
        }
    }

    /// Closes the tunnel with CONNECTION_CLOSE. With `metadata`'s `applicationError` set, the
    /// close carries that code and `applicationErrorReason` (RFC 9000 §10.2); otherwise code 0.
    public func cancel() {
        let code = metadataObject.applicationError ?? 0
        let reason = metadataObject.applicationErrorReason ?? ""
        cancel(applicationError: code, reason: reason)
    }

    /// Closes the tunnel with this application error code and reason phrase.
    public func cancel(applicationError: UInt64, reason: String = "") {
        eventLoop.execute {
            guard let driver = self.driver else {
                // Not connected yet: no attempt starts after this, so nothing else will end the group.
                self.connector?.stop()
                self.connector = nil
                self.setState(.cancelled)
                self.failAllStreams(.posix(.ECANCELED))
                self.connectionEnded()
                return
            }
            driver.perform { core in core.close(applicationErrorCode: applicationError, reason: reason, now: QUICConnectionDriver.now()) }
        }
    }

    /// Sends one QUIC datagram (RFC 9221); both sides must have enabled `isDatagram`.
    public func send(
        content: Data?,
        to endpoint: NWEndpoint? = nil,
        message: Message = .default,
        completion: @escaping @Sendable (NWError?) -> Void
    ) {
        let bytes = Array(content ?? Data())
        eventLoop.execute {
            guard let driver = self.driver else {
                self.callback { completion(.posix(.ENOTCONN)) }
                return
            }
            do {
                try driver.core.sendDatagram(bytes)
                driver.afterInput()
                self.callback { completion(nil) }
            } catch {
                self.callback { completion(.quic(.invalid("\(error)"))) }
            }
        }
    }

    /// Receives datagrams (RFC 9221) sent on the group.
    public func setReceiveHandler(
        maximumMessageSize: Int = 65_535,
        rejectOversizedMessages: Bool = true,
        handler: @escaping @Sendable (Message, Data?, Bool) -> Void
    ) {
        lock.withLock { _receiveHandler = handler }
    }

    /// QUIC metadata of the tunnel: set `applicationError` before `cancel()` to close with it.
    public func metadata(definition: NWProtocolDefinition) -> NWProtocolMetadata? {
        definition == NWProtocolQUIC.definition ? metadataObject : nil
    }

    /// The qlog trace this tunnel writes, when a qlog directory is set.
    public var qlogFilePath: String? {
        get async { try? await eventLoop.submit { self.driver?.core.qlogPath }.get() }
    }

    /// The negotiated ALPN protocol, once `.ready`.
    public var negotiatedALPN: String? {
        get async { try? await eventLoop.submit { self.driver?.core.negotiatedALPN }.get() }
    }

    /// How the tunnel was established (duration, handshake RTT, ALPN, cipher, version), as
    /// Network.framework's establishment report; nil before the handshake completes.
    public func requestEstablishmentReport(queue: DispatchQueue, completion: @escaping @Sendable (QUICEstablishmentReport?) -> Void) {
        eventLoop.execute {
            let report = self.driver?.core.establishmentReport
            queue.async { completion(report) }
        }
    }

    /// The establishment report, async.
    public func establishmentReport() async -> QUICEstablishmentReport? {
        try? await eventLoop.submit { self.driver?.core.establishmentReport }.get()
    }

    /// Starts measuring what the tunnel carries, as Network.framework's
    /// `startDataTransferReport()`; `collect` on the result ends the interval.
    public func startDataTransferReport() -> PendingDataTransferReport {
        let pending = PendingDataTransferReport(eventLoop: eventLoop)
        eventLoop.execute { pending.begin(on: self.driver?.core) }
        return pending
    }

    /// Starts a 1-RTT key update (RFC 9001 §6); the peer follows. A client tunnel waits until the
    /// handshake is confirmed and the next keys exist. Throws while the previous update is still
    /// unacknowledged (and, on a server tunnel, before the handshake is confirmed).
    public func initiateKeyUpdate() async throws {
        try await eventLoop.flatSubmit { () -> EventLoopFuture<Void> in
            if let connector = self.connector { return connector.initiateKeyUpdate() }
            guard let driver = self.driver else { return self.eventLoop.makeFailedFuture(NWError.posix(.ENOTCONN)) }
            do {
                try driver.core.initiateKeyUpdate(now: QUICConnectionDriver.now())
            } catch {
                return self.eventLoop.makeFailedFuture(error)
            }
            driver.afterInput()
            return self.eventLoop.makeSucceededVoidFuture()
        }.get()
    }

    /// Moves the tunnel to a new local UDP port (connection migration, RFC 9000 §9.2), as a
    /// client does when its network changes: waits until the handshake is confirmed, validates
    /// the new path with PATH_CHALLENGE, then sends only from it. Streams carry on unaffected.
    /// Returns the new local endpoint. Client tunnels only; throws when the server disabled
    /// migration or the new path does not validate (the tunnel then stays on its old path).
    @discardableResult
    public func migrate() async throws -> NWEndpoint {
        let path = try await eventLoop.flatSubmit { () -> EventLoopFuture<QUICPath> in
            guard let connector = self.connector else { return self.eventLoop.makeFailedFuture(NWError.posix(.EOPNOTSUPP)) }
            return connector.migrate()
        }.get()
        return .hostPort(host: .init(path.local.host), port: .init(integerLiteral: path.local.port))
    }

    /// Round-trip and congestion figures of the tunnel's path right now (RFC 9002 §5).
    public func pathStatistics() async -> QUICPathStatistics? {
        try? await eventLoop.submit { () -> QUICPathStatistics? in
            guard let core = self.driver?.core, core.closeReason == nil else { return nil }
            return core.pathStatistics
        }.get() ?? nil
    }

    // MARK: Swift concurrency

    /// State changes from now on; the stream ends at `.failed` or `.cancelled`.
    public var states: AsyncStream<State> { observable.stream }

    /// Streams the peer opens; create it before `start(queue:)` so none is missed.
    public var inboundStreams: AsyncStream<NWConnection> {
        AsyncStream { continuation in lock.withLock { streamContinuations.append(continuation) } }
    }

    /// Datagrams received on the tunnel.
    public var datagrams: AsyncStream<Data> {
        AsyncStream { continuation in lock.withLock { datagramContinuations.append(continuation) } }
    }

    /// Waits for `.ready`; throws the error of `.failed`, or ECANCELED.
    public func waitUntilReady() async throws {
        for await state in states {
            switch state {
            case .ready: return
            case .failed(let error): throw error
            case .cancelled: throw NWError.posix(.ECANCELED)
            default: continue
            }
        }
        throw NWError.posix(.ECANCELED)
    }

    /// Sends one datagram and waits until it is queued.
    public func send(datagram: Data) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            send(content: datagram) { error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume() }
            }
        }
    }

    // MARK: Loop-confined machinery

    /// Runs `body` on the user's queue (or a global one before `start`).
    func callback(_ body: @escaping @Sendable () -> Void) { observable.callback(body) }

    func setState(_ new: State) { observable.update(new) }

    /// The options lowered for the core, with `allowFastOpen` from the parameters.
    private var clientConfiguration: QUICConfiguration {
        var configuration = options.configuration
        configuration.attemptsEarlyData = parameters.allowFastOpen
        return configuration
    }

    private func connect() {
        guard case .hostPort(let host, let port) = descriptor.members[0] else { return }
        let connector = QUICClientConnector(
            host: host.stringValue,
            port: port.rawValue,
            configuration: clientConfiguration,
            verification: options.tls.certificateVerification,
            serverName: options.tls.serverName,
            eventLoop: eventLoop,
            logger: logger
        )
        // The connector (through its driver) keeps the group alive until the connection is over.
        connector.onAttempt = { driver in
            self.driver = driver
            // With 0-RTT, streams queued before start go out with the first flight.
            self.openPendingStreams()
        }
        connector.onEvents = { events in self.handle(events) }
        connector.onFailure = { failure in
            let error: NWError
            switch failure {
            case .resolution(_, let code): error = .dns(code)
            case .refused: error = .posix(.ECONNREFUSED)
            case .unreachable: error = .posix(.ENETUNREACH)
            case .silent: error = .posix(.ETIMEDOUT)
            case .setup(let reason): error = .quic(.invalid(reason))
            }
            self.setState(.failed(error))
            self.failAllStreams(error)
            self.connector = nil
        }
        connector.onFinished = {
            self.connector = nil
            self.connectionEnded()
        }
        self.connector = connector
        connector.start()
    }

    func handle(_ events: [QUICConnectionEvent]) {
        for event in events {
            logger.trace("event", metadata: ["event": "\(event)"])
            switch event {
            case .handshakeCompleted:
                if started { setState(.ready) }
                onEstablished?()
                onEstablished = nil
                openPendingStreams()
            case .streamOpened(let id):
                let connection = NWConnection(inbound: id, group: self)
                streams[id] = connection
                if started { deliverInbound(connection) } else { heldInbound.append(connection) }
            case .streamReadable(let id):
                streams[id]?.serviceReceives()
            case .streamSendCompleted(let id, let token, let error):
                streams[id]?.completeSend(token: token, error: error)
            case .streamClosed(let id, let code):
                streams[id]?.transportClosed(code: code)
            case .streamCreditAvailable:
                openPendingStreams()
            case .datagramReceived(let bytes):
                if started { deliverDatagram(Data(bytes)) } else { heldDatagrams.append(Data(bytes)) }
            case .closed(let reason):
                if let driver, !driver.core.isHandshakeCompleted { onHandshakeFailure?(reason) }
                finish(reason)
            case .connectionIDIssued, .connectionIDRetired, .handshakeConfirmed, .pathValidated, .earlyDataRejected:
                break
            }
        }
    }

    private func finish(_ reason: QUICCloseReason) {
        guard started else { return }
        let error = NWError.quic(QUICError(reason))
        switch reason {
        case .localApplicationClose(0, _), .peerApplicationClose(0, _): setState(.cancelled)
        case .localApplicationClose: setState(.cancelled)
        default: setState(.failed(error))
        }
        failAllStreams(error)
        finishObservers()
    }

    /// Ends the `inboundStreams` and `datagrams` sequences.
    private func finishObservers() {
        let (streamObservers, datagramObservers) = lock.withLock {
            defer {
                streamContinuations.removeAll()
                datagramContinuations.removeAll()
            }
            return (streamContinuations, datagramContinuations)
        }
        for continuation in streamObservers { continuation.finish() }
        for continuation in datagramObservers { continuation.finish() }
    }

    /// The connection is over and its driver has stopped: lets go of everything that could keep
    /// the group alive. The user's handlers often capture the group, and every stream points back
    /// at it; held on to, they would keep the core, its TLS session and its buffers forever.
    /// Network.framework likewise releases the handlers of a group that has ended. A group that
    /// was never started keeps its state handler until `start(queue:)` reports the end.
    private func connectionEnded() {
        let onFinished = self.onFinished
        self.onFinished = nil
        onEstablished = nil
        onHandshakeFailure = nil
        // Streams of a started group failed already, with the close reason; the rest fail now.
        let error = driver?.core.closeReason.map { NWError.quic(QUICError($0)) } ?? .posix(.ECANCELED)
        failAllStreams(error)  // Held inbound streams are in `streams` too.
        streams.removeAll()
        heldInbound.removeAll()
        heldDatagrams.removeAll()
        lock.withLock {
            _newConnectionHandler = nil
            _receiveHandler = nil
        }
        finishObservers()
        onFinished?()
    }

    private func failAllStreams(_ error: NWError) {
        for connection in pendingOpens { connection.groupFailed(error) }
        pendingOpens.removeAll()
        for connection in streams.values { connection.groupFailed(error) }
    }

    private func deliverInbound(_ connection: NWConnection) {
        let (handler, continuations) = lock.withLock { (_newConnectionHandler, streamContinuations) }
        if let handler { callback { handler(connection) } }
        for continuation in continuations { continuation.yield(connection) }
        if handler == nil && continuations.isEmpty {
            logger.debug("no newConnectionHandler; stream \(connection.streamIDForLogs) waits unread")
        }
    }

    private func deliverDatagram(_ data: Data) {
        let (handler, continuations) = lock.withLock { (_receiveHandler, datagramContinuations) }
        if let handler { callback { handler(.default, data, true) } }
        for continuation in continuations { continuation.yield(data) }
    }

    /// Queues a locally opened stream; it gets its ID once the handshake and the peer's limits allow.
    func enqueueOpen(_ connection: NWConnection) {
        switch state {
        case .failed(let error): connection.groupFailed(error)
        case .cancelled: connection.groupFailed(.posix(.ECANCELED))
        default:
            pendingOpens.append(connection)
            openPendingStreams()
        }
    }

    private func openPendingStreams() {
        guard let driver, driver.core.canOpenStreams else { return }
        while let next = pendingOpens.first {
            let id: Int64?
            do {
                id = try driver.core.openStream(bidirectional: next.metadataObject.streamType == .bidirectional)
            } catch {
                pendingOpens.removeFirst()
                next.groupFailed(.quic(.invalid("\(error)")))
                continue
            }
            guard let id else { return }  // Blocked by MAX_STREAMS; resumes on streamCreditAvailable.
            pendingOpens.removeFirst()
            streams[id] = next
            next.didOpen(streamID: id)
        }
        driver.afterInput()
    }

    /// Drops a finished stream from the routing table.
    func forget(streamID: Int64) {
        streams[streamID] = nil
    }
}

extension NWConnectionGroup {
    public typealias EstablishmentReport = QUICEstablishmentReport
    public typealias DataTransferReport = QUICDataTransferReport

    /// A data-transfer report in progress (Network.framework's `PendingDataTransferReport`).
    // @unchecked Sendable: `core` and `mark` are only touched on `eventLoop`.
    public final class PendingDataTransferReport: @unchecked Sendable {
        private let eventLoop: any EventLoop
        private var core: QUICConnectionCore?
        private var mark: QUICDataTransferMark?

        init(eventLoop: any EventLoop) {
            self.eventLoop = eventLoop
        }

        func begin(on core: QUICConnectionCore?) {
            self.core = core
            mark = core?.startDataTransferReport(now: QUICConnectionDriver.now())
        }

        /// Ends the interval and delivers its figures on `queue`; nil if the tunnel never started.
        public func collect(queue: DispatchQueue, completion: @escaping @Sendable (QUICDataTransferReport?) -> Void) {
            eventLoop.execute {
                let report = self.finish()
                queue.async { completion(report) }
            }
        }

        /// Ends the interval and returns its figures.
        public func collect() async -> QUICDataTransferReport? {
            (try? await eventLoop.submit { self.finish() }.get()) ?? nil
        }

        private func finish() -> QUICDataTransferReport? {
            defer { core = nil }
            guard let core, let mark else { return nil }
            return core.collectDataTransferReport(mark, now: QUICConnectionDriver.now())
        }
    }
}
