import Foundation
import QuicTestSupport
import Testing

/// The fast part of the interop matrix (`scripts/interop --fast`): handshake, transfer,
/// resumption, 0-RTT, key update, Retry and transfer under 2% loss, against gtlsclient,
/// gtlsserver and aioquic in both roles and curl (pycurl's libcurl) as a client, each cell
/// verified from sha256 and qlog facts.
@Suite("Interop matrix (fast)", .timeLimit(TestEnvironment.minutes(10)))
struct InteropMatrixTests {
    @Test func theFastCasesPassAgainstEveryPeer() async throws {
        let python = try TestEnvironment.python()
        _ = try TestEnvironment.systemTool("gtlsclient", package: "ngtcp2-client")
        _ = try TestEnvironment.systemTool("gtlsserver", package: "ngtcp2-server")
        let binDirectory = try TestEnvironment.executable("h3get").deletingLastPathComponent().path
        _ = try TestEnvironment.executable("quic-netem")
        let script = TestEnvironment.repositoryRoot.appendingPathComponent("scripts/interop").path
        let run = try ChildProcess(python, [script, "--fast", "--bin-dir", binDirectory])
        // About two minutes on an idle machine; CI shares two cores with the rest of the suite.
        let status = try await run.waitForExit(seconds: 540)
        #expect(status == 0, "\(run.standardOutput)\n\(run.standardError.suffix(3000))")
        #expect(run.standardOutput.contains("0 failed"), "\(run.standardOutput)")
        // Every fast case is a row; no row may be all unsupported.
        for row in ["handshake", "transfer", "resumption", "zerortt", "keyupdate", "retry", "transferloss"] {
            let line = run.standardOutput.split(separator: "\n").first { $0.hasPrefix(row + " ") }
            #expect(line?.contains("passed") == true, "\(row): \(line ?? "missing")")
        }
    }
}
