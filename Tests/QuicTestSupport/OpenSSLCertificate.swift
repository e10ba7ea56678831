import Foundation
import QuicTransport

/// Certificates for real peers, made by a tool nobody here wrote.
package enum OpenSSLCertificate {
    /// A certificate for `localhost` and 127.0.0.1 in two PEM files, made by openssl, so no code of
    /// ours is on that side of the handshake.
    package static func make() throws -> (cert: String, key: String) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("aioquic-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let cert = directory.appendingPathComponent("cert.pem").path
        let key = directory.appendingPathComponent("key.pem").path
        let openssl = Process()
        openssl.executableURL = try TestEnvironment.systemTool("openssl", package: "openssl")
        openssl.arguments = [
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-days", "2",
            "-keyout", key, "-out", cert,
        ]
        openssl.standardError = FileHandle.nullDevice
        try openssl.run()
        openssl.waitUntilExit()
        guard openssl.terminationStatus == 0 else { throw SetupError("openssl could not make a certificate") }
        return (cert, key)
    }
}

/// A test CA made by openssl for one test run, and a leaf it signed for `localhost`, 127.0.0.1
/// and ::1: what a browser or curl is given to trust, and what the server serves.
package struct TestCertificateAuthority: Sendable {
    /// The directory holding the PEM files.
    package let directory: URL
    /// The CA's certificate (PEM): the one certificate a client is told to trust.
    package let caCertificate: String
    /// The leaf certificate (PEM) for h3serve's `--cert`.
    package let leafCertificate: String
    /// The leaf's private key (PEM) for h3serve's `--key`.
    package let leafKey: String

    /// Makes a fresh CA (P-256, `CA:TRUE`) and a leaf it signs, valid for two days.
    package init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("test-ca-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        caCertificate = directory.appendingPathComponent("ca.pem").path
        leafCertificate = directory.appendingPathComponent("leaf.pem").path
        leafKey = directory.appendingPathComponent("leaf.key").path
        let caKey = directory.appendingPathComponent("ca.key").path
        let request = directory.appendingPathComponent("leaf.csr").path
        let extensions = directory.appendingPathComponent("leaf.ext").path
        try "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
            .write(toFile: extensions, atomically: true, encoding: .utf8)
        let curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        try Self.openssl(["req", "-x509"] + curve + [
            "-subj", "/CN=QUIC test CA \(UUID().uuidString.prefix(8))", "-days", "2",
            "-keyout", caKey, "-out", caCertificate,
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        ])
        try Self.openssl(["req"] + curve + ["-subj", "/CN=localhost", "-keyout", leafKey, "-out", request])
        try Self.openssl([
            "x509", "-req", "-in", request, "-CA", caCertificate, "-CAkey", caKey, "-CAcreateserial", "-days", "2",
            "-extfile", extensions, "-out", leafCertificate,
        ])
    }

    /// The base64 SHA-256 of the leaf's SubjectPublicKeyInfo, as Chromium's
    /// `--ignore-certificate-errors-spki-list` takes it.
    package func leafSPKISHA256Base64() throws -> String {
        let pem = try Self.openssl(["x509", "-in", leafCertificate, "-pubkey", "-noout"])
        let body = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        guard let der = Data(base64Encoded: body) else { throw SetupError("openssl printed no public key: \(pem)") }
        return Data(try SHA256.hash(Array(der))).base64EncodedString()
    }

    @discardableResult
    private static func openssl(_ arguments: [String]) throws -> String {
        let openssl = Process()
        openssl.executableURL = try TestEnvironment.systemTool("openssl", package: "openssl")
        openssl.arguments = arguments
        let output = Pipe()
        openssl.standardOutput = output
        openssl.standardError = FileHandle.nullDevice
        try openssl.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        openssl.waitUntilExit()
        guard openssl.terminationStatus == 0 else {
            throw SetupError("openssl \(arguments.prefix(2).joined(separator: " ")) failed")
        }
        return text
    }
}
