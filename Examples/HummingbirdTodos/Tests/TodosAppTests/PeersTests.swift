import Foundation
import TodosApp
import Testing

/// Clients fetch from the Hummingbird application over HTTP/3: the project's h3get, and two
/// that nobody here wrote, curl (libcurl 8 on ngtcp2 1.x, through the pinned pycurl wheel) and
/// aioquic.
@Suite("Hummingbird over HTTP/3 with curl and aioquic", .serialized)
struct PeersTests {
    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// The project's Python, with pycurl and aioquic, which `bash scripts/setup` installs.
    static func python() throws -> String {
        let path = repositoryRoot.appendingPathComponent(".venv/bin/python").path
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw SetupError("no \(path): run `bash scripts/setup` (it makes .venv with aioquic and pycurl)")
        }
        return path
    }

    /// One transfer as the peer's script reports it (a JSON line).
    struct Transfer: Sendable {
        var status: Int?
        var length: Int?
        var sha256: String?
        var httpVersion: Int?
        var connectionsOpened: Int?

        init(_ line: [String: Any]) {
            status = line["status"] as? Int
            length = line["length"] as? Int
            sha256 = line["sha256"] as? String
            httpVersion = line["http_version"] as? Int
            connectionsOpened = line["num_connects"] as? Int
        }
    }

    /// Runs `arguments` with the project's Python; returns the transfers it reports.
    static func run(_ arguments: [String]) throws -> [Transfer] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try python())
        process.arguments = arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let printed = output.fileHandleForReading.readDataToEndOfFile()
        let complaints = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        if complaints.contains("No module named") {
            throw SetupError("\(complaints): run `bash scripts/setup` (it installs pycurl and aioquic into .venv)")
        }
        let lines = String(decoding: printed, as: UTF8.self).split(separator: "\n").compactMap { line in
            ((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]).map(Transfer.init)
        }
        guard process.terminationStatus == 0, !lines.isEmpty else {
            throw SetupError("\(arguments[0]) exited with \(process.terminationStatus): \(complaints)")
        }
        return lines
    }

    /// h3get as `scripts/test` built it (`H3GET`), or the repository's debug build.
    static func h3get() throws -> String {
        let path = ProcessInfo.processInfo.environment["H3GET"] ?? repositoryRoot.appendingPathComponent(".build/debug/h3get").path
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw SetupError("no h3get at \(path): run `swift build --product h3get` in the repository root, or set H3GET")
        }
        return path
    }

    @Test func h3getFetchesTheAPIOverHTTP3() async throws {
        let todos = try await RunningTodos.start()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try Self.h3get())
        process.arguments = [
            "--http3-only", "--pin-sha256", todos.identity.sha256FingerprintHex, "-i", "https://127.0.0.1:\(todos.http3Port)/todos",
        ]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let printed = await Task.detached { output.fileHandleForReading.readDataToEndOfFile() }.value
        process.waitUntilExit()
        await todos.stop()
        let text = String(decoding: printed, as: UTF8.self)
        #expect(process.terminationStatus == 0)
        #expect(text.hasPrefix("HTTP/3 200"), "h3get printed: \(text)")
        #expect(text.contains("Serve HTTP\\/3 from Hummingbird"), "h3get printed: \(text)")
    }

    @Test func curlFetchesTheAPIAndALargeBodyOverHTTP3() async throws {
        let todos = try await RunningTodos.start()
        let base = "https://localhost:\(todos.http3Port)"
        let script = Self.repositoryRoot.appendingPathComponent("Tests/Interop/curl/h3_curl.py").path
        let transfers = try await Task.detached {
            try Self.run([
                script, "--cacert", todos.certificateFile, "--timeout", "120", "--resolve", "localhost:\(todos.http3Port):127.0.0.1",
                "GET@\(base)/todos", "then", "GET@\(base)/stream?bytes=5000000", "then", "POST,size=3000000@\(base)/upload",
            ])
        }.value
        await todos.stop()
        #expect(transfers.map(\.httpVersion) == [30, 30, 30], "curl's CURLINFO_HTTP_VERSION: 30 is HTTP/3")
        #expect(transfers.map(\.status) == [200, 200, 200])
        #expect(transfers[1].length == 5_000_000)
        #expect(transfers[1].sha256 == sha256Hex((0..<5_000_000).lazy.map(TodosRouter.patternByte)))
        #expect(transfers.dropFirst().allSatisfy { $0.connectionsOpened == 0 }, "curl opened a new connection: \(transfers)")
    }

    @Test func aioquicFetchesThePageAndTheAPIOverHTTP3() async throws {
        let todos = try await RunningTodos.start()
        let base = "https://127.0.0.1:\(todos.http3Port)"
        let script = Self.repositoryRoot.appendingPathComponent("Tests/Interop/aioquic/h3_client.py").path
        let results = try await Task.detached {
            try Self.run([script, "--cacert", todos.certificateFile, "--timeout", "120", "\(base)/", "\(base)/todos", "\(base)/stream?bytes=1000000"])
        }.value
        await todos.stop()
        #expect(results.map(\.status) == [200, 200, 200])
        #expect(results[2].sha256 == sha256Hex((0..<1_000_000).lazy.map(TodosRouter.patternByte)))
    }
}
