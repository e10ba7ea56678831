import CQuicShims
import Logging

/// The ngtcp2 callbacks (ngtcp2 0.12 `ngtcp2_callbacks`). Each runs synchronously inside a core
/// call, never throws and never calls out: it records state or an event and returns 0, or
/// `NGTCP2_ERR_CALLBACK_FAILURE` after recording why.
extension QUICConnectionCore {
    /// Borrows the core behind ngtcp2's `user_data` without retaining it (also valid inside deinit).
    @inline(__always)
    static func withCore<R>(_ userData: UnsafeMutableRawPointer?, _ body: (QUICConnectionCore) -> R) -> R {
        Unmanaged<QUICConnectionCore>.fromOpaque(userData!)._withUnsafeGuaranteedRef(body)
    }

    static let getConnection: @convention(c) (UnsafeMutablePointer<ngtcp2_crypto_conn_ref>?) -> OpaquePointer? = {
        ref in
        QUICConnectionCore.withCore(ref!.pointee.user_data) { $0.conn }
    }

    /// qlog's name for a key's encryption level.
    static func keyLevelName(_ level: ngtcp2_crypto_level) -> String {
        switch level {
        case NGTCP2_CRYPTO_LEVEL_HANDSHAKE: return "handshake"
        case NGTCP2_CRYPTO_LEVEL_EARLY: return "0rtt"
        case NGTCP2_CRYPTO_LEVEL_INITIAL: return "initial"
        default: return "1rtt"
        }
    }

    /// A client received a NewSessionTicket (RFC 8446 §4.6.1): keep it for the next connection.
    static let receivedSessionTicket: gnutls_handshake_hook_func = { session, _, _, _, _ in
        guard let session, let ref = gnutls_session_get_ptr(session) else { return 0 }
        let userData = ref.assumingMemoryBound(to: ngtcp2_crypto_conn_ref.self).pointee.user_data
        QUICConnectionCore.withCore(userData) { core in
            guard let tls = core.clientTLS, let store = tls.ticketStore, let data = core.tlsSession.resumptionData else { return }
            let parameters = ngtcp2_conn_get_remote_transport_params(core.conn).map { QUICRememberedTransportParameters($0.pointee) }
            store.store(.init(ticket: data, transportParameters: parameters), for: tls.ticketKey)
        }
        return 0
    }

    static let writeQLog: @convention(c) (UnsafeMutableRawPointer?, UInt32, UnsafeRawPointer?, Int) -> Void = {
        userData, flags, data, length in
        QUICConnectionCore.withCore(userData) { core in
            let record = UnsafeRawBufferPointer(start: data, count: length)
            core.transfer.observe(qlogRecord: record)
            core.qlog.write(record, final: flags & UInt32(NGTCP2_QLOG_WRITE_FLAG_FIN) != 0)
        }
    }

    /// GnuTLS certificate check for clients (RFC 9001 §4.4: QUIC relies on TLS authentication).
    /// Servers: the key configured under the identity a client offered (RFC 8446 §4.2.11).
    static let lookUpPreSharedKey: PreSharedKeyCredentials.Lookup = { session, identity, key in
        guard let session, let ref = gnutls_session_get_ptr(session) else { return -1 }
        let userData = ref.assumingMemoryBound(to: ngtcp2_crypto_conn_ref.self).pointee.user_data
        return QUICConnectionCore.withCore(userData) { core in
            PreSharedKeyCredentials.answer(identity: identity, from: core.configuration.preSharedKeys, into: key)
        }
    }

    static let verifyCertificate: @convention(c) (gnutls_session_t?) -> Int32 = { session in
        guard let session, let ref = gnutls_session_get_ptr(session) else { return -1 }
        let userData = ref.assumingMemoryBound(to: ngtcp2_crypto_conn_ref.self).pointee.user_data
        return QUICConnectionCore.withCore(userData) { core in
            guard let tls = core.clientTLS else { return 0 }
            if let failure = verifyPeerCertificate(
                session: session,
                serverName: tls.verificationName,
                verification: tls.verification
            ) {
                core.handshake.verificationFailure = failure
                return Int32(GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR)
            }
            return 0
        }
    }

