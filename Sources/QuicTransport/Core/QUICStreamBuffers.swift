import CQuicShims

/// Bytes handed to ngtcp2 for one stream, kept at a stable address until the peer acknowledges them.
///
/// ngtcp2 0.12 does not copy stream data: it points into the application's memory and reports
/// acknowledgement through `acked_stream_data_offset`. Each chunk owns one allocation.
final class QUICSendChunk {
    let bytes: UnsafeMutableRawBufferPointer
    /// Stream offset of the first byte.
    let streamOffset: UInt64
    /// Identifies the application's send call; reported in `.streamSendCompleted` once written.
    let completionToken: UInt64?

    init(copying source: UnsafeRawBufferPointer, streamOffset: UInt64, completionToken: UInt64?) {
        self.bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: max(source.count, 1), alignment: 1)
        if source.count > 0 { self.bytes.copyMemory(from: source) }
        self.streamOffset = streamOffset
        self.completionToken = completionToken
        self.count = source.count
    }

    let count: Int
    var endOffset: UInt64 { streamOffset + UInt64(count) }

    deinit { bytes.deallocate() }
}

/// Send side of one stream: queued, written-but-unacknowledged, and acknowledged bytes (RFC 9000 §3.1).
struct QUICStreamSendBuffer {
    /// Chunks with bytes not yet given to ngtcp2, oldest first.
    private(set) var unwritten: [QUICSendChunk] = []
    private var unwrittenHead = 0
    /// Chunks fully written but not fully acknowledged.
    private var inFlight: [QUICSendChunk] = []
    /// Next stream offset to give to ngtcp2.
    private(set) var writeOffset: UInt64 = 0
    /// Total bytes the application queued.
    private(set) var queuedOffset: UInt64 = 0
    private(set) var finQueued = false
    private(set) var finWritten = false
    /// Completion tokens whose chunks have just been fully written; drained by the core.
    var completedTokens: [UInt64] = []
    /// Bytes whose completions were reported, which a rewind must not report twice.
    private var tokensReportedThrough: UInt64 = 0

    var hasUnwrittenData: Bool { writeOffset < queuedOffset || (finQueued && !finWritten) }

    mutating func enqueue(_ data: UnsafeRawBufferPointer, fin: Bool, completionToken: UInt64?) {
        precondition(!finQueued, "data after FIN")
        if data.count > 0 || completionToken != nil {
            let chunk = QUICSendChunk(copying: data, streamOffset: queuedOffset, completionToken: completionToken)
            queuedOffset += UInt64(data.count)
            if data.count == 0 && writeOffset == queuedOffset {
                // An empty send completes as soon as everything before it is written.
                if let token = completionToken { completedTokens.append(token) }
            } else {
                unwritten.append(chunk)
            }
        }
        if fin { finQueued = true }
    }

    /// Fills `vectors` with up to `vectors.count` pieces of unwritten data; returns how many and whether FIN may follow.
    func gather(into vectors: UnsafeMutableBufferPointer<ngtcp2_vec>) -> (count: Int, finAfter: Bool) {
        var count = 0
        var index = unwrittenHead
        while index < unwritten.count && count < vectors.count {
            let chunk = unwritten[index]
            let skip = writeOffset > chunk.streamOffset ? Int(writeOffset - chunk.streamOffset) : 0
            if skip < chunk.count {
                vectors[count] = ngtcp2_vec(
                    base: chunk.bytes.baseAddress!.advanced(by: skip).assumingMemoryBound(to: UInt8.self),
                    len: chunk.count - skip
                )
                count += 1
            }
            index += 1
        }
        let allGathered = index == unwritten.count
        return (count, finQueued && allGathered)
    }

