/// The streams and datagrams of a connection that runs no application codec (RFC 9000 §2–§4,
/// RFC 9221): each stream's buffers and flags, the round-robin queue of streams with bytes to
/// write, the datagrams waiting to go out, and the stream counts the limits report.
struct QUICRawStreams {
    /// Each stream's buffers and flags, by stream ID.
    var table = QUICStreamTable<QUICStreamState>()
    /// MAX_STREAMS credit given to the peer beyond the initial limits (RFC 9000 §4.6).
    var peerCreditGranted = (bidirectional: UInt64(0), unidirectional: UInt64(0))
    /// How many streams of each kind this side has opened.
    var locallyOpened = (bidirectional: UInt64(0), unidirectional: UInt64(0))
    /// Streams with bytes or FIN to write, served round-robin; `queuedForWrite` says which are in
    /// it, so a stream is queued once however often it is written to.
    private var writeQueue = QUICFIFOQueue<Int64>()
    private var queuedForWrite = QUICStreamTable<Void>()
    /// Datagrams queued to send (RFC 9221), oldest first; a ring buffer, so a burst drains in
    /// linear time.
    var pendingDatagrams = QUICFIFOQueue<[UInt8]>()

    mutating func enqueueForWrite(_ streamID: Int64) {
        guard !queuedForWrite.contains(streamID) else { return }
        queuedForWrite[streamID] = ()
        writeQueue.append(streamID)
    }

    mutating func dequeueForWrite(_ streamID: Int64) {
        queuedForWrite.removeValue(forKey: streamID)
    }

    /// The next stream with unwritten data and flow-control credit, rotating for fairness.
    mutating func nextWritableStream() -> Int64? {
        while let candidate = writeQueue.first {
            writeQueue.removeFirst()
            guard queuedForWrite.contains(candidate),
                table.withValue(for: candidate, { $0.send.hasUnwrittenData && !$0.isFlowControlBlocked }) == true
            else {
                queuedForWrite.removeValue(forKey: candidate)
                continue
            }
            // Rotate: move it to the back so the next packet serves another stream.
            writeQueue.append(candidate)
            return candidate
        }
        return nil
    }
}
