import Foundation
import QuicTestSupport
import QuicTransport
import Testing

/// Session resumption and 0-RTT over real UDP on loopback (RFC 8446 §2.2, RFC 9001 §4.6), with
/// the facts checked in the qlog traces: how much handshake the server sent, and which packets
/// carried the data.
@Suite("Resumption and 0-RTT", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct ResumptionTests {
    /// Counts in one trace: the size of the Handshake-level CRYPTO flight sent, and 0-RTT packets
    /// sent or received.
    struct TraceFacts {
        /// The end of the furthest CRYPTO frame: the flight's size, whatever was sent again.
        var handshakeCryptoSent = 0
        var zeroRTTSent = 0
        var zeroRTTReceived = 0

        init(_ path: String) throws {
            for event in try QLogEvent.read(path) {
                guard let type = event.packetType else { continue }
                if event.name == "transport:packet_sent", type == "handshake" {
                    for frame in event.frames where frame["frame_type"] as? String == "crypto" {
                        let end = (frame["offset"] as? Int ?? 0) + (frame["length"] as? Int ?? 0)
                        handshakeCryptoSent = max(handshakeCryptoSent, end)
                    }
                }
                if type == "0RTT" {
                    if event.name == "transport:packet_sent" { zeroRTTSent += 1 }
                    if event.name == "transport:packet_received" { zeroRTTReceived += 1 }
                }
            }
        }
    }

    /// The facts of one side's trace, once that side has written its connection_closed record
    /// (traces are buffered until then, or for up to a second).
    static func trace(of group: NWConnectionGroup, side: String) async throws -> TraceFacts {
        let client = try #require(await group.qlogFilePath)
        let path = side == "client" ? client : client.replacingOccurrences(of: "_client.sqlog", with: "_server.sqlog")
        // A lost CONNECTION_CLOSE still ends the connection, at the idle timeout (30 s).
        let closed = await eventually(within: 45) {
            (try? String(contentsOfFile: path, encoding: .utf8))?.contains("connectivity:connection_closed") == true
        }
        try #require(closed, "the \(side) never wrote connection_closed to \(path)")
        return try TraceFacts(path)
    }

    /// Waits until the server's session ticket (NewSessionTicket, after the handshake) is stored.
    static func ticketArrives(in store: QUICSessionTicketStore, from server: LoopbackServer) async -> Bool {
        await eventually(within: 10) { store.entry(for: "127.0.0.1:\(server.port.rawValue)") != nil }
    }

    @Test func theSecondHandshakeResumesWithoutACertificate() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("resume-\(UUID())").path
        let server = try await LoopbackServer { $0.qlogDirectory = directory }
        server.echo()
        let store = QUICSessionTicketStore()
        var facts: [TraceFacts] = []
        for round in 0..<2 {
            let group = server.makeClient { $0.tls.sessionTicketStore = store; $0.qlogDirectory = directory }
            try await startAndWaitUntilReady(group)
            #expect(try await roundTrip(Data("round \(round)".utf8), on: group) == Data("round \(round)".utf8))
            let report = try #require(await group.establishmentReport())
            #expect(report.resumed == (round == 1), "round \(round)")
            #expect(!report.usedZeroRTT)
            if round == 0 {  // Round 1 would find round 0's ticket: only the first wait can fail.
                #expect(await Self.ticketArrives(in: store, from: server), "the first connection brought no session ticket")
            }
            group.cancel()
            facts.append(try await Self.trace(of: group, side: "server"))
        }
        #expect(store.entry(for: "127.0.0.1:\(server.port.rawValue)")?.transportParameters != nil)
        // A P-256 certificate and its signature make up most of the first server flight.
        #expect(facts[0].handshakeCryptoSent > 500, "full handshake: \(facts[0].handshakeCryptoSent) bytes")
        #expect(facts[1].handshakeCryptoSent < 250, "resumed: \(facts[1].handshakeCryptoSent) bytes, no Certificate")
    }

    /// Found by the session-ticket fuzz target: GnuTLS 3.7.9 trusts session data, and damaged
    /// tickets made it abort on an assertion or crash freeing the session. A ticket file's
    /// lines carry the ticket's SHA-256, and one that does not match, or has none, is never
    /// handed to GnuTLS: it costs a full handshake, and the next ticket replaces it in the file.
    @Test func aDamagedTicketCostsAFullHandshakeNotTheProcess() async throws {
        let regression = TestEnvironment.repositoryRoot.appendingPathComponent("Fuzz/regressions/session-ticket/damaged-ticket-crashed-gnutls-deinit")
        let damaged = Array(try Data(contentsOf: regression).dropFirst())  // Its first byte 0 marked a raw ticket.
        let server = try await LoopbackServer()
        server.echo()
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("damaged-ticket-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        let key = "127.0.0.1:\(server.port.rawValue)"
        let encoded = Data(damaged).base64EncodedString()
        // The check of other bytes, and an older line with no check at all.
        let lines = "\(key) \(encoded) - \(String(repeating: "ab", count: 32))\nother:443 \(encoded) -\n"
        try Data(lines.utf8).write(to: URL(fileURLWithPath: file))
        let store = QUICSessionTicketStore(path: file)
        #expect(store.entry(for: key) == nil && store.entry(for: "other:443") == nil, "neither line is loaded")
        let group = server.makeClient { $0.tls.sessionTicketStore = store }
        try await startAndWaitUntilReady(group)
        #expect(try await roundTrip(Data("full".utf8), on: group) == Data("full".utf8))
        let report = try #require(await group.establishmentReport())
        #expect(!report.resumed)
        #expect(await Self.ticketArrives(in: store, from: server), "the full handshake brings a new ticket")
        let saved = try String(contentsOfFile: file, encoding: .utf8)
        #expect(!saved.contains(encoded), "the damaged ticket is gone from the file")
        #expect(QUICSessionTicketStore(path: file).entry(for: key) != nil, "and the new one loads, its check intact")
        group.cancel()
    }

    @Test(arguments: [true, false])
    func zeroRTTDataIsAcceptedOrResentInOneRTT(serverAcceptsEarlyData: Bool) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("0rtt-\(UUID())").path
        let server = try await LoopbackServer {
            $0.qlogDirectory = directory
            $0.acceptsEarlyData = serverAcceptsEarlyData
        }
        server.echo()
        let store = QUICSessionTicketStore()
        // First connection: full handshake, which brings the ticket and the transport parameters.
        let first = server.makeClient { $0.tls.sessionTicketStore = store; $0.qlogDirectory = directory }
        try await startAndWaitUntilReady(first)
        #expect(try await roundTrip(Data("ticket please".utf8), on: first) == Data("ticket please".utf8))
        try #require(await Self.ticketArrives(in: store, from: server), "the first connection brought no ticket")
        first.cancel()

        // Second: the stream and its bytes are queued before the tunnel starts (one event loop,
        // in order), so they must leave with the first flight, in 0-RTT.
        let second = server.makeClient(allowFastOpen: true) { $0.tls.sessionTicketStore = store; $0.qlogDirectory = directory }
        let message = Data((0..<3000).map { UInt8(truncatingIfNeeded: $0) })
        let stream = try #require(NWConnection(from: second))
        stream.start(queue: DispatchQueue(label: "test.stream"))
        stream.send(content: message, contentContext: .finalMessage, isComplete: true, completion: .contentProcessed { _ in })
        second.start(queue: DispatchQueue(label: "test"))
        let echoed = try await within(10) { try await stream.receiveMessage() }
        #expect(echoed == message, "the bytes arrive once and intact, accepted or resent")
        let report = try #require(await second.establishmentReport())
        #expect(report.resumed)
        #expect(report.usedZeroRTT == serverAcceptsEarlyData)
        second.cancel()
        let client = try await Self.trace(of: second, side: "client")
        let serverSide = try await Self.trace(of: second, side: "server")
        #expect(client.zeroRTTSent > 0, "the client sent 0-RTT packets")
        if serverAcceptsEarlyData {
            #expect(serverSide.zeroRTTReceived > 0, "the server read them")
        }
    }
}
