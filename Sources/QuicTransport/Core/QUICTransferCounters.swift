/// Running totals a data-transfer report is cut from. ngtcp2 0.12's `ngtcp2_conn_stat` holds
/// RTT and congestion figures only, so the core counts datagrams and bytes itself and takes
/// losses from ngtcp2's recovery events (`QUICLossLedger`).
struct QUICTransferCounters: Equatable, Sendable {
    /// UDP payload bytes and datagrams; a datagram is one IP packet, as Network.framework counts.
    var sentBytes: UInt64 = 0
    var sentDatagrams: UInt64 = 0
    var receivedBytes: UInt64 = 0
    var receivedDatagrams: UInt64 = 0
    /// Packets declared lost (RFC 9002 §6.1) and the bytes they carried.
    var lostPackets: UInt64 = 0
    var lostBytes: UInt64 = 0
    /// 1-RTT key updates completed, by either side (RFC 9001 §6).
    var keyUpdates: UInt64 = 0
    /// Moves to a new path: the peer's new address, or our own after migrating (RFC 9000 §9).
    var pathChanges: UInt64 = 0
    /// Stream bytes the application handed to QUIC that went out for the first time, and stream
    /// bytes delivered to it in order (for HTTP/3, its frames).
    var sentStreamBytes: UInt64 = 0
    var receivedStreamBytes: UInt64 = 0

    /// What happened between `earlier` and `self`.
    func since(_ earlier: QUICTransferCounters) -> QUICTransferCounters {
        QUICTransferCounters(
            sentBytes: sentBytes &- earlier.sentBytes,
            sentDatagrams: sentDatagrams &- earlier.sentDatagrams,
            receivedBytes: receivedBytes &- earlier.receivedBytes,
            receivedDatagrams: receivedDatagrams &- earlier.receivedDatagrams,
            lostPackets: lostPackets &- earlier.lostPackets,
            lostBytes: lostBytes &- earlier.lostBytes,
            keyUpdates: keyUpdates &- earlier.keyUpdates,
            pathChanges: pathChanges &- earlier.pathChanges,
            sentStreamBytes: sentStreamBytes &- earlier.sentStreamBytes,
            receivedStreamBytes: receivedStreamBytes &- earlier.receivedStreamBytes
        )
    }
}

/// Reads ngtcp2's qlog records as they are produced to learn which packets recovery declared
/// lost and how large each was when sent: ngtcp2 0.12 reports losses nowhere else.
///
/// Records look like `{"time":T,"name":"transport:packet_sent","data":{…,"header":
/// {"packet_type":"1RTT","packet_number":N},"raw":{"length":L}}}`; only the name and the tail
/// are read. Sizes are kept for the most recent packets only, since ngtcp2 declares a packet
/// lost within a few round trips of sending it (RFC 9002 §6.1).
struct QUICLossLedger {
    private var sentSizes: [UInt64: Int] = [:]
    private var highestPacketNumber: UInt64 = 0
    private static let window: UInt64 = 65_536

    enum Observation: Equatable {
        case lost(bytes: Int)
    }

    mutating func observe(_ record: UnsafeRawBufferPointer) -> Observation? {
        guard let name = Self.range(of: "\"name\":\"", in: record, from: 0, limit: 48) else { return nil }
        if Self.hasPrefix("transport:packet_sent\"", in: record, at: name) {
            guard let key = Self.packetKey(in: record), let length = Self.number(after: "\"raw\":{\"length\":", in: record) else {
                return nil
            }
            sentSizes[key] = Int(length)
            let number = key & ((1 << 62) - 1)
            if number > highestPacketNumber { highestPacketNumber = number }
            if sentSizes.count > 2 * Int(Self.window) {
                let floor = highestPacketNumber > Self.window ? highestPacketNumber - Self.window : 0
                sentSizes = sentSizes.filter { $0.key & ((1 << 62) - 1) >= floor }
            }
            return nil
        }
        if Self.hasPrefix("recovery:packet_lost\"", in: record, at: name) {
            let bytes = Self.packetKey(in: record).flatMap { sentSizes.removeValue(forKey: $0) } ?? 0
            return .lost(bytes: bytes)
        }
        return nil
    }

    /// Packet number space (two high bits) and packet number, from the record's header.
    private static func packetKey(in record: UnsafeRawBufferPointer) -> UInt64? {
        guard let typeStart = lastRange(of: "\"packet_type\":\"", in: record),
            let number = number(after: "\"packet_number\":", in: record)
        else { return nil }
        let space: UInt64 = switch record[typeStart] {
        case UInt8(ascii: "i"): 0
        case UInt8(ascii: "h"): 1
        case UInt8(ascii: "0"): 2
        default: 3
        }
        return space << 62 | number
    }

    private static func number(after needle: StaticString, in record: UnsafeRawBufferPointer) -> UInt64? {
        guard var index = lastRange(of: needle, in: record) else { return nil }
        var value: UInt64 = 0
        var digits = 0
        while index < record.count, record[index] >= UInt8(ascii: "0"), record[index] <= UInt8(ascii: "9") {
            value = value &* 10 &+ UInt64(record[index] - UInt8(ascii: "0"))
            index += 1
            digits += 1
        }
        return digits > 0 ? value : nil
    }

    /// The index just past the first `needle` at or after `from`, looking at most `limit` bytes in.
    private static func range(of needle: StaticString, in record: UnsafeRawBufferPointer, from: Int, limit: Int) -> Int? {
        let pattern = UnsafeRawBufferPointer(start: needle.utf8Start, count: needle.utf8CodeUnitCount)
        let end = min(record.count - pattern.count, from + limit)
        guard end >= from else { return nil }
        for start in from...end where matches(pattern, in: record, at: start) { return start + pattern.count }
        return nil
    }

    /// The index just past the last `needle`: header fields sit at the end of a record.
    private static func lastRange(of needle: StaticString, in record: UnsafeRawBufferPointer) -> Int? {
        let pattern = UnsafeRawBufferPointer(start: needle.utf8Start, count: needle.utf8CodeUnitCount)
        var start = record.count - pattern.count
        while start >= 0 {
            if matches(pattern, in: record, at: start) { return start + pattern.count }
            start -= 1
        }
        return nil
    }

    private static func hasPrefix(_ prefix: StaticString, in record: UnsafeRawBufferPointer, at index: Int) -> Bool {
        let pattern = UnsafeRawBufferPointer(start: prefix.utf8Start, count: prefix.utf8CodeUnitCount)
        return index + pattern.count <= record.count && matches(pattern, in: record, at: index)
    }

    private static func matches(_ pattern: UnsafeRawBufferPointer, in record: UnsafeRawBufferPointer, at start: Int) -> Bool {
        for offset in 0..<pattern.count where record[start + offset] != pattern[offset] { return false }
        return true
    }
}
