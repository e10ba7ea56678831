#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension NWParameters {
    /// How urgent a connection's traffic is, as Network.framework's `NWParameters.ServiceClass`.
    ///
    /// Linux note: each class marks every packet's DiffServ code point (RFC 2474) in the IPv4
    /// TOS or IPv6 Traffic Class byte, with the code points of Apple's kernel (XNU's
    /// `netsvctype_dscp_map`, after RFC 4594's service classes). Apple marks them only on
    /// networks that ask for it (QoS Fastlane); here they are always marked, and routers that do
    /// not trust the marking clear it.
    public enum ServiceClass: Hashable, Sendable {
        /// Default traffic: no marking (DF, code point 0).
        case bestEffort
        /// Delay-tolerant bulk traffic such as backups: AF11 (10), RFC 4594's high-throughput
        /// data.
        case background
        /// Video calls: AF41 (34), RFC 4594's multimedia conferencing.
        case interactiveVideo
        /// Voice calls: EF (46), RFC 3246 expedited forwarding.
        case interactiveVoice
        /// Interactive data a user waits for: AF21 (18), RFC 4594's low-latency data.
        case responsiveData
        /// Call set-up and tear-down: CS3 (24).
        case signaling

        /// The DiffServ code point, 0 to 63.
        var dscp: UInt8 {
            switch self {
            case .bestEffort: return 0
            case .background: return 10
            case .interactiveVideo: return 34
            case .interactiveVoice: return 46
            case .responsiveData: return 18
            case .signaling: return 24
            }
        }
    }

    /// How a connection may use several interfaces at once, as Network.framework's
    /// `NWParameters.MultipathServiceType`. Linux note: stored and not used; QUIC here keeps one
    /// path at a time (migration, RFC 9000 §9, moves it) and Linux has no Multipath TCP
    /// service types for UDP.
    public enum MultipathServiceType: Hashable, Sendable {
        /// One interface.
        case disabled
        /// Another interface only when the first is lost.
        case handover
        /// Other interfaces when the first suffers loss or delay.
        case interactive
        /// All interfaces at once, for bandwidth.
        case aggregate
    }

    /// Whether expired DNS answers may be used while fresh ones are fetched, as
    /// Network.framework's `NWParameters.ExpiredDNSBehavior`. Linux note: stored and not used;
    /// names are resolved with `getaddrinfo(3)`, whose cache (if any, such as nscd or
    /// systemd-resolved) decides.
    public enum ExpiredDNSBehavior: Hashable, Sendable {
        /// The system decides.
        case systemDefault
        /// Expired answers may be used while a fresh query runs.
        case allow
        /// Only fresh answers.
        case prohibit
    }

    /// The members of Apple's `NWParameters` that choose paths and mark packets, as set.
    struct PathSettings {
        var includePeerToPeer = false
        var allowLocalEndpointReuse = false
        var requiredInterfaceType = NWInterface.InterfaceType.other
        var prohibitedInterfaceTypes: [NWInterface.InterfaceType]?
        var requiredInterface: NWInterface?
        var prohibitedInterfaces: [NWInterface]?
        var serviceClass = ServiceClass.bestEffort
        var multipathServiceType = MultipathServiceType.disabled
        var expiredDNSBehavior = ExpiredDNSBehavior.systemDefault
        var preferNoProxies = false
        var prohibitExpensivePaths = false
        var prohibitConstrainedPaths = false
    }

    /// Whether peer-to-peer links may be used, as Apple's `includePeerToPeer`. Linux note:
    /// stored and not used; Linux has no AWDL or other peer-to-peer interfaces of Apple's kind.
    public var includePeerToPeer: Bool {
        get { pathSettings.includePeerToPeer }
        set { pathSettings.includePeerToPeer = newValue }
    }

    /// Whether other sockets may bind the same local address and port, as Apple's
    /// `allowLocalEndpointReuse`. Linux note: sets `SO_REUSEADDR` and `SO_REUSEPORT` on the
    /// sockets, so two listeners that both allow it bind one port; the kernel then spreads new
    /// clients over them by their addresses and ports.
    public var allowLocalEndpointReuse: Bool {
        get { pathSettings.allowLocalEndpointReuse }
        set { pathSettings.allowLocalEndpointReuse = newValue }
    }

    /// The kind of interface connections and listeners must use, as Apple's
    /// `requiredInterfaceType`; `.other`, the default, requires none. Linux note: the sockets
    /// are bound (`SO_BINDTODEVICE`) to the first interface of that kind that is up, judged as
    /// `NWInterface.type` judges; with none, the group or listener fails at start.
    public var requiredInterfaceType: NWInterface.InterfaceType {
        get { pathSettings.requiredInterfaceType }
        set { pathSettings.requiredInterfaceType = newValue }
    }

    /// Kinds of interface connections and listeners must not use, as Apple's
    /// `prohibitedInterfaceTypes`. Linux note: a client attempt whose route leaves by an
    /// interface of one of these kinds is refused, and the group fails saying so once no address
    /// is left; a listener fails when its required local address belongs to one. A listener on
    /// the wildcard address still receives on every interface.
    public var prohibitedInterfaceTypes: [NWInterface.InterfaceType]? {
        get { pathSettings.prohibitedInterfaceTypes }
        set { pathSettings.prohibitedInterfaceTypes = newValue }
    }

    /// The interface connections and listeners must use, as Apple's `requiredInterface`.
    /// Linux note: the sockets are bound to it with `SO_BINDTODEVICE`, so they send and receive
    /// only there; an interface that does not exist fails the group or listener at start.
    public var requiredInterface: NWInterface? {
        get { pathSettings.requiredInterface }
        set { pathSettings.requiredInterface = newValue }
    }

    /// Interfaces connections and listeners must not use, as Apple's `prohibitedInterfaces`.
    /// Linux note: enforced as `prohibitedInterfaceTypes` is, by interface name.
    public var prohibitedInterfaces: [NWInterface]? {
        get { pathSettings.prohibitedInterfaces }
        set { pathSettings.prohibitedInterfaces = newValue }
    }

    /// How urgent the traffic is, as Apple's `serviceClass`. Linux note: marks the packets'
    /// DiffServ code point with `IP_TOS` and `IPV6_TCLASS`; see `NWParameters.ServiceClass`.
    public var serviceClass: ServiceClass {
        get { pathSettings.serviceClass }
        set { pathSettings.serviceClass = newValue }
    }

    /// How several interfaces may be used at once, as Apple's `multipathServiceType`. Linux
    /// note: stored and not used; see `NWParameters.MultipathServiceType`.
    public var multipathServiceType: MultipathServiceType {
        get { pathSettings.multipathServiceType }
        set { pathSettings.multipathServiceType = newValue }
    }

    /// Whether expired DNS answers may be used, as Apple's `expiredDNSBehavior`. Linux note:
    /// stored and not used; see `NWParameters.ExpiredDNSBehavior`.
    public var expiredDNSBehavior: ExpiredDNSBehavior {
        get { pathSettings.expiredDNSBehavior }
        set { pathSettings.expiredDNSBehavior = newValue }
    }

    /// Whether to avoid configured proxies, as Apple's `preferNoProxies`. Linux note: stored
    /// and not used; QUIC here never goes through a proxy.
    public var preferNoProxies: Bool {
        get { pathSettings.preferNoProxies }
        set { pathSettings.preferNoProxies = newValue }
    }

    /// Whether to avoid expensive (metered) paths, as Apple's `prohibitExpensivePaths`. Linux
    /// note: stored and changes nothing; Linux does not mark interfaces as expensive, so no path
    /// is (`NWPath.isExpensive` is always false).
    public var prohibitExpensivePaths: Bool {
        get { pathSettings.prohibitExpensivePaths }
        set { pathSettings.prohibitExpensivePaths = newValue }
    }

    /// Whether to avoid constrained (Low Data Mode) paths, as Apple's
    /// `prohibitConstrainedPaths`. Linux note: stored and changes nothing; Linux has no Low Data
    /// Mode, so no path is constrained (`NWPath.isConstrained` is always false).
    public var prohibitConstrainedPaths: Bool {
        get { pathSettings.prohibitConstrainedPaths }
        set { pathSettings.prohibitConstrainedPaths = newValue }
    }
}

