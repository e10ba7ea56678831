import Testing

@testable import h3load

@Suite struct LoadReportTests {
    @Test func percentilesAreNearestRank() {
        let samples = (1...100).map(Double.init).shuffled()
        let summary = LoadReport.Summary(samples)!
        #expect(summary.count == 100)
        #expect(summary.min == 1)
        #expect(summary.max == 100)
        #expect(summary.mean == 50.5)
        #expect(summary.p50 == 50)
        #expect(summary.p90 == 90)
        #expect(summary.p99 == 99)
        #expect(LoadReport.Summary.percentile(99, ofSorted: [1, 2, 3]) == 3)
        #expect(LoadReport.Summary.percentile(0, ofSorted: [1, 2, 3]) == 1)
    }

    @Test func summaryOfOneSampleAndOfNone() {
        #expect(LoadReport.Summary([]) == nil)
        let one = LoadReport.Summary([0.25])!
        #expect(one.min == 0.25 && one.max == 0.25 && one.p99 == 0.25)
        #expect(one.standardDeviation == 0)
        #expect(one.withinStandardDeviation == 1)
    }

    @Test func standardDeviationIsThePopulationOne() {
        let summary = LoadReport.Summary([2, 4, 4, 4, 5, 5, 7, 9])!
        #expect(summary.mean == 5)
        #expect(summary.standardDeviation == 2)
        #expect(summary.withinStandardDeviation == 0.75)
    }

    @Test func statusClassesAndFailures() {
        var first = LoadReport.Tally()
        for status in [200, 204, 301, 404, 503] {
            first.started += 1
            first.record(status: status, bodyBytes: 10, latency: 0.001)
        }
        var second = LoadReport.Tally()
        second.started += 2
        second.record(error: "reset")
        second.recordTimeout()
        var client = LoadReport.ClientResult(handshake: 0.005)
        client.tally = first
        client.tally.merge(second)
        let failedClient = LoadReport.ClientResult(failure: "cannot connect")
        let report = LoadReport(results: [client, failedClient], seconds: 2, requested: 10)
        #expect(report.tally.statusClasses == [2, 1, 1, 1])
        #expect(report.tally.succeeded == 3)
        #expect(report.tally.done == 7)
        #expect(report.abandoned == 3)
        // 404, 503, the reset, the timeout and the three never sent.
        #expect(report.failed == 7)
        #expect(report.failedClients == 1 && report.connectedClients == 1)
        #expect(report.requestsPerSecond == 2.5)
        #expect(!report.isSuccess)
        #expect(report.text.contains("requests: 10 total, 7 started, 7 done, 3 succeeded, 7 failed, 4 errored, 1 timeout"))
        #expect(report.json.contains("\"status\":{\"2xx\":2,\"3xx\":1,\"4xx\":1,\"5xx\":1}"))
    }

    /// As h2load: `-n` is split evenly among the clients, so `-c N -n N` is one request per
    /// connection, and each client's supply stops at its share.
    @Test func requestsAreSplitAmongClientsAsH2loadSplitsThem() {
        #expect(LoadEngine.shares(of: 10, among: 3) == [4, 3, 3])
        #expect(LoadEngine.shares(of: 1000, among: 1000) == Array(repeating: 1, count: 1000))
        #expect(LoadEngine.shares(of: 7, among: 1) == [7])
        let supply = RequestSupply(limit: 3, deadline: nil, completions: CompletionClock())
        #expect([supply.take(), supply.take(), supply.take(), supply.take()] == [0, 1, 2, nil])
    }

    @Test func aCleanRunSucceeds() {
        var client = LoadReport.ClientResult(handshake: 0.004, receivedBytes: 2048)
        client.tally.started = 2
        client.tally.record(status: 200, bodyBytes: 1024, latency: 0.002)
        client.tally.record(status: 200, bodyBytes: 1024, latency: 0.004)
        let report = LoadReport(results: [client], seconds: 0.5, requested: 2)
        #expect(report.isSuccess)
        #expect(report.bodyBytesPerSecond == 4096)
        #expect(report.text.hasPrefix("finished in 500.00ms, 4.00 req/s, 4.00KB/s"))
        #expect(report.json.contains("\"request_latency_ms\":{\"min\":2.000,\"p50\":2.000,\"p90\":4.000,\"p99\":4.000"))
    }

    @Test func unitsFollowH2load() {
        #expect(LoadReport.duration(0.000_250) == "250us")
        #expect(LoadReport.duration(0.0123) == "12.30ms")
        #expect(LoadReport.duration(3.456) == "3.46s")
        #expect(LoadReport.bytes(512) == "512B")
        #expect(LoadReport.bytes(1_048_576) == "1.00MB")
    }
}
