import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// Listens on a UDP port and hands over one `NWConnectionGroup` per QUIC tunnel, as
/// Network.framework's listener does for multiplexed protocols.
///
/// Groups arrive once their handshake has completed; failed handshakes are logged and never
/// delivered. Without a certificate in the options the listener generates a self-signed one for
/// `localhost`, `127.0.0.1` and `::1` (see `generatedCertificate`).
// @unchecked Sendable: state, handler and queue live in `observable`, the rest behind `lock`;
// each accepted group is touched only on its worker's event loop.
public final class NWListener: @unchecked Sendable {
    /// A listener's life cycle, matching Apple's `NWListener.State`: `.setup`, then `.ready` once
    /// its port is bound; `.failed` and `.cancelled` are final.
    public enum State: Equatable, Sendable {
        /// Not started, or started and still binding its port.
        case setup
        /// Kept for Apple's exhaustive switches; not entered here.
        case waiting(NWError)
        /// Bound and accepting tunnels; `port` holds the bound port.
        case ready
        /// Final: the options cannot serve QUIC (no ALPN protocol, TLS versions without 1.3), as
        /// `.quic`, or the port could not be bound, as its POSIX error (`EADDRNOTAVAIL` when
        /// unknown).
        case failed(NWError)
        /// Final: `cancel()` stopped the listener.
        case cancelled
    }

    /// The parameters the listener was made with, matching Apple's `parameters`. Its QUIC options
    /// are copied when the listener is made; `requiredLocalEndpoint` is read by `start(queue:)`
    /// too.
    public let parameters: NWParameters
    private let options: NWProtocolQUIC.Options
    private let requestedPort: NWEndpoint.Port
    private let logger: Logger
    /// The server's credentials; nil for plain TCP or UDP.
    private let credentials: TLSCredentials?
    /// The certificate the listener made because the options named none.
    public let generatedCertificate: SelfSignedCertificate?

    private let observable = ObservableState<State>(.setup) { state in
        switch state {
        case .failed, .cancelled: return true
        default: return false
        }
    }
    private let lock = NIOLock()
    private var _port: NWEndpoint.Port?
    private var _newConnectionGroupHandler: (@Sendable (NWConnectionGroup) -> Void)?
    private var groupContinuations: [AsyncStream<NWConnectionGroup>.Continuation] = []
    private var _maximumConcurrentTunnels = 1024
    private var _maximumTunnelsPerAddress: Int?
    private var _workers = 1
    private var workerGroup: QUICServerWorkerGroup?
    /// The socket of a TCP, TLS or UDP listener.
    private var socketListener: NWSocketListener?
    private var _newConnectionHandler: (@Sendable (NWConnection) -> Void)?
    private var cancelled = false
    private var _newConnectionLimit = NWListener.InfiniteConnectionLimit
    /// Tunnels established while `newConnectionLimit` was 0, oldest first, handed over as it
    /// rises. They count against `maximumConcurrentTunnels`, which bounds them.
    private var heldGroups: [NWConnectionGroup] = []
    /// Groups accepted and not yet finished, so that they live until they end.
    private var liveGroups: [ObjectIdentifier: NWConnectionGroup] = [:]

    /// Advertises `service` through Bonjour while the listener is ready (NWListener+Service.swift).
    let advertiser = NWListenerAdvertiser()

    /// The tunnels this listener accepted that are still in memory, open or closed.
    package let liveConnections = QUICLiveConnections()

    /// A listener for `parameters`' QUIC options on `port`, bound to `requiredLocalEndpoint`'s
    /// host or, without one, to every address of both IP versions, as Apple's listener is.
    ///
    /// - Throws: `TLSError` when the certificate or key cannot be loaded.
    public init(using parameters: NWParameters, on port: NWEndpoint.Port = .any) throws {
        self.parameters = parameters
        self.options = parameters.quicOptions.copy()
        self.logger = Logger(label: "quic.listener")
        if case .success(let bound)? = parameters.requiredLocalEndpoint?.quicHostPort, port == .any {
            self.requestedPort = NWEndpoint.Port(integerLiteral: bound.port)
        } else {
            self.requestedPort = port
        }
        let socketStack = parameters.socketStack
        let tls = socketStack?.tlsOptions?.tls ?? options.tls
        if socketStack != nil, socketStack?.tlsOptions == nil {
            credentials = nil
            generatedCertificate = nil
        } else if let identity = tls.localIdentity {
            credentials = try .server(certificateChainPEM: identity.certificateChainPEM, privateKeyPEM: identity.privateKeyPEM)
            generatedCertificate = nil
        } else if let chain = tls.certificateChainFile {
            guard let key = tls.privateKeyFile else { throw TLSError.missingFile(path: "(no private key given for \(chain))") }
            credentials = try .server(certificateChainFile: chain, privateKeyFile: key)
            generatedCertificate = nil
        } else {
            let identity = try tls.identity ?? SelfSignedCertificate.generate()
            credentials = try .server(certificateChainPEM: identity.certificatePEM, privateKeyPEM: identity.privateKeyPEM)
            generatedCertificate = tls.identity == nil ? identity : nil
            if tls.identity == nil {
                logger.info(
                    "generated a self-signed certificate",
                    metadata: ["sha256": "\(identity.sha256FingerprintHex)", "names": "localhost, 127.0.0.1, ::1"]
                )
            }
        }
    }

