import Foundation
import QuicTestSupport
import QuicTransport
import Testing

/// `quic-echo connect` against servers that offer datagrams or not, and that fail one check
/// while leaving the others waiting: each run ends on its own error, never on `--timeout`.
@Suite("quic-echo connect: datagram offers and failing checks", .timeLimit(TestEnvironment.minutes(2)))
struct QuicEchoConnectTests {
    /// `quic-echo serve` offers datagrams by default, so the README's first commands work as written.
    @Test func defaultServerEchoesDatagrams() async throws {
        let server = try await EchoServerProcess()
        defer { server.process.stop() }
        let client = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "127.0.0.1", "\(server.port)", "--pin-sha256", server.fingerprint,
            "--streams", "4", "--datagrams", "3", "--data", "hello",
        ])
        #expect(try await client.waitForExit() == 0, "\(client.standardOutput) \(client.standardError)")
        // 4 × "bidi-<i>:hello" and 3 × "dgram-<i>".
        #expect(client.standardOutput.contains("echoed \(4 * 12 + 3 * 7) bytes"), "\(client.standardOutput)")
        #expect(client.standardOutput.hasSuffix("ok\n"))
    }

    /// A server started with `--no-datagrams` gets the cause named at once, and the streams still
    /// echo. The deadline is far beyond the test's wait, so a run that waited for it fails here.
    @Test func serverWithoutDatagramsIsNamedAndTheStreamsStillEcho() async throws {
        let server = try await EchoServerProcess(["--no-datagrams"])
        defer { server.process.stop() }
        let client = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "127.0.0.1", "\(server.port)", "--pin-sha256", server.fingerprint,
            "--streams", "4", "--uni", "2", "--datagrams", "3", "--data", "hello", "--timeout", "600",
        ])
        #expect(try await client.waitForExit() == 1, "\(client.standardOutput) \(client.standardError)")
        #expect(client.standardError.contains("the server did not offer QUIC datagrams (max_datagram_frame_size"), "\(client.standardError)")
        #expect(!client.standardError.contains("timed out"), "\(client.standardError)")
        // 4 × "bidi-<i>:hello" and 2 × "uni-<i>:hello": every stream came back.
        #expect(client.standardOutput.contains("echoed \(4 * 12 + 2 * 11) bytes"), "\(client.standardOutput)")
        #expect(!client.standardOutput.contains("ok\n"))
    }

    /// One stream's echo is wrong while the server holds every other stream, bidirectional and
    /// unidirectional, unanswered: the wrong echo ends the run at once with its own error, for
    /// the checks still waiting give up their streams when the task group cancels them.
    @Test func aFailedCheckEndsTheRunWithoutWaitingForTheOthers() async throws {
        let server = try await LoopbackServer()
        let groups = server.groups
        let held = Task {
            var tunnels: [NWConnectionGroup] = []
            for await group in groups {
                tunnels.append(group)
                let streams = group.inboundStreams
                group.start(queue: DispatchQueue(label: "test.tunnel"))
                Task {
                    for await stream in streams {
                        stream.start(queue: DispatchQueue(label: "test.stream"))
                        Task {
                            // Answers bidi-0 wrongly and never answers the others.
                            guard let message = try? await stream.receiveMessage(),
                                message.starts(with: Data("bidi-0:".utf8))
                            else { return }
                            try await stream.send(content: Data("not the echo".utf8), isComplete: true)
                        }
                    }
                }
            }
            _ = tunnels
        }
        defer { held.cancel(); server.listener.cancel() }
        let client = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "127.0.0.1", "\(server.port)", "--pin-sha256", server.certificate.sha256FingerprintHex,
            "--streams", "3", "--uni", "1", "--data", "hello", "--timeout", "600",
        ])
        #expect(try await client.waitForExit() == 1, "\(client.standardOutput) \(client.standardError)")
        #expect(client.standardError.contains("bidirectional stream 0: echo differs"), "\(client.standardError)")
        #expect(!client.standardError.contains("timed out"), "\(client.standardError)")
    }
}
