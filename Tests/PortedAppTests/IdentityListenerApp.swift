// A listener written as Apple-platform apps write one whose identity comes from a PKCS #12
// file with SecPKCS12Import. Only the import differs.
#if canImport(Network)
import Network
#else
import QuicTransport
#endif
import Foundation

/// Echoes every bidirectional stream on itself, presenting an identity from PKCS #12.
// @unchecked Sendable: the handlers run on `queue`; the test sets them before `start` and reads
// `tunnels` in `queue.sync`.
final class IdentityListenerApp: @unchecked Sendable {
    let listener: NWListener
    let queue = DispatchQueue(label: "app.identity-listener")
    private(set) var tunnels = 0
    var onReady: ((NWEndpoint.Port) -> Void)?
    var onFailure: ((NWError) -> Void)?

    init(pkcs12: Data, passphrase: String) throws {
        var items: CFArray?
        let options = [kSecImportExportPassphrase as String: passphrase]
        let status = SecPKCS12Import(pkcs12 as CFData, options as CFDictionary, &items)
        guard status == errSecSuccess, let array = items as? [[String: Any]], let first = array.first else {
            throw NWError.tls(status)
        }
        let identity = first[kSecImportItemIdentity as String] as! SecIdentity

        let quicOptions = NWProtocolQUIC.Options(alpn: ["quic-echo"])
        sec_protocol_options_set_local_identity(quicOptions.securityProtocolOptions, sec_identity_create(identity)!)
        let parameters = NWParameters(quic: quicOptions)
        parameters.requiredLocalEndpoint = .hostPort(host: "127.0.0.1", port: .any)
        listener = try NWListener(using: parameters)
    }

    func start() {
        listener.stateUpdateHandler = { (newState: NWListener.State) in
            switch newState {
            case .ready:
                self.onReady?(self.listener.port!)
            case .failed(let error):
                self.onFailure?(error)
            case .setup, .waiting, .cancelled:
                break
            }
        }
        listener.newConnectionGroupHandler = { (group: NWConnectionGroup) in
            self.tunnels += 1
            group.newConnectionHandler = { (stream: NWConnection) in
                stream.start(queue: self.queue)
                self.echo(on: stream)
            }
            group.start(queue: self.queue)
        }
        listener.start(queue: queue)
    }

    private func echo(on stream: NWConnection) {
        stream.receive(minimumIncompleteLength: 1, maximumLength: 65_536) {
            (content: Data?, _: NWConnection.ContentContext?, isComplete: Bool, error: NWError?) in
            if error != nil { return }
            stream.send(content: content, contentContext: isComplete ? .finalMessage : .defaultMessage, isComplete: isComplete,
                        completion: .contentProcessed { (_: NWError?) in })
            if !isComplete { self.echo(on: stream) }
        }
    }
}
