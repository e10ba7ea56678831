import CQuicShims
@_spi(StreamTable) import QuicTransport

/// What the HTTP/3 codec parsed, in order.
package enum HTTP3Event: Sendable {
    /// A complete field section: request or response headers, or trailers (RFC 9114 §4.1).
    case headers(streamID: Int64, fields: HTTP3ReceivedFields, isTrailers: Bool)
    /// Body bytes from DATA frames.
    case data(streamID: Int64, bytes: [UInt8])
    /// The peer finished the message.
    case end(streamID: Int64)
    /// The peer reset the stream.
    case reset(streamID: Int64, code: HTTP3ErrorCode)
    /// nghttp3 is done with the stream.
    case closed(streamID: Int64, code: HTTP3ErrorCode)
    /// The peer sent GOAWAY (RFC 9114 §5.2).
    case goaway(lastID: Int64)
    /// The peer acknowledged more of a body that is still being produced: room for a
    /// streaming producer.
    case bodyAcknowledged(streamID: Int64)
}
