import CQuicLinux
import Logging
import NIOCore

/// One worker of a listening host: its UDP sockets, one per address (each one of a reuseport
/// group when there are several workers), its `QUICEndpointCore`, and one driver per connection
/// it accepted.
///
/// A datagram that fails or misbehaves only ever touches its own connection's core; drivers of
/// other connections are not involved. Loop-confined: created, fed and closed on its socket's
/// event loop. `QUICServerWorkerGroup` binds the workers of an address. The state touched per
/// datagram skips the run-time exclusivity check (`@exclusivity(unchecked)`) for that reason.
package final class QUICServerEndpoint {
    /// One socket per listening address (`::1` and `127.0.0.1` for `localhost`); a connection's
    /// packets leave from the one its client reached.
    let sockets: [QUICUDPSocket]
    /// A further socket at the address advertised as `preferred_address` (RFC 9000 §9.6), where
    /// clients may move once their handshake is confirmed.
    let preferredSocket: QUICUDPSocket?
    package let core: QUICEndpointCore
    @exclusivity(unchecked) private var drivers: [ObjectIdentifier: QUICConnectionDriver] = [:]
    /// The drivers to serve after this read, in `touched[..<touchedCount]`. Each holds one
    /// reference, taken in `touch` and given up once the driver is served: that keeps a driver
    /// alive through its pass even if its connection ends in it, and the pass itself is called
    /// without counting again. Entries past the count are stale plain pointers, so the list
    /// empties by resetting the count: `removeAll` cost a generic call on every read.
    @exclusivity(unchecked) private var touched: [Unmanaged<QUICConnectionDriver>] = []
    @exclusivity(unchecked) private var touchedCount = 0
    private let logger: Logger
    /// Called for each connection the endpoint accepts, before its first events.
    package var onNewConnection: ((QUICConnectionDriver) -> Void)?
    /// Datagrams this worker read from its sockets, and connections it accepted, since it began.
    @exclusivity(unchecked) private(set) var datagramsReceived = 0
    @exclusivity(unchecked) private(set) var connectionsAccepted = 0
    /// Passes a datagram for another worker's connection to that worker; set by the group.
    var handOver: ((_ worker: Int, _ datagram: ByteBuffer, _ path: QUICPath, _ ecn: UInt32) -> Void)?

    private var listeningSockets: [QUICUDPSocket] { sockets + (preferredSocket.map { [$0] } ?? []) }
    /// The worker's event loop, which all its sockets share.
    private var loop: QUICEventLoop { sockets[0].loop }

    /// The bound port, the same at every address.
    package var port: UInt16 { sockets[0].localAddress.port }
    /// The addresses it listens on.
    package var localAddresses: [QUICSocketAddress] { sockets.map(\.localAddress) }
    /// The address advertised as `preferred_address`, when there is one.
    package var preferredAddress: QUICSocketAddress? { preferredSocket?.localAddress }

    init(
        sockets: [QUICUDPSocket],
        preferredSocket: QUICUDPSocket? = nil,
        configuration: QUICEndpointCore.Configuration,
        idFactory: QUICConnectionIDFactory,
        shared: QUICEndpointSharedState,
        logger: Logger
    ) {
        precondition(!sockets.isEmpty, "an endpoint listens on at least one socket")
        self.sockets = sockets
        self.preferredSocket = preferredSocket
        self.core = QUICEndpointCore(configuration: configuration, idFactory: idFactory, shared: shared, logger: logger)
        self.logger = logger
        // The sockets keep the endpoint alive until `close()` breaks the cycle.
        for listening in listeningSockets {
            listening.onDatagram = { datagram, remote, ecn in self.receive(datagram, from: remote, ecn: ecn, on: listening) }
            listening.onReadComplete = { self.serviceTouched() }
        }
    }

    package var connectionCount: Int { drivers.count }

    /// Closes the socket once every connection has ended, or after `timeout` at the latest
    /// (connections still open then are closed). The group has already set the shared flag that
    /// refuses new clients.
    func closeWhenDrained(timeout: TimeAmount) -> EventLoopFuture<Void> {
        let eventLoop = loop.assumeIsolated()
        let closed = loop.makePromise(of: Void.self)
        let deadline = NIODeadline.now() + timeout
        func check() {
            if drivers.isEmpty || NIODeadline.now() >= deadline {
                close()
                // Let the last CONNECTION_CLOSE packets leave before reporting.
                eventLoop.scheduleTask(in: .milliseconds(20)) { closed.succeed() }
                return
            }
            eventLoop.scheduleTask(in: .milliseconds(50)) { check() }
        }
        check()
        return closed.futureResult
    }

    /// Closes every connection with NO_ERROR (RFC 9000 §10.2), then the socket.
    package func close() {
        for driver in drivers.values {
            driver.core.close(applicationErrorCode: 0, reason: "server shutting down", now: QUICConnectionDriver.now())
            driver.afterInput()
        }
        for listening in listeningSockets { listening.detachAndClose() }
        // The group's hand-over closure holds every worker of the address, this one included.
        handOver = nil
        onNewConnection = nil
    }

    private var memoryTrimScheduled = false
    /// When a connection last began or ended here.
    private var lastConnectionChange = NIODeadline.now()

    /// Once connections have stopped coming and going for `memoryTrimDelay`, gives the memory
    /// they freed back to the kernel.
    ///
    /// A connection's allocations are spread over glibc's per-thread arenas, and free space in
    /// the middle of an arena stays in the process: after 200 concurrent connections closed,
    /// h3serve kept 27 MiB it no longer used. `malloc_trim(3)` releases those free pages. But
    /// every page released is a page fault, zeroed, when the next connections need it again:
    /// trimming two seconds after any connection ended, as this did first, cost 29 page faults
    /// and about 6 µs of kernel time per connection under bursts of `h3load -c 1000` five
    /// seconds apart (gtlsserver, which never trims, takes 8 to 11; now about 5). So the trim
    /// waits for quiet, as jemalloc's decay waits for pages to stay unused: a server under
    /// steady churn or regular bursts keeps the memory it keeps reusing, and one at rest gives
    /// it back.
    private func scheduleMemoryTrim(in delay: TimeAmount = QUICServerEndpoint.memoryTrimDelay) {
        guard !memoryTrimScheduled else { return }
        memoryTrimScheduled = true
        // Holds the endpoint for the delay at most: a weak reference would give it a side table,
        // and every retain and release of it (one per datagram) would take the slow path.
        loop.assumeIsolated().scheduleTask(in: delay) {
            self.memoryTrimScheduled = false
            let quiet = NIODeadline.now() - self.lastConnectionChange
            if quiet >= Self.memoryTrimDelay {
                malloc_trim(0)
            } else {
                self.scheduleMemoryTrim(in: Self.memoryTrimDelay - quiet)
            }
        }
    }

    static let memoryTrimDelay = TimeAmount.seconds(5)

    private func receive(_ datagram: UnsafeRawBufferPointer, from remote: QUICSocketAddress, ecn: UInt32, on listening: QUICUDPSocket) {
        datagramsReceived += 1
        receive(datagram, path: QUICPath(local: listening.localAddress, remote: remote), ecn: ecn, on: listening, mayHandOver: true)
    }

    /// Takes a datagram that another worker received for one of this worker's connections.
    func receiveHandedOver(_ datagram: ByteBuffer, path: QUICPath, ecn: UInt32) {
        let listening = listeningSockets.first { $0.localAddress == path.local } ?? sockets[0]
        datagram.withUnsafeReadableBytes { receive($0, path: path, ecn: ecn, on: listening, mayHandOver: false) }
        serviceTouched()  // Each touched driver's pass flushes its sockets.
    }

    private func receive(_ datagram: UnsafeRawBufferPointer, path: QUICPath, ecn: UInt32, on listening: QUICUDPSocket, mayHandOver: Bool) {
        // Unretained, as the caller holds the socket for the call: captured strongly, the
        // socket was retained and released several times per datagram.
        let replySocket = Unmanaged.passUnretained(listening)
        let disposition = core.receive(datagram: datagram, path: path, ecn: ecn, now: QUICConnectionDriver.now(), mayHandOver: mayHandOver) { reply in
            replySocket._withUnsafeGuaranteedRef { $0.sendNow(reply, to: path.remote) }
        }
        switch consume disposition {
        case .delivered(let connection, let isNew):
            guard isNew else {
                // Only this endpoint sets a server core's owner, always to a driver.
                guard let owner = connection.owner else { return }
                Unmanaged<QUICConnectionDriver>.fromOpaque(owner.toOpaque())._withUnsafeGuaranteedRef { touch($0) }
                return
            }
            let driver = QUICConnectionDriver(core: connection, socket: listening, eventLoop: loop)
            if let preferredSocket, preferredSocket !== listening { driver.addSocket(preferredSocket) }
            // The endpoint's core, held strongly: it holds cores, not drivers, so no cycle,
            // and a pass then loads no weak reference (12 per connection).
            driver.takeEvents = { [core] in core.takeEvents(of: $0) }
            // Holds the endpoint until the connection is over, when the driver drops it.
            driver.onFinished = { [self] finished in
                finished.core.owner = nil
                core.remove(finished.core)
                drivers[ObjectIdentifier(finished.core)] = nil
                lastConnectionChange = NIODeadline.now()
                scheduleMemoryTrim()
            }
            drivers[ObjectIdentifier(connection)] = driver
            connection.owner = Unmanaged.passUnretained(driver)
            connectionsAccepted += 1
            lastConnectionChange = NIODeadline.now()
            onNewConnection?(driver)
            touch(driver)
        case .handOver(let worker):
            // The read area is reused after this call: the other worker gets a copy.
            handOver?(worker, ByteBuffer(bytes: datagram), path, ecn)
        case .answered(let what):
            logger.debug("answered statelessly", metadata: ["what": "\(what)", "peer": "\(path.remote)"])
        case .dropped(let why):
            logger.trace("dropped datagram", metadata: ["why": "\(why)", "peer": "\(path.remote)"])
        }
    }

    /// Queues a driver for one pass after this read, however many of the read's datagrams are
    /// its connection's.
    private func touch(_ driver: QUICConnectionDriver) {
        guard !driver.isTouched else { return }
        driver.isTouched = true
        if touchedCount < touched.count {
            touched[touchedCount] = .passRetained(driver)
        } else {
            touched.append(.passRetained(driver))
        }
        touchedCount += 1
    }

    private func serviceTouched() {
        // By index, so the array keeps its capacity (a copy taken to loop over would make
        // clearing it allocate anew every pass); a driver touched meanwhile is served too,
        // even one served already.
        var index = 0
        while index < touchedCount {
            touched[index]._withUnsafeGuaranteedRef { driver in
                driver.isTouched = false
                driver.afterInput()
            }
            index += 1
        }
        for index in 0..<touchedCount { touched[index].release() }
        touchedCount = 0
    }
}
