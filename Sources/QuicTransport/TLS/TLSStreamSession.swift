import CQuicShims
#if canImport(Glibc)
import Glibc
#endif

/// The single owner of one TLS-over-TCP `gnutls_session_t` (RFC 8446, RFC 5246), for
/// `NWProtocolTLS` connections.
///
/// Its transport is two byte buffers, not a socket: the owner feeds in the ciphertext it read
/// (`feed`) and writes out what `takeOutgoing` returns. GnuTLS reaches them through push and
/// pull functions that never block; the pull function says EAGAIN when it has nothing, so
/// `handshake` and `decrypt` return to the caller and are called again when bytes arrive.
/// Call order: `handshake` until `.done`, then `encrypt`/`decrypt`, then `bye`. Confined to
/// the connection's event loop; the session holds an unretained pointer back to this object.
final class TLSStreamSession {
    /// Where a handshake stands.
    enum Progress {
        /// Complete: records flow.
        case done
        /// Waiting for the peer's bytes.
        case needsBytes
        /// Failed with this GnuTLS code, and why.
        case failed(Int32, String)
    }

    let raw: gnutls_session_t
    /// Kept alive as long as the session that uses it.
    private let credentials: TLSCredentials
    private var incoming: [UInt8] = []
    private var incomingOffset = 0
    private var outgoing: [UInt8] = []
    /// Clients: the name the certificate must be valid for, and how it is checked.
    private let verifiedName: String
    private let verification: CertificateVerification?
    /// Why the certificate check refused the peer, once it has.
    private(set) var verificationFailure: TLSVerificationFailure?
    /// External pre-shared keys: a client offers the first, a server accepts any of them.
    private let preSharedKeys: [TLSPreSharedKey]
    private var preSharedKeyCredentials: PreSharedKeyCredentials?

    /// A client session: SNI when `serverName` is a name, ALPN offer, versions, and the check
    /// of the server's certificate against `verifiedName`.
    init(
        clientWith options: NWProtocolQUIC.TLSOptions, alpn: [String], host: String
    ) throws {
        credentials = try .client(verification: options.certificateVerification)
        verifiedName = options.serverName ?? host
        verification = options.certificateVerification
        preSharedKeys = options.preSharedKeys
        var session: gnutls_session_t?
        try checkGnuTLS(gnutls_init(&session, UInt32(GNUTLS_CLIENT.rawValue) | UInt32(GNUTLS_NONBLOCK.rawValue)), "gnutls_init")
        raw = session!
        try configure(options: options, alpn: alpn, isServer: false)
        if !Self.isAddressLiteral(verifiedName) {
            try checkGnuTLS(gnutls_server_name_set(raw, GNUTLS_NAME_DNS, verifiedName, verifiedName.utf8.count), "gnutls_server_name_set")
        }
        gnutls_session_set_verify_function(raw, Self.verifyCertificate)
    }

    /// A server session presenting `credentials`, accepting `alpn` in its own order of preference.
    init(serverWith credentials: TLSCredentials, options: NWProtocolQUIC.TLSOptions, alpn: [String]) throws {
        self.credentials = credentials
        verifiedName = ""
        verification = nil
        preSharedKeys = options.preSharedKeys
        var session: gnutls_session_t?
        try checkGnuTLS(gnutls_init(&session, UInt32(GNUTLS_SERVER.rawValue) | UInt32(GNUTLS_NONBLOCK.rawValue)), "gnutls_init")
        raw = session!
        try configure(options: options, alpn: alpn, isServer: true)
    }

    deinit { gnutls_deinit(raw) }

    private func configure(options: NWProtocolQUIC.TLSOptions, alpn: [String], isServer: Bool) throws {
        var position: UnsafePointer<CChar>?
        try checkGnuTLS(gnutls_priority_set_direct(raw, Self.priority(options, server: isServer), &position), "gnutls_priority_set_direct")
        try checkGnuTLS(
            gnutls_credentials_set(raw, GNUTLS_CRD_CERTIFICATE, UnsafeMutableRawPointer(credentials.raw)), "gnutls_credentials_set"
        )
        gnutls_session_set_ptr(raw, Unmanaged.passUnretained(self).toOpaque())
        gnutls_transport_set_ptr(raw, Unmanaged.passUnretained(self).toOpaque())
        gnutls_transport_set_push_function(raw, Self.push)
        gnutls_transport_set_pull_function(raw, Self.pull)
        gnutls_transport_set_pull_timeout_function(raw, Self.pullTimeout)
        gnutls_handshake_set_timeout(raw, 0)
        if let offered = preSharedKeys.first {
            let psk = try isServer ? PreSharedKeyCredentials(serverLookup: Self.lookUpPreSharedKey) : PreSharedKeyCredentials(client: offered)
            try psk.attach(to: raw)
            preSharedKeyCredentials = psk
        }
        if !alpn.isEmpty {
            let alpnFlags = isServer ? UInt32(GNUTLS_ALPN_SERVER_PRECEDENCE.rawValue) : 0
            let names = alpn.map { Array($0.utf8) }
            var storage = names.flatMap { $0 }
            try storage.withUnsafeMutableBufferPointer { buffer in
                var datums: [gnutls_datum_t] = []
                var offset = 0
                for name in names {
                    datums.append(gnutls_datum_t(data: buffer.baseAddress! + offset, size: UInt32(name.count)))
                    offset += name.count
                }
                // GnuTLS copies the names.
                try checkGnuTLS(gnutls_alpn_set_protocols(raw, datums, UInt32(datums.count), alpnFlags), "gnutls_alpn_set_protocols")
            }
        }
    }

