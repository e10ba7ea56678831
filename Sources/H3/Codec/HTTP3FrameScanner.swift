/// Follows the frame boundaries of one direction of one HTTP/3 stream (RFC 9114 §7.1), so the
/// codec can log each frame to qlog as it is sent or parsed. nghttp3 does the real parsing;
/// this only reads the type and length of each frame and keeps the small payloads qlog shows
/// (SETTINGS, GOAWAY, PRIORITY_UPDATE).
package struct HTTP3FrameScanner {
    /// A unidirectional stream's type (RFC 9114 §6.2).
    enum StreamType: UInt64 {
        case control = 0x00
        case push = 0x01
        case qpackEncoder = 0x02
        case qpackDecoder = 0x03

        var qlogName: String {
            switch self {
            case .control: return "control"
            case .push: return "push"
            case .qpackEncoder: return "qpack_encode"
            case .qpackDecoder: return "qpack_decode"
            }
        }
    }

    package struct Frame {
        package let type: UInt64
        package let length: UInt64
        /// The payload, for frame types whose content qlog shows; empty otherwise.
        package let payload: [UInt8]
    }

    package enum Output {
        case streamType(UInt64)
        case frame(Frame)
    }

    private enum Phase {
        case streamType
        case frameType
        case frameLength(type: UInt64)
        case payload(type: UInt64, length: UInt64, remaining: UInt64)
        /// QPACK streams carry instructions, not frames.
        case opaque
    }

    private var phase: Phase
    private var varint: [UInt8] = []
    private var payload: [UInt8] = []

    /// `unidirectional` streams start with a stream type.
    package init(unidirectional: Bool) {
        phase = unidirectional ? .streamType : .frameType
    }

    /// Frame types whose payload is worth keeping for qlog: SETTINGS, GOAWAY, PRIORITY_UPDATE.
    static func keepsPayload(_ type: UInt64) -> Bool {
        type == 0x04 || type == 0x07 || type == 0xF0700 || type == 0xF0701
    }

    /// Consumes `bytes`, returning the stream type and the frames that began in them.
    package mutating func scan(_ bytes: UnsafeRawBufferPointer) -> [Output] {
        var outputs: [Output] = []
        var index = 0
        while index < bytes.count {
            switch phase {
            case .opaque:
                return outputs
            case .streamType:
                guard let value = readVarint(bytes, &index) else { continue }
                outputs.append(.streamType(value))
                phase = value == StreamType.control.rawValue || value == StreamType.push.rawValue ? .frameType : .opaque
            case .frameType:
                guard let value = readVarint(bytes, &index) else { continue }
                phase = .frameLength(type: value)
            case .frameLength(let type):
                guard let value = readVarint(bytes, &index) else { continue }
                payload.removeAll(keepingCapacity: true)
                if value == 0 {
                    outputs.append(.frame(Frame(type: type, length: 0, payload: [])))
                    phase = .frameType
                } else {
                    phase = .payload(type: type, length: value, remaining: value)
                    if !Self.keepsPayload(type) {
                        // Report at the frame's start: the payload itself is nghttp3's business.
                        outputs.append(.frame(Frame(type: type, length: value, payload: [])))
                    }
                }
            case .payload(let type, let length, let remaining):
                let take = Int(min(UInt64(bytes.count - index), remaining))
                if Self.keepsPayload(type) && payload.count < 4096 {
                    payload += bytes[index..<(index + min(take, 4096 - payload.count))]
                }
                index += take
                let left = remaining - UInt64(take)
                if left == 0 {
                    if Self.keepsPayload(type) { outputs.append(.frame(Frame(type: type, length: length, payload: payload))) }
                    phase = .frameType
                } else {
                    phase = .payload(type: type, length: length, remaining: left)
                }
            }
        }
        return outputs
    }

    /// Reads a QUIC variable-length integer (RFC 9000 §16) that may span calls.
    private mutating func readVarint(_ bytes: UnsafeRawBufferPointer, _ index: inout Int) -> UInt64? {
        while index < bytes.count {
            varint.append(bytes[index])
            index += 1
            let needed = 1 << Int(varint[0] >> 6)
            if varint.count == needed {
                defer { varint.removeAll(keepingCapacity: true) }
                return Self.decodeVarint(varint[...])
            }
        }
        return nil
    }

    static func decodeVarint(_ bytes: ArraySlice<UInt8>) -> UInt64 {
        var value = UInt64(bytes.first! & 0x3f)
        for byte in bytes.dropFirst() { value = value << 8 | UInt64(byte) }
        return value
    }

    /// Splits a payload into varints (SETTINGS pairs, GOAWAY ID, PRIORITY_UPDATE element ID).
    static func varints(in payload: [UInt8]) -> (values: [UInt64], rest: ArraySlice<UInt8>) {
        var values: [UInt64] = []
        var index = 0
        while index < payload.count {
            let length = 1 << Int(payload[index] >> 6)
            guard index + length <= payload.count else { break }
            values.append(decodeVarint(payload[index..<(index + length)]))
            index += length
        }
        return (values, payload[index...])
    }
}
