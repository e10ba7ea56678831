import CQuicShims
import Logging

/// Stream and datagram operations the application drives (RFC 9000 §2–§4, RFC 9221).
extension QUICConnectionCore {
    /// Opens a locally initiated stream; nil while the peer's stream limit is reached (RFC 9000 §4.6).
    package func openStream(bidirectional: Bool) throws -> Int64? {
        guard state == .handshaking || state == .established else { throw QUICStreamError.connectionClosed }
        var streamID: Int64 = -1
        let rv = bidirectional
            ? ngtcp2_conn_open_bidi_stream(conn, &streamID, nil)
            : ngtcp2_conn_open_uni_stream(conn, &streamID, nil)
        if rv == NGTCP2_ERR_STREAM_ID_BLOCKED { return nil }
        guard rv == 0 else { throw QUICCoreError.ngtcp2("ngtcp2_conn_open_stream", rv) }
        rawStreams.table[streamID] = QUICStreamState(id: streamID)
        if bidirectional { rawStreams.locallyOpened.bidirectional += 1 } else { rawStreams.locallyOpened.unidirectional += 1 }
        return streamID
    }

    /// Queues bytes (and optionally FIN) on a stream; `token` comes back in `.streamSendCompleted`.
    package func send(streamID: Int64, bytes: UnsafeRawBufferPointer, fin: Bool, token: UInt64?) throws {
        guard state == .handshaking || state == .established else { throw QUICStreamError.connectionClosed }
        let hasUnwrittenData = try withStream(streamID) { stream in
            if stream.send.isAbandoned || stream.isClosedByTransport { throw QUICStreamError.sendingAbandoned }
            guard !stream.send.finQueued else { throw QUICStreamError.sendAfterFinish }
            guard canSend(on: streamID) else { throw QUICStreamError.receiveOnlyStream }
            stream.send.enqueue(bytes, fin: fin, completionToken: token)
            drainCompletions(&stream)
            return stream.send.hasUnwrittenData
        }
        guard let hasUnwrittenData else { throw QUICStreamError.unknownStream(streamID) }
        if hasUnwrittenData { enqueueForWrite(streamID) }
    }

    /// Takes up to `maximumLength` received bytes, and returns whether the stream's receive side has ended.
    ///
    /// Reading is what extends the peer's flow-control credit (RFC 9000 §4.1): unread data holds
    /// the window closed, which is the backpressure the application sees.
    package func read(streamID: Int64, maximumLength: Int) -> QUICStreamRead {
        let taken = withStream(streamID) { stream in
            let bytes = stream.receive.read(maximumLength: maximumLength)
            stream.readableSignalled = false
            let result = QUICStreamRead(bytes: bytes, isFinished: stream.receive.isFinished, resetCode: stream.receive.resetCode)
            if result.isFinished { stream.isEndDelivered = true }
            return result
        }
        guard let result = taken else { return QUICStreamRead(bytes: [], isFinished: true, resetCode: nil) }
        if !result.bytes.isEmpty, state == .handshaking || state == .established {
            ngtcp2_conn_extend_max_stream_offset(conn, streamID, UInt64(result.bytes.count))
            ngtcp2_conn_extend_max_offset(conn, UInt64(result.bytes.count))
        }
        forgetIfDone(streamID)
        return result
    }

    package func readableBytes(streamID: Int64) -> Int { rawStreams.table[streamID]?.receive.readableBytes ?? 0 }

    /// What a read would find now, without taking anything: nil when the stream is gone.
    package func receiveStatus(streamID: Int64) -> QUICStreamReceiveStatus? {
        guard let stream = rawStreams.table[streamID] else { return nil }
        return QUICStreamReceiveStatus(
            readableBytes: stream.receive.readableBytes,
            finReceived: stream.receive.finReceived,
            resetCode: stream.receive.resetCode
        )
    }

    /// Abandons the sending side with RESET_STREAM carrying `code` (RFC 9000 §19.4).
    package func resetStream(streamID: Int64, code: UInt64) {
        guard state == .handshaking || state == .established, rawStreams.table.contains(streamID) else { return }
        _ = ngtcp2_conn_shutdown_stream_write(conn, streamID, code)
        withStream(streamID) { $0.send.resetCode = code }
        abandonSend(streamID: streamID)
    }

    /// Asks the peer to stop sending with STOP_SENDING carrying `code` (RFC 9000 §19.5).
    package func stopSending(streamID: Int64, code: UInt64) {
        guard state == .handshaking || state == .established, rawStreams.table.contains(streamID) else { return }
        _ = ngtcp2_conn_shutdown_stream_read(conn, streamID, code)
    }

    /// Queues an unreliable datagram (RFC 9221 §5).
    package func sendDatagram(_ bytes: [UInt8]) throws {
        guard state == .handshaking || state == .established else { throw QUICStreamError.connectionClosed }
        guard configuration.maxDatagramFrameSize > 0 else { throw QUICStreamError.datagramsNotNegotiated }
        if isHandshakeCompleted {
            guard isDatagramNegotiated else { throw QUICStreamError.datagramsNotNegotiated }
            guard bytes.count <= usableDatagramFrameSize else {
                throw QUICStreamError.datagramTooLarge(bytes.count, limit: usableDatagramFrameSize)
            }
        }
        rawStreams.pendingDatagrams.append(bytes)
    }

