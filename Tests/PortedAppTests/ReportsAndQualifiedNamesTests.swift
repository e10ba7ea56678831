import Foundation
import QuicTestSupport
import QuicTransport
import Testing

/// The tool that writes `Network.`-qualified names, and the client that reads the reports, run
/// against quic-echo's server over loopback.
@Suite("Qualified names and the reports, ported as is", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct ReportsAndQualifiedNamesTests {
    /// quic-echo's server on 127.0.0.1, presenting a generated certificate; and that certificate.
    static func echoServer() async throws -> (EchoServerProcess, Data) {
        let (cert, key) = try OpenSSLCertificate.make()
        let server = try await EchoServerProcess(["--cert", cert, "--key", key])
        return (server, try PortedAppTests.derCertificate(inPEMFile: cert))
    }

    @Test func theToolWithQualifiedNamesPingsTheServer() async throws {
        let (server, certificate) = try await Self.echoServer()
        defer { server.process.stop() }
        let tool = QualifiedPingTool(host: "127.0.0.1", port: UInt16(server.port), pinnedCertificate: certificate)
        let status: Int32 = await withCheckedContinuation { continuation in
            tool.run(message: "ping over QUIC") { continuation.resume(returning: $0) }
        }
        let output = tool.queue.sync { tool.output }
        #expect(status == 0, "\(output)")
        #expect(output.first == "ping over QUIC")
        #expect(output.last?.hasPrefix("stream 0, ") == true, "the first client-initiated bidirectional stream: \(output)")
    }

    /// A name resolves: the report holds the resolution, the attempts and QUIC's handshake; the
    /// data-transfer report counts the stream's bytes on the loopback interface.
    @Test func theReportsHoldWhatTheConnectionMeasured() async throws {
        let (server, certificate) = try await Self.echoServer()
        defer { server.process.stop() }
        let message = Data(repeating: 0x5a, count: 30_000)
        let started = ContinuousClock.now
        let outcome: ReportingClientOutcome = await withCheckedContinuation { continuation in
            let app = ReportingClientApp(
                host: "localhost", port: UInt16(server.port), pinnedCertificate: certificate, message: message
            ) { continuation.resume(returning: $0) }
            app.start()
        }
        let elapsed = ContinuousClock.now - started
        #expect(outcome.echoedBytes == message.count, "\(outcome.log)")

        let report = try #require(outcome.establishment, "\(outcome.log)")
        #expect(report.duration > 0 && .seconds(report.duration) < elapsed)
        let resolution = try #require(report.resolutions.first, "localhost is a name, so it was resolved")
        #expect(report.resolutions.count == 1)
        #expect(resolution.source == .query && resolution.dnsProtocol == .unknown)
        #expect(resolution.endpointCount >= 1)
        #expect(resolution.duration >= 0 && resolution.duration <= report.attemptStartedAfterInterval)
        let serverEndpoint = NWEndpoint.hostPort(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: UInt16(server.port))!)
        #expect(resolution.successfulEndpoint == serverEndpoint, "quic-echo listens on 127.0.0.1 only")
        // An address before 127.0.0.1 (::1, where /etc/hosts lists it) is refused first.
        #expect(report.previousAttemptCount == (resolution.preferredEndpoint == serverEndpoint ? 0 : 1))
        let handshake = try #require(report.handshakes.first)
        #expect(report.handshakes.count == 1)
        #expect(handshake.definition == NWProtocolQUIC.definition)
        #expect(handshake.handshakeDuration == report.duration)
        #expect(handshake.handshakeRTT > 0 && handshake.handshakeRTT <= report.duration)
        #expect(report.proxyEndpoint == nil && !report.proxyConfigured && !report.usedProxy)

        let transfer = try #require(outcome.transfer)
        #expect(transfer.pathReports.count == 1)
        let path = transfer.aggregatePathReport
        #expect(path == transfer.pathReports[0])
        #expect(path.interface.name == "lo" && path.interface.type == .loopback)
        #expect(path.sentApplicationByteCount == UInt64(message.count), "stream bytes, each counted once")
        #expect(path.receivedApplicationByteCount == UInt64(message.count))
        #expect(path.sentTransportByteCount > path.sentApplicationByteCount, "packets carry headers and ACKs too")
        #expect(path.sentIPPacketCount == transfer.sentPackets && path.receivedIPPacketCount == transfer.receivedPackets)
        #expect(path.transportSmoothedRTT > 0 && path.transportMinimumRTT <= path.transportSmoothedRTT)
        #expect(transfer.duration > 0 && .seconds(transfer.duration) < elapsed)
    }

    /// A numeric address is not resolved: no resolution step, and the attempt starts at once.
    @Test func aNumericAddressHasNoResolution() async throws {
        let (server, certificate) = try await Self.echoServer()
        defer { server.process.stop() }
        let outcome: ReportingClientOutcome = await withCheckedContinuation { continuation in
            let app = ReportingClientApp(
                host: "127.0.0.1", port: UInt16(server.port), pinnedCertificate: certificate, message: Data("x".utf8)
            ) { continuation.resume(returning: $0) }
            app.start()
        }
        let report = try #require(outcome.establishment, "\(outcome.log)")
        #expect(report.resolutions.isEmpty)
        #expect(report.previousAttemptCount == 0)
        #expect(report.attemptStartedAfterInterval >= 0 && report.attemptStartedAfterInterval < report.duration + 1)
    }
}
