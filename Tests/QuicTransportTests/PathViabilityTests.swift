import Foundation
import NIOConcurrencyHelpers
import QuicTestSupport
import QuicTransport
import Testing

/// Viability (Network.framework's `viabilityUpdateHandler` and `onViabilityUpdate`) on a real
/// route that goes away and comes back: a test address on `lo` whose local route is swapped for
/// an unreachable one, so the kernel refuses sends to it with EHOSTUNREACH, as it does when an
/// interface or a route disappears.
@Suite("Path viability", .timeLimit(TestEnvironment.minutes(2)))
struct PathViabilityTests {
    /// TEST-NET-2 (RFC 5737), added to `lo` for this test only.
    static let address = "198.51.100.7"

    /// Runs `ip` with `arguments`; throws its output when it fails.
    static func ip(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/ip")
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            throw TestFailure("ip \(arguments.joined(separator: " ")) failed (this test needs root, or CAP_NET_ADMIN, to add an address to lo): \(text)")
        }
    }

    struct TestFailure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    /// Waits until `changes` holds `expected`, for up to ten seconds.
    static func wait(for expected: [Bool], in changes: NIOLockedValueBox<[Bool]>) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while changes.withLockedValue({ $0 }) != expected, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(changes.withLockedValue { $0 } == expected)
    }

    @Test func viabilityFollowsTheRouteToTheServer() async throws {
        try? Self.ip(["addr", "del", "\(Self.address)/32", "dev", "lo"])
        try Self.ip(["addr", "add", "\(Self.address)/32", "dev", "lo"])
        defer { try? Self.ip(["addr", "del", "\(Self.address)/32", "dev", "lo"]) }
        let (serving, port, pin) = try await IPAndUDPStackTests.echoListener(host: Self.address, QUIC(alpn: ["test"]))
        defer { serving.cancel() }

        let changes = NIOLockedValueBox<[Bool]>([])
        try await withNetworkConnection(to: .hostPort(host: NWEndpoint.Host(Self.address), port: port)) {
            QUIC(alpn: ["test"]).tls.peerAuthentication(.pinnedSHA256(pin))
        } _: { connection in
            connection.onViabilityUpdate { _, isViable in changes.withLockedValue { $0.append(isViable) } }
            let first = try await connection.openStream()
            try await first.send(Data("before".utf8), endOfStream: true)
            #expect(String(decoding: try await NetworkConnectionTests.readAll(first), as: UTF8.self) == "before")
            try await Self.wait(for: [true], in: changes)

            // The route goes: every send to the server fails in the kernel.
            try Self.ip(["route", "replace", "unreachable", "\(Self.address)/32", "table", "local"])
            var restored = false
            defer { if !restored { try? Self.ip(["route", "replace", "local", Self.address, "dev", "lo", "table", "local"]) } }
            let stream = try await connection.openStream()
            async let echoed = NetworkConnectionTests.readAll(stream)
            try await stream.send(Data("across the outage".utf8), endOfStream: true)
            try await Self.wait(for: [true, false], in: changes)

            // It comes back: the retransmissions get through, and the answer makes the path viable.
            try Self.ip(["route", "replace", "local", Self.address, "dev", "lo", "table", "local"])
            restored = true
            #expect(String(decoding: try await echoed, as: UTF8.self) == "across the outage")
            try await Self.wait(for: [true, false, true], in: changes)
        }
    }
}