extension NWParameters.PathSettings {
    /// The interface the sockets bind to, or why there is none to bind to.
    func boundInterface(among interfaces: [NWInterface]) -> Result<String?, NWError> {
        if let required = requiredInterface {
            guard required.index != 0 else { return .failure(Self.invalid("there is no interface named \(required.name)")) }
            guard requiredInterfaceType == .other || required.type == requiredInterfaceType else {
                return .failure(Self.invalid("the required interface \(required.name) is not of the required type \(requiredInterfaceType)"))
            }
            return .success(required.name)
        }
        guard requiredInterfaceType != .other else { return .success(nil) }
        guard let match = interfaces.first(where: { $0.type == requiredInterfaceType }) else {
            return .failure(Self.invalid("no interface of the required type \(requiredInterfaceType) is up"))
        }
        return .success(match.name)
    }

    /// The names of the prohibited interfaces: those named, and those of a prohibited type.
    func prohibitedNames(among interfaces: [NWInterface]) -> Set<String> {
        var names = Set((prohibitedInterfaces ?? []).map(\.name))
        if let types = prohibitedInterfaceTypes, !types.isEmpty {
            names.formUnion(interfaces.filter { types.contains($0.type) }.map(\.name))
        }
        return names
    }

    /// Writes reuse, the interface rules and the service class into the sockets' options;
    /// an error when the interface rules cannot be met.
    func apply(to socket: inout QUICSocketOptions) -> NWError? {
        socket.reusesAddress = allowLocalEndpointReuse
        socket.dscp = serviceClass.dscp
        let needsInterfaces = requiredInterfaceType != .other || !(prohibitedInterfaceTypes ?? []).isEmpty
        let interfaces = needsInterfaces ? NWInterface.up : []
        socket.prohibitedInterfaceNames = prohibitedNames(among: interfaces)
        switch boundInterface(among: interfaces) {
        case .success(let name):
            socket.interfaceName = name
            if let name, socket.prohibitedInterfaceNames.contains(name) {
                return Self.invalid("the required interface \(name) is also prohibited")
            }
            return nil
        case .failure(let error):
            return error
        }
    }

