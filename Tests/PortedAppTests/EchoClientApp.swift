// Written as an app on Apple platforms writes Network.framework's QUIC API: completion handlers,
// typed closure parameters, `as?` casts and force-unwraps, integer-literal error codes and
// exhaustive switches. Only the import differs.
#if canImport(Network)
import Network
#else
import QuicTransport
#endif
import Foundation

/// An echo client in the style of Apple's sample code: one tunnel, streams and datagrams. Its
/// own completions are `@Sendable`, as an app that builds in Swift 6 must mark them: they are
/// called from Network.framework's handlers, which are `@Sendable`.
// @unchecked Sendable: its state is written on `queue`, where handlers and the verify block
// run; the test reads it in `queue.sync` or after a callback from `queue` has resumed it.
final class EchoClientApp: @unchecked Sendable {
    private(set) var group: NWConnectionGroup!
    let queue = DispatchQueue(label: "app.echo-client")
    /// The DER certificate the app trusts, compared in its verify block.
    let pinnedCertificate: Data
    private(set) var log: [String] = []
    private(set) var verifiedChainLength = 0
    private(set) var verifyBlockALPN: String?
    var onReady: (() -> Void)?
    var onEnd: ((String) -> Void)?
    var onInboundStream: ((NWConnection) -> Void)?
    var onDatagram: ((Data, NWConnectionGroup.Message) -> Void)?

    init(host: String, port: UInt16, pinnedCertificate: Data, configure: (NWProtocolQUIC.Options) -> Void = { _ in }) {
        self.pinnedCertificate = pinnedCertificate
        // Datagrams come from the parameters, as `NWParameters.quicDatagram` offers them.
        let parameters = NWParameters.quicDatagram(alpn: ["quic-echo"])
        let options = parameters.defaultProtocolStack.applicationProtocols.first as! NWProtocolQUIC.Options
        options.idleTimeout = 30_000
        sec_protocol_options_set_min_tls_protocol_version(options.securityProtocolOptions, .TLSv13)
        sec_protocol_options_set_verify_block(
            options.securityProtocolOptions,
            { (metadata: sec_protocol_metadata_t, trust: sec_trust_t, complete: @escaping sec_protocol_verify_complete_t) in
                let secTrust = sec_trust_copy_ref(trust).takeRetainedValue()
                let chain = SecTrustCopyCertificateChain(secTrust) as? [SecCertificate] ?? []
                self.verifiedChainLength = chain.count
                if let alpn = sec_protocol_metadata_get_negotiated_protocol(metadata) {
                    self.verifyBlockALPN = String(cString: alpn)
                }
                guard let leaf = chain.first else {
                    complete(false)
                    return
                }
                complete(SecCertificateCopyData(leaf) as Data == self.pinnedCertificate)
            },
            queue
        )
        configure(options)
        let endpoint = NWEndpoint.hostPort(host: NWEndpoint.Host(host), port: NWEndpoint.Port(rawValue: port)!)
        group = NWConnectionGroup(with: NWMultiplexGroup(to: endpoint), using: parameters)
    }

    func start() {
        group.stateUpdateHandler = { (newState: NWConnectionGroup.State) in
            switch newState {
            case .setup:
                self.log.append("setup")
            case .waiting(let error):
                self.log.append("waiting: \(error)")
            case .ready:
                self.log.append("ready")
                self.onReady?()
            case .failed(let error):
                self.log.append("failed: \(error)")
                self.onEnd?("failed: \(error)")
            case .cancelled:
                self.log.append("cancelled")
                self.onEnd?("cancelled")
            }
        }
        group.newConnectionHandler = { (connection: NWConnection) in
            self.onInboundStream?(connection)
        }
        group.setReceiveHandler(maximumMessageSize: 1500, rejectOversizedMessages: true) {
            (message: NWConnectionGroup.Message, content: Data?, isComplete: Bool) in
            guard let content, isComplete else { return }
            self.onDatagram?(content, message)
        }
        group.start(queue: queue)
    }

