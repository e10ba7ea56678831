import Foundation
import NIOConcurrencyHelpers
import QuicTestSupport
import QuicTransport
import Testing

/// Viability (Network.framework's `viabilityUpdateHandler` and `onViabilityUpdate`) on a real
/// route that goes away and comes back: a test address on `lo` whose local route is swapped for
/// an unreachable one, so the kernel refuses sends to it with EHOSTUNREACH, as it does when an
/// interface or a route disappears. The tests share the address, so they run one at a time.
///
/// Changing `lo` needs CAP_NET_ADMIN. `scripts/test` runs this suite in a network namespace of
/// its own (`unshare --net`, or `unshare --user --map-root-user --net` for a user other than
/// root), so the machine's routes are never touched; run alone as root, it changes the
/// machine's `lo` and puts it back.
@Suite("Paths that fail", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct PathViabilityTests {
    /// TEST-NET-2 (RFC 5737), added to `lo` for this test only.
    static let address = "198.51.100.7"

    /// The stack of both ends. A connection whose every probe fails backs its probes off
    /// exponentially (RFC 9002 §6.2), so under a sanitizer a long outage could outlast the
    /// default idle timeout before the next probe; two minutes, stretched, leaves room.
    static var stack: QUIC { QUIC(alpn: ["test"]).idleTimeout(Int(TestEnvironment.scaled(120)) * 1000) }

    /// Runs `ip` with `arguments`; throws its output when it fails.
    static func ip(_ arguments: [String]) throws { try run("/usr/sbin/ip", arguments) }

    /// Runs `nft` (Debian's `nftables`) with `arguments` and returns its output; throws it when it fails.
    @discardableResult
    static func nft(_ arguments: [String]) throws -> String { try run("/usr/sbin/nft", arguments) }

    /// Runs the network tool at `path` and returns its output; throws it, and what the test
    /// needs, when the tool fails.
    @discardableResult
    static func run(_ path: String, _ arguments: [String]) throws -> String {
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw TestFailure("\(path) is missing: install iproute2 and nftables (bash scripts/setup does)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw TestFailure(
                "\(path) \(arguments.joined(separator: " ")) failed: this suite changes lo's addresses, routes and firewall "
                    + "and needs CAP_NET_ADMIN; run it as root or in a network namespace of its own, as scripts/test does "
                    + "(unshare --user --map-root-user --net .build/debug/swift-quic-transportPackageTests.xctest "
                    + "--testing-library swift-testing --filter PathViabilityTests): \(text)"
            )
        }
        return text
    }

    /// Puts the test address on `lo` (after clearing what an interrupted run left). In a new
    /// network namespace `lo` starts down, so it is brought up first.
    static func addTestAddress() throws {
        try ip(["link", "set", "lo", "up"])
        removeTestAddress()
        try ip(["addr", "add", "\(address)/32", "dev", "lo"])
    }

    /// Takes the address off `lo`, and the local route the tests put back by hand, which the
    /// kernel does not remove with the address.
    static func removeTestAddress() {
        try? ip(["addr", "del", "\(address)/32", "dev", "lo"])
        try? ip(["route", "del", "local", address, "dev", "lo", "table", "local"])
    }

    struct TestFailure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    /// Waits until `changes` holds `expected`, for up to ten seconds.
    static func wait(for expected: [Bool], in changes: NIOLockedValueBox<[Bool]>) async throws {
        _ = await eventually(within: 10) { changes.withLockedValue { $0 } == expected }
        #expect(changes.withLockedValue { $0 } == expected)
    }

    /// Waits until the latest update says `viable`, after one that said the opposite. Updates
    /// may flap on the way: a packet the server sent before the route went can still arrive,
    /// and an answer makes the path viable until the next send fails. What must hold is the end.
    static func wait(untilLatestIs viable: Bool, in changes: NIOLockedValueBox<[Bool]>) async throws {
        let settled = await eventually(within: 10) { changes.withLockedValue { $0.last == viable && $0.contains(!viable) } }
        #expect(settled, "viability updates: \(changes.withLockedValue { $0 }), waiting for a last \(viable)")
    }

    @Test func viabilityFollowsTheRouteToTheServer() async throws {
        try Self.addTestAddress()
        defer { Self.removeTestAddress() }
        let (serving, port, pin) = try await IPAndUDPStackTests.echoListener(host: Self.address, Self.stack)
        defer { serving.cancel() }

        let changes = NIOLockedValueBox<[Bool]>([])
        try await withNetworkConnection(to: .hostPort(host: NWEndpoint.Host(Self.address), port: port)) {
            Self.stack.tls.peerAuthentication(.pinnedSHA256(pin))
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
            try await Self.wait(untilLatestIs: false, in: changes)

            // It comes back: the retransmissions get through, and the answer makes the path viable.
            try Self.ip(["route", "replace", "local", Self.address, "dev", "lo", "table", "local"])
            restored = true
            #expect(String(decoding: try await echoed, as: UTF8.self) == "across the outage")
            try await Self.wait(untilLatestIs: true, in: changes)
        }
    }

    /// How a test refuses the server's replies to the test address.
    enum Refusal: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// A `prohibit` route: the kernel fails the send with EACCES, as an administrative block does.
        case prohibitRoute = "prohibit route (EACCES)"
        /// An nftables rule that drops the server's packets on output: the send fails with EPERM,
        /// as a host firewall makes it.
        case firewallDrop = "firewall drop (EPERM)"

        var testDescription: String { rawValue }

        /// The nftables table the firewall case adds, and deletes again.
        static let table = "quic_path_viability_test"

        /// Starts refusing what the server at `port` sends to the test address.
        func refuse(serverPort port: UInt16) throws {
            switch self {
            case .prohibitRoute:
                try PathViabilityTests.ip(["route", "replace", "prohibit", "\(PathViabilityTests.address)/32", "table", "local"])
            case .firewallDrop:
                try? PathViabilityTests.nft(["delete", "table", "inet", Self.table])
                try PathViabilityTests.nft(["add", "table", "inet", Self.table])
                try PathViabilityTests.nft(["add", "chain", "inet", Self.table, "output", "{ type filter hook output priority 0; }"])
                try PathViabilityTests.nft([
                    "add", "rule", "inet", Self.table, "output",
                    "ip", "daddr", PathViabilityTests.address, "udp", "sport", "\(port)", "counter", "drop",
                ])
            }
        }

        /// How many of the server's packets the firewall rule has dropped; nil for a route,
        /// which counts nothing.
        func refusedPackets() throws -> Int? {
            guard self == .firewallDrop else { return nil }
            // The rule lists as "... counter packets N bytes M drop".
            let words = try PathViabilityTests.nft(["list", "table", "inet", Self.table]).split(whereSeparator: \.isWhitespace)
            guard let index = words.firstIndex(of: "packets"), index + 1 < words.count else { return nil }
            return Int(words[index + 1])
        }

        /// Lets the server's packets through again.
        func restore() throws {
            switch self {
            case .prohibitRoute:
                try PathViabilityTests.ip(["route", "replace", "local", PathViabilityTests.address, "dev", "lo", "table", "local"])
            case .firewallDrop:
                try PathViabilityTests.nft(["delete", "table", "inet", Self.table])
            }
        }
    }

    /// RFC 9000 leaves a lost path to loss recovery; it must not cost the server anything else.
    /// A server whose replies to one client are refused by the kernel (EACCES from a `prohibit`
    /// route, EPERM from a firewall) keeps serving its other clients on the same socket, and the
    /// first client's reply goes out once its path is back. NIO's datagram channel, which the
    /// server used before, closed the socket on those errors, and every connection of the worker
    /// with it: this test failed there.
    @Test(arguments: Refusal.allCases)
    func aRouteThatFailsCostsOnlyItsOwnConnection(refusal: Refusal) async throws {
        try Self.addTestAddress()
        defer { Self.removeTestAddress() }
        // The server answers "slow" only once the route is broken, so that its reply meets it.
        let (slowArrived, arrival) = AsyncStream<Void>.makeStream()
        let (routeBroken, breakage) = AsyncStream<Void>.makeStream()
        let (slowAnswered, answer) = AsyncStream<Void>.makeStream()
        let (serving, port, pin) = try await NetworkConnectionTests.runListener(host: "0.0.0.0", Self.stack) { connection in
            try await connection.inboundStreams { stream in
                let request = try await NetworkConnectionTests.readAll(stream)
                if request == Data("slow".utf8) {
                    arrival.yield()
                    for await _ in routeBroken { break }
                }
                try await stream.send(request, endOfStream: true)
                if request == Data("slow".utf8) { answer.yield() }
            }
        }
        defer { serving.cancel() }
        let stack = Self.stack.tls.peerAuthentication(.pinnedSHA256(pin))

        try await withNetworkConnection(to: .hostPort(host: NWEndpoint.Host(Self.address), port: port)) { stack } _: { cut in
            try await withNetworkConnection(to: .hostPort(host: "127.0.0.1", port: port)) { stack } _: { healthy in
                let warmUp = try await healthy.openStream()
                try await warmUp.send(Data("hello".utf8), endOfStream: true)
                #expect(try await NetworkConnectionTests.readAll(warmUp) == Data("hello".utf8))

                let slow = try await cut.openStream()
                async let slowReply = NetworkConnectionTests.readAll(slow)
                try await slow.send(Data("slow".utf8), endOfStream: true)
                for await _ in slowArrived { break }
                try refusal.refuse(serverPort: port.rawValue)
                var restored = false
                defer { if !restored { try? refusal.restore() } }
                breakage.yield()
                // The reply to `cut` is queued on the shared socket ahead of these rounds, and
                // fails in the kernel, then again at each retransmission; `healthy` is served
                // throughout.
                for await _ in slowAnswered { break }
                for round in 0..<3 {
                    let stream = try await healthy.openStream()
                    try await stream.send(Data("round \(round)".utf8), endOfStream: true)
                    #expect(try await NetworkConnectionTests.readAll(stream) == Data("round \(round)".utf8))
                }
                if refusal == .firewallDrop {
                    let refused = try refusal.refusedPackets()
                    #expect((refused ?? 0) > 0, "the firewall rule dropped none of the server's packets (\(String(describing: refused)))")
                }
                try refusal.restore()
                restored = true
                #expect(try await slowReply == Data("slow".utf8))
            }
        }
    }
}
