#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// One QUIC tunnel (connection) as a Network.framework connection group: streams are
/// `NWConnection`s inside it, and datagrams (RFC 9221) go to and from the group itself.
///
/// Configure handlers, then `start(queue:)`. Handlers and completions run on that queue. The
/// states are Apple's five: a client group goes from `.setup` to `.ready` when the handshake
/// completes, and a group a listener delivers becomes `.ready` when it starts.
// @unchecked Sendable: handler properties sit behind `lock`, the state and queue in `observable`;
// everything under "Loop-confined" is read and written only on `eventLoop`. Being confined, and
// with no access to one of them spanning a call that can reach it again, those skip Swift's
// run-time exclusivity check, as the connection core's do: each echo stream paid nine.
public final class NWConnectionGroup: @unchecked Sendable {
    /// A tunnel's life cycle, matching Apple's `NWConnectionGroup.State` (there is no
    /// `.preparing`): `.setup`, then `.ready` once the handshake completes; `.failed` and
    /// `.cancelled` are final.
    public enum State: Equatable, Sendable {
        /// Not started yet or, for a client, started and still connecting and handshaking.
        case setup
        /// Kept for Apple's exhaustive switches; not entered here: failures to connect are
        /// `.failed`.
        case waiting(NWError)
        /// The handshake has completed (RFC 9001 §4.1.1): streams open and datagrams flow. A group
        /// a listener delivers is `.ready` as soon as it is started.
        case ready
        /// Final: the tunnel could not be made (DNS, unreachable, refused, no answer, bad options)
        /// or it closed with an error: a transport error, the peer's non-zero application error, an
        /// idle or handshake timeout, or a stateless reset (RFC 9000 §10).
        case failed(NWError)
        /// Final: this side closed the tunnel (`cancel()`, with any code), or the peer closed it
        /// with application error 0 (RFC 9000 §10.2).
        case cancelled
    }

    /// What the group connects to, matching Apple's `descriptor`: an `NWMultiplexGroup`; for a
    /// group a listener delivers, one holding the client's address.
    public let descriptor: any NWGroupDescriptor
    /// The parameters the group was made with, matching Apple's `parameters`. Its QUIC options are
    /// copied when the group is made; `allowFastOpen` is read when it is used.
    public let parameters: NWParameters
    let eventLoop: QUICEventLoop
    let logger: Logger
    let options: NWProtocolQUIC.Options

    /// Runs Swift tasks on the tunnel's own thread (SE-0417 task executors); not in Apple's API.
    ///
    /// A task started with it as its preference (`group.addTask(executorPreference:)`,
    /// `withTaskExecutorPreference`) resumes on the thread that reads the tunnel's packets: an
    /// awaited `receive` or `send` that completes wakes it there, with no hand-over to the global
    /// pool and back. Such a task must not block, as the tunnel's I/O waits meanwhile.
    public let taskExecutor: any TaskExecutor

    /// True for a tunnel a listener delivered: its handshake completed before anyone saw it.
    private let isAccepted: Bool

    private let observable = ObservableState<State>(.setup) { state in
        switch state {
        case .failed, .cancelled: return true
        default: return false
        }
    }
    private let lock = NIOLock()
    private var _newConnectionHandler: (@Sendable (NWConnection) -> Void)?
    private var _receiveHandler: (@Sendable (Message, Data?, Bool) -> Void)?
    private var receiveLimit = Int.max
    private var streamQueues: [InboundStreamQueue] = []
    private var datagramContinuations: [AsyncStream<Data>.Continuation] = []
    /// The tunnel's path as the core reports it; an `NWPath` (whose interface takes a
    /// `getifaddrs`) is made from it only when someone asks or listens.
    private var _currentPath: QUICPath?
    /// Whether `_currentPath` works (a client's; a server's always does).
    private var pathIsViable = true
    /// Observers of `pathUpdates`, by a number of their own so each can leave when it stops.
    private var pathContinuations: [Int: AsyncStream<NWPath>.Continuation] = [:]
    private var nextPathObserver = 0
    /// Set when the tunnel has ended: later observers of `inboundStreams`, `datagrams` and
    /// `pathUpdates` finish at once, and handlers set later are not kept.
    private var observersEnded = false
    /// What the tunnel's QUIC metadata reports, shared with its streams' metadata.
    let tunnelMetadata: NWProtocolQUIC.TunnelMetadata
    /// The tunnel's metadata object, the one `metadata(definition:)` returns.
    let metadataObject: NWProtocolQUIC.Metadata

