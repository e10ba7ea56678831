import CQuicShims

/// The seam where an application protocol that must run inside ngtcp2's read and write loops
/// (HTTP/3 on nghttp3) takes over a connection's streams.
///
/// With a codec attached, the core hands it every stream byte it receives and asks it, packet
/// by packet, for the next bytes to send, as ngtcp2's HTTP/3 examples do. The core's own
/// stream buffers are then unused. Every method runs on the connection's thread, most of them
/// inside an ngtcp2 callback: they must not block, and they report failure by throwing
/// `QUICApplicationCodecError`, which closes the connection with its application error code.
package protocol QUICApplicationCodec: AnyObject {
    /// The connection can carry 1-RTT data (a client: the handshake is complete; a server: its
    /// 1-RTT send key is installed, possibly with 0-RTT requests waiting): open the protocol's own
    /// streams (RFC 9114 §6.2).
    func connectionEstablished(_ core: QUICConnectionCore) throws
    /// The peer opened a stream (its first frame arrived, RFC 9000 §3.2), before any of its bytes.
    func streamOpened(streamID: Int64)
    /// Stream bytes in order; returns how many the protocol consumed, which the core credits
    /// back to flow control at once (the rest the codec credits later, with `core.consume`).
    func receive(streamID: Int64, bytes: UnsafeRawBufferPointer, fin: Bool) throws -> Int
    /// The peer acknowledged `bytes` more of what the codec sent on the stream.
    func acknowledged(streamID: Int64, bytes: UInt64) throws
    /// The peer reset the stream (RFC 9000 §19.4).
    func peerReset(streamID: Int64, code: UInt64) throws
    /// ngtcp2 closed the stream.
    func streamClosed(streamID: Int64, code: UInt64?) throws
    /// Fills `vectors` with the next bytes to send; nil when nothing is ready.
    func nextStreamData(into vectors: UnsafeMutableBufferPointer<ngtcp2_vec>) throws -> (streamID: Int64, count: Int, fin: Bool)?
    /// ngtcp2 accepted `bytes` of what `nextStreamData` offered on the stream.
    func didWrite(streamID: Int64, bytes: Int) throws
    /// The stream ran out of flow-control credit, or regained it.
    func setBlocked(streamID: Int64, _ blocked: Bool) throws
    /// The stream's sending side is gone (reset or STOP_SENDING).
    func writeShutDown(streamID: Int64) throws
    /// Whether the application's hook for each pass (`QUICConnectionDriver.afterPass`) has
    /// anything to do: events to hand over, or state it looks at on every pass. Read on every
    /// pass, so it must be cheap.
    var needsPass: Bool { get }
}

extension QUICApplicationCodec {
    package func streamOpened(streamID: Int64) {}
}

/// A codec failure that closes the connection with `code` (RFC 9000 §10.2, application close).
package struct QUICApplicationCodecError: Error, CustomStringConvertible {
    package let code: UInt64
    package let reason: String

    package init(code: UInt64, reason: String) {
        self.code = code
        self.reason = reason
    }

    package var description: String { "application error 0x\(String(code, radix: 16)): \(reason)" }
}

extension QUICConnectionCore {
    /// Whether the codec asks for the application's hook this pass (`needsPass`); false
    /// without a codec.
    package var applicationNeedsPass: Bool { lendingCodec { $0.needsPass } ?? false }

    /// Which codec runs this connection's streams, if any: for a caller that keeps the codec
    /// unretained to check that it is still this connection's.
    package var applicationCodecID: ObjectIdentifier? { lendingCodec { ObjectIdentifier($0) } }

    /// The latest time the connection was given (`receive`, `handleTimeout`), on the caller's clock.
    package var currentTime: UInt64 { latestTime }

