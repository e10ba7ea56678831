#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOCore
import NIOPosix

/// The workers serving one address: one event loop, one UDP socket and one `QUICServerEndpoint`
/// each, so a server uses as many cores as it has workers. Each worker's loop is a
/// `QUICEventLoop` of the group's own, reading and writing its sockets with system calls
/// (`QUICUDPSocket`); a loop's thread ends once its sockets are closed and nothing refers to it.
///
/// With more than one worker the sockets form a `SO_REUSEPORT` group and the kernel steers
/// each packet to the worker that owns its connection (`QUICReuseportGroup`). A packet that
/// still reaches the wrong worker (the program could not be attached, or the group changed) is
/// handed to its owner's event loop, as Envoy, HAProxy and h2o do; `handOvers` counts those.
/// A client's first Initials carry its own DCID and go by the kernel's 4-tuple hash; the worker
/// that takes the first one owns the connection for its lifetime. One worker binds a plain
/// socket.
package final class QUICServerWorkerGroup: Sendable {
    package struct Worker: Sendable {
        package let eventLoop: any EventLoop
        /// Made on `eventLoop`, used only there (NIO checks it).
        let endpoint: NIOLoopBound<QUICServerEndpoint>
    }

    let workers: [Worker]
    /// What the workers share: limits, keys, the hand-over count.
    package let shared: QUICEndpointSharedState
    /// The bound port, the same for every worker.
    package let port: UInt16
    /// The address advertised as `preferred_address`, when there is one.
    package let preferredAddress: QUICSocketAddress?
    /// Whether the kernel steers packets by connection ID; without it only hand-overs do.
    package let isSteeredByKernel: Bool

    private init(
        workers: [Worker], port: UInt16, preferredAddress: QUICSocketAddress?, shared: QUICEndpointSharedState,
        isSteeredByKernel: Bool
    ) {
        self.workers = workers
        self.shared = shared
        self.port = port
        self.preferredAddress = preferredAddress
        self.isSteeredByKernel = isSteeredByKernel
        let loops = workers.map(\.eventLoop)
        let endpoints = workers.map(\.endpoint)
        for (loop, endpoint) in zip(loops, endpoints) {
            loop.execute {
                endpoint.value.handOver = { target, datagram, path, ecn in
                    loops[target].execute { endpoints[target].value.receiveHandedOver(datagram, path: path, ecn: ecn) }
                }
            }
        }
    }

    /// The most workers one address can have: a worker's number is one byte of its connection IDs.
    package static let maximumWorkerCount = 255

    /// Binds `workerCount` workers to `host:port` (and to `preferred`, if given), each on its own
    /// event loop, and calls `onNewConnection` on a worker's loop for each connection it accepts.
    ///
    /// `kernelSteering: false` leaves the steering program out, so only hand-overs steer (for
    /// tests, and for kernels that refuse the program).
    package static func bind(
        host: String,
        port: Int,
        preferred: (host: String, port: Int)? = nil,
        configuration: QUICEndpointCore.Configuration,
        workerCount: Int = 1,
        kernelSteering: Bool = true,
        logger: Logger,
        onNewConnection: @escaping @Sendable (QUICConnectionDriver) -> Void
    ) async throws -> QUICServerWorkerGroup {
        let workerCount = max(1, min(workerCount, maximumWorkerCount))
        let shared = QUICEndpointSharedState(workerCount: workerCount)
        // One secret and one QUIC-LB configuration for every worker; each has its worker byte.
        let factory = QUICConnectionIDFactory(loadBalancer: configuration.loadBalancer)
        let loops = try (0..<workerCount).map { try QUICEventLoop(name: "quic-worker-\($0)") }
        let program = QUICReuseportGroup.steeringProgram(connectionIDLength: factory.idLength, steering: factory.steering)
        var steered = kernelSteering && workerCount > 1
        let socketOptions = configuration.quic.socket
        func bindGroup(_ address: SocketAddress) throws -> [CInt] {
            guard socketOptions.allows(isIPv6: address.protocol == .inet6) else {
                throw QUICSocketError.ipVersionExcluded(address: "\(address)")
            }
            let descriptors = try QUICReuseportGroup.bind(address, count: workerCount, options: socketOptions)
            if steered {
                do {
                    try QUICReuseportGroup.attach(program, to: descriptors[0])
                } catch {
                    logger.warning("the kernel refused the steering program; workers hand packets over instead", metadata: ["error": "\(error)"])
                    steered = false
                }
            }
            return descriptors
        }
        let mainAddress = try SocketAddress.makeAddressResolvingHost(host, port: port)
        let main = try bindGroup(mainAddress)
        let second: [CInt]?
        do {
            second = try preferred.map { try bindGroup(try SocketAddress.makeAddressResolvingHost($0.host, port: $0.port)) }
        } catch {
            for descriptor in main { _ = Glibc.close(descriptor) }
            throw error
        }

        // Each worker adopts its sockets and makes its endpoint on its own loop.
        let endpoints = (0..<workerCount).map { index in
            let loop = loops[index]
            return loop.submit {
                let socket = try QUICUDPSocket(adopting: main[index], options: socketOptions, loop: loop, logger: logger)
                do {
                    let preferredSocket = try second.map { try QUICUDPSocket(adopting: $0[index], options: socketOptions, loop: loop, logger: logger) }
                    return (NIOLoopBound(socket, eventLoop: loop), preferredSocket.map { NIOLoopBound($0, eventLoop: loop) })
                } catch {
                    socket.close()
                    throw error
                }
            }
        }
        let sockets: [(NIOLoopBound<QUICUDPSocket>, NIOLoopBound<QUICUDPSocket>?)]
        do {
            sockets = try await EventLoopFuture.whenAllSucceed(endpoints, on: loops[0]).get()
        } catch {
            // Close what was adopted; descriptors not adopted are closed here.
            let results = (try? await EventLoopFuture.whenAllComplete(endpoints, on: loops[0]).get()) ?? []
            for (index, result) in results.enumerated() {
                switch result {
                case .success(let (socket, preferredSocket)):
                    loops[index].execute { socket.value.close(); preferredSocket?.value.close() }
                case .failure:
                    _ = Glibc.close(main[index])
                    if let second { _ = Glibc.close(second[index]) }
                }
            }
            throw error
        }
        let advertisedAddress = try await loops[0].submit { sockets[0].1?.value.localAddress }.get()
        var advertised = configuration
        advertised.quic.preferredAddress = advertisedAddress
        advertised.quic.maxUDPPayloadSize = socketOptions.maximumUDPPayload(
            advertised.quic.maxUDPPayloadSize, isIPv6: mainAddress.protocol == .inet6
        )
        let workerConfiguration = advertised
        var workers: [Worker] = []
        var port: UInt16 = 0
        var preferredAddress: QUICSocketAddress?
        for (index, (socket, preferredSocket)) in sockets.enumerated() {
            let loop = loops[index]
            let made = try await loop.submit {
                let endpoint = QUICServerEndpoint(
                    socket: socket.value,
                    preferredSocket: preferredSocket?.value,
                    configuration: workerConfiguration,
                    idFactory: factory.forWorker(UInt8(index)),
                    shared: shared,
                    logger: logger
                )
                endpoint.onNewConnection = onNewConnection
                return (NIOLoopBound(endpoint, eventLoop: loop), endpoint.port, endpoint.preferredAddress)
            }.get()
            if index == 0 { (port, preferredAddress) = (made.1, made.2) }
            workers.append(Worker(eventLoop: loop, endpoint: made.0))
        }
        return QUICServerWorkerGroup(
            workers: workers, port: port, preferredAddress: preferredAddress, shared: shared,
            isSteeredByKernel: steered
        )
    }

    /// Datagrams handed from one worker to another so far.
    package var handOvers: Int { shared.handOvers }

    /// The first datagrams handed over, described (`QUICEndpointSharedState.handOverSamples`).
    package var handOverSamples: [String] { shared.handOverSamples }

    /// Connections of every worker, handshakes and closing or draining periods included.
    package func connectionCount() async -> Int {
        await statistics().map(\.openConnections).reduce(0, +)
    }

    /// What each worker has done so far, in worker order.
    package func statistics() async -> [QUICServerWorkerStatistics] {
        var all: [QUICServerWorkerStatistics] = []
        for worker in workers {
            let endpoint = worker.endpoint
            let counts = try? await worker.eventLoop.submit {
                QUICServerWorkerStatistics(
                    datagramsReceived: endpoint.value.datagramsReceived,
                    connectionsAccepted: endpoint.value.connectionsAccepted,
                    openConnections: endpoint.value.connectionCount
                )
            }.get()
            all.append(counts ?? QUICServerWorkerStatistics(datagramsReceived: 0, connectionsAccepted: 0, openConnections: 0))
        }
        return all
    }

    /// Closes every connection with NO_ERROR (RFC 9000 §10.2), then the sockets.
    package func close() {
        for worker in workers {
            worker.eventLoop.execute { worker.endpoint.value.close() }
        }
    }

    /// Refuses new clients at once (on every worker: the flag is shared), closes each worker's
    /// socket once its connections have ended or after `timeout`, and succeeds when all are closed.
    package func closeWhenDrained(timeout: TimeAmount) -> EventLoopFuture<Void> {
        shared.refusesNewConnections = true
        let closed = workers.map { worker in
            worker.eventLoop.flatSubmit { worker.endpoint.value.closeWhenDrained(timeout: timeout) }
        }
        return EventLoopFuture.andAllComplete(closed, on: workers[0].eventLoop)
    }
}

/// One worker's counters since it began.
public struct QUICServerWorkerStatistics: Sendable, Equatable {
    /// Datagrams read from the worker's own sockets (hand-overs from other workers not included).
    public var datagramsReceived: Int
    /// Connections whose first Initial this worker took.
    public var connectionsAccepted: Int
    /// Connections open now, closing and draining periods included.
    public var openConnections: Int
}
