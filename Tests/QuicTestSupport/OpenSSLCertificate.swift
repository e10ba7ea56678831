import Foundation

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
