import Foundation
import Glibc

/// An IPv4 or IPv6 socket address.
struct SocketAddress: CustomStringConvertible {
    var storage = sockaddr_storage()
    var length: socklen_t

    /// "HOST:PORT" or "[V6]:PORT" with numeric hosts ("localhost" means 127.0.0.1).
    init?(parsing text: String) {
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]) else { return nil }
        var host = String(text[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        if host == "localhost" { host = "127.0.0.1" }
        var v4 = sockaddr_in()
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET, host, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let size = Int(length)
            withUnsafeBytes(of: &v4) { source in withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: source[0..<size])) } }
        } else if inet_pton(AF_INET6, host, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = port.bigEndian
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            let size = Int(length)
            withUnsafeBytes(of: &v6) { source in withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: source[0..<size])) } }
        } else {
            return nil
        }
    }

    init(storage: sockaddr_storage, length: socklen_t) {
        self.storage = storage
        self.length = length
    }

    var family: Int32 { Int32(storage.ss_family) }

    var description: String {
        var copy = storage
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        return withUnsafePointer(to: &copy) { pointer in
            pointer.withMemoryRebound(to: UInt8.self, capacity: MemoryLayout<sockaddr_storage>.size) { bytes in
                if family == AF_INET6 {
                    let address = UnsafeRawPointer(bytes).assumingMemoryBound(to: sockaddr_in6.self).pointee
                    var raw = address.sin6_addr
                    inet_ntop(AF_INET6, &raw, &text, socklen_t(text.count))
                    return "[\(Self.string(text))]:\(UInt16(bigEndian: address.sin6_port))"
                }
                let address = UnsafeRawPointer(bytes).assumingMemoryBound(to: sockaddr_in.self).pointee
                var raw = address.sin_addr
                inet_ntop(AF_INET, &raw, &text, socklen_t(text.count))
                return "\(Self.string(text)):\(UInt16(bigEndian: address.sin_port))"
            }
        }
    }

    private static func string(_ characters: [CChar]) -> String {
        String(decoding: characters.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        var copy = storage
        return withUnsafePointer(to: &copy) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) } }
    }
}

/// The relay: one listening socket for clients, one socket per client towards the server, and
/// a time-ordered schedule of datagrams to deliver. Single-threaded around poll(2).
final class Relay {
    enum Direction: Int { case up = 0, down = 1 }

    /// One client: where it is, and the socket its datagrams leave through towards the server.
    final class Flow {
        let client: SocketAddress
        var upstreamSocket: Int32
        var boundAt: Double
        /// Sockets of earlier bindings, still read until their time is up (`--rebind-linger`).
        var retired: [(socket: Int32, until: Double)] = []
        init(client: SocketAddress, upstreamSocket: Int32, boundAt: Double) {
            self.client = client
            self.upstreamSocket = upstreamSocket
            self.boundAt = boundAt
        }
    }

    /// A datagram waiting for its delivery time.
    struct Scheduled {
        let at: Double
        let order: UInt64
        let direction: Direction
        let flow: Flow
        let bytes: [UInt8]
    }

    private let listenSocket: Int32
    let listenAddress: SocketAddress
    private let upstream: SocketAddress
    private var impairments: Impairments
    private let impairs: (up: Bool, down: Bool)
    private let rebindEvery: Double?
    private let rebindLinger: Double
    private var flows: [String: Flow] = [:]
    private var schedule: [Scheduled] = []
    private var order: UInt64 = 0
    private var stopping = false
    private var stats = [Impairments.Counts(), Impairments.Counts()]
    private var rebinds = 0
    /// Datagrams the server sent to a retired binding that the linger time still delivered.
    private var lingered = 0

