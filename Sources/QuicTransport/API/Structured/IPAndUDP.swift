/// UDP as an entry of a protocol stack, as Network.framework's 2025 `UDP`: QUIC runs over it,
/// `QUIC(alpn: ["x"]) { UDP { IP().version(.v6) } }`. Only needed to change UDP's or IP's
/// settings.
public struct UDP: Sendable {
    /// Whether IPv4 datagrams go without a UDP checksum.
    private var omitsChecksum = false
    /// The IP settings below UDP.
    private let ip: IP

    /// UDP over `builder`'s IP, `IP()` by default.
    public init(@ProtocolStackBuilder<IP> _ builder: () -> IP = { IP() }) {
        ip = builder()
    }

    /// Skips computing UDP checksums on IPv4 (`SO_NO_CHECK`; RFC 768 lets the sender omit it),
    /// as Apple's `noChecksumPreferred(_:)`. QUIC's AEAD still protects every packet; IPv6 always
    /// has checksums (RFC 8200 §8.1).
    public func noChecksumPreferred(_ noChecksum: Bool) -> UDP {
        var copy = self
        copy.omitsChecksum = noChecksum
        return copy
    }

    /// Writes these settings, and IP's, into a classic protocol stack.
    func apply(to stack: NWParameters.ProtocolStack) {
        if let options = stack.internetProtocol as? NWProtocolIP.Options { ip.apply(to: options) }
        (stack.transportProtocol as? NWProtocolUDP.Options)?.preferNoChecksum = omitsChecksum
    }
}

/// IP as an entry of a protocol stack, as Network.framework's 2025 `IP`; needed only to change
/// its settings. Each modifier returns a changed copy.
///
/// Apple's `receiveTimeCalculated(_:)` is not offered: nothing here reports receive times.
public struct IP: Sendable {
    private var version: NWProtocolIP.Options.Version = .any
    private var hopLimit: UInt8 = 0
    private var useMinimumMTU = false
    private var disableFragmentation = true
    private var localAddressPreference: NWProtocolIP.Options.AddressPreference = .default

    /// IP with the defaults: either version, the system's hop limit, Don't Fragment set.
    public init() {}

    /// Requires one IP version: a client skips addresses of the other, and a listener without a
    /// local endpoint binds this version's wildcard address.
    public func version(_ version: NWProtocolIP.Options.Version) -> IP { with { $0.version = version } }

    /// The IPv4 TTL or IPv6 hop limit of sent packets (`IP_TTL`, `IPV6_UNICAST_HOPS`); 0 keeps
    /// the system's default.
    public func hopLimit(_ limit: UInt8) -> IP { with { $0.hopLimit = limit } }

    /// On IPv6, sends no datagram larger than the minimum MTU, 1280 bytes (RFC 8200 §5); QUIC
    /// payloads stop at 1232. No effect on IPv4.
    public func minimumMTU(_ useMinimumMTU: Bool) -> IP { with { $0.useMinimumMTU = useMinimumMTU } }

    /// Sets Don't Fragment on IPv4 and never fragments locally on IPv6. On by default for QUIC,
    /// which RFC 9000 §14 requires wherever possible; `false` lets the kernel fragment.
    public func fragmentationDisabled(_ dontFragment: Bool) -> IP { with { $0.disableFragmentation = dontFragment } }

    /// Which kind of IPv6 source address to prefer (RFC 5014).
    public func localAddressPreference(_ preference: NWProtocolIP.Options.AddressPreference) -> IP {
        with { $0.localAddressPreference = preference }
    }

    /// Writes these settings into the classic options, which lower them for the sockets.
    func apply(to options: NWProtocolIP.Options) {
        options.version = version
        options.hopLimit = hopLimit
        options.useMinimumMTU = useMinimumMTU
        options.disableFragmentation = disableFragmentation
        options.localAddressPreference = localAddressPreference
    }

    private func with(_ change: (inout IP) -> Void) -> IP {
        var copy = self
        change(&copy)
        return copy
    }
}
