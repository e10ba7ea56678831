import CQuicLinux
import CQuicShims
#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOCore

/// A UDP socket for QUIC, read and written with system calls on a `QUICEventLoop`: a server
/// worker's (bound, one of a reuseport group) or a client connection's (connected, so that ICMP
/// errors reach `onError`). `recvmmsg` batches with GRO, the sender's address read straight into a
/// `QUICSocketAddress`, and each batch of packets sent at once from the cores' scratch area with
/// one `sendmsg` (one GSO send, `UDP_SEGMENT`, when it holds several packets). ECN (RFC 9000
/// §13.4) rides in control messages both ways: `IP_TOS`/`IPV6_TCLASS`.
///
/// **A send error is that batch's alone.** The batch is dropped, as the network may drop any
/// packet, and QUIC's loss recovery resends what mattered; the socket and the worker's other
/// connections carry on. A batch the kernel has no room for (`EAGAIN`) waits, copied, until the
/// socket is writable again, up to `backlogLimit` bytes. A refused GSO send (`EIO`, `EINVAL`:
/// an IPsec route, a device without checksum offload) turns GSO off for this socket and goes
/// out datagram by datagram.
///
/// Loop-confined: made, used and closed on its loop's thread. For that reason the state read for
/// every datagram skips Swift's run-time exclusivity check (`@exclusivity(unchecked)`); no access
/// to it spans a call that could reach it again.
package final class QUICUDPSocket: QUICEventLoopSource {
    let descriptor: CInt
    package let localAddress: QUICSocketAddress
    package let loop: QUICEventLoop
    /// What the socket does with each received datagram; set on the loop, before the first read.
    @exclusivity(unchecked) package var onDatagram: QUICDatagramHandler?
    /// Runs after each batch of reads, the moment to flush the connections that received data.
    @exclusivity(unchecked) var onReadComplete: (() -> Void)?
    /// Errors the kernel reports for a connected socket: ECONNREFUSED from an ICMP port
    /// unreachable, and `reportedSendErrors` from a send (the route to the peer gone).
    var onError: ((any Error) -> Void)?
    private let logger: Logger
    private let isConnected: Bool
    private var gsoEnabled: Bool
    /// The DSCP bits of the TOS or Traffic Class byte (`QUICSocketOptions.dscp`): a control
    /// message that carries ECN replaces the whole byte, so it carries them too.
    private let trafficClass: CInt
    @exclusivity(unchecked) private var isClosed = false

    static let socketBufferSize = 4 << 20
    /// Slots per `recvmmsg`: with GRO one slot holds up to 64 KiB of same-size datagrams. A
    /// server's socket carries every connection of its worker; a client's carries one, and
    /// keeps its read area while it lives, so a client holding many connections would pay half
    /// a megabyte for each with the server's batch.
    static let serverReadSlots = System.supportsUDPReceiveOffload ? 8 : 32
    static let clientReadSlots = System.supportsUDPReceiveOffload ? 2 : 8
    private static let readSlotSize = System.supportsUDPReceiveOffload ? 65_536 : 2_048
    private let readSlots: Int
    /// Read passes per readiness report; a socket still readable after them is reported again,
    /// after the loop's timers and tasks have had their turn.
    private static let readPassesPerWakeup = 4
    /// Room for a send quantum (64 KiB, ngtcp2) and then some.
    private static let scratchSize = 96 << 10
    /// Bytes that may wait for the socket to become writable; later batches are dropped.
    static let backlogLimit = 4 << 20
    /// Room for one control message of an `int` and one of a `uint16_t`.
    private static let controlSize = 64

    private let readArea: UnsafeMutableRawBufferPointer
    private let messages: UnsafeMutablePointer<cqs_mmsghdr>
    private let vectors: UnsafeMutablePointer<iovec>
    private let names: UnsafeMutablePointer<sockaddr_storage>
    private let controls: UnsafeMutableRawBufferPointer
    /// The area cores write packets into; `send` sends from it at once, so it is free again
    /// as soon as `send` returns.
    let scratch: UnsafeMutableRawBufferPointer
    private let sendControl: UnsafeMutableRawBufferPointer

    /// Batches that met a full send buffer, in order, and their total size.
    @exclusivity(unchecked) private var backlog: [Backlogged] = []
    private var backlogBytes = 0

    private struct Backlogged {
        var bytes: [UInt8]
        var segmentSize: Int
        var remote: QUICSocketAddress
        var ecn: UInt32
    }

    /// Batches dropped so far: refused by the kernel, or met with a full backlog (each logged
    /// at debug level).
    package private(set) var sendErrors = 0

    /// Takes over `descriptor`, a bound non-blocking UDP socket (a member of a reuseport group,
    /// or a connected client socket), on `loop`, and starts reading. `options` are the ones the
    /// socket was made with. Call on the loop. On failure the caller still owns `descriptor`.
    package init(
        adopting descriptor: CInt,
        options: QUICSocketOptions,
        loop: QUICEventLoop,
        readSlots: Int = QUICUDPSocket.serverReadSlots,
        isConnected: Bool = false,
        logger: Logger
    ) throws {
        loop.preconditionInEventLoop(file: #fileID, line: #line)
        self.descriptor = descriptor
        self.loop = loop
        self.logger = logger
        self.readSlots = readSlots
        self.isConnected = isConnected
        self.trafficClass = CInt(options.dscp) << 2
        self.localAddress = try QUICReuseportGroup.boundAddress(of: descriptor)
        let isIPv6 = localAddress.family == AF_INET6
        // The kernel refuses UDP_SEGMENT on a socket without checksums (SO_NO_CHECK).
        self.gsoEnabled = System.supportsUDPSegmentationOffload && !(options.omitsChecksum && !isIPv6)

        readArea = .allocate(byteCount: readSlots * Self.readSlotSize, alignment: 16)
        messages = .allocate(capacity: readSlots)
        vectors = .allocate(capacity: readSlots)
        names = .allocate(capacity: readSlots)
        controls = .allocate(byteCount: readSlots * Self.controlSize, alignment: 16)
        scratch = .allocate(byteCount: Self.scratchSize, alignment: 16)
        sendControl = .allocate(byteCount: Self.controlSize, alignment: 16)
        for slot in 0..<readSlots {
            vectors[slot] = iovec(iov_base: readArea.baseAddress! + slot * Self.readSlotSize, iov_len: Self.readSlotSize)
            resetReadSlot(slot)
        }

        typealias Setting = QUICSocketOptions.Setting
        try Setting(level: SOL_SOCKET, name: SO_RCVBUF, value: CInt(Self.socketBufferSize)).apply(to: descriptor)
        try Setting(level: SOL_SOCKET, name: SO_SNDBUF, value: CInt(Self.socketBufferSize)).apply(to: descriptor)
        let receiveTOS = Setting(level: CInt(IPPROTO_IP), name: IP_RECVTOS, value: 1)
        if isIPv6 {
            try Setting(level: CInt(IPPROTO_IPV6), name: IPV6_RECVTCLASS, value: 1).apply(to: descriptor)
            // A dual-stack socket's IPv4 packets report their ECN bits as IP_TOS.
            try? receiveTOS.apply(to: descriptor)
        } else {
            try receiveTOS.apply(to: descriptor)
        }
        if System.supportsUDPReceiveOffload {
            try Setting(level: CInt(IPPROTO_UDP), name: CInt(UDP_GRO), value: 1).apply(to: descriptor)
        }
        try loop.register(descriptor, source: self)
    }

    deinit {
        readArea.deallocate()
        messages.deallocate()
        vectors.deallocate()
        names.deallocate()
        controls.deallocate()
        scratch.deallocate()
        sendControl.deallocate()
    }

    /// A client socket on an ephemeral port, connected to `remote`, so that ICMP errors (port
    /// unreachable) surface at once instead of after a handshake timeout. `options` are set
    /// before it connects. Call on `loop`.
    static func connect(to remote: QUICSocketAddress, options: QUICSocketOptions, loop: QUICEventLoop, logger: Logger) throws -> QUICUDPSocket {
        let descriptor = try options.openSocket(isIPv6: remote.family == AF_INET6)
        do {
            var storage = remote.storage
            let connected = withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, remote.length) }
            }
            guard connected == 0 else { throw IOError(errnoCode: errno, reason: "connect(\(remote))") }
            return try QUICUDPSocket(
                adopting: descriptor, options: options, loop: loop, readSlots: clientReadSlots, isConnected: true, logger: logger
            )
        } catch {
            _ = Glibc.close(descriptor)
            throw error
        }
    }

    // MARK: Reading

    func readable() {
        guard !isClosed else { return }
        for _ in 0..<Self.readPassesPerWakeup {
            let count = cqs_recvmmsg(descriptor, messages, CUnsignedInt(readSlots), CInt(MSG_DONTWAIT))
            if count < 0 {
                let code = errno
                if code != EAGAIN && code != EWOULDBLOCK && code != EINTR {
                    // A connected socket's pending ICMP error (ECONNREFUSED and the like).
                    logger.debug("UDP receive failed", metadata: ["errno": "\(code)"])
                    if isConnected { onError?(IOError(errnoCode: code, reason: "recvmmsg")) }
                }
                break
            }
            // Read once per batch: a handler read for each datagram was retained and released
            // each time. A handler that closes the socket stops the rest of the batch.
            if let handler = onDatagram {
                for slot in 0..<Int(count) where !isClosed { deliver(slot, to: handler) }
            }
            for slot in 0..<Int(count) { resetReadSlot(slot) }
            if Int(count) < readSlots { break }
            // A handler may have closed the socket.
            if isClosed { return }
        }
        onReadComplete?()
    }

    /// Readies a read slot's header for `recvmmsg`, which rewrites the lengths and flags of
    /// the slots it fills and of no other: after a read only those are readied again, not all
    /// of them (at one datagram per wake-up, that was 15 headers written for nothing).
    private func resetReadSlot(_ slot: Int) {
        messages[slot].msg_hdr = msghdr(
            msg_name: UnsafeMutableRawPointer(names + slot),
            msg_namelen: socklen_t(MemoryLayout<sockaddr_storage>.size),
            msg_iov: vectors + slot,
            msg_iovlen: 1,
            msg_control: controls.baseAddress! + slot * Self.controlSize,
            msg_controllen: Self.controlSize,
            msg_flags: 0
        )
        messages[slot].msg_len = 0
    }

    /// Hands one read slot's datagrams to the read handler.
    private func deliver(_ slot: Int, to handler: QUICDatagramHandler) {
        var header = messages[slot].msg_hdr
        guard header.msg_flags & CInt(MSG_TRUNC) == 0 else { return }
        var ecn: UInt32 = 0
        var segmentSize = 0
        var control = cqs_cmsg_firsthdr(&header)
        while let message = control {
            let data = UnsafeRawPointer(cqs_cmsg_data(message)!)
            switch (message.pointee.cmsg_level, message.pointee.cmsg_type) {
            case (CInt(IPPROTO_IP), IP_TOS):
                ecn = UInt32(data.load(as: UInt8.self) & 0x3)
            case (CInt(IPPROTO_IPV6), IPV6_TCLASS):
                ecn = UInt32(data.loadUnaligned(as: CInt.self) & 0x3)
            case (CInt(IPPROTO_UDP), CInt(UDP_GRO)):
                segmentSize = Int(data.loadUnaligned(as: CInt.self))
            default:
                break
            }
            control = cqs_cmsg_nxthdr(&header, message)
        }
        // The IP ECN field's values are ngtcp2's codepoints (NGTCP2_ECN_*).
        let remote = QUICSocketAddress(storage: names[slot], length: header.msg_namelen)
        let bytes = UnsafeRawBufferPointer(start: vectors[slot].iov_base, count: Int(messages[slot].msg_len))
        forEachDatagram(in: bytes, segmentSize: segmentSize) { handler($0, remote, ecn) }
    }

    // MARK: Sending

    /// Sends one packet, or `bytes.count / segmentSize` equal packets (the last may be shorter),
    /// marked with ngtcp2's ECN codepoint `ecn` (`NGTCP2_ECN_*`, RFC 9000 §13.4).
    package func send(_ bytes: UnsafeRawBufferPointer, segmentSize: Int, to remote: QUICSocketAddress, ecn: UInt32) {
        guard !isClosed else { return }
        guard backlog.isEmpty else {
            appendToBacklog(bytes, segmentSize: segmentSize, to: remote, ecn: ecn)
            return
        }
        let done = transmit(bytes, segmentSize: segmentSize, to: remote, ecn: ecn)
        if done < bytes.count {
            appendToBacklog(UnsafeRawBufferPointer(rebasing: bytes[done...]), segmentSize: segmentSize, to: remote, ecn: ecn)
            loop.setWritable(descriptor, interested: true)
        }
    }

    /// Sends one stateless packet (Version Negotiation, Retry, reset).
    func send(_ bytes: UnsafeRawBufferPointer, to remote: QUICSocketAddress) {
        send(bytes, segmentSize: bytes.count, to: remote, ecn: 0)
    }

    func writable() {
        while !backlog.isEmpty {
            let batch = backlog[0]
            let done = batch.bytes.withUnsafeBytes { transmit($0, segmentSize: batch.segmentSize, to: batch.remote, ecn: batch.ecn) }
            backlogBytes -= done
            if done < batch.bytes.count {
                backlog[0].bytes.removeFirst(done)
                return
            }
            backlog.removeFirst()
        }
        loop.setWritable(descriptor, interested: false)
    }

    /// Copies a batch into the backlog, or drops it when the backlog is full.
    private func appendToBacklog(_ bytes: UnsafeRawBufferPointer, segmentSize: Int, to remote: QUICSocketAddress, ecn: UInt32) {
        guard backlogBytes + bytes.count <= Self.backlogLimit else {
            sendErrors += 1
            logger.debug("UDP send buffer and backlog full; batch dropped", metadata: ["bytes": "\(bytes.count)"])
            return
        }
        backlog.append(Backlogged(bytes: Array(bytes), segmentSize: segmentSize, remote: remote, ecn: ecn))
        backlogBytes += bytes.count
    }

    /// Sends a batch: as one datagram, as one GSO send, or datagram by datagram. Returns how
    /// many of its bytes are done with (sent, or dropped after an error); fewer than all when
    /// the socket's buffer filled up, and the rest (whole datagrams) must wait.
    private func transmit(_ bytes: UnsafeRawBufferPointer, segmentSize: Int, to remote: QUICSocketAddress, ecn: UInt32) -> Int {
        if bytes.count <= segmentSize || gsoEnabled {
            switch sendmsg(bytes, segmentSize: bytes.count > segmentSize ? segmentSize : 0, to: remote, ecn: ecn) {
            case .sent: return bytes.count
            case .wouldBlock: return 0
            case .failed(let code):
                if bytes.count > segmentSize, code == EIO || code == EINVAL {
                    gsoEnabled = false
                    logger.warning("UDP GSO refused by the kernel; sending datagram by datagram", metadata: ["errno": "\(code)"])
                    return transmit(bytes, segmentSize: segmentSize, to: remote, ecn: ecn)
                }
                dropped(bytes.count, errno: code)
                return bytes.count
            }
        }
        var offset = 0
        while offset < bytes.count {
            let length = min(segmentSize, bytes.count - offset)
            switch sendmsg(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length]), segmentSize: 0, to: remote, ecn: ecn) {
            case .sent: break
            case .wouldBlock: return offset
            case .failed(let code): dropped(length, errno: code)
            }
            offset += length
        }
        return offset
    }

    private func dropped(_ count: Int, errno code: CInt) {
        sendErrors += 1
        logger.debug("UDP send failed; batch dropped", metadata: ["errno": "\(code)", "bytes": "\(count)"])
        if isConnected, Self.reportedSendErrors.contains(code) {
            onError?(IOError(errnoCode: code, reason: "sendmsg"))
        }
    }

    /// The send errors of a connected socket that `onError` hears of: what the route or the
    /// peer says of the path (ICMP), for the owner to act on.
    static let reportedSendErrors: Set<CInt> = [ECONNREFUSED, EHOSTUNREACH, ENETUNREACH, EHOSTDOWN, ENETDOWN]

    private enum SendResult {
        case sent, wouldBlock
        case failed(CInt)
    }

    /// One `sendmsg`: `bytes` to `remote`, with `UDP_SEGMENT` when `segmentSize` > 0 and the
    /// ECN codepoint when it is not not-ECT.
    private func sendmsg(_ bytes: UnsafeRawBufferPointer, segmentSize: Int, to remote: QUICSocketAddress, ecn: UInt32) -> SendResult {
        var storage = remote.storage
        var vector = iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count)
        return withUnsafeMutablePointer(to: &storage) { name in
            withUnsafeMutablePointer(to: &vector) { vector in
                var header = msghdr(
                    msg_name: UnsafeMutableRawPointer(name), msg_namelen: remote.length,
                    msg_iov: vector, msg_iovlen: 1,
                    msg_control: sendControl.baseAddress, msg_controllen: Self.controlSize, msg_flags: 0
                )
                var used = 0
                // CMSG_NXTHDR reads the length field of the slot after the current one.
                sendControl.initializeMemory(as: UInt8.self, repeating: 0)
                var control = cqs_cmsg_firsthdr(&header)
                if segmentSize > 0, let message = control {
                    message.pointee.cmsg_level = CInt(IPPROTO_UDP)
                    message.pointee.cmsg_type = CInt(UDP_SEGMENT)
                    message.pointee.cmsg_len = cqs_cmsg_len(MemoryLayout<UInt16>.size)
                    UnsafeMutableRawPointer(cqs_cmsg_data(message)!).storeBytes(of: UInt16(segmentSize), as: UInt16.self)
                    used += cqs_cmsg_space(MemoryLayout<UInt16>.size)
                    control = cqs_cmsg_nxthdr(&header, message)
                }
                if ecn != 0, let message = control {
                    // A dual-stack socket's IPv4 peers are v4-mapped, and their packets leave as
                    // IPv4, whose ECN bits the kernel takes from IP_TOS only.
                    let isIPv4 = remote.family == AF_INET || remote.isIPv4Mapped
                    message.pointee.cmsg_level = isIPv4 ? CInt(IPPROTO_IP) : CInt(IPPROTO_IPV6)
                    message.pointee.cmsg_type = isIPv4 ? IP_TOS : IPV6_TCLASS
                    message.pointee.cmsg_len = cqs_cmsg_len(MemoryLayout<CInt>.size)
                    UnsafeMutableRawPointer(cqs_cmsg_data(message)!).storeBytes(of: CInt(ecn) | trafficClass, as: CInt.self)
                    used += cqs_cmsg_space(MemoryLayout<CInt>.size)
                }
                header.msg_controllen = used
                if used == 0 { header.msg_control = nil }
                while true {
                    if Glibc.sendmsg(descriptor, &header, 0) >= 0 { return .sent }
                    let code = errno
                    if code == EINTR { continue }
                    if code == EAGAIN || code == EWOULDBLOCK { return .wouldBlock }
                    return .failed(code)
                }
            }
        }
    }

    // MARK: Closing

    package func close() {
        guard !isClosed else { return }
        isClosed = true
        loop.deregister(descriptor)
        _ = Glibc.close(descriptor)
        backlog.removeAll()
        backlogBytes = 0
    }

    /// Drops the handlers, which keep their owners alive, and closes the socket.
    func detachAndClose() {
        onDatagram = nil
        onError = nil
        onReadComplete = nil
        close()
    }
}

/// One received datagram: its bytes (valid only during the call), its sender, and its IP ECN
/// field as ngtcp2's codepoint.
package typealias QUICDatagramHandler = (_ datagram: UnsafeRawBufferPointer, _ remote: QUICSocketAddress, _ ecn: UInt32) -> Void

/// Calls `body` for each datagram of a read: the whole read, or with GRO (`segmentSize` > 0)
/// each `segmentSize` bytes of it (the last may be shorter).
private func forEachDatagram(in bytes: UnsafeRawBufferPointer, segmentSize: Int, _ body: (UnsafeRawBufferPointer) -> Void) {
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
