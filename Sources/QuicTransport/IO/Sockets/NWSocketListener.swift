#if canImport(Glibc)
import Glibc
#endif
import CQuicShims
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// The TCP, TLS-over-TCP or UDP socket under an `NWListener` made from such parameters, on
/// SwiftNIO's shared event loops (see `NWSocketConnection` for why).
///
/// TCP hands over one `NWConnection` per accepted connection; UDP, as Network.framework does,
/// one per remote address, which then receives that address's datagrams and sends to it from
/// the listener's port.
// @unchecked Sendable: `channel` sits behind `lock`; the rest is immutable.
final class NWSocketListener: @unchecked Sendable {
    private let stack: NWSocketStack
    private let parameters: NWParameters
    private let credentials: TLSCredentials?
    private let deliver: @Sendable (NWConnection) -> Void
    private let lock = NIOLock()
    private var channel: (any Channel)?

    init(stack: NWSocketStack, parameters: NWParameters, credentials: TLSCredentials?, deliver: @escaping @Sendable (NWConnection) -> Void) {
        self.stack = stack
        self.parameters = parameters
        self.credentials = credentials
        self.deliver = deliver
    }

    /// Binds `host:port` and returns the bound port.
    func bind(host: String, port: Int) async throws -> Int {
        let channel: any Channel
        switch stack {
        case .tcp(let options, _):
            var bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelOption(.allowRemoteHalfClosure, value: true)
                .childChannelOption(.autoRead, value: false)
                .childChannelInitializer { [self] channel in
                    channel.eventLoop.makeCompletedFuture { try self.accept(channel) }
                }
            if let fastOpen = options.fastOpenOption(listening: true) {
                bootstrap = bootstrap.serverChannelOption(ChannelOptions.Types.SocketOption(level: SocketOptionLevel(fastOpen.level), name: SocketOptionName(fastOpen.name)), value: Int(fastOpen.value))
            }
            for option in options.socketOptions {
                bootstrap = bootstrap.childChannelOption(ChannelOptions.Types.SocketOption(level: SocketOptionLevel(option.level), name: SocketOptionName(option.name)), value: Int(option.value))
            }
            channel = try await bootstrap.bind(host: host, port: port).get()
        case .udp(let dtls):
            if dtls != nil { throw NWError.tls(GNUTLS_E_UNIMPLEMENTED_FEATURE) }
            let parameters = parameters
            let stack = stack
            let deliver = deliver
            channel = try await DatagramBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            PeerRouter(channel: channel, parameters: parameters, stack: stack, deliver: deliver)
                        )
                    }
                }
                .bind(host: host, port: port).get()
        }
        lock.withLock { self.channel = channel }
        return channel.localAddress?.port ?? port
    }

    /// Stops accepting; connections already handed over carry on (UDP peers end with the socket).
    func close() {
        lock.withLock { channel }?.close(promise: nil)
    }

    /// An accepted TCP connection: its `NWConnection` reads nothing until started.
    private func accept(_ channel: any Channel) throws {
        guard let remote = channel.remoteAddress.flatMap(NWEndpoint.init(socketAddress:)) else { return }
        var transport: NWSocketConnection?
        let connection = NWConnection(acceptedFrom: remote, using: parameters) { observable in
            let made = NWSocketConnection(origin: .accepted(channel, credentials), stack: stack, observable: observable)
            transport = made
            return made
        }
        try channel.pipeline.syncOperations.addHandler(NWSocketConnection.StreamHandler(owner: transport!))
        deliver(connection)
    }

    /// Routes a UDP listener's datagrams to one connection per remote address, making it on the
    /// first datagram from that address.
    // @unchecked Sendable: `peers` is touched only on the channel's event loop.
    private final class PeerRouter: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = AddressedEnvelope<ByteBuffer>
        private let channel: any Channel
        private let parameters: NWParameters
        private let stack: NWSocketStack
        private let deliver: @Sendable (NWConnection) -> Void
        private var peers: [SocketAddress: NWSocketConnection] = [:]

        init(channel: any Channel, parameters: NWParameters, stack: NWSocketStack, deliver: @escaping @Sendable (NWConnection) -> Void) {
            self.channel = channel
            self.parameters = parameters
            self.stack = stack
            self.deliver = deliver
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let envelope = unwrapInboundIn(data)
            let remote = envelope.remoteAddress
            if let peer = peers[remote] {
                peer.deliverDatagram(envelope.data)
                return
            }
            guard let endpoint = NWEndpoint(socketAddress: remote) else { return }
            var transport: NWSocketConnection?
            let connection = NWConnection(acceptedFrom: endpoint, using: parameters) { observable in
                let made = NWSocketConnection(
                    origin: .datagramPeer(channel, remote: remote, detach: { [self] in peers[remote] = nil }), stack: stack,
                    observable: observable
                )
                transport = made
                return made
            }
            peers[remote] = transport!
            transport!.deliverDatagram(envelope.data)
            deliver(connection)
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            // ICMP errors for one peer (ECONNREFUSED) do not end the listener.
        }
    }
}

extension NWEndpoint {
    /// The endpoint of a NIO socket address; nil for a Unix socket.
    init?(socketAddress: SocketAddress) {
        guard let host = socketAddress.ipAddress, let port = socketAddress.port, let value = UInt16(exactly: port) else { return nil }
        self = .hostPort(host: .init(host), port: .init(integerLiteral: value))
    }
}