    /// Records that ngtcp2 accepted `written` bytes (and FIN, if `fin`).
    mutating func didWrite(_ written: Int, fin: Bool) {
        writeOffset += UInt64(written)
        while unwrittenHead < unwritten.count && unwritten[unwrittenHead].endOffset <= writeOffset {
            let chunk = unwritten[unwrittenHead]
            unwrittenHead += 1
            inFlight.append(chunk)
            if let token = chunk.completionToken, chunk.endOffset > tokensReportedThrough { completedTokens.append(token) }
        }
        if unwrittenHead > 32 && unwrittenHead * 2 > unwritten.count {
            unwritten.removeFirst(unwrittenHead)
            unwrittenHead = 0
        }
        if fin { finWritten = true }
    }

    /// Starts the stream over from offset 0 with every byte still held, after the server refused
    /// the 0-RTT packets that carried them (RFC 9001 §4.6.2). Completions already reported stay
    /// reported.
    mutating func rewind() {
        unwritten = inFlight + unwritten[unwrittenHead...]
        unwrittenHead = 0
        inFlight.removeAll()
        tokensReportedThrough = max(tokensReportedThrough, writeOffset)
        writeOffset = 0
        finWritten = false
    }

    /// Frees chunks the peer has acknowledged up to `offset` (ngtcp2 reports acknowledgement in order).
    mutating func didAcknowledge(upTo offset: UInt64) {
        var drop = 0
        while drop < inFlight.count && inFlight[drop].endOffset <= offset { drop += 1 }
        if drop > 0 { inFlight.removeFirst(drop) }
    }

    /// Set once the sending side was reset; later sends fail.
    private(set) var isAbandoned = false
    /// Our RESET_STREAM code, when the application reset the stream.
    var resetCode: UInt64?

    /// Abandons everything not yet acknowledged, after RESET_STREAM (RFC 9000 §19.4).
    mutating func discard() -> [UInt64] {
        isAbandoned = true
        let pending = unwritten[unwrittenHead...].compactMap(\.completionToken)
        unwritten.removeAll()
        unwrittenHead = 0
        inFlight.removeAll()
        writeOffset = queuedOffset
        finQueued = true
        finWritten = true
        return pending
    }
}

/// Receive side of one stream: in-order bytes delivered by ngtcp2 and not yet read by the application.
struct QUICStreamReceiveBuffer {
    private var storage: [UInt8] = []
    private var readIndex = 0
    private(set) var finReceived = false
    /// Application error code from the peer's RESET_STREAM (RFC 9000 §19.4).
    var resetCode: UInt64?

    var readableBytes: Int { storage.count - readIndex }
    /// True when nothing more will ever arrive and everything has been read.
    var isFinished: Bool { resetCode != nil || (finReceived && readableBytes == 0) }

    mutating func append(_ data: UnsafeRawBufferPointer, fin: Bool) {
        if readIndex > 0 && readIndex >= storage.count / 2 {
            storage.removeFirst(readIndex)
            readIndex = 0
        }
        storage.append(contentsOf: data)
        if fin { finReceived = true }
    }

    /// Takes up to `maximumLength` bytes.
    mutating func read(maximumLength: Int) -> [UInt8] {
        let count = min(maximumLength, readableBytes)
        let out = Array(storage[readIndex..<(readIndex + count)])
        readIndex += count
        if readIndex == storage.count {
            storage.removeAll(keepingCapacity: true)
            readIndex = 0
        }
        return out
    }
}

/// One stream's state inside a connection core.
struct QUICStreamState {
    let id: Int64
    var send = QUICStreamSendBuffer()
    var receive = QUICStreamReceiveBuffer()
    /// ngtcp2 reported NGTCP2_ERR_STREAM_DATA_BLOCKED; cleared by `extend_max_stream_data`.
    var isFlowControlBlocked = false
    /// Whether the application has already been told that data or an end is readable.
    var readableSignalled = false
    /// ngtcp2 ran `stream_close` for it; it is kept only until the application reads the rest.
    var isClosedByTransport = false
    /// The application has been handed the end of the receive side (FIN or reset).
    var isEndDelivered = false

    init(id: Int64) { self.id = id }
}
