import Foundation
import QuicTestSupport
import QuicTransport
import Testing

/// Session resumption and 0-RTT over real UDP on loopback (RFC 8446 §2.2, RFC 9001 §4.6), with
/// the facts checked in the qlog traces: how much handshake the server sent, and which packets
/// carried the data.
@Suite("Resumption and 0-RTT", .serialized, .timeLimit(.minutes(1)))
struct ResumptionTests {
    /// Counts in one trace: server Handshake-level CRYPTO bytes sent, and 0-RTT packets sent or received.
    struct TraceFacts {
        var handshakeCryptoSent = 0
        var zeroRTTSent = 0
        var zeroRTTReceived = 0

        init(_ path: String) throws {
            for event in try QLogEvent.read(path) {
                guard let type = event.packetType else { continue }
                if event.name == "transport:packet_sent", type == "handshake" {
                    handshakeCryptoSent += event.frames.filter { $0["frame_type"] as? String == "crypto" }.compactMap { $0["length"] as? Int }.reduce(0, +)
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
        for _ in 0..<50 {
            if let text = try? String(contentsOfFile: path, encoding: .utf8), text.contains("connectivity:connection_closed") { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        return try TraceFacts(path)
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
            try await Task.sleep(for: .milliseconds(50))  // The ticket follows the handshake.
            group.cancel()
            try await Task.sleep(for: .milliseconds(100))
            facts.append(try await Self.trace(of: group, side: "server"))
        }
        #expect(store.entry(for: "127.0.0.1:\(server.port.rawValue)")?.transportParameters != nil)
        // A P-256 certificate and its signature make up most of the first server flight.
        #expect(facts[0].handshakeCryptoSent > 500, "full handshake: \(facts[0].handshakeCryptoSent) bytes")
        #expect(facts[1].handshakeCryptoSent < 250, "resumed: \(facts[1].handshakeCryptoSent) bytes, no Certificate")
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
        try await Task.sleep(for: .milliseconds(50))
        first.cancel()

        // Second: the stream is opened and written before the handshake completes.
        let second = server.makeClient(allowFastOpen: true) { $0.tls.sessionTicketStore = store; $0.qlogDirectory = directory }
        let message = Data((0..<3000).map { UInt8(truncatingIfNeeded: $0) })
        second.start(queue: DispatchQueue(label: "test"))
        let echoed = try await roundTrip(message, on: second)
        #expect(echoed == message, "the bytes arrive once and intact, accepted or resent")
        let report = try #require(await second.establishmentReport())
        #expect(report.resumed)
        #expect(report.usedZeroRTT == serverAcceptsEarlyData)
        second.cancel()
        try await Task.sleep(for: .milliseconds(100))
        let client = try await Self.trace(of: second, side: "client")
        let serverSide = try await Self.trace(of: second, side: "server")
        #expect(client.zeroRTTSent > 0, "the client sent 0-RTT packets")
        if serverAcceptsEarlyData {
            #expect(serverSide.zeroRTTReceived > 0, "the server read them")
        }
    }
}