    /// The current state, matching Apple's `state`.
    public var state: State { observable.current }

    /// The bound port, once `.ready`.
    public var port: NWEndpoint.Port? { lock.withLock { _port } }

    /// Called on the start queue with each new state, matching Apple's `stateUpdateHandler`. It is
    /// released once `.failed` or `.cancelled` has been delivered, and not kept if set after that.
    @preconcurrency public var stateUpdateHandler: (@Sendable (State) -> Void)? {
        get { observable.updateHandler }
        set { observable.updateHandler = newValue }
    }

    /// Called once per established tunnel; call `start(queue:)` on the group to receive its streams.
    @preconcurrency public var newConnectionGroupHandler: (@Sendable (NWConnectionGroup) -> Void)? {
        get { lock.withLock { _newConnectionGroupHandler } }
        set { lock.withLock { _newConnectionGroupHandler = cancelled ? nil : newValue } }
    }

    /// Called once per accepted connection of a TCP or TLS listener, and once per remote address
    /// of a UDP listener, matching Apple's `newConnectionHandler`; start the connection to use
    /// it. QUIC listeners hand over tunnels through `newConnectionGroupHandler` instead.
    public var newConnectionHandler: (@Sendable (NWConnection) -> Void)? {
        get { lock.withLock { _newConnectionHandler } }
        set { lock.withLock { _newConnectionHandler = cancelled ? nil : newValue } }
    }

    /// The value of `newConnectionLimit` that turns it off, as Apple's
    /// `NWListener.InfiniteConnectionLimit` (`UINT32_MAX`, as `NW_LISTENER_INFINITE_CONNECTION_LIMIT`).
    public static let InfiniteConnectionLimit = Int(UInt32.max)

    /// How many more tunnels to hand over, as Apple's `newConnectionLimit`: each one delivered
    /// takes one off, unless it is `InfiniteConnectionLimit` (the default). At 0, tunnels that
    /// complete their handshake are held, in order, and handed over when the limit is raised;
    /// they still count against `maximumConcurrentTunnels`, so past that new clients get
    /// CONNECTION_REFUSED. A held tunnel whose client leaves is dropped. Settable at any time.
    public var newConnectionLimit: Int {
        get { lock.withLock { _newConnectionLimit } }
        set {
            let released = lock.withLock {
                _newConnectionLimit = max(0, newValue)
                return takeReleasedGroups()
            }
            for group in released { deliver(group) }
        }
    }

    /// How many established tunnels wait for `newConnectionLimit` to let them through (tests).
    package var heldConnectionCount: Int { lock.withLock { heldGroups.count } }

    /// Takes one off the limit for each tunnel it lets through; call with `lock` held.
    private func admitNewConnection() -> Bool {
        if _newConnectionLimit == Self.InfiniteConnectionLimit { return true }
        guard _newConnectionLimit > 0 else { return false }
        _newConnectionLimit -= 1
        return true
    }

    /// The held tunnels the limit now lets through, oldest first; call with `lock` held.
    private func takeReleasedGroups() -> [NWConnectionGroup] {
        var released: [NWConnectionGroup] = []
        while !heldGroups.isEmpty, admitNewConnection() { released.append(heldGroups.removeFirst()) }
        return released
    }

    /// The most tunnels served at once, handshakes included; past it new clients get
    /// CONNECTION_REFUSED. A tunnel that has closed stops counting at once, although it lingers,
    /// small, for its closing or draining period (RFC 9000 §10.2). Set before `start(queue:)`.
    public var maximumConcurrentTunnels: Int {
        get { lock.withLock { _maximumConcurrentTunnels } }
        set { lock.withLock { _maximumConcurrentTunnels = max(1, newValue) } }
    }

