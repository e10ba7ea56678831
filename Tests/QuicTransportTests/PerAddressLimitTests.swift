import QuicTestSupport
import QuicTransport
import Testing

/// `maximumConnectionsPerAddress`: one client's share of the server, counted only once its
/// address is proven (a Retry token or a completed handshake, RFC 9000 §8.1), so that Initials
/// from spoofed addresses cannot use up someone else's share. In memory, with real ngtcp2 and
/// GnuTLS on a virtual clock; `QuicEchoInteropTests` checks the refusal over loopback.
@Suite("Per-address connection limit")
struct PerAddressLimitTests {
    @Test func clientsAreIPv4AddressesAndIPv6Slash64s() {
        func client(_ ip: String, _ port: UInt16 = 443) -> QUICClientAddress { QUICSocketAddress(ip: ip, port: port)!.client }
        #expect(client("192.0.2.1", 1) == client("192.0.2.1", 2), "the port does not matter")
        #expect(client("192.0.2.1") != client("192.0.2.2"))
        #expect(client("2001:db8::1") == client("2001:db8::ffff:2"), "one /64 is one client")
        #expect(client("2001:db8::1") != client("2001:db8:0:1::1"), "another /64 is another")
        #expect(client("::ffff:192.0.2.1") == client("192.0.2.1"), "an IPv4-mapped address is its IPv4 address")
        #expect(client("::ffff:192.0.2.1") != client("::1"))
    }

    @Test func handshakesThatNeverCompleteDoNotUseUpAClientsShare() throws {
        let pair = try InMemoryPair(maximumConnectionsPerAddress: 1)
        // Three first flights "from" the pair client's address go quiet, as spoofed ones would.
        var halfOpen: [QUICConnectionCore] = []
        for port: UInt16 in [50_001, 50_002, 50_003] {
            let flight = try RetryUnderLoadTests.firstFlight(from: port, to: pair)
            let dispositions = flight.datagrams.map { pair.inject(toServer: $0, from: flight.address) }
            #expect(RetryUnderLoadTests.startsAConnection(dispositions), "an unproven address counts nothing: \(dispositions)")
            for case .delivered(let core, _, isNew: true) in dispositions { halfOpen.append(core) }
        }
        // The real client at that address still gets in, without a Retry.
        let first = RetryUnderLoadTests.sendFirstFlight(of: pair)
        #expect(RetryUnderLoadTests.startsAConnection(first), "\(first)")
        try pair.run(until: { pair.client.isHandshakeCompleted && pair.serverConnection?.isHandshakeCompleted == true })
        // Its completed handshake used the share: the next client from there must prove itself first.
        let next = try RetryUnderLoadTests.firstFlight(from: 50_004, to: pair)
        let retried = next.datagrams.map { pair.inject(toServer: $0, from: next.address) }
        #expect(retried.contains { if case .answered("retry", _) = $0 { true } else { false } }, "\(retried)")
        // Another address is another client.
        let other = try RetryUnderLoadTests.firstFlight(from: 50_005, address: "127.0.0.2", to: pair)
        let otherDispositions = other.datagrams.map { pair.inject(toServer: $0, from: other.address) }
        #expect(RetryUnderLoadTests.startsAConnection(otherDispositions), "\(otherDispositions)")
        // Once the proven connection is gone, the share is free again.
        pair.server.remove(try #require(pair.serverConnection))
        let after = try RetryUnderLoadTests.firstFlight(from: 50_006, to: pair)
        let afterDispositions = after.datagrams.map { pair.inject(toServer: $0, from: after.address) }
        #expect(RetryUnderLoadTests.startsAConnection(afterDispositions), "\(afterDispositions)")
        for core in halfOpen { pair.server.remove(core) }
    }
}
