// An echo server written as Apple-platform apps write NWListener for QUIC; only the import and
// the Linux-only `sec_identity_create(certificateChainPEMFile:privateKeyPEMFile:)` differ.
#if canImport(Network)
import Network
#else
import QuicTransport
#endif
import Foundation

/// Echoes bidirectional streams on themselves, unidirectional streams on a new server stream,
/// datagrams with `reply`, and mirrors a peer's reset code (the quic-echo protocol).
// @unchecked Sendable: `tunnels` and the handlers are used on `queue`, where the listener's
// handlers run; the test reads `tunnels` in `queue.sync` and sets the handlers before `start`.
final class EchoListenerApp: @unchecked Sendable {
    let listener: NWListener
    let queue = DispatchQueue(label: "app.echo-listener")
    private(set) var tunnels = 0
    var onReady: ((NWEndpoint.Port) -> Void)?
    var onFailure: ((NWError) -> Void)?

    init(certificateFile: String, keyFile: String) throws {
        let options = NWProtocolQUIC.Options(alpn: ["quic-echo"])
        options.isDatagram = true
        options.maxDatagramFrameSize = 65_535
        let identity = sec_identity_create(certificateChainPEMFile: certificateFile, privateKeyPEMFile: keyFile)!
        sec_protocol_options_set_local_identity(options.securityProtocolOptions, identity)
        sec_protocol_options_set_max_tls_protocol_version(options.securityProtocolOptions, .TLSv13)
        let parameters = NWParameters(quic: options)
        parameters.requiredLocalEndpoint = .hostPort(host: "127.0.0.1", port: .any)
        listener = try NWListener(using: parameters)
    }

    func start() {
        listener.stateUpdateHandler = { (newState: NWListener.State) in
            switch newState {
            case .setup, .waiting:
                break
            case .ready:
                self.onReady?(self.listener.port!)
            case .failed(let error):
                self.onFailure?(error)
            case .cancelled:
                break
            }
        }
        listener.newConnectionGroupHandler = { (group: NWConnectionGroup) in
            self.tunnels += 1
            group.newConnectionHandler = { (connection: NWConnection) in self.serve(connection, in: group) }
            group.setReceiveHandler(maximumMessageSize: 65_535, rejectOversizedMessages: true) {
                (message: NWConnectionGroup.Message, content: Data?, isComplete: Bool) in
                message.reply(content: content)
            }
            group.start(queue: self.queue)
        }
        listener.start(queue: queue)
    }

    private func serve(_ inbound: NWConnection, in group: NWConnectionGroup) {
        let metadata = inbound.metadata(definition: NWProtocolQUIC.definition) as! NWProtocolQUIC.Metadata
        // Bit 1 of a stream ID marks a unidirectional stream (RFC 9000 §2.1).
        let isUnidirectional = metadata.streamIdentifier & 0x2 != 0
        let outbound: NWConnection
        if isUnidirectional {
            let options = NWProtocolQUIC.Options()
            options.direction = .unidirectional
            outbound = NWConnection(from: group, using: options)!
            outbound.start(queue: queue)
        } else {
            outbound = inbound
        }
        inbound.start(queue: queue)
        pump(from: inbound, to: outbound)
    }

    private func pump(from inbound: NWConnection, to outbound: NWConnection) {
        inbound.receive(minimumIncompleteLength: 1, maximumLength: 65_536) {
            (content: Data?, context: NWConnection.ContentContext?, isComplete: Bool, error: NWError?) in
            if error != nil {
                let metadata = inbound.metadata(definition: NWProtocolQUIC.definition) as! NWProtocolQUIC.Metadata
                let outboundMetadata = outbound.metadata(definition: NWProtocolQUIC.definition) as! NWProtocolQUIC.Metadata
                outboundMetadata.applicationError = metadata.applicationError
                outbound.cancel()
                return
            }
            // The peer's FIN ends the echo's stream too: complete the final message then.
            outbound.send(content: content, contentContext: isComplete ? .finalMessage : .defaultMessage, isComplete: isComplete,
                          completion: .contentProcessed { (_: NWError?) in })
            if !isComplete { self.pump(from: inbound, to: outbound) }
        }
    }
}
