// Written as an app on Apple platforms writes Network.framework: a TCP control channel beside a
// QUIC tunnel, both with completion handlers, typed closure parameters, `as?` casts
// and exhaustive switches. Only the import differs.
#if canImport(Network)
import Network
#else
import QuicTransport
#endif
import Foundation

/// A client with a line-based control channel over TCP and a data tunnel (QUIC, ALPN
/// "quic-echo", pinned to a certificate in a verify block) to the same host.
// @unchecked Sendable: its state is written on `queue`, where handlers run; the test reads it
// after a callback from `queue` has resumed it.
final class ControlChannelApp: @unchecked Sendable {
    let queue = DispatchQueue(label: "app.control-channel")
    private(set) var control: NWConnection!
    private(set) var tunnel: NWConnectionGroup!
    private(set) var log: [String] = []
    private(set) var controlMetadataSeen = false
    private var readyCount = 0

    init(host: String, controlPort: UInt16, tunnelPort: UInt16, pinnedCertificate: Data) {
        let verify: sec_protocol_verify_t = { (metadata: sec_protocol_metadata_t, trust: sec_trust_t, complete: @escaping sec_protocol_verify_complete_t) in
            let secTrust = sec_trust_copy_ref(trust).takeRetainedValue()
            let chain = SecTrustCopyCertificateChain(secTrust) as? [SecCertificate] ?? []
            complete(chain.first.map { SecCertificateCopyData($0) as Data == pinnedCertificate } ?? false)
        }

        let tcpOptions = NWProtocolTCP.Options()
        tcpOptions.noDelay = true
        tcpOptions.enableKeepalive = true
        tcpOptions.keepaliveIdle = 10
        tcpOptions.connectionTimeout = 5
        let controlParameters = NWParameters(tls: nil, tcp: tcpOptions)
        control = NWConnection(host: NWEndpoint.Host(host), port: NWEndpoint.Port(rawValue: controlPort)!, using: controlParameters)

        let quicOptions = NWProtocolQUIC.Options(alpn: ["quic-echo"])
        sec_protocol_options_set_verify_block(quicOptions.securityProtocolOptions, verify, queue)
        let tunnelEndpoint = NWEndpoint.hostPort(host: NWEndpoint.Host(host), port: NWEndpoint.Port(rawValue: tunnelPort)!)
        tunnel = NWConnectionGroup(with: NWMultiplexGroup(to: tunnelEndpoint), using: NWParameters(quic: quicOptions))
    }

    /// Starts both; `completion` gets "ready" once both are, or the first failure.
    func start(completion: @escaping @Sendable (String) -> Void) {
        control.stateUpdateHandler = { (state: NWConnection.State) in
            switch state {
            case .setup, .preparing:
                break
            case .waiting(let error):
                self.log.append("control waiting: \(error)")
            case .ready:
                self.log.append("control ready")
                self.controlMetadataSeen = self.control.metadata(definition: NWProtocolTCP.definition) is NWProtocolTCP.Metadata
                self.oneReady(completion)
            case .failed(let error):
                self.log.append("control failed: \(error)")
                completion("control failed: \(error)")
            case .cancelled:
                self.log.append("control cancelled")
            }
        }
        tunnel.stateUpdateHandler = { (state: NWConnectionGroup.State) in
            switch state {
            case .setup:
                break
            case .waiting(let error):
                self.log.append("tunnel waiting: \(error)")
            case .ready:
                self.log.append("tunnel ready")
                self.oneReady(completion)
            case .failed(let error):
                self.log.append("tunnel failed: \(error)")
                completion("tunnel failed: \(error)")
            case .cancelled:
                self.log.append("tunnel cancelled")
            }
        }
        control.start(queue: queue)
        tunnel.start(queue: queue)
    }

    private func oneReady(_ completion: @escaping @Sendable (String) -> Void) {
        readyCount += 1
        if readyCount == 2 { completion("ready") }
    }

    /// Sends a command line on the control channel and reads its echo, then sends `payload` on a
    /// new stream of the tunnel and reads its echo: the reply line and the echoed payload.
    func exchange(command: String, payload: Data, completion: @escaping @Sendable (Result<(String, Data), NWError>) -> Void) {
        let line = Data((command + "\n").utf8)
        control.send(content: line, completion: .contentProcessed { (error: NWError?) in
            if let error { completion(.failure(error)) }
        })
        readLine(into: Data()) { (result: Result<String, NWError>) in
            switch result {
            case .failure(let error):
                completion(.failure(error))
            case .success(let reply):
                self.echoOnStream(payload) { (echo: Result<Data, NWError>) in
                    completion(echo.map { (reply, $0) })
                }
            }
        }
    }

    private func readLine(into buffer: Data, completion: @escaping @Sendable (Result<String, NWError>) -> Void) {
        control.receive(minimumIncompleteLength: 1, maximumLength: 4096) {
            (content: Data?, context: NWConnection.ContentContext?, isComplete: Bool, error: NWError?) in
            if let error {
                completion(.failure(error))
                return
            }
            var total = buffer
            if let content { total.append(content) }
            if let newline = total.firstIndex(of: 0x0A) {
                completion(.success(String(decoding: total[..<newline], as: UTF8.self)))
            } else if isComplete {
                completion(.failure(.posix(.ECONNRESET)))
            } else {
                self.readLine(into: total, completion: completion)
            }
        }
    }

    private func echoOnStream(_ payload: Data, completion: @escaping @Sendable (Result<Data, NWError>) -> Void) {
        guard let stream = NWConnection(from: tunnel) else {
            completion(.failure(.posix(.ENOTCONN)))
            return
        }
        stream.start(queue: queue)
        stream.send(content: payload, contentContext: .finalMessage, isComplete: true, completion: .idempotent)
        stream.receiveMessage { (content: Data?, context: NWConnection.ContentContext?, isComplete: Bool, error: NWError?) in
            if let error {
                completion(.failure(error))
            } else {
                completion(.success(content ?? Data()))
            }
        }
    }

    func stop() {
        control.cancel()
        tunnel.cancel()
    }
}