    init(listen: SocketAddress, upstream: SocketAddress, impairments: Impairments, impairs: (up: Bool, down: Bool), rebindEvery: Double?, rebindLinger: Double = 0) throws {
        self.upstream = upstream
        self.impairments = impairments
        self.impairs = impairs
        self.rebindEvery = rebindEvery
        self.rebindLinger = rebindLinger
        let socket = try Self.udpSocket(family: listen.family)
        let bound = listen.withSockaddr { bind(socket, $0, $1) }
        guard bound == 0 else { throw RelayError("cannot bind \(listen): \(String(cString: strerror(errno)))") }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &length) } }
        listenSocket = socket
        listenAddress = SocketAddress(storage: storage, length: length)
    }

    struct RelayError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    static func udpSocket(family: Int32) throws -> Int32 {
        let descriptor = socket(family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw RelayError("socket: \(String(cString: strerror(errno)))") }
        var size: Int32 = 4 << 20
        setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        setsockopt(descriptor, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        return descriptor
    }

    static func now() -> Double {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
    }

    /// Relays until SIGINT or SIGTERM.
    func run() {
        let stop = DispatchSource.makeSignalSource(signal: SIGTERM)
        let interrupt = DispatchSource.makeSignalSource(signal: SIGINT)
        signal(SIGTERM, SIG_IGN)
        signal(SIGINT, SIG_IGN)
        let stopRequested = UnsafeMutablePointer<sig_atomic_t>.allocate(capacity: 1)
        stopRequested.pointee = 0
        for source in [stop, interrupt] {
            source.setEventHandler { stopRequested.pointee = 1 }
            source.resume()
        }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while stopRequested.pointee == 0 {
            let now = Self.now()
            deliverDue(now: now)
            retireExpiredBindings(now: now)
            // Each flow's current socket, then the old ones it still reads.
            let flowSockets = flows.values.flatMap { flow in ([flow.upstreamSocket] + flow.retired.map(\.socket)).map { (flow, $0) } }
            var descriptors = [pollfd(fd: listenSocket, events: Int16(POLLIN), revents: 0)]
            descriptors += flowSockets.map { pollfd(fd: $0.1, events: Int16(POLLIN), revents: 0) }
            let wait = schedule.first.map { max(0, Int32(($0.at - now) * 1000)) } ?? 100
            _ = poll(&descriptors, nfds_t(descriptors.count), min(wait, 100))
            let arrived = Self.now()
            if descriptors[0].revents & Int16(POLLIN) != 0 { drain(listenSocket, buffer: &buffer, now: arrived, from: nil) }
            for (index, (flow, socket)) in flowSockets.enumerated() where descriptors[index + 1].revents & Int16(POLLIN) != 0 {
                drain(socket, buffer: &buffer, now: arrived, from: flow)
            }
        }
        stopRequested.deallocate()
        // Used after the loop, so the sources live until then (optimised builds free unused ones).
        stop.cancel()
        interrupt.cancel()
    }

    /// Reads every waiting datagram on `socket`: from clients when `from` is nil, else from the server.
    private func drain(_ socket: Int32, buffer: inout [UInt8], now: Double, from flow: Flow?) {
        while true {
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let count = buffer.withUnsafeMutableBytes { raw in
                withUnsafeMutablePointer(to: &storage) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(socket, raw.baseAddress, raw.count, 0, $0, &length) }
                }
            }
            guard count >= 0 else { return }
            let bytes = Array(buffer[0..<count])
            if let flow {
                if socket != flow.upstreamSocket { lingered += 1 }
                admit(bytes, direction: .down, flow: flow, now: now)
            } else {
                let client = SocketAddress(storage: storage, length: length)
                guard let flow = self.flow(for: client, now: now) else { continue }
                admit(bytes, direction: .up, flow: flow, now: now)
            }
        }
    }

    private func flow(for client: SocketAddress, now: Double) -> Flow? {
        if let existing = flows[client.description] { return existing }
        guard let socket = try? Self.udpSocket(family: upstream.family) else { return nil }
        let flow = Flow(client: client, upstreamSocket: socket, boundAt: now)
        flows[client.description] = flow
        return flow
    }

    /// Applies the impairments to one datagram and schedules what survives.
    private func admit(_ bytes: [UInt8], direction: Direction, flow: Flow, now: Double) {
        let impaired = direction == .up ? impairs.up : impairs.down
        var counts = stats[direction.rawValue]
        let deliveries = impaired
            ? impairments.apply(bytes, direction: direction.rawValue, now: now, counts: &counts)
            : [(now, bytes)]
        if !impaired { counts.received += 1 }
        stats[direction.rawValue] = counts
        for (at, payload) in deliveries {
            order += 1
            let item = Scheduled(at: at, order: order, direction: direction, flow: flow, bytes: payload)
            let index = schedule.partitioningIndex { ($0.at, $0.order) > (at, order) }
            schedule.insert(item, at: index)
        }
    }

    private func deliverDue(now: Double) {
        while let next = schedule.first, next.at <= now {
            schedule.removeFirst()
            send(next, now: now)
        }
    }

    private func send(_ item: Scheduled, now: Double) {
        switch item.direction {
        case .up:
            if let rebindEvery, now - item.flow.boundAt >= rebindEvery, let fresh = try? Self.udpSocket(family: upstream.family) {
                // A NAT rebinding: the server sees the same client from a new port (RFC 9000 §9.3).
                // The old mapping either goes at once or lives on for the linger time.
                if rebindLinger > 0 {
                    item.flow.retired.append((item.flow.upstreamSocket, now + rebindLinger))
                } else {
                    close(item.flow.upstreamSocket)
                }
                item.flow.upstreamSocket = fresh
                item.flow.boundAt = now
                rebinds += 1
            }
            _ = item.bytes.withUnsafeBytes { raw in
                upstream.withSockaddr { sendto(item.flow.upstreamSocket, raw.baseAddress, raw.count, 0, $0, $1) }
            }
        case .down:
            _ = item.bytes.withUnsafeBytes { raw in
                item.flow.client.withSockaddr { sendto(listenSocket, raw.baseAddress, raw.count, 0, $0, $1) }
            }
        }
        stats[item.direction.rawValue].forwarded += 1
    }

    /// Closes the old bindings whose linger time is over.
    private func retireExpiredBindings(now: Double) {
        for flow in flows.values where !flow.retired.isEmpty {
            for binding in flow.retired where binding.until <= now { close(binding.socket) }
            flow.retired.removeAll { $0.until <= now }
        }
    }

    var summary: String {
        let names = ["client->server", "server->client"]
        var lines = (0..<2).map { "\(names[$0]): \(stats[$0])" }
        lines.append("clients: \(flows.count), rebinds: \(rebinds), delivered from retired bindings: \(lingered)")
        return lines.joined(separator: "\n")
    }
}

extension Array {
    /// The first index whose element satisfies `predicate`, for a predicate that is false then true.
    func partitioningIndex(where predicate: (Element) -> Bool) -> Int {
        var low = 0
        var high = count
        while low < high {
            let middle = (low + high) / 2
            if predicate(self[middle]) { high = middle } else { low = middle + 1 }
        }
        return low
    }
}
