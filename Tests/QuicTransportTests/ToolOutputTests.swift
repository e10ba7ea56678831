import CommandLineSupport
import Foundation
import QuicTestSupport
import Testing

/// The tools print and read without Foundation's `String(format:)` and `FileHandle`, which
/// live outside FoundationEssentials: what they print must not change.
@Suite("Tools' output and input", .timeLimit(TestEnvironment.minutes(1)))
struct ToolOutputTests {
    @Test(arguments: [0.0, 0.5, 1.25, 2.675, -3.14159, 99.995, 1e6 + 0.05, 123_456.789, 1e-7])
    func fixedPointPrintsAsPrintfDoes(value: Double) {
        for digits in 0...3 {
            #expect(fixedPoint(value, digits: digits) == String(format: "%.\(digits)f", value), "\(value) with \(digits) digits")
        }
    }

    /// `--write-out` in one pass: what a value holds is written as it is.
    @Test func writeOutReplacesInOnePass() {
        let values = ["url": "https://h/%{response_code}\\n", "response_code": "200"]
        let (text, unknown) = writeOutText("%{response_code} %{url} 50%% %{nope}\\n\\t\\r\\x %{open", values: values)
        #expect(text == "200 https://h/%{response_code}\\n 50% \n\t\r\\x %{open")
        #expect(unknown == ["nope"])
    }

    /// quic-echo connect sends what arrives on standard input when it is not a terminal, as it
    /// sends the same bytes given with `--data`.
    @Test func quicEchoSendsItsStandardInput() async throws {
        let server = try await EchoServerProcess()
        defer { server.process.stop() }
        let piped = String(repeating: "piped from standard input ", count: 4000)  // 104,000 bytes, more than one read
        let input = FileManager.default.temporaryDirectory.appendingPathComponent("stdin-\(UUID())")
        try Data(piped.utf8).write(to: input)
        defer { try? FileManager.default.removeItem(at: input) }
        let client = try ChildProcess(URL(fileURLWithPath: "/bin/sh"), [
            "-c", "exec \"$0\" connect 127.0.0.1 \(server.port) --pin-sha256 \(server.fingerprint) < \"$1\"",
            try TestEnvironment.executable("quic-echo").path, input.path,
        ])
        #expect(try await client.waitForExit() == 0, "quic-echo connect: \(client.standardError)")
        let given = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "127.0.0.1", "\(server.port)", "--pin-sha256", server.fingerprint, "--data", piped,
        ])
        #expect(try await given.waitForExit() == 0, "quic-echo connect --data: \(given.standardError)")
        func echoed(_ output: String) -> Int? {
            output.split(separator: "\n").first { $0.hasPrefix("echoed ") }.flatMap { Int($0.split(separator: " ")[1]) }
        }
        let fromInput = try #require(echoed(client.standardOutput), "\(client.standardOutput)")
        #expect(fromInput == echoed(given.standardOutput), "\(client.standardOutput)\n\(given.standardOutput)")
        #expect(fromInput >= piped.utf8.count)
    }
}
