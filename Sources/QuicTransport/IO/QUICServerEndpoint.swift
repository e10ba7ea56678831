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
    /// Each connection's driver, at the index of its `QUICConnectionHandle`.
    ///
    /// The endpoint core names the connection of each datagram by its handle, so the driver to
    /// serve is one array access away, and the core holds nothing that points back up here. A
    /// dictionary keyed by the core would hash once per datagram; a reference from the core to
    /// its driver would make the core depend on what runs it.
    @exclusivity(unchecked) private var drivers: [QUICConnectionDriver?] = []
    @exclusivity(unchecked) package private(set) var connectionCount = 0
    /// The drivers to run a pass for after this read, in `queuedAfterRead[..<queuedAfterReadCount]`.
    /// Each holds one reference, taken in `queueAfterRead` and given up once its pass has run:
    /// that keeps a driver alive through its pass even if its connection ends in it, and the pass
    /// itself is called without counting again. Entries past the count are stale plain
    /// pointers, so the list empties by resetting the count: `removeAll` cost a generic call on
    /// every read.
    @exclusivity(unchecked) private var queuedAfterRead: [Unmanaged<QUICConnectionDriver>] = []
    @exclusivity(unchecked) private var queuedAfterReadCount = 0
    private let logger: Logger
    /// Called for each connection the endpoint accepts, before its first events.
    package var onNewConnection: ((QUICConnectionDriver) -> Void)?
    /// Datagrams this worker read from its sockets, and connections it accepted, since it began.
    @exclusivity(unchecked) private(set) var datagramsReceived = 0
    @exclusivity(unchecked) private(set) var connectionsAccepted = 0
    /// Every worker of the address, this one included, indexed by worker number: where a
    /// datagram for another worker's connection is forwarded. Set by the group.
    var peers: [QUICServerWorkerGroup.Worker] = []

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
            listening.onReadComplete = { self.runQueuedPasses() }
        }
    }

    /// Closes the socket once every connection has ended, or after `timeout` at the latest
    /// (connections still open then are closed). The group has already set the shared flag that
    /// refuses new clients.
    func closeWhenDrained(timeout: TimeAmount) -> EventLoopFuture<Void> {
        let eventLoop = loop.assumeIsolated()
        let closed = loop.makePromise(of: Void.self)
        let deadline = NIODeadline.now() + timeout
        func check() {
            if connectionCount == 0 || NIODeadline.now() >= deadline {
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
        for case let driver? in drivers {
            driver.core.close(applicationErrorCode: 0, reason: "server shutting down", now: QUICConnectionDriver.now())
            driver.runPass()
        }
        for listening in listeningSockets { listening.detachAndClose() }
        // The peers are every worker of the address, this one included.
        peers = []
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
        receive(datagram, path: QUICPath(local: listening.localAddress, remote: remote), ecn: ecn, on: listening, mayForward: true)
    }

    /// Takes a datagram that another worker received for one of this worker's connections.
    func receiveForwarded(_ datagram: ByteBuffer, path: QUICPath, ecn: UInt32) {
        let listening = listeningSockets.first { $0.localAddress == path.local } ?? sockets[0]
        datagram.withUnsafeReadableBytes { receive($0, path: path, ecn: ecn, on: listening, mayForward: false) }
        runQueuedPasses()  // Each queued driver's pass flushes its sockets.
    }

    /// Acts on what the endpoint core made of a datagram: queues its connection's pass, starts
    /// a driver for a new connection, sends a stateless reply, or forwards it to its worker.
    private func receive(_ datagram: UnsafeRawBufferPointer, path: QUICPath, ecn: UInt32, on listening: QUICUDPSocket, mayForward: Bool) {
        let disposition = core.receive(datagram: datagram, path: path, ecn: ecn, now: QUICConnectionDriver.now(), mayForward: mayForward)
        switch consume disposition {
        case .delivered(let connection, let handle, let isNew):
            guard isNew else {
                // Every connection the core routes to was created by it and given a driver here.
                guard handle.index < drivers.count, let driver = drivers[handle.index] else { return }
                queueAfterRead(driver)
                return
            }
            let driver = QUICConnectionDriver(core: connection, socket: listening, eventLoop: loop)
            if let preferredSocket, preferredSocket !== listening { driver.addSocket(preferredSocket) }
            // The endpoint's core, held strongly: it holds cores, not drivers, so no cycle.
            driver.endpoint = core
            // Holds the endpoint until the connection is over, when the driver drops it.
            driver.onFinished = { [self] finished in
                core.remove(finished.core)
                drivers[handle.index] = nil
                connectionCount -= 1
                lastConnectionChange = NIODeadline.now()
                scheduleMemoryTrim()
            }
            if handle.index < drivers.count {
                drivers[handle.index] = driver
            } else {
                drivers.append(contentsOf: repeatElement(nil, count: handle.index - drivers.count))
                drivers.append(driver)
            }
            connectionCount += 1
            connectionsAccepted += 1
            lastConnectionChange = NIODeadline.now()
            onNewConnection?(driver)
            queueAfterRead(driver)
        case .forward(let worker):
            // The read area is reused after this call: the other worker gets a copy.
            guard worker < peers.count else { return }
            let peer = peers[worker]
            let copy = ByteBuffer(bytes: datagram)
            peer.eventLoop.execute { peer.endpoint.value.receiveForwarded(copy, path: path, ecn: ecn) }
        case .answered(let what, let reply):
            if reply.count > 0 { listening.send(reply, to: path.remote) }
            logger.debug("answered statelessly", metadata: ["what": "\(what)", "peer": "\(path.remote)"])
        case .dropped(let why):
            logger.trace("dropped datagram", metadata: ["why": "\(why)", "peer": "\(path.remote)"])
        }
    }

    /// Queues a driver for one pass after this read, however many of the read's datagrams are
    /// its connection's.
    private func queueAfterRead(_ driver: QUICConnectionDriver) {
        guard !driver.isQueuedAfterRead else { return }
        driver.isQueuedAfterRead = true
        if queuedAfterReadCount < queuedAfterRead.count {
            queuedAfterRead[queuedAfterReadCount] = .passRetained(driver)
        } else {
            queuedAfterRead.append(.passRetained(driver))
        }
        queuedAfterReadCount += 1
    }

    /// Runs the pass of every driver queued since the last call.
    private func runQueuedPasses() {
        // By index, so the array keeps its capacity (a copy taken to loop over would make
        // clearing it allocate anew every pass); a driver queued meanwhile gets its pass too,
        // even one whose pass ran already.
        var index = 0
        while index < queuedAfterReadCount {
            queuedAfterRead[index]._withUnsafeGuaranteedRef { driver in
                driver.isQueuedAfterRead = false
                driver.runPass()
            }
            index += 1
        }
        for index in 0..<queuedAfterReadCount { queuedAfterRead[index].release() }
        queuedAfterReadCount = 0
    }
}
