import CQuicShims
import Logging

/// One QUIC connection as a sans-I/O state machine: the single owner of an `ngtcp2_conn` and its
/// GnuTLS session.
///
/// Call order, always on one thread:
/// 1. `receive(datagram:path:now:)` for every datagram that routes here;
/// 2. `writePackets(now:scratch:emit:)` after any input, and when `nextDeadline` passes,
///    after `handleTimeout(now:)`;
/// 3. `takeEvents()` to learn what happened.
///
/// Time is whatever monotonic nanosecond clock the caller supplies, so tests can run it on a
/// virtual clock. C callbacks run synchronously inside ngtcp2 calls; they only record events.
///
/// The properties touched for every packet and callback are `@exclusivity(unchecked)`, which
/// skips Swift's run-time exclusivity check: the core is confined to one thread, and no access
/// to one of them spans a call into ngtcp2 (whose callbacks could reach it again).
package final class QUICConnectionCore {
    package enum Role: Sendable { case client, server }

    package enum State: Equatable {
        case handshaking
        case established
        /// We sent CONNECTION_CLOSE; we answer late packets with it until the deadline (RFC 9000 §10.2.1).
        case closing(until: UInt64)
        /// The peer closed; we stay silent until the deadline (RFC 9000 §10.2.2).
        case draining(until: UInt64)
        case closed
    }

    package let role: Role
    /// The Destination Connection ID of the client's first Initial: names the qlog trace.
    package let originalDestinationConnectionID: QUICConnectionID
    @exclusivity(unchecked) package private(set) var state: State = .handshaking
    package private(set) var closeReason: QUICCloseReason?
    @exclusivity(unchecked) package private(set) var path: QUICPath

    // The ngtcp2 connection; freed by `releaseConnectionState()` once the connection is over, or
    // first in deinit, while `qlog` is still alive. Nil after the release: every read that may
    // come later answers from `lastFigures` instead.
    var conn: OpaquePointer!
    private(set) var tlsSession: QUICTLSSession!
    /// What the accessors report once the C state is released: the figures at that moment.
    private(set) var lastFigures = QUICConnectionLastFigures()
    private let connectionRef: UnsafeMutablePointer<ngtcp2_crypto_conn_ref>
    let qlog: QLogWriter?
    let logger: Logger
    let configuration: QUICConfiguration
    let clientTLS: QUICClientTLS?
    let idFactory: QUICConnectionIDFactory

    /// Each raw stream's buffers and flags, when no application codec runs the streams.
    @exclusivity(unchecked) var streams = QUICStreamTable<QUICStreamState>()
    /// MAX_STREAMS credit given to the peer beyond the initial limits (RFC 9000 §4.6).
    @exclusivity(unchecked) var peerStreamCreditGranted = (bidirectional: UInt64(0), unidirectional: UInt64(0))
    /// How many streams of each kind this side has opened.
    @exclusivity(unchecked) var localStreamsOpened = (bidirectional: UInt64(0), unidirectional: UInt64(0))
    /// Streams with bytes or FIN to write, served round-robin.
    @exclusivity(unchecked) var writeQueue = QUICFIFOQueue<Int64>()
    @exclusivity(unchecked) var queuedForWrite = QUICStreamTable<Void>()
    /// Datagrams queued to send (RFC 9221), oldest first; a ring buffer, so a burst drains in
    /// linear time.
    @exclusivity(unchecked) var pendingDatagrams = QUICFIFOQueue<[UInt8]>()
    @exclusivity(unchecked) var events: [QUICConnectionEvent] = []
    var verificationFailure: TLSVerificationFailure?
    /// The application protocol running inside the read and write loops, if any (HTTP/3).
    ///
    /// Computed, so another module reads it through this getter: a stored property read from
    /// outside its module is checked for exclusive access at run time there, whatever
    /// `@exclusivity(unchecked)` says here (HTTP/3 reads it for every response).
    package var applicationCodec: (any QUICApplicationCodec)? {
        get { codecHolder?.codec }
        set { codecHolder = newValue.map(QUICApplicationCodecHolder.init) }
    }
    /// The codec's one owner on this side: the core holds the holder, the holder the codec.
    /// `runCodecCallback` lends it without a reference count.
    @exclusivity(unchecked) var codecHolder: QUICApplicationCodecHolder?
    /// Whether a codec runs this connection's streams (read without touching the codec).
    var hasApplicationCodec: Bool { codecHolder != nil }
    /// Makes the fresh codec that replaces `applicationCodec` when the server refuses 0-RTT.
    package var makeApplicationCodec: (() throws -> any QUICApplicationCodec)?
    /// The peer's stateless reset arrived (ngtcp2's `recv_stateless_reset`, RFC 9000 §10.3).
    var receivedStatelessReset = false
    /// What a codec threw inside a callback; closes the connection after the ngtcp2 call returns.
    @exclusivity(unchecked) var codecFailure: (any Error)?
    private var lastError = ngtcp2_connection_close_error()
    private var closePacket: [UInt8] = []
    @exclusivity(unchecked) private var closePacketDue = false
    /// ngtcp2 has measured an RTT: packets are paced from then on (`updatePacing`).
    @exclusivity(unchecked) private var hasRTTSample = false
    private var closePacketsSent = 0
    /// Traffic and loss totals for data-transfer reports.
    @exclusivity(unchecked) var counters = QUICTransferCounters()
    var lossLedger = QUICLossLedger()
    /// Reports started and not yet collected, and the largest congestion window so far.
    @exclusivity(unchecked) var dataTransferMarks: [QUICDataTransferMark] = []
    @exclusivity(unchecked) var peakCongestionWindow: UInt64 = 0
    /// 1-RTT key derivations by ngtcp2 so far, and whether we asked for the next update (RFC 9001 §6).
    var keyDerivations = 0
    /// Servers: keeps the endpoint's ticket key alive as long as this session may use it.
    private var ticketKey: TLSSessionTicketKey?
    private var antiReplay: TLSAntiReplay?
    /// Whether the handshake resumed a session from a ticket (RFC 8446 §2.2).
    package internal(set) var wasResumed = false
    /// Whether the application codec has been told it may open its streams.
    var codecStarted = false
    /// Clients: 0-RTT was attempted (a ticket with transport parameters, and early data allowed),
    /// and whether the server took it.
    package private(set) var earlyDataAttempted = false
    package internal(set) var earlyDataAccepted = false
    /// Whether streams may be opened and written now: after the handshake, or during a 0-RTT attempt.
    package var canOpenStreams: Bool {
        guard let conn else { return false }
        return isHandshakeCompleted || (earlyDataAttempted && ngtcp2_conn_get_early_data_rejected(conn) == 0)
    }
    var localKeyUpdateRequested = false
    /// The keep-alive interval in force (`setKeepAlive`); 0, ngtcp2's default, when off.
    var keepAliveMilliseconds: UInt64 = 0
    /// The owner's count of cores in memory; this core is in it until `deinit`. Set once, right
    /// after creation, while the core still holds its C state.
    package var liveConnections: QUICLiveConnections? {
        didSet {
            precondition(oldValue == nil && conn != nil, "liveConnections is set once, right after creation")
            liveConnections?.coreCreated()
        }
    }

    // MARK: Creation

    /// A client connection to `path.remote`.
    package init(
        clientWith configuration: QUICConfiguration,
        tls: QUICClientTLS,
        path: QUICPath,
        now: UInt64,
        logger: Logger
    ) throws {
        self.role = .client
        self.configuration = configuration
        self.clientTLS = tls
        self.path = path
        self.logger = logger
        self.idFactory = QUICConnectionIDFactory()
        let dcid = QUICConnectionID.random(length: idFactory.idLength)
        self.originalDestinationConnectionID = dcid
        self.connectionRef = .allocate(capacity: 1)
        self.qlog = configuration.qlogDirectory.map {
            QLogWriter(directory: $0, originalDestinationConnectionID: dcid, vantagePoint: .client, logger: logger)
        }
        ngtcp2_connection_close_error_default(&lastError)
        connectionRef.initialize(to: ngtcp2_crypto_conn_ref(get_conn: Self.getConnection, user_data: nil))
        connectionRef.pointee.user_data = Unmanaged.passUnretained(self).toOpaque()

        var settings = makeSettings(now: now, qlogID: dcid)
        var params = makeTransportParameters()
        var callbacks = Self.makeCallbacks(role: .client)
        var dcidC = dcid.ngtcp2
        var scidC = idFactory.makeConnectionID().ngtcp2
        var newConn: OpaquePointer?
        let rv = path.withNGTCP2Path { ngPath in
            cqs_ngtcp2_conn_client_new(
                &newConn, &dcidC, &scidC, ngPath, NGTCP2_PROTO_VER_V1, &callbacks, &settings, &params, nil,
                Unmanaged.passUnretained(self).toOpaque()
            )
        }
        guard rv == 0, let newConn else { throw QUICCoreError.ngtcp2("ngtcp2_conn_client_new", rv) }
        self.conn = newConn
        let saved = tls.ticketStore?.entry(for: tls.ticketKey)
        tlsSession = try QUICTLSSession(
            clientWith: tls.credentials,
            alpn: configuration.alpn,
            serverName: tls.serverName,
            priority: try TLSPriority(configuration.gnutlsPriority),
            resumptionTicket: saved?.ticket,
            connectionRef: connectionRef
        )
        // 0-RTT (RFC 9001 §4.6.1): streams may open and carry data at once, within the limits the
        // server gave last time (RFC 9000 §7.4.1). No codec: HTTP/3 waits for the handshake.
        if configuration.attemptsEarlyData, let parameters = saved?.transportParameters {
            var early = parameters.ngtcp2
            cqs_ngtcp2_conn_set_early_remote_transport_params(conn, &early)
            earlyDataAttempted = true
        }
        // Both run inside the handshake; they find this core through the session's conn_ref.
        tlsSession.setVerifyFunction(Self.verifyCertificate)
        if tls.ticketStore != nil { tlsSession.setTicketHook(Self.receivedSessionTicket) }
        ngtcp2_conn_set_tls_native_handle(conn, UnsafeMutableRawPointer(tlsSession.raw))
        logConnectionStarted()
    }

    /// A server connection for a client Initial that `ngtcp2_accept` approved.
    ///
    /// - Parameters:
    ///   - originalDestinationConnectionID: the client's first DCID (from the Retry token if one was used).
    ///   - retrySourceConnectionID: the SCID of our Retry packet, when address validation used Retry.
    package init(
        serverWith configuration: QUICConfiguration,
        credentials: TLSCredentials,
        header: ngtcp2_pkt_hd,
        originalDestinationConnectionID: QUICConnectionID,
        retrySourceConnectionID: QUICConnectionID?,
        idFactory: QUICConnectionIDFactory,
        ticketKey: TLSSessionTicketKey? = nil,
        antiReplay: TLSAntiReplay? = nil,
        tlsPriority: TLSPriority? = nil,
        path: QUICPath,
        now: UInt64,
        logger: Logger
    ) throws {
        self.role = .server
        self.configuration = configuration
        self.clientTLS = nil
        self.path = path
        self.logger = logger
        self.idFactory = idFactory
        self.originalDestinationConnectionID = originalDestinationConnectionID
        self.connectionRef = .allocate(capacity: 1)
        self.qlog = configuration.qlogDirectory.map {
            QLogWriter(
                directory: $0,
                originalDestinationConnectionID: originalDestinationConnectionID,
                vantagePoint: .server,
                logger: logger
            )
        }
        ngtcp2_connection_close_error_default(&lastError)
        connectionRef.initialize(to: ngtcp2_crypto_conn_ref(get_conn: Self.getConnection, user_data: nil))
        connectionRef.pointee.user_data = Unmanaged.passUnretained(self).toOpaque()

        let scid = idFactory.makeConnectionID()
        var settings = makeSettings(now: now, qlogID: originalDestinationConnectionID)
        // The token points into the datagram being processed, which outlives this initializer call.
        if header.token.len > 0, retrySourceConnectionID == nil {
            settings.token = header.token
        }
        var params = makeTransportParameters()
        params.original_dcid = originalDestinationConnectionID.ngtcp2
        if let retrySourceConnectionID {
            params.retry_scid = retrySourceConnectionID.ngtcp2
            params.retry_scid_present = 1
        }
        params.stateless_reset_token_present = 1
        let resetToken = idFactory.statelessResetToken(for: scid)
        withUnsafeMutableBytes(of: &params.stateless_reset_token) { $0.copyBytes(from: resetToken) }
        let preferredID = configuration.preferredAddress.map { Self.advertise(preferred: $0, in: &params, idFactory: idFactory) }
        var callbacks = Self.makeCallbacks(role: .server)
        var clientSCID = header.scid
        var scidC = scid.ngtcp2
        var newConn: OpaquePointer?
        let rv = path.withNGTCP2Path { ngPath in
            cqs_ngtcp2_conn_server_new(
                &newConn, &clientSCID, &scidC, ngPath, header.version, &callbacks, &settings, &params, nil,
                Unmanaged.passUnretained(self).toOpaque()
            )
        }
        guard rv == 0, let newConn else { throw QUICCoreError.ngtcp2("ngtcp2_conn_server_new", rv) }
        self.conn = newConn
        tlsSession = try QUICTLSSession(
            serverWith: credentials,
            alpn: configuration.alpn,
            priority: try tlsPriority ?? TLSPriority(configuration.gnutlsPriority),
            ticketKey: ticketKey,
            antiReplay: antiReplay,
            connectionRef: connectionRef
        )
        self.ticketKey = ticketKey
        self.antiReplay = antiReplay
        ngtcp2_conn_set_tls_native_handle(conn, UnsafeMutableRawPointer(tlsSession.raw))
        events.append(.connectionIDIssued(scid))
        if let preferredID { events.append(.connectionIDIssued(preferredID)) }
        logConnectionStarted()
    }

    /// Fills `preferred_address` (RFC 9000 §18.2) with `address` and a fresh connection ID (its
    /// sequence number is 1, §5.1.1) and reset token; returns the ID, which the endpoint routes.
    private static func advertise(preferred address: QUICSocketAddress, in params: inout ngtcp2_transport_params, idFactory: QUICConnectionIDFactory) -> QUICConnectionID {
        let id = idFactory.makeConnectionID()
        params.preferred_address_present = 1
        params.preferred_address.cid = id.ngtcp2
        let token = idFactory.statelessResetToken(for: id)
        withUnsafeMutableBytes(of: &params.preferred_address.stateless_reset_token) { $0.copyBytes(from: token) }
        withUnsafeBytes(of: address.storage) { raw in
            if address.family == AF_INET {
                params.preferred_address.ipv4 = raw.load(as: ngtcp2_sockaddr_in.self)
                params.preferred_address.ipv4_present = 1
            } else {
                params.preferred_address.ipv6 = raw.load(as: ngtcp2_sockaddr_in6.self)
                params.preferred_address.ipv6_present = 1
            }
        }
        return id
    }

    /// `connectivity:connection_started` (qlog QUIC events §3.2): the addresses ngtcp2 0.12 leaves out.
    private func logConnectionStarted() {
        let local = path.local
        let remote = path.remote
        let ipVersion = remote.family == AF_INET6 ? "ipv6" : "ipv4"
        let (src, dst) = role == .client ? (local, remote) : (remote, local)
        appendQLogEvent(
            name: "connectivity:connection_started",
            data: "{\"ip_version\":\"\(ipVersion)\",\"src_ip\":\"\(src.host)\",\"dst_ip\":\"\(dst.host)\",\"src_port\":\(src.port),\"dst_port\":\(dst.port)}"
        )
    }

    /// `connectivity:path_updated` (qlog QUIC events §3.5): the connection moved to a new path
    /// (RFC 9000 §9). `old` and `new` are the address that changed: the peer's after NAT
    /// rebinding or the client's migration, our own after we migrated.
    func logPathUpdated(from previous: QUICPath) {
        let (old, new) = previous.remote != path.remote ? (previous.remote, path.remote) : (previous.local, path.local)
        appendQLogEvent(
            name: "connectivity:path_updated",
            data: "{\"old\":{\"ip\":\"\(old.host)\",\"port\":\(old.port)},\"new\":{\"ip\":\"\(new.host)\",\"port\":\(new.port)}}"
        )
    }

    /// `security:key_updated` (qlog QUIC events §5.2). `direction` is whose secret it is from our
    /// side: receiving keys are the peer's, sending keys ours.
    func logKeyUpdated(level: String, receiving: Bool, generation: Int? = nil, trigger: String) {
        let owner = (role == .client) != receiving ? "client" : "server"
        let generationField = generation.map { ",\"generation\":\($0)" } ?? ""
        appendQLogEvent(
            name: "security:key_updated",
            data: "{\"key_type\":\"\(owner)_\(level)_secret\"\(generationField),\"trigger\":\"\(trigger)\"}"
        )
    }

    deinit {
        deleteConnectionState()
        qlog?.close()
        connectionRef.deallocate()
        liveConnections?.coreFreed()
    }

    /// Deletes ngtcp2's connection and then the TLS session it uses, and ends the qlog trace;
    /// nothing when they are gone already. ngtcp2 writes its last qlog record from inside
    /// ngtcp2_conn_del, so the writer is closed after it.
    private func deleteConnectionState() {
        guard let conn else { return }
        ngtcp2_conn_del(conn)
        self.conn = nil
        tlsSession = nil
        qlog?.close()
        liveConnections?.coreReleasedConnectionState()
    }

    private func makeSettings(now: UInt64, qlogID: QUICConnectionID) -> ngtcp2_settings {
        qlogReferenceTime = now
        latestTime = now
        startedAt = now
        var settings = ngtcp2_settings()
        cqs_ngtcp2_settings_default(&settings)
        settings.initial_ts = now
        settings.cc_algo = configuration.congestionControl.ngtcp2
        settings.max_tx_udp_payload_size = configuration.maxUDPPayloadSize
        settings.max_window = configuration.maxConnectionWindow
        settings.max_stream_window = configuration.maxStreamWindow
        settings.handshake_timeout = configuration.handshakeTimeoutMilliseconds * UInt64(NGTCP2_MILLISECONDS)
        // ngtcp2 0.12 reports lost packets only as qlog events, so the data-transfer report's
        // loss figures (`QUICLossLedger`) need the records even when no file is written.
        if tracksLosses {
            settings.qlog.odcid = qlogID.ngtcp2
            settings.qlog.write = Self.writeQLog
        }
        if configuration.ngtcp2DebugLogging {
            cqs_ngtcp2_settings_set_log_printf(&settings)
        }
        return settings
    }

    private func makeTransportParameters() -> ngtcp2_transport_params {
        var params = ngtcp2_transport_params()
        cqs_ngtcp2_transport_params_default(&params)
        params.initial_max_data = configuration.initialMaxData
        params.initial_max_stream_data_bidi_local = configuration.initialMaxStreamDataBidirectionalLocal
        params.initial_max_stream_data_bidi_remote = configuration.initialMaxStreamDataBidirectionalRemote
        params.initial_max_stream_data_uni = configuration.initialMaxStreamDataUnidirectional
        params.initial_max_streams_bidi = configuration.initialMaxStreamsBidirectional
        params.initial_max_streams_uni = configuration.initialMaxStreamsUnidirectional
        params.max_idle_timeout = configuration.idleTimeoutMilliseconds * UInt64(NGTCP2_MILLISECONDS)
        params.max_datagram_frame_size = configuration.maxDatagramFrameSize
        params.active_connection_id_limit = 4
        params.disable_active_migration = configuration.disablesActiveMigration ? 1 : 0
        return params
    }

    // MARK: Inputs

    /// Feeds one UDP datagram that arrived on `path` (RFC 9000 §12.2: it may hold several packets),
    /// with the ECN codepoint of its IP header (`NGTCP2_ECN_*`, RFC 9000 §13.4).
    package func receive(datagram: UnsafeRawBufferPointer, path: QUICPath, ecn: UInt32 = 0, now: UInt64) {
        latestTime = max(latestTime, now)
        switch state {
        case .closing:
            // Answer, a bounded number of times, with the same CONNECTION_CLOSE (RFC 9000 §10.2.1).
            if closePacketsSent < 16 { closePacketDue = true }
            return
        case .draining, .closed:
            return
        case .handshaking, .established:
            break
        }
        counters.receivedDatagrams += 1
        counters.receivedBytes += UInt64(datagram.count)
        var info = ngtcp2_pkt_info(ecn: ecn)
        let rv = path.withNGTCP2Path { ngPath in
            cqs_ngtcp2_conn_read_pkt(
                conn, ngPath, &info, datagram.baseAddress?.assumingMemoryBound(to: UInt8.self), datagram.count, now
            )
        }
        if rv != 0 {
            if rv == NGTCP2_ERR_CALLBACK_FAILURE, let failure = codecFailure {
                codecFailure = nil
                closeForCodec(failure, now: now)
                return
            }
            handleReadError(rv, now: now)
            return
        }
        notePeakCongestionWindow()
        if self.path.remote != path.remote, ngtcp2_conn_get_handshake_completed(conn) != 0 { adoptCurrentPath() }
    }

    /// Follows ngtcp2 onto the path it now sends on: the peer's new address (NAT rebinding,
    /// RFC 9000 §9.3) or our own new socket once its validation succeeded (§9.2).
    func adoptCurrentPath() {
        let previous = path
        path = QUICPath(ngtcp2_conn_get_path(conn)!.pointee)
        guard path != previous else { return }
        counters.pathChanges += 1
        // ngtcp2 may have started the new path's RTT estimate afresh (RFC 9000 §9.4): pacing
        // waits for its first sample again (`updatePacing`).
        hasRTTSample = false
        logPathUpdated(from: previous)
    }

    func didFinishPathValidation(_ validated: QUICPath, succeeded: Bool) {
        if succeeded { adoptCurrentPath() }
        events.append(.pathValidated(validated, succeeded: succeeded))
    }

    /// Starts moving the connection to a socket bound at `local` (client only, RFC 9000 §9.2):
    /// ngtcp2 validates the new path with PATH_CHALLENGE under a fresh connection ID and switches
    /// to it once PATH_RESPONSE arrives; `.pathValidated` reports the outcome. Throws before the
    /// handshake is confirmed, when the server disabled migration, or with no spare connection ID.
    package func migrate(to local: QUICSocketAddress, now: UInt64) throws {
        latestTime = max(latestTime, now)
        guard let conn else { throw QUICMigrationError.refused(NGTCP2_ERR_CLOSING) }
        let rv = QUICPath(local: local, remote: path.remote).withNGTCP2Path { newPath in
            ngtcp2_conn_initiate_migration(conn, newPath, now)
        }
        guard rv == 0 else { throw QUICMigrationError.refused(rv) }
    }

    /// The next time `handleTimeout(now:)` must run; `UInt64.max` for never.
    ///
    /// ngtcp2's expiry includes the time pacing lets the next packet go (RFC 9002 §7.7), which
    /// every write sets whether or not anything waits to be sent, and right after a write on a
    /// fast path it is due within a millisecond or already past. ngtcp2 sends a packet due within
    /// `pacingOverhead` at once anyway, so a deadline nearer than that to the last pass is put
    /// off to it: it then joins the pass of the next datagram to arrive instead of waking the
    /// loop on its own for nothing, as libev's millisecond timeouts make ngtcp2's example server
    /// do (under aioquic's requests, 8% of h3serve's wake-ups had been such). Any other timer is
    /// late by at most that millisecond.
    package var nextDeadline: UInt64 {
        switch state {
        case .closing(let until), .draining(let until): return until
        case .closed: return .max
        case .handshaking, .established: return max(ngtcp2_conn_get_expiry(conn), latestTime &+ Self.pacingOverhead)
        }
    }

    /// ngtcp2's `NGTCP2_PKT_PACING_OVERHEAD`: a packet whose pacing time is this close is sent
    /// now, as an event loop cannot time finer than that.
    static let pacingOverhead: UInt64 = 1_000_000

    /// Runs loss detection, idle and handshake timers (RFC 9002 §6).
    package func handleTimeout(now: UInt64) {
        latestTime = max(latestTime, now)
        switch state {
        case .closing(let until), .draining(let until):
            if now >= until { state = .closed }
            return
        case .closed:
            return
        case .handshaking, .established:
            break
        }
        guard ngtcp2_conn_get_expiry(conn) <= now else { return }
        let rv = ngtcp2_conn_handle_expiry(conn, now)
        switch rv {
        case 0:
            return
        case NGTCP2_ERR_IDLE_CLOSE:
            finish(.idleTimeout)
            state = .closed
        case NGTCP2_ERR_HANDSHAKE_TIMEOUT:
            finish(.handshakeTimeout)
            state = .closed
        default:
            closeWithTransportError(rv, reason: "", now: now)
        }
    }

    /// Closes because the application codec failed: with its code, or H3-agnostic INTERNAL_ERROR.
    func closeForCodec(_ failure: any Error, now: UInt64) {
        if let failure = failure as? QUICApplicationCodecError {
            close(applicationErrorCode: failure.code, reason: failure.reason, now: now)
        } else {
            closeWithTransportError(NGTCP2_ERR_INTERNAL, reason: "\(failure)", now: now)
        }
    }

    /// Closes with an application error code and reason (RFC 9000 §10.2, frame type 0x1d).
    package func close(applicationErrorCode: UInt64, reason: String, now: UInt64) {
        latestTime = max(latestTime, now)
        guard state == .handshaking || state == .established else { return }
        let reasonBytes = Array(reason.utf8.prefix(512))
        reasonBytes.withUnsafeBufferPointer {
            ngtcp2_connection_close_error_set_application_error(
                &lastError, applicationErrorCode, $0.baseAddress, $0.count
            )
        }
        enterClosing(reason: .localApplicationClose(code: applicationErrorCode, reason: reason), now: now)
    }

    /// Whether any event was recorded since the last `takeEvents()`.
    package var hasEvents: Bool { !events.isEmpty }

    /// Hands over the events recorded since the last call.
    package func takeEvents() -> [QUICConnectionEvent] {
        // Handing the array over and starting afresh allocates only when events come; keeping
        // the capacity of an array that is also returned would copy it on every call.
        guard !events.isEmpty else { return [] }
        defer { events = [] }
        return events
    }

    /// The qlog file this connection writes, if any.
    package var qlogPath: String? { qlog?.path }
    /// The `initial_ts` ngtcp2's qlog times are relative to.
    private var qlogReferenceTime: UInt64 = 0
    /// The latest time the caller gave the core, for events written outside ngtcp2.
    @exclusivity(unchecked) var latestTime: UInt64 = 0
    /// When the connection was created and when its handshake completed, on the caller's clock.
    private(set) var startedAt: UInt64 = 0
    private(set) var handshakeCompletedAt: UInt64?
    private(set) var handshakeRTT: Duration = .zero

    /// Appends one event of another layer (HTTP/3) to this connection's qlog trace, on the same
    /// relative clock as ngtcp2's events. `data` is a JSON object, built only while a trace is written.
    package func appendQLogEvent(name: String, data: @autoclosure () -> String) {
        guard let qlog else { return }
        // Whole milliseconds, truncated as ngtcp2 0.12 writes them, so the file stays in time order.
        let time = (latestTime &- qlogReferenceTime) / 1_000_000
        let record = "\u{1E}{\"time\":\(time),\"name\":\"\(name)\",\"data\":\(data())}\n"
        let bytes = Array(record.utf8)
        bytes.withUnsafeBytes { qlog.write($0, final: false) }
    }

    package var isQLogEnabled: Bool { qlog != nil }
    /// Starts a 1-RTT key update (RFC 9001 §6). ngtcp2 allows it once the handshake is
    /// confirmed and the previous update has been acknowledged; until then it fails.
    package func initiateKeyUpdate(now: UInt64) throws {
        guard let conn else { throw QUICKeyUpdateError(code: NGTCP2_ERR_CLOSING) }
        let rv = ngtcp2_conn_initiate_key_update(conn, now)
        guard rv == 0 else { throw QUICKeyUpdateError(code: rv) }
        localKeyUpdateRequested = true
    }

    /// Whether ngtcp2's recovery events reach the loss ledger (`QUICConfiguration.tracksLosses`).
    var tracksLosses: Bool { qlog != nil || configuration.tracksLosses }
    /// Pushes buffered qlog records to the file, so the trace can be read while the connection lives.
    package func flushQLog() { qlog?.flush() }
    package var isHandshakeCompleted: Bool {
        guard let conn else { return lastFigures.isHandshakeCompleted }
        return ngtcp2_conn_get_handshake_completed(conn) != 0
    }
    package var negotiatedALPN: String? { tlsSession.map(\.negotiatedALPN) ?? lastFigures.negotiatedALPN }
    package var cipherName: String? { tlsSession.map(\.cipherName) ?? lastFigures.cipherName }
    package var negotiatedVersion: UInt32 {
        guard let conn else { return lastFigures.negotiatedVersion }
        return ngtcp2_conn_get_negotiated_version(conn)
    }
    /// Whether both sides offered RFC 9221 datagrams (the peer's `max_datagram_frame_size` > 0).
    package var isDatagramNegotiated: Bool {
        guard let conn else { return lastFigures.isDatagramNegotiated }
        return configuration.maxDatagramFrameSize > 0
            && (ngtcp2_conn_get_remote_transport_params(conn)?.pointee.max_datagram_frame_size ?? 0) > 0
    }
    package var statistics: ngtcp2_conn_stat {
        guard let conn else { return lastFigures.statistics }
        var stat = ngtcp2_conn_stat()
        cqs_ngtcp2_conn_get_conn_stat(conn, &stat)
        return stat
    }

    // MARK: Output

    /// Writes every packet ngtcp2 has ready, in batches that suit UDP GSO.
    ///
    /// Packets go into `scratch` back to back, and none is moved or overwritten within one call,
    /// so a batch's bytes stay valid until the call returns (the socket sends each batch
    /// straight from there). `emit` receives each batch with its segment size (every packet but
    /// the last has exactly that size) and destination. Returns true when the send quantum ran
    /// out and more may be ready: call again after servicing other work.
    @discardableResult
    package func writePackets(
        now: UInt64,
        scratch: UnsafeMutableRawBufferPointer,
        emit: (UnsafeRawBufferPointer, _ segmentSize: Int, _ path: QUICPath, _ ecn: UInt32) -> Void
    ) -> Bool {
        latestTime = max(latestTime, now)
        if closePacketDue {
            closePacketDue = false
            closePacketsSent += 1
            closePacket.withUnsafeBytes { emit($0, $0.count, path, 0) }
            counters.sentDatagrams += 1
            counters.sentBytes += UInt64(closePacket.count)
            return false
        }
        guard state == .handshaking || state == .established else { return false }

        let maxPacket = min(ngtcp2_conn_get_max_tx_udp_payload_size(conn), scratch.count)
        let quantumPackets = max(1, ngtcp2_conn_get_send_quantum(conn) / max(maxPacket, 1))
        var batchStart = 0
        var batchEnd = 0
        var segmentSize = 0
        var hasBatchAddresses = false
        // ngtcp2 picks each packet's ECN codepoint (ECT(0) while validating and after, RFC 9000
        // §13.4.2); a GSO batch shares one, so a change ends the batch.
        var batchECN: UInt32 = 0
        var written = 0

        // ngtcp2 writes each packet's path into `packetPath`; `batchPath` keeps the batch's
        // addresses, to compare each packet's path with in place (`ngtcp2_path_eq`). It is set
        // from the first packet: ngtcp2_path_eq aborts on the empty path a zeroed storage holds,
        // hence `hasBatchAddresses`. Both live in temporary memory: as captured variables, each
        // `&` would be checked for exclusive access at run time.
        return withUnsafeTemporaryAllocation(of: ngtcp2_path_storage.self, capacity: 2) { paths -> Bool in
            let packetPath = paths.baseAddress!, batchPath = packetPath + 1
            ngtcp2_path_storage_zero(packetPath)
            ngtcp2_path_storage_zero(batchPath)

            func flushBatch() {
                if batchEnd > batchStart {
                    emit(UnsafeRawBufferPointer(rebasing: scratch[batchStart..<batchEnd]), segmentSize, QUICPath(batchPath.pointee.path), batchECN)
                }
                batchStart = batchEnd
                segmentSize = 0
            }

            return withUnsafeTemporaryAllocation(of: ngtcp2_vec.self, capacity: Self.vectorsPerWrite) { vectors -> Bool in
                while true {
                    let capacity = segmentSize == 0 ? maxPacket : segmentSize
                    // One GSO batch stays under 64 KiB, the most one UDP send can carry.
                    if batchEnd - batchStart + capacity > 65_000 { flushBatch() }
                    if batchEnd + maxPacket > scratch.count {
                        // The scratch is full (a send quantum fits in it, so this is rare): go on next pass.
                        flushBatch()
                        updatePacing(now: now)
                        return true
                    }
                    let destination = scratch.baseAddress!.advanced(by: batchEnd).assumingMemoryBound(to: UInt8.self)
                    let packetSize: Int
                    let packetECN: UInt32
                    switch writeOnePacket(into: destination, capacity: capacity, path: &packetPath.pointee.path, vectors: vectors, now: now) {
                    case .packet(let size, let ecn): (packetSize, packetECN) = (size, ecn)
                    case .nothing:
                        updatePacing(now: now)
                        flushBatch()
                        return false
                    case .failed(let rv):
                        flushBatch()
                        if let failure = codecFailure {
                            codecFailure = nil
                            closeForCodec(failure, now: now)
                        } else {
                            closeWithTransportError(rv, reason: "", now: now)
                        }
                        return writePackets(now: now, scratch: UnsafeMutableRawBufferPointer(rebasing: scratch[batchEnd...]), emit: emit)
                    }
                    // A packet for another path or with another ECN mark ends the batch before it.
                    let samePath = hasBatchAddresses && ngtcp2_path_eq(&packetPath.pointee.path, &batchPath.pointee.path) != 0
                    if !samePath || packetECN != batchECN { flushBatch() }
                    if batchEnd == batchStart {
                        if !samePath {
                            ngtcp2_path_copy(&batchPath.pointee.path, &packetPath.pointee.path)
                            hasBatchAddresses = true
                        }
                        batchECN = packetECN
                    }
                    if segmentSize == 0 { segmentSize = packetSize }
                    batchEnd += packetSize
                    written += 1
                    counters.sentDatagrams += 1
                    counters.sentBytes += UInt64(packetSize)
                    if packetSize < segmentSize { flushBatch() }
                    if written >= quantumPackets {
                        updatePacing(now: now)
                        flushBatch()
                        return true
                    }
                }
            }
        }
    }

    /// Vectors offered to each `ngtcp2_conn_writev_stream` call. One packet takes about 1,400
    /// bytes, so a frame header and a piece of one body chunk are what it uses; nghttp3 and
    /// ngtcp2 both walk every vector offered on each call, and with 16 a bulk response spent
    /// about 1% more per packet walking chunks the packet had no room for.
    private static let vectorsPerWrite = 4

    /// Sets when ngtcp2 may send the next packet, from what this pass sent (RFC 9002 §7.7), once
    /// there is an RTT sample to pace by.
    ///
    /// Before its first sample ngtcp2 0.12 paces at the initial RTT (333 ms): the client's first
    /// Initial alone would hold its next packet, the handshake's Finished, for about 26 ms after
    /// the server's reply is in (a loopback handshake took 25 ms, where it takes 3), and a move
    /// to a new path, which starts the RTT estimate afresh, would stall the same way. ngtcp2 1.x
    /// assumes 1 ms until its first sample; not pacing until then comes to the same. The bytes
    /// sent before count towards the first interval.
    private func updatePacing(now: UInt64) {
        if !hasRTTSample {
            guard statistics.first_rtt_sample_ts != .max else { return }
            hasRTTSample = true
        }
        ngtcp2_conn_update_pkt_tx_time(conn, now)
    }

    private enum PacketWriteResult {
        case packet(Int, ecn: UInt32)
        case nothing
        case failed(Int32)
    }

    /// Fills one packet: queued datagrams first, then stream data round-robin, then ngtcp2's own frames.
    private func writeOnePacket(
        into destination: UnsafeMutablePointer<UInt8>,
        capacity: Int,
        path: inout ngtcp2_path,
        vectors: UnsafeMutableBufferPointer<ngtcp2_vec>,
        now: UInt64
    ) -> PacketWriteResult {
        var info = ngtcp2_pkt_info()
        while true {
            if !pendingDatagrams.isEmpty && isHandshakeCompleted {
                var accepted: Int32 = 0
                let datagram = pendingDatagrams.first!
                let rv = datagram.withUnsafeBufferPointer { bytes -> Int in
                    var vec = ngtcp2_vec(base: UnsafeMutablePointer(mutating: bytes.baseAddress), len: bytes.count)
                    return cqs_ngtcp2_conn_writev_datagram(
                        conn, &path, &info, destination, capacity, &accepted,
                        UInt32(NGTCP2_WRITE_DATAGRAM_FLAG_MORE), 0, &vec, 1, now
                    )
                }
                if accepted != 0 || rv == Int(NGTCP2_ERR_INVALID_ARGUMENT) { pendingDatagrams.removeFirst() }
                if rv == Int(NGTCP2_ERR_WRITE_MORE) { continue }
                if rv > 0 { return .packet(rv, ecn: info.ecn) }
                if rv == 0 { return .nothing }
                if rv != Int(NGTCP2_ERR_INVALID_ARGUMENT) { return .failed(Int32(rv)) }
                continue
            }

            var streamID: Int64 = -1
            var vectorCount = 0
            var fin = false
            let hasCodec = hasApplicationCodec
            if hasCodec {
                if ngtcp2_conn_get_max_data_left(conn) > 0, runCodecCallback({ codec in
                    if let next = try codec.nextStreamData(into: vectors) { (streamID, vectorCount, fin) = next }
                }) != 0 {
                    return .failed(NGTCP2_ERR_CALLBACK_FAILURE)
                }
            } else if let next = nextWritableStream() {
                streamID = next
                (vectorCount, fin) = withStream(next) { $0.send.gather(into: vectors) } ?? (0, false)
            }
            var flags = UInt32(NGTCP2_WRITE_STREAM_FLAG_MORE)
            if fin { flags |= UInt32(NGTCP2_WRITE_STREAM_FLAG_FIN) }
            var accepted: ngtcp2_ssize = -1
            let rv = cqs_ngtcp2_conn_writev_stream(
                conn, &path, &info, destination, capacity, &accepted, flags, streamID,
                vectors.baseAddress, vectorCount, now
            )
            if streamID >= 0 && accepted >= 0 {
                if hasCodec {
                    if runCodecCallback({ try $0.didWrite(streamID: streamID, bytes: accepted) }) != 0 { return .failed(NGTCP2_ERR_CALLBACK_FAILURE) }
                } else {
                    let total = (0..<vectorCount).reduce(0) { $0 + vectors[$1].len }
                    didWrite(streamID: streamID, bytes: accepted, fin: fin && accepted == total)
                }
            }
            switch Int32(truncatingIfNeeded: rv) {
            case _ where rv > 0:
                return .packet(rv, ecn: info.ecn)
            case 0:
                return .nothing
            case NGTCP2_ERR_WRITE_MORE:
                continue
            case NGTCP2_ERR_STREAM_DATA_BLOCKED:
                if hasCodec {
                    if runCodecCallback({ try $0.setBlocked(streamID: streamID, true) }) != 0 { return .failed(NGTCP2_ERR_CALLBACK_FAILURE) }
                } else {
                    withStream(streamID) { $0.isFlowControlBlocked = true }
                    dequeueForWrite(streamID)
                }
                continue
            case NGTCP2_ERR_STREAM_SHUT_WR, NGTCP2_ERR_STREAM_NOT_FOUND:
                if hasCodec {
                    if runCodecCallback({ try $0.writeShutDown(streamID: streamID) }) != 0 { return .failed(NGTCP2_ERR_CALLBACK_FAILURE) }
                } else {
                    abandonSend(streamID: streamID)
                }
                continue
            default:
                return .failed(Int32(truncatingIfNeeded: rv))
            }
        }
    }

    // MARK: Closing

    private func handleReadError(_ rv: Int32, now: UInt64) {
        switch rv {
        case NGTCP2_ERR_DRAINING:
            state = .draining(until: now + 3 * ngtcp2_conn_get_pto(conn))
            finish(peerCloseReason())
        case NGTCP2_ERR_DROP_CONN, NGTCP2_ERR_RETRY:
            state = .closed
            finish(.localTransportError(code: 0x1, reason: "dropped: \(String(cString: ngtcp2_strerror(rv)))"))
        case NGTCP2_ERR_RECV_VERSION_NEGOTIATION, NGTCP2_ERR_VERSION_NEGOTIATION_FAILURE:
            state = .closed
            finish(.versionNegotiationFailed)
        case NGTCP2_ERR_CRYPTO:
            let alert = ngtcp2_conn_get_tls_alert(conn)
            ngtcp2_connection_close_error_set_transport_error_tls_alert(&lastError, alert, nil, 0)
            let detail = gnutls_alert_get_name(gnutls_alert_description_t(UInt32(alert))).map { String(cString: $0) }
                ?? "TLS error"
            enterClosing(reason: .handshakeFailed(alert: alert, detail: detail, verification: verificationFailure), now: now)
        default:
            closeWithTransportError(rv, reason: "", now: now)
        }
    }

    /// Closes with CONNECTION_REFUSED (RFC 9000 §20.1): the server will not serve this
    /// connection after all, for example past a per-address limit.
    package func refuse(reason: String, now: UInt64) {
        guard state == .handshaking || state == .established else { return }
        let reasonBytes = Array(reason.utf8.prefix(512))
        reasonBytes.withUnsafeBufferPointer {
            ngtcp2_connection_close_error_set_transport_error(&lastError, UInt64(NGTCP2_CONNECTION_REFUSED), $0.baseAddress, $0.count)
        }
        enterClosing(reason: .localTransportError(code: UInt64(NGTCP2_CONNECTION_REFUSED), reason: reason), now: now)
    }

    func closeWithTransportError(_ rv: Int32, reason: String, now: UInt64) {
        guard state == .handshaking || state == .established else { return }
        ngtcp2_connection_close_error_set_transport_error_liberr(&lastError, rv, nil, 0)
        let detail = reason.isEmpty ? String(cString: ngtcp2_strerror(rv)) : reason
        enterClosing(reason: .localTransportError(code: lastError.error_code, reason: detail), now: now)
    }

    private func enterClosing(reason: QUICCloseReason, now: UInt64) {
        latestTime = max(latestTime, now)
        guard ngtcp2_conn_is_in_closing_period(conn) == 0, ngtcp2_conn_is_in_draining_period(conn) == 0 else {
            state = .closed
            finish(reason)
            return
        }
        var buffer = [UInt8](repeating: 0, count: 1500)
        var pathStorage = ngtcp2_path_storage()
        ngtcp2_path_storage_zero(&pathStorage)
        var info = ngtcp2_pkt_info()
        let n = cqs_ngtcp2_conn_write_connection_close(conn, &pathStorage.path, &info, &buffer, buffer.count, &lastError, now)
        if n > 0 {
            closePacket = Array(buffer.prefix(n))
            closePacketDue = true
            state = .closing(until: now + 3 * ngtcp2_conn_get_pto(conn))
        } else {
            state = .closed
        }
        finish(reason)
    }

    func markEstablished() {
        state = .established
        handshakeCompletedAt = latestTime
        handshakeRTT = .nanoseconds(Int64(statistics.smoothed_rtt))
    }

    /// `transport:alpn_information` once TLS has settled on a protocol.
    func logALPN() {
        let offered = configuration.alpn.map { "{\"string_value\":\"\($0)\"}" }.joined(separator: ",")
        let chosen = negotiatedALPN.map { ",\"chosen_alpn\":{\"string_value\":\"\($0)\"}" } ?? ""
        let side = role == .client ? "client_alpns" : "server_alpns"
        appendQLogEvent(name: "transport:alpn_information", data: "{\"\(side)\":[\(offered)]\(chosen)}")
    }

    /// Whether the connection is over: closing, draining or closed (RFC 9000 §10.2).
    package var isOver: Bool {
        switch state {
        case .handshaking, .established: false
        case .closing, .draining, .closed: true
        }
    }

    /// Frees what serving the connection took once it is over: ngtcp2's connection, the TLS
    /// session and the application codec, most of a connection's memory (about 200 KiB of
    /// ngtcp2's, nghttp3's and GnuTLS's state). What remains answers late packets for the
    /// closing or draining period, 3 PTO (RFC 9000 §10.2), from the CONNECTION_CLOSE kept as
    /// bytes, as quic-go's closed-connection stand-ins do; a server under churn otherwise holds
    /// every connection of the last few seconds. Figures read later (statistics, ALPN, QUIC
    /// metadata) come from a copy taken here, and streams keep what they received. The owner
    /// calls this after handing out the `.closed` event; calling it again does nothing.
    package func releaseConnectionState() {
        guard isOver, conn != nil else { return }
        lastFigures = QUICConnectionLastFigures(
            isHandshakeCompleted: isHandshakeCompleted,
            negotiatedVersion: negotiatedVersion,
            negotiatedALPN: negotiatedALPN,
            cipherName: cipherName,
            isDatagramNegotiated: isDatagramNegotiated,
            statistics: statistics,
            tunnelFigures: tunnelFigures
        )
        applicationCodec = nil
        makeApplicationCodec = nil
        deleteConnectionState()
    }

    private func finish(_ reason: QUICCloseReason) {
        guard closeReason == nil else { return }
        closeReason = reason
        logConnectionClosed(reason)
        logger.debug("connection closed", metadata: ["reason": "\(reason)"])
        events.append(.closed(reason))
    }

    /// `connectivity:connection_closed` (qlog QUIC events §3.4): owner, codes, reason and trigger.
    private func logConnectionClosed(_ reason: QUICCloseReason) {
        var fields: [String] = []
        switch reason {
        case .localApplicationClose(let code, let text):
            fields = ["\"owner\":\"local\"", "\"application_code\":\(code)", "\"reason\":\(Self.json(text))", "\"trigger\":\"clean\""]
        case .peerApplicationClose(let code, let text):
            fields = ["\"owner\":\"remote\"", "\"application_code\":\(code)", "\"reason\":\(Self.json(text))", "\"trigger\":\"clean\""]
        case .peerTransportClose(let code, let text):
            fields = ["\"owner\":\"remote\"", "\"connection_code\":\(code)", "\"reason\":\(Self.json(text))", "\"trigger\":\"error\""]
        case .localTransportError(let code, let text):
            fields = ["\"owner\":\"local\"", "\"connection_code\":\(code)", "\"reason\":\(Self.json(text))", "\"trigger\":\"error\""]
        case .handshakeFailed(let alert, let text, _):
            fields = ["\"owner\":\"local\"", "\"connection_code\":\(0x100 + UInt64(alert))", "\"reason\":\(Self.json(text))", "\"trigger\":\"error\""]
        case .idleTimeout, .handshakeTimeout:
            fields = ["\"owner\":\"local\"", "\"trigger\":\"idle_timeout\""]
        case .statelessReset:
            fields = ["\"owner\":\"remote\"", "\"trigger\":\"stateless_reset\""]
        case .versionNegotiationFailed:
            fields = ["\"owner\":\"local\"", "\"trigger\":\"version_mismatch\""]
        }
        appendQLogEvent(name: "connectivity:connection_closed", data: "{" + fields.joined(separator: ",") + "}")
        // Readable now, although ngtcp2 adds its last record only when the connection is freed.
        qlog?.flush()
    }

    /// A JSON string literal with the escapes RFC 8259 §7 requires, for qlog records.
    package static func json(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20: out += "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count) + String(scalar.value, radix: 16)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    private func peerCloseReason() -> QUICCloseReason {
        var error = ngtcp2_connection_close_error()
        ngtcp2_conn_get_connection_close_error(conn, &error)
        let reason = error.reason.map {
            String(decoding: UnsafeBufferPointer(start: $0, count: error.reasonlen), as: UTF8.self)
        } ?? ""
        switch error.type {
        case NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION:
            return .peerApplicationClose(code: error.error_code, reason: reason)
        case NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_TRANSPORT_IDLE_CLOSE:
            return .idleTimeout
        default:
            // ngtcp2 reports a stateless reset as draining with no close error; its callback says which.
            if receivedStatelessReset { return .statelessReset }
            return .peerTransportClose(code: error.error_code, reason: reason)
        }
    }
}

