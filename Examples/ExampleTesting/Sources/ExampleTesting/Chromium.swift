import Crypto
import Foundation

/// Headless Chromium, which speaks QUIC to an origin only when told to
/// (`--origin-to-force-quic-on`) and accepts a generated certificate by its key's SHA-256
/// (`--ignore-certificate-errors-spki-list`).
public enum Chromium {
    public static let path = "/usr/bin/chromium"

    /// Loads `https://host:port/` over HTTP/3 in a fresh profile and returns the DOM once the
    /// page has loaded (`--dump-dom`), or throws when Chromium is missing, fails, or takes over `seconds`.
    public static func dumpDOM(host: String = "localhost", port: UInt16, path: String = "/", certificatePEM: String, seconds: Double = 90) async throws -> String {
        guard FileManager.default.isExecutableFile(atPath: Self.path) else {
            throw SetupError("no \(Self.path): run `bash scripts/setup` (apt-get install -y chromium)")
        }
        let profile = FileManager.default.temporaryDirectory.appendingPathComponent("example-chromium-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: profile) }
        let spki = try await spkiSHA256Base64(ofCertificate: certificatePEM)
        let (status, dom, complaints) = try await Peers.run(Self.path, [
            "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
            "--user-data-dir=\(profile)", "--enable-quic", "--origin-to-force-quic-on=\(host):\(port)",
            "--ignore-certificate-errors-spki-list=\(spki)", "--dump-dom", "https://\(host):\(port)\(path)",
        ], seconds: seconds)
        guard status == 0, !dom.isEmpty else {
            throw SetupError("chromium exited with \(status) and no page: \(complaints.suffix(2000))")
        }
        return dom
    }

    /// The SHA-256 of the certificate's SubjectPublicKeyInfo, in base64 (`openssl x509 -pubkey`).
    public static func spkiSHA256Base64(ofCertificate pem: String) async throws -> String {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("spki-\(UUID()).pem").path
        try pem.write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let (_, publicKey) = try await Peers.runBounded("/usr/bin/openssl", ["x509", "-in", file, "-pubkey", "-noout"], seconds: 30)
        let body = publicKey.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        guard let der = Data(base64Encoded: body) else { throw SetupError("openssl printed no public key: \(publicKey)") }
        return Data(SHA256.hash(data: der)).base64EncodedString()
    }
}
