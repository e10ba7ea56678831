import Foundation
import NIOConcurrencyHelpers
import QuicTestSupport
import QuicTransport
import Testing

/// Network.framework code, written as Apple-platform apps write it, against real peers over real
/// UDP and TLS: quic-echo's server and aioquic's echo server for the client app, and aioquic's
/// echo client for the listener app.
@Suite("Network.framework code ported as is", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct PortedAppTests {
    /// The DER bytes of the first certificate in a PEM file: what an app would bundle to pin.
    static func derCertificate(inPEMFile path: String) throws -> Data {
        let pem = try String(contentsOfFile: path, encoding: .utf8)
        let body = pem.components(separatedBy: "-----BEGIN CERTIFICATE-----")[1].components(separatedBy: "-----END CERTIFICATE-----")[0]
        return try #require(Data(base64Encoded: body.filter { !$0.isWhitespace }))
    }

    enum Peer: String, CaseIterable, CustomTestStringConvertible {
        case quicEcho = "quic-echo"
        case aioquic
        var testDescription: String { rawValue }
    }

    /// A running echo server of either kind, with the certificate files it presents.
    struct EchoPeer {
        let port: UInt16
        let certificate: String
        let stop: () -> Void

        static func start(_ peer: Peer) async throws -> EchoPeer {
            let (cert, key) = try OpenSSLCertificate.make()
            switch peer {
            case .quicEcho:
                let server = try await EchoServerProcess(["--datagrams", "--cert", cert, "--key", key])
                return EchoPeer(port: UInt16(server.port), certificate: cert) { server.process.stop() }
            case .aioquic:
                let server = try await AioquicEchoServerProcess(certificate: cert, key: key)
                return EchoPeer(port: server.port, certificate: cert) { server.process.stop() }
            }
        }
    }

    /// Runs `body` on the app and waits for it to call `done`, for at most `seconds`.
    ///
    /// An app that never calls back fails at the deadline: the wait gives up when cancelled, so
    /// the task group that races it against the timer can end. (A plain checked continuation
    /// kept the group waiting for good, and with it the whole test run.)
    static func waitFor<T: Sendable>(
        seconds: Double = 20, _ body: @escaping @Sendable (@escaping @Sendable (T) -> Void) -> Void
    ) async throws -> T {
        try await withThrowingTaskGroup(of: T.self) { tasks in
            tasks.addTask {
                let result = FirstResult<T>()
                let value = await withTaskCancellationHandler {
                    await withCheckedContinuation { continuation in
                        result.wait(continuation)
                        // Apps may report more than once (a failure after the result): the first counts.
                        body { value in result.finish(value) }
                    }
                } onCancel: {
                    result.finish(nil)
                }
                guard let value else { throw CancellationError() }
                return value
            }
            tasks.addTask {
                try await Task.sleep(for: .seconds(seconds))
                throw SetupError("the app did not finish within \(seconds) s")
            }
            defer { tasks.cancelAll() }
            return try #require(try await tasks.next())
        }
    }

    /// The first of the values reported, or nil for a wait given up; handed to the one waiter,
    /// whether it came before or after the waiter.
    final class FirstResult<T: Sendable>: Sendable {
        private struct State {
            var waiter: CheckedContinuation<T?, Never>?
            var outcome: T?
            var finished = false
        }

        private let state = NIOLockedValueBox(State())

        func wait(_ continuation: CheckedContinuation<T?, Never>) {
            let ready = state.withLockedValue { state -> (Bool, T?) in
                if state.finished { return (true, state.outcome) }
                state.waiter = continuation
                return (false, nil)
            }
            if ready.0 { continuation.resume(returning: ready.1) }
        }

        func finish(_ value: T?) {
            let waiter = state.withLockedValue { state -> CheckedContinuation<T?, Never>? in
                guard !state.finished else { return nil }
                state.finished = true
                state.outcome = value
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume(returning: value)
        }
    }

    /// An app that never calls back fails the wait with the deadline's error; it does not hang
    /// the run. (No bound on how long that takes: a loaded machine runs the timer late. A wait
    /// that hung would trip the suite's time limit.)
    @Test func aWaitForACallbackThatNeverComesEndsAtItsDeadline() async {
        await #expect(throws: SetupError.self) {
            let _: Int = try await Self.waitFor(seconds: 0.2) { _ in }
        }
    }

    static func startedClient(for peer: EchoPeer, configure: @escaping (NWProtocolQUIC.Options) -> Void = { _ in }) async throws -> EchoClientApp {
        let app = EchoClientApp(
            host: "127.0.0.1", port: peer.port, pinnedCertificate: try derCertificate(inPEMFile: peer.certificate), configure: configure
        )
        let outcome: String = try await waitFor { done in
            app.onReady = { done("ready") }
            app.onEnd = { done($0) }
            app.start()
        }
        try #require(outcome == "ready", "the tunnel did not become ready: \(outcome); \(app.log)")
        return app
    }

    @Test(arguments: Peer.allCases) func theClientAppEchoesStreamsDatagramsAndResets(peer: Peer) async throws {
        let server = try await EchoPeer.start(peer)
        defer { server.stop() }
        let app = try await Self.startedClient(for: server)
        #expect(app.log == ["ready"], "Apple's states: no .preparing on the way to .ready")
        #expect(app.verifiedChainLength == 1, "the verify block saw the server's chain")
        #expect(app.verifyBlockALPN == "quic-echo")

        let metadata = app.quicMetadata
        #expect(metadata.negotiatedALPN == "quic-echo")
        #expect(metadata.remoteIdleTimeout > 0)
        #expect(metadata.usableDatagramFrameSize >= 1000, "both sides offered datagrams")
        #expect(metadata.remoteMaxStreamsBidirectional >= 4)
        #expect(metadata.localMaxStreamsBidirectional == 100)
        #expect(String(cString: sec_protocol_metadata_get_negotiated_protocol(metadata.securityProtocolMetadata)!) == "quic-echo")

        // A bidirectional stream echoed on itself.
        let payload = Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let echoed: Result<Data, NWError> = try await Self.waitFor { done in app.echo(payload) { done($0) } }
        #expect(try echoed.get() == payload)

        // A unidirectional stream echoed on a stream the server opens.
        let uniPayload = Data("uni-0:".utf8) + Data(repeating: 7, count: 20_000)
        let uniEcho: Result<Data, NWError> = try await Self.waitFor { done in
            app.onInboundStream = { (connection: NWConnection) in
                connection.start(queue: app.queue)
                app.receiveAll(on: connection, into: Data()) { done($0) }
            }
            app.sendUnidirectional(uniPayload)
        }
        #expect(try uniEcho.get() == uniPayload)

        // A datagram comes back, with the tunnel's endpoints on its message.
        let datagram = Data("datagram-0".utf8)
        let (echoedDatagram, remote): (Data, NWEndpoint?) = try await Self.waitFor { done in
            app.onDatagram = { content, message in done((content, message.remoteEndpoint)) }
            // Datagrams are unreliable (RFC 9221 §5): send a few times.
            for attempt in 0..<5 {
                app.queue.asyncAfter(deadline: .now() + .milliseconds(500 * attempt)) { app.sendDatagram(datagram) { _ in } }
            }
        }
        #expect(echoedDatagram == datagram)
        #expect(remote == .hostPort(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: server.port)!))

        // A reset with an integer-literal code is mirrored by the server.
        let mirrored: UInt64? = try await Self.waitFor { done in app.resetUnidirectional(code: 0x2a) { done($0) } }
        #expect(mirrored == 0x2a)

        app.close(code: 0)
        // The app's state lives on its queue, as in any app: read it there.
        _ = await eventually(within: 10) { app.queue.sync { app.log.last } == "cancelled" }
        #expect(app.queue.sync { app.log.last } == "cancelled")
    }

    @Test func aVerifyBlockThatSaysNoFailsTheTunnel() async throws {
        let server = try await EchoPeer.start(.quicEcho)
        defer { server.stop() }
        let app = EchoClientApp(host: "127.0.0.1", port: server.port, pinnedCertificate: Data("not this one".utf8))
        let outcome: String = try await Self.waitFor { done in
            app.onReady = { done("ready") }
            app.onEnd = { done($0) }
            app.start()
        }
        #expect(outcome.hasPrefix("failed"), "\(outcome)")
        #expect(outcome.contains("rejected by the application's certificate verifier"), "\(outcome)")
        #expect(app.verifiedChainLength == 1)
    }

    @Test func aMaximumTLSVersionBelow13FailsClearly() async throws {
        let app = EchoClientApp(host: "127.0.0.1", port: 9, pinnedCertificate: Data()) { options in
            sec_protocol_options_set_max_tls_protocol_version(options.securityProtocolOptions, .TLSv12)
        }
        let outcome: String = try await Self.waitFor { done in
            app.onEnd = { done($0) }
            app.start()
        }
        #expect(outcome.contains("QUIC needs TLS 1.3"), "\(outcome)")
    }

    @Test func addTLSApplicationProtocolAppendsToALPN() {
        let options = NWProtocolQUIC.Options()
        sec_protocol_options_add_tls_application_protocol(options.securityProtocolOptions, "h3")
        sec_protocol_options_add_tls_application_protocol(options.securityProtocolOptions, "quic-echo")
        #expect(options.alpn == ["h3", "quic-echo"])
    }

    /// The listener app, with its identity from PEM files, serves aioquic's echo client: bidi and
    /// uni streams, resets both ways, and datagrams answered with `reply`.
    @Test func aioquicsEchoClientAgainstTheListenerApp() async throws {
        let (cert, key) = try OpenSSLCertificate.make()
        let app = try EchoListenerApp(certificateFile: cert, keyFile: key)
        let port: NWEndpoint.Port = try await Self.waitFor { done in
            app.onReady = { done($0) }
            app.start()
        }
        defer { app.listener.cancel() }
        let client = try ChildProcess(try TestEnvironment.python(), [
            TestEnvironment.aioquicScript("echo_client.py"), "127.0.0.1", "\(port)", "--cacert", cert,
            "--streams", "3", "--uni", "2", "--reset-code", "42", "--datagrams", "3", "--size", "50000",
        ])
        let status = try await client.waitForExit()
        #expect(status == 0, "aioquic client: \(client.standardOutput) \(client.standardError)")
        let summary = try JSONSerialization.jsonObject(with: Data(client.standardOutput.utf8)) as? [String: Any]
        #expect(summary?["ok"] as? Bool == true, "\(client.standardOutput)")
        #expect(summary?["resets"] as? [Int] == [42, 42])
        #expect(summary?["datagrams"] as? Int == 3)
        #expect(app.queue.sync { app.tunnels } == 1)
    }

    @Test func anIdentityFromFilesThatDoNotMatchIsNil() throws {
        let (cert, _) = try OpenSSLCertificate.make()
        let (_, otherKey) = try OpenSSLCertificate.make()
        #expect(sec_identity_create(certificateChainPEMFile: cert, privateKeyPEMFile: otherKey) == nil)
        #expect(sec_identity_create(certificateChainPEMFile: "/nonexistent.pem", privateKeyPEMFile: otherKey) == nil)
    }
}
