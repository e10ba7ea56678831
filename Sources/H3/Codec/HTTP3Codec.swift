import CQuicShims
import NIOCore
@_spi(StreamTable) import QuicTransport

/// HTTP/3 (RFC 9114) on nghttp3 0.8, running inside a QUIC connection core's read and write
/// loops: the single owner of one `nghttp3_conn`.
///
/// The core calls it for every stream byte and for every packet it fills (the
/// `QUICApplicationCodec` seam). It opens the control and QPACK streams once the handshake is
/// done, and reports what it parsed as `HTTP3Event`s, which its owner drains with `takeEvents()`.
/// Request and response bodies given to it are kept until the peer acknowledges them, because
/// nghttp3, like ngtcp2, sends straight from the application's memory.
///
/// Its state is `@exclusivity(unchecked)`: Swift's run-time check is a visible part of a small
/// request's cost here, and it guards nothing. The codec lives on one loop, and no
/// access to a property spans a call that can reach another: nghttp3 calls back only from
/// inside `nghttp3_conn_*` calls, and none is made while a property is being modified.
package final class HTTP3Codec: QUICApplicationCodec {
    package enum Role: Sendable { case client, server }

    package let role: Role
    @exclusivity(unchecked) private var conn: OpaquePointer?
    /// The memory `conn` allocates from; it outlives `conn` (freed in `deinit`, before this).
    private let blockPool = HTTP3BlockPool()
    /// The connection this codec runs in; set once the handshake completes. Not counted, since
    /// the core holds this codec: it is borrowed for each use, where an `unowned(unsafe)`
    /// reference is retained and released around each one, several times per request.
    @exclusivity(unchecked) private var coreLoan: Unmanaged<QUICConnectionCore>?
    /// Whether the connection writes a qlog trace, read from the core once it is set.
    @exclusivity(unchecked) private var writesQLog = false
    /// The bodies being sent, owned here until their stream closes. nghttp3 also holds each
    /// queued one, unretained, as its stream's user data, so the callbacks for every chunk read
    /// and acknowledged reach it without hashing; whoever drops a body here clears that first.
    @exclusivity(unchecked) private var bodies = QUICStreamTable<StreamBody>()
    /// File bodies whose window an acknowledgement just reopened: resumed once nghttp3's call
    /// returns, since its callbacks must not call it again.
    @exclusivity(unchecked) private var resumableBodies: [Int64] = []
    @exclusivity(unchecked) private var events: [HTTP3Event] = []
    /// The bytes of the `.data` events gathered since the last `takeEvents`, each with its
    /// event's index, and the events still open for more bytes: by stream, the place of their
    /// bytes in `dataBuffers`.
    @exclusivity(unchecked) private var dataBuffers: [(event: Int, bytes: [UInt8])] = []
    @exclusivity(unchecked) private var openData = QUICStreamTable<Int>()
    /// The field section being decoded, kept out of a dictionary because nghttp3 usually
    /// decodes a section whole. A HEADERS frame split across packets pauses its section; one
    /// paused while another stream's starts waits in `pausedFieldSections`.
    ///
    /// Its storage is made when the previous section is taken (`takeFieldSection`), ready for
    /// the next: a section is then moved out and in, never copied. Starting each from a shared
    /// empty section cost six reference counts per request, each an atomic operation.
    @exclusivity(unchecked) private var fieldSection: (streamID: Int64, fields: HTTP3ReceivedFields)
    @exclusivity(unchecked) private var pausedFieldSections: [Int64: HTTP3ReceivedFields] = [:]
    // qlog (only while the connection writes a trace): frame boundaries in each direction,
    // the field sections we submitted (logged when their HEADERS frame goes out), and the
    // vectors last offered to ngtcp2 (scanned for what it accepted).
    @exclusivity(unchecked) private var outgoingFrames: [Int64: HTTP3FrameScanner] = [:]
    @exclusivity(unchecked) private var incomingFrames: [Int64: HTTP3FrameScanner] = [:]
    @exclusivity(unchecked) private var submittedHeaders: [Int64: [[(name: String, value: String)]]] = [:]
    @exclusivity(unchecked) private var offered: (streamID: Int64, vectors: [ngtcp2_vec])?
    /// Server, with `tracksRequestHeads`: request streams the client opened whose header section
    /// has not arrived yet, for the server connection's request header timer (slowloris).
    @exclusivity(unchecked) private var awaitingRequestHeads = HTTP3AwaitedRequestHeads()
    /// Server: note when each request stream opens, so `requestHeads(openedBefore:)` can tell
    /// which have taken too long to send their header section.
    @exclusivity(unchecked) package var tracksRequestHeads = false
    /// Server: the largest request header section taken, as RFC 9114 §4.2.2 measures it (each
    /// field's name and value plus 32 bytes), sent as SETTINGS_MAX_FIELD_SECTION_SIZE (§7.2.4.1).
    /// A larger one is answered 431 (§4.2.2) and not kept, and the connection goes on. A single
    /// field line over 64 KiB is another matter: nghttp3's QPACK decoder cannot go on after it,
    /// so that closes the connection.
    package static let maximumFieldSectionSize = 64 << 10
    /// Request streams whose header section was too large, answered 431 once nghttp3's read
    /// call has returned.
    @exclusivity(unchecked) private var oversizedRequests: [Int64] = []
    /// What the body callback asked for that must wait until nghttp3's write call returns.
    @exclusivity(unchecked) private var dueAfterWrite: [(streamID: Int64, action: AfterWrite)] = []

    private enum AfterWrite {
        /// The body just ended and its trailers follow (RFC 9114 §4.1).
        case submitTrailers
        /// The body's file could not be read: H3_INTERNAL_ERROR (§4.1.1), so the peer sees a
        /// truncated response fail, not a short one succeed.
        case reset
    }

    package init(role: Role) throws {
        self.role = role
        fieldSection = (-1, HTTP3ReceivedFields(room: HTTP3ReceivedFields.requestHeadRoom))
        var callbacks = Self.makeCallbacks()
        var settings = nghttp3_settings()
        cqs_nghttp3_settings_default(&settings)
        settings.qpack_max_dtable_capacity = 4096
        settings.qpack_blocked_streams = 100
        if role == .server {
            settings.max_field_section_size = UInt64(Self.maximumFieldSectionSize)
            // Responses are encoded with the static table and literals (RFC 9204 §2.1.1), as
            // quic-go, quiche and nginx encode theirs: their fields change from response to
            // response, and a section that referred to the dynamic table would cost the client
            // a Section Acknowledgment and the server its decoding (§4.4.1).
            settings.qpack_encoder_max_dtable_capacity = 0
        }
        var newConn: OpaquePointer?
        let userData = Unmanaged.passUnretained(self).toOpaque()
        let rv = role == .client
            ? cqs_nghttp3_conn_client_new(&newConn, &callbacks, &settings, blockPool.memory, userData)
            : cqs_nghttp3_conn_server_new(&newConn, &callbacks, &settings, blockPool.memory, userData)
        guard rv == 0, let newConn else { throw HTTP3CodecError(function: "nghttp3_conn_new", code: rv) }
        conn = newConn
    }

    deinit {
        if let conn { nghttp3_conn_del(conn) }
    }

    /// Whether `takeEvents()` has anything to hand over.
    package var hasEvents: Bool { !events.isEmpty }

    /// A server's connection looks at the codec only for events and for request heads still
    /// awaited (the request header timer); a client's looks every pass, for requests it queued.
    package var needsPass: Bool {
        role == .client || !events.isEmpty || (tracksRequestHeads && !awaitingRequestHeads.isEmpty)
    }

    /// Hands over what the codec parsed since the last call. Body bytes of one stream that
    /// arrived back to back come as one `.data` event, not one per packet.
    package func takeEvents() -> [HTTP3Event] {
        guard !events.isEmpty else { return [] }
        if !dataBuffers.isEmpty {
            for (index, buffer) in dataBuffers {
                guard case .data(let streamID, _) = events[index] else { continue }
                events[index] = .data(streamID: streamID, bytes: buffer)
                openData.removeValue(forKey: streamID)
            }
            dataBuffers.removeAll(keepingCapacity: true)
        }
        // Handed over whole: keeping the capacity of an array that is also returned would copy it.
        defer { events = [] }
        return events
    }

    /// Passes what `takeEvents()` would return to `body`, then keeps the array's room for the
    /// next pass's events: a server handles events on nearly every pass, and a new array each
    /// time cost an allocation and its growth (about three per request). Events that `body`
    /// causes wait for the next call.
    package func drainEvents(_ body: ([HTTP3Event]) -> Void) {
        var taken = takeEvents()
        body(taken)
        taken.removeAll(keepingCapacity: true)
        if events.isEmpty { events = taken }
    }

    /// Adds body bytes to the stream's latest `.data` event when nothing else came after it.
    private func appendData(streamID: Int64, _ bytes: UnsafeBufferPointer<UInt8>) {
        if let buffer = openData[streamID] {
            dataBuffers[buffer].bytes.append(contentsOf: bytes)
            return
        }
        openData[streamID] = dataBuffers.count
        dataBuffers.append((events.count, Array(bytes)))
        events.append(.data(streamID: streamID, bytes: []))
    }

    /// Records an event; later body bytes of its stream start a new `.data` event.
    private func append(_ event: HTTP3Event, streamID: Int64?) {
        // Usually empty (a request without a body): skip the hashing then.
        if let streamID, !openData.isEmpty { openData.removeValue(forKey: streamID) }
        events.append(event)
    }

    /// Runs `body` with the connection, borrowed; nil before the handshake completes.
    @inline(__always)
    private func withCore<R>(_ body: (QUICConnectionCore) throws -> R) rethrows -> R? {
        guard let coreLoan else { return nil }
        return try coreLoan._withUnsafeGuaranteedRef(body)
    }

    // MARK: Requests and responses

    /// Sends a request on a new bidirectional stream; nil while the peer's stream limit is reached.
    package func submitRequest(
        headers: [(name: String, value: String)],
        body: [UInt8]?,
        streaming: Bool = false,
        trailers: [(name: String, value: String)]? = nil
    ) throws -> Int64? {
        guard let opened = try withCore({ try $0.openCodecBidirectionalStream() }) else {
            throw HTTP3CodecError(function: "submitRequest before the handshake", code: 0)
        }
        guard let streamID = opened else { return nil }
        try submit(streamID: streamID, headers: headers, body: body, streaming: streaming, trailers: trailers) { conn, nva, count, reader in
            nghttp3_conn_submit_request(conn, streamID, nva, count, reader, nil)
        }
        return streamID
    }

    /// Sends a response on the request's stream (server). With `streaming`, the body arrives
    /// later through `appendBody(streamID:_:finished:)`. With `file`, the body is read from the
    /// file region as the peer takes it; the server passes no other body with one. A
    /// `bodyBuffer` follows `body`.
    package func submitResponse(
        streamID: Int64,
        headers: some HTTP3FieldArraySource,
        body: [UInt8]?,
        bodyBuffer: ByteBuffer? = nil,
        file: HTTP3FileRegion? = nil,
        streaming: Bool = false,
        trailers: [(name: String, value: String)]? = nil
    ) throws {
        try submit(
            streamID: streamID, headers: headers, body: body, bodyBuffer: bodyBuffer, file: file, streaming: streaming, trailers: trailers
        ) { conn, nva, count, reader in
            nghttp3_conn_submit_response(conn, streamID, nva, count, reader)
        }
    }

    /// Adds to a streaming body, and ends it with `finished`; `trailers` given with the end
    /// are sent after the body (RFC 9114 §4.1), in place of any given with the head.
    package func appendBody(streamID: Int64, _ bytes: [UInt8], finished: Bool, trailers: [(name: String, value: String)]? = nil) {
        guard let conn, case .queued(let body)? = bodies[streamID] else { return }
        body.append(bytes)
        if let trailers { body.trailers = trailers }
        if finished { body.finish() }
        _ = nghttp3_conn_resume_stream(conn, streamID)
    }

    /// Body bytes queued on a stream and not yet acknowledged by the peer.
    package func bufferedBodyBytes(streamID: Int64) -> Int {
        guard case .queued(let body)? = bodies[streamID] else { return 0 }
        return body.unacknowledgedBytes
    }

    /// Gives flow-control credit back for body bytes the application has taken (RFC 9000 §4.1):
    /// received DATA is credited only once read, which is what holds a fast sender back.
    package func consumeBody(streamID: Int64, bytes: Int) {
        withCore { $0.consume(streamID: streamID, bytes: bytes) }
    }

    /// Sets a request stream's priority (RFC 9218). On a client this sends PRIORITY_UPDATE
    /// (§7.1); on a server it overrides what the client asked for.
    package func setPriority(streamID: Int64, _ priority: HTTPPriority) throws {
        guard let conn else { return }
        var value = nghttp3_pri(urgency: UInt32(priority.urgency), inc: priority.incremental ? 1 : 0)
        try check(nghttp3_conn_set_stream_priority(conn, streamID, &value), "nghttp3_conn_set_stream_priority")
    }

    /// Whether the handshake completed and the control stream is open.
    package var isEstablished: Bool { coreLoan != nil }

    /// Server: announces a graceful shutdown with a GOAWAY carrying the largest stream ID
    /// (RFC 9114 §5.2); requests already on their way still get through.
    package func submitShutdownNotice() throws {
        guard let conn else { return }
        try check(nghttp3_conn_submit_shutdown_notice(conn), "nghttp3_conn_submit_shutdown_notice")
    }

    /// Server: sends the final GOAWAY with the last accepted stream; nghttp3 then rejects newer
    /// requests with H3_REQUEST_REJECTED while the accepted ones finish.
    package func shutdown() throws {
        guard let conn else { return }
        try check(nghttp3_conn_shutdown(conn), "nghttp3_conn_shutdown")
    }

    /// Abandons a request or response with an HTTP/3 error code (RFC 9114 §4.1.1).
    package func cancel(streamID: Int64, code: HTTP3ErrorCode) {
        guard isEstablished, let conn else { return }
        _ = nghttp3_conn_shutdown_stream_write(conn, streamID)
        withCore { $0.shutdownCodecStream(streamID: streamID, code: code.rawValue, read: true, write: true) }
    }

    private func submit(
        streamID: Int64,
        headers: some HTTP3FieldArraySource,
        body: [UInt8]?,
        bodyBuffer: ByteBuffer? = nil,
        file: HTTP3FileRegion? = nil,
        streaming: Bool,
        trailers: [(name: String, value: String)]?,
        call: (OpaquePointer, UnsafePointer<nghttp3_nv>, Int, UnsafePointer<nghttp3_data_reader>?) -> Int32
    ) throws {
        guard let conn else { return }
        if body == nil, bodyBuffer == nil, !streaming, trailers == nil, let file, file.inMemoryBytes != nil {
            try submitResident(streamID: streamID, headers: headers, file: file, conn: conn, call: call)
            return
        }
        let queued = body != nil || bodyBuffer != nil || file != nil || streaming || trailers != nil
            ? HTTP3OutgoingBody(copying: body, then: bodyBuffer, file: file, finished: !streaming, trailers: trailers) : nil
        noteSubmitted(headers, streamID: streamID)
        var reader = nghttp3_data_reader(read_data: Self.readBody)
        let rv = headers.withFieldArray { nva, count in
            queued != nil ? call(conn, nva, count, &reader) : call(conn, nva, count, nil)
        }
        guard rv == 0 else { throw HTTP3CodecError(function: "nghttp3_conn_submit", code: rv) }
        guard let queued else { return }
        // The stream exists now (a request's was made by the call); nghttp3 reads the body
        // only from later write calls.
        nghttp3_conn_set_stream_user_data(conn, streamID, Unmanaged.passUnretained(queued).toOpaque())
        bodies[streamID] = .queued(queued)
    }

    /// Submits a body its reader holds in memory (`StreamBody.resident`). A path of its own:
    /// the response to a small file is the common one, and the general path's optional body,
    /// matched and copied along the way, cost several reference counts per response.
    private func submitResident(
        streamID: Int64,
        headers: some HTTP3FieldArraySource,
        file: HTTP3FileRegion,
        conn: OpaquePointer,
        call: (OpaquePointer, UnsafePointer<nghttp3_nv>, Int, UnsafePointer<nghttp3_data_reader>?) -> Int32
    ) throws {
        noteSubmitted(headers, streamID: streamID)
        var reader = nghttp3_data_reader(read_data: Self.readResidentBody)
        // nghttp3 copies the field section during the call, unless it may read it in place
        // when it encodes the HEADERS frame: a resident body holds its file's reader until
        // the stream closes, and with it the whole-file head that reader keeps.
        let rv: Int32
        if let shared = headers.sharedFieldArray, file.reader.wholeFileFields === shared {
            rv = shared.withUncopiedFieldArray { nva, count in call(conn, nva, count, &reader) }
        } else {
            rv = headers.withFieldArray { nva, count in call(conn, nva, count, &reader) }
        }
        guard rv == 0 else { throw HTTP3CodecError(function: "nghttp3_conn_submit", code: rv) }
        bodies[streamID] = .resident(file)
    }

    /// Keeps a submitted field section for qlog, which logs it when its HEADERS frame goes out.
    private func noteSubmitted(_ headers: some HTTP3FieldArraySource, streamID: Int64) {
        if writesQLog { submittedHeaders[streamID, default: []].append(Array(headers)) }
    }

    /// Forgets a body before its stream closes, and nghttp3's reference to it (no callback
    /// runs in between).
    private func dropBody(streamID: Int64) {
        guard bodies.removeValue(forKey: streamID) != nil, let conn else { return }
        _ = nghttp3_conn_set_stream_user_data(conn, streamID, nil)
    }

    /// Submits the trailers and resets that body callbacks asked for during the write call.
    private func runDueAfterWrite() throws {
        guard let conn, !dueAfterWrite.isEmpty else { return }
        let due = dueAfterWrite
        dueAfterWrite.removeAll()
        for (streamID, action) in due {
            switch action {
            case .submitTrailers:
                guard case .queued(let body)? = bodies[streamID], let fields = body.trailers else { continue }
                let rv = fields.withFieldArray { nva, count in nghttp3_conn_submit_trailers(conn, streamID, nva, count) }
                try check(rv, "nghttp3_conn_submit_trailers")
                noteSubmitted(fields, streamID: streamID)
            case .reset:
                dropBody(streamID: streamID)
                cancel(streamID: streamID, code: .internalError)
            }
        }
    }

    // MARK: QUICApplicationCodec

    package func connectionEstablished(_ core: QUICConnectionCore) throws {
        coreLoan = Unmanaged.passUnretained(core)
        writesQLog = core.isQLogEnabled
        guard let conn else { return }
        // RFC 9114 §6.2: one control stream and the two QPACK streams, each unidirectional.
        let control = try core.openCodecUnidirectionalStream()
        try check(nghttp3_conn_bind_control_stream(conn, control), "nghttp3_conn_bind_control_stream")
        let encoder = try core.openCodecUnidirectionalStream()
        let decoder = try core.openCodecUnidirectionalStream()
        try check(nghttp3_conn_bind_qpack_streams(conn, encoder, decoder), "nghttp3_conn_bind_qpack_streams")
        if role == .server {
            nghttp3_conn_set_max_client_streams_bidi(conn, 100)
        }
    }

    /// Server: request streams the client has opened and QUIC has not closed yet, whether or
    /// not their header section has arrived (RFC 9114 §5.2: a graceful shutdown lets them
    /// finish). Counted as ngtcp2 opens and closes them: keeping their IDs would cost a table
    /// insert and removal per request.
    @exclusivity(unchecked) package private(set) var openRequestStreams = 0

    /// Client-initiated bidirectional streams are requests (RFC 9114 §6.1, RFC 9000 §2.1).
    private func isRequestStream(_ streamID: Int64) -> Bool {
        role == .server && streamID & 0x3 == 0
    }

    package func streamOpened(streamID: Int64) {
        guard isRequestStream(streamID) else { return }
        openRequestStreams += 1
        guard tracksRequestHeads, let openedAt = withCore({ $0.currentTime }) else { return }
        awaitingRequestHeads.opened(streamID, at: openedAt)
    }

    /// When the oldest request stream still without its header section opened; nil when none waits.
    package var oldestAwaitingRequestHead: UInt64? { awaitingRequestHeads.oldest }

    /// Takes the request streams that opened before `time` and still have no header section.
    package func requestHeads(openedBefore time: UInt64) -> [Int64] {
        awaitingRequestHeads.take(openedBefore: time)
    }

    package func receive(streamID: Int64, bytes: UnsafeRawBufferPointer, fin: Bool) throws -> Int {
        guard let conn else { return bytes.count }
        let consumed = nghttp3_conn_read_stream(
            conn, streamID, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count, fin ? 1 : 0
        )
        // After nghttp3 has read them, so a HEADERS frame's decoded fields come before its DATA.
        if writesQLog { logFrames(streamID: streamID, bytes: bytes, outgoing: false) }
        // One field line over 64 KiB: nghttp3's QPACK decoder stops for the whole connection
        // (every later section fails), so the connection closes, with the QPACK code and a reason
        // that says why. A compliant client never sends one: it is over the advertised limit.
        if consumed == NGHTTP3_ERR_QPACK_HEADER_TOO_LARGE {
            throw QUICApplicationCodecError(
                code: UInt64(NGHTTP3_QPACK_DECOMPRESSION_FAILED),
                reason: "a field line over 64 KiB, past SETTINGS_MAX_FIELD_SECTION_SIZE (RFC 9114 §4.2.2)"
            )
        }
        guard consumed >= 0 else { throw applicationError(Int32(consumed), "nghttp3_conn_read_stream") }
        if !oversizedRequests.isEmpty {
            let oversized = oversizedRequests
            oversizedRequests.removeAll()
            for request in oversized { rejectOversizedRequest(streamID: request) }
        }
        return consumed
    }

    package func acknowledged(streamID: Int64, bytes: UInt64) throws {
        guard let conn else { return }
        try check(nghttp3_conn_add_ack_offset(conn, streamID, bytes), "nghttp3_conn_add_ack_offset")
        // A file body that stopped reading at its window reads on once half of it is acknowledged.
        guard !resumableBodies.isEmpty else { return }
        let resumable = resumableBodies
        resumableBodies.removeAll()
        for stream in resumable {
            try check(nghttp3_conn_resume_stream(conn, stream), "nghttp3_conn_resume_stream")
        }
    }

    package func peerReset(streamID: Int64, code: UInt64) throws {
        guard let conn else { return }
        try check(nghttp3_conn_shutdown_stream_read(conn, streamID), "nghttp3_conn_shutdown_stream_read")
    }

    package func streamClosed(streamID: Int64, code: UInt64?) throws {
        // ngtcp2 closes each stream it opened once; a request stream is counted open from then.
        if isRequestStream(streamID) && openRequestStreams > 0 { openRequestStreams -= 1 }
        guard let conn else { return }
        let rv = nghttp3_conn_close_stream(conn, streamID, code ?? UInt64(NGHTTP3_H3_NO_ERROR))
        // Streams nghttp3 never saw (a reset before any byte) are not an error (ngtcp2's client.cc).
        if rv != 0 && rv != NGHTTP3_ERR_STREAM_NOT_FOUND {
            throw applicationError(rv, "nghttp3_conn_close_stream")
        }
        if rv == NGHTTP3_ERR_STREAM_NOT_FOUND && isRequestStream(streamID) {
            // nghttp3's stream_close callback reports nothing for a stream it never saw: the end
            // is reported here, so a server draining for shutdown sees its last request go.
            append(.closed(streamID: streamID, code: HTTP3ErrorCode(rawValue: code ?? UInt64(NGHTTP3_H3_NO_ERROR))), streamID: streamID)
        }
        // nghttp3's stream_close callback has dropped the body, if there was one.
        if !awaitingRequestHeads.isEmpty { awaitingRequestHeads.remove(streamID) }
        if fieldSection.streamID == streamID { _ = takeFieldSection() }
        // Empty unless a section paused or a trace is written: skip the hashing then.
        if !pausedFieldSections.isEmpty { pausedFieldSections[streamID] = nil }
        if !outgoingFrames.isEmpty { outgoingFrames[streamID] = nil }
        if !incomingFrames.isEmpty { incomingFrames[streamID] = nil }
        if !submittedHeaders.isEmpty { submittedHeaders[streamID] = nil }
    }

    package func nextStreamData(into vectors: UnsafeMutableBufferPointer<ngtcp2_vec>) throws -> (streamID: Int64, count: Int, fin: Bool)? {
        guard let conn else { return nil }
        while true {
            var streamID: Int64 = -1
            var fin: Int32 = 0
            // nghttp3_vec and ngtcp2_vec are the same { uint8_t *base; size_t len } layout.
            let count = vectors.withMemoryRebound(to: nghttp3_vec.self) { nghttpVectors in
                nghttp3_conn_writev_stream(conn, &streamID, &fin, nghttpVectors.baseAddress, nghttpVectors.count)
            }
            guard count >= 0 else { throw applicationError(Int32(count), "nghttp3_conn_writev_stream") }
            let actedAfterWrite = !dueAfterWrite.isEmpty
            try runDueAfterWrite()
            // A body that ended with no bytes left gives nghttp3 nothing to write in this call,
            // and its trailers are submitted only after it: ask again, or they wait for a pass
            // that nothing may cause (every byte already acknowledged).
            if streamID < 0, actedAfterWrite { continue }
            guard streamID >= 0 else { return nil }
            if writesQLog { offered = (streamID, Array(vectors.prefix(count))) }
            return (streamID, count, fin != 0)
        }
    }

    package func didWrite(streamID: Int64, bytes: Int) throws {
        guard let conn else { return }
        if writesQLog {
            if let offered, offered.streamID == streamID, bytes > 0 {
                var remaining = bytes
                for vector in offered.vectors where remaining > 0 {
                    let take = min(remaining, vector.len)
                    logFrames(streamID: streamID, bytes: UnsafeRawBufferPointer(start: vector.base, count: take), outgoing: true)
                    remaining -= take
                }
            }
            offered = nil
        }
        try check(nghttp3_conn_add_write_offset(conn, streamID, bytes), "nghttp3_conn_add_write_offset")
    }

    package func setBlocked(streamID: Int64, _ blocked: Bool) throws {
        guard let conn else { return }
        if blocked {
            nghttp3_conn_block_stream(conn, streamID)
        } else {
            try check(nghttp3_conn_unblock_stream(conn, streamID), "nghttp3_conn_unblock_stream")
        }
    }

    package func writeShutDown(streamID: Int64) throws {
        guard let conn else { return }
        nghttp3_conn_shutdown_stream_write(conn, streamID)
    }

    // MARK: nghttp3 callbacks

    @inline(__always)
    private static func withUserDataCodec(_ userData: UnsafeMutableRawPointer?, _ body: (HTTP3Codec) -> Int32) -> Int32 {
        Unmanaged<HTTP3Codec>.fromOpaque(userData!)._withUnsafeGuaranteedRef(body)
    }

    /// Runs `body` with the outgoing body a stream's user data points at (`submit`), without
    /// retaining it: `bodies` owns it until nghttp3 can no longer call back with it, and
    /// nothing a callback does with it drops it.
    @inline(__always)
    private static func withBody<R>(_ streamUserData: UnsafeMutableRawPointer, _ body: (HTTP3OutgoingBody) -> R) -> R {
        Unmanaged<HTTP3OutgoingBody>.fromOpaque(streamUserData)._withUnsafeGuaranteedRef(body)
    }

    /// Reads a resident body: all of it at once, from where it lies.
    private static let readResidentBody: nghttp3_read_data_callback = { _, streamID, vectors, count, flags, userData, _ in
        nghttp3_ssize(HTTP3Codec.withUserDataCodec(userData) { codec in
            flags!.pointee |= UInt32(NGHTTP3_DATA_FLAG_EOF)
            guard count > 0, case .resident(let region)? = codec.bodies[streamID], let bytes = region.inMemoryBytes, !bytes.isEmpty
            else { return 0 }
            vectors![0] = nghttp3_vec(base: UnsafeMutablePointer(mutating: bytes.baseAddress?.assumingMemoryBound(to: UInt8.self)), len: bytes.count)
            return 1
        })
    }

    private static let readBody: nghttp3_read_data_callback = { _, streamID, vectors, count, flags, userData, streamUserData in
        nghttp3_ssize(HTTP3Codec.withUserDataCodec(userData) { codec in
            guard let streamUserData else {
                flags!.pointee |= UInt32(NGHTTP3_DATA_FLAG_EOF)
                return 0
            }
            return HTTP3Codec.withBody(streamUserData) { body in
                // Nothing queued yet on a streaming body, or a file body at its window: nghttp3 waits
                // for nghttp3_conn_resume_stream.
                guard let (provided, endOfBody) = body.provide(into: vectors!, capacity: count) else {
                    if body.readFailed { codec.dueAfterWrite.append((streamID, .reset)) }
                    return Int32(NGHTTP3_ERR_WOULDBLOCK)
                }
                if endOfBody {
                    flags!.pointee |= UInt32(NGHTTP3_DATA_FLAG_EOF)
                    if body.trailers != nil {
                        // The stream stays open for the trailers, submitted right after this call.
                        flags!.pointee |= UInt32(NGHTTP3_DATA_FLAG_NO_END_STREAM)
                        codec.dueAfterWrite.append((streamID, .submitTrailers))
                    }
                }
                return Int32(provided)
            }
        })
    }

    private static func makeCallbacks() -> nghttp3_callbacks {
        var callbacks = nghttp3_callbacks()
        callbacks.acked_stream_data = { _, streamID, length, userData, streamUserData in
            HTTP3Codec.withUserDataCodec(userData) { codec in
                guard let streamUserData else { return 0 }
                HTTP3Codec.withBody(streamUserData) { body in
                    body.acknowledge(length)
                    if body.resumesAfterAcknowledgement() { codec.resumableBodies.append(streamID) }
                    // Only a body still being produced can have a producer waiting for room (the
                    // body pump); a file or a complete body would only cost an event per ACK.
                    if !body.isFinished { codec.append(.bodyAcknowledged(streamID: streamID), streamID: nil) }
                }
                return 0
            }
        }
        callbacks.stream_close = { _, streamID, code, userData, streamUserData in
            HTTP3Codec.withUserDataCodec(userData) { codec in
                codec.append(.closed(streamID: streamID, code: HTTP3ErrorCode(rawValue: code)), streamID: streamID)
                // A resident body has no user data; it is in `bodies` all the same.
                if !codec.bodies.isEmpty { codec.bodies[streamID] = nil }
                return 0
            }
        }
        callbacks.recv_data = { _, streamID, data, length, userData, _ in
            HTTP3Codec.withUserDataCodec(userData) { codec in
                // Credit comes back when the application takes the bytes (`consumeBody`).
                codec.appendData(streamID: streamID, UnsafeBufferPointer(start: data, count: length))
                return 0
            }
        }
        callbacks.deferred_consume = { _, streamID, consumed, userData, _ in
            HTTP3Codec.withUserDataCodec(userData) { codec in
                codec.withCore { $0.consume(streamID: streamID, bytes: consumed) }
                return 0
            }
        }
        callbacks.begin_headers = { _, streamID, userData, _ in
            HTTP3Codec.withUserDataCodec(userData) { codec in
                codec.beginFieldSection(streamID: streamID)
                return 0
            }
        }
        callbacks.recv_header = { _, streamID, token, name, value, _, userData, _ in
            HTTP3Codec.withUserDataCodec(userData) { codec in
                if codec.fieldSection.streamID != streamID { codec.resumeFieldSection(streamID: streamID) }
                let name = nghttp3_rcbuf_get_buf(name), value = nghttp3_rcbuf_get_buf(value)
                codec.fieldSection.fields.append(
                    name: UnsafeBufferPointer(start: name.base, count: name.len),
                    value: UnsafeBufferPointer(start: value.base, count: value.len),
                    token: token,
                    keepingWithin: codec.role == .server ? HTTP3Codec.maximumFieldSectionSize : .max
                )
                return 0
            }
        }
        callbacks.end_headers = { _, streamID, _, userData, _ in
            HTTP3Codec.withUserDataCodec(userData) { codec in
                codec.fieldSectionEnded(streamID: streamID, isTrailers: false)
                return 0
            }
        }
        callbacks.begin_trailers = callbacks.begin_headers
        callbacks.recv_trailer = callbacks.recv_header
        callbacks.end_trailers = { _, streamID, _, userData, _ in
            HTTP3Codec.withUserDataCodec(userData) { codec in
                codec.fieldSectionEnded(streamID: streamID, isTrailers: true)
                return 0
            }
        }
        callbacks.end_stream = { _, streamID, userData, _ in
            HTTP3Codec.withUserDataCodec(userData) { codec in
                codec.append(.end(streamID: streamID), streamID: streamID)
                return 0
            }
        }
        callbacks.stop_sending = { _, streamID, code, userData, _ in
            HTTP3Codec.withUserDataCodec(userData) { codec in
                codec.withCore { $0.shutdownCodecStream(streamID: streamID, code: code, read: true, write: false) }
                return 0
            }
        }
        callbacks.reset_stream = { _, streamID, code, userData, _ in
            HTTP3Codec.withUserDataCodec(userData) { codec in
                codec.append(.reset(streamID: streamID, code: HTTP3ErrorCode(rawValue: code)), streamID: streamID)
                codec.withCore { $0.shutdownCodecStream(streamID: streamID, code: code, read: false, write: true) }
                return 0
            }
        }
        callbacks.shutdown = { _, id, userData in
            HTTP3Codec.withUserDataCodec(userData) { codec in
                codec.append(.goaway(lastID: id), streamID: nil)
                return 0
            }
        }
        return callbacks
    }

    /// Answers a request whose header section is over the limit with 431 (RFC 9114 §4.2.2) and
    /// stops reading it (STOP_SENDING with H3_NO_ERROR, §4.1.2); nghttp3 reads no more of it and
    /// tells the peer's QPACK encoder (RFC 9204 §4.4.2). The connection and its other streams
    /// go on.
    private func rejectOversizedRequest(streamID: Int64) {
        guard conn != nil else { return }
        if !awaitingRequestHeads.isEmpty { awaitingRequestHeads.remove(streamID) }
        let status = [(name: ":status", value: "431")]
        do {
            try submitResponse(streamID: streamID, headers: status, body: Array("request header fields too large\n".utf8))
            stopReading(streamID: streamID, unreadBytes: 0)
        } catch {
            cancel(streamID: streamID, code: .excessiveLoad)
        }
    }

    /// Server: stops reading a request whose response needs no more of it (RFC 9114 §4.1.2):
    /// nghttp3 takes no more of the stream, so a body the client cuts short is no error, and
    /// the client is sent STOP_SENDING with H3_NO_ERROR. The response still goes out whole and
    /// the connection goes on. `unreadBytes`, body bytes the application was handed and will
    /// not read now, are credited to the connection (RFC 9000 §4.1), so that unread uploads
    /// never shrink its window.
    package func stopReading(streamID: Int64, unreadBytes: Int) {
        guard let conn else { return }
        _ = nghttp3_conn_shutdown_stream_read(conn, streamID)
        withCore { core in
            core.shutdownCodecStream(streamID: streamID, code: UInt64(NGHTTP3_H3_NO_ERROR), read: true, write: false)
            core.creditConnection(bytes: unreadBytes)
        }
    }

    private func beginFieldSection(streamID: Int64) {
        pauseFieldSection()
        fieldSection.streamID = streamID
    }

    /// Fields for a stream other than the current one: the current section pauses, and the
    /// stream's own paused section (if any) becomes current.
    private func resumeFieldSection(streamID: Int64) {
        pauseFieldSection()
        fieldSection.streamID = streamID
        if let paused = pausedFieldSections.removeValue(forKey: streamID) { fieldSection.fields = paused }
    }

    private func pauseFieldSection() {
        guard fieldSection.streamID >= 0 else { return }
        let streamID = fieldSection.streamID
        pausedFieldSections[streamID] = takeFieldSection()
    }

    /// Moves the current section out, leaves an empty one with fresh storage in its place, and
    /// no section current.
    private func takeFieldSection() -> HTTP3ReceivedFields {
        var taken = HTTP3ReceivedFields(room: HTTP3ReceivedFields.requestHeadRoom)
        swap(&taken, &fieldSection.fields)
        fieldSection.streamID = -1
        return taken
    }

    /// A decoded HEADERS frame (headers or trailers) is complete: log it and report it.
    private func fieldSectionEnded(streamID: Int64, isTrailers: Bool) {
        let fields: HTTP3ReceivedFields
        if fieldSection.streamID == streamID {
            fields = takeFieldSection()
            if role == .server, fields.size > Self.maximumFieldSectionSize {
                oversizedRequests.append(streamID)
                return
            }
        } else {
            fields = pausedFieldSections.removeValue(forKey: streamID) ?? HTTP3ReceivedFields()
        }
        if !awaitingRequestHeads.isEmpty { awaitingRequestHeads.remove(streamID) }
        if writesQLog {
            withCore { $0.appendQLogEvent(name: "http:frame_parsed", data: HTTP3QLog.headers(streamID: streamID, length: nil, fields: fields.pairs)) }
        }
        append(.headers(streamID: streamID, fields: fields, isTrailers: isTrailers), streamID: streamID)
    }

    /// Writes qlog events for the frames that start in `bytes` (RFC 9114 §7.2 frame types).
    private func logFrames(streamID: Int64, bytes: UnsafeRawBufferPointer, outgoing: Bool) {
        guard writesQLog, let core = coreLoan?.takeUnretainedValue() else { return }
        let isUnidirectional = streamID & 0x2 != 0
        var scanner = (outgoing ? outgoingFrames[streamID] : incomingFrames[streamID])
            ?? HTTP3FrameScanner(unidirectional: isUnidirectional)
        for output in scanner.scan(bytes) {
            switch output {
            case .streamType(let type):
                core.appendQLogEvent(
                    name: "http:stream_type_set",
                    data: HTTP3QLog.streamTypeSet(streamID: streamID, owner: outgoing ? "local" : "remote", type: type)
                )
            case .frame(let frame) where frame.type == 0x01:
                // HEADERS: outgoing ones are logged with the fields we submitted; incoming ones
                // once nghttp3 has decoded them (end_headers).
                if outgoing {
                    let fields = submittedHeaders[streamID]?.first ?? []
                    if submittedHeaders[streamID]?.isEmpty == false { submittedHeaders[streamID]!.removeFirst() }
                    core.appendQLogEvent(name: "http:frame_created", data: HTTP3QLog.headers(streamID: streamID, length: frame.length, fields: fields))
                }
            case .frame(let frame):
                core.appendQLogEvent(
                    name: outgoing ? "http:frame_created" : "http:frame_parsed",
                    data: HTTP3QLog.frame(streamID: streamID, frame)
                )
            }
        }
        if outgoing { outgoingFrames[streamID] = scanner } else { incomingFrames[streamID] = scanner }
    }

    private func check(_ rv: Int32, _ function: String) throws {
        if rv != 0 { throw applicationError(rv, function) }
    }

    private func applicationError(_ rv: Int32, _ function: String) -> QUICApplicationCodecError {
        QUICApplicationCodecError(
            code: nghttp3_err_infer_quic_app_error_code(rv),
            reason: "\(function): \(String(cString: nghttp3_strerror(rv)))"
        )
    }
}

/// A response or request body as the codec holds it until its stream closes.
private enum StreamBody {
    /// Bytes queued in chunks and let go as the peer acknowledges them: a body given in
    /// memory, a streamed one, or a file read piece by piece.
    case queued(HTTP3OutgoingBody)
    /// A file region whose reader holds the file in memory for as long as the reader lives
    /// (`HTTP3FileRegion.inMemoryBytes`): sent from where it lies in one vector, with nothing
    /// to queue, track or free per request.
    case resident(HTTP3FileRegion)
}
