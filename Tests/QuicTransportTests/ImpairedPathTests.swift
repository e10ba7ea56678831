import Foundation
import QuicTestSupport
import Testing

/// quic-echo through quic-netem, the user-space impairment relay: loss and delay, and NAT
/// rebinding that the server must follow (RFC 9000 §9.3), on real UDP sockets.
@Suite("Impaired paths", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct ImpairedPathTests {
    /// A relay in front of `port`; its summary arrives on stdout when it is stopped.
    struct Relay {
        let process: ChildProcess
        let port: Int

        init(upstream port: Int, _ arguments: [String]) async throws {
            process = try ChildProcess(try TestEnvironment.executable("quic-netem"), ["--upstream", "127.0.0.1:\(port)"] + arguments)
            let line = try await process.waitForLine(containing: "relaying")
            guard let text = line.split(separator: " ").dropFirst().first?.split(separator: ":").last, let relayPort = Int(text) else {
                throw SetupError("cannot read the relay port from '\(line)'")
            }
            self.port = relayPort
        }

        /// Stops the relay (SIGTERM) and returns its per-direction summary.
        func summary() async throws -> String {
            process.terminate()
            _ = try await process.waitForExit()
            return process.standardOutput
        }
    }

    @Test func anEchoSurvivesLossAndDelay() async throws {
        let server = try await EchoServerProcess()
        defer { server.process.stop() }
        let relay = try await Relay(upstream: server.port, ["--delay", "10", "--jitter", "2", "--loss", "0.05", "--seed", "3"])
        let client = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "127.0.0.1", "\(relay.port)", "--pin-sha256", server.fingerprint, "--size", "500000", "--stats=json",
        ])
        #expect(try await client.waitForExit(seconds: 60) == 0, "\(client.standardError)")
        #expect(client.standardOutput.hasSuffix("ok\n"))
        let summary = try await relay.summary()
        let lost = summary.split(separator: "\n").compactMap { line in
            line.split(separator: ",").first { $0.contains("lost") }.flatMap { Int($0.split(separator: " ").last ?? "") }
        }
        #expect(lost.count == 2 && lost.allSatisfy { $0 > 0 }, "the relay dropped in both directions: \(summary)")
        // The client's report sees losses too, and an RTT of at least the relay's 2 x 10 ms.
        let statsLine = try #require(client.standardError.split(separator: "\n").last { $0.hasPrefix("{") })
        let stats = try #require(try JSONSerialization.jsonObject(with: Data(statsLine.utf8)) as? [String: [String: Any]])
        #expect((stats["transfer"]?["lost_packets"] as? Int ?? 0) > 0, "\(statsLine)")
        #expect((stats["transfer"]?["min_rtt_ms"] as? Double ?? 0) >= 20, "\(statsLine)")
    }

    @Test func theServerFollowsNATRebinding() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rebind-\(UUID())").path
        let server = try await EchoServerProcess(["--qlog-dir", directory])
        defer { server.process.stop() }
        let relay = try await Relay(upstream: server.port, ["--delay", "5", "--rebind-every", "0.1"])
        let client = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "127.0.0.1", "\(relay.port)", "--pin-sha256", server.fingerprint, "--size", "3000000",
        ])
        #expect(try await client.waitForExit(seconds: 60) == 0, "\(client.standardError)")
        let summary = try await relay.summary()
        let rebinds = summary.split(separator: "rebinds: ").last.flatMap { Int($0.prefix { $0.isNumber }) } ?? 0
        #expect(rebinds >= 1, "\(summary)")
        let text = try await QLogEvent.closedTrace(in: directory, named: "_server.sqlog")
        server.process.stop()
        let updates = text.components(separatedBy: "\"name\":\"connectivity:path_updated\"").count - 1
        #expect(updates >= 1 && updates <= rebinds, "path_updated \(updates) times for \(rebinds) rebinds")
        #expect(text.contains("\"frame_type\":\"path_challenge\""), "the new path was validated")
    }

    /// A NAT's old mapping outlives a rebinding until it times out, so what the server sent to
    /// the old port before it saw the new one still arrives. Two relays: the outer one rebinds
    /// every 0.3 s and keeps old bindings for a second; the inner one delays the server's
    /// packets by 100 ms, as a queue on the server's link does, so those sent in the last
    /// 100 ms before a rebinding reach the outer relay after their port was replaced. (Closed
    /// at once, the same transfer took 15 s instead of 1.5, stalling at each rebinding.)
    @Test func anOldMappingStillDeliversWhatTheServerSentBeforeTheRebinding() async throws {
        let server = try await EchoServerProcess()
        defer { server.process.stop() }
        let queue = try await Relay(upstream: server.port, ["--delay", "100", "--direction", "down"])
        let nat = try await Relay(upstream: queue.port, ["--rebind-every", "0.3", "--rebind-linger", "1"])
        let client = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "127.0.0.1", "\(nat.port)", "--pin-sha256", server.fingerprint, "--size", "1000000",
        ])
        #expect(try await client.waitForExit(seconds: 60) == 0, "\(client.standardError)")
        let summary = try await nat.summary()
        _ = try await queue.summary()
        let count = { (label: String) in summary.split(separator: "\(label): ").last.flatMap { Int($0.prefix { $0.isNumber }) } ?? 0 }
        #expect(count("rebinds") >= 2, "\(summary)")
        #expect(count("delivered from retired bindings") > 0, "\(summary)")
    }

    @Test func badFlagsAreRefusedClearly() async throws {
        let binary = try TestEnvironment.executable("quic-netem")
        for (arguments, message) in [
            (["--upstream", "nowhere"], "--upstream takes HOST:PORT"),
            (["--upstream", "127.0.0.1:1", "--loss", "2"], "probability between 0 and 1"),
            (["--upstream", "127.0.0.1:1", "--blackhole", "soon"], "--blackhole takes START:DURATION"),
            (["--upstream", "127.0.0.1:1", "--burst-loss", "0.1"], "--burst-loss takes P,LEN"),
            (["--upstream", "127.0.0.1:1", "--rebind-linger=-1"], "--rebind-linger must not be negative"),
        ] {
            let run = try ChildProcess(binary, arguments)
            #expect(try await run.waitForExit() != 0)
            #expect(run.standardError.contains(message), "\(arguments): \(run.standardError)")
        }
    }
}
