// A command-line tool written as tools that qualify Network.framework's names write it
// (`Network.NWConnection`, `Network.NWEndpoint.Port`), usually because another module they
// import has a type of the same name. Only the import differs.
#if canImport(Network)
import Network
#else
import QuicTransport
#endif
import Foundation

/// `quic-ping HOST PORT MESSAGE`: opens a tunnel to an echo server, sends the message on one
/// stream, and prints the echo, the stream's identifier and the round trip, as a tool would.
// @unchecked Sendable: `output` is written on `queue` only, and read after `exit` was called.
final class QualifiedPingTool: @unchecked Sendable {
    let queue = DispatchQueue(label: "tool.quic-ping")
    let group: Network.NWConnectionGroup
    /// What the tool printed, line by line.
    private(set) var output: [String] = []

    init(host: String, port: UInt16, pinnedCertificate: Data) {
        let options = Network.NWProtocolQUIC.Options(alpn: ["quic-echo"])
        options.idleTimeout = 10_000
        options.direction = Network.NWProtocolQUIC.Options.Direction.bidirectional
        sec_protocol_options_set_verify_block(options.securityProtocolOptions, { _, trust, complete in
            let chain = SecTrustCopyCertificateChain(sec_trust_copy_ref(trust).takeRetainedValue()) as? [SecCertificate] ?? []
            complete(chain.first.map { SecCertificateCopyData($0) as Data == pinnedCertificate } ?? false)
        }, queue)
        let parameters = Network.NWParameters(quic: options)
        let endpoint = Network.NWEndpoint.hostPort(
            host: Network.NWEndpoint.Host(host),
            port: Network.NWEndpoint.Port(rawValue: port)!
        )
        let descriptor: any Network.NWGroupDescriptor = Network.NWMultiplexGroup(to: endpoint)
        group = Network.NWConnectionGroup(with: descriptor, using: parameters)
    }

    /// Runs the tool; `exit` gets its exit status.
    func run(message: String, exit: @escaping @Sendable (Int32) -> Void) {
        group.stateUpdateHandler = { (state: Network.NWConnectionGroup.State) in
            switch state {
            case .ready:
                self.ping(message, exit: exit)
            case .failed(let error):
                self.output.append("quic-ping: \(error)")
                exit(1)
            case .setup, .waiting, .cancelled:
                break
            }
        }
        group.start(queue: queue)
    }

    private func ping(_ message: String, exit: @escaping @Sendable (Int32) -> Void) {
        let started = DispatchTime.now()
        let stream: Network.NWConnection = Network.NWConnection(from: group)!
        stream.start(queue: queue)
        stream.send(
            content: Data(message.utf8),
            contentContext: Network.NWConnection.ContentContext.finalMessage,
            isComplete: true,
            completion: Network.NWConnection.SendCompletion.contentProcessed { (error: Network.NWError?) in
                if let error { self.output.append("quic-ping: send: \(error)") }
            }
        )
        stream.receiveMessage { (content: Data?, _: Network.NWConnection.ContentContext?, _: Bool, error: Network.NWError?) in
            if let error {
                self.output.append("quic-ping: receive: \(error)")
                exit(1)
                return
            }
            let metadata = stream.metadata(definition: Network.NWProtocolQUIC.definition) as? Network.NWProtocolQUIC.Metadata
            let milliseconds = (DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1_000_000
            self.output.append("\(String(decoding: content ?? Data(), as: UTF8.self))")
            self.output.append("stream \(metadata?.streamIdentifier ?? 0), \(milliseconds) ms")
            self.group.cancel()
            exit(0)
        }
    }
}
