import Foundation
import QuicTestSupport
import QuicTransport
import Testing

/// The control-channel app against independent peers: Python's TCP echo for the control
/// channel and quic-echo, presenting an openssl-made certificate, for the tunnel.
@Suite("A TCP control channel beside a QUIC tunnel, ported as is", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct ControlChannelAppTests {
    @Test("the control channel and the tunnel both echo")
    func controlChannelBesideTunnel() async throws {
        let (cert, key) = try OpenSSLCertificate.make()
        let control = try await SocketPeers.tcpEcho()
        defer { control.process.stop() }
        let tunnel = try await EchoServerProcess(["--cert", cert, "--key", key])
        defer { tunnel.process.stop() }
        let app = ControlChannelApp(
            host: "127.0.0.1", controlPort: control.port, tunnelPort: UInt16(tunnel.port),
            pinnedCertificate: try PortedAppTests.derCertificate(inPEMFile: cert)
        )
        let outcome: String = try await PortedAppTests.waitFor { done in app.start { done($0) } }
        try #require(outcome == "ready", "\(app.log)")
        #expect(app.queue.sync { app.controlMetadataSeen })
        let payload = Data((0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        let result: Result<(String, Data), NWError>
        do {
            result = try await PortedAppTests.waitFor { done in
                app.queue.async { app.exchange(command: "STATUS 42", payload: payload) { done($0) } }
            }
        } catch {
            Issue.record("no exchange: \(app.queue.sync { app.log })")
            throw error
        }
        let (reply, echoed) = try result.get()
        #expect(reply == "STATUS 42")
        #expect(echoed == payload)
        app.stop()
    }
}
