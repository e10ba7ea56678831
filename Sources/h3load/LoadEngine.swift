import CommandLineSupport
import H3
import HTTPTypes
import NIOConcurrencyHelpers
import QuicTransport

/// Runs a load test: `clients` connections, each its own `HTTP3Client` (so each has its own
/// event loop), each with `streamsPerClient` request loops that share the client's supply of
/// requests. As in h2load, `-n` is split evenly among the clients, and the share of a client
/// whose connection fails is not sent by the others: it counts as failed. So `-c N -n N` is N
/// handshakes with one request each, whatever happens to any of them.
struct LoadEngine: Sendable {
    /// How many requests to send, or for how long.
    enum Amount: Sendable {
        case requests(Int)
        /// Keep sending for `duration`, after a `warmUp` whose requests are not counted.
        case duration(Duration, warmUp: Duration)
    }

    /// The requests, sent in turn (h2load cycles through its URLs the same way).
    let requests: [HTTPRequest]
    let host: String
    let port: UInt16
    let configuration: HTTP3Client.Configuration
    let clients: Int
    let streamsPerClient: Int
    let amount: Amount
    /// New connections per second; 0 starts them all at once (h2load's `--rate`).
    let connectionRate: Int

    /// How long requests in flight at a -D deadline may take to finish.
    static let gracePeriod = Duration.seconds(1)

    /// Runs every client to the end and summarises what they measured.
    func run() async -> LoadReport {
        let start = ContinuousClock.now
        let completions = CompletionClock()
        let supplies: [RequestSupply]
        let measuredFrom: ContinuousClock.Instant
        switch amount {
        case .requests(let count):
            supplies = Self.shares(of: count, among: clients).map {
                RequestSupply(limit: $0, deadline: nil, completions: completions)
            }
            measuredFrom = start
        case .duration(let duration, let warmUp):
            let deadline = start + warmUp + duration
            supplies = (0..<clients).map { _ in RequestSupply(limit: nil, deadline: deadline, completions: completions) }
            measuredFrom = start + warmUp
        }
        let results = await withTaskGroup(of: LoadReport.ClientResult.self) { group in
            for (index, supply) in supplies.enumerated() {
                group.addTask {
                    if connectionRate > 0, index > 0 {
                        try? await Task.sleep(for: .seconds(Double(index) / Double(connectionRate)))
                    }
                    return await runClient(supply: supply, measuredFrom: measuredFrom, reportsWireBytes: measuredFrom == start)
                }
            }
            var results: [LoadReport.ClientResult] = []
            for await result in group { results.append(result) }
            return results
        }
        let end = completions.last ?? ContinuousClock.now
        let seconds = (end - measuredFrom).seconds
        let requested: Int? = if case .requests(let count) = amount { count } else { nil }
        return LoadReport(results: results, seconds: max(seconds, 0), requested: requested)
    }

    /// h2load's split of `-n` among `-c` clients: n / c each, and one more for the first n % c.
    static func shares(of count: Int, among clients: Int) -> [Int] {
        (0..<clients).map { count / clients + ($0 < count % clients ? 1 : 0) }
    }

    /// One connection: its handshake, then its request loops, then its close.
    private func runClient(
        supply: RequestSupply, measuredFrom: ContinuousClock.Instant, reportsWireBytes: Bool
    ) async -> LoadReport.ClientResult {
        var result = LoadReport.ClientResult()
        let client = HTTP3Client(configuration: configuration)
        let connecting = ContinuousClock.now
        do {
            _ = try await client.connect(host: host, port: port)
        } catch {
            result.failure = "\(error)"
            await client.close()
            return result
        }
        result.handshake = (ContinuousClock.now - connecting).seconds
        let stop = NIOLockedValueBox<String?>(nil)
        let outcomes = await withTaskGroup(of: (LoadReport.Tally, HTTP3Response?)?.self) { group in
            // On the connection's own thread: each response wakes its loop there, with no hop to
            // the global pool and back (`HTTP3Client.taskExecutor`).
            for _ in 0..<streamsPerClient {
                group.addTask(executorPreference: client.taskExecutor) {
                    await requestLoop(client: client, supply: supply, measuredFrom: measuredFrom, stop: stop)
                }
            }
            // Requests still in flight a second after a -D deadline are cancelled and count as
            // timeouts, rather than waiting for a silent server's idle timeout.
            if let deadline = supply.deadline {
                group.addTask {
                    try? await Task.sleep(until: deadline + Self.gracePeriod, clock: .continuous)
                    return nil
                }
            }
            var outcomes: [(LoadReport.Tally, HTTP3Response?)] = []
            for await outcome in group {
                if let outcome { outcomes.append(outcome) }
                if outcome == nil || outcomes.count == streamsPerClient { group.cancelAll() }
            }
            return outcomes
        }
        for (tally, _) in outcomes { result.tally.merge(tally) }
        result.failure = stop.withLockedValue { $0 }
        // Wire bytes cover the whole connection, so they are left out when a warm-up is not counted.
        if result.failure == nil, reportsWireBytes, let response = outcomes.lazy.compactMap(\.1).first {
            result.receivedBytes = await response.statistics()?.transfer.receivedBytes
        }
        await client.close()
        return result
    }

