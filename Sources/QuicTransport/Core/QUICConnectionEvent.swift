/// Something a connection core reports to its driver after an input.
///
/// The core appends events while it runs ngtcp2 (inside C callbacks, which must not call out);
/// the driver drains them with `QUICConnectionCore.takeEvents()` once the call returns.
package enum QUICConnectionEvent: Sendable, Equatable {
    /// TLS and QUIC handshakes completed (RFC 9001 §4.1.1); ALPN is settled.
    case handshakeCompleted
    /// The server confirmed the handshake (HANDSHAKE_DONE, RFC 9001 §4.1.2); key updates and
    /// migration are allowed from now on.
    case handshakeConfirmed
    /// A path validation (RFC 9000 §8.2) ended; on success the connection now uses `path`.
    /// Boxed (`indirect`), as is `closed`: a path is two `sockaddr_storage`s, and inline it made
    /// every event, most of them a stream ID or two, 265 bytes to copy and to store.
    indirect case pathValidated(QUICPath, succeeded: Bool)
    /// The server refused 0-RTT and ngtcp2 forgot every stream. A core with an application
    /// codec replaced it with a fresh one (`makeApplicationCodec`): the owner sends its requests
    /// again. Streams without a codec are resent by the core itself.
    case earlyDataRejected
    /// The peer opened a stream.
    case streamOpened(streamID: Int64)
    /// Data, FIN or a reset is ready for `read(streamID:maximumLength:)`.
    case streamReadable(streamID: Int64)
    /// Bytes from the send call with this token have all been written into packets (`error` nil),
    /// or were abandoned by a reset (`error` is the application error code).
    case streamSendCompleted(streamID: Int64, token: UInt64, error: UInt64?)
    /// Both directions of the stream are finished; ngtcp2 forgot it. `code` is the application
    /// error code of a reset or STOP_SENDING on it, if there was one. (ngtcp2 answers a peer's
    /// STOP_SENDING with RESET_STREAM carrying the same code by itself, RFC 9000 §3.5.)
    case streamClosed(streamID: Int64, code: UInt64?)
    /// The peer raised the stream limit; queued stream opens may proceed (RFC 9000 §4.6).
    case streamCreditAvailable
    /// An unreliable datagram arrived (RFC 9221).
    case datagramReceived([UInt8])
    /// A new local connection ID that the endpoint must route to this core (RFC 9000 §5.1.1).
    case connectionIDIssued(QUICConnectionID)
    /// A local connection ID the endpoint should no longer route.
    case connectionIDRetired(QUICConnectionID)
    /// The connection is over for the application; the core may linger to finish the closing period.
    indirect case closed(QUICCloseReason)
}
