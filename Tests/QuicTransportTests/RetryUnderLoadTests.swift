import Logging
import QuicTestSupport
import QuicTransport
import Testing

/// Above `retryThreshold` handshakes in progress, the endpoint makes new clients prove their
/// address with Retry (RFC 9000 §8.1.2), and stops once the count falls: in memory, with real
/// ngtcp2 and GnuTLS on a virtual clock.
@Suite("Retry under load")
struct RetryUnderLoadTests {
    /// The first flight of a new client core at `port`: what an Initial flood is made of.
    static func firstFlight(from port: UInt16, address ip: String = "127.0.0.1", to pair: InMemoryPair) throws -> (address: QUICSocketAddress, datagrams: [[UInt8]]) {
        let address = QUICSocketAddress(ip: ip, port: port)!
        let verification = CertificateVerification.insecure
        let client = try QUICConnectionCore(
            clientWith: InMemoryPair.defaultConfiguration(),
            tls: QUICClientTLS(credentials: try .client(verification: verification), verification: verification, serverName: "localhost", verificationName: "localhost"),
            path: QUICPath(local: address, remote: InMemoryPair.serverAddress), now: pair.now, logger: Logger(label: "test")
        )
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 16)
        defer { scratch.deallocate() }
        var datagrams: [[UInt8]] = []
        _ = client.writePackets(now: pair.now, scratch: scratch) { bytes, segment, _, _ in
            datagrams += stride(from: 0, to: bytes.count, by: segment).map { Array(bytes[$0..<min(bytes.count, $0 + segment)]) }
        }
        return (address, datagrams)
    }

    /// Sends the pair client's first flight to the endpoint and returns what became of each datagram.
    static func sendFirstFlight(of pair: InMemoryPair) -> [QUICEndpointCore.Disposition] {
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 16)
        defer { scratch.deallocate() }
        var dispositions: [QUICEndpointCore.Disposition] = []
        _ = pair.client.writePackets(now: pair.now, scratch: scratch) { bytes, segment, _, _ in
            for start in stride(from: 0, to: bytes.count, by: segment) {
                dispositions.append(pair.inject(toServer: Array(bytes[start..<min(bytes.count, start + segment)])))
            }
        }
        return dispositions
    }

    /// Whether the endpoint made a new connection of any of `dispositions`.
    static func startsAConnection(_ dispositions: [QUICEndpointCore.Disposition]) -> Bool {
        dispositions.contains { if case .delivered(_, _, isNew: true) = $0 { true } else { false } }
    }

    @Test func pastTheThresholdNewClientsAreRetriedAndBelowItAgainTheyAreNot() throws {
        let pair = try InMemoryPair(retryThreshold: 2)
        // Two clients send their first flight and go quiet: two handshakes in progress.
        var halfOpen: [QUICConnectionCore] = []
        for port: UInt16 in [50_001, 50_002] {
            let flight = try Self.firstFlight(from: port, to: pair)
            let dispositions = flight.datagrams.map { pair.inject(toServer: $0, from: flight.address) }
            #expect(Self.startsAConnection(dispositions), "below the threshold a client connects at once: \(dispositions)")
            for case .delivered(let core, _, isNew: true) in dispositions { halfOpen.append(core) }
        }
        // The pair's client is sent a Retry, comes back with its token and completes.
        let first = Self.sendFirstFlight(of: pair)
        #expect(first.contains { if case .answered("retry", _) = $0 { true } else { false } }, "at the threshold: \(first)")
        try pair.run(until: { pair.client.isHandshakeCompleted && pair.serverConnection?.isHandshakeCompleted == true })
        #expect(pair.server.connections.count == 3)
        // The two quiet handshakes end (their idle timeout, say); a new client connects at once.
        for core in halfOpen { pair.server.remove(core) }
        let later = try Self.firstFlight(from: 50_003, to: pair)
        let dispositions = later.datagrams.map { pair.inject(toServer: $0, from: later.address) }
        #expect(Self.startsAConnection(dispositions), "below the threshold again, no Retry: \(dispositions)")
    }

    @Test func aThresholdOfZeroRetriesEveryClient() throws {
        let pair = try InMemoryPair(retryThreshold: 0)
        let flight = try Self.firstFlight(from: 50_001, to: pair)
        let dispositions = flight.datagrams.map { pair.inject(toServer: $0, from: flight.address) }
        #expect(dispositions.contains { if case .answered("retry", _) = $0 { true } else { false } }, "\(dispositions)")
        try pair.run(until: { pair.client.isHandshakeCompleted })
    }
}
