// A peer-to-peer app written as Apple's samples write one (TicTacToe's PeerListener,
// PeerBrowser and PeerConnection): it advertises itself with NWListener(service:using:), finds
// other peers with an NWBrowser, and connects to a browse result's endpoint, with no address
// or port configured anywhere. Only the import and the Linux-only
// `sec_identity_create(certificateChainPEMFile:privateKeyPEMFile:)` differ.
#if canImport(Network)
import Network
#else
import QuicTransport
#endif
import Foundation

/// One peer: it answers each message on a stream with "NAME heard: MESSAGE", and sends
/// messages to the peers it finds.
// @unchecked Sendable: its state is used on `queue`, where every handler runs; the test sets the
// callbacks before `start` and reads the rest in `queue.sync`.
final class PeerToPeerApp: @unchecked Sendable {
    static let serviceType = "_qp2p._udp"
    let name: String
    let passcode: String
    let queue: DispatchQueue
    private let certificateFile: String
    private let keyFile: String
    /// The certificates of the peers this one trusts, by DER bytes.
    private let trustedCertificates: [Data]
    private var listener: NWListener?
    private var browser: NWBrowser?
    private(set) var advertisedEndpoint: NWEndpoint?
    private(set) var discoveredPeers: [NWBrowser.Result] = []
    private(set) var answeredMessages = 0
    var onAdvertised: ((NWEndpoint) -> Void)?
    var onPeerFound: ((NWBrowser.Result) -> Void)?
    var onFailure: ((String) -> Void)?

    init(name: String, passcode: String, certificateFile: String, keyFile: String, trustedCertificates: [Data]) {
        self.name = name
        self.passcode = passcode
        self.certificateFile = certificateFile
        self.keyFile = keyFile
        self.trustedCertificates = trustedCertificates
        self.queue = DispatchQueue(label: "app.peer.\(name)")
    }

    private func parameters(asServer: Bool) -> NWParameters {
        let options = NWProtocolQUIC.Options(alpn: ["qp2p"])
        options.idleTimeout = 30_000
        if asServer {
            let identity = sec_identity_create(certificateChainPEMFile: certificateFile, privateKeyPEMFile: keyFile)!
            sec_protocol_options_set_local_identity(options.securityProtocolOptions, identity)
        } else {
            sec_protocol_options_set_verify_block(
                options.securityProtocolOptions,
                { (metadata: sec_protocol_metadata_t, trust: sec_trust_t, complete: @escaping sec_protocol_verify_complete_t) in
                    let chain = SecTrustCopyCertificateChain(sec_trust_copy_ref(trust).takeRetainedValue()) as? [SecCertificate] ?? []
                    guard let leaf = chain.first else {
                        complete(false)
                        return
                    }
                    complete(self.trustedCertificates.contains(SecCertificateCopyData(leaf) as Data))
                },
                queue
            )
        }
        let parameters = NWParameters(quic: options)
        parameters.includePeerToPeer = true
        return parameters
    }

    /// Advertises this peer and browses for the others.
    func start() {
        startListener()
        startBrowser()
    }

    func stop() {
        listener?.cancel()
        browser?.cancel()
    }

    // PeerListener
    private func startListener() {
        let txtRecord = NWTXTRecord(["passcode": passcode, "name": name])
        let listener = try! NWListener(service: NWListener.Service(name: name, type: Self.serviceType, txtRecord: txtRecord),
                                       using: parameters(asServer: true))
        self.listener = listener
        listener.stateUpdateHandler = { (newState: NWListener.State) in
            switch newState {
            case .ready, .setup, .waiting, .cancelled:
                break
            case .failed(let error):
                self.onFailure?("listener failed: \(error)")
            }
        }
        listener.serviceRegistrationUpdateHandler = { (change: NWListener.ServiceRegistrationChange) in
            switch change {
            case .add(let endpoint):
                self.advertisedEndpoint = endpoint
                self.onAdvertised?(endpoint)
            case .remove:
                self.advertisedEndpoint = nil
            }
        }
        listener.newConnectionGroupHandler = { (group: NWConnectionGroup) in
            group.newConnectionHandler = { (connection: NWConnection) in
                connection.start(queue: self.queue)
                self.answer(on: connection)
            }
            group.start(queue: self.queue)
        }
        listener.start(queue: queue)
    }

    private func answer(on connection: NWConnection) {
        connection.receive(minimumIncompleteLength: 1, maximumLength: 65_536) {
            (content: Data?, context: NWConnection.ContentContext?, isComplete: Bool, error: NWError?) in
            guard let content = content, error == nil else { return }
            self.answeredMessages += 1
            let reply = "\(self.name) heard: \(String(decoding: content, as: UTF8.self))"
            connection.send(content: reply.data(using: .utf8), contentContext: .finalMessage, isComplete: true,
                            completion: .contentProcessed { (_: NWError?) in })
        }
    }

    // PeerBrowser
    private func startBrowser() {
        let browser = NWBrowser(for: .bonjourWithTXTRecord(type: Self.serviceType, domain: nil), using: NWParameters())
        self.browser = browser
        browser.stateUpdateHandler = { (newState: NWBrowser.State) in
            switch newState {
            case .failed(let error):
                self.onFailure?("browser failed: \(error)")
                browser.cancel()
            case .ready, .setup, .cancelled, .waiting:
                break
            }
        }
        browser.browseResultsChangedHandler = { (results: Set<NWBrowser.Result>, changes: Set<NWBrowser.Result.Change>) in
            for change in changes {
                guard case .added(let result) = change else { continue }
                // Skip ourselves, and peers that do not know the passcode.
                if case .service(let serviceName, _, _, _) = result.endpoint, serviceName == self.name { continue }
                guard case .bonjour(let txtRecord) = result.metadata, txtRecord["passcode"] == self.passcode else { continue }
                self.discoveredPeers.append(result)
                self.onPeerFound?(result)
            }
        }
        browser.start(queue: queue)
    }

    // PeerConnection: one message to a peer on a connection of its own; `completion` gets the answer.
    func send(_ message: String, to endpoint: NWEndpoint, completion: @escaping @Sendable (Result<String, NWError>) -> Void) {
        let connection = NWConnection(to: endpoint, using: parameters(asServer: false))
        connection.stateUpdateHandler = { (newState: NWConnection.State) in
            switch newState {
            case .ready:
                connection.send(content: message.data(using: .utf8), contentContext: .finalMessage, isComplete: true,
                                completion: .contentProcessed { (_: NWError?) in })
                connection.receive(minimumIncompleteLength: 1, maximumLength: 65_536) {
                    (content: Data?, _: NWConnection.ContentContext?, _: Bool, error: NWError?) in
                    if let content = content {
                        completion(.success(String(decoding: content, as: UTF8.self)))
                    } else {
                        completion(.failure(error ?? NWError.posix(.ENODATA)))
                    }
                    connection.cancel()
                }
            case .failed(let error), .waiting(let error):
                completion(.failure(error))
                connection.cancel()
            case .setup, .preparing, .cancelled:
                break
            }
        }
        connection.start(queue: queue)
    }
}
