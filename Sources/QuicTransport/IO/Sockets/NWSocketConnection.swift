#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import CQuicShims
import Dispatch
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A TCP, TLS-over-TCP or UDP socket under an `NWConnection`, on a SwiftNIO channel.
///
/// Why NIO's channels and not `QUICEventLoop`: TCP needs connect with Happy Eyeballs
/// (RFC 8305), accept, half-close and write buffering, all of which NIO's bootstraps have on its
/// shared `MultiThreadedEventLoopGroup`; QUIC's loop is built for one UDP socket per worker.
/// These sockets carry control traffic beside a tunnel, not bulk QUIC, so they do not need it.
///
/// TCP reads are pulled (`autoRead` off): a read is asked for only while fewer than
/// `receiveHighWater` bytes wait for the app, so an app that does not read holds the sender
/// back through TCP's window, as QUIC's flow control does for streams. TLS records are
/// encrypted and decrypted here by the connection's one `TLSStreamSession`.
// @unchecked Sendable: everything but the immutable configuration is touched only on `loop`.
final class NWSocketConnection: NWConnectionTransport, @unchecked Sendable {
    typealias ContentContext = NWConnection.ContentContext

    private struct Receive {
        let minimum: Int
        let maximum: Int
        let completion: NWConnection.ReceiveCompletion
        let delivery: CompletionDelivery
        let token: UInt64?
    }

    private struct PendingSend {
        let content: Data?
        let fin: Bool
        let completion: NWConnection.SendCompletion
        let delivery: CompletionDelivery
        let token: UInt64?
    }

    /// Where the socket comes from.
    enum Origin {
        /// Connect to this endpoint on `start()`.
        case outbound(NWEndpoint)
        /// A TCP connection a listener accepted, with the server's TLS credentials if TLS.
        case accepted(any Channel, TLSCredentials?)
        /// A UDP peer of a listener's socket: datagrams to and from `remote` on the shared channel.
        case datagramPeer(any Channel, remote: SocketAddress, detach: @Sendable () -> Void)
    }

    static let receiveHighWater = 1 << 20

    let loop: any EventLoop
    private let observable: ObservableState<NWConnection.State>
    private let stack: NWSocketStack
    private let origin: Origin
    private let logger = Logger(label: "quic.socket-connection")

    // MARK: Loop-confined
    private var channel: (any Channel)?
    private var tls: TLSStreamSession?
    private var handshakeDone = false
    private var started = false
    private var ready = false
    private var isCancelled = false
    private var failure: NWError?
    private var pendingSends: [PendingSend] = []
    private var receives: [Receive] = []
    private var buffered: [UInt8] = []
    private var bufferedOffset = 0
    private var datagrams: [Data] = []
    private var finReceived = false
    private var readPending = false
    /// Async calls cancelled before their request reached the loop, and the highest token seen.
    private var abandonedTokens: Set<UInt64> = []
    private var highestToken: UInt64 = 0
    /// Bytes handed to the socket and not yet written, for the TCP metadata.
    private let unsentBytes = NIOLockedValueBox(0)
    private let waitingBytes = NIOLockedValueBox(0)
    private let securityMetadata = NIOLockedValueBox<sec_protocol_metadata_t?>(nil)

    init(origin: Origin, stack: NWSocketStack, observable: ObservableState<NWConnection.State>) {
        self.origin = origin
        self.stack = stack
        self.observable = observable
        switch origin {
        case .outbound: loop = MultiThreadedEventLoopGroup.singleton.next()
        case .accepted(let channel, _): loop = channel.eventLoop
        case .datagramPeer(let channel, _, _): loop = channel.eventLoop
        }
    }

    private var isDatagram: Bool {
        if case .udp = stack { return true }
        return false
    }

    // MARK: NWConnectionTransport

    func start() {
        loop.execute {
            guard !self.started, !self.isCancelled else { return }
            self.started = true
            if case .udp(let dtls) = self.stack, dtls != nil {
                self.fail(.tls(GNUTLS_E_UNIMPLEMENTED_FEATURE), reason: "DTLS is not offered on Linux; use QUIC or TLS over TCP")
                return
            }
            if let problem = self.stack.tlsOptions.flatMap({ TLSStreamSession.configurationProblem($0.tls) }) {
                self.fail(.tls(TLSStreamSession.unsupportedVersionCode), reason: problem)
                return
            }
            switch self.origin {
            case .outbound(let endpoint):
                self.observable.update(.preparing)
                self.connect(to: endpoint)
            case .accepted(let channel, let credentials):
                self.observable.update(.preparing)
                self.attach(channel, serverCredentials: credentials)
            case .datagramPeer(let channel, _, _):
                self.channel = channel
                self.becomeReady()
            }
        }
    }

