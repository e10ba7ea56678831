import Foundation
import QuicTestSupport
import QuicTransport
import Testing

/// External pre-shared keys (`sec_protocol_options_add_pre_shared_key`, RFC 8446 §4.2.11,
/// RFC 4279): a peer-to-peer app that shares a secret instead of certificates, as Apple's
/// TicTacToe sample does. Over TLS on TCP against GnuTLS's `gnutls-serv` and `gnutls-cli` and
/// OpenSSL's `s_client`; over QUIC between our own client and listener, since no other QUIC
/// stack here (aioquic, ngtcp2's examples, curl) takes an external key.
@Suite("TLS pre-shared keys", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct PreSharedKeyTests {
    static let identity = "app-peer"
    static let key = Data((0..<32).map { UInt8($0 &* 7 &+ 3) })
    static var keyHex: String { key.map { String(format: "%02x", $0) }.joined() }

    /// Adds `key` under `identity` to Security options, as an app does.
    static func add(key: Data, identity: String, to options: sec_protocol_options_t) {
        let keyData = key.withUnsafeBytes { DispatchData(bytes: $0) }
        let identityData = Data(identity.utf8).withUnsafeBytes { DispatchData(bytes: $0) }
        sec_protocol_options_add_pre_shared_key(options, keyData as __DispatchData, identityData as __DispatchData)
    }

    /// TLS options that authenticate with `key` under `identity` and nothing else.
    static func options(key: Data = key, identity: String = identity, maximum: tls_protocol_version_t? = nil) -> NWProtocolTLS.Options {
        let tls = NWProtocolTLS.Options()
        add(key: key, identity: identity, to: tls.securityProtocolOptions)
        if let maximum { sec_protocol_options_set_max_tls_protocol_version(tls.securityProtocolOptions, maximum) }
        return tls
    }

    /// QUIC options for the `psk-echo` protocol that carry `key` under `identity`, if given.
    static func quicOptions(key: Data? = key, identity: String = identity) -> NWProtocolQUIC.Options {
        let options = NWProtocolQUIC.Options(alpn: ["psk-echo"])
        if let key { add(key: key, identity: identity, to: options.securityProtocolOptions) }
        return options
    }

    @Test("a client with the key reaches a certificate-less gnutls-serv, in TLS 1.3 and 1.2, and a line echoes at once")
    func clientWithTheKey() async throws {
        let peer = try await SocketPeers.gnutlsPSKEchoServer(identity: Self.identity, keyHex: Self.keyHex)
        defer { peer.process.stop() }
        for version in [tls_protocol_version_t.TLSv13, .TLSv12] {
            // Certificates would be checked against the system trust store, which would refuse
            // any: the server has none, so only the key can authenticate it.
            let connection = NWConnection(
                host: "127.0.0.1", port: .init(rawValue: peer.port)!, using: NWParameters(tls: Self.options(maximum: version)))
            try await SocketConnectionTests.ready(connection)
            let metadata = try #require(connection.metadata(definition: NWProtocolTLS.definition) as? NWProtocolTLS.Metadata)
            #expect(sec_protocol_metadata_get_negotiated_tls_protocol_version(metadata.securityProtocolMetadata) == version)
            let line = Data("shared secret, TLS \(version)\n".utf8)
            try await connection.send(content: line, isComplete: false)
            let (echoed, ended) = try await connection.receive(minimumIncompleteLength: line.count)
            #expect(echoed == line)
            #expect(!ended)
            connection.cancel()
        }
        #expect(peer.process.standardOutput.contains("PSK"), "gnutls-serv did not report a PSK session: \(peer.process.standardOutput)")
    }

    @Test("a client with a different key, or another identity, fails the handshake with a TLS error")
    func wrongKeyOrIdentity() async throws {
        let peer = try await SocketPeers.gnutlsPSKEchoServer(identity: Self.identity, keyHex: Self.keyHex)
        defer { peer.process.stop() }
        for options in [Self.options(key: Data(repeating: 1, count: 32)), Self.options(identity: "stranger")] {
            let connection = NWConnection(host: "127.0.0.1", port: .init(rawValue: peer.port)!, using: NWParameters(tls: options))
            let outcome = await SocketConnectionTests.failure(of: connection)
            guard case .failed(.tls) = outcome else {
                Issue.record("expected a TLS failure, got \(String(describing: outcome))")
                continue
            }
        }
    }

    @Test("a listener with the key serves gnutls-cli, which checks no certificate; a wrong key is refused")
    func listenerWithTheKey() async throws {
        let parameters = NWParameters(tls: Self.options())
        parameters.requiredLocalEndpoint = .hostPort(host: "127.0.0.1", port: .any)
        let listener = try NWListener(using: parameters)
        listener.newConnectionHandler = { connection in
            connection.start(queue: SocketConnectionTests.queue)
            SocketConnectionTests.echo(on: connection)
        }
        let port = try await SocketConnectionTests.readyPort(listener)
        defer { listener.cancel() }

        let line = "hello over a shared key\n"
        let client = try SocketPeers.gnutlsPSKClient(port: port, identity: Self.identity, keyHex: Self.keyHex, input: line)
        defer { client.stop() }
        #expect(try await client.waitForExit(seconds: 30) == 0, "\(client.standardError)")
        #expect(client.standardOutput.contains(line), "gnutls-cli got back: \(client.standardOutput)")

        // TLS 1.2, where the key exchange is part of the cipher suite: the listener also holds a
        // certificate, and must still choose the key. OpenSSL refuses any certificate here.
        let legacy = try SocketPeers.opensslPSKClient(port: port, identity: Self.identity, keyHex: Self.keyHex, input: line)
        defer { legacy.stop() }
        _ = try await legacy.waitForLine(containing: line.trimmingCharacters(in: .newlines), seconds: 30)
        #expect(legacy.standardError.contains("Protocol version: TLSv1.2"), "\(legacy.standardError)")
        #expect(legacy.standardError.contains("Ciphersuite: ECDHE-PSK"), "\(legacy.standardError)")

        let wrong = try SocketPeers.gnutlsPSKClient(port: port, identity: Self.identity, keyHex: String(repeating: "ab", count: 32), input: line)
        defer { wrong.stop() }
        #expect(try await wrong.waitForExit(seconds: 30) != 0)
        #expect(!wrong.standardOutput.contains(line))
    }

    @Test("QUIC: a tunnel authenticated by the key alone echoes on a stream; a wrong key, or none, fails the handshake")
    func quicTunnel() async throws {
        // The listener holds the key and a self-signed certificate, which the clients' default
        // check (the system trust store) refuses: only the key can open a tunnel.
        let parameters = NWParameters(quic: Self.quicOptions())
        parameters.requiredLocalEndpoint = .hostPort(host: "127.0.0.1", port: .any)
        let listener = try NWListener(using: parameters)
        listener.newConnectionGroupHandler = { group in
            group.newConnectionHandler = { stream in
                stream.start(queue: SocketConnectionTests.queue)
                SocketConnectionTests.echo(on: stream)
            }
            group.start(queue: SocketConnectionTests.queue)
        }
        let port = try await SocketConnectionTests.readyPort(listener)
        defer { listener.cancel() }
        let endpoint = NWEndpoint.hostPort(host: "127.0.0.1", port: .init(rawValue: port)!)

        let group = NWConnectionGroup(with: NWMultiplexGroup(to: endpoint), using: NWParameters(quic: Self.quicOptions()))
        group.start(queue: SocketConnectionTests.queue)
        try await group.waitUntilReady()
        defer { group.cancel() }
        let stream = try #require(NWConnection(from: group))
        try await SocketConnectionTests.ready(stream)
        let line = Data("over QUIC with a shared key\n".utf8)
        try await stream.send(content: line, isComplete: false)
        #expect(try await SocketConnectionTests.receive(line.count, on: stream) == line)

        for options in [Self.quicOptions(key: Data(repeating: 9, count: 32)), Self.quicOptions(key: nil)] {
            let refused = NWConnectionGroup(with: NWMultiplexGroup(to: endpoint), using: NWParameters(quic: options))
            refused.start(queue: SocketConnectionTests.queue)
            await #expect(throws: NWError.self) { try await refused.waitUntilReady() }
            refused.cancel()
        }
    }
}