    /// GnuTLS's priority string for the allowed versions (TLS 1.2 and 1.3 unless bounded), with
    /// the PSK key exchanges first when the options carry pre-shared keys.
    static func priority(_ options: NWProtocolQUIC.TLSOptions, server: Bool) -> String {
        let base = (["NORMAL", "-VERS-ALL"] + allowedVersions(options).map { "+" + $0 }).joined(separator: ":")
        return options.preSharedKeys.isEmpty ? base : base + PreSharedKeyCredentials.priorityAddition(server: server)
    }

    /// GnuTLS's names of the versions the options allow.
    private static func allowedVersions(_ options: NWProtocolQUIC.TLSOptions) -> [String] {
        let all: [(tls_protocol_version_t, String)] = [
            (.TLSv10, "VERS-TLS1.0"), (.TLSv11, "VERS-TLS1.1"), (.TLSv12, "VERS-TLS1.2"), (.TLSv13, "VERS-TLS1.3"),
        ]
        let low = (options.minimumTLSVersion ?? .TLSv12).rawValue
        let high = (options.maximumTLSVersion ?? .TLSv13).rawValue
        return all.filter { $0.0.rawValue >= low && $0.0.rawValue <= high }.map(\.1)
    }

    /// The code a refused version bound is reported with (`GNUTLS_E_UNSUPPORTED_VERSION_PACKET`).
    static let unsupportedVersionCode = GNUTLS_E_UNSUPPORTED_VERSION_PACKET

    /// Whether the TLS versions asked for leave any that TLS over TCP can use.
    static func configurationProblem(_ options: NWProtocolQUIC.TLSOptions) -> String? {
        if options.minimumTLSVersion?.isDatagramTLS == true || options.maximumTLSVersion?.isDatagramTLS == true {
            return "DTLS versions cannot bound TLS over TCP"
        }
        if allowedVersions(options).isEmpty { return "the minimum TLS version is above the maximum" }
        return nil
    }

    /// Ciphertext read from the socket.
    func feed(_ bytes: UnsafeRawBufferPointer) {
        if incomingOffset == incoming.count {
            incoming.removeAll(keepingCapacity: true)
            incomingOffset = 0
        }
        incoming.append(contentsOf: bytes)
    }

    /// Ciphertext to write to the socket, taken out.
    func takeOutgoing() -> [UInt8] {
        defer { outgoing = [] }
        return outgoing
    }

    /// Runs the handshake as far as the bytes fed so far allow.
    func handshake() -> Progress {
        while true {
            let offset = incomingOffset
            let rc = gnutls_handshake(raw)
            if rc == GNUTLS_E_SUCCESS { return .done }
            if rc == GNUTLS_E_AGAIN {
                if hasUnreadBytes(since: offset) { continue }
                return .needsBytes
            }
            if rc == GNUTLS_E_INTERRUPTED || gnutls_error_is_fatal(rc) == 0 { continue }
            let reason = verificationFailure.map { "\($0)" } ?? gnutlsMessage(rc)
            return .failed(rc, reason)
        }
    }

    /// Encrypts `bytes` into records waiting in `takeOutgoing`.
    func encrypt(_ bytes: UnsafeRawBufferPointer) throws {
        var offset = 0
        while offset < bytes.count {
            let rc = gnutls_record_send(raw, bytes.baseAddress! + offset, bytes.count - offset)
            // The push function takes every byte, so EAGAIN cannot repeat: GnuTLS says it only
            // when a push fell short, and calling again flushes the record it kept.
            if rc == Int(GNUTLS_E_INTERRUPTED) || rc == Int(GNUTLS_E_AGAIN) { continue }
            if rc < 0 { throw TLSError.gnutlsFailure(function: "gnutls_record_send", code: Int32(rc)) }
            offset += rc
        }
    }

