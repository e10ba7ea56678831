import Dispatch
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// Listens on a UDP port and hands over one `NWConnectionGroup` per QUIC tunnel, as
/// Network.framework's listener does for multiplexed protocols.
///
/// Groups arrive once their handshake has completed; failed handshakes are logged and never
/// delivered. Without a certificate in the options the listener generates a self-signed one for
/// `localhost`, `127.0.0.1` and `::1` (see `generatedCertificate`).
// @unchecked Sendable: state, handler and queue live in `observable`, the rest behind `lock`; `endpoint` and the group
// registry are touched only on `eventLoop`.
public final class NWListener: @unchecked Sendable {
    public enum State: Equatable, Sendable {
        case setup
        case waiting(NWError)
        case ready
        case failed(NWError)
        case cancelled
    }

    public let parameters: NWParameters
    private let options: NWProtocolQUIC.Options
    private let requestedPort: NWEndpoint.Port
    private let eventLoop: any EventLoop
    private let logger: Logger
    private let credentials: TLSCredentials
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

    /// The tunnels this listener accepted that are still in memory, open or closed.
    package let liveConnections = QUICLiveConnections()

    // MARK: Loop-confined
    private var endpoint: QUICServerEndpoint?
    private var liveGroups: [ObjectIdentifier: NWConnectionGroup] = [:]

    /// A listener for `parameters`' QUIC options on `port`, bound to `requiredLocalEndpoint`'s
    /// host or, without one, to all addresses.
    ///
    /// - Throws: `TLSError` when the certificate or key cannot be loaded.
    public init(using parameters: NWParameters, on port: NWEndpoint.Port = .any) throws {
        self.parameters = parameters
        self.options = parameters.quicOptions.copy()
        self.eventLoop = MultiThreadedEventLoopGroup.singleton.next()
        self.logger = Logger(label: "quic.listener")
        if case .hostPort(_, let boundPort) = parameters.requiredLocalEndpoint, port == .any {
            self.requestedPort = boundPort
        } else {
            self.requestedPort = port
        }
        let tls = options.tls
        if let chain = tls.certificateChainFile {
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

    public var state: State { observable.current }

    /// The bound port, once `.ready`.
    public var port: NWEndpoint.Port? { lock.withLock { _port } }

    public var stateUpdateHandler: (@Sendable (State) -> Void)? {
        get { observable.updateHandler }
        set { observable.updateHandler = newValue }
    }

    /// Called once per established tunnel; call `start(queue:)` on the group to receive its streams.
    public var newConnectionGroupHandler: (@Sendable (NWConnectionGroup) -> Void)? {
        get { lock.withLock { _newConnectionGroupHandler } }
        set { lock.withLock { _newConnectionGroupHandler = newValue } }
    }

    /// The most tunnels served at once, handshakes included; past it new clients get
    /// CONNECTION_REFUSED. Set before `start(queue:)`.
    public var maximumConcurrentTunnels: Int {
        get { lock.withLock { _maximumConcurrentTunnels } }
        set { lock.withLock { _maximumConcurrentTunnels = max(1, newValue) } }
    }

    /// State changes from now on; ends at `.failed` or `.cancelled`.
    public var states: AsyncStream<State> { observable.stream }

    /// Established tunnels, for `for await`; create it before `start(queue:)`.
    public var connectionGroups: AsyncStream<NWConnectionGroup> {
        AsyncStream { continuation in lock.withLock { groupContinuations.append(continuation) } }
    }

    public func start(queue: DispatchQueue) {
        observable.setQueue(queue)
        var boundHost = "0.0.0.0"
        if case .hostPort(let requiredHost, _) = parameters.requiredLocalEndpoint { boundHost = requiredHost.stringValue }
        let host = boundHost
        var configuration = QUICEndpointCore.Configuration(quic: options.configuration, credentials: credentials)
        configuration.requiresRetry = options.requiresAddressValidation
        configuration.acceptsEarlyData = options.acceptsEarlyData
        configuration.maximumConnections = maximumConcurrentTunnels
        configuration.liveConnections = liveConnections
        if configuration.quic.alpn.isEmpty {
            setState(.failed(.quic(.invalid("at least one ALPN protocol is required"))))
            return
        }
        QUICDatagramSocket.bind(host: host, port: Int(requestedPort.rawValue), eventLoop: eventLoop, logger: logger)
            .whenComplete { result in
                switch result {
                case .success(let socket):
                    let endpoint = QUICServerEndpoint(socket: socket, configuration: configuration, logger: self.logger)
                    endpoint.onNewConnection = { [weak self] driver in self?.accept(driver) }
                    self.endpoint = endpoint
                    self.lock.withLock { self._port = NWEndpoint.Port(rawValue: socket.localAddress.port) }
                    self.setState(.ready)
                case .failure(let error):
                    self.logger.error("cannot bind", metadata: ["host": "\(host)", "port": "\(self.requestedPort)", "error": "\(error)"])
                    let code = (error as? IOError).flatMap { POSIXErrorCode(rawValue: $0.errnoCode) } ?? .EADDRNOTAVAIL
                    self.setState(.failed(.posix(code)))
                }
            }
    }

    /// Stops listening and closes every tunnel with NO_ERROR; unlike Network.framework, the
    /// tunnels share the listener's socket, so they end with it.
    public func cancel() {
        eventLoop.execute {
            self.endpoint?.close()
            self.endpoint = nil
            self.setState(.cancelled)
            // As Network.framework does, a cancelled listener lets go of its handler.
            let continuations = self.lock.withLock {
                defer {
                    self.groupContinuations.removeAll()
                    self._newConnectionGroupHandler = nil
                }
                return self.groupContinuations
            }
            for continuation in continuations { continuation.finish() }
        }
    }

    /// How many tunnels are open now, handshakes included.
    public func connectionCount() async -> Int {
        (try? await eventLoop.submit { self.endpoint?.connectionCount ?? 0 }.get()) ?? 0
    }

    private func accept(_ driver: QUICConnectionDriver) {
        let group = NWConnectionGroup(accepted: driver, parameters: parameters, options: options, logger: logger)
        let key = ObjectIdentifier(group)
        liveGroups[key] = group
        let peer = driver.core.path.remote
        group.onFinished = { [weak self] in self?.liveGroups[key] = nil }
        group.onHandshakeFailure = { [weak self] reason in
            self?.logger.notice("handshake with \(peer) failed: \(reason)")
        }
        group.onEstablished = { [weak self] in
            guard let self else { return }
            let (handler, continuations) = self.lock.withLock { (self._newConnectionGroupHandler, self.groupContinuations) }
            if let handler { self.observable.callback { handler(group) } }
            for continuation in continuations { continuation.yield(group) }
            if handler == nil && continuations.isEmpty {
                self.logger.warning("no newConnectionGroupHandler: closing the tunnel")
                group.cancel(applicationError: 0, reason: "no handler")
            }
        }
    }

    private func setState(_ new: State) { observable.update(new) }
}
