import Foundation
@testable import H3
import HTTPTypes
import QuicTestSupport
import QuicTransport
import Testing

/// Every closed HTTP/3 connection is freed, with its QUIC core, its nghttp3 codec and the tasks
/// that fed it, on the server and on the client, however the connection ended.
@Suite("HTTP/3 connection lifetime", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct HTTP3ConnectionLifetimeTests {
    /// In memory on the virtual clock: once a request has been answered, the client has closed
    /// and both periods have ended, neither codec nor core is left.
    @Test func codecsAndCoresAreFreedOnceTheConnectionHasEnded() throws {
        weak var clientCodec: HTTP3Codec?
        weak var serverCodec: HTTP3Codec?
        weak var clientCore: QUICConnectionCore?
        weak var serverCore: QUICConnectionCore?
        var made: (pair: InMemoryPair, client: HTTP3Codec, box: HTTP3CodecTests.ServerBox)? =
            try HTTP3CodecTests.makePair { Array("body of \($0)".utf8) }
        let live = made!.pair.server.configuration.liveConnections
        do {
            let (pair, client, box) = made!
            try pair.run(until: { client.isEstablished })
            let stream = try #require(try client.submitRequest(headers: HTTP3CodecTests.request("/a"), body: nil))
            var ended = false
            try pair.run(until: {
                for event in client.takeEvents() { if case .end(stream) = event { ended = true } }
                return ended
            })
            (clientCodec, serverCodec) = (client, box.codec)
            (clientCore, serverCore) = (pair.client, pair.serverConnection)
            box.codec = nil
            pair.client.close(applicationErrorCode: H3.HTTP3ErrorCode.noError.rawValue, reason: "", now: pair.now)
            try pair.run(until: { pair.client.state == .closed && pair.serverConnection?.state == .closed })
            pair.forgetClosedServerConnection()
        }
        #expect(serverCore == nil && serverCodec == nil, "the server's core or codec outlived the connection")
        #expect(live.count == 0)
        made = nil
        #expect(clientCore == nil && clientCodec == nil, "the client's core or codec outlived its owner")
    }

    /// A client connection holds its flow-control credit, its pump and its pool entry without
    /// weak references (which would slow every retain of it); each hold is let go when the
    /// connection is over, so the connection is freed once the responses that name it are.
    @Test func aClosedClientConnectionIsFreed() async throws {
        let (server, port, identity) = try await HTTP3LoopbackTests.startServer { _ in HTTP3ServerResponse(status: .ok, body: Array("hello".utf8)) }
        defer { server.shutdown() }
        let client = HTTP3LoopbackTests.client(trusting: identity)
        weak var connection: HTTP3ClientConnection?
        do {
            let response = try await client.execute(HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/"))
            #expect(try await response.body.collect() == Array("hello".utf8))
            connection = response.body.exchange.connection
            #expect(connection != nil)
        }
        await client.close()
        let freed = await eventually(within: 20) { connection == nil }
        #expect(freed, "the client connection outlived its close and its last response")
    }

    /// The real `h3serve`: after h3get and aioquic have fetched from it, it stops (SIGTERM)
    /// with no connection left in memory, which it reports from its own count.
    @Test func h3serveStopsWithNoConnectionInMemory() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("h3serve-lifetime-\(UUID())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        try Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) }).write(to: root.appendingPathComponent("large.bin"))
        let (server, port) = try await startH3serve(root: root, ["--no-tcp"])
        defer { server.stop() }
        for _ in 0..<2 {
            let fetch = try ChildProcess(try TestEnvironment.executable("h3get"), [
                "--http3-only", "-k", "-o", "/dev/null", "https://127.0.0.1:\(port)/large.bin",
            ])
            #expect(try await fetch.waitForExit() == 0, "h3get: \(fetch.standardError)")
        }
        let aioquic = try ChildProcess(try TestEnvironment.python(), [
            TestEnvironment.aioquicScript("h3_client.py"), "-k", "https://127.0.0.1:\(port)/large.bin",
        ])
        #expect(try await aioquic.waitForExit() == 0, "aioquic: \(aioquic.standardError)")
        server.terminate()
        #expect(try await server.waitForExit() == 0, "\(server.standardError)")
        #expect(server.standardOutput.contains("stopped: 0 connections still in memory"), "\(server.standardOutput)")
    }

    /// Real UDP on loopback against `HTTP3Server` with the file handler h3serve runs: h3get and
    /// aioquic fetch whole files, and our client walks away from a large response mid-transfer, so
    /// the server's body pump is waiting for room when the connection ends. Afterwards no
    /// connection is left in memory on either side.
    @Test func everyConnectionIsFreedOnBothSides() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("lifetime-\(UUID())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let small = Array("small file\n".utf8)
        let large = (0..<(24 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 13) }
        try Data(small).write(to: root.appendingPathComponent("small.txt"))
        try Data(large).write(to: root.appendingPathComponent("large.bin"))
        let files = HTTP3FileHandler(root: root.path)
        let (server, port, identity) = try await HTTP3LoopbackTests.startServer { files.respond(to: $0) }
        defer { server.shutdown(gracePeriod: .zero) }

        // Two h3get processes, one of them fetching the streamed file whole.
        for urls in [["small.txt"], ["small.txt", "large.bin"]] {
            let fetch = try ChildProcess(try TestEnvironment.executable("h3get"), [
                "--http3-only", "--pin-sha256", identity.sha256FingerprintHex,
            ] + urls.flatMap { ["-o", "/dev/null", "https://127.0.0.1:\(port)/\($0)"] })
            #expect(try await fetch.waitForExit() == 0, "h3get: \(fetch.standardError)")
        }
        // aioquic, a client nobody here wrote.
        let aioquic = try ChildProcess(try TestEnvironment.python(), [
            TestEnvironment.aioquicScript("h3_client.py"), "-k", "https://127.0.0.1:\(port)/small.txt",
        ])
        #expect(try await aioquic.waitForExit() == 0, "aioquic: \(aioquic.standardError)")

        // Our client reads the first piece of the large file, then closes the connection.
        let client = HTTP3LoopbackTests.client(trusting: identity)
        let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/large.bin")
        let response = try await client.execute(request)
        var iterator = response.body.makeAsyncIterator()
        let first = try #require(try await iterator.next())
        #expect(Array(first) == Array(large.prefix(first.count)))
        let whole = try await client.execute(HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/small.txt"))
        #expect(try await whole.body.collect() == small)
        await client.close()

        // HTTPSession, as h3get uses it: one HTTP/3 client per target, shut down at the end.
        var sessionConfiguration = HTTPSession.Configuration()
        sessionConfiguration.policy = .http3Only
        sessionConfiguration.certificateVerification = .pinnedSHA256(identity.sha256Fingerprint)
        sessionConfiguration.altServiceCache = nil
        let session = HTTPSession(configuration: sessionConfiguration)
        let viaSession = try await session.execute(HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/small.txt"))
        #expect(viaSession.version == .http3)
        #expect(try await viaSession.body.collect() == small)
        await session.shutdown()

        // A connection is freed once it has closed and drained; one whose client vanished without
        // a CONNECTION_CLOSE closes at the idle timeout (30 s). Then nothing may be left.
        let allClosed = await eventually(within: 45) { await server.connectionCount() == 0 }
        let stillOpen = await server.connectionCount()
        #expect(allClosed, "\(stillOpen) connections still open past the idle timeout")
        let serverFreed = await eventually(within: 10) { server.liveConnections.count == 0 }
        #expect(serverFreed, "\(server.liveConnections.count) of 5 server connections are still in memory after they all closed")
        #expect(server.liveConnections.holdingConnectionState == 0, "a freed core released its C state once, and counted it once")
        #expect(client.liveConnections.holdingConnectionState <= client.liveConnections.count)
        let clientFreed = await eventually(within: 45) { client.liveConnections.count == 0 }
        #expect(clientFreed, "the client's closed connection is still in memory")
        let sessionFreed = await eventually(within: 45) { session.liveHTTP3Connections.count == 0 }
        #expect(sessionFreed, "the session's closed connection is still in memory")
    }
}
