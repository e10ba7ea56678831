import CQuicShims

/// Output: the packets ngtcp2 has ready, written into the caller's scratch and handed out in
/// GSO batches (RFC 9000 §12.2 coalescing is ngtcp2's; batching whole packets is ours).
extension QUICConnectionCore {
    /// Writes every packet ngtcp2 has ready, in batches that suit UDP GSO (`QUICPacketBatch`).
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
        if closing.isPacketDue {
            closing.takeDuePacket()
            closing.packet.withUnsafeBytes { emit($0, $0.count, path, 0) }
            transfer.counters.sentDatagrams += 1
            transfer.counters.sentBytes += UInt64(closing.packet.count)
            return false
        }
        guard state == .handshaking || state == .established else { return false }

        let maxPacket = min(ngtcp2_conn_get_max_tx_udp_payload_size(conn), scratch.count)
        let quantumPackets = max(1, ngtcp2_conn_get_send_quantum(conn) / max(maxPacket, 1))
        var written = 0

        // The path storages live in temporary memory: as captured variables, each `&` would be
        // checked for exclusive access at run time.
        return withUnsafeTemporaryAllocation(of: ngtcp2_path_storage.self, capacity: 2) { paths -> Bool in
            withUnsafeTemporaryAllocation(of: ngtcp2_vec.self, capacity: QUICPacketWriter.vectorsPerWrite) { vectors -> Bool in
                var batch = QUICPacketBatch(scratch: scratch, paths: paths.baseAddress!)
                while true {
                    let capacity = batch.capacity(maxPacket: maxPacket)
                    batch.makeRoom(for: capacity, emit: emit)
                    if !batch.hasRoom(maxPacket: maxPacket) {
                        // The scratch is full (a send quantum fits in it, so this is rare): go on next pass.
                        batch.flush(emit: emit)
                        packetWriter.updatePacing(conn: conn, now: now)
                        return true
                    }
                    let packetSize: Int
                    let packetECN: UInt32
                    switch writeOnePacket(into: batch.nextPacket, capacity: capacity, path: &batch.packetPath.pointee.path, vectors: vectors, now: now) {
                    case .packet(let size, let ecn): (packetSize, packetECN) = (size, ecn)
                    case .nothing:
                        packetWriter.updatePacing(conn: conn, now: now)
                        batch.flush(emit: emit)
                        return false
                    case .failed(let rv):
                        batch.flush(emit: emit)
                        if let failure = codecFailure {
                            codecFailure = nil
                            closeForCodec(failure, now: now)
                        } else {
                            closeWithTransportError(rv, reason: "", now: now)
                        }
                        return writePackets(now: now, scratch: batch.unusedScratch, emit: emit)
                    }
                    written += 1
                    transfer.counters.sentDatagrams += 1
                    transfer.counters.sentBytes += UInt64(packetSize)
                    batch.append(size: packetSize, ecn: packetECN, emit: emit)
                    if written >= quantumPackets {
                        packetWriter.updatePacing(conn: conn, now: now)
                        batch.flush(emit: emit)
                        return true
                    }
                }
            }
        }
    }

    fileprivate enum PacketWriteResult {
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
            if !rawStreams.pendingDatagrams.isEmpty && isHandshakeCompleted {
                var accepted: Int32 = 0
                let datagram = rawStreams.pendingDatagrams.first!
                let rv = datagram.withUnsafeBufferPointer { bytes -> Int in
                    var vec = ngtcp2_vec(base: UnsafeMutablePointer(mutating: bytes.baseAddress), len: bytes.count)
                    return cqs_ngtcp2_conn_writev_datagram(
                        conn, &path, &info, destination, capacity, &accepted,
                        UInt32(NGTCP2_WRITE_DATAGRAM_FLAG_MORE), 0, &vec, 1, now
                    )
                }
                if accepted != 0 || rv == Int(NGTCP2_ERR_INVALID_ARGUMENT) { rawStreams.pendingDatagrams.removeFirst() }
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
                transfer.counters.sentStreamBytes += UInt64(accepted)
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
}
