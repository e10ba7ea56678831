#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CQuicShims
import NIOCore

/// Resolves a host name to every UDP address it has, IPv6 and IPv4, in the system's preferred
/// order (getaddrinfo, RFC 6724 sorting), so a client can try them in turn as Network.framework does.
enum QUICHostResolver {
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
}
