import Foundation
import H3
import HTTPTypes
import NIOConcurrencyHelpers
import QuicTransport

/// Runs a load test: `clients` connections, each its own `HTTP3Client` (so each has its own
/// event loop), each with `streamsPerClient` request loops that share one supply of requests.
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
        let supply: RequestSupply
        let measuredFrom: ContinuousClock.Instant
        switch amount {
        case .requests(let count):
            supply = RequestSupply(limit: count, deadline: nil)
            measuredFrom = start
        case .duration(let duration, let warmUp):
            supply = RequestSupply(limit: nil, deadline: start + warmUp + duration)
            measuredFrom = start + warmUp
        }
        let results = await withTaskGroup(of: LoadReport.ClientResult.self) { group in
            for index in 0..<clients {
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
        let end = supply.lastCompletion ?? ContinuousClock.now
        let seconds = (end - measuredFrom).seconds
        let requested: Int? = if case .requests(let count) = amount { count } else { nil }
        return LoadReport(results: results, seconds: max(seconds, 0), requested: requested)
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
            for _ in 0..<streamsPerClient {
                group.addTask { await requestLoop(client: client, supply: supply, measuredFrom: measuredFrom, stop: stop) }
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
                    tally.record(status: response.head.status.code, bodyBytes: size, latency: (end - begin).seconds)
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
                    tally.record(error: "\(error)")
                    supply.completed(at: ContinuousClock.now)
                }
                // The connection is gone: this client stops, as h2load's does, and the requests
                // it would have sent go to the others.
                if let error = error as? HTTP3ClientError, error.endsConnection {
                    stop.withLockedValue { $0 = $0 ?? "\(error)" }
                }
            }
        }
        return (tally, last)
    }
}

/// Hands out request numbers to every loop of every client, so exactly `limit` are sent, or
/// none after `deadline`; and notes when the last response ended.
final class RequestSupply: Sendable {
    private struct State {
        var next = 0
        var lastCompletion: ContinuousClock.Instant?
    }

    private let state = NIOLockedValueBox(State())
    private let limit: Int?
    let deadline: ContinuousClock.Instant?

    init(limit: Int?, deadline: ContinuousClock.Instant?) {
        self.limit = limit
        self.deadline = deadline
    }

    /// The next request's number, or nil when there are no more to send.
    func take() -> Int? {
        if let deadline, ContinuousClock.now >= deadline { return nil }
        return state.withLockedValue { state in
            if let limit, state.next >= limit { return nil }
            defer { state.next += 1 }
            return state.next
        }
    }

    func completed(at instant: ContinuousClock.Instant) {
        state.withLockedValue { state in
            if state.lastCompletion.map({ $0 < instant }) ?? true { state.lastCompletion = instant }
        }
    }

    var lastCompletion: ContinuousClock.Instant? { state.withLockedValue { $0.lastCompletion } }
}

extension HTTP3ClientError {
    /// Whether the error means the connection is gone, not just this request.
    var endsConnection: Bool {
        switch self {
        case .cannotResolve, .cannotConnect, .handshakeTimedOut, .tlsHandshakeFailed, .certificateRejected,
            .connectionFailed, .connectionClosed:
            return true
        case .invalidRequest, .streamReset, .protocolError, .cancelled, .requestRejected: return false
        }
    }
}

extension Duration {
    var seconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }
}