    /// Credits `bytes` the codec finished with back to stream and connection flow control (RFC 9000 §4.1).
    package func consume(streamID: Int64, bytes: Int) {
        guard bytes > 0, state == .handshaking || state == .established else { return }
        ngtcp2_conn_extend_max_stream_offset(conn, streamID, UInt64(bytes))
        ngtcp2_conn_extend_max_offset(conn, UInt64(bytes))
    }

    /// Extends the connection's flow-control window by `bytes` alone (RFC 9000 §4.1): for data
    /// the application will never read on a stream it stopped reading, whose own window no
    /// longer matters.
    package func creditConnection(bytes: Int) {
        guard bytes > 0, state == .handshaking || state == .established else { return }
        ngtcp2_conn_extend_max_offset(conn, UInt64(bytes))
    }

    /// Opens a unidirectional stream for the codec's own use; throws when the peer allows none.
    package func openCodecUnidirectionalStream() throws -> Int64 {
        guard let conn else { throw QUICStreamError.connectionClosed }
        var streamID: Int64 = -1
        let rv = ngtcp2_conn_open_uni_stream(conn, &streamID, nil)
        guard rv == 0 else { throw QUICCoreError.ngtcp2("ngtcp2_conn_open_uni_stream", rv) }
        return streamID
    }

    /// Opens a bidirectional stream for the codec (an HTTP/3 request); nil while the peer's limit is reached.
    package func openCodecBidirectionalStream() throws -> Int64? {
        guard let conn else { throw QUICStreamError.connectionClosed }
        var streamID: Int64 = -1
        let rv = ngtcp2_conn_open_bidi_stream(conn, &streamID, nil)
        if rv == NGTCP2_ERR_STREAM_ID_BLOCKED { return nil }
        guard rv == 0 else { throw QUICCoreError.ngtcp2("ngtcp2_conn_open_bidi_stream", rv) }
        return streamID
    }

    /// Resets or stops a codec stream with an application error code (RFC 9000 §19.4–§19.5).
    package func shutdownCodecStream(streamID: Int64, code: UInt64, read: Bool, write: Bool) {
        guard state == .handshaking || state == .established else { return }
        if read && write {
            _ = ngtcp2_conn_shutdown_stream(conn, streamID, code)
        } else if write {
            _ = ngtcp2_conn_shutdown_stream_write(conn, streamID, code)
        } else if read {
            _ = ngtcp2_conn_shutdown_stream_read(conn, streamID, code)
        }
    }

    /// Runs a codec call from inside an ngtcp2 callback, turning a throw into a recorded failure.
    ///
    /// The codec is lent to `body` without a reference count. The core replaces its codec
    /// (0-RTT refused, in a read callback) or drops it (`releaseConnectionState`, by the owner)
    /// only between calls into it, so it outlives each call. Counting cost a retain and a
    /// release per call, and ngtcp2 runs several such callbacks per request.
    @inline(__always)
    func runCodecCallback(_ body: (any QUICApplicationCodec) throws -> Void) -> Int32 {
        lendingCodec { codec in
            do {
                try body(codec)
                return 0
            } catch {
                codecFailure = error
                return NGTCP2_ERR_CALLBACK_FAILURE
            }
        } ?? 0
    }

    /// Lends the codec to `body` without a reference count; nil without a codec. The core
    /// replaces or drops its codec only between calls into it (see `runCodecCallback`).
    @inline(__always)
    private func lendingCodec<Result>(_ body: (any QUICApplicationCodec) -> Result) -> Result? {
        guard let holder = codecHolder.map(Unmanaged.passUnretained) else { return nil }
        return holder._withUnsafeGuaranteedRef { body($0.codec) }
    }
}

/// A codec in a `let`. An immutable property of an object that is itself borrowed is borrowed
/// too, so calls on it take no reference count; a codec read from a `var` is retained and
/// released around each call, since the call could change the `var`.
final class QUICApplicationCodecHolder {
    let codec: any QUICApplicationCodec

    init(_ codec: any QUICApplicationCodec) {
        self.codec = codec
    }
}
