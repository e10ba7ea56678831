import Foundation
import QuicTestSupport
import QuicTransport
import Testing

/// Apps that take their TLS identity from a PKCS #12 file with `SecPKCS12Import`, against real
/// peers: quic-echo's and aioquic's echo servers for the clients, aioquic's echo client for the
/// listener.
@Suite("PKCS #12 identities in ported apps", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct IdentityPortedAppTests {
    typealias Peer = PortedAppTests.Peer

    @Test(arguments: Peer.allCases) func theIdentityClientPinsItsServer(peer: Peer) async throws {
        let server = try await PortedAppTests.EchoPeer.start(peer)
        defer { server.stop() }
        let file = try PKCS12File.make(passphrase: "client pass")
        let pinned = try PortedAppTests.derCertificate(inPEMFile: server.certificate)
        let app = try IdentityClientApp(host: "127.0.0.1", port: server.port, pkcs12: file.data, passphrase: "client pass", pinnedServerCertificate: pinned)
        defer { app.cancel() }
        #expect(app.identitySubject == "localhost")
        let message = Data((0..<40_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        let echoed: Result<Data, NWError> = try await PortedAppTests.waitFor { done in app.echo(message) { done($0) } }
        #expect(try echoed.get() == message)
        #expect(app.queue.sync { app.serverSubject } == "localhost")
    }

    @Test func theIdentityClientRefusesAnotherServer() async throws {
        let server = try await PortedAppTests.EchoPeer.start(.quicEcho)
        defer { server.stop() }
        let file = try PKCS12File.make(passphrase: "pw")
        // The app pins its own certificate, which the server does not present.
        let app = try IdentityClientApp(host: "127.0.0.1", port: server.port, pkcs12: file.data, passphrase: "pw", pinnedServerCertificate: try file.certificateDER)
        defer { app.cancel() }
        let echoed: Result<Data, NWError> = try await PortedAppTests.waitFor { done in app.echo(Data("x".utf8)) { done($0) } }
        #expect(throws: NWError.self) { try echoed.get() }
    }

    @Test func theIdentityClientSeesAWrongPassphrase() throws {
        let file = try PKCS12File.make(passphrase: "right", tool: .certtool)
        #expect(throws: IdentityClientApp.AppError.self) {
            _ = try IdentityClientApp(host: "127.0.0.1", port: 9, pkcs12: file.data, passphrase: "wrong", pinnedServerCertificate: Data())
        }
    }

    /// The listener presents the PKCS #12 certificate: aioquic's client verifies it against that
    /// certificate as its only CA, and our identity client pins it.
    @Test func theIdentityListenerPresentsItsPKCS12Certificate() async throws {
        let file = try PKCS12File.make(passphrase: "server pass", tool: .certtool)
        let app = try IdentityListenerApp(pkcs12: file.data, passphrase: "server pass")
        let port: NWEndpoint.Port = try await PortedAppTests.waitFor { done in
            app.onReady = { done($0) }
            app.start()
        }
        defer { app.listener.cancel() }
        let client = try ChildProcess(try TestEnvironment.python(), [
            TestEnvironment.aioquicScript("echo_client.py"), "127.0.0.1", "\(port)", "--cacert", file.certificateFile,
            "--streams", "2", "--size", "30000",
        ])
        let status = try await client.waitForExit()
        #expect(status == 0, "aioquic client: \(client.standardOutput) \(client.standardError)")
        let summary = try JSONSerialization.jsonObject(with: Data(client.standardOutput.utf8)) as? [String: Any]
        #expect(summary?["ok"] as? Bool == true, "\(client.standardOutput)")

        let clientFile = try PKCS12File.make(passphrase: "pw")
        let ours = try IdentityClientApp(
            host: "127.0.0.1", port: port.rawValue, pkcs12: clientFile.data, passphrase: "pw", pinnedServerCertificate: try file.certificateDER)
        defer { ours.cancel() }
        let echoed: Result<Data, NWError> = try await PortedAppTests.waitFor { done in ours.echo(Data("pinned".utf8)) { done($0) } }
        #expect(try echoed.get() == Data("pinned".utf8))
        #expect(app.queue.sync { app.tunnels } == 2)
    }

    @Test(arguments: Peer.allCases) func the2025APIValidatesWithApplesClosure(peer: Peer) async throws {
        let server = try await PortedAppTests.EchoPeer.start(peer)
        defer { server.stop() }
        let identity = try StructuredIdentityApp.identity(pkcs12: try PKCS12File.make(passphrase: "pw").data, passphrase: "pw")
        let pinned = try PortedAppTests.derCertificate(inPEMFile: server.certificate)
        let message = Data(repeating: 0x5a, count: 25_000)
        let result = try await StructuredIdentityApp.echo(host: "127.0.0.1", port: server.port, pinned: pinned, identity: identity, message: message)
        #expect(result.echoed == message)
        #expect(result.validatorSawLeaf)
        #expect(result.negotiatedALPN == "quic-echo")
        #expect(result.remoteIdleTimeout > 0)

        await #expect(throws: (any Error).self) {
            _ = try await StructuredIdentityApp.echo(host: "127.0.0.1", port: server.port, pinned: Data("other".utf8), identity: identity, message: message)
        }
    }
}

extension IdentityPortedAppTests {
    /// aioquic's server asks for a client certificate (CertificateRequest, RFC 8446 §4.3.2) and
    /// reports the one it got: the app's PKCS #12 certificate.
    @Test func theIdentityClientPresentsItsCertificateWhenAsked() async throws {
        let (cert, key) = try OpenSSLCertificate.make()
        let server = try await AioquicEchoServerProcess(certificate: cert, key: key, requestingClientCertificates: true)
        defer { server.process.stop() }
        let file = try PKCS12File.make(passphrase: "client pass", tool: .certtool)
        let app = try IdentityClientApp(
            host: "127.0.0.1", port: server.port, pkcs12: file.data, passphrase: "client pass",
            pinnedServerCertificate: try PortedAppTests.derCertificate(inPEMFile: cert))
        defer { app.cancel() }
        let echoed: Result<Data, NWError> = try await PortedAppTests.waitFor { done in app.echo(Data("mutual".utf8)) { done($0) } }
        #expect(try echoed.get() == Data("mutual".utf8))
        let line = try await server.process.waitForLine(containing: "CLIENT-CERTIFICATE")
        let expected = try SHA256.hash(Array(try file.certificateDER)).map { String(format: "%02x", $0) }.joined()
        #expect(line.hasSuffix(expected), "\(line)")
    }
}
