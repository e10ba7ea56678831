import Foundation
import QuicTestSupport
import QuicTransport
import Testing

/// Every kind of endpoint a QUIC group or listener may be given: addresses as `.ipv4` and
/// `.ipv6` hosts, URLs, and Unix-domain paths, which QUIC cannot use.
@Suite("Endpoints of every kind", .timeLimit(TestEnvironment.minutes(2)))
struct NWEndpointTargetTests {
    static func echo(through endpoint: NWEndpoint, trusting server: LoopbackServer) async throws -> String {
        try await echo(through: endpoint, pinning: server.certificate)
    }

    /// A round trip on a new tunnel to `endpoint` that trusts `certificate` by pin.
    static func echo(through endpoint: NWEndpoint, pinning certificate: SelfSignedCertificate) async throws -> String {
        let options = NWProtocolQUIC.Options(alpn: ["quic-echo"])
        options.tls.certificateVerification = .pinnedSHA256(certificate.sha256Fingerprint)
        let group = NWConnectionGroup(with: NWMultiplexGroup(to: endpoint), using: NWParameters(quic: options))
        try await startAndWaitUntilReady(group)
        defer { group.cancel() }
        return String(decoding: try await roundTrip(Data("to \(endpoint)".utf8), on: group), as: UTF8.self)
    }

    /// A listener bound through `.ipv4(.loopback)` and `.ipv6(.loopback)` hosts, and tunnels to
    /// them through the same hosts; the path reports its endpoints as addresses.
    @Test func addressHostsListenAndConnect() async throws {
        let v4 = try await LoopbackServer(host: IPv4Address.loopback.debugDescription)
        v4.echo()
        let toV4 = NWEndpoint.hostPort(host: .ipv4(.loopback), port: v4.port)
        #expect(try await Self.echo(through: toV4, trusting: v4) == "to 127.0.0.1:\(v4.port)")

        let options = NWProtocolQUIC.Options(alpn: ["quic-echo"])
        let certificate = try SelfSignedCertificate.generate()
        options.tls.identity = certificate
        let parameters = NWParameters(quic: options)
        parameters.requiredLocalEndpoint = .hostPort(host: .ipv6(.loopback), port: .any)
        let listener = try NWListener(using: parameters)
        let groups = listener.connectionGroups
        Task { for await group in groups { Task { await LoopbackServer.echo(group) } } }
        defer { listener.cancel() }
        #expect(try await NWParametersMembersTests.settledState(of: listener) == .ready)
        let port = try #require(listener.port)

        let clientOptions = NWProtocolQUIC.Options(alpn: ["quic-echo"])
        clientOptions.tls.certificateVerification = .pinnedSHA256(certificate.sha256Fingerprint)
        let group = NWConnectionGroup(
            with: NWMultiplexGroup(to: .hostPort(host: .ipv6(.loopback), port: port)), using: NWParameters(quic: clientOptions)
        )
        try await startAndWaitUntilReady(group)
        defer { group.cancel() }
        #expect(try await roundTrip(Data("v6".utf8), on: group) == Data("v6".utf8))
        #expect(group.currentPath?.remoteEndpoint == .hostPort(host: .ipv6(.loopback), port: port))
        guard case .hostPort(.ipv6(let local), _)? = group.currentPath?.localEndpoint else {
            Issue.record("the local endpoint is not an IPv6 address: \(String(describing: group.currentPath?.localEndpoint))")
            return
        }
        #expect(local.isLoopback)

        // A URL with an IPv6 literal, bracketed (RFC 3986 §3.2.2).
        let url = try #require(URL(string: "https://[::1]:\(port)"))
        #expect(try await Self.echo(through: .url(url), pinning: certificate) == "to \(url.absoluteString)")
    }

    /// A `.url` endpoint connects to its host and port.
    @Test func urlEndpointsConnect() async throws {
        let server = try await LoopbackServer()
        server.echo()
        let url = try #require(URL(string: "https://127.0.0.1:\(server.port)/ignored/path"))
        #expect(try await Self.echo(through: .url(url), trusting: server) == "to \(url.absoluteString)")
        let byName = try #require(URL(string: "https://localhost:\(server.port)"))
        #expect(try await Self.echo(through: .url(byName), trusting: server).hasPrefix("to https://localhost"))
    }

    /// A `.unix` endpoint, or a URL with no host or port to use, fails the group or listener
    /// at start, saying why.
    @Test func endpointsQUICCannotUseFailClearly() async throws {
        func failure(of endpoint: NWEndpoint) async throws -> String {
            let group = NWConnectionGroup(with: NWMultiplexGroup(to: endpoint), using: .quic(alpn: ["x"]))
            let states = group.states
            group.start(queue: DispatchQueue(label: "test.unix"))
            return try await within(10) { () -> String in
                for await state in states { if case .failed(let error) = state { return "\(error)" } }
                return "no failure"
            }
        }
        let unix = try await failure(of: .unix(path: "/tmp/echo.sock"))
        #expect(unix.contains("QUIC runs over UDP/IP") && unix.contains("/tmp/echo.sock"), "\(unix)")
        let noPort = try await failure(of: .url(URL(string: "gopher://example.net")!))
        #expect(noPort.contains("names no port"), "\(noPort)")

        let parameters = NWParameters.quic(alpn: ["x"])
        parameters.requiredLocalEndpoint = .unix(path: "/tmp/listen.sock")
        let listener = try NWListener(using: parameters)
        defer { listener.cancel() }
        let listenerState = try await NWParametersMembersTests.settledState(of: listener)
        #expect(NWParametersMembersTests.text(listenerState).contains("QUIC runs over UDP/IP"), "\(listenerState)")
    }
}
