import CQuicShims
import Logging

/// One worker's server side, sans I/O: routes the datagrams of its sockets (the listening one
/// and the preferred address's) to connection cores by connection ID and answers what no
/// connection owns.
///
/// It sends Version Negotiation for unknown versions (RFC 9000 §6), Retry when address
/// validation is on (RFC 9000 §8.1.2), stateless resets for IDs it issued but no longer knows
/// (RFC 9000 §10.3), and CONNECTION_REFUSED past the connection limits. Anything else that does
/// not parse is dropped without a reply, so garbage never draws traffic and never reaches a core.
///
/// Confined to its worker's loop. The tables read for every datagram skip Swift's run-time
/// exclusivity check (`@exclusivity(unchecked)`): no access to them spans a call that could
/// reach them again.
package final class QUICEndpointCore {
    package struct Configuration: Sendable {
        package var quic: QUICConfiguration
        package var credentials: TLSCredentials
        /// Validate client addresses with a Retry round trip before creating state.
        package var requiresRetry = false
        /// Above this many handshakes in progress, a new client must first prove its address
        /// with a Retry round trip (RFC 9000 §8.1.2), as quic-go does under load: an Initial
        /// flood from spoofed addresses then costs the server a stateless reply, not a TLS
        /// session each. Below it again, clients connect in one round trip. Per worker.
        package var retryThreshold = 128
        /// The most connections served at once, over every worker; closed ones that linger for
        /// their closing or draining period do not count.
        package var maximumConnections = 1024
        /// The most connections one client may hold, counted by `QUICSocketAddress.client` (an
        /// IPv4 address or an IPv6 /64) over every worker; nil for no limit. Only connections
        /// whose address is proven count, by a Retry token or a completed handshake, so spoofed
        /// Initials cannot use up another client's share. A client at its limit gets a Retry
        /// first; one that returns with a token, or completes a handshake past the limit, gets
        /// CONNECTION_REFUSED (RFC 9000 §20.1).
        package var maximumConnectionsPerAddress: Int?
        /// How long a Retry token stays valid.
        package var retryTokenLifetimeNanoseconds: UInt64 = 10_000_000_000
        /// Makes the application protocol codec (HTTP/3) for each new connection; nil for raw streams.
        package var makeApplicationCodec: (@Sendable () -> any QUICApplicationCodec)?
        /// Accept 0-RTT data from resuming clients (RFC 9001 §4.6.1). It can be replayed (RFC 8446
        /// §8): the anti-replay cache covers this address's workers in this process only, so
        /// accept it only for requests that are safe to repeat.
        package var acceptsEarlyData = false
        /// Counts the connections this endpoint made that are still in memory.
        package var liveConnections = QUICLiveConnections()
        /// Issue connection IDs that a QUIC-LB balancer routes to this host
        /// (draft-ietf-quic-load-balancers-21 §5); nil for unroutable IDs (§3.2).
        package var loadBalancer: QUICLoadBalancerConfiguration?

        package init(quic: QUICConfiguration, credentials: TLSCredentials) {
            self.quic = quic
            self.credentials = credentials
        }
    }

    /// What became of one datagram, for the I/O layer to act on (quinn-proto's `DatagramEvent`).
    package enum Disposition {
        /// The connection `handle` names consumed it; `isNew` when this datagram created it.
        case delivered(QUICConnectionCore, QUICConnectionHandle, isNew: Bool)
        /// The endpoint answered statelessly (Version Negotiation, Retry, reset or refusal):
        /// `reply`, possibly empty, goes back to the datagram's sender. It lies in the
        /// endpoint's scratch area and stays valid until the next call to `receive`.
        case answered(String, reply: UnsafeRawBufferPointer)
        /// The datagram belongs to a connection of another worker of the same address: the
        /// I/O layer forwards a copy to that worker, which receives it with `mayForward` false.
        case forward(toWorker: Int)
        /// Nothing could use it.
        case dropped(String)
    }

    package let configuration: Configuration
    /// Issues this worker's connection IDs; its `worker` is this core's worker index.
    package let idFactory: QUICConnectionIDFactory
    /// What this core shares with the other workers of its address.
    package let shared: QUICEndpointSharedState
    private let logger: Logger
    @exclusivity(unchecked) private var routes: [QUICConnectionID: Route] = [:]
    /// The route the last datagram took. A batch read from the socket is mostly one peer's
    /// datagrams back to back, and comparing an ID costs a few instructions where hashing it
    /// (seeded, as a client picks the IDs of its first packets) costs a few hundred.
    @exclusivity(unchecked) private var lastRoute: (id: QUICConnectionID, route: Route)?
    /// Each connection's handle and routed IDs: a handful (the client's first DCID and the IDs
    /// we issued, `active_connection_id_limit` at a time), so a list, which allocates once, not
    /// a set, which rehashes as it grows.
    private var routesByConnection: [ObjectIdentifier: (handle: QUICConnectionHandle, ids: [QUICConnectionID])] = [:]
    /// Handles of removed connections, for the next ones; `nextHandle` past every one in use.
    private var freeHandles: [QUICConnectionHandle] = []
    private var nextHandle = 0
    /// Where stateless replies are written: `Disposition.answered` lends a slice of it until
    /// the next datagram. Room for the largest reply (a Retry or a refusal fills an Initial's
    /// 1200 bytes) and, past it, the Retry token or the reset's random bytes.
    private let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: QUICEndpointCore.replySize + 256, alignment: 8)
    private static let replySize = 1200
    /// This worker's connections, those in their closing or draining period included.
    package private(set) var connections: [ObjectIdentifier: QUICConnectionCore] = [:]
    /// Connections that are over and linger only for their closing or draining period (RFC 9000
    /// §10.2): they still answer or swallow late packets, but no longer count against
    /// `maximumConnections`, a client's share or the Retry threshold, since they serve nothing.
    private var lingering: Set<ObjectIdentifier> = []
    /// Connections whose handshake is in progress, for the Retry threshold. Kept in step by
    /// `handle(_:of:)`, so that a new client costs no walk over every connection.
    private var handshaking: Set<ObjectIdentifier> = []
    /// With a per-address limit: the client each connection counts against once proven, and
    /// those whose handshake has yet to prove their address.
    private var countedClients: [ObjectIdentifier: QUICClientAddress] = [:]
    @exclusivity(unchecked) private var unprovenClients: [ObjectIdentifier: QUICClientAddress] = [:]
    /// The configuration's TLS priorities, parsed once for all of this endpoint's sessions.
    private let tlsPriority: TLSPriority?

    /// An endpoint for `configuration`; without `idFactory`, it issues IDs for worker 0 from a
    /// random secret and `configuration.loadBalancer`.
    package init(
        configuration: Configuration,
        idFactory: QUICConnectionIDFactory? = nil,
        shared: QUICEndpointSharedState = QUICEndpointSharedState(),
        logger: Logger
    ) {
        self.configuration = configuration
        self.idFactory = idFactory ?? QUICConnectionIDFactory(loadBalancer: configuration.loadBalancer)
        self.shared = shared
        self.logger = logger
        // A string GnuTLS refuses (none of ours) is reported per connection instead.
        tlsPriority = try? TLSPriority(configuration.quic.gnutlsPriority)
    }

    deinit {
        scratch.deallocate()
    }

    /// Routes or answers one datagram; what became of it says what the I/O layer does next.
    ///
    /// A datagram for an ID of another worker (its worker byte, `QUICConnectionIDFactory`) that
    /// this worker does not route comes back as `.forward` unless `mayForward` is false, as it
    /// is for a datagram another worker forwarded: it is then answered here.
    package func receive(
        datagram: UnsafeRawBufferPointer,
        path: QUICPath,
        ecn: UInt32 = 0,
        now: UInt64,
        mayForward: Bool = true
    ) -> Disposition {
        guard let base = datagram.baseAddress?.assumingMemoryBound(to: UInt8.self), datagram.count > 0 else {
            return .dropped("empty datagram")
        }
        var versionCID = ngtcp2_version_cid()
        let rv = ngtcp2_pkt_decode_version_cid(&versionCID, base, datagram.count, idFactory.idLength)
        if rv == NGTCP2_ERR_VERSION_NEGOTIATION {
            return sendVersionNegotiation(versionCID)
        }
        guard rv == 0, let dcidPointer = versionCID.dcid else { return .dropped("undecodable header") }
        // RFC 8999 lets a long header of another version carry a connection ID of up to 255
        // bytes, and ngtcp2 passes such a header (a Version Negotiation packet, version 0);
        // QUIC v1's are at most 20 (RFC 9000 §17.2), and a server has nothing to say to it.
        guard versionCID.dcidlen <= QUICConnectionID.maximumLength else {
            return .dropped("a connection ID of \(versionCID.dcidlen) bytes")
        }
        let dcid = QUICConnectionID(pointer: dcidPointer, length: versionCID.dcidlen)
        if let route = route(dcid) {
            let core = route.core
            core.receive(datagram: datagram, path: path, ecn: ecn, now: now)
            // A CONNECTION_CLOSE makes room before the next datagram of the same batch, which
            // may be a new client's Initial; `.closed` reaches `handle(_:of:)` only after the batch.
            if core.isOver { releaseLimits(of: core) }
            if !unprovenClients.isEmpty { countClientOnceProven(core, now: now) }
            return .delivered(core, route.handle, isNew: false)
        }
        let isLongHeader = base[0] & 0x80 != 0
        // The same rule as the kernel's steering program (QUICReuseportGroup): any packet whose
        // DCID has our length goes to the worker its worker byte names, if that is another one.
        if mayForward, shared.workerCount > 1,
            let owner = dcid.withUnsafeBytes({ idFactory.worker(of: $0) }),
            owner != idFactory.worker, Int(owner) < shared.workerCount
        {
            shared.countForwarded {
                let form = isLongHeader ? "long header 0x\(String(base[0], radix: 16))" : "short header"
                return "\(form), \(datagram.count) bytes, DCID \(dcid) from \(path.remote): worker \(idFactory.worker) -> \(owner)"
            }
            return .forward(toWorker: Int(owner))
        }
        guard isLongHeader else {
            return sendStatelessReset(to: dcid, datagramSize: datagram.count)
        }
        var header = ngtcp2_pkt_hd()
        guard ngtcp2_accept(&header, base, datagram.count) == 0 else {
            return .dropped("long header packet that cannot start a connection")
        }
        guard header.type == UInt8(NGTCP2_PKT_INITIAL.rawValue) else {
            return .dropped("0-RTT packet for an unknown connection")
        }
        if shared.refusesNewConnections {
            return refuse(header, code: UInt64(NGTCP2_CONNECTION_REFUSED), why: "shutting down")
        }
        guard shared.reserveConnection(limit: configuration.maximumConnections) else {
            return refuse(header, code: UInt64(NGTCP2_CONNECTION_REFUSED), why: "connection limit reached")
        }
        var reserved = true
        defer { if reserved { shared.releaseConnection() } }

        var originalDCID = QUICConnectionID(header.dcid)
        var retrySCID: QUICConnectionID?
        let retryToken = header.token.len > 0 && header.token.base[0] == UInt8(NGTCP2_CRYPTO_TOKEN_MAGIC_RETRY) ? header.token.base : nil
        let perAddressLimit = configuration.maximumConnectionsPerAddress
        let client = perAddressLimit.map { _ in path.remote.client }
        let clientAtLimit = client.map { shared.connectionCount(of: $0) >= perAddressLimit! } ?? false
        if retryToken == nil, configuration.requiresRetry || clientAtLimit || handshaking.count >= configuration.retryThreshold {
            return sendRetry(header, path: path, now: now)
        }
        // A Retry token is checked whatever the mode: the load may have fallen since the Retry.
        if let token = retryToken {
            var odcid = ngtcp2_cid()
            let verified = path.remote.withSockAddr { address, length in
                idFactory.secretBytes.withUnsafeBufferPointer { secret in
                    withUnsafePointer(to: header.dcid) { dcidC in
                        ngtcp2_crypto_verify_retry_token(
                            &odcid, token, header.token.len, secret.baseAddress, secret.count, header.version,
                            address, length, dcidC, configuration.retryTokenLifetimeNanoseconds, now
                        )
                    }
                }
            }
            guard verified == 0 else {
                return refuse(header, code: UInt64(NGTCP2_INVALID_TOKEN), why: "invalid Retry token")
            }
            originalDCID = QUICConnectionID(odcid)
            retrySCID = QUICConnectionID(header.dcid)
        }
        // A valid token proves the address: the connection counts against its client now.
        var countsNow = false
        if let client, let perAddressLimit, retrySCID != nil {
            guard shared.admit(client, limit: perAddressLimit) else {
                return refuse(header, code: UInt64(NGTCP2_CONNECTION_REFUSED), why: "too many connections from \(path.remote.host)")
            }
            countsNow = true
        }
        defer { if countsNow, let client { shared.release(client) } }

        let core: QUICConnectionCore
        do {
            core = try QUICConnectionCore(
                serverWith: configuration.quic,
                credentials: configuration.credentials,
                header: header,
                originalDestinationConnectionID: originalDCID,
                retrySourceConnectionID: retrySCID,
                idFactory: idFactory,
                ticketKey: shared.ticketKey,
                antiReplay: configuration.acceptsEarlyData ? shared.antiReplay : nil,
                tlsPriority: tlsPriority,
                path: path,
                now: now,
                logger: logger
            )
        } catch {
            logger.warning("cannot create connection", metadata: ["error": "\(error)"])
            return .dropped("connection setup failed: \(error)")
        }
        core.liveConnections = configuration.liveConnections
        core.applicationCodec = configuration.makeApplicationCodec?()
        connections[ObjectIdentifier(core)] = core
        handshaking.insert(ObjectIdentifier(core))
        reserved = false
        if let client {
            if countsNow { countedClients[ObjectIdentifier(core)] = client } else { unprovenClients[ObjectIdentifier(core)] = client }
            countsNow = false
        }
        let handle = freeHandles.popLast() ?? QUICConnectionHandle(index: nextHandle)
        if handle.index == nextHandle { nextHandle += 1 }
        routesByConnection[ObjectIdentifier(core)] = (handle, [])
        addRoute(dcid, to: core)
        core.receive(datagram: datagram, path: path, ecn: ecn, now: now)
        return .delivered(core, handle, isNew: true)
    }

    /// Counts a connection against its client once its handshake has proven the address, or
    /// refuses it when the client reached its limit meanwhile.
    private func countClientOnceProven(_ core: QUICConnectionCore, now: UInt64) {
        let key = ObjectIdentifier(core)
        guard core.isHandshakeCompleted, let client = unprovenClients.removeValue(forKey: key),
            let limit = configuration.maximumConnectionsPerAddress
        else { return }
        if shared.admit(client, limit: limit) {
            countedClients[key] = client
        } else {
            logger.info("refused a connection", metadata: ["why": "too many connections from this address"])
            core.refuse(reason: "too many connections from this address", now: now)
        }
    }

    /// Keeps the routing table in step with a connection's IDs, and the limits with its
    /// handshake and its end: the I/O layer passes here every event it takes from a core this
    /// endpoint created (quinn-proto's `EndpointEvent`).
    package func handle(_ events: [QUICConnectionEvent], of core: QUICConnectionCore) {
        for event in events {
            switch event {
            case .connectionIDIssued(let id): addRoute(id, to: core)
            case .connectionIDRetired(let id): removeRoute(id)
            case .handshakeCompleted: handshaking.remove(ObjectIdentifier(core))
            case .closed: releaseLimits(of: core)
            default: break
            }
        }
    }

    /// Forgets a connection whose closing or draining period is over.
    package func remove(_ core: QUICConnectionCore) {
        let key = ObjectIdentifier(core)
        if let removed = routesByConnection.removeValue(forKey: key) {
            for id in removed.ids { routes[id] = nil }
            freeHandles.append(removed.handle)
        }
        if lastRoute?.route.core === core { lastRoute = nil }
        releaseLimits(of: core)
        connections[key] = nil
        lingering.remove(key)
    }

    /// Gives back what a connection held of the limits as soon as it is over, not when its
    /// closing or draining period ends: its place among `maximumConnections`, its client's share
    /// and its count as a handshake. That period is 3 PTO, seconds under load, and a burst of
    /// clients that had just left would keep the next burst out for as long.
    private func releaseLimits(of core: QUICConnectionCore) {
        let key = ObjectIdentifier(core)
        guard connections[key] != nil, lingering.insert(key).inserted else { return }
        shared.releaseConnection()
        handshaking.remove(key)
        if let client = countedClients.removeValue(forKey: key) { shared.release(client) }
        unprovenClients[key] = nil
    }

    /// A connection and its handle, as the routing table holds them.
    private struct Route {
        let core: QUICConnectionCore
        let handle: QUICConnectionHandle
    }

    /// The connection `id` routes to, if any.
    private func route(_ id: QUICConnectionID) -> Route? {
        if let lastRoute, lastRoute.id == id { return lastRoute.route }
        guard let route = routes[id] else { return nil }
        lastRoute = (id, route)
        return route
    }

    private func addRoute(_ id: QUICConnectionID, to core: QUICConnectionCore) {
        let key = ObjectIdentifier(core)
        guard let handle = routesByConnection[key]?.handle else { return }
        routes[id] = Route(core: core, handle: handle)
        if lastRoute?.id == id { lastRoute = nil }
        routesByConnection[key]?.ids.append(id)
    }

    private func removeRoute(_ id: QUICConnectionID) {
        guard let route = routes.removeValue(forKey: id) else { return }
        if lastRoute?.id == id { lastRoute = nil }
        routesByConnection[ObjectIdentifier(route.core)]?.ids.removeAll { $0 == id }
    }

    /// The first `count` bytes of the scratch area, as the reply of `.answered`.
    private func reply(_ count: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: scratch[..<count])
    }

    // MARK: Stateless answers

    private func sendVersionNegotiation(_ versionCID: ngtcp2_version_cid) -> Disposition {
        // The scratch area has room for the longest IDs RFC 8999 allows (255 bytes each) and the versions.
        let supported: [UInt32] = [NGTCP2_PROTO_VER_V1, NGTCP2_PROTO_VER_V2_DRAFT]
        var random: UInt8 = 0
        _ = gnutls_rnd(GNUTLS_RND_NONCE, &random, 1)
        // The reply swaps the IDs: its DCID is the client's SCID (RFC 9000 §17.2.1).
        let n = ngtcp2_pkt_write_version_negotiation(
            scratch.baseAddress!.assumingMemoryBound(to: UInt8.self), Self.replySize, random,
            versionCID.scid, versionCID.scidlen, versionCID.dcid, versionCID.dcidlen, supported, supported.count
        )
        guard n > 0 else { return .dropped("cannot write Version Negotiation") }
        return .answered("version negotiation for 0x\(String(versionCID.version, radix: 16))", reply: reply(n))
    }

    private func sendStatelessReset(to dcid: QUICConnectionID, datagramSize: Int) -> Disposition {
        // Only for IDs we issued, and always smaller than the trigger to prevent loops (RFC 9000 §10.3.3).
        let minimum = 1 + Int(NGTCP2_MIN_STATELESS_RESET_RANDLEN) + Int(NGTCP2_STATELESS_RESET_TOKENLEN)
        guard dcid.withUnsafeBytes({ idFactory.isIssuedHere($0) }) else {
            return .dropped("short header packet for an unknown connection ID")
        }
        guard datagramSize - 1 > minimum else { return .dropped("too small to answer with a stateless reset") }
        let size = min(datagramSize - 1, 43)
        let packet = scratch.baseAddress!.assumingMemoryBound(to: UInt8.self)
        let random = packet + Self.replySize
        let randomCount = size - 1 - Int(NGTCP2_STATELESS_RESET_TOKENLEN)
        _ = gnutls_rnd(GNUTLS_RND_NONCE, random, randomCount)
        let token = idFactory.statelessResetToken(for: dcid)
        let n = ngtcp2_pkt_write_stateless_reset(packet, size, token, random, randomCount)
        guard n > 0 else { return .dropped("cannot write stateless reset") }
        return .answered("stateless reset", reply: reply(n))
    }

    private func sendRetry(_ header: ngtcp2_pkt_hd, path: QUICPath, now: UInt64) -> Disposition {
        var header = header
        var retrySCID = idFactory.makeConnectionID().ngtcp2
        let packet = scratch.baseAddress!.assumingMemoryBound(to: UInt8.self)
        let token = packet + Self.replySize
        let tokenLength = path.remote.withSockAddr { address, length in
            idFactory.secretBytes.withUnsafeBufferPointer { secret in
                ngtcp2_crypto_generate_retry_token(
                    token, secret.baseAddress, secret.count, header.version, address, length, &retrySCID, &header.dcid, now
                )
            }
        }
        guard tokenLength > 0 else { return .dropped("cannot generate Retry token") }
        let n = ngtcp2_crypto_write_retry(
            packet, Self.replySize, header.version, &header.scid, &retrySCID, &header.dcid, token, tokenLength
        )
        guard n > 0 else { return .dropped("cannot write Retry") }
        return .answered("retry", reply: reply(n))
    }

    private func refuse(_ header: ngtcp2_pkt_hd, code: UInt64, why: String) -> Disposition {
        var header = header
        // Initial keys come from the client's DCID, so it goes back as our SCID (RFC 9001 §5.2).
        let n = ngtcp2_crypto_write_connection_close(
            scratch.baseAddress!.assumingMemoryBound(to: UInt8.self), Self.replySize, header.version,
            &header.scid, &header.dcid, code, nil, 0
        )
        logger.info("refused a connection", metadata: ["why": "\(why)"])
        return .answered(why, reply: reply(max(n, 0)))
    }
}
