import CommandLineSupport

/// What a load run measured, summarised as h2load does, with latency percentiles; printed as
/// text or as one JSON object.
struct LoadReport: Sendable {
    /// Counts and samples from requests, merged from every stream loop of every client.
    struct Tally: Sendable, Equatable {
        var started = 0
        var done = 0
        /// Responses with status 2xx or 3xx (h2load's "succeeded").
        var succeeded = 0
        /// Requests that ended without a complete response: a reset, a failed connection.
        var errored = 0
        /// Requests cancelled because they were still unfinished after a -D deadline.
        var timedOut = 0
        /// Responses by status class: index 0 is 2xx, 1 is 3xx, 2 is 4xx, 3 is 5xx.
        var statusClasses = [0, 0, 0, 0]
        var bodyBytes = 0
        /// Time to the end of each complete response, in seconds.
        var latencies: [Double] = []
        /// Why requests errored, with how often.
        var errors: [String: Int] = [:]

        /// Requests that got a complete response, whatever its status.
        var responses: Int { done - errored - timedOut }

        /// Counts one complete response.
        mutating func record(status: Int, bodyBytes: Int, latency: Double) {
            done += 1
            self.bodyBytes += bodyBytes
            latencies.append(latency)
            if (200..<600).contains(status) { statusClasses[status / 100 - 2] += 1 }
            if (200..<400).contains(status) { succeeded += 1 }
        }

        /// Counts one request that ended without a response.
        mutating func record(error: String) {
            done += 1
            errored += 1
            errors[error, default: 0] += 1
        }

        /// Counts one request cancelled at the end of a timed run.
        mutating func recordTimeout() {
            done += 1
            timedOut += 1
        }

        mutating func merge(_ other: Tally) {
            started += other.started
            done += other.done
            succeeded += other.succeeded
            errored += other.errored
            timedOut += other.timedOut
            for index in statusClasses.indices { statusClasses[index] += other.statusClasses[index] }
            bodyBytes += other.bodyBytes
            latencies += other.latencies
            errors.merge(other.errors, uniquingKeysWith: +)
        }
    }

    /// One connection's outcome.
    struct ClientResult: Sendable {
        /// How long `connect` took; nil when the handshake failed.
        var handshake: Double?
        /// Why the client stopped early: its handshake or its connection failed.
        var failure: String?
        var tally = Tally()
        /// Bytes the connection received on the wire (QUIC packets), when it could still tell.
        var receivedBytes: UInt64?
    }

    /// min, max, mean, standard deviation and percentiles of a set of samples.
    struct Summary: Sendable, Equatable {
        let count: Int
        let min: Double
        let max: Double
        let mean: Double
        /// The population standard deviation, as h2load computes it.
        let standardDeviation: Double
        /// The fraction of samples within one standard deviation of the mean (h2load's "+/- sd").
        let withinStandardDeviation: Double
        let p50: Double
        let p90: Double
        let p99: Double

        /// nil when there are no samples.
        init?(_ samples: [Double]) {
            guard !samples.isEmpty else { return nil }
            let sorted = samples.sorted()
            count = sorted.count
            min = sorted[0]
            max = sorted[sorted.count - 1]
            let mean = sorted.reduce(0, +) / Double(sorted.count)
            let deviation = (sorted.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(sorted.count)).squareRoot()
            let within = sorted.filter { abs($0 - mean) <= deviation }.count
            self.mean = mean
            standardDeviation = deviation
            withinStandardDeviation = Double(within) / Double(sorted.count)
            p50 = Self.percentile(50, ofSorted: sorted)
            p90 = Self.percentile(90, ofSorted: sorted)
            p99 = Self.percentile(99, ofSorted: sorted)
        }

        /// The nearest-rank percentile: the smallest sample with at least `percent`% of the
        /// samples at or below it.
        static func percentile(_ percent: Double, ofSorted sorted: [Double]) -> Double {
            let rank = Int((percent / 100 * Double(sorted.count)).rounded(.up))
            return sorted[Swift.min(Swift.max(rank, 1), sorted.count) - 1]
        }
    }

    /// The measured time: from the start (or the end of the warm-up) to the last response.
    let seconds: Double
    /// The requests asked for with `-n`; nil for a timed run (`-D`).
    let requested: Int?
    let tally: Tally
    /// Requests never started because their client had failed (h2load counts them failed and errored).
    let abandoned: Int
    let clients: Int
    /// Clients whose handshake completed, including those whose connection failed later.
    let connectedClients: Int
    /// Clients whose handshake or connection failed.
    let failedClients: Int
    /// Why clients failed, with how often.
    let clientFailures: [String: Int]
    /// Bytes received on the wire by all connections; nil when it is not known for all of them.
    let receivedBytes: UInt64?
    let requestLatency: Summary?
    let handshakeLatency: Summary?
    /// Each connected client's complete responses per second.
    let requestsPerSecondPerClient: Summary?

    init(results: [ClientResult], seconds: Double, requested: Int?) {
        var tally = Tally()
        for result in results { tally.merge(result.tally) }
        self.tally = tally
        self.seconds = seconds
        self.requested = requested
        abandoned = requested.map { Swift.max(0, $0 - tally.started) } ?? 0
        clients = results.count
        connectedClients = results.filter { $0.handshake != nil }.count
        failedClients = results.filter { $0.failure != nil }.count
        var failures: [String: Int] = [:]
        for failure in results.compactMap(\.failure) { failures[failure, default: 0] += 1 }
        clientFailures = failures
        let received = results.filter { $0.handshake != nil }.map(\.receivedBytes)
        receivedBytes = received.contains(nil) || received.isEmpty ? nil : received.reduce(0) { $0 + $1! }
        requestLatency = Summary(tally.latencies)
        handshakeLatency = Summary(results.compactMap(\.handshake))
        requestsPerSecondPerClient = Summary(
            results.filter { $0.handshake != nil }.map { Double($0.tally.responses) / Swift.max(seconds, 1e-9) }
        )
    }

