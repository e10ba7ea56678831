import Foundation
import QuicTestSupport
@testable import QuicTransport
import Testing

/// What `NWProtocolQUIC.Metadata` reports and what setting it does, over real UDP and TLS.
@Suite("QUIC metadata over loopback", .timeLimit(TestEnvironment.minutes(2)))
struct QUICMetadataTests {
    /// With a 3 s idle timeout on both sides, a quiet tunnel ends after 3 s unless keep-alive
    /// PINGs (RFC 9000 §10.1.2), one a second, hold it open. Both run side by side until the
    /// quiet one has timed out (the timeout is at least three PTOs, which load can stretch, so
    /// the wait has no fixed length); the kept one, started first, is open then. That it stays
    /// open idle period after idle period is shown on the virtual clock, below.
    @Test func keepAlivePingsHoldAQuietTunnelOpenPastItsIdleTimeout() async throws {
        // Stretched on slow runs (ThreadSanitizer, a loaded machine), where a loop can stall for
        // longer than two of a 1-second ping's intervals; the ratio of ping to timeout stays.
        let idleTimeout = Int(TestEnvironment.scaled(3_000))
        let pingInterval = Int(TestEnvironment.scaled(1).rounded(.up))
        let server = try await LoopbackServer { $0.idleTimeout = idleTimeout }
        server.echo()
        let kept = server.makeClient { $0.idleTimeout = idleTimeout }
        let quiet = server.makeClient { $0.idleTimeout = idleTimeout }
        // Set before start, as apps do with a group's metadata; it applies at the handshake.
        quicMetadata(kept).keepAlive = .seconds(pingInterval)
        try await startAndWaitUntilReady(kept)
        try await startAndWaitUntilReady(quiet)
        #expect(quicMetadata(kept).keepAlive == .seconds(pingInterval))
        #expect(quicMetadata(kept).remoteIdleTimeout == idleTimeout)
        _ = await eventually(within: 30) { if case .failed = quiet.state { return true } else { return false } }
        guard case .failed(let error) = quiet.state, case .quic(let quic) = error else {
            Issue.record("the tunnel without keep-alive is \(quiet.state), not failed by its idle timeout")
            return
        }
        #expect(quic.kind == .idleTimeout)
        #expect(kept.state == .ready, "keep-alive PINGs kept the tunnel open")
        #expect(try await roundTrip(Data("still here".utf8), on: kept) == Data("still here".utf8))
        kept.cancel()
    }

    /// Keep-alive on the in-memory pair's virtual clock, where "through ten idle periods" costs
    /// no wait: a quiet connection that sends a PING each second stays open, and one that does
    /// not ends at its 3 s idle timeout (RFC 9000 §10.1).
    @Test(arguments: [true, false])
    func keepAliveHoldsAQuietConnectionOpenOnTheVirtualClock(keepAlive: Bool) throws {
        var configuration = InMemoryPair.defaultConfiguration()
        configuration.idleTimeoutMilliseconds = 3_000
        let pair = try InMemoryPair(clientConfiguration: configuration, serverConfiguration: configuration)
        try pair.run(until: { pair.client.isHandshakeCompleted && pair.serverConnection?.isHandshakeCompleted == true })
        if keepAlive { pair.client.setKeepAlive(milliseconds: 1_000) }
        pair.advance(by: 30_000_000_000)
        if keepAlive {
            #expect(pair.client.closeReason == nil, "\(String(describing: pair.client.closeReason))")
            #expect(pair.serverConnection?.closeReason == nil)
        } else {
            #expect(pair.client.closeReason == .idleTimeout)
        }
    }

    /// Sends `text` on `stream`, open to an echo server, and reads `count` bytes back: a round
    /// trip through both sides, after which whatever the peer had sent before has arrived.
    private static func echoRoundTrip(_ text: String, on stream: NWConnection, reading count: Int) async throws {
        try await stream.send(content: Data(text.utf8), isComplete: false)
        var read = 0
        while read < count {
            let (content, isComplete) = try await within(10) { try await stream.receive() }
            read += content?.count ?? 0
            if isComplete { break }
        }
    }

