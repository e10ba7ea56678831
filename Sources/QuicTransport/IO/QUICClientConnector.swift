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
    let eventLoop: any EventLoop
    let logger: Logger

    /// The current attempt's driver, or nil between attempts.
    package var onAttempt: ((QUICConnectionDriver?) -> Void)?
    package var onEvents: (([QUICConnectionEvent]) -> Void)?
    package var onFailure: ((Failure) -> Void)?
    package var onFinished: (() -> Void)?

    private var driver: QUICConnectionDriver?
    private var isConnecting = true

    package init(
        host: String,
        port: UInt16,
        configuration: QUICConfiguration,
        verification: CertificateVerification,
        serverName: String?,
        makeCodec: (() throws -> any QUICApplicationCodec)? = nil,
        eventLoop: any EventLoop,
        logger: Logger
    ) {
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
        NIOThreadPool.singleton.runIfActive(eventLoop: eventLoop) {
            try QUICHostResolver.resolve(host: host, port: port)
        }.whenComplete { result in
            switch result {
            case .success(let addresses): self.attempt(addresses[...], lastFailure: nil)
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
        QUICDatagramSocket.connect(to: address, eventLoop: eventLoop, logger: logger).whenComplete { result in
            switch result {
            case .failure(let error):
                self.logger.debug("cannot open socket", metadata: ["address": "\(address)", "error": "\(error)"])
                self.attempt(remaining, lastFailure: .unreachable)
            case .success(let socket):
                do {
                    try self.start(on: socket, remote: address, fallback: remaining)
                } catch {
                    socket.close()
                    self.fail(.setup("\(error)"))
                }
            }
        }
    }

    private func start(on socket: QUICDatagramSocket, remote: SocketAddress, fallback: ArraySlice<SocketAddress>) throws {
        let isIPLiteral = QUICSocketAddress(ip: host, port: 0) != nil
        // RFC 6066 §3: SNI carries host names only; an IP address (given as the host or as the
        // name to verify) is checked against the certificate but never sent (GnuTLS servers
        // answer an IPv6 literal with illegal_parameter).
        let sendableName = serverName.flatMap { QUICSocketAddress(ip: $0, port: 0) == nil ? $0 : nil }
        var tls = QUICClientTLS(
            credentials: try TLSCredentials.client(verification: verification),
            verification: verification,
            serverName: sendableName ?? (isIPLiteral || serverName != nil ? nil : host),
            verificationName: serverName ?? host
        )
        tls.ticketStore = configuration.sessionTicketStore
        tls.ticketKey = "\(serverName ?? host):\(port)"
        guard !configuration.alpn.isEmpty else { throw Failure.setup("at least one ALPN protocol is required") }
        var configuration = self.configuration
        configuration.ngtcp2DebugLogging = logger.logLevel <= .trace
        let core = try QUICConnectionCore(
            clientWith: configuration,
            tls: tls,
            path: QUICPath(local: socket.localAddress, remote: QUICSocketAddress(nio: remote)),
            now: QUICConnectionDriver.now(),
            logger: logger
        )
        core.applicationCodec = try makeCodec?()
        let driver = QUICConnectionDriver(core: core, socket: socket, eventLoop: eventLoop)
        self.driver = driver
        var heardFromPeer = false
        let path = core.path
        socket.onDatagram = { envelope in
            heardFromPeer = true
            driver.receive(envelope.data, path: path, ecn: envelope.ecnCodepoint)
        }
        socket.onReadComplete = { driver.afterInput() }
        socket.onError = { error in
            // ICMP port unreachable before any answer: this address has no server; try the next.
            guard !heardFromPeer, !core.isHandshakeCompleted, self.driver === driver else { return }
            self.logger.debug("address refused", metadata: ["address": "\(remote)", "error": "\(error)"])
            self.abandon(driver, socket: socket)
            self.attempt(fallback, lastFailure: .refused)
        }
        // The driver keeps the connector (and its owner) alive until the connection is over.
        driver.eventHandler = { events in
            if events.contains(.handshakeCompleted) { self.isConnecting = false }
            self.onEvents?(events)
        }
        driver.onFinished = { finished in
            socket.onDatagram = nil
            socket.onError = nil
            socket.onReadComplete = nil
            socket.close()
            finished.eventHandler = nil
            finished.onFinished = nil
            self.isConnecting = false
            self.onFinished?()
        }
        if !fallback.isEmpty {
            // An address that stays silent for a second gives way to the next one.
            eventLoop.scheduleTask(in: .seconds(1)) {
                guard !heardFromPeer, self.driver === driver, self.isConnecting else { return }
                self.abandon(driver, socket: socket)
                self.attempt(fallback, lastFailure: .silent)
            }
        }
        onAttempt?(driver)
        driver.afterInput()
    }

    private func abandon(_ driver: QUICConnectionDriver, socket: QUICDatagramSocket) {
        driver.eventHandler = nil
        driver.onFinished = nil
        socket.onDatagram = nil
        socket.onError = nil
        socket.close()
        self.driver = nil
        onAttempt?(nil)
    }
}