    func send(
        content: Data?, contentContext: ContentContext, isComplete: Bool, completion: NWConnection.SendCompletion,
        delivery: CompletionDelivery, token: UInt64?
    ) {
        loop.execute {
            if let error = self.failure ?? (self.isCancelled ? NWError.posix(.ECANCELED) : nil) {
                self.complete(completion, error, delivery)
                return
            }
            if self.isAbandoned(token) {
                self.complete(completion, .posix(.ECANCELED), delivery)
                return
            }
            let send = PendingSend(
                content: content, fin: isComplete && contentContext.endsStream, completion: completion, delivery: delivery, token: token
            )
            if self.ready { self.write(send) } else { self.pendingSends.append(send) }
        }
    }

    func receive(minimum: Int, maximum: Int, completion: @escaping NWConnection.ReceiveCompletion, delivery: CompletionDelivery, token: UInt64?) {
        loop.execute {
            if self.isAbandoned(token) {
                self.deliver(delivery) { completion(nil, nil, false, .posix(.ECANCELED)) }
                return
            }
            self.receives.append(Receive(minimum: max(1, minimum), maximum: max(1, maximum), completion: completion, delivery: delivery, token: token))
            self.serviceReceives()
        }
    }

    func abandon(token: UInt64) {
        loop.execute {
            if let index = self.receives.firstIndex(where: { $0.token == token }) {
                let request = self.receives.remove(at: index)
                self.deliver(request.delivery) { request.completion(nil, nil, false, .posix(.ECANCELED)) }
            }
            if let index = self.pendingSends.firstIndex(where: { $0.token == token }) {
                let send = self.pendingSends.remove(at: index)
                self.complete(send.completion, .posix(.ECANCELED), send.delivery)
            }
            // Cancelled before its request arrived: refuse it when it does.
            if token > self.highestToken { self.abandonedTokens.insert(token) }
        }
    }

    /// Whether the async call `token` was cancelled before its request reached the loop.
    private func isAbandoned(_ token: UInt64?) -> Bool {
        guard let token else { return false }
        highestToken = max(highestToken, token)
        return abandonedTokens.remove(token) != nil
    }

    func cancel(force: Bool) {
        loop.execute {
            guard !self.isCancelled else { return }
            self.isCancelled = true
            self.closeSocket(force: force)
            self.failPending(.posix(.ECANCELED))
            self.observable.update(.cancelled)
        }
    }

    func metadata(definition: NWProtocolDefinition) -> NWProtocolMetadata? {
        switch (definition, stack) {
        case (NWProtocolTCP.definition, .tcp):
            return NWProtocolTCP.Metadata { [waitingBytes, unsentBytes] in
                (waitingBytes.withLockedValue { $0 }, unsentBytes.withLockedValue { $0 })
            }
        case (NWProtocolTLS.definition, .tcp(_, tls: .some)):
            return securityMetadata.withLockedValue { $0 }.map { NWProtocolTLS.Metadata(securityProtocolMetadata: $0) }
        case (NWProtocolUDP.definition, .udp):
            return NWProtocolUDP.Metadata()
        default:
            return nil
        }
    }

    // MARK: Connecting

