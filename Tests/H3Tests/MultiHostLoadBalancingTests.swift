import Foundation
import QuicTestSupport
import Testing

/// Two h3serve "hosts" with different QUIC-LB server IDs behind the kernel's nftables as the
/// balancer, each in a network namespace that `Tests/Interop/netns/quic-lb-hosts.sh` makes:
/// connections spread over both hosts, migrations and NAT rebinding stay on their host, a
/// 4-tuple-only balancer breaks about half of the migrations (the negative control), and
/// stopping one host leaves the other's connections whole. The script makes its namespaces
/// inside network and mount namespaces of its own: as root, or as any user where the kernel
/// allows unprivileged user namespaces. It exits 2 with the reason when it cannot make them,
/// and this test then fails.
@Suite("QUIC-LB across hosts (network namespaces, nftables)", .serialized, .timeLimit(TestEnvironment.minutes(3)))
struct MultiHostLoadBalancingTests {
    @Test func connectionsStayOnTheirHostThroughMigration() async throws {
        let h3serve = try TestEnvironment.executable("h3serve")
        _ = try TestEnvironment.executable("h3get")
        _ = try TestEnvironment.executable("quic-netem")
        let script = TestEnvironment.repositoryRoot.appendingPathComponent("Tests/Interop/netns/quic-lb-hosts.sh").path
        let run = try ChildProcess(URL(fileURLWithPath: "/bin/bash"), [script, "--bin-dir", h3serve.deletingLastPathComponent().path])
        let status = try await run.waitForExit(seconds: 150)
        #expect(status != 2, "the namespaces could not be made: \(run.standardError.suffix(600))")
        #expect(status == 0, "\(run.standardOutput)\n\(run.standardError.suffix(2000))")
        let line = try #require(run.standardOutput.split(separator: "\n").last { $0.hasPrefix("{") }, "no summary: \(run.standardError.suffix(1500))")
        let summary = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(summary["pass"] as? Bool == true)
        let connections = try #require(summary["connections"] as? Int)
        let (host1, host2) = (summary["host1"] as? Int ?? 0, summary["host2"] as? Int ?? 0)
        #expect(host1 + host2 == connections && min(host1, host2) > 0, "spread: \(host1) / \(host2)")
        #expect(summary["migrated_ok"] as? Int == connections, "\(line)")
        let control = try #require((summary["control_4tuple"] as? [String: Any])?["h3get"] as? [String: Any])
        let broken = control["migrated_broken"] as? Int ?? 0
        #expect(broken >= connections / 4 && broken <= 3 * connections / 4, "the 4-tuple balancer broke \(broken) of \(connections) migrations")
    }
}
