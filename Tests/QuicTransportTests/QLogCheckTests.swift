import Foundation
import QuicTestSupport
import QuicTransport
import Testing

/// scripts/qlog-check: accepts real traces, rejects each kind of breakage.
@Suite("qlog-check", .serialized, .timeLimit(TestEnvironment.minutes(1)))
struct QLogCheckTests {
    static func runChecker(_ paths: [String]) async throws -> (status: Int32, output: String) {
        try await TestEnvironment.checkQLog(paths)
    }

    /// A real trace pair from an echo over loopback, and the client trace's path as the API reports it.
    static func makeTraces() async throws -> (directory: String, clientPath: String) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("qlog-check-\(UUID())").path
        let server = try await LoopbackServer { $0.qlogDirectory = directory }
        server.echo()
        let group = server.makeClient { $0.qlogDirectory = directory }
        try await startAndWaitUntilReady(group)
        _ = try await roundTrip(Data("check me".utf8), on: group)
        let clientPath = try #require(await group.qlogFilePath)
        group.cancel()
        server.listener.cancel()
        // Traces are complete once both connections are freed (after the closing period), which
        // closes their files.
        _ = await eventually(within: 5) {
            let files = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
            return files.count == 2 && files.allSatisfy { !isOpenInThisProcess(directory + "/" + $0) }
        }
        return (directory, clientPath)
    }

    @Test func realTracesPass() async throws {
        let (directory, clientPath) = try await Self.makeTraces()
        // One trace per side, both named by the client's original destination connection ID.
        let files = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
        #expect(files.count == 2)
        #expect(Set(files.map { $0.split(separator: "_")[0] }).count == 1)
        #expect(files.contains { $0.hasSuffix("_server.sqlog") })
        #expect(clientPath == directory + "/" + (files.first { $0.hasSuffix("_client.sqlog") } ?? "-"))
        for file in files {
            let data = try Data(contentsOf: URL(fileURLWithPath: directory).appendingPathComponent(file))
            #expect(data.first == 0x1E, "\(file) starts with the JSON-SEQ record separator")
            let header = try JSONSerialization.jsonObject(with: Data(data.dropFirst().prefix { $0 != 0x0A })) as? [String: Any]
            #expect(header?["qlog_version"] as? String == "0.3")
            #expect(header?["qlog_format"] as? String == "JSON-SEQ")
        }
        let (status, output) = try await Self.runChecker([directory])
        #expect(status == 0, "\(output)")
        #expect(output.components(separatedBy: "ok: ").count == 3, "\(output)")
        for file in try FileManager.default.contentsOfDirectory(atPath: directory) {
            let text = try String(contentsOfFile: directory + "/" + file, encoding: .utf8)
            for name in ["connectivity:connection_started", "transport:alpn_information", "connectivity:connection_closed",
                         "transport:packet_sent", "transport:packet_received", "recovery:metrics_updated", "transport:parameters_set"] {
                #expect(text.contains("\"name\":\"\(name)\""), "\(file) lacks \(name)")
            }
        }
    }

    @Test(arguments: [
        ("missing header field", "header qlog_version"),
        ("wrong separator", "does not start with the JSON-SEQ record separator"),
        ("time going backwards", "is earlier than the previous"),
        ("unknown event prefix", "has no known category prefix"),
        ("no title", "header has no title"),
        ("truncated record inside", "record 3 is not JSON"),
    ])
    func brokenTracesAreRejected(breakage: String, message: String) async throws {
        let (directory, _) = try await Self.makeTraces()
        let file = try #require(try FileManager.default.contentsOfDirectory(atPath: directory).first { $0.hasSuffix("_client.sqlog") })
        var records = try String(contentsOfFile: directory + "/" + file, encoding: .utf8)
            .split(separator: "\u{1E}", omittingEmptySubsequences: true).map(String.init)
        switch breakage {
        case "missing header field": records[0] = records[0].replacingOccurrences(of: "\"qlog_version\":\"0.3\",", with: "")
        case "time going backwards": records[records.count - 1] = records[records.count - 1].replacingOccurrences(of: #"{"time":"#, with: #"{"time":-1,"was":"#)
        case "unknown event prefix": records[2] = records[2].replacingOccurrences(of: #""name":""#, with: #""name":"bogus_"#)
        case "no title": records[0] = records[0].replacingOccurrences(of: #""title":"#, with: #""untitled":"#)
        case "truncated record inside": records[2] = String(records[2].prefix(20))
        default: break
        }
        let separator = breakage == "wrong separator" ? "\n" : "\u{1E}"
        // ".broken.sqlog": scripts/test checks every other trace the suite leaves behind.
        let broken = directory + "/deliberately.broken.sqlog"
        try (separator + records.joined(separator: separator)).write(toFile: broken, atomically: true, encoding: .utf8)
        let (status, output) = try await Self.runChecker([broken])
        #expect(status == 1)
        #expect(output.contains(message), "\(breakage): \(output)")
    }

    /// A writer killed mid-record leaves a last record without its LF; RFC 7464 §2.3 lets
    /// parsers drop it, so the rest of the trace still loads.
    @Test func aTruncatedLastRecordIsDroppedNotFatal() async throws {
        let (directory, _) = try await Self.makeTraces()
        let file = try #require(try FileManager.default.contentsOfDirectory(atPath: directory).first { $0.hasSuffix("_client.sqlog") })
        let text = try String(contentsOfFile: directory + "/" + file, encoding: .utf8)
        let cut = directory + "/killed-writer.sqlog"
        try (text + "\u{1E}{\"time\":99,\"name\":\"transport:pac").write(toFile: cut, atomically: true, encoding: .utf8)
        let (status, output) = try await Self.runChecker([cut])
        #expect(status == 0, "\(output)")
    }
}