    // MARK: Loop-confined
    @exclusivity(unchecked) var driver: QUICConnectionDriver?
    @exclusivity(unchecked) var streams = QUICStreamTable<NWConnection>()
    /// Streams waiting for the peer's stream limit, oldest first; a ring buffer, so thousands
    /// queued at once open in linear time.
    @exclusivity(unchecked) private var pendingOpens = CircularBuffer<NWConnection>()
    /// Streams and datagrams that arrived before `start(queue:)`, delivered once it runs.
    @exclusivity(unchecked) private var heldInbound: [NWConnection] = []
    @exclusivity(unchecked) private var heldDatagrams: [Data] = []
    @exclusivity(unchecked) private var started = false
    @exclusivity(unchecked) private var connector: QUICClientConnector?
    /// The DNS-SD resolution of a `.service` endpoint under way (NWConnectionGroup+Service.swift).
    @exclusivity(unchecked) var serviceResolution: DNSServiceResolution?
    /// Runs once, on the loop, when the handshake completes (the listener delivers server groups then).
    @exclusivity(unchecked) var onEstablished: (() -> Void)?
    /// Runs once the group is finished and can be forgotten.
    @exclusivity(unchecked) var onFinished: (() -> Void)?
    /// Runs when an accepted tunnel closes before it was ever established (a failed handshake).
    @exclusivity(unchecked) var onHandshakeFailure: ((QUICCloseReason) -> Void)?

    /// A client tunnel to the descriptor's endpoint, which must be an `NWMultiplexGroup` (the
    /// group fails at start otherwise).
    public init(with descriptor: any NWGroupDescriptor, using parameters: NWParameters) {
        self.descriptor = descriptor
        self.parameters = parameters
        (tunnelMetadata, metadataObject) = Self.makeMetadata()
        self.isAccepted = false
        self.options = parameters.quicOptions.copy()
        self.eventLoop = QUICClientLoops.next()
        self.taskExecutor = EventLoopTaskExecutor(eventLoop: eventLoop)
        self.logger = Logger(label: "quic.group")
    }

    /// A server tunnel the listener accepted; already running on `driver`'s loop.
    init(accepted driver: QUICConnectionDriver, parameters: NWParameters, options: NWProtocolQUIC.Options, logger: Logger) {
        let remote = driver.core.path.remote
        self.descriptor = NWMultiplexGroup(to: NWEndpoint(address: remote))
        self.parameters = parameters
        (tunnelMetadata, metadataObject) = Self.makeMetadata()
        self.isAccepted = true
        self.options = options
        self.eventLoop = driver.eventLoop
        self.taskExecutor = EventLoopTaskExecutor(eventLoop: eventLoop)
        self.logger = logger
        self.driver = driver
        attachMetadata()
        // The driver keeps the group alive until the connection is over; finishing breaks the cycle.
        driver.eventHandler = { events in self.handle(events) }
        driver.onFinished = { [previous = driver.onFinished] finished in
            previous?(finished)
            self.connectionEnded()
        }
    }

    private static func makeMetadata() -> (NWProtocolQUIC.TunnelMetadata, NWProtocolQUIC.Metadata) {
        let tunnel = NWProtocolQUIC.TunnelMetadata()
        return (tunnel, NWProtocolQUIC.Metadata(tunnel: tunnel, streamType: nil))
    }

    // MARK: Public API

    /// The current state, matching Apple's `state`.
    public var state: State { observable.current }

    /// Called on the start queue with each new state, matching Apple's `stateUpdateHandler`. It is
    /// released once `.failed` or `.cancelled` has been delivered, and not kept if set after that.
    @preconcurrency public var stateUpdateHandler: (@Sendable (State) -> Void)? {
        get { observable.updateHandler }
        set { observable.updateHandler = newValue }
    }

