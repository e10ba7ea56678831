/// What a QUIC socket asks of IP and UDP below it: the settings of Network.framework's `IP` and
/// `UDP` protocol-stack entries (and of the classic `NWProtocolIP.Options` and
/// `NWProtocolUDP.Options`), as plain data. The IO layer turns them into socket options
/// (`settings(isIPv6:)`) before a socket binds or connects.
package struct QUICSocketOptions: Sendable, Equatable {
    /// Which IP versions a socket may use.
    package enum IPVersion: Sendable, Equatable {
        case any, v4, v6
    }

    /// Which kind of IPv6 source address a client prefers (RFC 8981 temporary addresses).
    package enum AddressPreference: Sendable, Equatable {
        /// The system's choice.
        case `default`
        /// Temporary (privacy) addresses.
        case temporary
        /// Stable (public) addresses.
        case stable
    }

    /// Addresses of other versions are skipped when connecting, and a listener binds this
    /// version's wildcard address.
    package var ipVersion: IPVersion = .any
    /// The IPv4 TTL or IPv6 hop limit of sent packets; nil keeps the system's default.
    package var hopLimit: UInt8?
    /// Sets the Don't Fragment bit, which RFC 9000 §14 requires of QUIC over IPv4 wherever it is
    /// possible: packets too large for the path are lost, which path MTU discovery
    /// (RFC 9000 §14.3) notices, rather than fragmented. On by default.
    package var disablesFragmentation = true
    /// IPv6 paths send no datagram larger than the IPv6 minimum MTU, 1280 bytes
    /// (RFC 8200 §5): QUIC payloads stop at 1232.
    package var usesMinimumMTU = false
    /// IPv4 datagrams go without a UDP checksum (RFC 768; RFC 1122 §4.1.3.4 lets the sender
    /// omit it). QUIC's AEAD still protects every packet; IPv6 always has checksums (RFC 8200 §8.1).
    package var omitsChecksum = false
    /// Which kind of IPv6 source address to prefer.
    package var addressPreference: AddressPreference = .default
    /// Other sockets may bind the same address and port (`SO_REUSEADDR`, `SO_REUSEPORT`), as
    /// Network.framework's `allowLocalEndpointReuse`.
    package var reusesAddress = false
    /// The interface the socket is bound to (`SO_BINDTODEVICE`); nil: any.
    package var interfaceName: String?
    /// Interfaces a client's path must not leave by, by name; an attempt whose local address
    /// belongs to one of them is refused.
    package var prohibitedInterfaceNames: Set<String> = []
    /// The DiffServ code point of sent packets (RFC 2474 §3), written into the IPv4 TOS or IPv6
    /// Traffic Class byte above its two ECN bits; 0 leaves the default.
    package var dscp: UInt8 = 0

    package init() {}

    /// The largest UDP payload a path of this version may carry: `configured`, or 1232 on IPv6
    /// with `usesMinimumMTU` (1280 less the 40-byte IPv6 and 8-byte UDP headers).
    package func maximumUDPPayload(_ configured: Int, isIPv6: Bool) -> Int {
        usesMinimumMTU && isIPv6 ? min(configured, 1232) : configured
    }

    /// Whether an address of this family may be used.
    package func allows(isIPv6: Bool) -> Bool {
        switch ipVersion {
        case .any: return true
        case .v4: return !isIPv6
        case .v6: return isIPv6
        }
    }
}