    /// The most tunnels one client may hold at once, counted by IPv4 address or IPv6 /64 over
    /// all workers; nil, the default, for no limit. Only clients whose address is proven (by a
    /// Retry token or a completed handshake) count, so spoofed Initials cannot use up another
    /// client's share. Past it a client gets CONNECTION_REFUSED (RFC 9000 §20.1). An addition;
    /// set before `start(queue:)`.
    public var maximumTunnelsPerAddress: Int? {
        get { lock.withLock { _maximumTunnelsPerAddress } }
        set { lock.withLock { _maximumTunnelsPerAddress = newValue.map { max(1, $0) } } }
    }

    /// How many workers serve the port, each with its own event loop and UDP socket; the kernel
    /// steers each packet to the worker that owns its tunnel, by connection ID (`SO_REUSEPORT`
    /// with a steering program). Our addition: Network.framework schedules listeners itself.
    /// One by default, at most 255; set before `start(queue:)`.
    public var workers: Int {
        get { lock.withLock { _workers } }
        set { lock.withLock { _workers = min(QUICServerWorkerGroup.maximumWorkerCount, max(1, newValue)) } }
    }

    /// State changes from now on; ends at `.failed` or `.cancelled`.
    public var states: AsyncStream<State> { observable.stream }

    /// Established tunnels, for `for await`; create it before `start(queue:)`.
    public var connectionGroups: AsyncStream<NWConnectionGroup> {
        AsyncStream { continuation in
            // Asked for after `cancel()`: the sequence ends at once rather than never.
            let ended = lock.withLock { () -> Bool in
                if !cancelled { groupContinuations.append(continuation) }
                return cancelled
            }
            if ended { continuation.finish() }
        }
    }

    /// Binds the port and starts accepting, matching Apple's `start(queue:)`; handlers run on
    /// `queue`. It binds `requiredLocalEndpoint`'s host, or else `::` with one dual-stack socket
    /// (`IPV6_V6ONLY` off), so IPv4 clients reach it too, as v4-mapped addresses; `0.0.0.0`
    /// or IPv6 alone when the IP options require one version. A host name binds each of its
    /// addresses, and `localhost` both `::1` and `127.0.0.1` (RFC 6761 §6.3). It binds with
    /// `workers` sockets per address, and is `.ready` once bound.
    public func start(queue: DispatchQueue) {
        observable.setQueue(queue)
        let socketOptions = parameters.socketOptions
        var boundHost = socketOptions.ipVersion == .v4 ? "0.0.0.0" : "::"
        switch parameters.requiredLocalEndpoint?.quicHostPort {
        case .success(let required)?: boundHost = required.host
        case .failure(let error)?:
            setState(.failed(error))
            return
        case nil: break
        }
        let host = boundHost
        if let problem = parameters.listeningProblem(host: host) {
            setState(.failed(problem))
            return
        }
        if let socketStack = parameters.socketStack { return startSocket(socketStack, host: host) }
        var configuration = QUICEndpointCore.Configuration(quic: options.configuration, credentials: credentials!)
        configuration.quic.socket = socketOptions
        configuration.requiresRetry = options.requiresAddressValidation
        configuration.retryThreshold = max(0, options.addressValidationThreshold)
        configuration.acceptsEarlyData = options.acceptsEarlyData
        configuration.maximumConnections = maximumConcurrentTunnels
        configuration.maximumConnectionsPerAddress = maximumTunnelsPerAddress
        configuration.liveConnections = liveConnections
        configuration.loadBalancer = options.loadBalancer
        if let problem = options.tls.configurationProblem {
            setState(.failed(.quic(.invalid(problem))))
            return
        }
        if configuration.quic.alpn.isEmpty {
            setState(.failed(.quic(.invalid("at least one ALPN protocol is required"))))
            return
        }
        let endpointConfiguration = configuration
        let workerCount = workers
        Task {
            do {
                let group = try await QUICServerWorkerGroup.bind(
                    host: host, port: Int(requestedPort.rawValue), configuration: endpointConfiguration,
                    workerCount: workerCount, logger: logger
                ) { [weak self] driver in self?.accept(driver) }
                let keep = lock.withLock {
                    guard !cancelled else { return false }
                    workerGroup = group
                    _port = NWEndpoint.Port(rawValue: group.port)
                    return true
                }
                guard keep else {
                    group.close()
                    return
                }
                setState(.ready)
                advertiser.start(port: group.port, deliver: { [observable] body in observable.callback(body) }) { [weak self] error in
                    self?.setState(.failed(error))
                    self?.cancel()
                }
            } catch {
                logger.error("cannot bind", metadata: ["host": "\(host)", "port": "\(requestedPort)", "error": "\(error)"])
                if let socketError = error as? QUICSocketError {
                    setState(.failed(.quic(.invalid(socketError.description))))
                } else {
                    let code = (error as? IOError).flatMap { POSIXErrorCode(rawValue: $0.errnoCode) } ?? .EADDRNOTAVAIL
                    setState(.failed(.posix(code)))
                }
            }
        }
    }

