
/// IP below QUIC: the options of Network.framework's `NWProtocolIP`, which a QUIC stack carries
/// in `NWParameters.defaultProtocolStack.internetProtocol`.
// @unchecked Sendable: a namespace with no stored instance state, as Apple's class is.
public final class NWProtocolIP: @unchecked Sendable {
    /// IP's definition, matching Apple's `NWProtocolIP.definition`.
    public static let definition = NWProtocolDefinition(name: "ip")

    /// IP options, set before a group, connection or listener is made from the parameters.
    ///
    /// Apple's `shouldCalculateReceiveTime` is not offered: nothing here reports receive times.
    // @unchecked Sendable: a configuration object filled in on one thread before use, as
    // Network.framework's; groups and listeners read it once when they are made.
    public final class Options: NWProtocolOptions, @unchecked Sendable {
        /// The IP versions a connection may use, matching Apple's `NWProtocolIP.Options.Version`.
        public enum Version: Hashable, Sendable {
            /// Either version; a client tries the resolver's addresses in order.
            case any
            /// IPv4 only: a client skips IPv6 addresses, and a listener without a required
            /// local endpoint binds `0.0.0.0`.
            case v4
            /// IPv6 only: a client skips IPv4 addresses, and a listener without a required
            /// local endpoint binds `::`.
            case v6
        }

        /// Which kind of IPv6 source address to prefer, matching Apple's
        /// `NWProtocolIP.Options.AddressPreference`.
        public enum AddressPreference: Hashable, Sendable {
            /// The system's choice.
            case `default`
            /// Temporary (privacy) addresses (RFC 8981); `IPV6_PREFER_SRC_TMP` (RFC 5014).
            case temporary
            /// Stable addresses; `IPV6_PREFER_SRC_PUBLIC` (RFC 5014).
            case stable
        }

        /// A required IP version that excludes the other.
        public var version: Version = .any
        /// The IPv4 TTL or IPv6 hop limit of sent packets (`IP_TTL`, `IPV6_UNICAST_HOPS`); 0
        /// keeps the system's default.
        public var hopLimit: UInt8 = 0
        /// IPv6 paths send no datagram larger than 1280 bytes, the IPv6 minimum MTU
        /// (RFC 8200 §5); no effect on IPv4.
        public var useMinimumMTU = false
        /// Sets the Don't Fragment bit on IPv4 and never fragments locally on IPv6. On by
        /// default, unlike Apple's generic IP options: RFC 9000 §14 requires it of QUIC wherever
        /// possible, and QUIC's path MTU discovery (RFC 9000 §14.3) depends on it.
        public var disableFragmentation = true
        /// Which kind of IPv6 source address to prefer.
        public var localAddressPreference: AddressPreference = .default

        /// Default IP options: either version, system hop limit, Don't Fragment set.
        override public init() {}

        /// Writes these settings into the sockets' options (UDP's checksum setting aside).
        func apply(to socket: inout QUICSocketOptions) {
            switch version {
            case .any: socket.ipVersion = .any
            case .v4: socket.ipVersion = .v4
            case .v6: socket.ipVersion = .v6
            }
            socket.hopLimit = hopLimit == 0 ? nil : hopLimit
            socket.usesMinimumMTU = useMinimumMTU
            socket.disablesFragmentation = disableFragmentation
            switch localAddressPreference {
            case .default: socket.addressPreference = .default
            case .temporary: socket.addressPreference = .temporary
            case .stable: socket.addressPreference = .stable
            }
        }
    }
}

/// UDP below QUIC: the options of Network.framework's `NWProtocolUDP`, which a QUIC stack
/// carries in `NWParameters.defaultProtocolStack.transportProtocol`.
// @unchecked Sendable: a namespace with no stored instance state, as Apple's class is.
public final class NWProtocolUDP: @unchecked Sendable {
    /// UDP's definition, matching Apple's `NWProtocolUDP.definition`.
    public static let definition = NWProtocolDefinition(name: "udp")

    /// UDP options, set before a group, connection or listener is made from the parameters.
    // @unchecked Sendable: a configuration object filled in on one thread before use.
    public final class Options: NWProtocolOptions, @unchecked Sendable {
        /// IPv4 datagrams go without a UDP checksum (`SO_NO_CHECK`; RFC 768 lets the sender omit
        /// it). QUIC's AEAD still protects every packet. No effect on IPv6, where the checksum is
        /// mandatory (RFC 8200 §8.1).
        public var preferNoChecksum = false

        /// Default UDP options: checksums on.
        override public init() {}
    }
}

extension NWParameters {
    /// What the stack's IP and UDP options, and the parameters' interface rules, reuse and
    /// service class, ask of the sockets.
    package var socketOptions: QUICSocketOptions {
        var socket = QUICSocketOptions()
        _ = pathSettings.apply(to: &socket)
        (defaultProtocolStack.internetProtocol as? NWProtocolIP.Options)?.apply(to: &socket)
        socket.omitsChecksum = (defaultProtocolStack.transportProtocol as? NWProtocolUDP.Options)?.preferNoChecksum ?? false
        return socket
    }
}
