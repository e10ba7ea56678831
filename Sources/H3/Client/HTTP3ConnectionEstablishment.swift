/// How an HTTP/3 connection came to be, for curl's `-w` figures (`time_namelookup`,
/// `time_connect`, `remote_ip`, …): when it began, when its host name had resolved, when its
/// handshake completed, and the addresses it used then. Made once per connection, when its
/// handshake completes, and shared by every response on it.
public final class HTTP3ConnectionEstablishment: Sendable {
    /// When the first request that needed the connection began it.
    public let startedAt: ContinuousClock.Instant
    /// When the host name had resolved and the first address was tried.
    public let resolvedAt: ContinuousClock.Instant
    /// When the QUIC handshake, and with it TLS, completed (RFC 9001 §4.1.1).
    public let connectedAt: ContinuousClock.Instant
    /// The server's IP address, as the handshake completed.
    public let remoteAddress: String
    /// The server's UDP port.
    public let remotePort: UInt16
    /// The local IP address the connection used.
    public let localAddress: String
    /// The local UDP port.
    public let localPort: UInt16

    init(
        startedAt: ContinuousClock.Instant, resolvedAt: ContinuousClock.Instant, connectedAt: ContinuousClock.Instant,
        remoteAddress: String, remotePort: UInt16, localAddress: String, localPort: UInt16
    ) {
        (self.startedAt, self.resolvedAt, self.connectedAt) = (startedAt, resolvedAt, connectedAt)
        (self.remoteAddress, self.remotePort, self.localAddress, self.localPort) = (remoteAddress, remotePort, localAddress, localPort)
    }
}
