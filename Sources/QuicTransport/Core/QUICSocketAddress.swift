import CQuicShims
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A UDP socket address held as a plain `sockaddr_storage`, the form ngtcp2 reads in `ngtcp2_path`.
///
/// Core code never touches sockets; the IO layer converts to and from SwiftNIO's `SocketAddress`.
package struct QUICSocketAddress: Hashable, Sendable, CustomStringConvertible {
    package var storage: sockaddr_storage
    package var length: socklen_t

    package init(storage: sockaddr_storage, length: socklen_t) {
        self.storage = storage
        self.length = length
    }

    /// Copies `length` bytes of a `sockaddr`.
    package init(_ address: UnsafePointer<sockaddr>, length: socklen_t) {
        var storage = sockaddr_storage()
        withUnsafeMutableBytes(of: &storage) { destination in
            destination.copyMemory(
                from: UnsafeRawBufferPointer(start: address, count: min(Int(length), destination.count))
            )
        }
        self.init(storage: storage, length: length)
    }

    /// Parses a numeric IPv4 or IPv6 address; nil when `ip` is not numeric.
    package init?(ip: String, port: UInt16) {
        var storage = sockaddr_storage()
        var v4 = sockaddr_in()
        if inet_pton(AF_INET, ip, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
            withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: withUnsafeBytes(of: v4) { $0 }) }
            self.init(storage: storage, length: socklen_t(MemoryLayout<sockaddr_in>.size))
            return
        }
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET6, ip, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = port.bigEndian
            withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: withUnsafeBytes(of: v6) { $0 }) }
            self.init(storage: storage, length: socklen_t(MemoryLayout<sockaddr_in6>.size))
            return
        }
        return nil
    }

    package var family: Int32 { Int32(storage.ss_family) }

    /// The port in host byte order.
    package var port: UInt16 {
        withUnsafeBytes(of: storage) { raw in
            switch family {
            case AF_INET: return UInt16(bigEndian: raw.load(as: sockaddr_in.self).sin_port)
            case AF_INET6: return UInt16(bigEndian: raw.load(as: sockaddr_in6.self).sin6_port)
            default: return 0
            }
        }
    }

    /// The numeric host, for example `127.0.0.1` or `::1`.
    package var host: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        return withUnsafeBytes(of: storage) { raw -> String in
            switch family {
            case AF_INET:
                var addr = raw.load(as: sockaddr_in.self).sin_addr
                inet_ntop(AF_INET, &addr, &buffer, socklen_t(buffer.count))
            case AF_INET6:
                var addr = raw.load(as: sockaddr_in6.self).sin6_addr
                inet_ntop(AF_INET6, &addr, &buffer, socklen_t(buffer.count))
            default:
                return "?"
            }
            return buffer.withUnsafeBytes { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        }
    }

    package var description: String {
        family == AF_INET6 ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// Whether this is `::`, the IPv6 unspecified address (RFC 4291 §2.5.2), which a listening
    /// socket binds to serve every address.
    package var isUnspecifiedIPv6: Bool {
        guard family == AF_INET6 else { return false }
        return withUnsafeBytes(of: storage) { raw in
            withUnsafeBytes(of: raw.load(as: sockaddr_in6.self).sin6_addr) { $0.allSatisfy { $0 == 0 } }
        }
    }

    /// Whether this is an IPv6 address that stands for an IPv4 one (`::ffff:a.b.c.d`, RFC 4291
    /// §2.5.5.2): how a dual-stack socket sees its IPv4 peers. Packets to it leave as IPv4.
    package var isIPv4Mapped: Bool {
        guard family == AF_INET6 else { return false }
        return withUnsafeBytes(of: storage) { raw in
            withUnsafeBytes(of: raw.load(as: sockaddr_in6.self).sin6_addr) { bytes in
                bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xff && bytes[11] == 0xff
            }
        }
    }

    /// The client this address belongs to, as a per-address connection limit counts it: the
    /// IPv4 address (an IPv4-mapped IPv6 one too, RFC 4291 §2.5.5.2), or the IPv6 address's /64
    /// prefix, since one host or site usually holds a whole /64 (RFC 4291 §2.5.4).
    package var client: QUICClientAddress {
        withUnsafeBytes(of: storage) { raw in
            switch family {
            case AF_INET:
                return QUICClientAddress(family: AF_INET, bits: UInt64(raw.load(as: sockaddr_in.self).sin_addr.s_addr))
            case AF_INET6:
                let bytes = withUnsafeBytes(of: raw.load(as: sockaddr_in6.self).sin6_addr) { Array($0) }
                if isIPv4Mapped {
                    let v4 = bytes[12..<16].withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }
                    return QUICClientAddress(family: AF_INET, bits: UInt64(v4))
                }
                return QUICClientAddress(family: AF_INET6, bits: bytes[0..<8].withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) })
            default:
                return QUICClientAddress(family: family, bits: 0)
            }
        }
    }

    /// Runs `body` with a `sockaddr` pointer valid for the duration of the call.
    package func withSockAddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) throws -> R) rethrows -> R {
        try withUnsafeBytes(of: storage) { raw in
            try body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), length)
        }
    }

    package static func == (lhs: QUICSocketAddress, rhs: QUICSocketAddress) -> Bool {
        guard lhs.length == rhs.length else { return false }
        return withUnsafeBytes(of: lhs.storage) { l in
            withUnsafeBytes(of: rhs.storage) { r in
                memcmp(l.baseAddress!, r.baseAddress!, Int(lhs.length)) == 0
            }
        }
    }

    package func hash(into hasher: inout Hasher) {
        withUnsafeBytes(of: storage) { hasher.combine(bytes: UnsafeRawBufferPointer(rebasing: $0.prefix(Int(length)))) }
    }
}

/// The two ends of a UDP path: ngtcp2's `ngtcp2_path` as a value.
/// What a per-address connection limit counts connections by (`QUICSocketAddress.client`).
package struct QUICClientAddress: Hashable, Sendable {
    let family: Int32
    /// The IPv4 address, or the first 64 bits of the IPv6 one, in network byte order.
    let bits: UInt64
}

package struct QUICPath: Hashable, Sendable {
    package var local: QUICSocketAddress
    package var remote: QUICSocketAddress

    package init(local: QUICSocketAddress, remote: QUICSocketAddress) {
        self.local = local
        self.remote = remote
    }

    package init(_ path: ngtcp2_path) {
        self.init(
            local: QUICSocketAddress(path.local.addr, length: path.local.addrlen),
            remote: QUICSocketAddress(path.remote.addr, length: path.remote.addrlen)
        )
    }
}
