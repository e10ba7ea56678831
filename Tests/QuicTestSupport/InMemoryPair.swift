import CQuicShims
import Logging
import QuicTransport

/// A deterministic xorshift generator, so simulated loss is the same on every run.
package struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    package init(seed: UInt64) { state = seed == 0 ? 0x9E37_79B9_7F4A_7C15 : seed }
    package mutating func next() -> UInt64 {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        return state
    }
}

/// A QUIC client core and a server endpoint core joined by a simulated link with a virtual clock.
///
/// Real ngtcp2, real GnuTLS handshakes, no sockets and no wall clock: every run with the same
/// seed sends the same packets. Modelled on quinn's `Pair` test utility.
package final class InMemoryPair {
    struct InFlight {
        var bytes: [UInt8]
        var deliverAt: UInt64
        /// The client's end of the datagram: its source going up, its destination coming down.
        var clientAddress: QUICSocketAddress
    }

    package static let clientAddress = QUICSocketAddress(ip: "127.0.0.1", port: 50_000)!
    package static let serverAddress = QUICSocketAddress(ip: "127.0.0.1", port: 4_433)!

    package private(set) var now: UInt64 = 1_000_000_000
    package let server: QUICEndpointCore
    package let client: QUICConnectionCore
    package private(set) var serverConnection: QUICConnectionCore?
    package var clientEvents: [QUICConnectionEvent] = []
    package var serverEvents: [QUICConnectionEvent] = []
    package var oneWayDelay: UInt64 = 10_000_000
    package var lossRate: Double = 0
    package private(set) var droppedPackets = 0
    /// Client addresses whose datagrams the link drops both ways (a path that does not work).
    package var unreachableClientAddresses: Set<QUICSocketAddress> = []
    private var toServer: [InFlight] = []
    private var toClient: [InFlight] = []
    private var random: SeededGenerator
    private let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 16)
    /// Runs on the server connection's events, for tests that act like an application (echo).
    package var serverApplication: ((QUICConnectionCore, QUICConnectionEvent) -> Void)?
    /// Runs after every step, for tests that drive a codec on either side.
    package var afterStep: (() -> Void)?

    package init(
        clientConfiguration: QUICConfiguration = InMemoryPair.defaultConfiguration(),
        serverConfiguration: QUICConfiguration = InMemoryPair.defaultConfiguration(),
        requiresRetry: Bool = false,
        retryThreshold: Int = 128,
        maximumConnections: Int = 1024,
        maximumConnectionsPerAddress: Int? = nil,
        seed: UInt64 = 1,
        clientCodec: (any QUICApplicationCodec)? = nil,
        serverCodec: (@Sendable () -> any QUICApplicationCodec)? = nil
    ) throws {
        let identity = try SelfSignedCertificate.generate()
        var endpointConfiguration = QUICEndpointCore.Configuration(
            quic: serverConfiguration,
            credentials: try .server(certificateChainPEM: identity.certificatePEM, privateKeyPEM: identity.privateKeyPEM)
        )
        endpointConfiguration.requiresRetry = requiresRetry
        endpointConfiguration.retryThreshold = retryThreshold
        endpointConfiguration.maximumConnections = maximumConnections
        endpointConfiguration.maximumConnectionsPerAddress = maximumConnectionsPerAddress
        endpointConfiguration.makeApplicationCodec = serverCodec
        let logger = Logger(label: "test")
        server = QUICEndpointCore(configuration: endpointConfiguration, logger: logger)
        let verification = CertificateVerification.pinnedSHA256(identity.sha256Fingerprint)
        client = try QUICConnectionCore(
            clientWith: clientConfiguration,
            tls: QUICClientTLS(
                credentials: try .client(verification: verification),
                verification: verification,
                serverName: "localhost",
                verificationName: "localhost"
            ),
            path: QUICPath(local: Self.clientAddress, remote: Self.serverAddress),
            now: now,
            logger: logger
        )
        client.applicationCodec = clientCodec
        random = SeededGenerator(seed: seed)
    }

    deinit { scratch.deallocate() }

    package static func defaultConfiguration() -> QUICConfiguration {
        var configuration = QUICConfiguration()
        configuration.alpn = ["quic-echo"]
        return configuration
    }

    /// Moves the clock to the next interesting moment and processes it; false when nothing is left to do.
    @discardableResult
    package func step() -> Bool {
        flushAll()
        var next = UInt64.max
        next = min(next, toServer.map(\.deliverAt).min() ?? .max)
        next = min(next, toClient.map(\.deliverAt).min() ?? .max)
        next = min(next, client.nextDeadline)
        if let serverConnection { next = min(next, serverConnection.nextDeadline) }
        guard next != .max else { return false }
        now = Self.moment(after: now, due: next)
        deliver()
        client.handleTimeout(now: now)
        serverConnection?.handleTimeout(now: now)
        flushAll()
        return true
    }

    /// The virtual time to move to for a deadline `due`. A deadline that is already due and was
    /// not cleared moves the clock on by a nanosecond: ngtcp2 0.12 reports a retired connection
    /// ID's expiry as `retired_ts + pto` but removes it only when `ts` is past that, so a clock
    /// that lands exactly on it would stand still. A real clock always moves on.
    private static func moment(after now: UInt64, due next: UInt64) -> UInt64 {
        next > now ? next : now + 1
    }

    /// Steps until `condition` holds, or fails after `limit` of virtual time.
    package func run(until condition: () -> Bool, limit: UInt64 = 60_000_000_000, line: Int = #line) throws {
        let start = now
        while !condition() {
            guard now - start < limit else { throw PairError.timedOut(line: line) }
            guard step() else { throw PairError.stalled("line \(line): client: \(String(describing: client.closeReason)) server: \(String(describing: serverConnection?.closeReason))") }
        }
    }

    /// Runs until the client has read `stream` to its FIN; returns every byte read.
    package func readClientStreamToEnd(_ stream: Int64, line: Int = #line) throws -> [UInt8] {
        var received: [UInt8] = []
        try run(until: {
            let read = client.read(streamID: stream, maximumLength: .max)
            received += read.bytes
            return read.isFinished
        }, line: line)
        return received
    }

    /// Advances virtual time by `duration`, processing everything due on the way.
    package func advance(by duration: UInt64) {
        let end = now + duration
        while true {
            flushAll()
            let next = [
                toServer.map(\.deliverAt).min() ?? .max, toClient.map(\.deliverAt).min() ?? .max,
                client.nextDeadline, serverConnection?.nextDeadline ?? .max,
            ].min()!
            if next > end { break }
            now = Self.moment(after: now, due: next)
            deliver()
            client.handleTimeout(now: now)
            serverConnection?.handleTimeout(now: now)
        }
        now = end
    }

    /// Does what the server's driver does once its connection has reached `.closed` (its
    /// closing or draining period is over): the endpoint forgets it, and so does the pair.
    package func forgetClosedServerConnection() {
        guard let serverConnection, serverConnection.state == .closed else { return }
        server.remove(serverConnection)
        self.serverConnection = nil
    }

    /// The server loses the connection without a word, as a crashed or restarted process would:
    /// the endpoint forgets it in whatever state it is, and packets for it find no route.
    package func loseServerConnection() {
        guard let serverConnection else { return }
        server.remove(serverConnection)
        self.serverConnection = nil
    }

    package func inject(toServer bytes: [UInt8], from clientAddress: QUICSocketAddress = InMemoryPair.clientAddress) -> QUICEndpointCore.Disposition {
        let disposition = bytes.withUnsafeBytes { datagram in
            server.receive(datagram: datagram, path: QUICPath(local: Self.serverAddress, remote: clientAddress), now: now)
        }
        if case .answered(_, let reply) = disposition, reply.count > 0 {
            toClient.append(InFlight(bytes: Array(reply), deliverAt: now + oneWayDelay, clientAddress: clientAddress))
        }
        return disposition
    }

    private func deliver() {
        let dueServer = toServer.filter { $0.deliverAt <= now }
        toServer.removeAll { $0.deliverAt <= now }
        for packet in dueServer {
            switch inject(toServer: packet.bytes, from: packet.clientAddress) {
            case .delivered(let core, _, _): serverConnection = core
            default: break
            }
        }
        let dueClient = toClient.filter { $0.deliverAt <= now }
        toClient.removeAll { $0.deliverAt <= now }
        for packet in dueClient {
            packet.bytes.withUnsafeBytes {
                client.receive(datagram: $0, path: QUICPath(local: packet.clientAddress, remote: Self.serverAddress), now: now)
            }
        }
    }

    private func flushAll() {
        for _ in 0..<4 {
            _ = client.writePackets(now: now, scratch: scratch) { bytes, segment, path, _ in
                self.send(bytes, segment: segment, toServer: true, clientAddress: path.local)
            }
            clientEvents += client.takeEvents()
            afterStep?()
            if let serverConnection {
                _ = serverConnection.writePackets(now: now, scratch: scratch) { bytes, segment, path, _ in
                    self.send(bytes, segment: segment, toServer: false, clientAddress: path.remote)
                }
                let events = serverConnection.takeEvents()
                server.handle(events, of: serverConnection)
                serverEvents += events
                for event in events { serverApplication?(serverConnection, event) }
            }
        }
    }

    private func send(_ batch: UnsafeRawBufferPointer, segment: Int, toServer: Bool, clientAddress: QUICSocketAddress) {
        var offset = 0
        while offset < batch.count {
            let length = min(segment, batch.count - offset)
            let packet = Array(batch[offset..<(offset + length)])
            offset += length
            if unreachableClientAddresses.contains(clientAddress)
                || (lossRate > 0 && Double(random.next() % 10_000) / 10_000 < lossRate) {
                droppedPackets += 1
                continue
            }
            let item = InFlight(bytes: packet, deliverAt: now + oneWayDelay, clientAddress: clientAddress)
            if toServer { self.toServer.append(item) } else { toClient.append(item) }
        }
    }

    package enum PairError: Error { case timedOut(line: Int), stalled(String) }
}