/// Failures of the C libraries below the core, with the function that failed.
package enum QUICCoreError: Error, CustomStringConvertible {
    case ngtcp2(String, Int32)

    package var description: String {
        switch self {
        case .ngtcp2(let function, let rv): return "\(function) failed: \(String(cString: ngtcp2_strerror(rv)))"
        }
    }
}

extension QUICPath {
    /// Runs `body` with an `ngtcp2_path` that points at this value's addresses.
    func withNGTCP2Path<R>(_ body: (UnsafePointer<ngtcp2_path>) throws -> R) rethrows -> R {
        var local = self.local.storage
        var remote = self.remote.storage
        return try withUnsafeMutableBytes(of: &local) { localBytes in
            try withUnsafeMutableBytes(of: &remote) { remoteBytes in
                var path = ngtcp2_path(
                    local: ngtcp2_addr(
                        addr: localBytes.baseAddress!.assumingMemoryBound(to: sockaddr.self),
                        addrlen: self.local.length
                    ),
                    remote: ngtcp2_addr(
                        addr: remoteBytes.baseAddress!.assumingMemoryBound(to: sockaddr.self),
                        addrlen: self.remote.length
                    ),
                    user_data: nil
                )
                return try body(&path)
            }
        }
    }
}

/// Why a connection could not migrate (RFC 9000 §9).
public enum QUICMigrationError: Error, Sendable, CustomStringConvertible {
    /// ngtcp2 would not start: the handshake is not confirmed, the server disabled active
    /// migration, or it issued no spare connection ID (its error code).
    case refused(Int32)
    /// The server did not answer PATH_CHALLENGE on the new path (RFC 9000 §8.2.4).
    case pathValidationFailed

