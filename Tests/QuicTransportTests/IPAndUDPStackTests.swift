import Foundation
import Glibc
import NIOCore
import QuicTestSupport
import QuicTransport
import Testing

/// Network.framework's `QUIC(alpn:_:)` with its `UDP` and `IP` entries, and the classic
/// `NWProtocolIP.Options` and `NWProtocolUDP.Options`: what they set on real sockets, and
/// connections over loopback with them.
@Suite("IP and UDP below QUIC", .timeLimit(TestEnvironment.minutes(2)))
struct IPAndUDPStackTests {
    static func option(_ fd: CInt, _ level: CInt, _ name: CInt) -> CInt {
        var value: CInt = -1
        var length = socklen_t(MemoryLayout<CInt>.size)
        #expect(getsockopt(fd, level, name, &value, &length) == 0, "getsockopt(\(level), \(name)): errno \(errno)")
        return value
    }

    /// A listener with the generated certificate, echoing each stream back to its FIN.
    static func echoListener(host: String, _ stack: QUIC) async throws -> (serving: Task<Void, any Error>, port: NWEndpoint.Port, fingerprint: [UInt8]) {
        try await NetworkConnectionTests.runListener(host: host, stack) { connection in
            try await connection.inboundStreams { stream in
                try await stream.send(try await NetworkConnectionTests.readAll(stream), endOfStream: true)
            }
        }
    }

    static func echo(_ text: String, to host: String, port: NWEndpoint.Port, _ stack: QUIC) async throws -> String {
        try await withNetworkConnection(to: .hostPort(host: NWEndpoint.Host(host), port: port)) { stack } _: { connection in
            let stream = try await connection.openStream()
            async let echoed = NetworkConnectionTests.readAll(stream)
            try await stream.send(Data(text.utf8), endOfStream: true)
            return String(decoding: try await echoed, as: UTF8.self)
        }
    }

    /// RFC 9000 §14: QUIC sets Don't Fragment by default; the hop limit and the checksum setting
    /// reach the socket, on IPv4 and on IPv6.
    @Test func theSettingsReachTheSocket() throws {
        var options = QUICSocketOptions()
        let v4 = try #require(QUICReuseportGroup.bind(try SocketAddress(ipAddress: "127.0.0.1", port: 0), count: 1, options: options).first)
        defer { close(v4) }
        #expect(Self.option(v4, CInt(IPPROTO_IP), IP_MTU_DISCOVER) == IP_PMTUDISC_PROBE, "DF by default")
        #expect(Self.option(v4, SOL_SOCKET, SO_NO_CHECK) == 0)

        options.hopLimit = 9
        options.omitsChecksum = true
        options.disablesFragmentation = false
        let tuned = try #require(QUICReuseportGroup.bind(try SocketAddress(ipAddress: "127.0.0.1", port: 0), count: 1, options: options).first)
        defer { close(tuned) }
        #expect(Self.option(tuned, CInt(IPPROTO_IP), IP_TTL) == 9)
        #expect(Self.option(tuned, SOL_SOCKET, SO_NO_CHECK) == 1)
        #expect(Self.option(tuned, CInt(IPPROTO_IP), IP_MTU_DISCOVER) == IP_PMTUDISC_DONT)

        options.addressPreference = .stable
        let v6 = try #require(QUICReuseportGroup.bind(try SocketAddress(ipAddress: "::1", port: 0), count: 1, options: options).first)
        defer { close(v6) }
        #expect(Self.option(v6, CInt(IPPROTO_IPV6), IPV6_UNICAST_HOPS) == 9)
        #expect(Self.option(v6, CInt(IPPROTO_IPV6), IPV6_MTU_DISCOVER) == IPV6_PMTUDISC_DONT)
        #expect(Self.option(v6, CInt(IPPROTO_IPV6), 72 /* IPV6_ADDR_PREFERENCES */) & 0x0002 != 0, "prefer public")
    }

