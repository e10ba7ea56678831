import CQuicShims

/// The single owner of one connection's `gnutls_session_t`, configured for QUIC (RFC 9001).
///
/// Call order: create it, hand `raw` to `ngtcp2_conn_set_tls_native_handle`, and let it outlive
/// the `ngtcp2_conn` (the connection core frees the conn first, then this).
final class QUICTLSSession {
    let raw: gnutls_session_t
    /// The external pre-shared key credentials beside the certificate ones, when there are keys.
    private var preSharedKeyCredentials: PreSharedKeyCredentials?

    /// A client session: SNI (when a name is given), ALPN offer, the chosen ciphers, and a
    /// ticket to resume with (RFC 8446 §2.2), if there is one.
    init(
        clientWith credentials: TLSCredentials,
        alpn: [String],
        serverName: String?,
        priority: TLSPriority,
        resumptionTicket: [UInt8]? = nil,
        preSharedKey: TLSPreSharedKey? = nil,
        connectionRef: UnsafeMutablePointer<ngtcp2_crypto_conn_ref>
    ) throws {
        var session: gnutls_session_t?
        try checkGnuTLS(
            gnutls_init(&session, UInt32(GNUTLS_CLIENT.rawValue) | UInt32(GNUTLS_ENABLE_EARLY_DATA.rawValue)
                | UInt32(GNUTLS_NO_END_OF_EARLY_DATA.rawValue)),
            "gnutls_init"
        )
        self.raw = session!
        try configureCommon(credentials: credentials, alpn: alpn, priority: priority, connectionRef: connectionRef)
        if let preSharedKey { try attach(PreSharedKeyCredentials(client: preSharedKey)) }
        guard ngtcp2_crypto_gnutls_configure_client_session(raw) == 0 else {
            throw TLSError.gnutlsFailure(function: "ngtcp2_crypto_gnutls_configure_client_session", code: -1)
        }
        if let serverName {
            try checkGnuTLS(gnutls_server_name_set(raw, GNUTLS_NAME_DNS, serverName, serverName.utf8.count), "gnutls_server_name_set")
        }
        try setALPN(alpn, flags: UInt32(GNUTLS_ALPN_MANDATORY.rawValue))
        if let resumptionTicket {
            // Only session data GnuTLS made reaches here (QUICSessionTicketStore checks what it
            // reads from a file). One it cannot use (expired, say) just means a full handshake.
            _ = resumptionTicket.withUnsafeBytes { gnutls_session_set_data(raw, $0.baseAddress, $0.count) }
        }
    }

    /// A server session: the ALPN protocols it accepts, server preference first.
    init(
        serverWith credentials: TLSCredentials,
        alpn: [String],
        priority: TLSPriority,
        ticketKey: TLSSessionTicketKey?,
        antiReplay: TLSAntiReplay? = nil,
        preSharedKeyLookup: PreSharedKeyCredentials.Lookup? = nil,
        connectionRef: UnsafeMutablePointer<ngtcp2_crypto_conn_ref>
    ) throws {
        var session: gnutls_session_t?
        // Early data only when the application accepts it: with GNUTLS_ENABLE_EARLY_DATA, GnuTLS
        // puts max_early_data_size in every ticket, and QUIC allows only 0xffffffff there
        // (RFC 9001 §4.6.1; aioquic closes the connection over the default 16384).
        var flags = UInt32(GNUTLS_SERVER.rawValue) | UInt32(GNUTLS_NO_AUTO_SEND_TICKET.rawValue)
            | UInt32(GNUTLS_NO_END_OF_EARLY_DATA.rawValue)
        if antiReplay != nil { flags |= UInt32(GNUTLS_ENABLE_EARLY_DATA.rawValue) }
        try checkGnuTLS(gnutls_init(&session, flags), "gnutls_init")
        self.raw = session!
        try configureCommon(credentials: credentials, alpn: alpn, priority: priority, connectionRef: connectionRef)
        if let preSharedKeyLookup { try attach(PreSharedKeyCredentials(serverLookup: preSharedKeyLookup)) }
        guard ngtcp2_crypto_gnutls_configure_server_session(raw) == 0 else {
            throw TLSError.gnutlsFailure(function: "ngtcp2_crypto_gnutls_configure_server_session", code: -1)
        }
        try setALPN(alpn, flags: UInt32(GNUTLS_ALPN_MANDATORY.rawValue) | UInt32(GNUTLS_ALPN_SERVER_PRECEDENCE.rawValue))
        if let ticketKey {
            var key = ticketKey.datum
            try checkGnuTLS(gnutls_session_ticket_enable_server(raw, &key), "gnutls_session_ticket_enable_server")
        }
        if let antiReplay {
            // Early data only with replay protection (RFC 8446 §8); QUIC has no size limit of its own.
            gnutls_anti_replay_enable(raw, antiReplay.raw)
            gnutls_record_set_max_early_data_size(raw, 0xffff_ffff)
        }
    }

