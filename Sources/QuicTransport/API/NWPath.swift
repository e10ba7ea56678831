#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The route a tunnel's packets take, as Network.framework's `NWPath`: its status, its two
/// endpoints and the interface it leaves by.
///
/// A tunnel reports a path once its handshake completes and again each time a migration
/// (RFC 9000 §9) moves it to a validated new path: its own `migrate()`, or, on a server, a
/// client that moved or was rebound by a NAT, and on a client when it becomes unusable and
/// usable again. Linux has no equivalent of Apple's path evaluator here: a client's path turns
/// `.unsatisfied` when the kernel reports the route to the server gone (a send fails with
/// ENETUNREACH or EHOSTUNREACH, or ICMP says so) and `.satisfied` again when the server is
/// heard from; nothing is expensive or constrained, and interfaces come from the local address
/// (`getifaddrs(3)`).
public struct NWPath: Equatable, Sendable, CustomDebugStringConvertible {
    /// Whether connections can use the path, as Apple's `NWPath.Status`.
    public enum Status: Equatable, Sendable {
        /// Usable: the tunnel sends and receives on it.
        case satisfied
        /// Not usable.
        case unsatisfied
        /// Usable once a connection is made; kept for Apple's exhaustive switches.
        case requiresConnection
    }

    /// Why a path is unsatisfied, as Apple's `NWPath.UnsatisfiedReason`.
    public enum UnsatisfiedReason: Equatable, Sendable {
        /// No reason is known, or the path is satisfied.
        case notAvailable
        /// Kept for Apple's exhaustive switches; Linux has no such policy.
        case cellularDenied
        /// Kept for Apple's exhaustive switches; Linux has no such policy.
        case wifiDenied
        /// Kept for Apple's exhaustive switches; Linux has no such policy.
        case localNetworkDenied
        /// Kept for Apple's exhaustive switches; Linux has no such policy.
        case vpnInactive
    }

    /// Whether the tunnel can use the path.
    public let status: Status
    /// Why it cannot, when `status` is `.unsatisfied`.
    public let unsatisfiedReason: UnsatisfiedReason
    /// The tunnel's local address and port on this path.
    public let localEndpoint: NWEndpoint?
    /// The peer's address and port on this path.
    public let remoteEndpoint: NWEndpoint?
    /// The interface whose address is the local endpoint's; empty when the socket is bound to
    /// the wildcard address.
    public let availableInterfaces: [NWInterface]
    /// Whether the path uses IPv4.
    public let supportsIPv4: Bool
    /// Whether the path uses IPv6.
    public let supportsIPv6: Bool
    /// Always false: Linux does not mark interfaces as metered.
    public var isExpensive: Bool { false }
    /// Always false: Linux has no Low Data Mode.
    public var isConstrained: Bool { false }
    /// Always true: names are resolved with the system resolver.
    public var supportsDNS: Bool { true }
    /// Empty: routes are not inspected.
    public var gateways: [NWEndpoint] { [] }

    /// Whether the path leaves through an interface of `type`.
    public func usesInterfaceType(_ type: NWInterface.InterfaceType) -> Bool {
        availableInterfaces.contains { $0.type == type }
    }

    /// The status, the endpoints and the interface, for logs.
    public var debugDescription: String {
        let local = localEndpoint.map { "\($0)" } ?? "?"
        let remote = remoteEndpoint.map { "\($0)" } ?? "?"
        let interfaces = availableInterfaces.map(\.name).joined(separator: ",")
        return "\(status) \(local) -> \(remote)" + (interfaces.isEmpty ? "" : " via \(interfaces)")
    }

    /// The path between two socket addresses: satisfied, or unsatisfied while the kernel reports
    /// the route to the peer gone.
    init(_ path: QUICPath, isSatisfied: Bool = true) {
        status = isSatisfied ? .satisfied : .unsatisfied
        unsatisfiedReason = .notAvailable
        localEndpoint = NWEndpoint(address: path.local)
        remoteEndpoint = NWEndpoint(address: path.remote)
        availableInterfaces = NWInterface.owning(path.local).map { [$0] } ?? []
        supportsIPv4 = path.remote.family == AF_INET
        supportsIPv6 = path.remote.family == AF_INET6
    }
}

/// A network interface, as Network.framework's `NWInterface`.
public struct NWInterface: Hashable, Sendable {
    /// What kind of link an interface is, as Apple's `NWInterface.InterfaceType`.
    public enum InterfaceType: Hashable, Sendable {
        /// Anything not listed below (tunnels, bridges, virtual links).
        case other
        /// A wireless LAN: the kernel lists it under `/sys/class/net/NAME/wireless`.
        case wifi
        /// A cellular modem (`wwan*`, `rmnet*`).
        case cellular
        /// Wired Ethernet (`eth*`, `en*`).
        case wiredEthernet
        /// The loopback interface.
        case loopback
    }

    /// The interface's name, for example `eth0`.
    public let name: String
    /// What kind of link it is, judged from its name and `/sys/class/net`.
    public let type: InterfaceType
    /// The kernel's index for it (`if_nametoindex(3)`), 0 when there is no such interface.
    public let index: Int

    /// The interface called `name`. Our addition: Apple's interfaces come from the system, not
    /// an initialiser.
    public init(name: String) {
        self.name = name
        self.index = Int(if_nametoindex(name))
        self.type = Self.type(ofInterfaceNamed: name)
    }

    static func type(ofInterfaceNamed name: String) -> InterfaceType {
        if name == "lo" { return .loopback }
        var info = stat()
        if stat("/sys/class/net/\(name)/wireless", &info) == 0 || name.hasPrefix("wl") { return .wifi }
        if name.hasPrefix("wwan") || name.hasPrefix("rmnet") { return .cellular }
        if name.hasPrefix("eth") || name.hasPrefix("en") { return .wiredEthernet }
        return .other
    }

    /// The interface that holds `address`, found with `getifaddrs(3)`; nil for a wildcard or an
    /// address no interface holds.
    static func owning(_ address: QUICSocketAddress) -> NWInterface? {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return nil }
        defer { freeifaddrs(list) }
        for entry in sequence(first: first, next: { $0.pointee.ifa_next }) {
            guard let candidate = entry.pointee.ifa_addr, Int32(candidate.pointee.sa_family) == address.family,
                let name = entry.pointee.ifa_name
            else { continue }
            let length = address.family == AF_INET6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size
            guard QUICSocketAddress(candidate, length: socklen_t(length)).host == address.host else { continue }
            return NWInterface(name: String(cString: name))
        }
        return nil
    }
}
