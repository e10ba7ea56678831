import CQuicShims
import Glibc
import Foundation
import NIOCore
import QuicTestSupport
import QuicTransport
import Testing

/// The kernel's side of scale-out: two sockets in a `SO_REUSEPORT` group on loopback with the
/// steering program attached, fed QUIC-shaped datagrams from many source ports. Nothing here
/// runs QUIC; what is checked is which socket the kernel delivers each datagram to.
@Suite("Reuseport steering in the kernel")
struct ReuseportSteeringTests {
    let factory = QUICConnectionIDFactory()

    /// Binds a group of two on an ephemeral loopback port with the program attached.
    func steeredGroup() throws -> (descriptors: [CInt], port: UInt16) {
        let descriptors = try QUICReuseportGroup.bind(try SocketAddress(ipAddress: "127.0.0.1", port: 0), count: 2)
        try QUICReuseportGroup.attach(
            QUICReuseportGroup.steeringProgram(connectionIDLength: factory.idLength, steering: factory.steering),
            to: descriptors[0]
        )
        return (descriptors, try QUICReuseportGroup.boundAddress(of: descriptors[0]).port)
    }

    /// Sends each datagram from a socket of its own (a new source port, so a new 4-tuple) and
    /// returns how many each member of the group received.
    func deliver(_ datagrams: [[UInt8]], to port: UInt16, group: [CInt]) async throws -> [Int] {
        let destination = try #require(QUICSocketAddress(ip: "127.0.0.1", port: port))
        for datagram in datagrams {
            let sender = socket(AF_INET, CInt(SOCK_DGRAM.rawValue), 0)
            defer { close(sender) }
            let sent = destination.withSockAddr { sendto(sender, datagram, datagram.count, 0, $0, $1) }
            #expect(sent == datagram.count)
        }
        var counts = [0, 0]
        var buffer = [UInt8](repeating: 0, count: 2048)
        _ = await eventually(within: 5) {
            for (index, descriptor) in group.enumerated() {
                while recv(descriptor, &buffer, buffer.count, 0) > 0 { counts[index] += 1 }
            }
            return counts.reduce(0, +) == datagrams.count
        }
        return counts
    }

    func shortHeader(worker: UInt8) -> [UInt8] {
        [0x40] + factory.forWorker(worker).makeConnectionID().bytes + [UInt8](repeating: 0xab, count: 40)
    }

    /// A long header: `type` bits 0x30 (v1: Initial 0x00, Handshake 0x20), version 1, then the DCID.
    func longHeader(type: UInt8, dcid: [UInt8]) -> [UInt8] {
        [0xc0 | type, 0, 0, 0, 1, UInt8(dcid.count)] + dcid + [0, 0x41, 0x00] + [UInt8](repeating: 0, count: 1200)
    }

    /// Short headers, Handshake packets, and the Initials a client sends once it has our first
    /// Initial (so a client rebound in mid-handshake stays with its worker).
    @Test func packetsWithOurIDReachTheWorkerNamedInIt() async throws {
        let (group, port) = try steeredGroup()
        defer { group.forEach { close($0) } }
        for worker in [0, 1] as [UInt8] {
            let counts = try await deliver((0..<24).map { _ in shortHeader(worker: worker) }, to: port, group: group)
            #expect(counts[Int(worker)] == 24, "short headers for worker \(worker) landed \(counts)")
            let handshakes = (0..<24).map { _ in longHeader(type: 0x20, dcid: factory.forWorker(worker).makeConnectionID().bytes) }
            let handshakeCounts = try await deliver(handshakes, to: port, group: group)
            #expect(handshakeCounts[Int(worker)] == 24, "Handshake packets for worker \(worker) landed \(handshakeCounts)")
            let initials = (0..<24).map { _ in longHeader(type: 0x00, dcid: factory.forWorker(worker).makeConnectionID().bytes) }
            let initialCounts = try await deliver(initials, to: port, group: group)
            #expect(initialCounts[Int(worker)] == 24, "Initials to an ID of worker \(worker) landed \(initialCounts)")
        }
    }

    /// A client's first Initials carry its own DCID (8 bytes here, as most clients choose): the
    /// kernel spreads them by 4-tuple, and so it does for a worker byte past the group's size.
    @Test func clientChosenIDsAndUnknownWorkersFallBackToTheFourTupleHash() async throws {
        let (group, port) = try steeredGroup()
        defer { group.forEach { close($0) } }
        let initials = (0..<40).map { _ in longHeader(type: 0x00, dcid: QUICConnectionID.random(length: 8).bytes) }
        let spread = try await deliver(initials, to: port, group: group)
        #expect(spread.reduce(0, +) == 40)
        #expect(spread[0] > 0 && spread[1] > 0, "40 source ports all hashed to one socket: \(spread)")
        let stray = try await deliver((0..<40).map { _ in shortHeader(worker: 9) }, to: port, group: group)
        #expect(stray[0] > 0 && stray[1] > 0, "worker 9 of 2 must fall back to the hash: \(stray)")
        // Too short to hold our ID: the program must not read past the end (that would say 0).
        let runts = try await deliver((0..<40).map { _ in [0x40, 1, 2] }, to: port, group: group)
        #expect(runts[0] > 0 && runts[1] > 0, "runt datagrams: \(runts)")
    }
}
