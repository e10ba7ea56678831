import Foundation
import NIOConcurrencyHelpers
import QuicTestSupport
import QuicTransport
import Testing

/// `NWConnection` and `NWListener` over TCP, TLS over TCP and UDP, on loopback against Python's
/// socketserver and ssl and GnuTLS's gnutls-serv.
@Suite("TCP, TLS and UDP connections", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct SocketConnectionTests {
    static let queue = DispatchQueue(label: "socket-tests")

    /// Starts `connection` and waits for `.ready`, or throws its failure.
    static func ready(_ connection: NWConnection) async throws {
        connection.start(queue: queue)
        try await connection.waitUntilReady()
    }

    /// The final state of a connection expected to fail.
    static func failure(of connection: NWConnection) async -> NWConnection.State? {
        let states = connection.states
        connection.start(queue: queue)
        var last: NWConnection.State?
        for await state in states { last = state }
        return last
    }

    /// Receives until `count` bytes have arrived, through the handler API.
    static func receive(_ count: Int, on connection: NWConnection) async throws -> Data {
        var received = Data()
        while received.count < count {
            let (content, isComplete): (Data?, Bool) = try await withCheckedThrowingContinuation { continuation in
                connection.receive(minimumIncompleteLength: 1, maximumLength: 65_536) { content, _, isComplete, error in
                    if let error { continuation.resume(throwing: error) } else { continuation.resume(returning: (content, isComplete)) }
                }
            }
            if let content { received.append(content) }
            if isComplete { break }
        }
        return received
    }

    static func payload(_ count: Int) -> Data { Data((0..<count).map { _ in UInt8.random(in: 0...255) }) }

    static func endpoint(_ port: UInt16) -> NWEndpoint { .hostPort(host: "127.0.0.1", port: .init(rawValue: port)!) }

    @Test("TCP: a large payload echoes byte for byte, up to the server's FIN")
    func tcpEcho() async throws {
        let peer = try await SocketPeers.tcpEcho()
        defer { peer.process.stop() }
        let tcp = NWProtocolTCP.Options()
        tcp.noDelay = true
        tcp.enableKeepalive = true
        tcp.keepaliveIdle = 30
        let connection = NWConnection(to: Self.endpoint(peer.port), using: NWParameters(tls: nil, tcp: tcp))
        try await Self.ready(connection)
        let payload = Self.payload(4 << 20)
        // Finishing `.defaultStream` sends FIN; the echo server answers with its own.
        connection.send(content: payload, contentContext: .defaultStream, isComplete: true, completion: .idempotent)
        let echoed = try await connection.receiveMessage()
        #expect(echoed == payload)
        #expect(connection.metadata(definition: NWProtocolTCP.definition) is NWProtocolTCP.Metadata)
        #expect(connection.metadata(definition: NWProtocolQUIC.definition) == nil)
        connection.cancel()
    }

    @Test("TCP: a cancelled async receive throws ECANCELED and loses no bytes")
    func tcpAsyncCancellation() async throws {
        let peer = try await SocketPeers.tcpEcho()
        defer { peer.process.stop() }
        let connection = NWConnection(to: Self.endpoint(peer.port), using: .tcp)
        try await Self.ready(connection)
        let waiting = Task { try await connection.receive(minimumIncompleteLength: 1, maximumLength: 100) }
        try await Task.sleep(for: .milliseconds(100))
        waiting.cancel()
        await #expect(throws: NWError.posix(.ECANCELED)) { try await waiting.value }
        try await connection.send(content: Data("after".utf8), isComplete: false)
        let (content, _) = try await connection.receive(minimumIncompleteLength: 5, maximumLength: 100)
        #expect(content == Data("after".utf8))
        connection.cancel()
    }

    @Test("TCP: nothing listening fails with ECONNREFUSED")
    func tcpRefused() async throws {
        let port = try SocketPeers.freeTCPPort()
        let connection = NWConnection(to: Self.endpoint(port), using: .tcp)
        #expect(await Self.failure(of: connection) == .failed(.posix(.ECONNREFUSED)))
    }

    @Test("TLS: against gnutls-serv, the CA verifies, ALPN is agreed and lines echo")
    func tlsWithGnuTLS() async throws {
        let authority = try TestCertificateAuthority()
        let peer = try await SocketPeers.gnutlsEchoServer(certificate: authority.leafCertificate, key: authority.leafKey, alpn: "ctl/1")
        defer { peer.process.stop() }
        let tls = NWProtocolTLS.Options()
        tls.tls.certificateVerification = .caFile(authority.caCertificate)
        tls.tls.serverName = "localhost"
        sec_protocol_options_add_tls_application_protocol(tls.securityProtocolOptions, "ctl/1")
        let connection = NWConnection(to: Self.endpoint(peer.port), using: NWParameters(tls: tls))
        try await Self.ready(connection)
        let metadata = try #require(connection.metadata(definition: NWProtocolTLS.definition) as? NWProtocolTLS.Metadata)
        let alpn = sec_protocol_metadata_get_negotiated_protocol(metadata.securityProtocolMetadata).map { String(cString: $0) }
        #expect(alpn == "ctl/1")
        #expect(sec_protocol_metadata_get_negotiated_tls_protocol_version(metadata.securityProtocolMetadata) == .TLSv13)
        let lines = Data((0..<200).map { "line \($0) of the control channel\n" }.joined().utf8)
        try await connection.send(content: lines, isComplete: false)
        #expect(try await Self.receive(lines.count, on: connection) == lines)
        connection.cancel()
    }

    @Test("TLS: a large payload echoes byte for byte through Python's ssl, TLS 1.2 as well as 1.3")
    func tlsEchoWithPython() async throws {
        let authority = try TestCertificateAuthority()
        let peer = try await SocketPeers.tlsEcho(certificate: authority.leafCertificate, key: authority.leafKey, alpn: "ctl/1")
        defer { peer.process.stop() }
        for version in [tls_protocol_version_t.TLSv12, .TLSv13] {
            let tls = NWProtocolTLS.Options()
            tls.tls.certificateVerification = .caFile(authority.caCertificate)
            sec_protocol_options_set_max_tls_protocol_version(tls.securityProtocolOptions, version)
            sec_protocol_options_add_tls_application_protocol(tls.securityProtocolOptions, "ctl/1")
            let connection = NWConnection(host: "localhost", port: .init(rawValue: peer.port)!, using: NWParameters(tls: tls))
            try await Self.ready(connection)
            let metadata = try #require(connection.metadata(definition: NWProtocolTLS.definition) as? NWProtocolTLS.Metadata)
            #expect(sec_protocol_metadata_get_negotiated_tls_protocol_version(metadata.securityProtocolMetadata) == version)
            let payload = Self.payload(2 << 20)
            // `.defaultStream` ends with close_notify and FIN; the server then finishes too.
            connection.send(content: payload, contentContext: .defaultStream, isComplete: true, completion: .idempotent)
            #expect(try await connection.receiveMessage() == payload)
            connection.cancel()
        }
    }

    @Test("TLS: an unknown issuer fails the handshake; a verify block that pins the leaf passes, and lines echo")
    func tlsVerification() async throws {
        let authority = try TestCertificateAuthority()
        let peer = try await SocketPeers.gnutlsEchoServer(certificate: authority.leafCertificate, key: authority.leafKey, alpn: "ctl/1")
        defer { peer.process.stop() }
        // The system trust store does not know the test CA.
        let refused = NWConnection(host: "localhost", port: .init(rawValue: peer.port)!, using: .tls)
        let outcome = await Self.failure(of: refused)
        guard case .failed(.tls) = outcome else {
            Issue.record("expected a TLS failure, got \(String(describing: outcome))")
            return
        }
        // Pinned through Security's verify block, as an app does.
        let leaf = try PortedDER.certificate(inPEMFile: authority.leafCertificate)
        let tls = NWProtocolTLS.Options()
        let sawLeaf = NIOLockedValueBox(false)
        sec_protocol_options_set_verify_block(tls.securityProtocolOptions, { _, trust, complete in
            let chain = SecTrustCopyCertificateChain(sec_trust_copy_ref(trust).takeRetainedValue()) as? [SecCertificate] ?? []
            let matches = chain.first.map { SecCertificateCopyData($0) == leaf } ?? false
            sawLeaf.withLockedValue { $0 = matches }
            complete(matches)
        }, Self.queue)
        let pinned = NWConnection(host: "localhost", port: .init(rawValue: peer.port)!, using: NWParameters(tls: tls))
        try await Self.ready(pinned)
        #expect(sawLeaf.withLockedValue { $0 })
        // Records flow once the block has answered. The echo must come on its own, while the
        // connection is open: gnutls-serv sends two session tickets first, and a reply held
        // behind them would only surface with the server's close_notify, 50 s later.
        let line = Data("pinned through the verify block\n".utf8)
        try await pinned.send(content: line, isComplete: false)
        let (echoed, ended) = try await pinned.receive(minimumIncompleteLength: line.count)
        #expect(echoed == line)
        #expect(!ended, "the echo came only with the end of the connection")
        pinned.cancel()
    }

    @Test("TLS listener: Python's ssl client verifies it, agrees ALPN and gets its bytes back")
    func tlsListenerWithPythonClient() async throws {
        let authority = try TestCertificateAuthority()
        let tls = NWProtocolTLS.Options()
        let identity = try #require(sec_identity_create(certificateChainPEMFile: authority.leafCertificate, privateKeyPEMFile: authority.leafKey))
        sec_protocol_options_set_local_identity(tls.securityProtocolOptions, identity)
        sec_protocol_options_add_tls_application_protocol(tls.securityProtocolOptions, "ctl/1")
        let parameters = NWParameters(tls: tls)
        parameters.requiredLocalEndpoint = .hostPort(host: "127.0.0.1", port: .any)
        let listener = try NWListener(using: parameters)
        listener.newConnectionHandler = { connection in
            connection.start(queue: Self.queue)
            Self.echo(on: connection)
        }
        let port = try await Self.readyPort(listener)
        defer { listener.cancel() }
        let client = try SocketPeers.tlsClient(port: port, caFile: authority.caCertificate, alpn: "ctl/1", size: 1 << 20)
        defer { client.stop() }
        #expect(try await client.waitForExit(seconds: 30) == 0, "\(client.standardError)")
        #expect(client.standardOutput.contains("ALPN ctl/1"))
        #expect(client.standardOutput.contains("ECHO OK"), "\(client.standardOutput)")
    }

    @Test("UDP: each send is one datagram and each receiveMessage one datagram")
    func udpEcho() async throws {
        let peer = try await SocketPeers.udpEcho()
        defer { peer.process.stop() }
        let connection = NWConnection(to: Self.endpoint(peer.port), using: .udp)
        try await Self.ready(connection)
        for text in ["one", "two, longer", "3"] {
            connection.send(content: Data(text.utf8), completion: .idempotent)
        }
        var echoed: [String] = []
        for _ in 0..<3 {
            let datagram: Data = try await withCheckedThrowingContinuation { continuation in
                connection.receiveMessage { content, context, isComplete, error in
                    if let error { return continuation.resume(throwing: error) }
                    #expect(isComplete)
                    #expect(context?.protocolMetadata(definition: NWProtocolUDP.definition) is NWProtocolUDP.Metadata)
                    continuation.resume(returning: content ?? Data())
                }
            }
            echoed.append(String(decoding: datagram, as: UTF8.self))
        }
        #expect(echoed == ["one", "two, longer", "3"])
        connection.cancel()
    }

    @Test("UDP listener: one connection per remote address echoes a Python client's datagrams")
    func udpListener() async throws {
        let parameters = NWParameters.udp
        parameters.requiredLocalEndpoint = .hostPort(host: "127.0.0.1", port: .any)
        let listener = try NWListener(using: parameters)
        let accepted = NIOLockedValueBox(0)
        listener.newConnectionHandler = { connection in
            accepted.withLockedValue { $0 += 1 }
            connection.start(queue: Self.queue)
            Self.echoDatagrams(on: connection)
        }
        let port = try await Self.readyPort(listener)
        defer { listener.cancel() }
        let client = try SocketPeers.udpClient(port: port, datagrams: ["alpha", "beta", "gamma"])
        defer { client.stop() }
        #expect(try await client.waitForExit(seconds: 20) == 0, "\(client.standardError)")
        #expect(client.standardOutput.split(separator: "\n") == ["ECHO alpha", "ECHO beta", "ECHO gamma", "DONE"])
        #expect(accepted.withLockedValue { $0 } == 1)
    }

    @Test("DTLS is refused at start with a TLS error")
    func dtlsRefused() async throws {
        let connection = NWConnection(to: Self.endpoint(9), using: .dtls)
        guard case .failed(.tls) = await Self.failure(of: connection) else {
            Issue.record("DTLS was not refused")
            return
        }
    }

    static func readyPort(_ listener: NWListener) async throws -> UInt16 {
        let states = listener.states
        listener.start(queue: queue)
        for await state in states {
            if state == .ready, let port = listener.port { return port.rawValue }
            if case .failed(let error) = state { throw error }
        }
        throw SetupError("the listener ended before it was ready")
    }

    /// Echoes everything a connection receives until its peer finishes.
    static func echo(on connection: NWConnection) {
        connection.receive(minimumIncompleteLength: 1, maximumLength: 65_536) { content, _, isComplete, error in
            guard error == nil else { return }
            if let content { connection.send(content: content, isComplete: false, completion: .idempotent) }
            if isComplete { connection.cancel() } else { echo(on: connection) }
        }
    }

    static func echoDatagrams(on connection: NWConnection) {
        connection.receiveMessage { content, _, _, error in
            guard error == nil, let content else { return }
            connection.send(content: content, completion: .idempotent)
            echoDatagrams(on: connection)
        }
    }
}

/// DER from PEM, for pins.
enum PortedDER {
    static func certificate(inPEMFile path: String) throws -> Data {
        let pem = try String(contentsOfFile: path, encoding: .utf8)
        let body = pem.components(separatedBy: "-----BEGIN CERTIFICATE-----")[1].components(separatedBy: "-----END CERTIFICATE-----")[0]
        return try #require(Data(base64Encoded: body.filter { !$0.isWhitespace }))
    }
}