    private func connect(to endpoint: NWEndpoint) {
        guard case .hostPort(let host, let port) = endpoint else { return }
        switch stack {
        case .tcp(let options, _):
            var bootstrap = ClientBootstrap(group: loop)
                .channelOption(.allowRemoteHalfClosure, value: true)
                .channelOption(.autoRead, value: false)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(StreamHandler(owner: self)) }
                }
            for option in options.socketOptions + [options.fastOpenOption(listening: false)].compactMap({ $0 }) {
                bootstrap = bootstrap.channelOption(ChannelOptions.Types.SocketOption(level: SocketOptionLevel(option.level), name: SocketOptionName(option.name)), value: Int(option.value))
            }
            if options.connectionTimeout > 0 { bootstrap = bootstrap.connectTimeout(.seconds(Int64(options.connectionTimeout))) }
            bootstrap.connect(host: host.stringValue, port: Int(port.rawValue)).hop(to: loop).whenComplete { result in
                switch result {
                case .success(let channel):
                    guard !self.isCancelled else {
                        channel.close(promise: nil)
                        return
                    }
                    self.attach(channel, serverCredentials: nil)
                case .failure(let error):
                    self.fail(Self.nwError(error), reason: "\(error)")
                }
            }
        case .udp:
            let name = host.stringValue
            // getaddrinfo blocks: it runs off the loop.
            DispatchQueue.global().async {
                let resolved = Result { try SocketAddress.makeAddressResolvingHost(name, port: Int(port.rawValue)) }
                self.loop.execute {
                    switch resolved {
                    case .success(let remote): self.connectDatagram(to: remote)
                    case .failure(let error): self.fail(.dns(EAI_NONAME), reason: "\(error)")
                    }
                }
            }
        }
    }

    private func connectDatagram(to remote: SocketAddress) {
        guard !isCancelled else { return }
        DatagramBootstrap(group: loop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(DatagramHandler(owner: self)) }
            }
            .connect(to: remote).hop(to: loop).whenComplete { result in
                switch result {
                case .success(let channel):
                    guard !self.isCancelled else {
                        channel.close(promise: nil)
                        return
                    }
                    self.channel = channel
                    self.becomeReady()
                case .failure(let error):
                    self.fail(Self.nwError(error), reason: "\(error)")
                }
            }
    }

    /// A connected TCP socket: TLS's handshake first when asked for, then ready.
    private func attach(_ channel: any Channel, serverCredentials: TLSCredentials?) {
        self.channel = channel
        guard case .tcp(_, let tlsOptions) = stack, let tlsOptions else {
            becomeReady()
            requestRead()
            return
        }
        do {
            if let serverCredentials {
                tls = try TLSStreamSession(serverWith: serverCredentials, options: tlsOptions.tls, alpn: tlsOptions.alpn)
            } else {
                guard case .outbound(.hostPort(let host, _)) = origin else { return }
                tls = try TLSStreamSession(clientWith: tlsOptions.tls, alpn: tlsOptions.alpn, host: host.stringValue)
            }
        } catch {
            fail(.tls((error as? TLSError)?.gnutlsCode ?? GNUTLS_E_INTERNAL_ERROR), reason: "\(error)")
            return
        }
        continueHandshake()
        requestRead()
    }

    private func continueHandshake() {
        guard let tls, !handshakeDone else { return }
        let progress = tls.handshake()
        flushTLS()
        switch progress {
        case .needsBytes: break
        case .failed(let code, let reason): fail(.tls(code), reason: "TLS handshake failed: \(reason)")
        case .done:
            handshakeDone = true
            securityMetadata.withLockedValue {
                $0 = sec_protocol_metadata_t(negotiated: tls.negotiatedALPN, serverName: tls.serverName, version: tls.negotiatedVersion)
            }
            becomeReady()
        }
    }

    private func becomeReady() {
        guard !isCancelled, failure == nil else { return }
        ready = true
        observable.update(.ready)
        let sends = pendingSends
        pendingSends.removeAll()
        for send in sends { write(send) }
        serviceReceives()
    }

    // MARK: Sending

    private func write(_ send: PendingSend) {
        guard let channel else {
            complete(send.completion, .posix(.ENOTCONN), send.delivery)
            return
        }
        let content = send.content ?? Data()
        let promise = loop.makePromise(of: Void.self)
        let count = content.count
        unsentBytes.withLockedValue { $0 += count }
        promise.futureResult.hop(to: loop).whenComplete { result in
            self.unsentBytes.withLockedValue { $0 -= count }
            switch result {
            case .success: self.complete(send.completion, nil, send.delivery)
            case .failure(let error): self.complete(send.completion, Self.nwError(error), send.delivery)
            }
        }
        switch origin {
        case .datagramPeer(_, let remote, _):
            channel.writeAndFlush(AddressedEnvelope(remoteAddress: remote, data: ByteBuffer(bytes: content)), promise: promise)
            return
        case .outbound where isDatagram:
            channel.writeAndFlush(ByteBuffer(bytes: content), promise: promise)
            return
        default:
            break
        }
        if let tls {
            do {
                try content.withUnsafeBytes { try tls.encrypt($0) }
            } catch {
                promise.fail(error)
                return
            }
            if send.fin { tls.bye() }
            channel.writeAndFlush(ByteBuffer(bytes: tls.takeOutgoing()), promise: promise)
        } else {
            channel.writeAndFlush(ByteBuffer(bytes: content), promise: promise)
        }
        if send.fin { channel.close(mode: .output, promise: nil) }
    }

    private func flushTLS() {
        guard let tls, let channel else { return }
        let bytes = tls.takeOutgoing()
        if !bytes.isEmpty { channel.writeAndFlush(ByteBuffer(bytes: bytes), promise: nil) }
    }

    // MARK: Receiving (called by the handlers, on the loop)

    fileprivate func received(_ buffer: ByteBuffer) {
        if let tls {
            buffer.withUnsafeReadableBytes { tls.feed($0) }
            if !handshakeDone {
                continueHandshake()
                guard handshakeDone else { return }
            }
            do {
                let ended = try tls.decrypt(into: &buffered)
                flushTLS()
                if ended { finReceived = true }
            } catch {
                fail(.tls((error as? TLSError)?.gnutlsCode ?? GNUTLS_E_INTERNAL_ERROR), reason: "\(error)")
                return
            }
        } else {
            buffered.append(contentsOf: buffer.readableBytesView)
        }
        waitingBytes.withLockedValue { $0 = buffered.count - bufferedOffset }
    }

    fileprivate func readComplete() {
        readPending = false
        serviceReceives()
        requestRead()
    }

    fileprivate func receivedDatagram(_ buffer: ByteBuffer) {
        datagrams.append(Data(buffer.readableBytesView))
        serviceReceives()
    }

    /// An accepted socket may be started before it is active: its first read waits for this.
    fileprivate func becameActive() {
        if started { requestRead() }
    }

    fileprivate func inputClosed() {
        finReceived = true
        serviceReceives()
    }

    fileprivate func channelFailed(_ error: any Error) {
        if isDatagram {
            // A UDP socket's ICMP errors (ECONNREFUSED) do not end it, as on Apple platforms.
            logger.debug("UDP socket error: \(error)")
            return
        }
        fail(Self.nwError(error), reason: "\(error)")
    }

    fileprivate func channelClosed() {
        guard !isCancelled, failure == nil, !isDatagram else { return }
        // Closed under us without an error: the peer's FIN, with our side already finished.
        finReceived = true
        serviceReceives()
    }

    /// Asks the socket for more bytes while the app's backlog is small (TCP only).
    private func requestRead() {
        // A receive that needs more than the high-water mark (receiveMessage, a large minimum)
        // reads on until it is satisfied.
        let wanted = max(Self.receiveHighWater, receives.first?.minimum ?? 0)
        guard !isDatagram, !readPending, !finReceived, let channel, channel.isActive, buffered.count - bufferedOffset < wanted
        else { return }
        readPending = true
        channel.read()
    }

    private var receivedContext: ContentContext {
        ContentContext(identifier: "default", metadata: metadataObjects)
    }

    private var metadataObjects: [NWProtocolMetadata] {
        switch stack {
        case .udp: return [NWProtocolUDP.Metadata()]
        case .tcp(_, let tls):
            let tcp = metadata(definition: NWProtocolTCP.definition).map { [$0] } ?? []
            guard tls != nil, let security = metadata(definition: NWProtocolTLS.definition) else { return tcp }
            return [security] + tcp
        }
    }

    private func serviceReceives() {
        guard started, ready || failure != nil else { return }
        while let request = receives.first {
            if let failure {
                receives.removeFirst()
                deliver(request.delivery) { request.completion(nil, nil, false, failure) }
                continue
            }
            if isDatagram {
                guard !datagrams.isEmpty else { break }
                receives.removeFirst()
                let datagram = datagrams.removeFirst()
                let context = ContentContext(identifier: "default", isFinal: false, metadata: metadataObjects)
                deliver(request.delivery) { request.completion(datagram, context, true, nil) }
                continue
            }
            let available = buffered.count - bufferedOffset
            let wholeMessage = request.minimum == Int.max
            guard finReceived || (!wholeMessage && available >= request.minimum) else { break }
            receives.removeFirst()
            let count = wholeMessage ? available : min(available, request.maximum)
            let data = count == 0 ? nil : Data(buffered[bufferedOffset..<(bufferedOffset + count)])
            bufferedOffset += count
            if bufferedOffset == buffered.count {
                buffered.removeAll(keepingCapacity: true)
                bufferedOffset = 0
            }
            waitingBytes.withLockedValue { $0 = buffered.count - bufferedOffset }
            let ended = finReceived && bufferedOffset == buffered.count
            let context = ended ? ContentContext(identifier: "final", isFinal: true, metadata: metadataObjects) : receivedContext
            deliver(request.delivery) { request.completion(data, context, ended, nil) }
        }
        requestRead()
    }

    // MARK: Ending

    private func fail(_ error: NWError, reason: String) {
        guard failure == nil, !isCancelled else { return }
        logger.debug("socket connection failed: \(reason)")
        failure = error
        closeSocket(force: false)
        failPending(error)
        observable.update(.failed(error))
    }

    private func closeSocket(force: Bool) {
        switch origin {
        case .datagramPeer(_, _, let detach):
            detach()
            return
        default:
            break
        }
        guard let channel else { return }
        if let tls, handshakeDone, !force {
            tls.bye()
            flushTLS()
        }
        channel.close(promise: nil)
    }

    private func failPending(_ error: NWError) {
        let waiting = receives
        receives.removeAll()
        for request in waiting { deliver(request.delivery) { request.completion(nil, nil, false, error) } }
        let sends = pendingSends
        pendingSends.removeAll()
        for send in sends { complete(send.completion, error, send.delivery) }
    }

    private func deliver(_ delivery: CompletionDelivery, _ body: @escaping @Sendable () -> Void) {
        observable.deliver(delivery, body)
    }

    private func complete(_ completion: NWConnection.SendCompletion, _ error: NWError?, _ delivery: CompletionDelivery) {
        if case .contentProcessed(let handler) = completion { deliver(delivery) { handler(error) } }
    }

    /// A NIO or socket error as Network.framework reports it: the POSIX code where there is one.
    static func nwError(_ error: any Error) -> NWError {
        if let error = error as? NWError { return error }
        if let error = error as? IOError, let code = POSIXErrorCode(rawValue: error.errnoCode) { return .posix(code) }
        if let error = error as? NIOConnectionError {
            if error.connectionErrors.isEmpty, error.dnsAError != nil || error.dnsAAAAError != nil { return .dns(EAI_NONAME) }
            if let first = error.connectionErrors.first { return nwError(first.error) }
            return .posix(.ECONNREFUSED)
        }
        if let error = error as? ChannelError {
            switch error {
            case .connectTimeout: return .posix(.ETIMEDOUT)
            case .ioOnClosedChannel, .alreadyClosed, .outputClosed: return .posix(.ENOTCONN)
            case .eof: return .posix(.ECONNRESET)
            default: return .posix(.EIO)
            }
        }
        if let error = error as? TLSError { return .tls(error.gnutlsCode ?? GNUTLS_E_INTERNAL_ERROR) }
        return .posix(.EIO)
    }

    // MARK: Handlers

    /// Hands a TCP channel's events to its connection.
    final class StreamHandler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        private let owner: NWSocketConnection

        init(owner: NWSocketConnection) { self.owner = owner }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) { owner.received(unwrapInboundIn(data)) }
        func channelReadComplete(context: ChannelHandlerContext) { owner.readComplete() }
        func channelActive(context: ChannelHandlerContext) {
            owner.becameActive()
            context.fireChannelActive()
        }
        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if case ChannelEvent.inputClosed = event { owner.inputClosed() }
        }
        func errorCaught(context: ChannelHandlerContext, error: any Error) { owner.channelFailed(error) }
        func channelInactive(context: ChannelHandlerContext) { owner.channelClosed() }
    }

    /// Hands a connected UDP channel's datagrams to its connection.
    final class DatagramHandler: ChannelInboundHandler {
        typealias InboundIn = AddressedEnvelope<ByteBuffer>
        private let owner: NWSocketConnection

        init(owner: NWSocketConnection) { self.owner = owner }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) { owner.receivedDatagram(unwrapInboundIn(data).data) }
        func errorCaught(context: ChannelHandlerContext, error: any Error) { owner.channelFailed(error) }
    }

    /// A listener's datagram for this peer (on the loop).
    func deliverDatagram(_ buffer: ByteBuffer) { receivedDatagram(buffer) }
}
