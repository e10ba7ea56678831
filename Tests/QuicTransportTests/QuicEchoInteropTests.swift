import Foundation
import QuicTestSupport
import QuicTransport
import Testing

/// quic-echo against aioquic 1.7.2, an implementation nobody here wrote, over real UDP and TLS.
@Suite("quic-echo interop with aioquic", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct QuicEchoInteropTests {
    /// With two workers the listener's sockets share the port, steered by connection ID.
    @Test(arguments: [1, 2]) func aioquicClientAgainstQuicEchoServer(workers: Int) async throws {
        let python = try TestEnvironment.python()
        let server = try await EchoServerProcess(["--datagrams", "--workers", "\(workers)"])
        let client = try ChildProcess(python, [
            TestEnvironment.aioquicScript("echo_client.py"), "127.0.0.1", "\(server.port)", "-k",
            "--streams", "4", "--uni", "3", "--reset-code", "42", "--datagrams", "5", "--size", "100000",
        ])
        let status = try await client.waitForExit()
        #expect(status == 0, "aioquic client: \(client.standardOutput) \(client.standardError)")
        let summary = try JSONSerialization.jsonObject(with: Data(client.standardOutput.utf8)) as? [String: Any]
        #expect(summary?["ok"] as? Bool == true)
        #expect(summary?["bidi"] as? Int == 4)
        #expect(summary?["uni"] as? Int == 3)
        #expect(summary?["resets"] as? [Int] == [42, 42])
        #expect(summary?["datagrams"] as? Int == 5)
        server.process.stop()
    }

    @Test func quicEchoClientAgainstAioquicServer() async throws {
        let (cert, key) = try OpenSSLCertificate.make()
        let server = try await AioquicEchoServerProcess(certificate: cert, key: key)
        defer { server.process.stop() }
        let port = String(server.port)
        let client = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "localhost", port, "--cacert", cert,
            "--streams", "4", "--uni", "3", "--reset-code", "42", "--datagrams", "5", "--data", String(repeating: "x", count: 50_000),
        ])
        let status = try await client.waitForExit()
        #expect(status == 0, "quic-echo connect: \(client.standardOutput) \(client.standardError)")
        #expect(client.standardOutput.contains("alpn quic-echo"))
        #expect(client.standardOutput.hasSuffix("ok\n"))
    }

    /// With Retry: on two workers, the Retry's ID (and so the client's next Initial) names the
    /// worker that sent it, and any worker could validate the token (one secret).
    @Test(arguments: [1, 2]) func quicEchoClientAndServerTogether(workers: Int) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("qlog-cli-\(UUID())").path
        let server = try await EchoServerProcess(["--datagrams", "--retry", "--qlog-dir", directory, "--workers", "\(workers)"])
        let client = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "127.0.0.1", "\(server.port)", "--pin-sha256", server.fingerprint,
            "--streams", "8", "--uni", "4", "--reset-code", "7", "--datagrams", "4", "--qlog-dir", directory,
            "--stats=json",
        ])
        #expect(try await client.waitForExit() == 0, "\(client.standardOutput) \(client.standardError)")
        let qlogLine = try #require(client.standardOutput.split(separator: "\n").first { $0.hasPrefix("qlog: ") })
        #expect(qlogLine.hasSuffix("_client.sqlog"))
        #expect(FileManager.default.fileExists(atPath: String(qlogLine.dropFirst("qlog: ".count))))
        // --stats=json: one JSON object on stderr with both reports.
        let statsLine = try #require(client.standardError.split(separator: "\n").last { $0.hasPrefix("{") })
        let stats = try #require(try JSONSerialization.jsonObject(with: Data(statsLine.utf8)) as? [String: [String: Any]])
        #expect(stats["establishment"]?["alpn"] as? String == "quic-echo")
        #expect((stats["transfer"]?["sent_packets"] as? Int ?? 0) > 0)
        #expect((stats["transfer"]?["received_bytes"] as? Int ?? 0) > 0)
        // Loss tracking is on: the figure is there (a busy machine may make loopback drop some).
        #expect(stats["transfer"]?["lost_packets"] is Int, "\(statsLine)")

        let text = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "127.0.0.1", "\(server.port)", "--pin-sha256", server.fingerprint, "--stats",
        ])
        #expect(try await text.waitForExit() == 0, "\(text.standardError)")
        #expect(text.standardError.contains("establishment: handshake "), "\(text.standardError)")
        #expect(text.standardError.contains("transfer: over "), "\(text.standardError)")
        server.process.stop()
    }

    /// --key-update, --cipher chacha20 and --cc bbr end to end: the client updates keys, the server
    /// follows, both count ECT(0) marks in their ACKs, and the report names the cipher. The
    /// update completes once ngtcp2 derives the next keys, after the server acknowledged the new
    /// ones; quic-echo waits for that before it echoes, and its report covers the wait.
    @Test func keyUpdateChaChaBBRAndECNShowInBothTraces() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ku-\(UUID())").path
        let server = try await EchoServerProcess(["--qlog-dir", directory, "--cc", "bbr2"])
        let client = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "127.0.0.1", "\(server.port)", "--pin-sha256", server.fingerprint, "--key-update",
            "--cipher", "chacha20", "--cc", "bbr", "--size", "8000000", "--qlog-dir", directory, "--stats=json",
        ])
        #expect(try await client.waitForExit() == 0, "\(client.standardOutput) \(client.standardError)")
        #expect(client.standardOutput.contains("key update completed"))
        let statsLine = try #require(client.standardError.split(separator: "\n").last { $0.hasPrefix("{") })
        #expect(statsLine.contains(#""cipher":"CHACHA20-POLY1305""#), "\(statsLine)")
        #expect(statsLine.contains(#""key_updates":1"#), "\(statsLine)")
        let clientTrace = try await QLogEvent.closedTrace(in: directory, named: "_client.sqlog")
        let serverTrace = try await QLogEvent.closedTrace(in: directory, named: "_server.sqlog")
        server.process.stop()
        #expect(clientTrace.contains(#""generation":1,"trigger":"local_update""#))
        #expect(serverTrace.contains(#""generation":1,"trigger":"remote_update""#))
        for trace in [clientTrace, serverTrace] {
            let ect0 = trace.matches(of: /"ect0":(\d+)/).compactMap { Int($0.output.1) }.max() ?? 0
            #expect(ect0 > 100, "ACKs count ECT(0)-marked packets: \(ect0)")
        }
    }

    /// --migrate: the client moves to a new local port while 2 MB echo, validates the path, and
    /// the server follows; both the report and the server's trace name the new port. With two
    /// workers the new port's packets must still reach the worker that owns the tunnel.
    @Test(arguments: [1, 2]) func migrationMovesTheEchoToANewLocalPort(workers: Int) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("mig-\(UUID())").path
        let server = try await EchoServerProcess(["--qlog-dir", directory, "--workers", "\(workers)"])
        let client = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "127.0.0.1", "\(server.port)", "--pin-sha256", server.fingerprint, "--migrate",
            "--size", "2000000", "--streams", "2", "--stats=json",
        ])
        #expect(try await client.waitForExit() == 0, "\(client.standardOutput) \(client.standardError)")
        let match = try #require(client.standardOutput.firstMatch(of: /migrated to 127\.0\.0\.1:(\d+)/), "\(client.standardOutput)")
        let newPort = String(match.output.1)
        let statsLine = try #require(client.standardError.split(separator: "\n").last { $0.hasPrefix("{") })
        #expect(statsLine.contains(#""path_changes":1"#), "\(statsLine)")
        let trace = try await QLogEvent.closedTrace(in: directory, named: "_server.sqlog")
        server.process.stop()
        #expect(trace.contains(#""new":{"ip":"127.0.0.1","port":\#(newPort)}"#), "the server followed the client to port \(newPort)")
        #expect(trace.contains(#""frame_type":"path_challenge""#))
    }

    /// --timeout ends a run whose server accepts the tunnel but never answers: the wait for the
    /// echo does not answer cancellation, and the deadline must not wait for it.
    @Test func timeoutEndsARunWhoseServerNeverAnswers() async throws {
        let server = try await LoopbackServer()
        let groups = server.groups
        let silent = Task {
            var held: [NWConnectionGroup] = []
            for await group in groups {
                group.start(queue: DispatchQueue(label: "silent"))
                held.append(group)
            }
            _ = held
        }
        defer { silent.cancel(); server.listener.cancel() }
        let client = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "127.0.0.1", "\(server.port)", "--pin-sha256", server.certificate.sha256FingerprintHex,
            "--data", "hello", "--timeout", "2",
        ])
        // A deadline that waited for the stuck receive would run into this bound instead.
        let status = try await client.waitForExit(seconds: 30)
        #expect(status != 0, "a run with no echo succeeded: \(client.standardOutput)")
        #expect(client.standardError.contains("timed out after 2"), "\(client.standardError)")
    }

    @Test func wrongALPNIsReportedByBothSides() async throws {
        let server = try await EchoServerProcess()
        let client = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "127.0.0.1", "\(server.port)", "--pin-sha256", server.fingerprint, "--alpn", "h3", "--timeout", "5",
        ])
        let status = try await client.waitForExit()
        #expect(status == 2)
        #expect(client.standardError.contains("no_application_protocol"), "\(client.standardError)")
        // The server logs once its closing period ends.
        let logged = await eventually { server.process.standardError.contains("no_application_protocol") }
        server.process.terminate()
        _ = try await server.process.waitForExit()
        #expect(logged, "\(server.process.standardError)")
    }

    @Test func unverifiableCertificateNeedsCAPinOrInsecure() async throws {
        let server = try await EchoServerProcess()
        let binary = try TestEnvironment.executable("quic-echo")
        let refused = try ChildProcess(binary, ["connect", "127.0.0.1", "\(server.port)", "--timeout", "5"])
        #expect(try await refused.waitForExit() == 2)
        #expect(refused.standardError.contains("unknown issuer"), "\(refused.standardError)")
        let pinned = try ChildProcess(binary, ["connect", "127.0.0.1", "\(server.port)", "--pin-sha256", server.fingerprint])
        #expect(try await pinned.waitForExit() == 0, "\(pinned.standardError)")
        let wrongPin = try ChildProcess(binary, ["connect", "127.0.0.1", "\(server.port)", "--pin-sha256", String(repeating: "ab", count: 32)])
        #expect(try await wrongPin.waitForExit() == 2)
        #expect(wrongPin.standardError.contains("pin"), "\(wrongPin.standardError)")
        let insecure = try ChildProcess(binary, ["connect", "127.0.0.1", "\(server.port)", "-k"])
        #expect(try await insecure.waitForExit() == 0, "\(insecure.standardError)")
        server.process.stop()
    }

    @Test func connectionLimitRefusesTheExtraTunnel() async throws {
        let server = try await EchoServerProcess(["--max-connections", "1"])
        // An in-process client holds the only slot open.
        let options = NWProtocolQUIC.Options(alpn: ["quic-echo"])
        options.tls.certificateVerification = .insecure
        let holder = NWConnectionGroup(
            with: NWMultiplexGroup(to: .hostPort(host: "127.0.0.1", port: .init(integerLiteral: UInt16(server.port)))),
            using: NWParameters(quic: options)
        )
        holder.start(queue: DispatchQueue(label: "holder"))
        try await within(5) { try await holder.waitUntilReady() }
        let refused = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "127.0.0.1", "\(server.port)", "-k", "--timeout", "3",
        ])
        #expect(try await refused.waitForExit() == 2)
        #expect(refused.standardError.contains("CONNECTION_REFUSED"), "\(refused.standardError)")
        holder.cancel()
        server.process.stop()
    }

    @Test func perAddressLimitRefusesAThirdTunnelFromOneAddressAndFreesTheShareAfter() async throws {
        let server = try await EchoServerProcess(["--max-connections-per-address", "2"])
        let options = NWProtocolQUIC.Options(alpn: ["quic-echo"])
        options.tls.certificateVerification = .insecure
        // Two in-process tunnels from 127.0.0.1 take its share.
        var holders: [NWConnectionGroup] = []
        for index in 0..<2 {
            let holder = NWConnectionGroup(
                with: NWMultiplexGroup(to: .hostPort(host: "127.0.0.1", port: .init(integerLiteral: UInt16(server.port)))),
                using: NWParameters(quic: options)
            )
            holder.start(queue: DispatchQueue(label: "holder-\(index)"))
            try await within(10) { try await holder.waitUntilReady() }
            holders.append(holder)
        }
        let binary = try TestEnvironment.executable("quic-echo")
        let refused = try ChildProcess(binary, ["connect", "127.0.0.1", "\(server.port)", "-k", "--timeout", "5"])
        #expect(try await refused.waitForExit() == 2)
        #expect(refused.standardError.contains("CONNECTION_REFUSED"), "\(refused.standardError)")
        // The server is still up for the tunnels it holds, and a freed share is free again: once
        // one tunnel closes (and the server's closing period ends), a new client gets in.
        holders.removeFirst().cancel()
        let admitted = try await eventually(within: 30) {
            let again = try ChildProcess(binary, ["connect", "127.0.0.1", "\(server.port)", "-k", "--timeout", "5"])
            return try await again.waitForExit() == 0
        }
        #expect(admitted, "a client was still refused 30 s after a tunnel of its address closed")
        for holder in holders { holder.cancel() }
        server.process.stop()
    }

    @Test func badFlagsGiveAClearError() async throws {
        let binary = try TestEnvironment.executable("quic-echo")
        let missingKey = try ChildProcess(binary, ["serve", "--cert", "/nonexistent.pem"])
        #expect(try await missingKey.waitForExit() != 0)
        #expect(missingKey.standardError.contains("--cert and --key go together"), "\(missingKey.standardError)")
        let missingFile = try ChildProcess(binary, ["serve", "--port", "0", "--cert", "/nonexistent.pem", "--key", "/nonexistent.key"])
        #expect(try await missingFile.waitForExit() != 0)
        #expect(missingFile.standardError.contains("/nonexistent.pem") || missingFile.standardOutput.contains("/nonexistent.pem"),
                "\(missingFile.standardOutput) \(missingFile.standardError)")
        let twoTrusts = try ChildProcess(binary, ["connect", "127.0.0.1", "1", "-k", "--pin-sha256", "00"])
        #expect(try await twoTrusts.waitForExit() != 0)
        #expect(twoTrusts.standardError.contains("only one of"))
    }

    @Test func keyLogIsWrittenWhenSSLKEYLOGFILEIsSet() async throws {
        let server = try await EchoServerProcess()
        let keyLog = FileManager.default.temporaryDirectory.appendingPathComponent("keys-\(UUID()).log").path
        let client = try ChildProcess(
            try TestEnvironment.executable("quic-echo"),
            ["connect", "127.0.0.1", "\(server.port)", "--pin-sha256", server.fingerprint],
            environment: ["SSLKEYLOGFILE": keyLog]
        )
        #expect(try await client.waitForExit() == 0, "\(client.standardError)")
        let lines = try String(contentsOfFile: keyLog, encoding: .utf8).split(separator: "\n")
        // TLS 1.3 secrets in NSS key log format, which Wireshark needs to decrypt QUIC.
        for label in ["CLIENT_HANDSHAKE_TRAFFIC_SECRET", "SERVER_HANDSHAKE_TRAFFIC_SECRET", "CLIENT_TRAFFIC_SECRET_0", "SERVER_TRAFFIC_SECRET_0"] {
            #expect(lines.contains { $0.hasPrefix(label + " ") && $0.split(separator: " ").count == 3 }, "missing \(label)")
        }
        server.process.stop()
    }
}