    /// 4xx, 5xx and other statuses, errored, timed-out and abandoned requests (h2load's "failed").
    var failed: Int { tally.done - tally.succeeded + abandoned }

    /// Whether every request got a 2xx or 3xx response and every client connected.
    var isSuccess: Bool { failed == 0 && failedClients == 0 && tally.done > 0 }

    /// Complete responses, whatever their status, per second (h2load's req/s).
    var requestsPerSecond: Double { Double(tally.responses) / Swift.max(seconds, 1e-9) }

    var bodyBytesPerSecond: Double { Double(tally.bodyBytes) / Swift.max(seconds, 1e-9) }

    /// The report in h2load's layout, plus p50, p90 and p99 columns.
    var text: String {
        let finished = "finished in \(Self.duration(seconds)), \(fixedPoint(requestsPerSecond, digits: 2)) req/s, "
            + "\(Self.bytes(bodyBytesPerSecond))/s"
        var lines: [String] = [
            finished,
            "requests: \(requested.map(String.init) ?? "\(tally.started)") total, \(tally.started) started, "
                + "\(tally.done) done, \(tally.succeeded) succeeded, \(failed) failed, "
                + "\(tally.errored + abandoned) errored, \(tally.timedOut) timeout",
            "status codes: " + zip(tally.statusClasses, ["2xx", "3xx", "4xx", "5xx"]).map { "\($0) \($1)" }.joined(separator: ", "),
        ]
        let data = "\(Self.bytes(Double(tally.bodyBytes))) (\(tally.bodyBytes)) data"
        if let receivedBytes {
            lines.append("traffic: \(Self.bytes(Double(receivedBytes))) (\(receivedBytes)) total received, \(data)")
        } else {
            lines.append("traffic: \(data)")
        }
        let columns = ["min", "max", "mean", "sd", "+/- sd", "p50", "p90", "p99"]
        lines.append(String(repeating: " ", count: 18) + columns.map { Self.pad($0) }.joined())
        lines.append(Self.row("time for request:", requestLatency, format: Self.duration))
        lines.append(Self.row("time for connect:", handshakeLatency, format: Self.duration))
        lines.append(Self.row("req/s           :", requestsPerSecondPerClient) { fixedPoint($0, digits: 2) })
        lines.append("clients: \(clients) total, \(connectedClients) connected, \(failedClients) failed")
        return lines.joined(separator: "\n")
    }

    /// The report as one JSON object; latencies in milliseconds.
    var json: String {
        func number(_ value: Double, _ digits: Int = 3) -> String { fixedPoint(value, digits: digits) }
        func latency(_ summary: Summary?) -> String {
            guard let summary else { return "null" }
            let members = [
                ("min", summary.min), ("p50", summary.p50), ("p90", summary.p90), ("p99", summary.p99),
                ("max", summary.max), ("mean", summary.mean), ("sd", summary.standardDeviation),
            ]
            return "{" + members.map { "\"\($0)\":\(number($1 * 1000))" }.joined(separator: ",") + "}"
        }
        let status = zip(["2xx", "3xx", "4xx", "5xx"], tally.statusClasses).map { "\"\($0)\":\($1)" }.joined(separator: ",")
        let members: [(String, String)] = [
            ("seconds", number(seconds)),
            ("requests", "\(requested ?? tally.started)"),
            ("started", "\(tally.started)"),
            ("done", "\(tally.done)"),
            ("succeeded", "\(tally.succeeded)"),
            ("failed", "\(failed)"),
            ("errored", "\(tally.errored + abandoned)"),
            ("timeout", "\(tally.timedOut)"),
            ("status", "{\(status)}"),
            ("requests_per_second", number(requestsPerSecond, 2)),
            ("bytes_per_second", number(bodyBytesPerSecond, 0)),
            ("body_bytes", "\(tally.bodyBytes)"),
            ("received_bytes", receivedBytes.map { "\($0)" } ?? "null"),
            ("request_latency_ms", latency(requestLatency)),
            ("handshake_latency_ms", latency(handshakeLatency)),
            ("clients", "\(clients)"),
            ("failed_clients", "\(failedClients)"),
        ]
        return "{" + members.map { "\"\($0)\":\($1)" }.joined(separator: ",") + "}"
    }

    private static func row(_ label: String, _ summary: Summary?, format: (Double) -> String) -> String {
        guard let summary else { return label + pad("-") }
        let values = [
            format(summary.min), format(summary.max), format(summary.mean), format(summary.standardDeviation),
            fixedPoint(summary.withinStandardDeviation * 100, digits: 2) + "%",
            format(summary.p50), format(summary.p90), format(summary.p99),
        ]
        return label + String(repeating: " ", count: Swift.max(0, 18 - label.count)) + values.map { pad($0) }.joined()
    }

    private static func pad(_ text: String) -> String {
        rightAligned(text, width: 11)
    }

    /// A duration as h2load prints it: µs below a millisecond, ms below a second, else s.
    static func duration(_ seconds: Double) -> String {
        if seconds < 0.001 { return fixedPoint(seconds * 1e6, digits: 0) + "us" }
        if seconds < 1 { return fixedPoint(seconds * 1e3, digits: 2) + "ms" }
        return fixedPoint(seconds, digits: 2) + "s"
    }

    /// A byte count in h2load's binary units (1 KB = 1024 B).
    static func bytes(_ count: Double) -> String {
        let units = ["B", "KB", "MB", "GB", "TB"]
        var value = count
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return fixedPoint(value, digits: unit == 0 ? 0 : 2) + units[unit]
    }
}
