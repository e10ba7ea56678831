import Foundation

/// A PKCS #12 identity made by a tool nobody here wrote, as an app would bundle it, with the
/// PEM files it was made from.
package struct PKCS12File: Sendable {
    /// The tool that writes the file.
    package enum Tool: String, Sendable, CaseIterable {
        /// `openssl pkcs12 -export` (OpenSSL 3: PBES2 with AES-256-CBC, a SHA-256 MAC).
        case openssl
        /// GnuTLS's `certtool --to-p12`.
        case certtool
    }

    /// The DER PKCS #12 bytes.
    package let data: Data
    /// The certificate it holds, PEM, for a peer to trust or pin.
    package let certificateFile: String
    /// The certificate's private key, PEM.
    package let keyFile: String
    /// The `friendlyName` written into it.
    package let label: String

    /// Makes a fresh localhost certificate with openssl and exports it with `tool`, protected
    /// by `passphrase` and named `label`.
    package static func make(passphrase: String, label: String = "quic test identity", tool: Tool = .openssl) throws -> PKCS12File {
        let (cert, key) = try OpenSSLCertificate.make()
        let output = URL(fileURLWithPath: cert).deletingLastPathComponent().appendingPathComponent("identity-\(tool.rawValue).p12").path
        let process = Process()
        switch tool {
        case .openssl:
            process.executableURL = try TestEnvironment.systemTool("openssl", package: "openssl")
            process.arguments = [
                "pkcs12", "-export", "-in", cert, "-inkey", key, "-name", label, "-passout", "pass:\(passphrase)", "-out", output,
            ]
        case .certtool:
            process.executableURL = try TestEnvironment.systemTool("certtool", package: "gnutls-bin")
            process.arguments = [
                "--to-p12", "--load-certificate", cert, "--load-privkey", key, "--p12-name", label, "--password", passphrase,
                "--outder", "--outfile", output,
            ]
        }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw SetupError("\(tool.rawValue) could not write a PKCS #12 file") }
        return PKCS12File(data: try Data(contentsOf: URL(fileURLWithPath: output)), certificateFile: cert, keyFile: key, label: label)
    }

    /// The DER bytes of the certificate in `certificateFile`.
    package var certificateDER: Data {
        get throws {
            let pem = try String(contentsOfFile: certificateFile, encoding: .utf8)
            let body = pem.components(separatedBy: "-----BEGIN CERTIFICATE-----")[1].components(separatedBy: "-----END CERTIFICATE-----")[0]
            guard let der = Data(base64Encoded: body.filter { !$0.isWhitespace }) else { throw SetupError("no certificate in \(certificateFile)") }
            return der
        }
    }
}
