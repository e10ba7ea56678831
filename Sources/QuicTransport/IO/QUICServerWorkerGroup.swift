#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOCore

/// The workers serving one host's addresses: one event loop, one UDP socket per address and one
/// `QUICServerEndpoint` each, so a server uses as many cores as it has workers. Each worker's loop is a
/// `QUICEventLoop` of the group's own, reading and writing its sockets with system calls
/// (`QUICUDPSocket`); a loop's thread ends once its sockets are closed and nothing refers to it.
///
/// With more than one worker the sockets form a `SO_REUSEPORT` group and the kernel steers
/// each packet to the worker that owns its connection (`QUICReuseportGroup`). A packet that
/// still reaches the wrong worker (the program could not be attached, or the group changed) is
/// forwarded to its owner's event loop, as Envoy, HAProxy and h2o do; `forwardedDatagrams`
/// counts those.
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
    /// What the workers share: limits, keys, the count of forwarded datagrams.
    package let shared: QUICEndpointSharedState
    /// The bound port, the same for every worker and every address.
    package let port: UInt16
    /// The addresses the workers listen on, the same for every worker.
    package let localAddresses: [QUICSocketAddress]
    /// The address advertised as `preferred_address`, when there is one.
    package let preferredAddress: QUICSocketAddress?
    /// Whether the kernel steers packets by connection ID; without it only forwarding does.
    package let isSteeredByKernel: Bool

    private init(
        workers: [Worker], port: UInt16, localAddresses: [QUICSocketAddress], preferredAddress: QUICSocketAddress?,
        shared: QUICEndpointSharedState, isSteeredByKernel: Bool
    ) {
        self.workers = workers
        self.shared = shared
        self.port = port
        self.localAddresses = localAddresses
        self.preferredAddress = preferredAddress
        self.isSteeredByKernel = isSteeredByKernel
        for worker in workers {
            worker.eventLoop.execute { worker.endpoint.value.peers = workers }
        }
    }

    /// The most workers one address can have: a worker's number is one byte of its connection IDs.
    package static let maximumWorkerCount = 255

    /// Binds `workerCount` workers to `host:port` (and to `preferred`, if given), each on its own
    /// event loop, and calls `onNewConnection` on a worker's loop for each connection it accepts.
    ///
    /// `host` may name several addresses (`QUICHostResolver.listeningAddresses`): each worker then has a socket
    /// at each, all on one port, and every address is a reuseport group of its own.
    /// `kernelSteering: false` leaves the steering program out, so only forwarding steers (for
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
        let socketOptions = configuration.quic.socket
        // A port shared with other listeners (`reusesAddress`) shares the kernel's group with
        // their sockets too, where our worker indices would pick their sockets: hash instead.
        var steered = kernelSteering && workerCount > 1 && !socketOptions.reusesAddress
        func bindGroup(_ address: SocketAddress) throws -> [CInt] {
            guard socketOptions.allows(isIPv6: address.protocol == .inet6) else {
                throw QUICSocketError.ipVersionExcluded(address: "\(address)")
            }
            let descriptors = try QUICReuseportGroup.bind(address, count: workerCount, options: socketOptions)
            if steered {
                do {
                    try QUICReuseportGroup.attach(program, to: descriptors[0])
                } catch {
                    logger.warning("the kernel refused the steering program; workers forward packets instead", metadata: ["error": "\(error)"])
                    steered = false
                }
            }
            return descriptors
        }
        let mainAddresses = try QUICHostResolver.listeningAddresses(host: host, port: port, options: socketOptions)
        let main = try bindGroups(at: mainAddresses, logger: logger, bindGroup)
        let second: [CInt]?
        do {
            second = try preferred.map { try bindGroup(try SocketAddress.makeAddressResolvingHost($0.host, port: $0.port)) }
        } catch {
            for descriptor in main.joined() { _ = Glibc.close(descriptor) }
            throw error
        }

        // Each worker adopts its sockets and makes its endpoint on its own loop.
        let endpoints = (0..<workerCount).map { index in
            let loop = loops[index]
            return loop.submit {
                var adopted: [QUICUDPSocket] = []
                do {
                    for group in main {
                        adopted.append(try QUICUDPSocket(adopting: group[index], options: socketOptions, loop: loop, logger: logger))
                    }
                    let preferredSocket = try second.map { try QUICUDPSocket(adopting: $0[index], options: socketOptions, loop: loop, logger: logger) }
                    return (adopted.map { NIOLoopBound($0, eventLoop: loop) }, preferredSocket.map { NIOLoopBound($0, eventLoop: loop) })
                } catch {
                    // Those not adopted are the caller's to close.
                    for socket in adopted { socket.close() }
                    for group in main.dropFirst(adopted.count) { _ = Glibc.close(group[index]) }
                    if let second { _ = Glibc.close(second[index]) }
                    throw error
                }
            }
        }
        let sockets: [([NIOLoopBound<QUICUDPSocket>], NIOLoopBound<QUICUDPSocket>?)]
        do {
            sockets = try await EventLoopFuture.whenAllSucceed(endpoints, on: loops[0]).get()
        } catch {
            // Close what the other workers adopted.
            let results = (try? await EventLoopFuture.whenAllComplete(endpoints, on: loops[0]).get()) ?? []
            for (index, result) in results.enumerated() {
                if case .success(let (adopted, preferredSocket)) = result {
                    loops[index].execute {
                        for socket in adopted { socket.value.close() }
                        preferredSocket?.value.close()
                    }
                }
            }
            throw error
        }
        let advertisedAddress = try await loops[0].submit { sockets[0].1?.value.localAddress }.get()
        var advertised = configuration
        advertised.quic.preferredAddress = advertisedAddress
        advertised.quic.maxUDPPayloadSize = socketOptions.maximumUDPPayload(
            advertised.quic.maxUDPPayloadSize, isIPv6: mainAddresses.contains { $0.protocol == .inet6 }
        )
        let workerConfiguration = advertised
        var workers: [Worker] = []
        var port: UInt16 = 0
        var localAddresses: [QUICSocketAddress] = []
        var preferredAddress: QUICSocketAddress?
        for (index, (listening, preferredSocket)) in sockets.enumerated() {
            let loop = loops[index]
            let made = try await loop.submit {
                let endpoint = QUICServerEndpoint(
                    sockets: listening.map(\.value),
                    preferredSocket: preferredSocket?.value,
                    configuration: workerConfiguration,
                    idFactory: factory.forWorker(UInt8(index)),
                    shared: shared,
                    logger: logger
                )
                endpoint.onNewConnection = onNewConnection
                return (NIOLoopBound(endpoint, eventLoop: loop), endpoint.port, endpoint.preferredAddress, endpoint.localAddresses)
            }.get()
            if index == 0 { (port, preferredAddress, localAddresses) = (made.1, made.2, made.3) }
            workers.append(Worker(eventLoop: loop, endpoint: made.0))
        }
        return QUICServerWorkerGroup(
            workers: workers, port: port, localAddresses: localAddresses, preferredAddress: preferredAddress, shared: shared,
            isSteeredByKernel: steered
        )
    }

    /// Binds a group at each of `addresses` with `bindGroup`, all on one port; the first picks
    /// it when theirs is 0, and when a later address has that port taken the whole set tries
    /// again on another. An address this host lacks (`::1` where IPv6 is off, as in some
    /// containers) is left out, with a notice, as long as another is bound.
    private static func bindGroups(
        at addresses: [SocketAddress], logger: Logger, _ bindGroup: (SocketAddress) throws -> [CInt]
    ) throws -> [[CInt]] {
        let picksPort = addresses[0].port == 0
        for attempt in 1...8 {
            var groups: [[CInt]] = []
            var port = addresses[0].port ?? 0
            do {
                for var address in addresses {
                    address.port = port
                    do {
                        groups.append(try bindGroup(address))
                    } catch let error as IOError
                        where addresses.count > 1 && [EADDRNOTAVAIL, EAFNOSUPPORT].contains(error.errnoCode) {
                        logger.notice("cannot listen on \(address); serving the other addresses", metadata: ["error": "\(error)"])
                        continue
                    }
                    if port == 0, let first = groups.first?.first {
                        port = Int(try QUICReuseportGroup.boundAddress(of: first).port)
                    }
                }
                guard !groups.isEmpty else { throw IOError(errnoCode: EADDRNOTAVAIL, reason: "bind(\(addresses))") }
                return groups
            } catch let error as IOError where picksPort && error.errnoCode == EADDRINUSE && groups.count > 0 && attempt < 8 {
                // The port the first address picked is taken at another: pick again.
                for descriptor in groups.joined() { _ = Glibc.close(descriptor) }
            } catch {
                for descriptor in groups.joined() { _ = Glibc.close(descriptor) }
                throw error
            }
        }
        preconditionFailure("the last attempt returns or throws")
    }

    /// Datagrams forwarded from one worker to another so far.
    package var forwardedDatagrams: Int { shared.forwardedDatagrams }

    /// The first datagrams forwarded, described (`QUICEndpointSharedState.forwardedSamples`).
    package var forwardedSamples: [String] { shared.forwardedSamples }

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
    /// Datagrams read from the worker's own sockets (datagrams forwarded by other workers not included).
    public var datagramsReceived: Int
    /// Connections whose first Initial this worker took.
    public var connectionsAccepted: Int
    /// Connections open now, closing and draining periods included.
    public var openConnections: Int
}