    static func makeCallbacks(role: Role) -> ngtcp2_callbacks {
        var callbacks = ngtcp2_callbacks()
        switch role {
        case .client:
            callbacks.client_initial = ngtcp2_crypto_client_initial_cb
            callbacks.recv_retry = ngtcp2_crypto_recv_retry_cb
        case .server:
            callbacks.recv_client_initial = ngtcp2_crypto_recv_client_initial_cb
        }
        callbacks.recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb
        callbacks.encrypt = ngtcp2_crypto_encrypt_cb
        callbacks.decrypt = ngtcp2_crypto_decrypt_cb
        callbacks.hp_mask = ngtcp2_crypto_hp_mask_cb
        // Key updates (RFC 9001 §6). ngtcp2 derives the next generation's keys ahead of time: once
        // when the handshake is confirmed, then again each time a key update has completed. So
        // derivation N (N >= 2) is where the library learns that generation N-1 is in use.
        callbacks.update_key = { conn, rxSecret, txSecret, rxAEAD, rxIV, txAEAD, txIV, currentRx, currentTx, length, userData in
            let rv = ngtcp2_crypto_update_key_cb(conn, rxSecret, txSecret, rxAEAD, rxIV, txAEAD, txIV, currentRx, currentTx, length, userData)
            guard rv == 0 else { return rv }
            QUICConnectionCore.withCore(userData) { core in
                core.handshake.keyDerivations += 1
                guard core.handshake.keyDerivations >= 2 else { return }
                core.transfer.counters.keyUpdates += 1
                let trigger = core.handshake.localKeyUpdateRequested ? "local_update" : "remote_update"
                core.handshake.localKeyUpdateRequested = false
                core.logKeyUpdated(level: "1rtt", receiving: true, generation: core.handshake.keyDerivations - 1, trigger: trigger)
                core.logKeyUpdated(level: "1rtt", receiving: false, generation: core.handshake.keyDerivations - 1, trigger: trigger)
            }
            return 0
        }
        // Handshake and 1-RTT keys as TLS hands them over (ngtcp2 0.12 writes no key events).
        callbacks.recv_rx_key = { _, level, userData in
            QUICConnectionCore.withCore(userData) { core in
                core.logKeyUpdated(level: QUICConnectionCore.keyLevelName(level), receiving: true, trigger: "tls")
                return 0
            }
        }
        callbacks.recv_tx_key = { _, level, userData in
            QUICConnectionCore.withCore(userData) { core in
                core.logKeyUpdated(level: QUICConnectionCore.keyLevelName(level), receiving: false, trigger: "tls")
                if core.role == .server && level == NGTCP2_CRYPTO_LEVEL_APPLICATION { return core.startCodec() }
                return 0
            }
        }
        callbacks.delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb
        callbacks.delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb
        callbacks.get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb
        callbacks.version_negotiation = ngtcp2_crypto_version_negotiation_cb

        callbacks.rand = { destination, length, _ in
            _ = gnutls_rnd(GNUTLS_RND_RANDOM, destination, length)
        }
        callbacks.get_new_connection_id = { _, cid, token, length, userData in
            QUICConnectionCore.withCore(userData) { core in
                let id = length == core.idFactory.idLength
                    ? core.idFactory.makeConnectionID() : QUICConnectionID.random(length: length)
                cid!.pointee = id.ngtcp2
                let resetToken = core.idFactory.statelessResetToken(for: id)
                token!.update(from: resetToken, count: resetToken.count)
                core.events.append(.connectionIDIssued(id))
                return 0
            }
        }
        callbacks.remove_connection_id = { _, cid, userData in
            QUICConnectionCore.withCore(userData) { core in
                core.events.append(.connectionIDRetired(QUICConnectionID(cid!.pointee)))
                return 0
            }
        }
        callbacks.recv_stateless_reset = { _, _, userData in
            QUICConnectionCore.withCore(userData) { core in
                core.closing.receivedStatelessReset = true
                return 0
            }
        }
        callbacks.handshake_completed = { _, userData in
            QUICConnectionCore.withCore(userData) { core in
                core.didCompleteHandshake()
            }
        }
        callbacks.handshake_confirmed = { _, userData in
            QUICConnectionCore.withCore(userData) { core in
                core.events.append(.handshakeConfirmed)
                return 0
            }
        }
        callbacks.path_validation = { _, _, path, result, userData in
            QUICConnectionCore.withCore(userData) { core in
                core.didFinishPathValidation(QUICPath(path!.pointee), succeeded: result == NGTCP2_PATH_VALIDATION_RESULT_SUCCESS)
                return 0
            }
        }
        callbacks.stream_open = { _, streamID, userData in
            QUICConnectionCore.withCore(userData) { core in
                if core.hasApplicationCodec { return core.runCodecCallback { $0.streamOpened(streamID: streamID) } }
                core.rawStreams.table[streamID] = QUICStreamState(id: streamID)
                core.events.append(.streamOpened(streamID: streamID))
                return 0
            }
        }
        callbacks.recv_stream_data = { _, flags, streamID, _, data, length, userData, _ in
            QUICConnectionCore.withCore(userData) { core in
                core.transfer.counters.receivedStreamBytes += UInt64(length)
                if core.hasApplicationCodec {
                    return core.runCodecCallback { codec in
                        let consumed = try codec.receive(
                            streamID: streamID,
                            bytes: UnsafeRawBufferPointer(start: data, count: length),
                            fin: flags & UInt32(NGTCP2_STREAM_DATA_FLAG_FIN) != 0
                        )
                        core.consume(streamID: streamID, bytes: consumed)
                    }
                }
                core.didReceiveStreamData(
                    streamID: streamID,
                    bytes: UnsafeRawBufferPointer(start: data, count: length),
                    fin: flags & UInt32(NGTCP2_STREAM_DATA_FLAG_FIN) != 0
                )
                return 0
            }
        }
        callbacks.acked_stream_data_offset = { _, streamID, offset, length, userData, _ in
            QUICConnectionCore.withCore(userData) { core in
                if core.hasApplicationCodec {
                    return core.runCodecCallback { try $0.acknowledged(streamID: streamID, bytes: UInt64(length)) }
                }
                core.withStream(streamID) { $0.send.didAcknowledge(upTo: offset + UInt64(length)) }
                return 0
            }
        }
        callbacks.stream_reset = { _, streamID, _, code, userData, _ in
            QUICConnectionCore.withCore(userData) { core in
                if core.hasApplicationCodec {
                    return core.runCodecCallback { try $0.peerReset(streamID: streamID, code: code) }
                }
                core.withStream(streamID) { $0.receive.resetCode = code }
                core.signalReadable(streamID)
                return 0
            }
        }
        callbacks.stream_close = { _, flags, streamID, code, userData, _ in
            QUICConnectionCore.withCore(userData) { core in
                let appCode = flags & UInt32(NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET) != 0 ? code : nil
                if core.hasApplicationCodec {
                    core.replenishPeerStreamCredit(closed: streamID)
                    return core.runCodecCallback { try $0.streamClosed(streamID: streamID, code: appCode) }
                }
                core.didCloseStream(
                    streamID: streamID,
                    code: flags & UInt32(NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET) != 0 ? code : nil
                )
                return 0
            }
        }
        callbacks.extend_max_stream_data = { _, streamID, _, userData, _ in
            QUICConnectionCore.withCore(userData) { core in
                if core.hasApplicationCodec {
                    return core.runCodecCallback { try $0.setBlocked(streamID: streamID, false) }
                }
                let hasUnwrittenData = core.withStream(streamID) { stream in
                    stream.isFlowControlBlocked = false
                    return stream.send.hasUnwrittenData
                }
                if hasUnwrittenData == true { core.enqueueForWrite(streamID) }
                return 0
            }
        }
        callbacks.extend_max_local_streams_bidi = { _, _, userData in
            QUICConnectionCore.withCore(userData) { core in
                core.events.append(.streamCreditAvailable)
                return 0
            }
        }
        callbacks.extend_max_local_streams_uni = { _, _, userData in
            QUICConnectionCore.withCore(userData) { core in
                core.events.append(.streamCreditAvailable)
                return 0
            }
        }
        callbacks.recv_datagram = { _, _, data, length, userData in
            QUICConnectionCore.withCore(userData) { core in
                core.events.append(.datagramReceived(Array(UnsafeRawBufferPointer(start: data, count: length))))
                return 0
            }
        }
        return callbacks
    }