    private static func invalid(_ reason: String) -> NWError { .quic(.invalid(reason)) }
}

extension NWParameters {
    /// Why the interface rules cannot be met on this machine now, or nil; a group or listener
    /// with such parameters fails at start.
    var interfaceProblem: NWError? {
        var scratch = QUICSocketOptions()
        return pathSettings.apply(to: &scratch)
    }

    /// Why a listener may not bind `host` under the interface rules: an address that belongs to
    /// a prohibited interface.
    func listeningProblem(host: String) -> NWError? {
        if let problem = interfaceProblem { return problem }
        let prohibited = socketOptions.prohibitedInterfaceNames
        guard !prohibited.isEmpty, let address = QUICSocketAddress(ip: host, port: 0),
            let name = NWInterface.owning(address)?.name, prohibited.contains(name)
        else { return nil }
        return .quic(.invalid("\(host) belongs to \(name), a prohibited interface"))
    }
}

extension NWInterface {
    /// The interfaces that are up, in the kernel's order, from `getifaddrs(3)`.
    static var up: [NWInterface] {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return [] }
        defer { freeifaddrs(list) }
        var names: [String] = []
        for entry in sequence(first: first, next: { $0.pointee.ifa_next }) {
            guard entry.pointee.ifa_flags & UInt32(IFF_UP) != 0, let name = entry.pointee.ifa_name else { continue }
            let text = String(cString: name)
            if !names.contains(text) { names.append(text) }
        }
        return names.map(NWInterface.init(name:))
    }
}
