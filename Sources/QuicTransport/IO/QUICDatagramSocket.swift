#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CQuicShims
import Logging
import NIOCore
import NIOPosix

/// Where a connection's packets leave and its datagrams arrive: a bound UDP socket, on one
/// event loop. A client's is a `QUICNIODatagramSocket`; a server worker's is a `QUICUDPSocket`
/// on the worker's own `QUICEventLoop`.
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

/// A bound UDP socket on SwiftNIO, tuned for QUIC: batched reads (`recvmmsg`), GRO (`UDP_GRO`,
/// coalesced reads split back into datagrams here), 4 MiB socket buffers, GSO sends
/// (`UDP_SEGMENT`) when the kernel offers them, each with a per-datagram fallback, and ECN
/// (RFC 9000 §13.4): received IP ECN bits reach ngtcp2, and packets carry the mark ngtcp2 chose.
///
/// Cores write packets into the socket's scratch `ByteBuffer` (`withScratch`). A large GSO
/// batch (a bulk transfer's send quantum) is not copied: the scratch buffer itself goes to NIO's
/// writes, each batch a slice of it, and the socket takes a fresh one. Small batches
/// (acknowledgements, a response or two) are copied into buffers of their own size, and the
/// scratch stays. Lives on its channel's event loop. Clients use it: a client socket carries
/// one connection, and NIO's costs per datagram matter little there.
final class QUICNIODatagramSocket: QUICDatagramSocket {
    static let socketBufferSize = 4 << 20
    /// Room for a send quantum (64 KiB, ngtcp2) and then some; NIO rounds the capacity up to a
    /// power of two, so the area the cores get is 128 KiB.
    private static let scratchSize = 96 << 10
    /// A batch of at least this many bytes leaves in the scratch buffer instead of a copy.
    private static let sliceThreshold = 16 << 10

    let channel: any Channel
    let localAddress: QUICSocketAddress
    private let gsoEnabled: Bool
    private var scratch: ByteBuffer
    /// Where the scratch's bytes start while `withScratch` runs; nil otherwise.
    /// The scratch area while `withScratch` runs.
    private var scratchArea: UnsafeRawBufferPointer?
    /// Batches waiting for the pass to end (from the first large one on), sent in order then.
    private var queued: [QueuedBatch] = []
    private var lastRemote: (quic: QUICSocketAddress, nio: SocketAddress)?
    private var pendingFlush = false
    private let logger: Logger

    /// A batch waiting for its pass to end: a range of the scratch, or bytes copied already.
    private struct QueuedBatch {
        enum Bytes {
            case scratch(Range<Int>)
            case copied(ByteBuffer)
        }
        var bytes: Bytes
        var segmentSize: Int
        var destination: SocketAddress
        var ecn: UInt32
    }

    private init(channel: any Channel, sink: QUICDatagramSink, options: QUICSocketOptions, logger: Logger) throws {
        self.channel = channel
        self.sink = sink
        self.logger = logger
        guard let address = channel.localAddress else { throw QUICSocketError.notBound }
        self.localAddress = QUICSocketAddress(nio: address)
        // The kernel refuses UDP_SEGMENT on a socket without checksums (SO_NO_CHECK), and NIO
        // closes the channel on that error: such a socket sends datagram by datagram.
        let omitsChecksums = options.omitsChecksum && address.protocol == .inet
        self.gsoEnabled = System.supportsUDPSegmentationOffload && !omitsChecksums
        self.scratch = channel.allocator.buffer(capacity: Self.scratchSize)
    }

    var eventLoop: any EventLoop { channel.eventLoop }

    var onDatagram: QUICDatagramHandler? {
        get { sink.onDatagram }
        set { sink.onDatagram = newValue }
    }
    var onReadComplete: (() -> Void)? {
        get { sink.onReadComplete }
        set { sink.onReadComplete = newValue }
    }
    private let sink: QUICDatagramSink

    var onError: ((any Error) -> Void)? {
        get { sink.onError }
        set { sink.onError = newValue }
    }

    /// A client socket on an ephemeral port, connected to `remote` so that ICMP errors
    /// (port unreachable) surface at once instead of after a handshake timeout. `options` are
    /// set before it connects.
    static func connect(
        to remote: SocketAddress,
        options: QUICSocketOptions,
        eventLoop: any EventLoop,
        logger: Logger
    ) -> EventLoopFuture<QUICNIODatagramSocket> {
        let settings = options.settings(isIPv6: remote.protocol == .inet6)
        return open(on: eventLoop, options: options, logger: logger) { bootstrap in
            var bootstrap = bootstrap
            for setting in settings {
                bootstrap = bootstrap.channelOption(
                    ChannelOptions.Types.SocketOption(level: SocketOptionLevel(setting.level), name: SocketOptionName(setting.name)),
                    value: SocketOptionValue(setting.value)
                )
            }
            return bootstrap.connect(to: remote)
        }
    }