    /// The server refused 0-RTT (RFC 9001 §4.6.2). ngtcp2 forgets the streams and their IDs, so
    /// they are opened again in the same order, which gives them the same IDs, and their bytes go
    /// out again from offset 0 in 1-RTT packets. Returns nonzero if ngtcp2 refused.
    func resendRejectedEarlyData() -> Int32 {
        guard ngtcp2_conn_early_data_rejected(conn) == 0 else { return -1 }
        for id in rawStreams.table.streamIDs.filter({ isLocallyInitiated($0) }).sorted() {
            var reopened: Int64 = -1
            let rv = Self.isBidirectional(id)
                ? ngtcp2_conn_open_bidi_stream(conn, &reopened, nil)
                : ngtcp2_conn_open_uni_stream(conn, &reopened, nil)
            guard rv == 0, reopened == id else {
                logger.warning("0-RTT stream could not be reopened", metadata: ["stream": "\(id)", "rv": "\(rv)"])
                abandonSend(streamID: id)
                continue
            }
            let hasUnwrittenData = withStream(id) { stream in
                stream.send.rewind()
                return stream.send.hasUnwrittenData
            }
            if hasUnwrittenData == true { enqueueForWrite(id) }
        }
        return 0
    }

    // MARK: Internal bookkeeping

    /// Runs `body` on a stream's state where the table keeps it; nil when there is no such stream.
    ///
    /// In place, not copied out and written back: a copy shares its buffers with the table's
    /// while `body` changes them, so each change first copied the buffer it touched (an empty
    /// `removeAll(keepingCapacity:)` of a read stream's buffer allocated its whole capacity
    /// anew). `body` must not touch `rawStreams`.
    @discardableResult
    func withStream<R>(_ streamID: Int64, _ body: (inout QUICStreamState) throws -> R) rethrows -> R? {
        try rawStreams.table.withValue(for: streamID, body)
    }

    /// Stream ID bits (RFC 9000 §2.1): bit 0 is the initiator (0 client), bit 1 the direction (0 bidirectional).
    func isLocallyInitiated(_ streamID: Int64) -> Bool { (streamID & 0x1 == 0) == (role == .client) }
    static func isBidirectional(_ streamID: Int64) -> Bool { streamID & 0x2 == 0 }

    func canSend(on streamID: Int64) -> Bool {
        Self.isBidirectional(streamID) || isLocallyInitiated(streamID)
    }

    func canReceive(on streamID: Int64) -> Bool {
        Self.isBidirectional(streamID) || !isLocallyInitiated(streamID)
    }

    func enqueueForWrite(_ streamID: Int64) { rawStreams.enqueueForWrite(streamID) }
    func dequeueForWrite(_ streamID: Int64) { rawStreams.dequeueForWrite(streamID) }
    func nextWritableStream() -> Int64? { rawStreams.nextWritableStream() }

    func didWrite(streamID: Int64, bytes: Int, fin: Bool) {
        let allWritten = withStream(streamID) { stream in
            stream.send.didWrite(bytes, fin: fin)
            drainCompletions(&stream)
            return !stream.send.hasUnwrittenData
        }
        if allWritten == true { dequeueForWrite(streamID) }
    }

    func drainCompletions(_ stream: inout QUICStreamState) {
        for token in stream.send.completedTokens {
            events.append(.streamSendCompleted(streamID: stream.id, token: token, error: nil))
        }
        stream.send.completedTokens.removeAll()
    }

    func abandonSend(streamID: Int64) {
        dequeueForWrite(streamID)
        withStream(streamID) { stream in
            let code = stream.send.resetCode ?? 0
            for token in stream.send.discard() {
                events.append(.streamSendCompleted(streamID: streamID, token: token, error: code))
            }
        }
    }

    func signalReadable(_ streamID: Int64) {
        let signals = withStream(streamID) { stream -> Bool in
            guard !stream.readableSignalled else { return false }
            stream.readableSignalled = true
            return true
        }
        if signals == true { events.append(.streamReadable(streamID: streamID)) }
    }

    /// Drops a stream ngtcp2 has closed once the application has read everything, including its end.
    func forgetIfDone(_ streamID: Int64) {
        guard let stream = rawStreams.table[streamID], stream.isClosedByTransport,
            stream.isEndDelivered || !canReceive(on: streamID)
        else { return }
        rawStreams.table[streamID] = nil
    }
}

/// A stream's receive side at a glance.
package struct QUICStreamReceiveStatus: Sendable, Equatable {
    package var readableBytes: Int
    package var finReceived: Bool
    package var resetCode: UInt64?
}

/// The outcome of one `read` from a stream.
package struct QUICStreamRead: Sendable, Equatable {
    package var bytes: [UInt8]
    /// No more bytes will arrive: FIN was received and read, or the peer reset the stream.
    package var isFinished: Bool
    /// The peer's RESET_STREAM code, if it reset the stream (RFC 9000 §19.4).
    package var resetCode: UInt64?
}

/// Errors for stream operations that the application can correct or must handle.
package enum QUICStreamError: Error, Equatable, CustomStringConvertible {
    case connectionClosed
    case unknownStream(Int64)
    case sendAfterFinish
    /// The sending side was reset, by us or because the peer sent STOP_SENDING (RFC 9000 §3.5).
    case sendingAbandoned
    case receiveOnlyStream
    case datagramsNotNegotiated
    case datagramTooLarge(Int, limit: Int)

    package var description: String {
        switch self {
        case .connectionClosed: return "the connection is closed"
        case .unknownStream(let id): return "stream \(id) does not exist"
        case .sendAfterFinish: return "the stream's sending side is already finished"
        case .sendingAbandoned: return "the stream's sending side was reset"
        case .receiveOnlyStream: return "cannot send on a stream the peer opened unidirectionally"
        case .datagramsNotNegotiated: return "datagrams were not negotiated with the peer (RFC 9221)"
        case .datagramTooLarge(let size, let limit):
            return "a datagram of \(size) bytes does not fit: at most \(limit) fit the peer's max_datagram_frame_size and a packet"
        }
    }
}
