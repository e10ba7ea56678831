import Synchronization

/// What the workers serving one address share, so that any of them accepts what another began
/// and the limits hold for the address as a whole.
///
/// - The connection-ID secret (in each worker's `QUICConnectionIDFactory`) keys Retry tokens,
///   stateless resets and the worker mask, so any worker validates a token another issued.
/// - One session-ticket key (RFC 8446 §4.6.1): a ticket from one worker resumes on any other.
/// - One 0-RTT anti-replay cache (RFC 8446 §8).
/// - The connection count behind `maximumConnections`, the per-client counts behind
///   `maximumConnectionsPerAddress`, and the graceful-shutdown flag.
/// - A count of datagrams one worker handed to another (`forwardedDatagrams`): with the kernel's
///   steering program attached it stays at zero in steady state.
package final class QUICEndpointSharedState: Sendable {
    /// How many workers serve the address; a worker byte at or above it names no worker.
    package let workerCount: Int
    let ticketKey: TLSSessionTicketKey?
    let antiReplay: TLSAntiReplay?
    private let connections = Atomic<Int>(0)
    private let refusing = Atomic<Bool>(false)
    private let forwarded = Atomic<Int>(0)
    /// The first few datagrams forwarded, described, for `forwardedSamples`.
    private let forwardedDescriptions = Mutex<[String]>([])
    /// Connections per client whose address is proven, for `maximumConnectionsPerAddress`.
    private let perClient = Mutex<[QUICClientAddress: Int]>([:])

    package init(workerCount: Int = 1) {
        self.workerCount = workerCount
        ticketKey = try? TLSSessionTicketKey()
        antiReplay = try? TLSAntiReplay()
    }

    /// Reserves room for one more connection; false when `limit` connections exist already.
    func reserveConnection(limit: Int) -> Bool {
        var current = connections.load(ordering: .relaxed)
        while current < limit {
            let (exchanged, original) = connections.compareExchange(
                expected: current, desired: current + 1, ordering: .relaxed
            )
            if exchanged { return true }
            current = original
        }
        return false
    }

    func releaseConnection() { connections.subtract(1, ordering: .relaxed) }

    /// How many connections with a proven address `client` has.
    func connectionCount(of client: QUICClientAddress) -> Int {
        perClient.withLock { $0[client] ?? 0 }
    }

    /// Counts one more connection for `client`; false, counting nothing, when it has `limit`.
    func admit(_ client: QUICClientAddress, limit: Int) -> Bool {
        perClient.withLock { counts in
            let count = counts[client] ?? 0
            guard count < limit else { return false }
            counts[client] = count + 1
            return true
        }
    }

    /// Forgets one of `client`'s connections.
    func release(_ client: QUICClientAddress) {
        perClient.withLock { counts in
            let count = (counts[client] ?? 1) - 1
            counts[client] = count > 0 ? count : nil
        }
    }

    /// Set during a graceful shutdown: new clients get CONNECTION_REFUSED, existing ones continue.
    package var refusesNewConnections: Bool {
        get { refusing.load(ordering: .relaxed) }
        set { refusing.store(newValue, ordering: .relaxed) }
    }

    /// Datagrams a worker received for a connection of another worker and passed on.
    package var forwardedDatagrams: Int { forwarded.load(ordering: .relaxed) }

    /// The first eight datagrams forwarded, each as its header form, size, DCID, owner and the
    /// worker that received it: for finding out why the kernel delivered them elsewhere.
    package var forwardedSamples: [String] { forwardedDescriptions.withLock { $0 } }

    /// Counts a forwarded datagram; the first eight are described by `describe`, run only for them.
    func countForwarded(_ describe: () -> String) {
        guard forwarded.add(1, ordering: .relaxed).newValue <= 8 else { return }
        let description = describe()
        forwardedDescriptions.withLock { $0.append(description) }
    }
}
