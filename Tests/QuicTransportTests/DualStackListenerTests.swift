import Foundation
import NIOCore
import QuicTestSupport
@testable import QuicTransport
import Testing

/// Where a listener listens: `localhost` on both loopback addresses, `::` and the default on one
/// dual-stack socket, over real UDP with real TLS. Browsers try `localhost` as `::1` first
/// (RFC 6761 §6.3), so a server there must answer on both.
@Suite("Dual-stack listeners", .timeLimit(TestEnvironment.minutes(2)))
struct DualStackListenerTests {
    @Test func listeningAddressesFollowTheHostAsBrowsersResolveIt() throws {
        func addresses(_ host: String, _ version: QUICSocketOptions.IPVersion = .any) throws -> [String] {
            var options = QUICSocketOptions()
            options.ipVersion = version
            return try QUICHostResolver.listeningAddresses(host: host, port: 4433, options: options).map { QUICSocketAddress(nio: $0).description }
        }
        // Both loopbacks, whatever /etc/hosts says (this machine's maps localhost to 127.0.0.1 only).
        #expect(try addresses("localhost") == ["[::1]:4433", "127.0.0.1:4433"])
        #expect(try addresses("app.localhost") == ["[::1]:4433", "127.0.0.1:4433"])
        #expect(try addresses("LocalHost", .v4) == ["127.0.0.1:4433"])
        #expect(try addresses("::") == ["[::]:4433"])
        #expect(try addresses("0.0.0.0") == ["0.0.0.0:4433"])
        #expect(throws: (any Error).self) { try addresses("::1", .v4) }
    }

    @Test func onlyTheUnspecifiedIPv6AddressIsDualStack() throws {
        let options = QUICSocketOptions()
        var v6Only = QUICSocketOptions()
        v6Only.ipVersion = .v6
        #expect(options.isDualStack(try #require(QUICSocketAddress(ip: "::", port: 0))))
        #expect(!options.isDualStack(try #require(QUICSocketAddress(ip: "::1", port: 0))))
        #expect(!options.isDualStack(try #require(QUICSocketAddress(ip: "0.0.0.0", port: 0))))
        #expect(!v6Only.isDualStack(try #require(QUICSocketAddress(ip: "::", port: 0))))
        #expect(try #require(QUICSocketAddress(ip: "::ffff:127.0.0.1", port: 1)).isIPv4Mapped)
        #expect(try #require(QUICSocketAddress(ip: "::1", port: 1)).isIPv4Mapped == false)
        #expect(try #require(QUICSocketAddress(ip: "127.0.0.1", port: 1)).isIPv4Mapped == false)
    }

    /// Apple's listener without a local endpoint serves both IP versions; ours binds `::` with
    /// one dual-stack socket, and sees IPv4 clients as v4-mapped addresses.
    @Test func aListenerWithoutAnAddressServesBothIPVersions() async throws {
        let server = try await LoopbackServer(host: nil)
        let peers = Recorder<String>()
        let groups = server.groups
        Task {
            for await group in groups {
                peers.append(group.remoteEndpoint.map { "\($0)" } ?? "?")
                Task { await LoopbackServer.echo(group) }
            }
        }
        for host in ["127.0.0.1", "::1", "localhost"] {
            let group = server.makeClient(host: host)
            try await startAndWaitUntilReady(group)
            #expect(try await roundTrip(Data(host.utf8), on: group) == Data(host.utf8), "over \(host)")
            group.cancel()
        }
        _ = await eventually(within: 10) { peers.values.count == 3 }
        #expect(peers.values.first?.hasPrefix("[::ffff:127.0.0.1]:") == true, "\(peers.values)")
        #expect(peers.values.dropFirst().first?.hasPrefix("[::1]:") == true, "\(peers.values)")
    }

    @Test func localhostListensOnBothLoopbacksOnOnePort() async throws {
        let server = try await LoopbackServer(host: "localhost", workers: 2)
        server.echo()
        for host in ["::1", "127.0.0.1"] {
            let group = server.makeClient(host: host)
            try await startAndWaitUntilReady(group)
            #expect(try await roundTrip(Data(host.utf8), on: group) == Data(host.utf8), "over \(host)")
            group.cancel()
        }
    }

    /// Retry tokens bind the client's address, and per-address limits count clients: both must
    /// treat an IPv4 client seen through the dual-stack socket as that IPv4 address, with two
    /// workers steering its packets.
    @Test func retryAndPerAddressLimitsHoldForV4MappedClients() async throws {
        let server = try await LoopbackServer(host: "::", workers: 2, maximumTunnelsPerAddress: 1) {
            $0.requiresAddressValidation = true
        }
        server.echo()
        let first = server.makeClient(host: "127.0.0.1")
        try await startAndWaitUntilReady(first)
        #expect(try await roundTrip(Data("after retry".utf8), on: first) == Data("after retry".utf8))
        // The same IPv4 client again: over its share.
        let second = server.makeClient(host: "127.0.0.1")
        second.start(queue: DispatchQueue(label: "test.second"))
        let refused = await eventually(within: 20) {
            if case .failed = second.state { return true }
            return false
        }
        #expect(refused, "a second tunnel from 127.0.0.1 was let in past the limit of one: \(second.state)")
        // Another client (IPv6 loopback) still has its own share.
        let other = server.makeClient(host: "::1")
        try await startAndWaitUntilReady(other)
        #expect(try await roundTrip(Data("v6".utf8), on: other) == Data("v6".utf8))
        for group in [first, second, other] { group.cancel() }
    }
}
