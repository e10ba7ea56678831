// Written as an app on Apple platforms writes Network.framework's QUIC API when it chooses its
// path: an endpoint built from an `IPv4Address` (or a URL), a service class, a shareable local
// port, loopback required and cellular refused, and switches over Apple's endpoint cases. Only
// the import differs.
#if canImport(Network)
import Network
#else
import QuicTransport
#endif
import Foundation

/// A client that sends one message on one stream and reads the echo, over the path it asks for.
// @unchecked Sendable: its state is written on `queue`, where handlers and the verify block
// run; the test reads it in `queue.sync` or after a callback from `queue` has resumed it.
final class PathChoosingClientApp: @unchecked Sendable {
    let queue = DispatchQueue(label: "app.path-client")
    private(set) var group: NWConnectionGroup!
    private(set) var log: [String] = []
    var onReady: (() -> Void)?
    var onEnd: ((String) -> Void)?

    /// A client for the server at `address` (dotted quad) and `port`, or at `url` when given.
    init(address: String, port: UInt16, url: URL? = nil, pinnedCertificate: Data) {
        let endpoint: NWEndpoint
        if let url {
            endpoint = .url(url)
        } else {
            guard let ipv4 = IPv4Address(address) else { fatalError("not an IPv4 address: \(address)") }
            endpoint = .hostPort(host: .ipv4(ipv4), port: NWEndpoint.Port(rawValue: port)!)
        }
        let options = NWProtocolQUIC.Options(alpn: ["quic-echo"])
        options.idleTimeout = 30_000
        sec_protocol_options_set_verify_block(
            options.securityProtocolOptions,
            { (_: sec_protocol_metadata_t, trust: sec_trust_t, complete: @escaping sec_protocol_verify_complete_t) in
                let chain = SecTrustCopyCertificateChain(sec_trust_copy_ref(trust).takeRetainedValue()) as? [SecCertificate]
                complete(chain.map { SecCertificateCopyData($0[0]) as Data == pinnedCertificate } ?? false)
            },
            queue
        )
        let parameters = NWParameters(quic: options)
        parameters.serviceClass = .responsiveData
        parameters.allowLocalEndpointReuse = true
        parameters.requiredInterfaceType = .loopback
        parameters.prohibitedInterfaceTypes = [.cellular]
        parameters.prohibitExpensivePaths = true
        parameters.prohibitConstrainedPaths = true
        parameters.multipathServiceType = .handover
        parameters.expiredDNSBehavior = .allow
        parameters.includePeerToPeer = false
        parameters.preferNoProxies = true
        group = NWConnectionGroup(with: NWMultiplexGroup(to: endpoint), using: parameters)
    }

    /// What kind of endpoint `endpoint` is, as an app that logs its peers would say it.
    static func describe(_ endpoint: NWEndpoint?) -> String {
        guard let endpoint else { return "none" }
        switch endpoint {
        case .hostPort(let host, let port):
            switch host {
            case .ipv4(let address):
                return "IPv4 \(address)\(address.isLoopback ? " (loopback)" : "") port \(port.rawValue)"
            case .ipv6(let address):
                return "IPv6 \(address)\(address.isLoopback ? " (loopback)" : "") port \(port.rawValue)"
            case .name(let name, _):
                return "name \(name) port \(port.rawValue)"
            @unknown default:
                return "another host"
            }
        case .url(let url):
            return "URL \(url.absoluteString)"
        case .unix(let path):
            return "Unix \(path)"
        @unknown default:
            return "another endpoint"
        }
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
        group.start(queue: queue)
    }

    /// Sends `message` with FIN on a new stream and hands back the echo.
    func echo(_ message: Data, completion: @escaping @Sendable (Data?) -> Void) {
        let connection = NWConnection(from: group)!
        connection.start(queue: queue)
        connection.send(content: message, contentContext: .finalMessage, isComplete: true, completion: .contentProcessed { (error: NWError?) in
            if error != nil { completion(nil) }
        })
        receiveAll(on: connection, into: Data(), completion: completion)
    }

    /// Reads `connection` to its end, appending to `received`.
    private func receiveAll(on connection: NWConnection, into received: Data, completion: @escaping @Sendable (Data?) -> Void) {
        connection.receive(minimumIncompleteLength: 1, maximumLength: 65_536) {
            (content: Data?, _: NWConnection.ContentContext?, isComplete: Bool, error: NWError?) in
            if error != nil {
                completion(nil)
                return
            }
            var total = received
            if let content { total.append(content) }
            if isComplete {
                completion(total)
            } else {
                self.receiveAll(on: connection, into: total, completion: completion)
            }
        }
    }

    /// The tunnel's path as the app reports it: its remote endpoint and whether it is loopback.
    var pathSummary: String {
        guard let path = group.currentPath else { return "no path" }
        let kind = path.usesInterfaceType(.loopback) ? "loopback" : "not loopback"
        return "\(Self.describe(path.remoteEndpoint)) over \(kind)"
    }
}
