#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CQuicShims
import NIOCore

/// Where a connection's packets leave and its datagrams arrive: a bound UDP socket, on one
/// event loop (`QUICUDPSocket` on a `QUICEventLoop`; tests may stand in their own).
///
/// Cores write packets into the socket's scratch area (`withScratch`) and `send` them from
/// there. Everything here happens on `eventLoop`.
protocol QUICDatagramSocket: AnyObject {
    var localAddress: QUICSocketAddress { get }
    var eventLoop: any EventLoop { get }
    /// What the socket does with each received datagram; set once, on the loop, before the first read.
    var onDatagram: QUICDatagramHandler? { get set }
    /// Runs after each batch of reads, the moment to flush the connections that received data.
    var onReadComplete: (() -> Void)? { get set }
    var onError: ((any Error) -> Void)? { get set }
    /// Runs `body` with the area that cores write packets into; the bytes `send` takes may lie in it.
    func withScratch<R>(_ body: (UnsafeMutableRawBufferPointer) -> R) -> R
    /// Sends one packet, or `bytes.count / segmentSize` equal packets (the last may be shorter),
    /// marked with ngtcp2's ECN codepoint `ecn` (`NGTCP2_ECN_*`, RFC 9000 §13.4).
    func send(_ bytes: UnsafeRawBufferPointer, segmentSize: Int, to remote: QUICSocketAddress, ecn: UInt32)
    func sendNow(_ bytes: UnsafeRawBufferPointer, to remote: QUICSocketAddress)
    /// Pushes out what `send` has queued.
    func flush()
    func close()
    /// Drops the handlers, which keep their owners alive, and closes the socket.
    func detachAndClose()
}

/// One received datagram: its bytes (valid only during the call), its sender, and its IP ECN
/// field as ngtcp2's codepoint.
package typealias QUICDatagramHandler = (_ datagram: UnsafeRawBufferPointer, _ remote: QUICSocketAddress, _ ecn: UInt32) -> Void

enum QUICSocketError: Error, CustomStringConvertible {
    case notBound
    /// A listener's address is of the IP version its stack excludes (`IP().version(_:)`).
    case ipVersionExcluded(address: String)

    var description: String {
        switch self {
        case .notBound: return "the UDP socket has no local address"
        case .ipVersionExcluded(let address): return "cannot bind \(address): the protocol stack excludes its IP version"
        }
    }
}

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

/// Calls `body` for each datagram of a read: the whole read, or with GRO (`segmentSize` > 0)
/// each `segmentSize` bytes of it (the last may be shorter).
func forEachDatagram(in bytes: UnsafeRawBufferPointer, segmentSize: Int, _ body: (UnsafeRawBufferPointer) -> Void) {
    guard segmentSize > 0, bytes.count > segmentSize else {
        body(bytes)
        return
    }
    var offset = 0
    while offset < bytes.count {
        let length = min(segmentSize, bytes.count - offset)
        body(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length]))
        offset += length
    }
}
