import Foundation
import H3
import HTTPTypes
import QuicTestSupport
import QuicTransport
import Testing

/// A server on two workers over real UDP on 127.0.0.1: connections spread over both, and a
/// client that moves to a new port (RFC 9000 §9) stays with the worker that owns its connection,
/// steered by the kernel or, without the steering program, handed over between workers.
@Suite("HTTP/3 server workers", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct ServerWorkersTests {
    static let body = (0..<400_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) }

    static func startServer(steersInKernel: Bool, host: String = "localhost") async throws -> (HTTP3Server, UInt16, SelfSignedCertificate) {
        let identity = try SelfSignedCertificate.generate()
        var configuration = HTTP3Server.Configuration()
        configuration.host = host
        configuration.port = 0
        configuration.identity = identity
        configuration.workers = 2
        configuration.steersInKernel = steersInKernel
        let server = try HTTP3Server(configuration: configuration) { request in
            HTTP3ServerResponse(status: .ok, body: request.head.path == "/big" ? Self.body : Array("small".utf8))
        }
        return (server, try await server.start(), identity)
    }

    /// `clients` clients, each on its own connection from its own port, fetch /big, move to a
    /// new local port once the handshake is confirmed, and fetch /small there. Returns how
    /// many bodies came back byte-exact and how many clients moved.
    static func fetchWhileMigrating(port: UInt16, identity: SelfSignedCertificate, clients: Int) async throws -> (exact: Int, migrated: Int) {
        try await withThrowingTaskGroup(of: (Bool, Bool).self) { tasks in
            for _ in 0..<clients {
                tasks.addTask {
                    var configuration = HTTP3Client.Configuration()
                    configuration.certificateVerification = .pinnedSHA256(identity.sha256Fingerprint)
                    configuration.migratesAfterHandshake = true
                    let client = HTTP3Client(configuration: configuration)
                    defer { client.shutdown() }
                    let big = try await client.execute(HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/big"))
                    let bigExact = try await big.body.collect() == Self.body
                    let moved = await eventually(within: 10) { (await big.statistics()?.transfer.pathChanges ?? 0) >= 1 }
                    let small = try await client.execute(HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/small"))
                    let smallExact = try await small.body.collect() == Array("small".utf8)
                    return (bigExact && smallExact, moved)
                }
            }
            var result = (exact: 0, migrated: 0)
            for try await (exact, moved) in tasks {
                if exact { result.exact += 1 }
                if moved { result.migrated += 1 }
            }
            return result
        }
    }

    /// On the default `localhost` (a socket per loopback address and worker) and on one
    /// dual-stack socket per worker (`::`), where these IPv4 clients are v4-mapped.
    @Test(arguments: ["localhost", "::"])
    func theKernelKeepsMigratedConnectionsOnTheirWorker(host: String) async throws {
        let (server, port, identity) = try await Self.startServer(steersInKernel: true, host: host)
        defer { server.shutdown() }
        #expect(server.isSteeredByKernel, "SO_ATTACH_REUSEPORT_CBPF was refused")
        let result = try await Self.fetchWhileMigrating(port: port, identity: identity, clients: 16)
        #expect(result.exact == 16)
        #expect(result.migrated == 16)
        let statistics = await server.workerStatistics()
        #expect(statistics.count == 2)
        #expect(statistics.allSatisfy { $0.connectionsAccepted > 0 }, "16 connections did not spread over both workers: \(statistics)")
        #expect(statistics.map(\.connectionsAccepted).reduce(0, +) == 16)
        #expect(
            server.forwardedDatagrams == 0,
            "the kernel should steer every packet to its worker; \(server.forwardedDatagrams) were forwarded: \(server.forwardedSamples)"
        )
    }

    /// The negative control of the test above: without the program the kernel hashes a
    /// migrated client's new 4-tuple, about half land on the other worker, and the workers
    /// hand those packets over; every transfer still completes.
    @Test func withoutTheKernelProgramWorkersHandMigratedPacketsOver() async throws {
        let (server, port, identity) = try await Self.startServer(steersInKernel: false)
        defer { server.shutdown() }
        #expect(!server.isSteeredByKernel)
        let result = try await Self.fetchWhileMigrating(port: port, identity: identity, clients: 20)
        #expect(result.exact == 20)
        #expect(result.migrated == 20)
        #expect(server.forwardedDatagrams > 0, "20 migrated clients and not one new 4-tuple hashed to the other worker")
    }

    /// The kernel lets any socket of the same user with SO_REUSEPORT join a group, so a second
    /// server started on the port would silently take part of the first one's traffic. It must
    /// fail instead, as a server without workers does.
    @Test func aSecondServerOnTheSamePortFailsInsteadOfSharingIt() async throws {
        let (first, port, identity) = try await Self.startServer(steersInKernel: true)
        defer { first.shutdown() }
        var configuration = HTTP3Server.Configuration()
        configuration.port = port
        configuration.identity = identity
        configuration.workers = 2
        let second = try HTTP3Server(configuration: configuration) { _ in HTTP3ServerResponse(status: .ok, body: []) }
        let error = await #expect(throws: (any Error).self) { try await second.start() }
        #expect("\(String(describing: error))".contains(String(cString: strerror(EADDRINUSE))), "\(String(describing: error))")
        #expect(await first.workerStatistics().count == 2)
    }
}
