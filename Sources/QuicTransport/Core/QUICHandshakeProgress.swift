/// What a connection's handshake and TLS session have settled, and when: whether it resumed a
/// session and ran 0-RTT (RFC 9001 §4.6), how its certificate check failed, and the 1-RTT key
/// updates since (RFC 9001 §6).
struct QUICHandshakeProgress {
    /// When the connection was created and when its handshake completed, on the caller's clock.
    var startedAt: UInt64
    var completedAt: UInt64?
    /// The smoothed RTT when the handshake completed.
    var rtt: Duration = .zero
    /// Clients: the resolution and attempts before this one, from the connector.
    var attempts = QUICEstablishmentAttempts()

    /// Whether the handshake resumed a session from a ticket (RFC 8446 §2.2).
    var wasResumed = false
    /// Clients: 0-RTT was attempted (a ticket with transport parameters, and early data allowed),
    /// and whether the server took it.
    var earlyDataAttempted = false
    var earlyDataAccepted = false
    /// Clients: why the server's certificate was refused, when it was.
    var verificationFailure: TLSVerificationFailure?

    /// 1-RTT key derivations by ngtcp2 so far, and whether we asked for the next update.
    var keyDerivations = 0
    var localKeyUpdateRequested = false

    /// Servers: keep the endpoint's ticket key and anti-replay filter alive as long as this
    /// session may use them.
    var ticketKey: TLSSessionTicketKey?
    var antiReplay: TLSAntiReplay?

    init(startedAt: UInt64) {
        self.startedAt = startedAt
    }
}