    func didCompleteHandshake() -> Int32 {
        if case .handshaking = state { markEstablished() }
        handshake.wasResumed = tlsSession.isResumed
        if role == .server { tlsSession.sendSessionTicket() }
        if earlyDataAttempted {
            handshake.earlyDataAccepted = tlsSession.earlyDataAccepted
            if !earlyDataAccepted {
                if codecStarted && applicationCodec != nil {
                    // ngtcp2 forgets every stream, and the codec's state (HTTP/3 control streams,
                    // requests) is void with them. A fresh codec takes over now, before the
                    // server's 1-RTT stream data that ngtcp2 buffered is delivered; the owner
                    // sends its requests again on `.earlyDataRejected` (RFC 9001 §4.6.2).
                    guard ngtcp2_conn_early_data_rejected(conn) == 0 else { return NGTCP2_ERR_CALLBACK_FAILURE }
                    do {
                        applicationCodec = try makeApplicationCodec?()
                    } catch {
                        codecFailure = error
                        return NGTCP2_ERR_CALLBACK_FAILURE
                    }
                    codecStarted = false
                    events.append(.earlyDataRejected)
                } else if resendRejectedEarlyData() != 0 {
                    return NGTCP2_ERR_CALLBACK_FAILURE
                }
            }
        }
        logALPN()
        events.append(.handshakeCompleted)
        return startCodec()
    }

