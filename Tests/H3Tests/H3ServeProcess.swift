import Foundation
import QuicTestSupport

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
