import QuicTransport

/// An HTTP/3 application error code (RFC 9114 §8.1), carried in RESET_STREAM, STOP_SENDING and
/// CONNECTION_CLOSE. An open set: codes a peer sends that are not listed here survive intact.
public struct HTTP3ErrorCode: Hashable, Sendable, RawRepresentable, CustomStringConvertible {
    public let rawValue: UInt64

    public init(rawValue: UInt64) { self.rawValue = rawValue }

    /// H3_NO_ERROR (0x0100): closing with no error to signal (RFC 9114 §8.1).
    public static let noError = HTTP3ErrorCode(rawValue: 0x0100)
    /// H3_GENERAL_PROTOCOL_ERROR (0x0101): a protocol violation no more specific code covers (RFC 9114 §8.1).
    public static let generalProtocolError = HTTP3ErrorCode(rawValue: 0x0101)
    /// H3_INTERNAL_ERROR (0x0102): an internal error in the HTTP stack (RFC 9114 §8.1).
    public static let internalError = HTTP3ErrorCode(rawValue: 0x0102)
    /// H3_STREAM_CREATION_ERROR (0x0103): the peer created a stream that will not be accepted (RFC 9114 §8.1).
    public static let streamCreationError = HTTP3ErrorCode(rawValue: 0x0103)
    /// H3_CLOSED_CRITICAL_STREAM (0x0104): a stream the connection requires was closed or reset (RFC 9114 §8.1).
    public static let closedCriticalStream = HTTP3ErrorCode(rawValue: 0x0104)
    /// H3_FRAME_UNEXPECTED (0x0105): a frame not permitted in the current state or on this stream (RFC 9114 §8.1).
    public static let frameUnexpected = HTTP3ErrorCode(rawValue: 0x0105)
    /// H3_FRAME_ERROR (0x0106): a frame with a bad layout or an invalid size (RFC 9114 §8.1).
    public static let frameError = HTTP3ErrorCode(rawValue: 0x0106)
    /// H3_EXCESSIVE_LOAD (0x0107): the peer behaves in a way that might generate excessive load (RFC 9114 §8.1).
    public static let excessiveLoad = HTTP3ErrorCode(rawValue: 0x0107)
    /// H3_ID_ERROR (0x0108): a stream ID or push ID used incorrectly, such as past a limit or reused (RFC 9114 §8.1).
    public static let idError = HTTP3ErrorCode(rawValue: 0x0108)
    /// H3_SETTINGS_ERROR (0x0109): an error in the payload of a SETTINGS frame (RFC 9114 §8.1).
    public static let settingsError = HTTP3ErrorCode(rawValue: 0x0109)
    /// H3_MISSING_SETTINGS (0x010a): the control stream did not begin with a SETTINGS frame (RFC 9114 §8.1).
    public static let missingSettings = HTTP3ErrorCode(rawValue: 0x010a)
    /// H3_REQUEST_REJECTED (0x010b): the server rejected the request unprocessed; safe to retry (RFC 9114 §8.1).
    public static let requestRejected = HTTP3ErrorCode(rawValue: 0x010b)
    /// H3_REQUEST_CANCELLED (0x010c): the request or its response is cancelled (RFC 9114 §8.1).
    public static let requestCancelled = HTTP3ErrorCode(rawValue: 0x010c)
    /// H3_REQUEST_INCOMPLETE (0x010d): the client's stream ended without a fully formed request (RFC 9114 §8.1).
    public static let requestIncomplete = HTTP3ErrorCode(rawValue: 0x010d)
    /// H3_MESSAGE_ERROR (0x010e): a malformed HTTP message that cannot be processed (RFC 9114 §8.1).
    public static let messageError = HTTP3ErrorCode(rawValue: 0x010e)
    /// H3_CONNECT_ERROR (0x010f): a CONNECT request's TCP connection was reset or closed abnormally (RFC 9114 §8.1).
    public static let connectError = HTTP3ErrorCode(rawValue: 0x010f)
    /// H3_VERSION_FALLBACK (0x0110): the request cannot be served over HTTP/3; retry over HTTP/1.1 (RFC 9114 §8.1).
    public static let versionFallback = HTTP3ErrorCode(rawValue: 0x0110)
    /// QPACK_DECOMPRESSION_FAILED (0x0200): a field section could not be decoded (RFC 9204 §6).
    public static let qpackDecompressionFailed = HTTP3ErrorCode(rawValue: 0x0200)
    /// QPACK_ENCODER_STREAM_ERROR (0x0201): an encoder-stream instruction could not be interpreted (RFC 9204 §6).
    public static let qpackEncoderStreamError = HTTP3ErrorCode(rawValue: 0x0201)
    /// QPACK_DECODER_STREAM_ERROR (0x0202): a decoder-stream instruction could not be interpreted (RFC 9204 §6).
    public static let qpackDecoderStreamError = HTTP3ErrorCode(rawValue: 0x0202)

    private static let names: [UInt64: String] = [
        0x0100: "H3_NO_ERROR", 0x0101: "H3_GENERAL_PROTOCOL_ERROR", 0x0102: "H3_INTERNAL_ERROR",
        0x0103: "H3_STREAM_CREATION_ERROR", 0x0104: "H3_CLOSED_CRITICAL_STREAM", 0x0105: "H3_FRAME_UNEXPECTED",
        0x0106: "H3_FRAME_ERROR", 0x0107: "H3_EXCESSIVE_LOAD", 0x0108: "H3_ID_ERROR", 0x0109: "H3_SETTINGS_ERROR",
        0x010a: "H3_MISSING_SETTINGS", 0x010b: "H3_REQUEST_REJECTED", 0x010c: "H3_REQUEST_CANCELLED",
        0x010d: "H3_REQUEST_INCOMPLETE", 0x010e: "H3_MESSAGE_ERROR", 0x010f: "H3_CONNECT_ERROR",
        0x0110: "H3_VERSION_FALLBACK", 0x0200: "QPACK_DECOMPRESSION_FAILED", 0x0201: "QPACK_ENCODER_STREAM_ERROR",
        0x0202: "QPACK_DECODER_STREAM_ERROR",
    ]

    /// Reserved codes `0x1f * N + 0x21` that peers send to exercise unknown-code handling (RFC 9114 §8.1).
    public var isGrease: Bool { rawValue >= 0x21 && (rawValue - 0x21) % 0x1f == 0 }

    public var description: String {
        if let name = Self.names[rawValue] { return name }
        return isGrease ? "reserved (0x\(String(rawValue, radix: 16)))" : "unknown (0x\(String(rawValue, radix: 16)))"
    }
}
