import Foundation
import QuicTestSupport
import QuicTransport
import Testing

/// The path-choosing client app, as written for Apple platforms, against quic-echo.
@Suite("A ported app that chooses its path", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct PathChoosingClientAppTests {
    static func run(_ app: PathChoosingClientApp) async throws -> (outcome: String, echo: Data?) {
        let outcome: String = try await PortedAppTests.waitFor { done in
            app.onReady = { done("ready") }
            app.onEnd = { done($0) }
            app.start()
        }
        guard outcome == "ready" else { return (outcome, nil) }
        let echo: Data? = try await PortedAppTests.waitFor { done in app.queue.async { app.echo(Data("hello".utf8)) { done($0) } } }
        return (outcome, echo)
    }

    @Test func anIPv4AddressEndpointWithPathParametersEchoes() async throws {
        let server = try await PortedAppTests.EchoPeer.start(.quicEcho)
        defer { server.stop() }
        let pin = try PortedAppTests.derCertificate(inPEMFile: server.certificate)
        let app = PathChoosingClientApp(address: "127.0.0.1", port: server.port, pinnedCertificate: pin)
        #expect(PathChoosingClientApp.describe(app.group.descriptor.members.first) == "IPv4 127.0.0.1 (loopback) port \(server.port)")
        let (outcome, echo) = try await Self.run(app)
        #expect(outcome == "ready", "\(app.log)")
        #expect(echo == Data("hello".utf8))
        #expect(app.queue.sync { app.pathSummary } == "IPv4 127.0.0.1 (loopback) port \(server.port) over loopback")
        #expect(app.group.parameters.serviceClass == .responsiveData)
        app.group.cancel()
    }

    @Test func aURLEndpointEchoes() async throws {
        let server = try await PortedAppTests.EchoPeer.start(.quicEcho)
        defer { server.stop() }
        let pin = try PortedAppTests.derCertificate(inPEMFile: server.certificate)
        let url = try #require(URL(string: "https://127.0.0.1:\(server.port)/"))
        let app = PathChoosingClientApp(address: "", port: 0, url: url, pinnedCertificate: pin)
        #expect(PathChoosingClientApp.describe(app.group.descriptor.members.first) == "URL \(url.absoluteString)")
        let (outcome, echo) = try await Self.run(app)
        #expect(outcome == "ready", "\(app.log)")
        #expect(echo == Data("hello".utf8))
        app.group.cancel()
    }
}
