import QuicTestSupport
import QuicTransport
import Testing

/// Client connection migration (RFC 9000 §9) in memory: real ngtcp2 and GnuTLS, a link that
/// knows which client address each datagram belongs to, and a virtual clock.
@Suite("Connection migration in memory")
struct MigrationTests {
    static let newClientAddress = QUICSocketAddress(ip: "127.0.0.1", port: 50_001)!

    /// Sends `count` bytes on a new stream and starts the server echoing; returns the stream.
    func startEcho(_ pair: InMemoryPair, count: Int) throws -> (stream: Int64, payload: [UInt8]) {
        pair.serverApplication = QUICConnectionCoreTests.echo
        let stream = try #require(try pair.client.openStream(bidirectional: true))
        let payload = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try payload.withUnsafeBytes { try pair.client.send(streamID: stream, bytes: $0, fin: true, token: nil) }
        return (stream, payload)
    }

    @Test func migrationWaitsForTheConfirmedHandshake() throws {
        let pair = try InMemoryPair()
        try pair.run(until: { pair.client.isHandshakeCompleted })
        #expect(!pair.clientEvents.contains(.handshakeConfirmed))
        let refused = #expect(throws: QUICMigrationError.self) { try pair.client.migrate(to: Self.newClientAddress, now: pair.now) }
        #expect(refused?.code == .notAllowed)
        try pair.run(until: { pair.clientEvents.contains(.handshakeConfirmed) })
        try pair.client.migrate(to: Self.newClientAddress, now: pair.now)
    }

    /// The client validates the new path, moves to it mid-transfer, and every byte still arrives;
    /// the server sees the new address too.
    @Test func validatedMigrationCarriesTheTransferOver() throws {
        let pair = try InMemoryPair()
        try pair.run(until: { pair.clientEvents.contains(.handshakeConfirmed) })
        let (stream, payload) = try startEcho(pair, count: 300_000)
        pair.advance(by: 15_000_000)
        try pair.client.migrate(to: Self.newClientAddress, now: pair.now)
        let newPath = QUICPath(local: Self.newClientAddress, remote: InMemoryPair.serverAddress)
        try pair.run(until: { pair.clientEvents.contains(.pathValidated(newPath, succeeded: true)) })
        #expect(pair.client.path == newPath)
        #expect(try pair.readClientStreamToEnd(stream) == payload)
        #expect(pair.serverConnection?.path.remote == Self.newClientAddress)
        #expect(pair.client.lifetimeDataTransferReport.pathChanges == 1)
        #expect(pair.serverConnection?.lifetimeDataTransferReport.pathChanges == 1)
    }

    /// ngtcp2 resets its RTT estimate when the client moves to a validated path (RFC 9000
    /// §9.4), and 0.12 would then pace at the initial RTT (333 ms), about 26 ms per full
    /// packet, until the new path's first sample. The core paces from that sample, as it does
    /// after the handshake: on a 2 ms round trip, 20 kB echoed right after the move come back
    /// within a few round trips.
    @Test func pacingAfterAMigrationWaitsForTheNewPathsFirstRTTSample() throws {
        let pair = try InMemoryPair()
        pair.oneWayDelay = 1_000_000
        try pair.run(until: { pair.clientEvents.contains(.handshakeConfirmed) })
        pair.advance(by: 50_000_000)
        try pair.client.migrate(to: Self.newClientAddress, now: pair.now)
        let newPath = QUICPath(local: Self.newClientAddress, remote: InMemoryPair.serverAddress)
        try pair.run(until: { pair.clientEvents.contains(.pathValidated(newPath, succeeded: true)) })
        let start = pair.now
        let (stream, payload) = try startEcho(pair, count: 20_000)
        #expect(try pair.readClientStreamToEnd(stream) == payload)
        let elapsed = pair.now - start
        #expect(elapsed <= 10_000_000, "the echo took \(elapsed / 1000) µs after the move, more than five round trips")
    }

    /// A new path that never answers fails validation; the connection stays where it was and the
    /// transfer finishes there.
    @Test func unreachablePathFailsValidationAndTheConnectionStays() throws {
        let pair = try InMemoryPair()
        pair.unreachableClientAddresses = [Self.newClientAddress]
        try pair.run(until: { pair.clientEvents.contains(.handshakeConfirmed) })
        let (stream, payload) = try startEcho(pair, count: 100_000)
        try pair.client.migrate(to: Self.newClientAddress, now: pair.now)
        let newPath = QUICPath(local: Self.newClientAddress, remote: InMemoryPair.serverAddress)
        try pair.run(until: { pair.clientEvents.contains(.pathValidated(newPath, succeeded: false)) })
        #expect(pair.client.path.local == InMemoryPair.clientAddress)
        #expect(pair.client.closeReason == nil)
        #expect(try pair.readClientStreamToEnd(stream) == payload)
        #expect(pair.client.lifetimeDataTransferReport.pathChanges == 0)
    }
}
