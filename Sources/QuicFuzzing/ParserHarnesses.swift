import Foundation
import H3
import QuicTransport

/// The parsers of text and bytes that peers, DNS servers and files hand us.
enum ParserHarnesses {
    /// Scans a stream in one piece and again split in two: the frames must be the same, and
    /// every qlog event made from them must be valid JSON, or a peer could break our traces.
    /// The first byte chooses the stream kind and where to split.
    static func frames(_ input: [UInt8]) {
        guard let first = input.first else { return }
        let stream = Array(input.dropFirst())
        let unidirectional = first & 1 == 1
        let split = stream.isEmpty ? 0 : Int(first >> 1) % (stream.count + 1)
        var whole = HTTP3FrameScanner(unidirectional: unidirectional)
        let once = stream.withUnsafeBytes { whole.scan($0) }
        var pieces = HTTP3FrameScanner(unidirectional: unidirectional)
        let twice = stream[..<split].withUnsafeBytes { pieces.scan($0) } + stream[split...].withUnsafeBytes { pieces.scan($0) }
        precondition(describe(once) == describe(twice), "the scanner's frames depend on how the stream was split")
        for output in once {
            let event: String
            switch output {
            case .streamType(let type): event = HTTP3QLog.streamTypeSet(streamID: 3, owner: "remote", type: type)
            case .frame(let frame): event = HTTP3QLog.frame(streamID: 0, frame)
            }
            requireJSON(event)
        }
        // Field names and values come from the peer's QPACK, byte for byte.
        let text = String(decoding: stream, as: UTF8.self)
        requireJSON(HTTP3QLog.headers(streamID: 0, length: UInt64(stream.count), fields: [(name: text, value: text)]))
    }

    private static func describe(_ outputs: [HTTP3FrameScanner.Output]) -> [String] {
        outputs.map { output in
            switch output {
            case .streamType(let type): return "type \(type)"
            case .frame(let frame): return "frame \(frame.type) \(frame.length) \(frame.payload)"
            }
        }
    }

    private static func requireJSON(_ event: String) {
        let parsed = try? JSONSerialization.jsonObject(with: Data(event.utf8))
        precondition(parsed is [String: Any], "a qlog event is not a JSON object: \(event)")
    }

    /// Parses an `Alt-Svc` value; what parses must print back to a value that parses the same.
    static func altSvc(_ input: [UInt8]) {
        guard case .alternatives(let services)? = try? AltServiceFieldValue(parsing: String(decoding: input, as: UTF8.self)) else { return }
        for service in services {
            let printed = service.description
            guard case .alternatives(let again)? = try? AltServiceFieldValue(parsing: printed) else {
                preconditionFailure("an alternative we parsed prints as an invalid Alt-Svc value: \(printed)")
            }
            precondition(again == [service], "Alt-Svc does not survive printing: \(service) became \(again)")
        }
    }

    /// Parses one line of the Alt-Svc cache file.
    static func altSvcCacheLine(_ input: [UInt8]) {
        for line in String(decoding: input, as: UTF8.self).split(separator: "\n") {
            guard let (origin, entry) = AltServiceCache.parseLine(String(line)) else { continue }
            precondition(!entry.alternative.protocolID.isEmpty || line.contains("  "), "an entry without a protocol: \(line)")
            _ = origin.description
        }
    }

    /// Parses a DNS answer for HTTPS records; the message's own ID is the one expected.
    static func httpsRecord(_ input: [UInt8]) {
        guard input.count >= 2 else { return }
        let id = UInt16(input[0]) << 8 | UInt16(input[1])
        guard let records = try? DNSMessage.httpsRecords(in: input, id: id) else { return }
        for record in records {
            for hint in record.ipv4Hints { precondition(IPv4Address(hint), "an ipv4hint that is not an address: \(hint)") }
            for hint in record.ipv6Hints { precondition(IPv6Address(hint), "an ipv6hint that is not an address: \(hint)") }
        }
    }

    /// Parses a `priority` field: the urgency stays in 0...7, and the value prints back to itself.
    static func priority(_ input: [UInt8]) {
        let priority = HTTPPriority(fieldValue: String(decoding: input, as: UTF8.self))
        precondition(HTTPPriority.urgencyRange.contains(priority.urgency), "urgency \(priority.urgency) out of range")
        precondition(HTTPPriority(fieldValue: priority.fieldValue) == priority, "\(priority.fieldValue) does not parse back")
    }

    private static func IPv4Address(_ text: String) -> Bool {
        var address = in_addr()
        return inet_pton(AF_INET, text, &address) == 1
    }

    private static func IPv6Address(_ text: String) -> Bool {
        var address = in6_addr()
        return inet_pton(AF_INET6, text, &address) == 1
    }
}
