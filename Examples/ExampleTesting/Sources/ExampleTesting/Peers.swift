import Dispatch
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The clients an example application's tests fetch with, run as processes over loopback: the
/// project's h3get, and two that nobody here wrote, curl (libcurl on ngtcp2, through the pinned
/// pycurl wheel) and aioquic, both from the repository's `.venv` (`bash scripts/setup`).
public enum Peers {
    /// The repository's root, found from this file's place in it.
    public static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// The repository's peer scripts (`Tests/Interop/…`) that print one JSON line per transfer.
    public static let curlScript = repositoryRoot.appendingPathComponent("Tests/Interop/curl/h3_curl.py").path
    public static let aioquicScript = repositoryRoot.appendingPathComponent("Tests/Interop/aioquic/h3_client.py").path

    /// The project's Python, with pycurl and aioquic, which `bash scripts/setup` installs.
    public static func python() throws -> String {
        let path = repositoryRoot.appendingPathComponent(".venv/bin/python").path
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw SetupError("no \(path): run `bash scripts/setup` (it makes .venv with aioquic and pycurl)")
        }
        return path
    }

    /// h3get as `scripts/test` built it (`H3GET`), or the repository's debug build.
    public static func h3get() throws -> String {
        let path = ProcessInfo.processInfo.environment["H3GET"] ?? repositoryRoot.appendingPathComponent(".build/debug/h3get").path
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw SetupError("no h3get at \(path): run `swift build --product h3get` in the repository root, or set H3GET")
        }
        return path
    }

    /// One transfer as a peer script reports it (a JSON line).
    public struct Transfer: Sendable, CustomStringConvertible {
        public var status: Int?
        public var length: Int?
        public var sha256: String?
        /// libcurl's `CURLINFO_HTTP_VERSION`: 30 is HTTP/3.
        public var httpVersion: Int?
        /// libcurl's `CURLINFO_NUM_CONNECTS`: 0 when the transfer reused a connection.
        public var connectionsOpened: Int?
        public var description: String

        init(_ line: [String: Any], text: Substring) {
            status = line["status"] as? Int
            length = line["length"] as? Int
            sha256 = line["sha256"] as? String
            httpVersion = line["http_version"] as? Int
            connectionsOpened = line["num_connects"] as? Int
            description = String(text)
        }
    }

    /// Runs a peer script with the project's Python; returns the transfers it reports, or
    /// throws with what it printed to standard error.
    public static func runPython(_ arguments: [String], seconds: Double = 300) async throws -> [Transfer] {
        let python = try python()
        let (status, printed, complaints) = try await run(python, arguments, seconds: seconds)
        if complaints.contains("No module named") {
            throw SetupError("\(complaints): run `bash scripts/setup` (it installs pycurl and aioquic into .venv)")
        }
        let transfers = printed.split(separator: "\n").compactMap { line in
            ((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]).map { Transfer($0, text: line) }
        }
        guard status == 0, !transfers.isEmpty else {
            throw SetupError("\(arguments.first ?? python) exited with \(status): \(printed) \(complaints)")
        }
        return transfers
    }

    /// Runs a program to its end, or kills it after `seconds`; returns its exit status and
    /// standard output.
    public static func runBounded(_ program: String, _ arguments: [String], seconds: Double) async throws -> (status: Int32, output: String) {
        let (status, output, _) = try await run(program, arguments, seconds: seconds)
        return (status, output)
    }

    /// Runs a program to its end, or kills it after `seconds`; returns its exit status, standard
    /// output and standard error. Whatever it left running in its process group (Chromium's
    /// helpers) is killed too, so that none holds a pipe open. The pipes are read on Dispatch
    /// threads: blocking one of Swift concurrency's (two, on two cores) would stall the server
    /// under test in the same process.
    static func run(_ program: String, _ arguments: [String], seconds: Double) async throws -> (status: Int32, output: String, errors: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        let exited = AsyncStream<Void>.makeStream()
        process.terminationHandler = { _ in exited.continuation.finish() }
        try process.run()
        let group = process.processIdentifier
        async let printed = readToEnd(output)
        async let complaints = readToEnd(errors)
        let timer = Task { () -> Bool in
            do { try await Task.sleep(for: .seconds(seconds)) } catch { return false }
            kill(group, SIGKILL)
            return true
        }
        for await _ in exited.stream {}
        timer.cancel()
        let timedOut = await timer.value
        kill(-group, SIGKILL)
        let result = (process.terminationStatus, String(decoding: await printed, as: UTF8.self), String(decoding: await complaints, as: UTF8.self))
        guard !timedOut else { throw SetupError("\(program) did not finish within \(Int(seconds)) s: \(result.2)") }
        return result
    }

    /// Reads a pipe to its end on a Dispatch thread.
    static func readToEnd(_ pipe: Pipe) async -> Data {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: pipe.fileHandleForReading.readDataToEndOfFile()) }
        }
    }
}

/// A test's set-up failed: a peer is missing or broke. The message says how to install it.
public struct SetupError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