    /// Called with each stream the peer opens; set it before `start(queue:)`. Not kept if set
    /// after the tunnel ended: nothing would call it, and it often captures the group.
    @preconcurrency public var newConnectionHandler: (@Sendable (NWConnection) -> Void)? {
        get { lock.withLock { _newConnectionHandler } }
        set { lock.withLock { _newConnectionHandler = observersEnded ? nil : newValue } }
    }

    /// The tunnel's remote endpoint.
    public var remoteEndpoint: NWEndpoint? { descriptor.members.first }

    /// The queue given to `start(queue:)`, where handlers and completions run.
    public var queue: DispatchQueue? { observable.startQueue }

    /// Connects (clients) or begins delivering events (accepted groups).
    public func start(queue: DispatchQueue) {
        observable.setQueue(queue)
        if let problem = options.tls.configurationProblem {
            setState(.failed(.quic(.invalid(problem))))
            return
        }
        guard descriptor is NWMultiplexGroup else {
            setState(.failed(.quic(.invalid("QUIC groups need an NWMultiplexGroup descriptor, not \(type(of: descriptor))"))))
            return
        }
        // A tunnel the listener delivered has completed its handshake: it is ready at once, so
        // streams can be opened right after `start`. If it closed meanwhile, the loop says so next.
        if isAccepted, state == .setup { setState(.ready) }
        eventLoop.execute {
            guard !self.started else { return }
            self.started = true
            if self.driver == nil {
                self.connect()
            } else {
                // An accepted group is established already (`.ready` since `start`): replay the held streams.
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

    /// Closes the tunnel with CONNECTION_CLOSE. With the metadata's `applicationError` set, the
    /// close carries its code and reason (RFC 9000 §10.2); otherwise code 0.
    public func cancel() {
        let error = metadataObject.applicationErrorIfSet ?? 0
        cancel(applicationError: error.code, reason: error.reason ?? "")
    }

    /// Closes the tunnel with this application error code and reason phrase. Our addition;
    /// Apple apps set `applicationError` in the metadata and call `cancel()`.
    public func cancel(applicationError: UInt64, reason: String = "") {
        eventLoop.execute {
            guard let driver = self.driver else {
                // Not connected yet: no attempt starts after this, so nothing else will end the group.
                self.connector?.stop()
                self.connector = nil
                self.serviceResolution?.cancel()
                self.serviceResolution = nil
                self.setState(.cancelled)
                self.failAllStreams(.posix(.ECANCELED))
                self.connectionEnded()
                return
            }
            driver.perform { core in core.close(applicationErrorCode: applicationError, reason: reason, now: QUICConnectionDriver.now()) }
        }
    }

    /// Sends one QUIC datagram (RFC 9221); both sides must have enabled `isDatagram`. The
    /// payload must fit `usableDatagramFrameSize` of the metadata. `endpoint` and `message` are
    /// accepted as in Network.framework; a tunnel has one peer, so they change nothing.
    @preconcurrency public func send(
        content: Data?,
        to endpoint: NWEndpoint? = nil,
        message: Message = .default,
        completion: @escaping (NWError?) -> Void
    ) {
        // Not `@Sendable`, as in Network.framework: it runs once, on the group's queue.
        nonisolated(unsafe) let completion = completion
        sendDatagram(content, delivery: .queue) { completion($0) }
    }

    private func sendDatagram(_ content: Data?, delivery: CompletionDelivery, completion: @escaping @Sendable (NWError?) -> Void) {
        let bytes = Array(content ?? Data())
        eventLoop.execute {
            let complete = { (error: NWError?) in self.observable.deliver(delivery) { completion(error) } }
            guard let driver = self.driver else {
                complete(.posix(.ENOTCONN))
                return
            }
            do {
                try driver.core.sendDatagram(bytes)
                driver.runPass()
                complete(nil)
            } catch {
                complete(.quic(.invalid("\(error)")))
            }
        }
    }

    /// Receives datagrams (RFC 9221) sent on the group; each is complete (`isComplete` is true).
    /// A datagram larger than `maximumMessageSize` is dropped when `rejectOversizedMessages`,
    /// and delivered otherwise. Nil stops delivery.
    @preconcurrency public func setReceiveHandler(
        maximumMessageSize: Int = .max,
        rejectOversizedMessages: Bool = true,
        handler: (@Sendable (Message, Data?, Bool) -> Void)?
    ) {
        lock.withLock {
            // After the end nothing would call it; kept, a handler that captures the group would
            // keep it in memory for good (a task that set it late, on a busy machine).
            _receiveHandler = observersEnded ? nil : handler
            receiveLimit = rejectOversizedMessages ? max(0, maximumMessageSize) : .max
        }
    }

    /// QUIC metadata of the tunnel: negotiated figures, keep-alive, stream limits, and the
    /// `applicationError` that `cancel()` closes with.
    public func metadata(definition: NWProtocolDefinition) -> NWProtocolMetadata? {
        definition == NWProtocolQUIC.definition ? metadataObject : nil
    }

    /// Opens a new outbound stream on the tunnel, as `NWConnection(from:to:using:)`; nil while
    /// that returns nil (before the group is ready, unless `allowFastOpen`). `connectionTo` must be nil or the tunnel's endpoint: a tunnel has one peer.
    public func extract(connectionTo endpoint: NWEndpoint? = nil, using options: NWProtocolOptions? = nil) -> NWConnection? {
        NWConnection(from: self, to: endpoint, using: options)
    }

    /// Hands a stream back to the group. A QUIC stream never leaves its tunnel, so this only
    /// confirms it: true for a stream of this tunnel that has not ended, false otherwise.
    public func reinsert(connection: NWConnection) -> Bool {
        guard connection.group === self, !connection.ownsGroup else { return false }
        switch connection.state {
        case .failed, .cancelled: return false
        default: return true
        }
    }

    /// The qlog trace this tunnel writes, when a qlog directory is set.
    public var qlogFilePath: String? {
        get async { try? await eventLoop.submit { self.driver?.core.qlogPath }.get() }
    }

    /// The negotiated ALPN protocol, once `.ready` (also in the metadata's `negotiatedALPN`).
    public var negotiatedALPN: String? {
        get async { try? await eventLoop.submit { self.driver?.core.negotiatedALPN }.get() }
    }

    /// Whether `NWConnection(from:)` may open a stream now: once the group is ready, or, with
    /// `allowFastOpen`, before that too, so the stream's first bytes can go out in 0-RTT (as
    /// Network.framework's fast open sends what was queued before `start`).
    var canOpenStreams: Bool {
        switch state {
        case .ready: return true
        case .setup, .waiting: return parameters.allowFastOpen
        case .failed, .cancelled: return false
        }
    }

    /// How the tunnel was established (duration, handshake RTT, ALPN, cipher, version), as
    /// Network.framework's establishment report; nil before the handshake completes.
    @preconcurrency public func requestEstablishmentReport(queue: DispatchQueue, completion: @escaping @Sendable (QUICEstablishmentReport?) -> Void) {
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
    /// handshake is confirmed and the next keys exist, and returns once the update is complete
    /// (the peer acknowledged a packet under the new keys), throwing `QUICKeyUpdateError` when
    /// the tunnel ends first. Throws while the previous update is still unacknowledged (and, on
    /// a server tunnel, before the handshake is confirmed).
    public func initiateKeyUpdate() async throws {
        try await eventLoop.flatSubmit { () -> EventLoopFuture<Void> in
            if let connector = self.connector {
                return connector.initiateKeyUpdate().flatMapErrorThrowing { throw NWError.reported($0) }
            }
            guard let driver = self.driver else { return self.eventLoop.makeFailedFuture(NWError.posix(.ENOTCONN)) }
            do {
                try driver.core.initiateKeyUpdate(now: QUICConnectionDriver.now())
            } catch {
                return self.eventLoop.makeFailedFuture(error)
            }
            driver.runPass()
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
            return connector.migrate().flatMapErrorThrowing { throw NWError.reported($0) }
        }.get()
        return NWEndpoint(address: path.local)
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
    public var inboundStreams: InboundStreams {
        let queue = InboundStreamQueue()
        // Asked for after the tunnel ended (a task that started late, on a busy machine): the
        // sequence ends at once, instead of keeping its reader, and so the tunnel, forever.
        let ended = lock.withLock { () -> Bool in
            if !observersEnded { streamQueues.append(queue) }
            return observersEnded
        }
        if ended { queue.finish() }
        return InboundStreams(queue: queue)
    }

    /// Datagrams received on the tunnel.
    public var datagrams: AsyncStream<Data> { datagrams(buffering: .unbounded) }

    /// Datagrams received on the tunnel, holding what nobody has read yet as `policy` says.
    func datagrams(buffering policy: AsyncStream<Data>.Continuation.BufferingPolicy) -> AsyncStream<Data> {
        AsyncStream(bufferingPolicy: policy) { continuation in
            let ended = lock.withLock { () -> Bool in
                if !observersEnded { datagramContinuations.append(continuation) }
                return observersEnded
            }
            if ended { continuation.finish() }
        }
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
            sendDatagram(datagram, delivery: .loop) { error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume() }
            }
        }
    }

    // MARK: Loop-confined machinery

    /// Runs `body` on the user's queue (or a global one before `start`).
    func callback(_ body: @escaping @Sendable () -> Void) { observable.callback(body) }

    func setState(_ new: State) { observable.update(new) }

    /// The options lowered for the core, with `allowFastOpen` and the IP and UDP options from
    /// the parameters.
    private var clientConfiguration: QUICConfiguration {
        var configuration = options.configuration
        configuration.attemptsEarlyData = parameters.allowFastOpen
        configuration.socket = parameters.socketOptions
        return configuration
    }

    private func connect() {
        guard let endpoint = descriptor.members.first else { return }
        if let problem = parameters.interfaceProblem {
            setState(.failed(problem))
            return
        }
        if case .service(let name, let type, let domain, let interface) = endpoint {
            resolveService(name: name, type: type, domain: domain, interface: interface)
            return
        }
        switch endpoint.quicHostPort {
        case .success(let target): connect(host: target.host, port: target.port, addresses: nil)
        case .failure(let error): setState(.failed(error))
        }
    }

    /// Connects to `host` and `port`: to `addresses` when they are known already (a resolved
    /// `.service`), else to what the host name resolves to.
    func connect(host: String, port: UInt16, addresses: [SocketAddress]?) {
        if options.tls.certificateChainFile != nil && options.tls.localIdentity == nil {
            logger.warning("clients present a certificate from sec_protocol_options_set_local_identity only: certificateChainFile is ignored")
        }
        let connector = QUICClientConnector(
            host: host,
            port: port,
            configuration: clientConfiguration,
            verification: options.tls.certificateVerification,
            serverName: options.tls.serverName,
            eventLoop: eventLoop,
            logger: logger
        )
        connector.localIdentity = options.tls.localIdentity
        // The connector (through its driver) keeps the group alive until the connection is over.
        connector.onAttempt = { driver in
            self.driver = driver
            if driver != nil { self.attachMetadata() }
            // With 0-RTT, streams queued before start go out with the first flight.
            self.openPendingStreams()
        }
        connector.resolvedAddresses = addresses
        connector.onEvents = { events in self.handle(events) }
        connector.onViability = { isViable in self.publishViability(isViable) }
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
                applyMetadataSettings()
                refreshMetadata()
                if let driver { publishPath(driver.core.path) }
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
                if driver?.core.isLocallyInitiated(id) == false { refreshMetadata() }  // The peer's streams free credit.
            case .streamCreditAvailable:
                refreshMetadata()
                openPendingStreams()
            case .datagramReceived(let bytes):
                if started { deliverDatagram(Data(bytes)) } else { heldDatagrams.append(Data(bytes)) }
            case .closed(let reason):
                if let driver, !driver.core.isHandshakeCompleted { onHandshakeFailure?(reason) }
                finish(reason)
            case .pathValidated(let path, succeeded: true):
                publishPath(path)
            case .connectionIDIssued, .connectionIDRetired, .handshakeConfirmed, .pathValidated, .earlyDataRejected:
                break
            }
        }
    }

    private func finish(_ reason: QUICCloseReason) {
        if case .peerApplicationClose(let code, let phrase) = reason {
            tunnelMetadata.applicationError = .init(code: code, reason: phrase.isEmpty ? nil : phrase)
        }
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

    /// Ends the `inboundStreams`, `datagrams` and `pathUpdates` sequences.
    private func finishObservers() {
        let (streamObservers, datagramObservers, pathObservers) = lock.withLock {
            defer {
                streamQueues.removeAll()
                datagramContinuations.removeAll()
                pathContinuations.removeAll()
                observersEnded = true
            }
            return (streamQueues, datagramContinuations, Array(pathContinuations.values))
        }
        for queue in streamObservers { queue.finish() }
        for continuation in datagramObservers { continuation.finish() }
        for continuation in pathObservers { continuation.finish() }
    }

    // MARK: Path

    /// The path the tunnel uses now; nil until its handshake completes.
    public var currentPath: NWPath? { lock.withLock { _currentPath.map { NWPath($0, isSatisfied: pathIsViable) } } }

    /// The tunnel's path, if it has one yet, then each new one: after the handshake and after
    /// each validated migration (RFC 9000 §9). Ends with the tunnel. An addition: Apple reports
    /// paths on connections (`NWConnection.pathUpdateHandler`), which use this.
    public var pathUpdates: AsyncStream<NWPath> {
        AsyncStream { continuation in
            let observer = lock.withLock { () -> Int? in
                if let path = _currentPath { continuation.yield(NWPath(path, isSatisfied: pathIsViable)) }
                guard !observersEnded else { return nil }
                nextPathObserver += 1
                pathContinuations[nextPathObserver] = continuation
                return nextPathObserver
            }
            guard let observer else { return continuation.finish() }
            continuation.onTermination = { [weak self] _ in
                guard let self else { return }
                self.lock.withLock { self.pathContinuations[observer] = nil }
            }
        }
    }

    /// The client's path stopped working, or works again (`QUICClientConnector.onViability`).
    private func publishViability(_ isViable: Bool) {
        guard let path = lock.withLock({ _currentPath }) else { return }
        publishPath(path, isViable: isViable)
    }

    private func publishPath(_ path: QUICPath, isViable: Bool = true) {
        let observers = lock.withLock { () -> [AsyncStream<NWPath>.Continuation] in
            guard _currentPath != path || pathIsViable != isViable else { return [] }
            _currentPath = path
            pathIsViable = isViable
            return Array(pathContinuations.values)
        }
        guard !observers.isEmpty else { return }
        let published = NWPath(path, isSatisfied: isViable)
        for continuation in observers { continuation.yield(published) }
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
            observersEnded = true  // Handlers set from now on are not kept either.
        }
        tunnelMetadata.setApplier(nil)
        finishObservers()
        onFinished?()
    }

    func failAllStreams(_ error: NWError) {
        for connection in pendingOpens { connection.groupFailed(error) }
        pendingOpens.removeAll()
        for (_, connection) in streams.entries { connection.groupFailed(error) }
    }

    private func deliverInbound(_ connection: NWConnection) {
        let (handler, queues) = lock.withLock { (_newConnectionHandler, streamQueues) }
        if let handler { callback { handler(connection) } }
        for queue in queues { queue.yield(connection) }
        if handler == nil && queues.isEmpty {
            logger.debug("no newConnectionHandler; stream \(connection.streamIDForLogs) waits unread")
        }
    }

    private func deliverDatagram(_ data: Data) {
        let (handler, limit, continuations) = lock.withLock { (_receiveHandler, receiveLimit, datagramContinuations) }
        if let handler {
            if data.count <= limit {
                let message = Message(received: self, path: driver?.core.path)
                callback { handler(message, data, true) }
            } else {
                logger.debug("dropped a datagram of \(data.count) bytes, above maximumMessageSize \(limit)")
            }
        }
        for continuation in continuations { continuation.yield(data) }
    }

    // MARK: Metadata

    /// Lets changes made through metadata reach the tunnel's connection: the current driver's,
    /// read on the loop when the change is carried out. A weak reference to the driver would
    /// give it a side table, and every retain and release of it, several per pass, would take
    /// the runtime's slow path.
    private func attachMetadata() {
        tunnelMetadata.setApplier { [weak self] change in
            guard let self else { return }
            self.eventLoop.execute {
                guard let driver = self.driver, driver.core.closeReason == nil else { return }
                switch change {
                case .keepAlive(let behavior):
                    guard driver.core.isHandshakeCompleted else { return }  // Applied at the handshake.
                    driver.core.setKeepAlive(milliseconds: Self.keepAliveMilliseconds(behavior))
                case .localMaxStreams(let bidirectional, let limit):
                    driver.core.raisePeerStreamLimit(bidirectional: bidirectional, to: limit)
                }
                driver.runPass()
                self.refreshMetadata()
            }
        }
    }

    /// Carries out what was set through metadata before the handshake completed.
    private func applyMetadataSettings() {
        guard let core = driver?.core else { return }
        let behavior = tunnelMetadata.keepAlive
        if behavior != .off { core.setKeepAlive(milliseconds: Self.keepAliveMilliseconds(behavior)) }
        let requested = tunnelMetadata.requestedLocalMaxStreamLimits
        core.raisePeerStreamLimit(bidirectional: true, to: requested.bidirectional)
        core.raisePeerStreamLimit(bidirectional: false, to: requested.unidirectional)
    }

    /// The keep-alive interval of `behavior` in milliseconds; nil leaves it to the connection.
    private static func keepAliveMilliseconds(_ behavior: NWProtocolQUIC.Metadata.KeepAliveBehavior) -> UInt64? {
        switch behavior {
        case .off: return 0
        case .seconds(let seconds): return UInt64(max(1, seconds)) * 1000
        case .on: return nil
        }
    }

    /// Copies the connection's figures into the metadata; on the loop.
    private func refreshMetadata() {
        guard let core = driver?.core else { return }
        // The TLS side is settled once the handshake completes: made once.
        let security = core.isHandshakeCompleted && tunnelMetadata.securityMetadata == nil
            ? sec_protocol_metadata_t(negotiated: core.negotiatedALPN, serverName: core.clientTLS?.verificationName)
            : nil
        tunnelMetadata.refresh(core.tunnelFigures, security: security)
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
        driver.runPass()
    }

    /// Drops a finished stream from the routing table.
    func forget(streamID: Int64) {
        streams[streamID] = nil
    }
}

extension NWConnectionGroup {
    /// Network.framework's establishment report; here `QUICEstablishmentReport`, QUIC's figures.
    public typealias EstablishmentReport = QUICEstablishmentReport
    /// Network.framework's data-transfer report; here `QUICDataTransferReport`, QUIC's figures.
    public typealias DataTransferReport = QUICDataTransferReport

    /// A data-transfer report in progress (Network.framework's `PendingDataTransferReport`).
    // @unchecked Sendable: `core` and `mark` are only touched on `eventLoop`.
    public final class PendingDataTransferReport: @unchecked Sendable {
        private let eventLoop: any EventLoop
        private let createdAt = QUICConnectionDriver.now()
        private var core: QUICConnectionCore?
        private var mark: QUICDataTransferMark?

        init(eventLoop: any EventLoop) {
            self.eventLoop = eventLoop
        }

        func begin(on core: QUICConnectionCore?) {
            self.core = core
            mark = core?.startDataTransferReport(now: QUICConnectionDriver.now())
        }

        /// Ends the interval and delivers its figures on `queue`, as Network.framework does: a
        /// report with no traffic when the tunnel had not started when the interval began.
        @preconcurrency public func collect(queue: DispatchQueue, completion: @escaping @Sendable (QUICDataTransferReport) -> Void) {
            let requested = QUICConnectionDriver.now()
            eventLoop.execute {
                let report = self.finish() ?? .empty(since: self.createdAt, until: requested)
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