    /// Stops listening and closes every tunnel with NO_ERROR; unlike Network.framework, the
    /// tunnels share the listener's socket, so they end with it.
    public func cancel() {
        // As Network.framework does, a cancelled listener lets go of its handler.
        let (group, continuations, socket) = lock.withLock {
            defer {
                cancelled = true
                workerGroup = nil
                socketListener = nil
                _newConnectionHandler = nil
                groupContinuations.removeAll()
                heldGroups.removeAll()
                _newConnectionGroupHandler = nil
            }
            return (workerGroup, groupContinuations, socketListener)
        }
        group?.close()
        advertiser.stop()
        socket?.close()
        setState(.cancelled)
        for continuation in continuations { continuation.finish() }
    }

    /// How many tunnels are open now, handshakes included.
    public func connectionCount() async -> Int {
        guard let group = lock.withLock({ workerGroup }) else { return 0 }
        return await group.connectionCount()
    }

    /// Called on the accepting worker's loop.
    private func accept(_ driver: QUICConnectionDriver) {
        let group = NWConnectionGroup(accepted: driver, parameters: parameters, options: options, logger: logger)
        let key = ObjectIdentifier(group)
        lock.withLock { liveGroups[key] = group }
        let peer = driver.core.path.remote
        group.onFinished = { [weak self] in
            guard let self else { return }
            self.lock.withLock {
                self.liveGroups[key] = nil
                self.heldGroups.removeAll { ObjectIdentifier($0) == key }
            }
        }
        group.onHandshakeFailure = { [weak self] reason in
            self?.logger.notice("handshake with \(peer) failed: \(reason)")
        }
        group.onEstablished = { [weak self] in
            guard let self else { return }
            let admitted = self.lock.withLock {
                guard self.admitNewConnection() else {
                    self.heldGroups.append(group)
                    return false
                }
                return true
            }
            if admitted { self.deliver(group) }
        }
    }

    /// Hands an established tunnel to the handler and the `connectionGroups` sequences.
    private func deliver(_ group: NWConnectionGroup) {
        let (handler, continuations) = lock.withLock { (_newConnectionGroupHandler, groupContinuations) }
        if let handler { observable.callback { handler(group) } }
        for continuation in continuations { continuation.yield(group) }
        if handler == nil && continuations.isEmpty {
            logger.warning("no newConnectionGroupHandler: closing the tunnel")
            group.cancel(applicationError: 0, reason: "no handler")
        }
    }

    private func setState(_ new: State) { observable.update(new) }

    /// Binds a TCP, TLS or UDP listener's socket (`NWSocketListener`).
    private func startSocket(_ stack: NWSocketStack, host: String) {
        if let tls = stack.tlsOptions, let problem = TLSStreamSession.configurationProblem(tls.tls) {
            setState(.failed(.tls(TLSStreamSession.unsupportedVersionCode)))
            logger.error("cannot listen: \(problem)")
            return
        }
        let socket = NWSocketListener(stack: stack, parameters: parameters, credentials: credentials) { [weak self] connection in
            guard let self else { return }
            guard let handler = self.newConnectionHandler else {
                self.logger.warning("no newConnectionHandler: closing the connection")
                connection.forceCancel()
                return
            }
            self.observable.callback { handler(connection) }
        }
        let port = Int(requestedPort.rawValue)
        Task {
            do {
                let bound = try await socket.bind(host: host, port: port)
                let keep = lock.withLock {
                    guard !cancelled else { return false }
                    socketListener = socket
                    _port = NWEndpoint.Port(rawValue: UInt16(bound))
                    return true
                }
                guard keep else { return socket.close() }
                setState(.ready)
            } catch {
                logger.error("cannot bind", metadata: ["host": "\(host)", "port": "\(port)", "error": "\(error)"])
                setState(.failed(NWSocketConnection.nwError(error)))
            }
        }
    }
}
