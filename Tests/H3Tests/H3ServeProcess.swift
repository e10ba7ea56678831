import Foundation
import QuicTestSupport
import Testing

/// Starts h3serve serving `root` on a free port (`--port 0` unless `arguments` names one) and
/// waits until it listens; returns the process and its port.
func startH3serve(root: URL, _ arguments: [String] = []) async throws -> (process: ChildProcess, port: UInt16) {
    let portArguments = arguments.contains("--port") ? [] : ["--port", "0"]
    let server = try ChildProcess(try TestEnvironment.executable("h3serve"), portArguments + ["--root", root.path] + arguments)
    let line = try await server.waitForLine(containing: "serving")
    guard let text = line.split(separator: ":").last?.split(separator: "/").first, let port = UInt16(text) else {
        server.stop()
        throw SetupError("cannot read h3serve's port from '\(line)'")
    }
    return (server, port)
}

/// Runs h3get to its end. The handshake gets 10 s before TCP joins, since a loaded test machine
/// can exceed the default 300 ms and tests that expect HTTP/3 would then see TCP win.
func runH3get(_ arguments: [String]) async throws -> (status: Int32, output: String, error: String) {
    let run = try ChildProcess(try TestEnvironment.executable("h3get"), ["--happy-eyeballs-timeout-ms", "10000"] + arguments)
    let status = try await run.waitForExit()
    return (status, run.standardOutput, run.standardError)
}

/// A fresh directory for h3serve to serve, holding the file `name` of `size` bytes (byte i is
/// i·`multiplier`, mod 256), with `traces` for `--qlog-dir` and an empty `downloads` directory
/// for a client inside it.
func makeServedRoot(
    _ label: String, file name: String, size: Int, multiplier: Int
) throws -> (root: URL, traces: URL, downloads: URL, body: [UInt8]) {
    let root = FileManager.default.temporaryDirectory.appendingPathComponent("\(label)-\(UUID())")
    let downloads = root.appendingPathComponent("downloads")
    try FileManager.default.createDirectory(at: downloads, withIntermediateDirectories: true)
    let body = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* multiplier) }
    try Data(body).write(to: root.appendingPathComponent(name))
    return (root, root.appendingPathComponent("qlog"), downloads, body)
}

/// `count` random bytes from the kernel: a body in which a reordered or repeated chunk shows,
/// made fast even in a debug build (a byte at a time from a generator took seconds for 3 MB).
func randomBytes(_ count: Int) throws -> [UInt8] {
    guard let urandom = FileHandle(forReadingAtPath: "/dev/urandom") else { throw SetupError("cannot open /dev/urandom") }
    defer { try? urandom.close() }
    let bytes = Array(urandom.readData(ofLength: count))
    guard bytes.count == count else { throw SetupError("read \(bytes.count) of \(count) random bytes") }
    return bytes
}

/// Has Debian's gtlsclient fetch `file` from h3serve on `port` into `downloads`, with `flags`
/// before its usual ones, and returns what it wrote (empty if it wrote nothing).
func gtlsclientDownload(_ file: String, port: UInt16, flags: [String] = [], into downloads: URL, within seconds: Double) async throws -> [UInt8] {
    let gtlsclient = try TestEnvironment.systemTool("gtlsclient", package: "ngtcp2-client")
    let client = try ChildProcess(gtlsclient, ["--quiet", "--exit-on-all-streams-close"] + flags + [
        "--download", downloads.path, "127.0.0.1", "\(port)", "https://127.0.0.1:\(port)/\(file)",
    ])
    let status = try await client.waitForExit(seconds: seconds)
    #expect(status == 0, "gtlsclient exited with \(status): \(client.standardError.suffix(1500))")
    return FileManager.default.contents(atPath: downloads.appendingPathComponent(file).path).map(Array.init) ?? []
}

/// Stops h3serve and returns the path of its one connection's server trace in `traces`.
func serverTrace(afterStopping server: ChildProcess, in traces: URL) async throws -> String {
    server.terminate()
    _ = try await server.waitForExit()
    let name = try FileManager.default.contentsOfDirectory(atPath: traces.path).first { $0.hasSuffix("_server.sqlog") }
    guard let name else { throw SetupError("h3serve wrote no server trace in \(traces.path)") }
    return traces.appendingPathComponent(name).path
}
