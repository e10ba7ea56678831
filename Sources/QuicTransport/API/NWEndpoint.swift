#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Where a connection goes or a listener listens, as in Network.framework.
public enum NWEndpoint: Hashable, Sendable, CustomStringConvertible {
    /// A host and UDP port, matching Apple's case of the same name.
    case hostPort(host: Host, port: Port)
    /// A Bonjour (DNS-SD) service instance, matching Apple's case: `name` is the instance name,
    /// `type` the service type (`_myapp._udp`) and `domain` usually `local.` (RFC 6763 §4.1).
    /// `NWBrowser` results hold one. A group or connection to it resolves it through Avahi when
    /// it starts (SRV and TXT, then the host's A and AAAA records) and connects to what it
    /// finds; `interface`, when set, limits the resolution to that interface.
    case service(name: String, type: String, domain: String, interface: NWInterface?)

    /// A host name or numeric address.
    public enum Host: Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
        /// A host name (or, made this way, a numeric address; an IPv6 one may be bracketed),
        /// and an interface that is accepted but not used.
        case name(String, NWInterface?)
        /// An IPv4 address, matching Apple's case.
        case ipv4(IPv4Address)
        /// An IPv6 address, matching Apple's case; a scoped one carries its interface.
        case ipv6(IPv6Address)

        /// A host from a name or numeric address, matching Apple's `init(_:)`: an address
        /// becomes `.ipv4` or `.ipv6`, anything else `.name` with no interface.
        public init(_ string: String) {
            if let address = IPv4Address(string) {
                self = .ipv4(address)
            } else if let address = IPv6Address(string) {
                self = .ipv6(address)
            } else {
                self = .name(string, nil)
            }
        }
        public init(stringLiteral value: String) { self.init(value) }

        /// The name or address as written, without brackets.
        public var stringValue: String {
            switch self {
            case .name(let name, _):
                return name.hasPrefix("[") && name.hasSuffix("]") ? String(name.dropFirst().dropLast()) : name
            case .ipv4(let address): return address.debugDescription
            case .ipv6(let address): return address.debugDescription
            }
        }

        public var description: String { stringValue }
    }

    /// A UDP port.
    public struct Port: Hashable, Sendable, RawRepresentable, ExpressibleByIntegerLiteral, CustomStringConvertible {
        public let rawValue: UInt16
        /// Any free port, chosen at bind time.
        public static let any = Port(integerLiteral: 0)

        public init?(rawValue: UInt16) { self.rawValue = rawValue }
        public init(integerLiteral value: UInt16) { self.rawValue = value }
        /// A port from its decimal text, matching Apple's `init?(_:)`; nil unless it is a `UInt16`.
        public init?(_ string: String) {
            guard let value = UInt16(string) else { return nil }
            self.rawValue = value
        }
        public var description: String { String(rawValue) }
    }

    public var description: String {
        switch self {
        case .hostPort(let host, let port):
            let name = host.stringValue
            return URIHost.authority(name, port.rawValue)
        case .unix(let path): return path
        case .url(let url): return url.absoluteString
        case .service(let name, let type, let domain, _):
            return "\(name).\(type).\(domain)"
        }
    }

    /// A Unix-domain socket path, matching Apple's case. Linux note: QUIC runs over UDP/IP, so
    /// a group or listener given one fails at start.
    case unix(path: String)
    /// A URL, matching Apple's case: a group connects to its host and port, or the scheme's
    /// default port (https 443, http 80).
    case url(URL)
}

extension NWEndpoint {
    /// The endpoint of a socket address.
    init(address: QUICSocketAddress) {
        self = .hostPort(host: .init(address.host), port: .init(integerLiteral: address.port))
    }
}

/// Describes what a connection group connects to, as in Network.framework. QUIC's is
/// `NWMultiplexGroup`; Apple's multicast groups have no counterpart here.
public protocol NWGroupDescriptor: Sendable {
    /// The endpoints of the group.
    var members: [NWEndpoint] { get }
}

/// Describes a multiplexed group: one QUIC tunnel to one endpoint.
public struct NWMultiplexGroup: NWGroupDescriptor, Hashable {
    public let members: [NWEndpoint]
    /// A group for one QUIC tunnel to `remoteEndpoint`, matching Apple's `init(to:)`.
    public init(to remoteEndpoint: NWEndpoint) { self.members = [remoteEndpoint] }
}
