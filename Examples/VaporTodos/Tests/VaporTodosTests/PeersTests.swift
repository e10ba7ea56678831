import ExampleTesting
import Foundation
import Testing

/// Clients fetch from the Vapor application over HTTP/3: the project's h3get, and two that
/// nobody here wrote, curl (libcurl on ngtcp2, through the pinned pycurl wheel) and aioquic.
@Suite("VaporTodos over HTTP/3 with h3get, curl and aioquic", .serialized, .timeLimit(.minutes(3)))
struct PeersTests {
    @Test func h3getFetchesThePageOverHTTP3() async throws {
        let todos = try await RunningTodos.start()
        let result: (status: Int32, output: String) = try await todos.stopping {
            try await Peers.runBounded(try Peers.h3get(), [
                "--http3-only", "--pin-sha256", todos.identity.sha256FingerprintHex, "-i", "https://127.0.0.1:\(todos.http3Port)/",
            ], seconds: 60)
        }
        #expect(result.status == 0)
        #expect(result.output.hasPrefix("HTTP/3 200"), "h3get printed: \(result.output)")
        #expect(result.output.contains("<h1>To-dos</h1>"), "h3get printed: \(result.output)")
    }

    @Test func curlFetchesTheAPIAndLargeBodiesOverHTTP3() async throws {
        let todos = try await RunningTodos.start()
        let base = "https://localhost:\(todos.http3Port)"
        let transfers: [Peers.Transfer] = try await todos.stopping {
            try await Peers.runPython([
                Peers.curlScript, "--cacert", todos.certificateFile, "--timeout", "120",
                "--resolve", "localhost:\(todos.http3Port):127.0.0.1",
                "GET@\(base)/todos", "then", "GET@\(base)/stream?bytes=5000000", "then", "POST,size=3000000@\(base)/upload",
                "then", "GET@\(base)/todos/nothing-here",
            ])
        }
        try #require(transfers.count == 4, "\(transfers)")
        #expect(transfers.map(\.httpVersion) == [30, 30, 30, 30], "curl's CURLINFO_HTTP_VERSION: 30 is HTTP/3")
        #expect(transfers.map(\.status) == [200, 200, 200, 404])
        #expect(transfers[1].length == 5_000_000)
        #expect(transfers[1].sha256 == Pattern.sha256Hex(total: 5_000_000))
        #expect(transfers.dropFirst().allSatisfy { $0.connectionsOpened == 0 }, "curl opened a new connection: \(transfers)")
    }

    @Test func aioquicFetchesThePageAndTheAPIOverHTTP3() async throws {
        let todos = try await RunningTodos.start()
        let base = "https://127.0.0.1:\(todos.http3Port)"
        let results: [Peers.Transfer] = try await todos.stopping {
            try await Peers.runPython([
                Peers.aioquicScript, "--cacert", todos.certificateFile, "--timeout", "120",
                "\(base)/", "\(base)/todos", "\(base)/stream?bytes=1000000",
            ])
        }
        try #require(results.count == 3, "\(results)")
        #expect(results.map(\.status) == [200, 200, 200])
        #expect(results[2].length == 1_000_000)
        #expect(results[2].sha256 == Pattern.sha256Hex(total: 1_000_000))
    }
}
