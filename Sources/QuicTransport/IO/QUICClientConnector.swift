import Logging
import NIOCore
import NIOPosix

/// Connects a client: resolves the host, then tries each address in turn (IPv6 and IPv4, in the
/// resolver's order) as Network.framework does, moving on when one refuses (ICMP port
/// unreachable on the connected socket) or, with more to try, stays silent for a second.
///
/// Loop-confined. Every attempt gets its own socket, core and driver; `onAttempt` tells the
/// owner which driver is current, and `onEvents` carries that driver's events.
// @unchecked Sendable: all state is touched only on `eventLoop`; the futures it waits on
// complete there too.
package final class QUICClientConnector: @unchecked Sendable {
    /// Why no attempt could start or all of them failed before the handshake.
    package enum Failure: Error, CustomStringConvertible {
        case resolution(host: String, code: Int32)
        case refused
        case unreachable
        case silent
        case setup(String)

        package var description: String {
            switch self {
            case .resolution(let host, let code): return QUICHostResolver.ResolutionError(host: host, code: code).description
            case .refused: return "connection refused (no QUIC server at that address)"
            case .unreachable: return "network unreachable"
            case .silent: return "no answer from any address"
            case .setup(let reason): return reason
            }
        }
    }

    let host: String
    let port: UInt16
    let configuration: QUICConfiguration
    let verification: CertificateVerification
    let serverName: String?
    let makeCodec: (() throws -> any QUICApplicationCodec)?
    /// The owner's count of connections in memory, which every attempt's core joins.
    let liveConnections: QUICLiveConnections?
    let eventLoop: QUICEventLoop
    let logger: Logger

    /// The current attempt's driver, or nil between attempts.
    package var onAttempt: ((QUICConnectionDriver?) -> Void)?
    package var onEvents: (([QUICConnectionEvent]) -> Void)?
    /// The addresses to try, when the owner has resolved them already (DNS-SD); nil to resolve `host`.
    package var resolvedAddresses: [SocketAddress]?
    package var onFailure: ((Failure) -> Void)?
    package var onFinished: (() -> Void)?
    /// Whether the connection's path works, each time that changes after the handshake: false
    /// when the kernel reports the route to the server gone (ENETUNREACH, EHOSTUNREACH and the
    /// like, from a send or from ICMP), true again when the server is heard from.
    package var onViability: ((Bool) -> Void)?
    /// The certificate and key to present when the server asks for one (RFC 8446 §4.4.2); set
    /// before the first attempt.
    package var localIdentity: SecIdentity?

    private var driver: QUICConnectionDriver?
    private var isConnecting = true
    /// The start, the resolution and the attempts so far, for the establishment report.
    private var attempts = QUICEstablishmentAttempts()
    private var attemptsMade = 0
    /// Whether the server confirmed the handshake (RFC 9001 §4.1.2), which migration waits for.
    private var isHandshakeConfirmed = false
    private var confirmationWaiters: [EventLoopPromise<Void>] = []
    /// The migration under way: its new socket and who waits for the outcome.
    private var migration: (socket: QUICUDPSocket, promise: EventLoopPromise<QUICPath>)?

    package init(
        host: String,
        port: UInt16,
        configuration: QUICConfiguration,
        verification: CertificateVerification,
        serverName: String?,
        makeCodec: (() throws -> any QUICApplicationCodec)? = nil,
        liveConnections: QUICLiveConnections? = nil,
        eventLoop: QUICEventLoop,
        logger: Logger
    ) {
        self.liveConnections = liveConnections
        self.host = host
        self.port = port
        self.configuration = configuration
        self.verification = verification
        self.serverName = serverName
        self.makeCodec = makeCodec
        self.eventLoop = eventLoop
        self.logger = logger
    }

    package func start() {
        let host = self.host
        let port = self.port
        let resolved = resolvedAddresses
        attempts.startedAt = QUICConnectionDriver.now()
        NIOThreadPool.singleton.runIfActive(eventLoop: eventLoop) {
            let queried = QUICConnectionDriver.now()
            return (try resolved ?? QUICHostResolver.resolve(host: host, port: port), QUICConnectionDriver.now() &- queried)
        }.whenComplete { result in
            switch result {
            case .success(let (addresses, duration)):
                let allowed = addresses.filter { self.configuration.socket.allows(isIPv6: $0.protocol == .inet6) }
                if QUICSocketAddress(ip: host, port: 0) == nil {
                    self.attempts.resolution = .init(duration: duration, addresses: allowed.map { QUICSocketAddress(nio: $0) })
                }
                guard !allowed.isEmpty else {
                    let version = self.configuration.socket.ipVersion == .v4 ? "IPv4" : "IPv6"
                    self.fail(.setup("\(host) has no \(version) address, and the IP version is restricted to \(version)"))
                    return
                }
                self.attempt(allowed[...], lastFailure: nil)
            case .failure(let error):
                self.logger.debug("resolution failed", metadata: ["error": "\(error)"])
                let code = (error as? QUICHostResolver.ResolutionError)?.code ?? -2
                self.fail(.resolution(host: host, code: code))
            }
        }
    }

    /// Stops trying further addresses (the owner was cancelled).
    package func stop() {
        isConnecting = false
    }

    private func fail(_ failure: Failure) {
        guard isConnecting else { return }
        isConnecting = false
        onFailure?(failure)
    }

    private func attempt(_ addresses: ArraySlice<SocketAddress>, lastFailure: Failure?) {
        guard isConnecting else { return }
        guard let address = addresses.first else {
            fail(lastFailure ?? .refused)
            return
        }
        let remaining = addresses.dropFirst()
        eventLoop.assertInEventLoop()
        attemptsMade += 1
        let socket: QUICUDPSocket
        do {
            socket = try QUICUDPSocket.connect(to: QUICSocketAddress(nio: address), options: configuration.socket, loop: eventLoop, logger: logger)
        } catch {
            logger.debug("cannot open socket", metadata: ["address": "\(address)", "error": "\(error)"])
            attempt(remaining, lastFailure: .unreachable)
            return
        }
        // Network.framework's prohibited interfaces: the kernel chose the route when the
        // socket connected, and its local address says which interface that is.
        if let interface = configuration.socket.prohibitedInterface(holding: socket.localAddress) {
            socket.close()
            let reason = "the path to \(address) leaves by \(interface), a prohibited interface"
            logger.debug("path refused", metadata: ["reason": "\(reason)"])
            attempt(remaining, lastFailure: .setup(reason))
            return
        }
        do {
            try start(on: socket, remote: address, fallback: remaining)
        } catch {
            socket.close()
            fail(.setup("\(error)"))
        }
    }

    private func start(on socket: QUICUDPSocket, remote: SocketAddress, fallback: ArraySlice<SocketAddress>) throws {
        let isIPLiteral = QUICSocketAddress(ip: host, port: 0) != nil
        // RFC 6066 §3: SNI carries host names only; an IP address (given as the host or as the
        // name to verify) is checked against the certificate but never sent (GnuTLS servers
        // answer an IPv6 literal with illegal_parameter).
        let sendableName = serverName.flatMap { QUICSocketAddress(ip: $0, port: 0) == nil ? $0 : nil }
        var tls = QUICClientTLS(
            credentials: try TLSCredentials.client(
                verification: verification, certificateChainPEM: localIdentity?.certificateChainPEM,
                privateKeyPEM: localIdentity?.privateKeyPEM),
            verification: verification,
            serverName: sendableName ?? (isIPLiteral || serverName != nil ? nil : host),
            verificationName: serverName ?? host
        )
        tls.ticketStore = configuration.sessionTicketStore
        tls.ticketKey = "\(serverName ?? host):\(port)"
        guard !configuration.alpn.isEmpty else { throw Failure.setup("at least one ALPN protocol is required") }
        var configuration = self.configuration
        configuration.ngtcp2DebugLogging = logger.logLevel <= .trace
        configuration.maxUDPPayloadSize = configuration.socket.maximumUDPPayload(
            configuration.maxUDPPayloadSize, isIPv6: remote.protocol == .inet6
        )
        let core = try QUICConnectionCore(
            clientWith: configuration,
            tls: tls,
            path: QUICPath(local: socket.localAddress, remote: QUICSocketAddress(nio: remote)),
            now: QUICConnectionDriver.now(),
            logger: logger
        )
        core.liveConnections = liveConnections
        attempts.previousAttemptCount = attemptsMade - 1
        core.handshake.attempts = attempts
        core.applicationCodec = try makeCodec?()
        core.makeApplicationCodec = makeCodec
        try core.startCodecForEarlyData()
        let driver = QUICConnectionDriver(core: core, socket: socket, eventLoop: eventLoop)
        self.driver = driver
        var heardFromPeer = false
        var isViable = true
        let path = core.path
        socket.onDatagram = { datagram, _, ecn in
            heardFromPeer = true
            if !isViable {
                isViable = true
                self.onViability?(true)
            }
            driver.receive(datagram, path: path, ecn: ecn)
        }
        socket.onReadComplete = { driver.runPass() }
        socket.onError = { error in
            if core.isHandshakeCompleted {
                guard isViable, let code = (error as? IOError)?.errnoCode, Self.routeErrors.contains(code) else { return }
                self.logger.debug("path not viable", metadata: ["error": "\(error)"])
                isViable = false
                self.onViability?(false)
                return
            }
            // ICMP port unreachable before any answer: this address has no server; try the next.
            guard !heardFromPeer, self.driver === driver else { return }
            self.logger.debug("address refused", metadata: ["address": "\(remote)", "error": "\(error)"])
            self.abandon(driver, socket: socket)
            self.attempt(fallback, lastFailure: .refused)
        }
        // The driver keeps the connector (and its owner) alive until the connection is over.
        driver.eventHandler = { events in
            for event in events {
                switch event {
                case .handshakeCompleted: self.isConnecting = false
                case .handshakeConfirmed: self.didConfirmHandshake()
                case .pathValidated(let path, let succeeded): self.finishMigration(on: driver, path: path, succeeded: succeeded)
                default: break
                }
            }
            self.onEvents?(events)
        }
        driver.onFinished = { finished in
            for socket in finished.sockets { socket.detachAndClose() }
            self.migration?.promise.fail(QUICConnectorError.notConnected)
            self.migration = nil
            self.didConfirmHandshake(failing: QUICConnectorError.notConnected)
            self.isConnecting = false
            self.onFinished?()
        }
        if !fallback.isEmpty {
            // An address that stays silent for a second gives way to the next one.
            eventLoop.assumeIsolated().scheduleTask(in: .seconds(1)) {
                guard !heardFromPeer, self.driver === driver, self.isConnecting else { return }
                self.abandon(driver, socket: socket)
                self.attempt(fallback, lastFailure: .silent)
            }
        }
        onAttempt?(driver)
        driver.runPass()
    }

    /// The errors that say the route to the server is gone (for now): what the socket reports
    /// of its sends, but a refusal, which says the server's port is closed.
    private static let routeErrors = QUICUDPSocket.reportedSendErrors.subtracting([ECONNREFUSED])

    // MARK: Migration (RFC 9000 §9.2)

    /// Moves the connection to a new UDP socket on a new ephemeral port, as a client whose
    /// network changed would: waits until the handshake is confirmed, opens the socket, has
    /// ngtcp2 validate the new path under a fresh connection ID, and then sends only from the new
    /// socket and closes the old one. Succeeds with the new path; fails, leaving the connection
    /// on its old path, when the server disabled migration, has no spare connection ID for us,
    /// or does not answer PATH_CHALLENGE in time.
    package func migrate() -> EventLoopFuture<QUICPath> {
        eventLoop.assertInEventLoop()
        guard let driver, driver.core.closeReason == nil else {
            return eventLoop.makeFailedFuture(QUICConnectorError.notConnected)
        }
        guard migration == nil else { return eventLoop.makeFailedFuture(QUICConnectorError.alreadyMigrating) }
        let promise = eventLoop.makePromise(of: QUICPath.self)
        whenHandshakeConfirmed().whenComplete { result in
            do {
                try result.get()
                let socket = try QUICUDPSocket.connect(
                    to: driver.core.path.remote, options: self.configuration.socket, loop: self.eventLoop, logger: self.logger
                )
                self.startMigration(of: driver, to: socket, promise: promise)
            } catch {
                promise.fail(error)
            }
        }
        return promise.futureResult
    }

    private func startMigration(of driver: QUICConnectionDriver, to socket: QUICUDPSocket, promise: EventLoopPromise<QUICPath>) {
        guard self.driver === driver, migration == nil, driver.core.closeReason == nil else {
            socket.close()
            promise.fail(QUICConnectorError.notConnected)
            return
        }
        do {
            try driver.core.migrate(to: socket.localAddress, now: QUICConnectionDriver.now())
        } catch {
            socket.close()
            promise.fail(error)
            return
        }
        let path = QUICPath(local: socket.localAddress, remote: driver.core.path.remote)
        socket.onDatagram = { datagram, _, ecn in driver.receive(datagram, path: path, ecn: ecn) }
        socket.onReadComplete = { driver.runPass() }
        migration = (socket, promise)
        driver.addSocket(socket)
        logger.debug("migrating", metadata: ["from": "\(driver.core.path.local)", "to": "\(socket.localAddress)"])
        driver.runPass()
    }

    /// A path validation ended. Success on the new socket retires the old ones; failure (or a
    /// validation of some other path) leaves the connection where it was.
    private func finishMigration(on driver: QUICConnectionDriver, path: QUICPath, succeeded: Bool) {
        guard let migration, path.local == migration.socket.localAddress else { return }
        self.migration = nil
        if succeeded {
            for old in driver.sockets where old !== migration.socket {
                driver.removeSocket(old)
                old.detachAndClose()
            }
            migration.promise.succeed(path)
        } else {
            driver.removeSocket(migration.socket)
            migration.socket.detachAndClose()
            migration.promise.fail(QUICMigrationError.pathValidationFailed)
        }
    }

    // MARK: Key update (RFC 9001 §6)

    /// Starts a 1-RTT key update as soon as ngtcp2 allows it, and succeeds once it is complete:
    /// the peer acknowledged a packet sent with the new keys (RFC 9001 §6.1), which is when
    /// ngtcp2 derives the next generation.
    ///
    /// ngtcp2 allows the update once the handshake is confirmed and the next keys are derived;
    /// until then it is tried again, for two seconds at most. A packet under the new keys must
    /// then be acknowledged, so a PING goes out every 10 ms while the connection is otherwise
    /// quiet (as after its last response): without one, a transfer that ended just before the
    /// update left it unacknowledged, and the update never completed. Fails when the connection
    /// ends first, or after `timeout`.
    package func initiateKeyUpdate(timeout: TimeAmount = .seconds(5)) -> EventLoopFuture<Void> {
        eventLoop.assertInEventLoop()
        let deadline = NIODeadline.now() + timeout
        return whenHandshakeConfirmed()
            .flatMap { self.tryKeyUpdate(until: min(deadline, NIODeadline.now() + .seconds(2))) }
            .flatMap { updatesBefore in
                let keepAlive = self.driver?.core.keepAliveMilliseconds ?? 0
                self.driver?.core.setKeepAlive(milliseconds: 10)
                self.driver?.runPass()
                let completed = self.waitForKeyUpdate(after: updatesBefore, until: deadline)
                completed.whenComplete { _ in
                    guard let driver = self.driver, driver.core.closeReason == nil else { return }
                    driver.core.setKeepAlive(milliseconds: keepAlive)
                    driver.runPass()
                }
                return completed
            }
    }

    /// Starts the update; its result is the count of completed updates before it.
    private func tryKeyUpdate(until deadline: NIODeadline) -> EventLoopFuture<UInt64> {
        guard let driver, driver.core.closeReason == nil else { return eventLoop.makeFailedFuture(QUICConnectorError.notConnected) }
        do {
            let before = driver.core.counters.keyUpdates
            try driver.core.initiateKeyUpdate(now: QUICConnectionDriver.now())
            driver.runPass()
            return eventLoop.makeSucceededFuture(before)
        } catch {
            guard NIODeadline.now() < deadline else { return eventLoop.makeFailedFuture(error) }
            return eventLoop.scheduleTask(in: .milliseconds(10)) {}.futureResult.flatMap { self.tryKeyUpdate(until: deadline) }
        }
    }

    /// Succeeds once more than `count` key updates have completed.
    private func waitForKeyUpdate(after count: UInt64, until deadline: NIODeadline) -> EventLoopFuture<Void> {
        guard let driver, driver.core.closeReason == nil else {
            return eventLoop.makeFailedFuture(QUICKeyUpdateError.connectionEnded)
        }
        if driver.core.counters.keyUpdates > count { return eventLoop.makeSucceededVoidFuture() }
        guard NIODeadline.now() < deadline else {
            return eventLoop.makeFailedFuture(QUICKeyUpdateError.didNotComplete("the peer acknowledged no packet under the new keys in time"))
        }
        return eventLoop.scheduleTask(in: .milliseconds(10)) {}.futureResult.flatMap { self.waitForKeyUpdate(after: count, until: deadline) }
    }

    private func whenHandshakeConfirmed() -> EventLoopFuture<Void> {
        if isHandshakeConfirmed { return eventLoop.makeSucceededVoidFuture() }
        let promise = eventLoop.makePromise(of: Void.self)
        confirmationWaiters.append(promise)
        return promise.futureResult
    }

    private func didConfirmHandshake(failing error: (any Error)? = nil) {
        if error == nil { isHandshakeConfirmed = true }
        let waiters = confirmationWaiters
        confirmationWaiters = []
        for waiter in waiters {
            if let error { waiter.fail(error) } else { waiter.succeed() }
        }
    }

    private func abandon(_ driver: QUICConnectionDriver, socket: QUICUDPSocket) {
        driver.abandon()
        socket.detachAndClose()
        self.driver = nil
        onAttempt?(nil)
    }
}