    /// Lets the application codec open its streams, once: a server does it as soon as it can
    /// send 1-RTT data (0-RTT requests may already be waiting for an answer, RFC 9001 §4.1.1),
    /// a client when the handshake completes, or at once when it attempts 0-RTT.
    func startCodec() -> Int32 {
        guard !codecStarted else { return 0 }
        codecStarted = true
        return runCodecCallback { try $0.connectionEstablished(self) }
    }

    /// A client attempting 0-RTT starts its codec before the handshake, so HTTP/3's control
    /// streams and the first requests ride in 0-RTT packets (RFC 9114 §4.1, RFC 9001 §4.6.1).
    package func startCodecForEarlyData() throws {
        guard role == .client, earlyDataAttempted, applicationCodec != nil, !codecStarted else { return }
        codecStarted = true
        try applicationCodec?.connectionEstablished(self)
    }

    func didReceiveStreamData(streamID: Int64, bytes: UnsafeRawBufferPointer, fin: Bool) {
        guard withStream(streamID, { $0.receive.append(bytes, fin: fin) }) != nil else {
            // Data for a stream we already forgot: credit it back so the connection window keeps moving.
            ngtcp2_conn_extend_max_offset(conn, UInt64(bytes.count))
            return
        }
        signalReadable(streamID)
    }

    func didCloseStream(streamID: Int64, code: UInt64?) {
        dequeueForWrite(streamID)
        guard withStream(streamID, { $0.isClosedByTransport = true }) != nil else { return }
        replenishPeerStreamCredit(closed: streamID)
        events.append(.streamClosed(streamID: streamID, code: code))
        forgetIfDone(streamID)
    }

    /// A closed peer-initiated stream frees a slot in the peer's stream limit (RFC 9000 §4.6).
    func replenishPeerStreamCredit(closed streamID: Int64) {
        guard !isLocallyInitiated(streamID) else { return }
        grantPeerStreams(bidirectional: Self.isBidirectional(streamID), 1)
    }
}

/// ngtcp2's debug log lines, forwarded by the C shim's variadic adaptor.
@_cdecl("quictransport_ngtcp2_log_line")
func quictransportNGTCP2LogLine(_ userData: UnsafeMutableRawPointer?, _ line: UnsafePointer<CChar>?) {
    guard let userData, let line else { return }
    QUICConnectionCore.withCore(userData) { core in
        core.logger.trace("\(String(cString: line))")
    }
}
