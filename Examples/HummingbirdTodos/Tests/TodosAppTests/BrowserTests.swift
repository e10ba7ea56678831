import Crypto
import Foundation
import TodosApp
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Headless Chromium loads the Hummingbird application's page over HTTP/3.
@Suite("Hummingbird over HTTP/3 in Chromium", .serialized)
struct BrowserTests {
    /// Chromium speaks QUIC to an origin only when forced to (`--origin-to-force-quic-on`), and
    /// accepts the generated certificate by its key's SHA-256 (`--ignore-certificate-errors-spki-list`).
    /// The page writes the protocol its own navigation came over into the DOM, which
    /// `--dump-dom` prints once the page has loaded.
    @Test func chromiumLoadsThePageOverHTTP3() async throws {
        let chromium = "/usr/bin/chromium"
        guard FileManager.default.isExecutableFile(atPath: chromium) else {
            throw SetupError("no \(chromium): run `bash scripts/setup` (apt-get install -y chromium)")
        }
        let todos = try await RunningTodos.start(host: "localhost")
        let profile = FileManager.default.temporaryDirectory.appendingPathComponent("todos-chromium-\(UUID())").path
        let spki = try await Self.spkiSHA256Base64(ofCertificate: todos.identity.certificatePEM)
        let dom = try await Self.runBounded(chromium, [
                "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
                "--user-data-dir=\(profile)", "--enable-quic", "--origin-to-force-quic-on=localhost:\(todos.http3Port)",
                "--ignore-certificate-errors-spki-list=\(spki)", "--dump-dom", "https://localhost:\(todos.http3Port)/",
            ], seconds: 90)
        await todos.stop()
        try? FileManager.default.removeItem(atPath: profile)
        #expect(dom.contains("This page came over h3"), "chromium's DOM: \(dom.suffix(800))")
    }

    /// The SHA-256 of the certificate's SubjectPublicKeyInfo, in base64 (`openssl x509 -pubkey`).
    static func spkiSHA256Base64(ofCertificate pem: String) async throws -> String {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("spki-\(UUID()).pem").path
        try pem.write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let publicKey = try await runBounded("/usr/bin/openssl", ["x509", "-in", file, "-pubkey", "-noout"], seconds: 30)
        let body = publicKey.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        guard let der = Data(base64Encoded: body) else { throw SetupError("openssl printed no public key: \(publicKey)") }
        return Data(Crypto.SHA256.hash(data: der)).base64EncodedString()
    }

    /// Runs a program to its end, or kills its process group after `seconds`; returns its output.
    static func runBounded(_ program: String, _ arguments: [String], seconds: Double) async throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let group = process.processIdentifier
        let deadline = Date().addingTimeInterval(seconds)
        let reader = Task.detached { output.fileHandleForReading.readDataToEndOfFile() }
        while process.isRunning, Date() < deadline { try await Task.sleep(for: .milliseconds(50)) }
        let finished = !process.isRunning
        kill(-group, SIGKILL)
        kill(group, SIGKILL)
        process.waitUntilExit()
        guard finished else { throw SetupError("\(program) did not finish within \(Int(seconds)) s") }
        return String(decoding: await reader.value, as: UTF8.self)
    }
}
