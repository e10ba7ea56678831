import Foundation
import Logging
import QuicTransport

/// Logs nothing: a fuzzer runs millions of inputs.
private let quietLogger = Logger(label: "fuzz", factory: { _ in SwiftLogNoOpLogHandler() })

/// The addresses on the simulated link.
private let clientAddress = QUICSocketAddress(ip: "192.0.2.1", port: 50_000)!
private let serverAddress = QUICSocketAddress(ip: "192.0.2.2", port: 443)!

/// Feeds datagrams to a fresh server endpoint, then lets its timers run, checking the
/// amplification limit throughout: the harness never completes a handshake (it cannot forge
/// the client's Finished), so the client's address is never validated and the server may send
/// at most three times what it received (RFC 9000 §8.1).
final class ServerDatagramHarness: @unchecked Sendable {
    // @unchecked Sendable: libFuzzer calls one input at a time, on one thread.
    static let shared = ServerDatagramHarness()

    let configuration: QUICEndpointCore.Configuration
    private let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 16)

    private init() {
        let identity = try! SelfSignedCertificate.generate()
        var quic = QUICConfiguration()
        quic.alpn = ["quic-echo", "h3"]
        configuration = QUICEndpointCore.Configuration(
            quic: quic,
            credentials: try! .server(certificateChainPEM: identity.certificatePEM, privateKeyPEM: identity.privateKeyPEM)
        )
    }

    func run(_ input: [UInt8]) {
        let endpoint = QUICEndpointCore(configuration: configuration, logger: quietLogger)
        var connections: [QUICConnectionCore] = []
        var received = 0
        var sent = 0
        var now: UInt64 = 1_000_000_000
        let path = QUICPath(local: serverAddress, remote: clientAddress)
        func flush() {
            for core in connections {
                _ = core.writePackets(now: now, scratch: scratch) { bytes, _, _, _ in sent += bytes.count }
                endpoint.handle(core.takeEvents(), of: core)
            }
            precondition(sent <= 3 * received, "the server sent \(sent) bytes for \(received) from an unvalidated address")
        }
        for datagram in DatagramSequence(input) {
            received += datagram.count
            let disposition = datagram.withUnsafeBytes { endpoint.receive(datagram: $0, path: path, now: now) }
            if case .answered(_, let reply) = disposition { sent += reply.count }
            if case .delivered(let core, _, isNew: true) = disposition { connections.append(core) }
            flush()
            now += 1_000_000
        }
        // Loss recovery and the idle timeout: retransmissions stay within the same limit.
        for _ in 0..<6 {
            guard let next = connections.map(\.nextDeadline).min(), next != .max else { break }
            now = max(now + 1, next)
            for core in connections { core.handleTimeout(now: now) }
            flush()
        }
        for core in connections { endpoint.remove(core) }
    }
}

/// A client connection that has sent its first Initial, fed datagrams as if from the server;
/// and the resumption path, which hands a ticket file's contents to GnuTLS and ngtcp2.
final class ClientDatagramHarness: @unchecked Sendable {
    // @unchecked Sendable: libFuzzer calls one input at a time, on one thread.
    static let shared = ClientDatagramHarness()

    private let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 16)
    private let verification = CertificateVerification.pinnedSHA256([UInt8](repeating: 0xAB, count: 32))
    private let credentials: TLSCredentials

    private init() {
        credentials = try! .client(verification: verification)
    }

    private func makeClient(configuration: QUICConfiguration = QUICConfiguration(), tickets: QUICSessionTicketStore? = nil) -> QUICConnectionCore? {
        var configuration = configuration
        configuration.alpn = ["quic-echo"]
        var tls = QUICClientTLS(credentials: credentials, verification: verification, serverName: "localhost", verificationName: "localhost")
        tls.ticketStore = tickets
        tls.ticketKey = "localhost:443"
        return try? QUICConnectionCore(
            clientWith: configuration, tls: tls, path: QUICPath(local: clientAddress, remote: serverAddress), now: 1_000_000_000, logger: quietLogger
        )
    }

    func run(_ input: [UInt8]) {
        guard let client = makeClient() else { preconditionFailure("a client core could not be made") }
        var now: UInt64 = 1_000_000_000
        _ = client.writePackets(now: now, scratch: scratch) { _, _, _, _ in }
        for datagram in DatagramSequence(input) {
            now += 1_000_000
            datagram.withUnsafeBytes { client.receive(datagram: $0, path: QUICPath(local: clientAddress, remote: serverAddress), now: now) }
            _ = client.writePackets(now: now, scratch: scratch) { _, _, _, _ in }
            _ = client.takeEvents()
        }
        for _ in 0..<4 where client.nextDeadline != .max {
            now = max(now + 1, client.nextDeadline)
            client.handleTimeout(now: now)
            _ = client.writePackets(now: now, scratch: scratch) { _, _, _, _ in }
        }
    }

    /// A ticket file: each entry it yields is resumed with, 0-RTT included, as far as the first
    /// flight. Only tickets that match their check get that far, so a damaged ticket never
    /// reaches GnuTLS (whose `gnutls_session_set_data` trusts its input); mutations of the
    /// transport parameters of a real ticket do, and reach ngtcp2.
    func resume(ticketFile input: [UInt8]) {
        let entries = QUICSessionTicketStore.entries(parsing: String(decoding: input, as: UTF8.self)).sorted { $0.key < $1.key }.map(\.value)
        var configuration = QUICConfiguration()
        configuration.attemptsEarlyData = true
        for entry in entries.prefix(2) {
            let store = QUICSessionTicketStore()
            store.store(entry, for: "localhost:443")
            guard let client = makeClient(configuration: configuration, tickets: store) else { continue }
            _ = client.writePackets(now: 1_000_000_000, scratch: scratch) { _, _, _, _ in }
        }
    }
}
