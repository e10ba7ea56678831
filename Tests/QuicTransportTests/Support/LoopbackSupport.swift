import Foundation
import QuicTestSupport
import NIOConcurrencyHelpers
import QuicTransport
import Testing

/// Real UDP on 127.0.0.1 (or another address): an in-process listener whose tunnels and
/// streams the test handles.
final class LoopbackServer: Sendable {
    let listener: NWListener
    let port: NWEndpoint.Port
    let certificate: SelfSignedCertificate
    let groups: AsyncStream<NWConnectionGroup>

    /// Starts a listener on a free port of `host` (nil: no required local endpoint, the
    /// listener's default); `configure` adjusts the QUIC options, `workers` and
    /// `maximumTunnelsPerAddress` the listener.
    init(
        host: String? = "127.0.0.1",
        alpn: String = "quic-echo",
        certificate: SelfSignedCertificate? = nil,
        workers: Int = 1,
        maximumTunnelsPerAddress: Int? = nil,
        configure: (NWProtocolQUIC.Options) -> Void = { _ in }
    ) async throws {
        let certificate = try certificate ?? SelfSignedCertificate.generate()
        let options = NWProtocolQUIC.Options(alpn: [alpn])
        options.tls.identity = certificate
        configure(options)
        let parameters = NWParameters(quic: options)
        if let host { parameters.requiredLocalEndpoint = .hostPort(host: .init(host), port: .any) }
        let listener = try NWListener(using: parameters)
        listener.workers = workers
        listener.maximumTunnelsPerAddress = maximumTunnelsPerAddress
        self.groups = listener.connectionGroups
        let states = listener.states
        listener.start(queue: DispatchQueue(label: "test.listener"))
        for await state in states {
            if case .ready = state { break }
            if case .failed(let error) = state { throw error }
        }
        self.listener = listener
        self.port = try #require(listener.port)
        self.certificate = certificate
    }

    /// Serves the echo protocol on every tunnel (bidirectional echo, datagram echo, reset mirroring).
    func echo() {
        let groups = self.groups
        Task {
            for await group in groups {
                Task { await Self.echo(group) }
            }
        }
    }

    static func echo(_ group: NWConnectionGroup) async {
        let streams = group.inboundStreams
        group.setReceiveHandler { _, content, _ in group.send(content: content) { _ in } }
        group.start(queue: DispatchQueue(label: "test.tunnel"))
        for await stream in streams {
            Task {
                stream.start(queue: DispatchQueue(label: "test.stream"))
                do {
                    while true {
                        let (content, isComplete) = try await stream.receive()
                        try await stream.send(content: content, isComplete: isComplete)
                        if isComplete { return }
                    }
                } catch {
                    stream.cancel()  // After a peer reset, metadata holds its code: cancel mirrors it.
                }
            }
        }
    }

    /// A client group to this server that trusts its certificate by pin.
    func makeClient(
        host: String = "127.0.0.1",
        alpn: String = "quic-echo",
        allowFastOpen: Bool = false,
        configure: (NWProtocolQUIC.Options) -> Void = { _ in }
    ) -> NWConnectionGroup {
        let options = NWProtocolQUIC.Options(alpn: [alpn])
        options.tls.certificateVerification = .pinnedSHA256(certificate.sha256Fingerprint)
        configure(options)
        let parameters = NWParameters(quic: options)
        parameters.allowFastOpen = allowFastOpen
        return NWConnectionGroup(with: NWMultiplexGroup(to: .hostPort(host: .init(host), port: port)), using: parameters)
    }

    deinit { listener.cancel() }
}

/// Collects values from handler callbacks for later assertions.
final class Recorder<Value: Sendable>: Sendable {
    private let box = NIOLockedValueBox([Value]())
    func append(_ value: Value) { box.withLockedValue { $0.append(value) } }
    var values: [Value] { box.withLockedValue { $0 } }
}

/// Starts `group` and waits until its handshake completes: at most 20 s, a bound for a busy
/// machine (a handshake on loopback takes milliseconds).
func startAndWaitUntilReady(_ group: NWConnectionGroup) async throws {
    group.start(queue: DispatchQueue(label: "test"))
    try await within(20) { try await group.waitUntilReady() }
}

/// Sends `message` whole on a new bidirectional stream of `group` and returns the reply.
func roundTrip(_ message: Data, on group: NWConnectionGroup) async throws -> Data {
    let stream = try #require(NWConnection(from: group))
    stream.start(queue: DispatchQueue(label: "test.stream"))
    try await stream.send(content: message, isComplete: true)
    return try await within(20) { try await stream.receiveMessage() }
}

func quicMetadata(_ connection: NWConnection) -> NWProtocolQUIC.Metadata {
    connection.metadata(definition: NWProtocolQUIC.definition) as! NWProtocolQUIC.Metadata
}

/// The tunnel's QUIC metadata.
func quicMetadata(_ group: NWConnectionGroup) -> NWProtocolQUIC.Metadata {
    group.metadata(definition: NWProtocolQUIC.definition) as! NWProtocolQUIC.Metadata
}

