// A client that logs how its connection was made and what it carried, as apps read
// Network.framework's establishment and data-transfer reports. Its handlers are methods of a
// class that is not Sendable, passed as completion arguments: Apple declares them
// `@preconcurrency … @Sendable`, so this compiles in Swift 5 without a word and in Swift 6 with
// a warning per method. Only the import differs.
#if canImport(Network)
import Network
#else
import QuicTransport
#endif
import Foundation

/// What the reporting client saw: the echo and both reports.
struct ReportingClientOutcome: Sendable {
    var echoedBytes = 0
    var establishment: NWConnection.EstablishmentReport?
    var transfer: NWConnection.DataTransferReport?
    var log: [String] = []
}

/// Sends one message on a stream, reads the echo, then asks for the establishment report and
/// collects the data-transfer report it started with the stream. Not Sendable: it lives on
/// `queue`, where every handler runs.
final class ReportingClientApp {
    let queue = DispatchQueue(label: "app.reporting-client")
    let group: NWConnectionGroup
    let message: Data
    let finished: @Sendable (ReportingClientOutcome) -> Void
    private var stream: NWConnection?
    private var pending: NWConnection.PendingDataTransferReport?
    private var outcome = ReportingClientOutcome()

    init(host: String, port: UInt16, pinnedCertificate: Data, message: Data, finished: @escaping @Sendable (ReportingClientOutcome) -> Void) {
        self.message = message
        self.finished = finished
        let options = NWProtocolQUIC.Options(alpn: ["quic-echo"])
        sec_protocol_options_set_verify_block(options.securityProtocolOptions, { _, trust, complete in
            let chain = SecTrustCopyCertificateChain(sec_trust_copy_ref(trust).takeRetainedValue()) as? [SecCertificate] ?? []
            complete(chain.first.map { SecCertificateCopyData($0) as Data == pinnedCertificate } ?? false)
        }, queue)
        let endpoint = NWEndpoint.hostPort(host: NWEndpoint.Host(host), port: NWEndpoint.Port(rawValue: port)!)
        group = NWConnectionGroup(with: NWMultiplexGroup(to: endpoint), using: NWParameters(quic: options))
    }

    func start() {
        // A handler *property* takes no non-Sendable method in Swift 6, on Apple too (only
        // arguments are relaxed by `@preconcurrency`): the app vouches that `queue` confines it.
        nonisolated(unsafe) let app = self
        group.stateUpdateHandler = { state in app.groupStateChanged(state) }
        group.start(queue: queue)
    }

    private func groupStateChanged(_ state: NWConnectionGroup.State) {
        switch state {
        case .ready:
            let stream = NWConnection(from: group)!
            self.stream = stream
            pending = stream.startDataTransferReport()
            stream.start(queue: queue)
            stream.send(content: message, contentContext: .finalMessage, isComplete: true, completion: .contentProcessed(sent))
            stream.receive(minimumIncompleteLength: 1, maximumLength: 65_536, completion: received)
        case .failed(let error):
            outcome.log.append("failed: \(error)")
            finished(outcome)
        case .setup, .waiting, .cancelled:
            break
        }
    }

    private func sent(_ error: NWError?) {
        if let error { outcome.log.append("send: \(error)") }
    }

    private func received(_ content: Data?, _ context: NWConnection.ContentContext?, _ isComplete: Bool, _ error: NWError?) {
        if let error {
            outcome.log.append("receive: \(error)")
            finished(outcome)
            return
        }
        outcome.echoedBytes += content?.count ?? 0
        if isComplete {
            stream?.requestEstablishmentReport(queue: queue, completion: establishmentReported)
        } else {
            stream?.receive(minimumIncompleteLength: 1, maximumLength: 65_536, completion: received)
        }
    }

    private func establishmentReported(_ report: NWConnection.EstablishmentReport?) {
        outcome.establishment = report
        if let report {
            let resolved = report.resolutions.map { "\($0.endpointCount) address(es) in \(Int($0.duration * 1000)) ms" }
            outcome.log.append(
                "connected in \(Int(report.duration * 1000)) ms, \(report.previousAttemptCount) earlier attempt(s), "
                    + "resolution: \(resolved.isEmpty ? "none" : resolved.joined(separator: ", ")), "
                    + "proxy: \(report.proxyEndpoint.map { "\($0)" } ?? "none")"
            )
            for handshake in report.handshakes {
                outcome.log.append("\(handshake.definition.name) handshake RTT \(Int(handshake.handshakeRTT * 1000)) ms")
            }
        }
        pending?.collect(queue: queue, completion: transferCollected)
    }

    private func transferCollected(_ report: NWConnection.DataTransferReport) {
        outcome.transfer = report
        let path = report.aggregatePathReport
        outcome.log.append(
            "over \(report.pathReports.count) path(s) via \(path.interface.name): sent \(path.sentApplicationByteCount) B, "
                + "received \(path.receivedApplicationByteCount) B, smoothed RTT \(path.transportSmoothedRTT) s"
        )
        group.cancel()
        finished(outcome)
    }
}
