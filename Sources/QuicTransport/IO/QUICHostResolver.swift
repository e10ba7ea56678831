#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CQuicShims
import NIOCore

/// Resolves a host name to every UDP address it has, IPv6 and IPv4, in the system's preferred
/// order (getaddrinfo, RFC 6724 sorting), so a client can try them in turn as Network.framework does.
package enum QUICHostResolver {
    struct ResolutionError: Error, CustomStringConvertible {
        let host: String
        let code: Int32
        var description: String { "cannot resolve \(host): \(String(cString: gai_strerror(code)))" }
    }

    /// Blocking; call from a thread pool.
    static func resolve(host: String, port: UInt16) throws -> [SocketAddress] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        hints.ai_protocol = Int32(IPPROTO_UDP)
        var result: UnsafeMutablePointer<addrinfo>?
        let rv = getaddrinfo(host, String(port), &hints, &result)
        guard rv == 0, let first = result else { throw ResolutionError(host: host, code: rv) }
        defer { freeaddrinfo(first) }
        var addresses: [SocketAddress] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let entry = cursor {
            if let address = entry.pointee.ai_addr {
                let quic = QUICSocketAddress(address, length: entry.pointee.ai_addrlen)
                let nio = quic.nioAddress
                if !addresses.contains(nio) { addresses.append(nio) }
            }
            cursor = entry.pointee.ai_next
        }
        return addresses
    }

    /// The addresses a server asked to listen on `host` binds, in order, for UDP and TCP alike.
    ///
    /// - `localhost` (and any name under `.localhost`) is the loopback addresses of both
    ///   versions, `::1` and `127.0.0.1`, whatever the hosts file says, because that is where
    ///   browsers and curl look for it (RFC 6761 §6.3): Chromium tries `::1` first.
    /// - `::` is one dual-stack socket for every address of both versions
    ///   (`QUICSocketOptions.isDualStack`); `0.0.0.0` is every IPv4 address.
    /// - Another name is every address it resolves to; a numeric address is itself.
    ///
    /// Addresses of an IP version the options exclude are left out; when none is left, this
    /// throws `QUICSocketError.ipVersionExcluded`.
    package static func listeningAddresses(host: String, port: Int, options: QUICSocketOptions) throws -> [SocketAddress] {
        let name = host.lowercased()
        let candidates: [SocketAddress]
        if name == "localhost" || name.hasSuffix(".localhost") {
            candidates = [try SocketAddress(ipAddress: "::1", port: port), try SocketAddress(ipAddress: "127.0.0.1", port: port)]
        } else if let numeric = try? SocketAddress(ipAddress: host, port: port) {
            candidates = [numeric]
        } else {
            candidates = try QUICHostResolver.resolve(host: host, port: UInt16(port))
        }
        let allowed = candidates.filter { options.allows(isIPv6: $0.protocol == .inet6) }
        guard !allowed.isEmpty else { throw QUICSocketError.ipVersionExcluded(address: "\(host):\(port)") }
        return allowed
    }
}