    /// Servers: sends one NewSessionTicket (RFC 8446 §4.6.1) once the handshake is complete.
    func sendSessionTicket() {
        _ = gnutls_session_ticket_send(raw, 1, 0)
    }

    /// Clients: calls `function` after each NewSessionTicket arrives.
    func setTicketHook(_ function: @escaping gnutls_handshake_hook_func) {
        gnutls_handshake_set_hook_function(raw, UInt32(GNUTLS_HANDSHAKE_NEW_SESSION_TICKET.rawValue), Int32(GNUTLS_HOOK_POST), function)
    }

    /// The session's resumption data, for a ticket store; nil when GnuTLS has none.
    var resumptionData: [UInt8]? {
        var datum = gnutls_datum_t()
        guard gnutls_session_get_data2(raw, &datum) == 0, let data = datum.data else { return nil }
        defer { cqs_gnutls_free(data) }
        return Array(UnsafeBufferPointer(start: data, count: Int(datum.size)))
    }

    /// Whether the server accepted our early data (RFC 8446 §4.2.10).
    var earlyDataAccepted: Bool { gnutls_session_get_flags(raw) & UInt32(GNUTLS_SFLAGS_EARLY_DATA.rawValue) != 0 }

    /// Whether this handshake resumed an earlier session (RFC 8446 §2.2).
    var isResumed: Bool { gnutls_session_is_resumed(raw) != 0 }

    deinit { gnutls_deinit(raw) }

    /// The protocol ALPN settled on, if any (RFC 7301 §3.2).
    var negotiatedALPN: String? { QuicTransport.negotiatedALPN(raw) }

    /// The AEAD in use, for example `AES-128-GCM`.
    var cipherName: String? {
        guard let name = gnutls_cipher_get_name(gnutls_cipher_get(raw)) else { return nil }
        return String(cString: name)
    }

    private func configureCommon(
        credentials: TLSCredentials,
        alpn: [String],
        priority: TLSPriority,
        connectionRef: UnsafeMutablePointer<ngtcp2_crypto_conn_ref>
    ) throws {
        try checkGnuTLS(gnutls_priority_set(raw, priority.raw), "gnutls_priority_set")
        gnutls_session_set_ptr(raw, connectionRef)
        try checkGnuTLS(
            gnutls_credentials_set(raw, GNUTLS_CRD_CERTIFICATE, UnsafeMutableRawPointer(credentials.raw)),
            "gnutls_credentials_set"
        )
        // GnuTLS itself appends to SSLKEYLOGFILE when it is set (see KeyLog); nothing to install.
    }

    private func attach(_ credentials: PreSharedKeyCredentials) throws {
        try credentials.attach(to: raw)
        preSharedKeyCredentials = credentials
    }

    private func setALPN(_ protocols: [String], flags: UInt32) throws {
        let names = protocols.map { Array($0.utf8) }
        let total = names.reduce(0) { $0 + $1.count }
        // GnuTLS copies the names, so this storage only has to outlive the call.
        let storage = UnsafeMutablePointer<UInt8>.allocate(capacity: max(total, 1))
        defer { storage.deallocate() }
        var datums: [gnutls_datum_t] = []
        var offset = 0
        for name in names {
            (storage + offset).update(from: name, count: name.count)
            datums.append(gnutls_datum_t(data: storage + offset, size: UInt32(name.count)))
            offset += name.count
        }
        try checkGnuTLS(gnutls_alpn_set_protocols(raw, datums, UInt32(datums.count), flags), "gnutls_alpn_set_protocols")
    }

    /// Installs the client's certificate check, which runs inside the handshake (RFC 9001 §4.4).
    func setVerifyFunction(_ function: @escaping @convention(c) (gnutls_session_t?) -> Int32) {
        gnutls_session_set_verify_function(raw, function)
    }

}

/// The protocol ALPN settled on in `session`, if any (RFC 7301 §3.2).
func negotiatedALPN(_ session: gnutls_session_t) -> String? {
    var datum = gnutls_datum_t()
    guard gnutls_alpn_get_selected_protocol(session, &datum) == 0, let data = datum.data else { return nil }
    return String(decoding: UnsafeBufferPointer(start: data, count: Int(datum.size)), as: UTF8.self)
}