    /// Sends requests one after another until the supply runs out or the connection fails.
    private func requestLoop(
        client: HTTP3Client, supply: RequestSupply, measuredFrom: ContinuousClock.Instant, stop: NIOLockedValueBox<String?>
    ) async -> (LoadReport.Tally, HTTP3Response?) {
        var tally = LoadReport.Tally()
        var last: HTTP3Response?
        while stop.withLockedValue({ $0 == nil }), let slot = supply.take() {
            let request = requests[slot % requests.count]
            let begin = ContinuousClock.now
            let counted = begin >= measuredFrom
            do {
                let response = try await client.execute(request)
                var size = 0
                for try await chunk in response.body { size += chunk.count }
                let end = ContinuousClock.now
                last = response
                if counted {
                    tally.started += 1
                    tally.record(status: response.status.code, bodyBytes: size, latency: (end - begin).seconds)
                    supply.completed(at: end)
                }
            } catch {
                if Task.isCancelled {
                    if counted {
                        tally.started += 1
                        tally.recordTimeout()
                        supply.completed(at: ContinuousClock.now)
                    }
                    break
                }
                if counted {
                    tally.started += 1
                    tally.record(error: failureMessage(error))
                    supply.completed(at: ContinuousClock.now)
                }
                // The connection is gone: this client stops, as h2load's does, and the rest of
                // its share is never sent (the report counts it failed).
                if let error = error as? HTTP3ClientError, error.endsConnection {
                    stop.withLockedValue { $0 = $0 ?? "\(error)" }
                }
            }
        }
        return (tally, last)
    }
}

/// Hands out request numbers to the loops of one client, so exactly `limit` are sent, or none
/// after `deadline`; the numbers pick the URL in turn, as h2load's clients cycle through theirs.
final class RequestSupply: Sendable {
    private let next = NIOLockedValueBox(0)
    private let limit: Int?
    let deadline: ContinuousClock.Instant?
    private let completions: CompletionClock

    init(limit: Int?, deadline: ContinuousClock.Instant?, completions: CompletionClock) {
        self.limit = limit
        self.deadline = deadline
        self.completions = completions
    }

    /// The next request's number, or nil when there are no more to send.
    func take() -> Int? {
        if let deadline, ContinuousClock.now >= deadline { return nil }
        return next.withLockedValue { next in
            if let limit, next >= limit { return nil }
            defer { next += 1 }
            return next
        }
    }

    func completed(at instant: ContinuousClock.Instant) { completions.note(instant) }
}

/// When the last response of the whole run ended: the end of the measured time.
final class CompletionClock: Sendable {
    private let latest = NIOLockedValueBox<ContinuousClock.Instant?>(nil)

    func note(_ instant: ContinuousClock.Instant) {
        latest.withLockedValue { latest in
            if latest.map({ $0 < instant }) ?? true { latest = instant }
        }
    }

    var last: ContinuousClock.Instant? { latest.withLockedValue { $0 } }
}

extension HTTP3ClientError {
    /// Whether the error means the connection is gone, not just this request.
    var endsConnection: Bool {
        switch code {
        case .cannotResolve, .cannotConnect, .handshakeTimedOut, .tlsHandshakeFailed, .certificateRejected,
            .connectionFailed, .connectionClosed:
            return true
        default: return false
        }
    }
}

/// What h3load reports for a failed request: the library's message, and the trust flags when
/// the server's certificate did not lead to a trusted CA.
private func failureMessage(_ error: any Error) -> String {
    let untrusted = (error as? HTTP3ClientError).map { $0.code == .certificateRejected && $0.verificationFailure == .unknownIssuer }
    return ServerTrustOptions.describe(error, untrusted: untrusted ?? false)
}

extension Duration {
    var seconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }
}
