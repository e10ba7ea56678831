import QuicTransport

/// The `http:` qlog events (draft-ietf-quic-qlog-h3-events, as qvis reads them with qlog 0.3):
/// `http:frame_created`, `http:frame_parsed` and `http:stream_type_set`, as JSON objects.
package enum HTTP3QLog {
    package static func streamTypeSet(streamID: Int64, owner: String, type: UInt64) -> String {
        let name = HTTP3FrameScanner.StreamType(rawValue: type)?.qlogName ?? "unknown"
        return "{\"stream_id\":\(streamID),\"owner\":\"\(owner)\",\"stream_type\":\"\(name)\"}"
    }

    package static func headers(streamID: Int64, length: UInt64?, fields: [(name: String, value: String)]) -> String {
        let list = fields.map { "{\"name\":\(json($0.name)),\"value\":\(json($0.value))}" }.joined(separator: ",")
        return event(streamID: streamID, length: length, frame: "{\"frame_type\":\"headers\",\"headers\":[\(list)]}")
    }

    /// A frame other than HEADERS, described from its type and payload.
    package static func frame(streamID: Int64, _ frame: HTTP3FrameScanner.Frame) -> String {
        event(streamID: streamID, length: frame.length, frame: describe(frame))
    }

    private static func event(streamID: Int64, length: UInt64?, frame: String) -> String {
        let lengthPart = length.map { ",\"length\":\($0)" } ?? ""
        return "{\"stream_id\":\(streamID)\(lengthPart),\"frame\":\(frame)}"
    }

    private static func describe(_ frame: HTTP3FrameScanner.Frame) -> String {
        switch frame.type {
        case 0x00:
            return "{\"frame_type\":\"data\",\"length\":\(frame.length)}"
        case 0x03:
            return "{\"frame_type\":\"cancel_push\"}"
        case 0x04:
            let values = HTTP3FrameScanner.varints(in: frame.payload).values
            var settings: [String] = []
            var index = 0
            while index + 1 < values.count {
                settings.append("{\"name\":\"\(settingName(values[index]))\",\"value\":\(values[index + 1])}")
                index += 2
            }
            return "{\"frame_type\":\"settings\",\"settings\":[\(settings.joined(separator: ","))]}"
        case 0x05:
            return "{\"frame_type\":\"push_promise\"}"
        case 0x07:
            let id = HTTP3FrameScanner.varints(in: frame.payload).values.first ?? 0
            return "{\"frame_type\":\"goaway\",\"id\":\(id)}"
        case 0x0d:
            return "{\"frame_type\":\"max_push_id\"}"
        case 0xF0700, 0xF0701:
            // RFC 9218 §7: the prioritized element's ID, then the priority field value.
            let (values, rest) = varintAndRest(frame.payload)
            let kind = frame.type == 0xF0700 ? "request_stream" : "push_stream"
            return "{\"frame_type\":\"priority_update\",\"element_type\":\"\(kind)\",\"element_id\":\(values),\"priority_field_value\":\(json(String(decoding: rest, as: UTF8.self)))}"
        default:
            return "{\"frame_type\":\"unknown\",\"frame_type_value\":\(frame.type)}"
        }
    }

    private static func varintAndRest(_ payload: [UInt8]) -> (UInt64, ArraySlice<UInt8>) {
        guard let first = payload.first else { return (0, []) }
        let length = 1 << Int(first >> 6)
        guard length <= payload.count else { return (0, []) }
        return (HTTP3FrameScanner.decodeVarint(payload[0..<length]), payload[length...])
    }

    /// SETTINGS identifiers (RFC 9114 §7.2.4.1, RFC 9204 §5, RFC 9220, RFC 9297).
    private static func settingName(_ id: UInt64) -> String {
        switch id {
        case 0x01: return "settings_qpack_max_table_capacity"
        case 0x06: return "settings_max_field_section_size"
        case 0x07: return "settings_qpack_blocked_streams"
        case 0x08: return "settings_enable_connect_protocol"
        case 0x33: return "settings_h3_datagram"
        default: return "unknown_\(id)"
        }
    }

    /// A JSON string literal (the core's escaping, so both layers write the same way).
    static func json(_ text: String) -> String { QLogTrace.json(text) }
}
