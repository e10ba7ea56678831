import CommandLineSupport
import Foundation
import QuicTestSupport
import Testing

/// The servers and h3load run with glibc's per-thread malloc cache sized for a loop's batches
/// (`runWithMallocTunables`, `MallocCache`): started without `GLIBC_TUNABLES`, they execute
/// themselves again with it, as the same process; a setting of the user's, even an empty one,
/// is left alone.
@Suite("Tools' malloc tunables", .timeLimit(TestEnvironment.minutes(1)))
struct ToolMallocTuningTests {
    /// The environment the process was last executed with. `setenv` alone does not change it,
    /// so a value that only `runWithMallocTunables` adds shows that its exec took place.
    private static func executedEnvironment(of pid: Int32) throws -> [String: String] {
        let raw = try readProcFile("/proc/\(pid)/environ")
        var environment: [String: String] = [:]
        for entry in raw.split(separator: 0) {
            let text = String(decoding: entry, as: UTF8.self)
            guard let equals = text.firstIndex(of: "=") else { continue }
            environment[String(text[..<equals])] = String(text[text.index(after: equals)...])
        }
        return environment
    }

    @Test func aServerStartedWithoutTunablesRunsAgainWithThem() async throws {
        let server = try await EchoServerProcess()
        defer { server.process.stop() }
        let executed = try Self.executedEnvironment(of: server.process.processIdentifier)
        // The test runner's own setting, if it has one, is the user's and wins.
        let expected = ProcessInfo.processInfo.environment["GLIBC_TUNABLES"] ?? MallocCache.client.tunables
        #expect(executed["GLIBC_TUNABLES"] == expected, "quic-echo serve ran with GLIBC_TUNABLES=\(executed["GLIBC_TUNABLES"] ?? "(unset)")")
        // The same process, its pipes and its port: a client is served.
        let client = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "127.0.0.1", "\(server.port)", "--pin-sha256", server.fingerprint, "--data", "hello",
        ])
        #expect(try await client.waitForExit() == 0, "quic-echo connect: \(client.standardError)")
    }

    /// h3serve keeps a smaller cache than the clients: at rest, cached chunks pin their pages.
    @Test func h3serveRunsWithTheServersSmallerCache() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("tunables-\(UUID())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let server = try ChildProcess(try TestEnvironment.executable("h3serve"), ["--port", "0", "--no-tcp", "--root", root.path])
        defer { server.stop() }
        _ = try await server.waitForLine(containing: "serving")
        let executed = try Self.executedEnvironment(of: server.processIdentifier)
        let expected = ProcessInfo.processInfo.environment["GLIBC_TUNABLES"] ?? MallocCache.server.tunables
        #expect(executed["GLIBC_TUNABLES"] == expected, "h3serve ran with GLIBC_TUNABLES=\(executed["GLIBC_TUNABLES"] ?? "(unset)")")
        #expect(MallocCache.server.tcacheCount < MallocCache.client.tcacheCount)
    }

    @Test func anEmptySettingOfTheUsersIsLeftAlone() async throws {
        let server = try ChildProcess(
            try TestEnvironment.executable("quic-echo"), ["serve", "--host", "127.0.0.1", "--port", "0"],
            environment: ["GLIBC_TUNABLES": ""]
        )
        defer { server.stop() }
        _ = try await server.waitForLine(containing: "listening on")
        let executed = try Self.executedEnvironment(of: server.processIdentifier)
        #expect(executed["GLIBC_TUNABLES"] == "", "quic-echo serve replaced the user's empty GLIBC_TUNABLES with \(executed["GLIBC_TUNABLES"] ?? "(unset)")")
    }
}
