import Foundation

/// `quic-echo serve` on a free port, with its generated certificate's fingerprint (empty with `--cert`).
package struct EchoServerProcess {
    package let process: ChildProcess
    package let port: Int
    package let fingerprint: String

    package init(_ extraArguments: [String] = []) async throws {
        let binary = try TestEnvironment.executable("quic-echo")
        process = try ChildProcess(binary, ["serve", "--host", "127.0.0.1", "--port", "0"] + extraArguments)
        let listening = try await process.waitForLine(containing: "listening on")
        guard let portText = listening.split(separator: " ").dropFirst(2).first?.split(separator: ":").last, let port = Int(portText) else {
            throw SetupError("cannot read the port from '\(listening)'")
        }
        self.port = port
        if extraArguments.contains("--cert") {
            fingerprint = ""  // The caller's own certificate: nothing generated to print.
        } else {
            let certificateLine = try await process.waitForLine(containing: "sha256")
            fingerprint = String(certificateLine.split(separator: " ").last ?? "")
        }
    }
}

/// aioquic's `echo_server.py` on a free port, presenting `certificate` (with `--datagrams`).
/// With `requestingClientCertificates`, it asks each client for a certificate and prints
/// `CLIENT-CERTIFICATE <sha256 hex|none>` once the handshake completes.
package struct AioquicEchoServerProcess {
    package let process: ChildProcess
    package let port: UInt16

    package init(certificate: String, key: String, requestingClientCertificates: Bool = false) async throws {
        process = try ChildProcess(try TestEnvironment.python(), [
            TestEnvironment.aioquicScript("echo_server.py"), "--port", "0", "--cert", certificate, "--key", key, "--datagrams",
        ] + (requestingClientCertificates ? ["--request-client-certificate"] : []))
        let listening = try await process.waitForLine(containing: "LISTENING")
        guard let port = UInt16(listening.split(separator: " ").last ?? "") else {
            throw SetupError("cannot read the port from '\(listening)'")
        }
        self.port = port
    }
}