    /// The structured stack and the classic options lower to the same socket settings.
    @Test func theStackAndTheClassicOptionsAgree() {
        let quic = QUIC(alpn: ["x"]) {
            UDP { IP().version(.v6).hopLimit(16).minimumMTU(true).localAddressPreference(.temporary) }.noChecksumPreferred(true)
        }
        let ip = quic.parameters.defaultProtocolStack.internetProtocol as? NWProtocolIP.Options
        #expect(ip?.version == .v6)
        #expect(ip?.hopLimit == 16)
        #expect(ip?.useMinimumMTU == true)
        #expect(ip?.disableFragmentation == true)
        #expect(ip?.localAddressPreference == .temporary)
        #expect((quic.parameters.defaultProtocolStack.transportProtocol as? NWProtocolUDP.Options)?.preferNoChecksum == true)

        let classic = NWParameters.quic(alpn: ["x"])
        let classicIP = classic.defaultProtocolStack.internetProtocol as? NWProtocolIP.Options
        #expect(classicIP?.disableFragmentation == true, "QUIC's default: RFC 9000 §14")
        #expect(classicIP?.hopLimit == 0 && classicIP?.version == .any)
    }

    /// Every modifier on the path of a real connection: the echo comes back over IPv4 with a
    /// hop limit, DF and no UDP checksum (which the kernel's GSO refuses, so such a socket
    /// sends datagram by datagram), and over IPv6 with the minimum MTU.
    @Test func connectionsRunWithEveryModifier() async throws {
        let (serving, port, pin) = try await Self.echoListener(host: "127.0.0.1", QUIC(alpn: ["test"]) { UDP { IP().hopLimit(8) } })
        defer { serving.cancel() }
        let v4 = QUIC(alpn: ["test"]) {
            UDP { IP().version(.v4).hopLimit(3).fragmentationDisabled(true) }.noChecksumPreferred(true)
        }.tls.peerAuthentication(.pinnedSHA256(pin))
        // 200 kB: flights of many packets, which go out in GSO batches unless checksums are off.
        let bulk = String(repeating: "over IPv4 ", count: 20_000)
        #expect(try await within(20) { try await Self.echo(bulk, to: "localhost", port: port, v4) } == bulk)

        let (serving6, port6, pin6) = try await Self.echoListener(host: "::1", QUIC(alpn: ["test"]) { UDP { IP().version(.v6) } })
        defer { serving6.cancel() }
        let v6 = QUIC(alpn: ["test"]) {
            UDP { IP().version(.v6).minimumMTU(true).localAddressPreference(.stable) }
        }.tls.peerAuthentication(.pinnedSHA256(pin6))
        // A payload larger than 1232 bytes crosses in several packets.
        let long = String(repeating: "x", count: 1000)
        #expect(try await within(20) { try await Self.echo(long, to: "::1", port: port6, v6) } == long)
    }

    /// `IP().version(_:)` excludes the other version: the client says which address it lacks,
    /// and a listener refuses an address of the wrong version.
    @Test func aRequiredVersionExcludesTheOther() async throws {
        // /etc/hosts gives localhost an IPv4 address only on these machines; ::1 is IPv6 by itself.
        let onlyV4 = QUIC(alpn: ["test"]) { UDP { IP().version(.v4) } }.tls.peerAuthentication(.none)
        await #expect {
            try await within(20) { try await Self.echo("never", to: "::1", port: 4433, onlyV4) }
        } throws: { error in
            "\(error)".contains("::1 has no IPv4 address")
        }

        let listener = try NetworkListener(for: .hostPort(host: "::1", port: .any)) { QUIC(alpn: ["test"]) { UDP { IP().version(.v4) } } }
        let serving = Task { try await listener.run { _ in } }
        defer { serving.cancel() }
        let failure = try await within(10) { () -> String? in
            for await state in listener.states {
                if case .failed(let error) = state { return "\(error)" }
            }
            return nil
        }
        #expect(failure?.contains("excludes its IP version") == true, "\(failure ?? "no failure")")
    }
}