    /// Slots per read pass (`recvmmsg`): with GRO one slot holds up to 64 KiB of same-size
    /// datagrams. A client's socket carries one connection and keeps its read buffer for its
    /// lifetime, so a client holding many connections would otherwise pay much for each.
    private static let readSlots = System.supportsUDPReceiveOffload ? 2 : 8
    private static let readSlotSize = System.supportsUDPReceiveOffload ? 65_536 : 2_048

    /// Opens a channel with the tuned bootstrap on `eventLoop`, as `how` says, and wraps it.
    private static func open(
        on eventLoop: any EventLoop,
        options: QUICSocketOptions,
        logger: Logger,
        _ how: @escaping @Sendable (DatagramBootstrap) -> EventLoopFuture<any Channel>
    ) -> EventLoopFuture<QUICNIODatagramSocket> {
        eventLoop.flatSubmit {
            let sink = NIOLoopBound(QUICDatagramSink(), eventLoop: eventLoop)
            return how(bootstrap(eventLoop: eventLoop, sink: sink))
                .flatMapThrowing { channel in try QUICNIODatagramSocket(channel: channel, sink: sink.value, options: options, logger: logger) }
        }
    }

    private static func bootstrap(eventLoop: any EventLoop, sink: NIOLoopBound<QUICDatagramSink>) -> DatagramBootstrap {
        let gro = System.supportsUDPReceiveOffload
        let slots = readSlots
        let slotSize = readSlotSize
        var bootstrap = DatagramBootstrap(group: eventLoop)
            .channelOption(.socketOption(.so_rcvbuf), value: SocketOptionValue(socketBufferSize))
            .channelOption(.socketOption(.so_sndbuf), value: SocketOptionValue(socketBufferSize))
            .channelOption(.datagramVectorReadMessageCount, value: slots)
            .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: slots * slotSize))
            .channelOption(.explicitCongestionNotification, value: true)
        if gro {
            bootstrap = bootstrap
                .channelOption(.datagramReceiveOffload, value: true)
                .channelOption(.datagramReceiveSegmentSize, value: true)
        }
        return bootstrap
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(QUICDatagramInboundHandler(sink: sink.value))
                }
            }
    }

    func close() {
        channel.close(promise: nil)
    }

    func detachAndClose() {
        onDatagram = nil
        onError = nil
        onReadComplete = nil
        close()
    }

    /// A batch of at least
    /// `sliceThreshold` bytes sent from it, and every batch after it, waits until `body`
    /// returns and then leaves as a slice of the scratch buffer, which is replaced; smaller
    /// batches are copied and leave at once. The caller must not change bytes it has sent from
    /// the scratch before `body` returns.
    func withScratch<R>(_ body: (UnsafeMutableRawBufferPointer) -> R) -> R {
        precondition(scratchArea == nil, "withScratch does not nest")
        let result = scratch.withUnsafeMutableWritableBytes { area -> R in
            scratchArea = UnsafeRawBufferPointer(area)
            defer { scratchArea = nil }
            return body(area)
        }
        sendQueued()
        return result
    }

    /// Sends the batches that waited for the pass to end, in order, the scratch's as slices of it.
    private func sendQueued() {
        guard !queued.isEmpty else { return }
        // Batches are written in order, so the last one from the scratch ends furthest in.
        var used = 0
        for batch in queued.reversed() {
            if case .scratch(let range) = batch.bytes {
                used = range.upperBound
                break
            }
        }
        scratch.moveWriterIndex(to: used)
        for batch in queued {
            let buffer: ByteBuffer
            switch batch.bytes {
            case .copied(let copy): buffer = copy
            case .scratch(let range): buffer = scratch.getSlice(at: range.lowerBound, length: range.count)!
            }
            write(buffer, segmentSize: batch.segmentSize, to: batch.destination, ecn: batch.ecn)
        }
        queued.removeAll(keepingCapacity: true)
        // The slices keep the old storage alive until NIO has written them.
        scratch = channel.allocator.buffer(capacity: Self.scratchSize)
    }

    func send(_ bytes: UnsafeRawBufferPointer, segmentSize: Int, to remote: QUICSocketAddress, ecn: UInt32 = 0) {
        let destination = nioAddress(for: remote)
        if let scratchArea, let base = scratchArea.baseAddress, let start = bytes.baseAddress,
            start >= base, start + bytes.count <= base + scratchArea.count,
            bytes.count >= Self.sliceThreshold || !queued.isEmpty
        {
            let offset = start - base
            queued.append(QueuedBatch(bytes: .scratch(offset..<offset + bytes.count), segmentSize: segmentSize, destination: destination, ecn: ecn))
            return
        }
        var buffer = channel.allocator.buffer(capacity: bytes.count)
        buffer.writeBytes(bytes)
        guard queued.isEmpty else {
            // Behind the batches that wait for the pass to end.
            queued.append(QueuedBatch(bytes: .copied(buffer), segmentSize: segmentSize, destination: destination, ecn: ecn))
            return
        }
        write(buffer, segmentSize: segmentSize, to: destination, ecn: ecn)
    }

    /// Writes one batch's buffer: as it is, as one GSO send, or one slice per datagram.
    private func write(_ buffer: ByteBuffer, segmentSize: Int, to destination: SocketAddress, ecn: UInt32) {
        let ecnState = NIOExplicitCongestionNotificationState(ngtcp2: ecn)
        let count = buffer.readableBytes
        if count <= segmentSize {
            write(
                AddressedEnvelope(remoteAddress: destination, data: buffer, metadata: .init(ecnState: ecnState)),
                watchForGSOFailure: false
            )
        } else if gsoEnabled {
            write(
                AddressedEnvelope(
                    remoteAddress: destination,
                    data: buffer,
                    metadata: .init(ecnState: ecnState, packetInfo: nil, segmentSize: segmentSize)
                ),
                watchForGSOFailure: true
            )
        } else {
            // Slices share the buffer's storage: no per-packet copy or allocation.
            var offset = buffer.readerIndex
            while offset < buffer.writerIndex {
                let length = min(segmentSize, buffer.writerIndex - offset)
                write(
                    AddressedEnvelope(
                        remoteAddress: destination, data: buffer.getSlice(at: offset, length: length)!, metadata: .init(ecnState: ecnState)
                    ),
                    watchForGSOFailure: false
                )
                offset += length
            }
        }
    }

    func sendNow(_ bytes: UnsafeRawBufferPointer, to remote: QUICSocketAddress) {
        send(bytes, segmentSize: bytes.count, to: remote)
        flush()
    }

    func flush() {
        guard pendingFlush else { return }
        pendingFlush = false
        channel.flush()
    }

    private func write(_ envelope: AddressedEnvelope<ByteBuffer>, watchForGSOFailure: Bool) {
        pendingFlush = true
        guard watchForGSOFailure else {
            channel.write(envelope, promise: nil)
            return
        }
        let promise = channel.eventLoop.makePromise(of: Void.self)
        let socket = NIOLoopBound(self, eventLoop: channel.eventLoop)
        promise.futureResult.whenFailure { error in socket.value.writeFailed(error) }
        channel.write(envelope, promise: promise)
    }

    private func writeFailed(_ error: any Error) {
        if gsoEnabled, let ioError = error as? IOError, ioError.errnoCode == EIO || ioError.errnoCode == EINVAL {
            // The kernel refuses UDP_SEGMENT where it cannot offload checksums (an IPsec route,
            // SO_NO_CHECK). NIO's datagram writes tolerate only EMSGSIZE and EHOSTUNREACH, so the
            // channel closes after this error and the connections on it end.
            logger.warning("UDP GSO refused by the kernel; the socket closes", metadata: ["error": "\(error)"])
            return
        }
        logger.debug("UDP send failed", metadata: ["error": "\(error)"])
    }

    private func nioAddress(for remote: QUICSocketAddress) -> SocketAddress {
        if let lastRemote, lastRemote.quic == remote { return lastRemote.nio }
        let nio = remote.nioAddress
        lastRemote = (remote, nio)
        return nio
    }
}

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

