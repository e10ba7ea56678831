#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension NWEndpoint.Host {
    /// The interface the host is scoped to, matching Apple's `interface`: a name's, or a scoped
    /// address's; nil when there is none.
    public var interface: NWInterface? {
        switch self {
        case .name(_, let interface): return interface
        case .ipv4(let address): return address.interface
        case .ipv6(let address): return address.interface
        }
    }
}

extension NWEndpoint {
    /// The host and UDP port a QUIC tunnel to this endpoint uses, or why there is none:
    /// `.hostPort` as it is; `.url` by its host and port, or its scheme's default port (RFC 9110
    /// §4.2: https 443, http 80); `.unix` never, since QUIC runs over UDP/IP (RFC 9000 §1).
    var quicHostPort: Result<(host: String, port: UInt16), NWError> {
        switch self {
        case .hostPort(let host, let port):
            return .success((host.stringValue, port.rawValue))
        case .url(let url):
            guard let host = url.host, !host.isEmpty else {
                return .failure(.quic(.invalid("the URL \(url.absoluteString) has no host to connect to")))
            }
            let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
            if let port = url.port {
                guard let port = UInt16(exactly: port) else {
                    return .failure(.quic(.invalid("the URL \(url.absoluteString) has no valid port")))
                }
                return .success((bare, port))
            }
            switch url.scheme?.lowercased() {
            case "https", "wss": return .success((bare, 443))
            case "http", "ws": return .success((bare, 80))
            default:
                return .failure(.quic(.invalid("the URL \(url.absoluteString) names no port, and its scheme has no default")))
            }
        case .unix(let path):
            return .failure(.quic(.invalid("QUIC runs over UDP/IP, so it cannot use the Unix-domain endpoint \(path)")))
        case .service(let name, let type, let domain, _):
            // Groups and connections resolve a service (DNS-SD) before they get here.
            return .failure(.quic(.invalid("the Bonjour service \(name).\(type).\(domain) has no address of its own: browse or resolve it")))
        }
    }
}
