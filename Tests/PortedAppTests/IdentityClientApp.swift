// A client written as Apple-platform apps write one that authenticates with a bundled PKCS #12
// identity and pins its server's certificate in a verify block. Only the import differs.
#if canImport(Network)
import Network
#else
import QuicTransport
#endif
import Foundation

/// Imports a PKCS #12 identity, presents it, trusts only the pinned server certificate, and
/// echoes one message on one stream.
// @unchecked Sendable: its state is written on `queue`, where the handlers and the verify block
// run; the test reads it after a callback from `queue` has resumed it.
final class IdentityClientApp: @unchecked Sendable {
    enum AppError: Error {
        case importFailed(OSStatus)
    }

    let queue = DispatchQueue(label: "app.identity-client")
    private(set) var group: NWConnectionGroup!
    /// The server certificate the app ships with, DER.
    let pinnedServerCertificate: Data
    /// The subject of the leaf certificate in the app's own identity, for its log.
    private(set) var identitySubject: String?
    private(set) var serverSubject: String?

    init(host: String, port: UInt16, pkcs12: Data, passphrase: String, pinnedServerCertificate: Data) throws {
        self.pinnedServerCertificate = pinnedServerCertificate
        var items: CFArray?
        let status = SecPKCS12Import(pkcs12 as CFData, [kSecImportExportPassphrase as String: passphrase] as CFDictionary, &items)
        guard status == errSecSuccess else { throw AppError.importFailed(status) }
        let dict = (items as! [[String: Any]])[0]
        let identity = dict[kSecImportItemIdentity as String] as! SecIdentity
        var certificate: SecCertificate?
        if SecIdentityCopyCertificate(identity, &certificate) == errSecSuccess, let certificate {
            identitySubject = SecCertificateCopySubjectSummary(certificate) as String?
        }

        let options = NWProtocolQUIC.Options(alpn: ["quic-echo"])
        sec_protocol_options_set_local_identity(options.securityProtocolOptions, sec_identity_create(identity)!)
        sec_protocol_options_set_verify_block(
            options.securityProtocolOptions,
            { (metadata: sec_protocol_metadata_t, trust: sec_trust_t, complete: @escaping sec_protocol_verify_complete_t) in
                let secTrust = sec_trust_copy_ref(trust).takeRetainedValue()
                guard let chain = SecTrustCopyCertificateChain(secTrust) as? [SecCertificate], let leaf = chain.first else {
                    complete(false)
                    return
                }
                self.serverSubject = SecCertificateCopySubjectSummary(leaf) as String?
                complete(SecCertificateCopyData(leaf) as Data == self.pinnedServerCertificate)
            },
            queue
        )
        let endpoint = NWEndpoint.hostPort(host: NWEndpoint.Host(host), port: NWEndpoint.Port(rawValue: port)!)
        group = NWConnectionGroup(with: NWMultiplexGroup(to: endpoint), using: NWParameters(quic: options))
    }

    /// Connects, sends `message` on a new stream with FIN, and reports the echo or the failure.
    func echo(_ message: Data, completion: @escaping @Sendable (Result<Data, NWError>) -> Void) {
        group.stateUpdateHandler = { (state: NWConnectionGroup.State) in
            switch state {
            case .ready:
                self.send(message, completion: completion)
            case .failed(let error):
                completion(.failure(error))
            case .setup, .waiting, .cancelled:
                break
            }
        }
        group.start(queue: queue)
    }

    private func send(_ message: Data, completion: @escaping @Sendable (Result<Data, NWError>) -> Void) {
        let stream = NWConnection(from: group)!
        stream.start(queue: queue)
        stream.send(content: message, contentContext: .finalMessage, isComplete: true, completion: .contentProcessed { (error: NWError?) in
            if let error { completion(.failure(error)) }
        })
        receive(on: stream, into: Data(), completion: completion)
    }

    private func receive(on stream: NWConnection, into received: Data, completion: @escaping @Sendable (Result<Data, NWError>) -> Void) {
        stream.receive(minimumIncompleteLength: 1, maximumLength: 65_536) {
            (content: Data?, _: NWConnection.ContentContext?, isComplete: Bool, error: NWError?) in
            if let error {
                completion(.failure(error))
                return
            }
            let total = received + (content ?? Data())
            if isComplete {
                completion(.success(total))
            } else {
                self.receive(on: stream, into: total, completion: completion)
            }
        }
    }

    func cancel() { group.cancel() }
}
