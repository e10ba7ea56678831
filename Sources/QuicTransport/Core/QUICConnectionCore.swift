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
///
/// Each concern with state of its own is a part stored inline, as quinn-proto splits its
/// connection: `rawStreams`, `closing`, `packetWriter` (with a `QUICPacketBatch` per pass),
/// `transfer`, `handshake` and `qlog`. What stays here is what every part and callback shares:
/// the C handles and what made them, the state each call reads first (`state`, `path`,
/// `latestTime`, `events`), and the codec seam, whose holder is lent from this object
/// without a reference count on every callback.
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
    /// Why the connection ended, once it has.
    package var closeReason: QUICCloseReason? { closing.reason }
    @exclusivity(unchecked) package private(set) var path: QUICPath

    // The ngtcp2 connection; freed by `releaseConnectionState()` once the connection is over, or
    // first in deinit, while `qlog` is still alive. Nil after the release: every read that may
    // come later answers from `lastFigures` instead.
    var conn: OpaquePointer!
    private(set) var tlsSession: QUICTLSSession!
    /// What the accessors report once the C state is released: the figures at that moment.
    private(set) var lastFigures = QUICConnectionLastFigures()
    private let connectionRef: UnsafeMutablePointer<ngtcp2_crypto_conn_ref>
    /// This connection's qlog trace: where ngtcp2's records go, and the events added beside them.
    let qlog: QLogTrace
    let logger: Logger
    let configuration: QUICConfiguration
    let clientTLS: QUICClientTLS?
    let idFactory: QUICConnectionIDFactory

    /// Raw streams and datagrams, when no application codec runs the streams.
    @exclusivity(unchecked) var rawStreams = QUICRawStreams()
    @exclusivity(unchecked) var events: [QUICConnectionEvent] = []
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
    /// What a codec threw inside a callback; closes the connection after the ngtcp2 call returns.
    @exclusivity(unchecked) var codecFailure: (any Error)?
    /// The close error, and the CONNECTION_CLOSE that answers late packets (RFC 9000 §10.2).
    @exclusivity(unchecked) var closing = QUICClosingState()
    /// Pacing between write passes (RFC 9002 §7.7).
    @exclusivity(unchecked) var packetWriter = QUICPacketWriter()
    /// Traffic and loss totals, and open data-transfer reports.
    @exclusivity(unchecked) var transfer = QUICTransferAccounting()
    /// The traffic and loss totals so far.
    var counters: QUICTransferCounters { transfer.counters }
    /// Resumption, 0-RTT, certificate check and key updates, and the handshake's times.
    var handshake: QUICHandshakeProgress
    /// Whether the handshake resumed a session from a ticket (RFC 8446 §2.2).
    package var wasResumed: Bool { handshake.wasResumed }
    /// Clients: 0-RTT was attempted, and whether the server took it (RFC 9001 §4.6).
    package var earlyDataAttempted: Bool { handshake.earlyDataAttempted }
    package var earlyDataAccepted: Bool { handshake.earlyDataAccepted }
    /// Whether the application codec has been told it may open its streams.
    var codecStarted = false
    /// Whether streams may be opened and written now: after the handshake, or during a 0-RTT attempt.
    package var canOpenStreams: Bool {
        guard let conn else { return false }
        return isHandshakeCompleted || (earlyDataAttempted && ngtcp2_conn_get_early_data_rejected(conn) == 0)
    }
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

    /// The opening both sides share: the fields, the qlog trace, and the `conn_ref` through which
    /// GnuTLS's and ngtcp2's crypto callbacks find this core. ngtcp2's connection and the TLS
    /// session come next, in the client's or the server's initializer, and `attach(_:)` ends it.
    private init(
        role: Role,
        configuration: QUICConfiguration,
        clientTLS: QUICClientTLS?,
        idFactory: QUICConnectionIDFactory,
        originalDestinationConnectionID: QUICConnectionID,
        path: QUICPath,
        now: UInt64,
        logger: Logger
    ) {
        self.role = role
        self.configuration = configuration
        self.clientTLS = clientTLS
        self.path = path
        self.logger = logger
        self.idFactory = idFactory
        self.originalDestinationConnectionID = originalDestinationConnectionID
        self.connectionRef = .allocate(capacity: 1)
        self.qlog = QLogTrace(
            writer: configuration.qlogDirectory.map {
                QLogWriter(
                    directory: $0,
                    originalDestinationConnectionID: originalDestinationConnectionID,
                    vantagePoint: role == .client ? .client : .server,
                    logger: logger
                )
            },
            referenceTime: now
        )
        self.handshake = QUICHandshakeProgress(startedAt: now)
        latestTime = now
        connectionRef.initialize(to: ngtcp2_crypto_conn_ref(get_conn: Self.getConnection, user_data: nil))
        connectionRef.pointee.user_data = Unmanaged.passUnretained(self).toOpaque()
    }

    /// A client connection to `path.remote`.
    package convenience init(
        clientWith configuration: QUICConfiguration,
        tls: QUICClientTLS,
        path: QUICPath,
        now: UInt64,
        logger: Logger
    ) throws {
        let idFactory = QUICConnectionIDFactory()
        let dcid = QUICConnectionID.random(length: idFactory.idLength)
        self.init(
            role: .client, configuration: configuration, clientTLS: tls, idFactory: idFactory,
            originalDestinationConnectionID: dcid, path: path, now: now, logger: logger
        )

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
        let session = try QUICTLSSession(
            clientWith: tls.credentials,
            alpn: configuration.alpn,
            serverName: tls.serverName,
            priority: try TLSPriority(configuration.gnutlsPriority),
            resumptionTicket: saved?.ticket,
            preSharedKey: configuration.preSharedKeys.first,
            connectionRef: connectionRef
        )
        // 0-RTT (RFC 9001 §4.6.1): streams may open and carry data at once, within the limits the
        // server gave last time (RFC 9000 §7.4.1). No codec: HTTP/3 waits for the handshake.
        if configuration.attemptsEarlyData, let parameters = saved?.transportParameters {
            var early = parameters.ngtcp2
            cqs_ngtcp2_conn_set_early_remote_transport_params(conn, &early)
            handshake.earlyDataAttempted = true
        }
        // Both run inside the handshake; they find this core through the session's conn_ref.
        session.setVerifyFunction(Self.verifyCertificate)
        if tls.ticketStore != nil { session.setTicketHook(Self.receivedSessionTicket) }
        attach(session)
    }

    /// A server connection for a client Initial that `ngtcp2_accept` approved.
    ///
    /// - Parameters:
    ///   - originalDestinationConnectionID: the client's first DCID (from the Retry token if one was used).
    ///   - retrySourceConnectionID: the SCID of our Retry packet, when address validation used Retry.
    package convenience init(
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
        self.init(
            role: .server, configuration: configuration, clientTLS: nil, idFactory: idFactory,
            originalDestinationConnectionID: originalDestinationConnectionID, path: path, now: now, logger: logger
        )

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
        let session = try QUICTLSSession(
            serverWith: credentials,
            alpn: configuration.alpn,
            priority: try tlsPriority ?? TLSPriority(configuration.gnutlsPriority),
            ticketKey: ticketKey,
            antiReplay: antiReplay,
            preSharedKeyLookup: configuration.preSharedKeys.isEmpty ? nil : Self.lookUpPreSharedKey,
            connectionRef: connectionRef
        )
        handshake.ticketKey = ticketKey
        handshake.antiReplay = antiReplay
        attach(session)
        events.append(.connectionIDIssued(scid))
        if let preferredID { events.append(.connectionIDIssued(preferredID)) }
    }

    /// The end both sides share: hands ngtcp2 the TLS session and starts the qlog trace.
    private func attach(_ session: QUICTLSSession) {
        tlsSession = session
        ngtcp2_conn_set_tls_native_handle(conn, UnsafeMutableRawPointer(session.raw))
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

    /// `connectivity:connection_started`, with the addresses ngtcp2 0.12 leaves out.
    private func logConnectionStarted() {
        qlog.connectionStarted(path: path, isClient: role == .client, at: latestTime)
    }

    /// `connectivity:path_updated`: the connection moved from `previous` to `path` (RFC 9000 §9).
    func logPathUpdated(from previous: QUICPath) {
        qlog.pathUpdated(from: previous, to: path, at: latestTime)
    }

    /// `security:key_updated`: receiving keys are the peer's, sending keys ours.
    func logKeyUpdated(level: String, receiving: Bool, generation: Int? = nil, trigger: String) {
        let owner = (role == .client) != receiving ? "client" : "server"
        qlog.keyUpdated(owner: owner, level: level, generation: generation, trigger: trigger, at: latestTime)
    }

    deinit {
        deleteConnectionState()
        qlog.close()
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
        qlog.close()
        liveConnections?.coreReleasedConnectionState()
    }

    private func makeSettings(now: UInt64, qlogID: QUICConnectionID) -> ngtcp2_settings {
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
            closing.answerLatePacket()
            return
        case .draining, .closed:
            return
        case .handshaking, .established:
            break
        }
        transfer.counters.receivedDatagrams += 1
        transfer.counters.receivedBytes += UInt64(datagram.count)
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
        transfer.counters.pathChanges += 1
        packetWriter.pathChanged()
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
        guard let conn else { throw QUICMigrationError(ngtcp2: NGTCP2_ERR_CLOSING) }
        let rv = QUICPath(local: local, remote: path.remote).withNGTCP2Path { newPath in
            ngtcp2_conn_initiate_migration(conn, newPath, now)
        }
        guard rv == 0 else { throw QUICMigrationError(ngtcp2: rv) }
    }

    /// The next time `handleTimeout(now:)` must run; `UInt64.max` for never.
    ///
    /// ngtcp2's expiry includes the time pacing lets the next packet go (RFC 9002 §7.7), which
    /// every write sets whether or not anything waits to be sent, and right after a write on a
    /// fast path it is due within a millisecond or already past. ngtcp2 sends a packet due within
    /// `pacingOverhead` at once anyway, so a deadline nearer than that to the last pass is put
    /// off to it: it then joins the pass of the next datagram to arrive instead of waking the
    /// loop on its own for nothing, as libev's millisecond timeouts make ngtcp2's example server
    /// do (under aioquic's requests, many of h3serve's wake-ups had been such). Any other timer is
    /// late by at most that millisecond.
    package var nextDeadline: UInt64 {
        switch state {
        case .closing(let until), .draining(let until): return until
        case .closed: return .max
        case .handshaking, .established: return max(ngtcp2_conn_get_expiry(conn), latestTime &+ QUICPacketWriter.pacingOverhead)
        }
    }

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
                &closing.error, applicationErrorCode, $0.baseAddress, $0.count
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
    package var qlogPath: String? { qlog.path }
    /// The latest time the caller gave the core, for events written outside ngtcp2.
    @exclusivity(unchecked) var latestTime: UInt64 = 0

    /// Appends one event of another layer (HTTP/3) to this connection's qlog trace, on the same
    /// relative clock as ngtcp2's events. `data` is a JSON object, built only while a trace is written.
    package func appendQLogEvent(name: String, data: @autoclosure () -> String) {
        qlog.append(name: name, data: data(), at: latestTime)
    }

    package var isQLogEnabled: Bool { qlog.isEnabled }
    /// Starts a 1-RTT key update (RFC 9001 §6). ngtcp2 allows it once the handshake is
    /// confirmed and the previous update has been acknowledged; until then it fails.
    package func initiateKeyUpdate(now: UInt64) throws {
        guard let conn else { throw QUICKeyUpdateError(code: NGTCP2_ERR_CLOSING) }
        let rv = ngtcp2_conn_initiate_key_update(conn, now)
        guard rv == 0 else { throw QUICKeyUpdateError(code: rv) }
        handshake.localKeyUpdateRequested = true
    }

    /// Whether ngtcp2's recovery events reach the loss ledger (`QUICConfiguration.tracksLosses`).
    var tracksLosses: Bool { qlog.isEnabled || configuration.tracksLosses }
    /// Pushes buffered qlog records to the file, so the trace can be read while the connection lives.
    package func flushQLog() { qlog.flush() }
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
            ngtcp2_connection_close_error_set_transport_error_tls_alert(&closing.error, alert, nil, 0)
            let detail = gnutls_alert_get_name(gnutls_alert_description_t(UInt32(alert))).map { String(cString: $0) }
                ?? "TLS error"
            enterClosing(reason: .handshakeFailed(alert: alert, detail: detail, verification: handshake.verificationFailure), now: now)
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
            ngtcp2_connection_close_error_set_transport_error(&closing.error, UInt64(NGTCP2_CONNECTION_REFUSED), $0.baseAddress, $0.count)
        }
        enterClosing(reason: .localTransportError(code: UInt64(NGTCP2_CONNECTION_REFUSED), reason: reason), now: now)
    }

    func closeWithTransportError(_ rv: Int32, reason: String, now: UInt64) {
        guard state == .handshaking || state == .established else { return }
        ngtcp2_connection_close_error_set_transport_error_liberr(&closing.error, rv, nil, 0)
        let detail = reason.isEmpty ? String(cString: ngtcp2_strerror(rv)) : reason
        enterClosing(reason: .localTransportError(code: closing.error.error_code, reason: detail), now: now)
    }

    private func enterClosing(reason: QUICCloseReason, now: UInt64) {
        latestTime = max(latestTime, now)
        guard ngtcp2_conn_is_in_closing_period(conn) == 0, ngtcp2_conn_is_in_draining_period(conn) == 0 else {
            state = .closed
            finish(reason)
            return
        }
        if closing.writePacket(conn: conn, now: now) {
            state = .closing(until: now + 3 * ngtcp2_conn_get_pto(conn))
        } else {
            state = .closed
        }
        finish(reason)
    }

    func markEstablished() {
        state = .established
        handshake.completedAt = latestTime
        handshake.rtt = .nanoseconds(Int64(statistics.smoothed_rtt))
    }

    /// `transport:alpn_information` once TLS has settled on a protocol.
    func logALPN() {
        guard qlog.isEnabled else { return }
        qlog.alpnInformation(offered: configuration.alpn, chosen: negotiatedALPN, isClient: role == .client, at: latestTime)
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
        guard closing.reason == nil else { return }
        closing.reason = reason
        qlog.connectionClosed(reason, at: latestTime)
        logger.debug("connection closed", metadata: ["reason": "\(reason)"])
        events.append(.closed(reason))
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
            if closing.receivedStatelessReset { return .statelessReset }
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
