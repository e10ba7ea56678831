import CQuicShims
import QuicTransport

#if canImport(Glibc)
import Glibc
#endif

/// Test-only: runs a real TLS 1.3 handshake between two GnuTLS sessions over in-memory byte queues.
enum TLSHandshakeHarness {
    static let priority = "NORMAL:-VERS-ALL:+VERS-TLS1.3:%DISABLE_TLS13_COMPAT_MODE"

    struct Outcome {
        /// Final `gnutls_handshake` results (0 = success).
        var clientResult: Int32
        var serverResult: Int32
        /// What `verifyPeerCertificate` returned inside the client's verify callback (nil = accepted).
        var failure: TLSVerificationFailure?
        var verifyCallbackRan: Bool
        /// The negotiated protocol version (meaningful on success).
        var version: gnutls_protocol_t

        var succeeded: Bool { clientResult == 0 && serverResult == 0 }
    }

    /// One side of the connection: its session and the bytes its peer has sent it.
    private final class Endpoint {
        let session: gnutls_session_t
        let credentials: TLSCredentials  // must outlive the session
        var inbox: [UInt8] = []
        unowned(unsafe) var peer: Endpoint?

        init(client: Bool, credentials: TLSCredentials) throws {
            self.credentials = credentials
            var handle: gnutls_session_t?
            let flags = UInt32(client ? GNUTLS_CLIENT : GNUTLS_SERVER) | UInt32(GNUTLS_NONBLOCK)
            try check(gnutls_init(&handle, flags), "gnutls_init")
            session = handle!
            try check(gnutls_priority_set_direct(session, priority, nil), "gnutls_priority_set_direct")
            try check(
                gnutls_credentials_set(session, GNUTLS_CRD_CERTIFICATE, UnsafeMutableRawPointer(credentials.raw)),
                "gnutls_credentials_set")
            gnutls_transport_set_ptr(session, Unmanaged.passUnretained(self).toOpaque())
            gnutls_transport_set_push_function(session) { transport, data, size in
                let me = Unmanaged<Endpoint>.fromOpaque(transport!).takeUnretainedValue()
                me.peer!.inbox.append(contentsOf: UnsafeRawBufferPointer(start: data, count: size))
                return size
            }
            gnutls_transport_set_pull_function(session) { transport, data, size in
                let me = Unmanaged<Endpoint>.fromOpaque(transport!).takeUnretainedValue()
                guard !me.inbox.isEmpty else {
                    gnutls_transport_set_errno(me.session, EAGAIN)
                    return -1
                }
                let count = min(size, me.inbox.count)
                me.inbox.withUnsafeBytes { data!.copyMemory(from: $0.baseAddress!, byteCount: count) }
                me.inbox.removeFirst(count)
                return count
            }
            gnutls_transport_set_pull_timeout_function(session) { transport, _ in
                let me = Unmanaged<Endpoint>.fromOpaque(transport!).takeUnretainedValue()
                return me.inbox.isEmpty ? 0 : 1
            }
        }

        deinit { gnutls_deinit(session) }
    }

    /// What the client's verify callback needs, reached through `gnutls_session_get_ptr`.
    private final class VerifyContext {
        let serverName: String
        let verification: CertificateVerification
        var failure: TLSVerificationFailure?
        var ran = false

        init(serverName: String, verification: CertificateVerification) {
            self.serverName = serverName
            self.verification = verification
        }
    }

    /// Handshakes a client that verifies with `verification` against a server presenting `certificate`.
    static func run(
        certificate: SelfSignedCertificate, serverName: String, verification: CertificateVerification
    ) throws -> Outcome {
        let serverCredentials = try TLSCredentials.server(
            certificateChainPEM: certificate.certificatePEM, privateKeyPEM: certificate.privateKeyPEM)
        let clientCredentials = try TLSCredentials.client(verification: verification)
        let server = try Endpoint(client: false, credentials: serverCredentials)
        let client = try Endpoint(client: true, credentials: clientCredentials)
        client.peer = server
        server.peer = client

        if !serverName.contains(":") && !serverName.allSatisfy({ $0.isNumber || $0 == "." }) {
            try check(gnutls_server_name_set(client.session, GNUTLS_NAME_DNS, serverName, serverName.utf8.count),
                      "gnutls_server_name_set")
        }
        let context = VerifyContext(serverName: serverName, verification: verification)
        gnutls_session_set_ptr(client.session, Unmanaged.passUnretained(context).toOpaque())
        gnutls_session_set_verify_function(client.session) { session in
            let context = Unmanaged<VerifyContext>.fromOpaque(gnutls_session_get_ptr(session)!).takeUnretainedValue()
            context.ran = true
            context.failure = verifyPeerCertificate(
                session: session!, serverName: context.serverName, verification: context.verification)
            return context.failure == nil ? 0 : GNUTLS_E_CERTIFICATE_ERROR
        }

        var clientResult = GNUTLS_E_AGAIN
        var serverResult = GNUTLS_E_AGAIN
        for _ in 0..<100 {
            if clientResult != 0 { clientResult = gnutls_handshake(client.session) }
            if serverResult != 0 { serverResult = gnutls_handshake(server.session) }
            let fatal = gnutls_error_is_fatal(clientResult) != 0 || gnutls_error_is_fatal(serverResult) != 0
            if fatal || (clientResult == 0 && serverResult == 0) { break }
        }
        return withExtendedLifetime((client, server, context)) {
            Outcome(clientResult: clientResult, serverResult: serverResult,
                    failure: context.failure, verifyCallbackRan: context.ran,
                    version: gnutls_protocol_get_version(client.session))
        }
    }

    private static func check(_ rc: Int32, _ function: String) throws {
        if rc < 0 { throw TLSError.gnutlsFailure(function: function, code: rc) }
    }
}
