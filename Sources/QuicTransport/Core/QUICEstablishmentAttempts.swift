/// What happened before a client connection's successful attempt, for the establishment
/// report's `attemptStartedAfterInterval`, `previousAttemptCount` and `resolutions`: the
/// connector records it (IO/QUICClientConnector) and hands it to each attempt's core. A server's
/// connections, and cores made directly, keep the empty value: no resolution, no earlier attempt.
package struct QUICEstablishmentAttempts: Sendable, Equatable {
    /// One name resolution (getaddrinfo) and what it returned.
    package struct Resolution: Sendable, Equatable {
        /// How long the query took, in nanoseconds on the connection clock.
        package var duration: UInt64
        /// The addresses it returned that the connection may use, in the resolver's order.
        package var addresses: [QUICSocketAddress]
    }

    /// When the owner started connecting (`start(queue:)`), on the connection clock; nil when
    /// the connection did not come from a connector.
    package var startedAt: UInt64?
    /// The resolution of the host name; nil when the host was a numeric address, which is not
    /// resolved.
    package var resolution: Resolution?
    /// Attempts made on earlier addresses before this one: refused, unreachable or silent.
    package var previousAttemptCount = 0

    package init() {}
}
