/// The reports as the CLIs print them with `--stats` (one line each) and `--stats=json` (JSON
/// members, times in milliseconds, sizes in bytes).
extension QUICEstablishmentReport {
    /// One line for `--stats`: handshake time and RTT in milliseconds, resumption, 0-RTT, ALPN,
    /// cipher and QUIC version.
    public var summary: String {
        var parts = ["handshake \(Self.milliseconds(.seconds(duration))) ms", "handshake RTT \(Self.milliseconds(handshakeRTT)) ms"]
        parts.append("resumed \(resumed ? "yes" : "no")")
        parts.append("0-RTT \(usedZeroRTT ? "yes" : "no")")
        parts.append("ALPN \(alpn ?? "-")")
        parts.append(cipherSuite ?? "cipher ?")
        parts.append("QUIC version 0x\(String(quicVersion, radix: 16))")
        return parts.joined(separator: ", ")
    }

    /// `"duration_ms":…,"handshake_rtt_ms":…,…` without the braces, so callers can add members.
    public var jsonMembers: String {
        [
            "\"duration_ms\":\(Self.milliseconds(.seconds(duration)))",
            "\"handshake_rtt_ms\":\(Self.milliseconds(handshakeRTT))",
            "\"resumed\":\(resumed)",
            "\"zero_rtt\":\(usedZeroRTT)",
            "\"alpn\":\(alpn.map(QLogTrace.json) ?? "null")",
            "\"cipher\":\(cipherSuite.map(QLogTrace.json) ?? "null")",
            "\"quic_version\":\(quicVersion)",
        ].joined(separator: ",")
    }

    static func milliseconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        let value = Double(seconds) * 1e3 + Double(attoseconds) / 1e15
        return String(Double((value * 1000).rounded()) / 1000)
    }
}

extension QUICDataTransferReport {
    /// One line for `--stats`: duration, bytes and datagrams each way, losses (or "losses not
    /// tracked"), RTTs in milliseconds, congestion window, key updates and path changes.
    public var summary: String {
        let ms = QUICEstablishmentReport.milliseconds
        return [
            "over \(ms(.seconds(duration))) ms",
            "sent \(sentBytes) B in \(sentPackets) packets",
            "received \(receivedBytes) B in \(receivedPackets) packets",
            lostPackets.map { "lost \($0) packets (\(retransmittedBytes ?? 0) B retransmitted)" } ?? "losses not tracked",
            "RTT smoothed \(ms(smoothedRTT)) ms, min \(ms(minimumRTT)) ms, latest \(ms(latestRTT)) ms, variance \(ms(rttVariance)) ms",
            "cwnd \(congestionWindow) B (peak \(peakCongestionWindow) B)",
            "\(keyUpdates) key update(s), \(pathChanges) path change(s)",
        ].joined(separator: ", ")
    }

    /// `"duration_ms":…,"sent_bytes":…,…` without the braces, for `--stats=json`: times in
    /// milliseconds, sizes in bytes, `null` for losses when they are not tracked.
    public var jsonMembers: String {
        let ms = QUICEstablishmentReport.milliseconds
        return [
            "\"duration_ms\":\(ms(.seconds(duration)))",
            "\"sent_bytes\":\(sentBytes)", "\"sent_packets\":\(sentPackets)",
            "\"received_bytes\":\(receivedBytes)", "\"received_packets\":\(receivedPackets)",
            "\"lost_packets\":\(lostPackets.map(String.init) ?? "null")",
            "\"retransmitted_bytes\":\(retransmittedBytes.map(String.init) ?? "null")",
            "\"smoothed_rtt_ms\":\(ms(smoothedRTT))", "\"min_rtt_ms\":\(ms(minimumRTT))",
            "\"latest_rtt_ms\":\(ms(latestRTT))", "\"rtt_variance_ms\":\(ms(rttVariance))",
            "\"congestion_window\":\(congestionWindow)", "\"peak_congestion_window\":\(peakCongestionWindow)",
            "\"key_updates\":\(keyUpdates)", "\"path_changes\":\(pathChanges)",
        ].joined(separator: ",")
    }
}