    /// A server that allows two bidirectional streams raises the limit to three through its
    /// metadata (MAX_STREAMS, RFC 9000 §19.11); the client's third stream then opens, and both
    /// sides' metadata report the new limit.
    @Test func raisingLocalMaxStreamsLetsThePeerOpenMore() async throws {
        let server = try await LoopbackServer { $0.initialMaxStreamsBidirectional = 2 }
        let serverMetadata = Recorder<NWProtocolQUIC.Metadata>()
        let serverGroups = server.groups
        Task {
            for await group in serverGroups {
                serverMetadata.append(quicMetadata(group))
                await LoopbackServer.echo(group)
            }
        }
        let group = server.makeClient()
        try await startAndWaitUntilReady(group)
        let clientMetadata = quicMetadata(group)
        #expect(clientMetadata.remoteMaxStreamsBidirectional == 2)
        // Two streams held open use up the limit; the third waits for credit.
        var held: [NWConnection] = []
        for index in 0..<3 {
            let stream = try #require(NWConnection(from: group))
            stream.start(queue: DispatchQueue(label: "test.stream"))
            stream.send(content: Data("stream \(index)".utf8), isComplete: false, completion: .idempotent)
            held.append(stream)
        }
        #expect(await eventually(within: 10) { held[0].state == .ready && held[1].state == .ready })
        // A round trip after the third stream was queued, with no MAX_STREAMS coming back.
        try await Self.echoRoundTrip("sync", on: held[0], reading: "stream 0sync".utf8.count)
        #expect(held[2].state == .preparing, "the peer's limit of two holds the third stream back")

        let metadata = try #require(await eventually(within: 10) { !serverMetadata.values.isEmpty } ? serverMetadata.values.first : nil)
        #expect(metadata.localMaxStreamsBidirectional == 2)
        metadata.localMaxStreamsBidirectional = 3
        #expect(metadata.localMaxStreamsBidirectional == 3)
        #expect(await eventually(within: 10) { held[2].state == .ready }, "MAX_STREAMS let the third stream open")
        #expect(await eventually(within: 10) { clientMetadata.remoteMaxStreamsBidirectional == 3 })
        // Limits never go down (RFC 9000 §4.6).
        metadata.localMaxStreamsBidirectional = 1
        #expect(metadata.localMaxStreamsBidirectional == 3)
        // The peer sees the same: a fourth stream still waits, and its limit stays at three.
        let fourth = try #require(NWConnection(from: group))
        fourth.start(queue: DispatchQueue(label: "test.stream"))
        fourth.send(content: Data("stream 3".utf8), isComplete: false, completion: .idempotent)
        try await Self.echoRoundTrip("again", on: held[0], reading: "again".utf8.count)
        #expect(fourth.state == .preparing)
        #expect(clientMetadata.remoteMaxStreamsBidirectional == 3)
        group.cancel()
    }

    /// The tunnel's peer closes with an application error and reason: the metadata reports both.
    @Test func thePeersCloseCodeAndReasonLandInTheMetadata() async throws {
        let server = try await LoopbackServer()
        let serverGroups = server.groups
        Task {
            for await group in serverGroups {
                group.start(queue: DispatchQueue(label: "server"))
                let metadata = quicMetadata(group)
                metadata.applicationError = NWProtocolQUIC.ApplicationError(code: 0x1ab, reason: "going away")
                group.cancel()
            }
        }
        let group = server.makeClient()
        let states = group.states
        group.start(queue: DispatchQueue(label: "test"))
        _ = try await within(10) {
            for await state in states {
                if case .failed = state { return true }
                if case .cancelled = state { return true }
            }
            return false
        }
        let metadata = quicMetadata(group)
        #expect(metadata.applicationError == NWProtocolQUIC.ApplicationError(code: 0x1ab, reason: "going away"))
    }
}
