import Foundation
import QuicTestSupport
import QuicTransport
import Testing

/// Data-transfer reports (Network.framework's, for QUIC) checked against the qlog trace of the
/// same connection over the same interval, on an in-memory pair with loss and a virtual clock.
@Suite("Data-transfer report")
struct DataTransferReportTests {
    @Test(arguments: [0.0, 0.05])
    func reportAgreesWithTheQLogOfTheSameInterval(lossRate: Double) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("report-\(UUID())").path
        var configuration = InMemoryPair.defaultConfiguration()
        configuration.qlogDirectory = directory
        let pair = try InMemoryPair(clientConfiguration: configuration, seed: 11)
        let createdAt = pair.now
        pair.serverApplication = QUICConnectionCoreTests.echo
        try pair.run(until: { pair.client.isHandshakeCompleted && pair.serverConnection?.isHandshakeCompleted == true })
        // Quiet time on both sides of the interval, so its edges fall between qlog events.
        pair.advance(by: 1_000_000_000)
        // qlog times are whole milliseconds, truncated.
        let startMS = ((Double(pair.now - createdAt) / 1e6)).rounded(.down)
        let mark = pair.client.startDataTransferReport(now: pair.now)
        pair.lossRate = lossRate
        let transferStart = pair.now

        let payload = (0..<400_000).map { UInt8(truncatingIfNeeded: $0 &* 13) }
        let stream = try #require(try pair.client.openStream(bidirectional: true))
        try payload.withUnsafeBytes { try pair.client.send(streamID: stream, bytes: $0, fin: true, token: nil) }
        #expect(try pair.readClientStreamToEnd(stream) == payload)
        pair.lossRate = 0
        let elapsed = Duration.nanoseconds(Int64(pair.now - transferStart))
        pair.advance(by: 2_000_000_000)
        let endMS = (Double(pair.now - createdAt) / 1e6).rounded(.down)
        let report = pair.client.collectDataTransferReport(mark, now: pair.now)
        pair.client.flushQLog()

        let path = try #require(pair.client.qlogPath)
        let inside = try QLogEvent.read(path).filter { $0.time >= startMS && $0.time <= endMS }
        let sent = inside.filter { $0.name == "transport:packet_sent" }
        let received = inside.filter { $0.name == "transport:packet_received" }
        let lost = inside.filter { $0.name == "recovery:packet_lost" }
        let sentLength = sent.compactMap { ($0.data["raw"] as? [String: Any])?["length"] as? Int }.reduce(0, +)

        #expect(report.sentPackets == UInt64(sent.count))
        #expect(report.receivedPackets == UInt64(received.count))
        #expect(report.sentBytes == UInt64(sentLength))
        #expect(report.lostPackets == UInt64(lost.count))
        #expect(report.sentBytes > UInt64(payload.count), "the payload went out at least once")
        // The virtual clock's nanoseconds as a TimeInterval in seconds: equal within rounding.
        let (seconds, attoseconds) = (Duration.milliseconds(2_000) + elapsed).components
        #expect(abs(report.duration - (Double(seconds) + Double(attoseconds) / 1e18)) < 1e-9)
        if lossRate > 0 {
            #expect(report.lostPackets ?? 0 > 0)
            #expect(report.retransmittedBytes ?? 0 > 0)
            #expect(report.retransmittedBytes ?? 0 <= (report.lostPackets ?? 0) * 1500)
        } else {
            #expect(report.lostPackets == 0)
            #expect(report.retransmittedBytes == 0)
        }
        #expect(report.peakCongestionWindow >= report.congestionWindow)
        #expect(report.smoothedRTT >= .milliseconds(20), "two 10 ms one-way delays")
        #expect(report.minimumRTT >= .milliseconds(20))
        #expect(report.minimumRTT <= report.smoothedRTT + report.rttVariance * 4)
    }

    @Test func aReportStartedLaterSeesOnlyItsOwnInterval() throws {
        let pair = try InMemoryPair(seed: 3)
        pair.serverApplication = QUICConnectionCoreTests.echo
        try pair.run(until: { pair.client.isHandshakeCompleted })
        let whole = pair.client.startDataTransferReport(now: pair.now)
        let stream = try #require(try pair.client.openStream(bidirectional: true))
        try [UInt8](repeating: 1, count: 50_000).withUnsafeBytes { try pair.client.send(streamID: stream, bytes: $0, fin: false, token: nil) }
        pair.advance(by: 500_000_000)
        let later = pair.client.startDataTransferReport(now: pair.now)
        let quiet = pair.client.collectDataTransferReport(later, now: pair.now)
        #expect(quiet.sentPackets == 0)
        #expect(quiet.receivedBytes == 0)
        let all = pair.client.collectDataTransferReport(whole, now: pair.now)
        #expect(all.sentBytes > 50_000)
        #expect(all.receivedBytes > 50_000, "the echo came back")
    }
}
