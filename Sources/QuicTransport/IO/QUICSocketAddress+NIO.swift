#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CQuicShims
import NIOCore

/// Conversions to and from SwiftNIO's `SocketAddress`, for name resolution and binding.
extension QUICSocketAddress {
    init(nio address: SocketAddress) {
        var storage = sockaddr_storage()
        var length: socklen_t = 0
        address.withSockAddr { pointer, size in
            withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: UnsafeRawBufferPointer(start: pointer, count: size)) }
            length = socklen_t(size)
        }
        self.init(storage: storage, length: length)
    }

    var nioAddress: SocketAddress {
        withUnsafeBytes(of: storage) { raw in
            if family == AF_INET6 {
                return SocketAddress(raw.load(as: sockaddr_in6.self), host: host)
            }
            return SocketAddress(raw.load(as: sockaddr_in.self), host: host)
        }
    }
}
