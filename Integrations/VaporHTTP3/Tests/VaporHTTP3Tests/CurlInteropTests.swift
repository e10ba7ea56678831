import Foundation
import H3
import QuicTransport
import Testing
import Vapor
import VaporHTTP3

/// curl (libcurl on ngtcp2 and nghttp3, through the repository's pinned pycurl) fetches from the
/// Vapor application over HTTP/3: an independent client, as a browser would be.
@Suite("Vapor over HTTP/3 with curl", .serialized, .timeLimit(.minutes(2)))
struct CurlInteropTests {
    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    @Test func curlFetchesRoutesOverHTTP3() async throws {
        let python = Self.repositoryRoot.appendingPathComponent(".venv/bin/python").path
        let script = Self.repositoryRoot.appendingPathComponent("Tests/Interop/curl/h3_curl.py").path
        guard FileManager.default.isExecutableFile(atPath: python),
              try await Self.run(python, ["-c", "import pycurl"]).status == 0
        else {
            Issue.record("no pycurl in \(python): run `bash scripts/setup`")
            return
        }
        let server = try await TestServer.start()
        let port = server.http3Port
        let caFile = FileManager.default.temporaryDirectory.appendingPathComponent("vapor-http3-ca-\(UUID().uuidString).pem").path
        try server.identity.certificatePEM.write(toFile: caFile, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: caFile) }

        let size = 1_000_000
        let result = try await Self.run(python, [
            script, "--cacert", caFile, "--resolve", "localhost:\(port):127.0.0.1",
            "GET@https://localhost:\(port)/todos", "GET@https://localhost:\(port)/download?bytes=\(size)",
            "GET@https://localhost:\(port)/missing",
        ])
        try await server.stop()
        #expect(result.status == 0, "h3_curl.py: \(result.output)")
        let transfers = result.output.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        try #require(transfers.count == 3, "\(result.output)")
        // libcurl's INFO_HTTP_VERSION: CURL_HTTP_VERSION_3 is 30 (h3_curl.py's docstring says 3).
        for transfer in transfers {
            #expect(transfer["http_version"] as? Int == 30, "\(transfer)")
        }
        #expect(transfers[0]["status"] as? Int == 200)
        #expect(transfers[1]["status"] as? Int == 200)
        #expect(transfers[1]["length"] as? Int == size)
        #expect(transfers[1]["sha256"] as? String == patternDigest(total: size))
        #expect(transfers[2]["status"] as? Int == 404)
    }

    /// Runs a program to its end; its standard output and error, and its exit status.
    static func run(_ program: String, _ arguments: [String]) async throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        let exited = AsyncStream<Int32>.makeStream()
        process.terminationHandler = { exited.continuation.yield($0.terminationStatus) }
        try process.run()
        // Read while it runs, so a full pipe never stalls it.
        let data = try await Task.detached { try output.fileHandleForReading.readToEnd() ?? Data() }.value
        var iterator = exited.stream.makeAsyncIterator()
        let status = await iterator.next() ?? -1
        return (status, String(decoding: data, as: UTF8.self))
    }
}
