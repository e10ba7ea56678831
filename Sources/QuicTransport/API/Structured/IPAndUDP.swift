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

    /// What these settings ask of the sockets.
    var socketOptions: QUICSocketOptions {
        var options = ip.socketOptions
        options.omitsChecksum = omitsChecksum
        return options
    }
}

/// IP as an entry of a protocol stack, as Network.framework's 2025 `IP`; needed only to change
/// its settings. Each modifier returns a changed copy.
///
/// Apple's `receiveTimeCalculated(_:)` is not offered: nothing here reports receive times.
public struct IP: Sendable {
    private var options = QUICSocketOptions()

    /// IP with the defaults: either version, the system's hop limit, Don't Fragment set.
    public init() {}

    /// Requires one IP version: a client skips addresses of the other, and a listener without a
    /// local endpoint binds this version's wildcard address.
    public func version(_ version: NWProtocolIP.Options.Version) -> IP {
        with { $0.ipVersion = version.socketVersion }
    }

    /// The IPv4 TTL or IPv6 hop limit of sent packets (`IP_TTL`, `IPV6_UNICAST_HOPS`); 0 keeps
    /// the system's default.
    public func hopLimit(_ limit: UInt8) -> IP { with { $0.hopLimit = limit == 0 ? nil : limit } }

    /// On IPv6, sends no datagram larger than the minimum MTU, 1280 bytes (RFC 8200 §5); QUIC
    /// payloads stop at 1232. No effect on IPv4.
    public func minimumMTU(_ useMinimumMTU: Bool) -> IP { with { $0.usesMinimumMTU = useMinimumMTU } }

    /// Sets Don't Fragment on IPv4 and never fragments locally on IPv6. On by default for QUIC,
    /// which RFC 9000 §14 requires wherever possible; `false` lets the kernel fragment.
    public func fragmentationDisabled(_ dontFragment: Bool) -> IP { with { $0.disablesFragmentation = dontFragment } }

    /// Which kind of IPv6 source address to prefer (RFC 5014).
    public func localAddressPreference(_ preference: NWProtocolIP.Options.AddressPreference) -> IP {
        with { $0.addressPreference = preference.socketPreference }
    }

    /// What these settings ask of the sockets.
    var socketOptions: QUICSocketOptions { options }

    private func with(_ change: (inout QUICSocketOptions) -> Void) -> IP {
        var copy = self
        change(&copy.options)
        return copy
    }
}
