import QuicTestSupport
import QuicTransport
import Testing

/// `maximumConnections` and a client's share count the connections a server serves. One that is
/// over lingers for its closing or draining period (RFC 9000 §10.2) to answer or swallow late
/// packets, but it serves nothing, so it gives its place back at once. In memory, with real
/// ngtcp2 and GnuTLS on a virtual clock.
@Suite("Connection limit")
struct ConnectionLimitTests {
    @Test func aClosedConnectionGivesBackItsPlaceWhileItDrains() throws {
        let pair = try InMemoryPair(maximumConnections: 1, maximumConnectionsPerAddress: 1)
        try pair.run(until: { pair.client.isHandshakeCompleted && pair.serverConnection?.isHandshakeCompleted == true })

        // The one place is taken: another client is refused.
        let early = try RetryUnderLoadTests.firstFlight(from: 50_001, address: "127.0.0.2", to: pair)
        let refused = early.datagrams.map { pair.inject(toServer: $0, from: early.address) }
        #expect(refused.contains { if case .answered("connection limit reached", _) = $0 { true } else { false } }, "\(refused)")

        // The client closes; the server's connection drains for three PTOs and stays in memory.
        pair.client.close(applicationErrorCode: 0, reason: "done", now: pair.now)
        try pair.run(until: {
            if case .draining = pair.serverConnection?.state { true } else { false }
        })
        #expect(pair.server.connections.count == 1, "a draining connection still routes its packets")

        // Meanwhile a new client gets the place, and one from the same address needs no Retry:
        // the draining connection no longer counts against its client's share either.
        let late = try RetryUnderLoadTests.firstFlight(from: 50_002, to: pair)
        let accepted = late.datagrams.map { pair.inject(toServer: $0, from: late.address) }
        #expect(RetryUnderLoadTests.startsAConnection(accepted), "\(accepted)")
        #expect(pair.server.connections.count == 2)

        // Removing the drained connection later gives nothing back twice: the limit still holds.
        pair.server.remove(try #require(pair.serverConnection))
        let third = try RetryUnderLoadTests.firstFlight(from: 50_003, address: "127.0.0.3", to: pair)
        let refusedAgain = third.datagrams.map { pair.inject(toServer: $0, from: third.address) }
        #expect(refusedAgain.contains { if case .answered("connection limit reached", _) = $0 { true } else { false } }, "\(refusedAgain)")
    }
}
