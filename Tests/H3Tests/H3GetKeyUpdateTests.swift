import Foundation
import QuicTestSupport
import Testing

/// h3get's `--key-update` keeps its promise (RFC 9001 §6): the update completes even when the
/// transfer is over before ngtcp2 allows it, or h3get says that it did not and exits 95.
@Suite("h3get --key-update", .timeLimit(TestEnvironment.minutes(2)))
struct H3GetKeyUpdateTests {
    /// A 10-byte body is done long before ngtcp2 lets a key update start; h3get keeps the
    /// connection until the server has acknowledged a packet under the new keys, which is when
    /// ngtcp2 derives the next generation and the client's trace logs generation 1 in use.
    @Test func theUpdateCompletesAfterATinyTransfer() async throws {
        let (root, traces, _, body) = try makeServedRoot("key-update", file: "tiny.bin", size: 10, multiplier: 3)
        let (server, port) = try await startH3serve(root: root)
        defer { server.stop() }
        let output = root.appendingPathComponent("tiny.out")
        let run = try await runH3get([
            "-k", "--http3-only", "--key-update", "--qlog-dir", traces.path, "-o", output.path, "https://localhost:\(port)/tiny.bin",
        ])
        #expect(run.status == 0, "\(run.error)")
        #expect(FileManager.default.contents(atPath: output.path).map(Array.init) == body)
        let clientTrace = try #require(
            try FileManager.default.contentsOfDirectory(atPath: traces.path).first { $0.hasSuffix("_client.sqlog") }
        )
        let trace = try String(contentsOfFile: traces.appendingPathComponent(clientTrace).path, encoding: .utf8)
        #expect(trace.contains("\"generation\":1,\"trigger\":\"local_update\""), "the client's trace shows no completed key update")
    }

    /// Over TCP there are no QUIC keys to update: the body arrives, and h3get says why the
    /// update it was asked for did not happen, with curl's HTTP/3 exit code.
    @Test func withoutHTTP3TheUpdateFailsAloud() async throws {
        let (root, _, _, body) = try makeServedRoot("key-update-tcp", file: "tiny.bin", size: 10, multiplier: 5)
        let (server, port) = try await startH3serve(root: root, ["--no-quic"])
        defer { server.stop() }
        let output = root.appendingPathComponent("tiny.out")
        let run = try await runH3get(["-k", "--key-update", "-o", output.path, "https://127.0.0.1:\(port)/tiny.bin"])
        #expect(FileManager.default.contents(atPath: output.path).map(Array.init) == body)
        #expect(run.status == 95, "\(run.error)")
        #expect(run.error.contains("--key-update: the key update did not complete"), "\(run.error)")
    }
}