    /// Decrypts every whole record fed so far; true once the peer's close_notify arrived
    /// (RFC 8446 §6.1).
    func decrypt(into plaintext: inout [UInt8]) throws -> Bool {
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while true {
            let offset = incomingOffset
            let rc = chunk.withUnsafeMutableBytes { gnutls_record_recv(raw, $0.baseAddress, $0.count) }
            if rc > 0 {
                plaintext.append(contentsOf: chunk[..<rc])
                continue
            }
            if rc == 0 { return true }
            if rc == Int(GNUTLS_E_AGAIN) {
                if hasUnreadBytes(since: offset) { continue }
                return false
            }
            if rc == Int(GNUTLS_E_INTERRUPTED) || gnutls_error_is_fatal(Int32(rc)) == 0 { continue }
            throw TLSError.gnutlsFailure(function: "gnutls_record_recv", code: Int32(rc))
        }
    }

    /// Whether GnuTLS's EAGAIN came with ciphertext still unread, after a call that read some
    /// (from `offset`): call it again, or those records wait for the peer's next bytes.
    ///
    /// GnuTLS says EAGAIN not only when its pull finds nothing, but also after it has handled a
    /// post-handshake message such as a TLS 1.3 NewSessionTicket (RFC 8446 §4.6.1), leaving the
    /// records behind it unread. A server that sends two tickets and then a short reply would
    /// otherwise see the reply held back until it sent something else. A call that read nothing
    /// returns EAGAIN for good, so the loop ends.
    private func hasUnreadBytes(since offset: Int) -> Bool {
        incomingOffset != offset && incomingOffset < incoming.count
    }

    /// Sends close_notify (RFC 8446 §6.1) into `takeOutgoing`; the reading side stays open.
    func bye() {
        _ = gnutls_bye(raw, GNUTLS_SHUT_WR)
    }

    /// The ALPN protocol agreed (RFC 7301 §3.2), if any.
    var negotiatedALPN: String? { QuicTransport.negotiatedALPN(raw) }

    /// The version agreed, as Security names it.
    var negotiatedVersion: tls_protocol_version_t {
        switch gnutls_protocol_get_version(raw) {
        case GNUTLS_TLS1_0: return .TLSv10
        case GNUTLS_TLS1_1: return .TLSv11
        case GNUTLS_TLS1_2: return .TLSv12
        default: return .TLSv13
        }
    }

    /// The server name the client sent (SNI), as the server sees it, or the one a client verifies.
    var serverName: String? {
        if verification != nil { return verifiedName }
        var buffer = [CChar](repeating: 0, count: 256)
        var size = buffer.count
        var type: UInt32 = 0
        guard gnutls_server_name_get(raw, &buffer, &size, &type, 0) == 0 else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func isAddressLiteral(_ host: String) -> Bool {
        var storage = [UInt8](repeating: 0, count: 16)
        return inet_pton(AF_INET, host, &storage) == 1 || inet_pton(AF_INET6, host, &storage) == 1
    }

    private static func owner(_ pointer: UnsafeMutableRawPointer?) -> TLSStreamSession {
        Unmanaged<TLSStreamSession>.fromOpaque(pointer!).takeUnretainedValue()
    }

    private static let push: @convention(c) (gnutls_transport_ptr_t?, UnsafeRawPointer?, Int) -> Int = { pointer, data, count in
        let session = owner(pointer)
        session.outgoing.append(contentsOf: UnsafeRawBufferPointer(start: data, count: count))
        return count
    }

    private static let pull: @convention(c) (gnutls_transport_ptr_t?, UnsafeMutableRawPointer?, Int) -> Int = { pointer, data, count in
        let session = owner(pointer)
        let available = session.incoming.count - session.incomingOffset
        guard available > 0, let data else {
            gnutls_transport_set_errno(session.raw, EAGAIN)
            return -1
        }
        let taken = min(available, count)
        session.incoming.withUnsafeBytes { bytes in
            data.copyMemory(from: bytes.baseAddress! + session.incomingOffset, byteCount: taken)
        }
        session.incomingOffset += taken
        return taken
    }

    private static let pullTimeout: @convention(c) (gnutls_transport_ptr_t?, UInt32) -> Int32 = { pointer, _ in
        let session = owner(pointer)
        return session.incoming.count > session.incomingOffset ? 1 : 0
    }

    /// A server's answer to the identity a client offered: the key added under it, if any.
    private static let lookUpPreSharedKey: PreSharedKeyCredentials.Lookup = { raw, identity, key in
        guard let raw, let pointer = gnutls_session_get_ptr(raw) else { return -1 }
        return PreSharedKeyCredentials.answer(identity: identity, from: owner(pointer).preSharedKeys, into: key)
    }

    /// The client's certificate check, inside the handshake (GnuTLS's verify function).
    private static let verifyCertificate: @convention(c) (gnutls_session_t?) -> Int32 = { raw in
        guard let raw, let pointer = gnutls_session_get_ptr(raw) else { return GNUTLS_E_CERTIFICATE_ERROR }
        let session = owner(pointer)
        guard let verification = session.verification else { return 0 }
        if let failure = verifyPeerCertificate(session: raw, serverName: session.verifiedName, verification: verification) {
            session.verificationFailure = failure
            return GNUTLS_E_CERTIFICATE_ERROR
        }
        return 0
    }
}