    /// Sends `payload` with FIN on a new bidirectional stream and hands back the whole echo.
    func echo(_ payload: Data, completion: @escaping @Sendable (Result<Data, NWError>) -> Void) {
        let connection = NWConnection(from: group)!
        connection.stateUpdateHandler = { (state: NWConnection.State) in
            if case .failed(let error) = state { completion(.failure(error)) }
        }
        connection.start(queue: queue)
        // The final message ends the stream (FIN), as Apple's write-close.
        connection.send(content: payload, contentContext: .finalMessage, isComplete: true, completion: .contentProcessed { (error: NWError?) in
            if let error { completion(.failure(error)) }
        })
        receiveAll(on: connection, into: Data(), completion: completion)
    }

    /// Sends `payload` with FIN on a new unidirectional stream (the echo comes on a server stream).
    func sendUnidirectional(_ payload: Data) {
        let options = NWProtocolQUIC.Options()
        options.direction = .unidirectional
        let connection = group.extract(connectionTo: nil, using: options)!
        connection.start(queue: queue)
        connection.send(content: payload, contentContext: .defaultStream, isComplete: true, completion: .idempotent)
    }

    /// Opens a unidirectional stream, waits for the server's paired stream to echo its first
    /// bytes, resets ours with `code`, and reports the code the server reset its stream with.
    func resetUnidirectional(code: NWProtocolQUIC.ApplicationError, completion: @escaping @Sendable (UInt64?) -> Void) {
        let options = NWProtocolQUIC.Options()
        options.direction = .unidirectional
        let connection = NWConnection(from: group, using: options)!
        onInboundStream = { (inbound: NWConnection) in
            inbound.start(queue: self.queue)
            inbound.receive(minimumIncompleteLength: 1, maximumLength: 65_536) {
                (content: Data?, context: NWConnection.ContentContext?, isComplete: Bool, error: NWError?) in
                let metadata = connection.metadata(definition: NWProtocolQUIC.definition) as! NWProtocolQUIC.Metadata
                metadata.applicationError = code
                connection.cancel()
                self.receiveAll(on: inbound, into: Data()) { (result: Result<Data, NWError>) in
                    let peer = inbound.metadata(definition: NWProtocolQUIC.definition) as? NWProtocolQUIC.Metadata
                    switch result {
                    case .success: completion(nil)  // Finished instead of reset.
                    case .failure: completion(peer?.applicationError.code)
                    }
                }
            }
        }
        connection.start(queue: queue)
        connection.send(content: Data("uni-reset:".utf8), isComplete: false, completion: .contentProcessed { (_: NWError?) in })
    }

    func sendDatagram(_ payload: Data, completion: @escaping @Sendable (NWError?) -> Void) {
        group.send(content: payload) { (error: NWError?) in completion(error) }
    }

    var quicMetadata: NWProtocolQUIC.Metadata {
        group.metadata(definition: NWProtocolQUIC.definition) as! NWProtocolQUIC.Metadata
    }

    func close(code: NWProtocolQUIC.ApplicationError) {
        quicMetadata.applicationError = code
        group.cancel()
    }

    func receiveAll(on connection: NWConnection, into received: Data, completion: @escaping @Sendable (Result<Data, NWError>) -> Void) {
        connection.receive(minimumIncompleteLength: 1, maximumLength: 65_536) {
            (content: Data?, context: NWConnection.ContentContext?, isComplete: Bool, error: NWError?) in
            if let error {
                completion(.failure(error))
                return
            }
            var total = received
            if let content { total.append(content) }
            if isComplete {
                // The context carries the stream's QUIC metadata, as on Apple platforms.
                guard context?.protocolMetadata(definition: NWProtocolQUIC.definition) is NWProtocolQUIC.Metadata else {
                    completion(.failure(.posix(.EPROTO)))
                    return
                }
                completion(.success(total))
            } else {
                self.receiveAll(on: connection, into: total, completion: completion)
            }
        }
    }
}