/// Where the pipeline's reads go; lives on the channel's loop.
final class QUICDatagramSink {
    var onDatagram: QUICDatagramHandler?
    var onReadComplete: (() -> Void)?
    var onError: ((any Error) -> Void)?
}

/// Forwards each received datagram to the sink; QUIC needs nothing else from the pipeline.
private final class QUICDatagramInboundHandler: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    private let sink: QUICDatagramSink

    init(sink: QUICDatagramSink) { self.sink = sink }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = unwrapInboundIn(data)
        guard let onDatagram = sink.onDatagram else { return }
        let remote = QUICSocketAddress(nio: envelope.remoteAddress)
        let ecn = envelope.metadata?.ecnState.ngtcp2 ?? UInt32(NGTCP2_ECN_NOT_ECT)
        let segmentSize = envelope.metadata?.segmentSize ?? 0
        envelope.data.withUnsafeReadableBytes { bytes in
            // GRO joins several datagrams of one size (the last may be shorter): one call each.
            forEachDatagram(in: bytes, segmentSize: segmentSize) { onDatagram($0, remote, ecn) }
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        sink.onReadComplete?()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // ICMP errors (ECONNREFUSED) surface here on connected sockets; the owner decides what they mean.
        sink.onError?(error)
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

extension NIOExplicitCongestionNotificationState {
    /// The IP ECN field for one of ngtcp2's `NGTCP2_ECN_*` codepoints.
    init(ngtcp2 codepoint: UInt32) {
        switch codepoint {
        case UInt32(NGTCP2_ECN_ECT_0): self = .transportCapableFlag0
        case UInt32(NGTCP2_ECN_ECT_1): self = .transportCapableFlag1
        case UInt32(NGTCP2_ECN_CE): self = .congestionExperienced
        default: self = .transportNotCapable
        }
    }

    /// ngtcp2's codepoint for this IP ECN field.
    var ngtcp2: UInt32 {
        switch self {
        case .transportCapableFlag0: return UInt32(NGTCP2_ECN_ECT_0)
        case .transportCapableFlag1: return UInt32(NGTCP2_ECN_ECT_1)
        case .congestionExperienced: return UInt32(NGTCP2_ECN_CE)
        case .transportNotCapable: return UInt32(NGTCP2_ECN_NOT_ECT)
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