    public var description: String {
        switch self {
        case .pathValidationFailed: return "migration failed: the new path did not validate (no PATH_RESPONSE)"
        case .refused(NGTCP2_ERR_CONN_ID_BLOCKED): return "cannot migrate: the server has issued no spare connection ID"
        case .refused(NGTCP2_ERR_INVALID_STATE): return "cannot migrate: the handshake is not confirmed or the server disabled active migration"
        case .refused(let code): return "cannot migrate: \(String(cString: ngtcp2_strerror(code)))"
        }
    }
}

/// A key update could not start now (RFC 9001 §6: not before the handshake is confirmed, and not
/// while the previous update is unacknowledged), or did not complete. `description` gives the
/// reason, ngtcp2's or ours.
public struct QUICKeyUpdateError: Error, Sendable, CustomStringConvertible {
    let code: Int32
    /// Why, when it is not ngtcp2's word for `code`.
    let reason: String?

    init(code: Int32, reason: String? = nil) {
        self.code = code
        self.reason = reason
    }

    /// The connection ended while its key update was under way.
    package static let connectionEnded = QUICKeyUpdateError(code: NGTCP2_ERR_CLOSING)

    /// The update did not complete, for `reason`.
    package static func didNotComplete(_ reason: String) -> QUICKeyUpdateError {
        QUICKeyUpdateError(code: NGTCP2_ERR_INVALID_STATE, reason: reason)
    }

    public var description: String {
        if let reason { return "the key update did not complete: \(reason)" }
        if code == NGTCP2_ERR_CLOSING { return "the key update did not complete: the connection closed first" }
        return "cannot update keys now: \(String(cString: ngtcp2_strerror(code)))"
    }
}
