import CQuicShims
import Foundation
import QuicTestSupport
import QuicTransport
import Testing

#if canImport(Glibc)
import Glibc
#endif

// MARK: - Helpers

/// Test-only certificates built through the package-visible `generate` overload.
private enum TestCertificates {
    static let day: time_t = 24 * 3600

    /// A self-signed localhost certificate whose validity ended yesterday.
    static func expired() throws -> SelfSignedCertificate {
        let now = time(nil)
        return try SelfSignedCertificate.generate(
            commonName: "localhost", dnsNames: ["localhost"], ipAddresses: ["127.0.0.1"],
            notBefore: now - 10 * day, notAfter: now - day)
    }

    /// A self-signed localhost certificate that only becomes valid tomorrow.
    static func notYetValid() throws -> SelfSignedCertificate {
        let now = time(nil)
        return try SelfSignedCertificate.generate(
            commonName: "localhost", dnsNames: ["localhost"], ipAddresses: ["127.0.0.1"],
            notBefore: now + day, notAfter: now + 10 * day)
    }

    /// A valid certificate for a name other than localhost.
    static func wrongName() throws -> SelfSignedCertificate {
        try SelfSignedCertificate.generate(commonName: "other.test", dnsNames: ["other.test"], ipAddresses: [])
    }
}

/// Writes `contents` to a fresh temporary file, passes its path to `body`, then deletes it.
private func withTemporaryFile<R>(_ contents: String, _ body: (String) throws -> R) throws -> R {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("tls-test-\(UUID().uuidString).pem")
    try contents.write(to: url, atomically: true, encoding: .utf8)
    defer { try? FileManager.default.removeItem(at: url) }
    return try body(url.path)
}

/// An owned, parsed X.509 certificate for inspection in tests.
private final class ParsedCertificate {
    let raw: gnutls_x509_crt_t

    init(pem: String) throws {
        var handle: gnutls_x509_crt_t?
        try #require(gnutls_x509_crt_init(&handle) == 0)
        raw = handle!
        var bytes = Array(pem.utf8)
        let rc = bytes.withUnsafeMutableBufferPointer { buffer in
            var datum = gnutls_datum_t(data: buffer.baseAddress, size: UInt32(buffer.count))
            return gnutls_x509_crt_import(raw, &datum, GNUTLS_X509_FMT_PEM)
        }
        try #require(rc == 0, "gnutls_x509_crt_import: \(String(cString: gnutls_strerror(rc)))")
    }

    deinit { gnutls_x509_crt_deinit(raw) }

    var der: [UInt8] {
        var size = 0
        _ = gnutls_x509_crt_export(raw, GNUTLS_X509_FMT_DER, nil, &size)
        var out = [UInt8](repeating: 0, count: size)
        let rc = gnutls_x509_crt_export(raw, GNUTLS_X509_FMT_DER, &out, &size)
        return rc == 0 ? Array(out[..<size]) : []
    }

    /// All subjectAltNames as (type, raw value) pairs.
    var subjectAltNames: [(gnutls_x509_subject_alt_name_t, [UInt8])] {
        var names: [(gnutls_x509_subject_alt_name_t, [UInt8])] = []
        for index in 0... {
            var buffer = [UInt8](repeating: 0, count: 256)
            var size = buffer.count
            var critical: UInt32 = 0
            let rc = gnutls_x509_crt_get_subject_alt_name(raw, UInt32(index), &buffer, &size, &critical)
            if rc < 0 { break }
            names.append((gnutls_x509_subject_alt_name_t(UInt32(rc)), Array(buffer[..<size])))
        }
        return names
    }
}

/// An address's bytes in network order (16 for IPv6, 4 for IPv4); empty if it is neither.
private func binaryIP(_ text: String) -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: 16)
    if inet_pton(AF_INET6, text, &bytes) == 1 { return bytes }
    if inet_pton(AF_INET, text, &bytes) == 1 { return Array(bytes.prefix(4)) }
    return []
}

private func runOpenSSL(_ arguments: [String]) throws -> String {
    let openssl = "/usr/bin/openssl"
    try #require(
        FileManager.default.isExecutableFile(atPath: openssl),
        "openssl not found at \(openssl); install it with: apt-get install -y openssl")
    let process = Process()
    process.executableURL = URL(fileURLWithPath: openssl)
    process.arguments = arguments
    let output = Pipe()
    process.standardOutput = output
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    try #require(process.terminationStatus == 0, "openssl \(arguments.joined(separator: " ")) failed")
    return String(decoding: data, as: UTF8.self)
}

// MARK: - Self-signed certificate generation

@Suite("SelfSignedCertificate")
struct SelfSignedCertificateTests {
    /// RFC 5915 §3: the private key is a fixed-length octet string (32 bytes for P-256); GnuTLS
    /// drops leading zero bytes, which stricter parsers reject, so generation must avoid them.
    @Test func privateKeysAlwaysCarryAFull32ByteScalar() throws {
        for _ in 0..<1_000 {
            let pem = try SelfSignedCertificate.generate().privateKeyPEM
            let body = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
            let der = try #require(Data(base64Encoded: body))
            // ECPrivateKey ::= SEQUENCE { version INTEGER 1, privateKey OCTET STRING (SIZE 32) ... }
            let marker: [UInt8] = [0x02, 0x01, 0x01, 0x04, 0x20]
            #expect(Array(der).firstRange(of: marker) != nil, "short private scalar in \(pem)")
        }
    }

    @Test func generatedCertificateParsesWithRequestedSANsAndP256Key() throws {
        let generated = try SelfSignedCertificate.generate(
            commonName: "quic.test", dnsNames: ["quic.test", "alt.quic.test"], ipAddresses: ["127.0.0.1", "::1"])
        #expect(generated.certificatePEM.hasPrefix("-----BEGIN CERTIFICATE-----"))
        #expect(generated.privateKeyPEM.hasPrefix("-----BEGIN PRIVATE KEY-----"))

        let cert = try ParsedCertificate(pem: generated.certificatePEM)
        #expect(gnutls_x509_crt_get_version(cert.raw) == 3)

        let sans = cert.subjectAltNames
        let dns = sans.filter { $0.0 == GNUTLS_SAN_DNSNAME }.map { String(decoding: $0.1, as: UTF8.self) }
        let ips = sans.filter { $0.0 == GNUTLS_SAN_IPADDRESS }.map(\.1)
        #expect(dns == ["quic.test", "alt.quic.test"])
        #expect(ips == [binaryIP("127.0.0.1"), binaryIP("::1")])

        var bits: UInt32 = 0
        #expect(gnutls_x509_crt_get_pk_algorithm(cert.raw, &bits) == Int32(GNUTLS_PK_ECDSA.rawValue))
        #expect(bits == 256)  // P-256 is GnuTLS's only 256-bit ECDSA curve

        var isCA: UInt32 = 1
        var critical: UInt32 = 0
        var pathLength: Int32 = 0
        #expect(gnutls_x509_crt_get_basic_constraints(cert.raw, &critical, &isCA, &pathLength) == 0)
        var keyUsage: UInt32 = 0
        #expect(gnutls_x509_crt_get_key_usage(cert.raw, &keyUsage, &critical) >= 0)
        #expect(keyUsage == UInt32(GNUTLS_KEY_DIGITAL_SIGNATURE))
        var oid = [UInt8](repeating: 0, count: 64)
        var oidSize = oid.count
        #expect(gnutls_x509_crt_get_key_purpose_oid(cert.raw, 0, &oid, &oidSize, &critical) == 0)
        #expect(String(decoding: oid[..<oidSize], as: UTF8.self) == GNUTLS_KP_TLS_WWW_SERVER)

        #expect(generated.sha256Fingerprint == (try SHA256.hash(cert.der)))
        #expect(generated.sha256FingerprintHex == Hex.encode(generated.sha256Fingerprint))
        #expect(generated.sha256FingerprintHex.count == 64)
    }

    @Test func validityWindowFollowsParameters() throws {
        let before = time(nil)
        let generated = try SelfSignedCertificate.generate(validFor: .seconds(7 * 24 * 3600))
        let cert = try ParsedCertificate(pem: generated.certificatePEM)
        let activation = gnutls_x509_crt_get_activation_time(cert.raw)
        let expiration = gnutls_x509_crt_get_expiration_time(cert.raw)
        #expect(abs(activation - (before - 3600)) <= 5)
        #expect(abs(expiration - (before + 7 * 24 * 3600)) <= 5)

        let expired = try ParsedCertificate(pem: try TestCertificates.expired().certificatePEM)
        #expect(gnutls_x509_crt_get_expiration_time(expired.raw) < time(nil))
    }

    @Test func serialsAndKeysAreFresh() throws {
        let a = try SelfSignedCertificate.generate()
        let b = try SelfSignedCertificate.generate()
        #expect(a.sha256Fingerprint != b.sha256Fingerprint)
        #expect(a.privateKeyPEM != b.privateKeyPEM)
    }

    @Test func invalidIPAddressIsRejected() throws {
        let error = #expect(throws: TLSError.self) {
            try SelfSignedCertificate.generate(ipAddresses: ["300.1.2.3"])
        }
        #expect(error == .invalidIPAddress("300.1.2.3"))
        #expect(error?.description.contains("300.1.2.3") == true)
    }

    @Test func fingerprintMatchesOpenSSL() throws {
        let generated = try SelfSignedCertificate.generate()
        try withTemporaryFile(generated.certificatePEM) { path in
            // e.g. "sha256 Fingerprint=AB:CD:..." (the prefix's case depends on the OpenSSL version)
            let line = try runOpenSSL(["x509", "-noout", "-fingerprint", "-sha256", "-in", path])
            #expect(try CertificateVerification.pinnedSHA256(hex: line) == .pinnedSHA256(generated.sha256Fingerprint))
            let hex = try #require(line.split(separator: "=").last).filter { $0 != ":" && !$0.isWhitespace }
            #expect(hex.lowercased() == generated.sha256FingerprintHex)

            let text = try runOpenSSL(["x509", "-noout", "-text", "-in", path])
            #expect(text.contains("prime256v1") || text.contains("P-256"))
            #expect(text.contains("CA:FALSE"))
            #expect(text.contains("Subject: CN = localhost") || text.contains("Subject: CN=localhost"))
            #expect(text.contains("TLS Web Server Authentication"))
        }
    }
}

// MARK: - Credentials

@Suite("TLSCredentials")
struct TLSCredentialsTests {
    @Test func serverCredentialsLoadFromPEMStringsAndFiles() throws {
        let generated = try SelfSignedCertificate.generate()
        _ = try TLSCredentials.server(
            certificateChainPEM: generated.certificatePEM, privateKeyPEM: generated.privateKeyPEM)
        try withTemporaryFile(generated.certificatePEM) { certPath in
            try withTemporaryFile(generated.privateKeyPEM) { keyPath in
                _ = try TLSCredentials.server(certificateChainFile: certPath, privateKeyFile: keyPath)
            }
        }
    }

    @Test func missingServerFileNamesThePath() throws {
        let generated = try SelfSignedCertificate.generate()
        let missing = "/nonexistent/dir/key.pem"
        try withTemporaryFile(generated.certificatePEM) { certPath in
            let error = #expect(throws: TLSError.self) {
                try TLSCredentials.server(certificateChainFile: certPath, privateKeyFile: missing)
            }
            #expect(error == .missingFile(path: missing))
            #expect(error?.description == "no such file: \(missing)")
        }
    }

    @Test func directoryIsReportedAsUnreadable() throws {
        let error = #expect(throws: TLSError.self) {
            try TLSCredentials.server(certificateChainFile: "/tmp", privateKeyFile: "/tmp")
        }
        #expect(error?.path == "/tmp")
        #expect(error?.description.hasPrefix("cannot read /tmp: ") == true)
    }

    @Test func garbagePEMGivesAClearError() throws {
        let generated = try SelfSignedCertificate.generate()
        let badCert = #expect(throws: TLSError.self) {
            try TLSCredentials.server(certificateChainPEM: "not a certificate", privateKeyPEM: generated.privateKeyPEM)
        }
        #expect(badCert?.path == "certificate PEM")
        #expect(badCert?.description.hasPrefix("cannot load certificate or key from certificate PEM: ") == true)

        try withTemporaryFile("-----BEGIN PRIVATE KEY-----\n!!!!\n-----END PRIVATE KEY-----\n") { keyPath in
            try withTemporaryFile(generated.certificatePEM) { certPath in
                let badKey = #expect(throws: TLSError.self) {
                    try TLSCredentials.server(certificateChainFile: certPath, privateKeyFile: keyPath)
                }
                #expect(badKey?.path == keyPath)
                #expect(badKey?.description.contains(keyPath) == true)
            }
        }
    }

    @Test func mismatchedKeyIsAGnuTLSError() throws {
        let a = try SelfSignedCertificate.generate()
        let b = try SelfSignedCertificate.generate()
        let error = #expect(throws: TLSError.self) {
            try TLSCredentials.server(certificateChainPEM: a.certificatePEM, privateKeyPEM: b.privateKeyPEM)
        }
        #expect(error?.description.hasPrefix("gnutls_certificate_set_x509_key_mem2 failed: ") == true)
    }

    @Test func clientCredentialsWithCAFile() throws {
        let generated = try SelfSignedCertificate.generate()
        try withTemporaryFile(generated.certificatePEM) { path in
            _ = try TLSCredentials.client(verification: .caFile(path))
        }
        let missing = "/nonexistent/ca.pem"
        let error = #expect(throws: TLSError.self) { try TLSCredentials.client(verification: .caFile(missing)) }
        #expect(error == .missingFile(path: missing))

        try withTemporaryFile("no certificates here\n") { path in
            let empty = #expect(throws: TLSError.self) { try TLSCredentials.client(verification: .caFile(path)) }
            #expect(empty?.path == path)
        }
    }

    @Test func clientCredentialsForOtherModes() throws {
        _ = try TLSCredentials.client(verification: .systemTrustStore)
        _ = try TLSCredentials.client(verification: .insecure)
        _ = try TLSCredentials.client(verification: .pinnedSHA256([UInt8](repeating: 0, count: 32)))
    }
}

// MARK: - Pins and hex

@Suite("Pins")
struct PinTests {
    static let hex = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

    @Test func acceptsPlainAndColonSeparatedHex() throws {
        let expected = CertificateVerification.pinnedSHA256(try #require(Hex.decode(Self.hex)))
        #expect(try CertificateVerification.pinnedSHA256(hex: Self.hex) == expected)
        #expect(try CertificateVerification.pinnedSHA256(hex: Self.hex.uppercased()) == expected)
        var colons = ""
        for (index, char) in Self.hex.uppercased().enumerated() {
            if index > 0 && index % 2 == 0 { colons.append(":") }
            colons.append(char)
        }
        #expect(try CertificateVerification.pinnedSHA256(hex: colons) == expected)
        #expect(try CertificateVerification.pinnedSHA256(hex: "sha256 Fingerprint=\(colons)\n") == expected)
    }

    @Test(arguments: ["", "abcd", String(PinTests.hex.dropLast(2)), PinTests.hex + "00"])
    func rejectsWrongLength(_ input: String) throws {
        let error = #expect(throws: TLSError.self) { try CertificateVerification.pinnedSHA256(hex: input) }
        #expect(error?.description.contains("expected 64 hex digits") == true)
    }

    @Test func rejectsNonHex() throws {
        let input = "zz" + Self.hex.dropFirst(2)
        let error = #expect(throws: TLSError.self) { try CertificateVerification.pinnedSHA256(hex: input) }
        #expect(error == .invalidPin(input: input, reason: "contains a character that is not a hex digit"))
    }

    @Test func hexRoundTrip() {
        let bytes: [UInt8] = [0x00, 0x0f, 0xa5, 0xff]
        #expect(Hex.encode(bytes) == "000fa5ff")
        #expect(Hex.decode("000FA5ff") == bytes)
        #expect(Hex.decode("abc") == nil)
        #expect(Hex.decode("0g") == nil)
    }

    @Test func sha256KnownAnswer() throws {
        #expect(Hex.encode(try SHA256.hash(Array("test".utf8))) == Self.hex)
    }
}

// MARK: - Verification during a real TLS 1.3 handshake

@Suite("Peer verification")
struct PeerVerificationTests {
    static let localhost = try! SelfSignedCertificate.generate()

    func handshake(
        _ certificate: SelfSignedCertificate = localhost, serverName: String = "localhost",
        caFileFor caCertificate: SelfSignedCertificate? = nil
    ) throws -> TLSHandshakeHarness.Outcome {
        try withTemporaryFile((caCertificate ?? certificate).certificatePEM) { path in
            try TLSHandshakeHarness.run(certificate: certificate, serverName: serverName, verification: .caFile(path))
        }
    }

    @Test(arguments: ["localhost", "127.0.0.1", "::1"])
    func trustedCAFileAndMatchingNameSucceeds(_ serverName: String) throws {
        let outcome = try handshake(serverName: serverName)
        #expect(outcome.verifyCallbackRan)
        #expect(outcome.failure == nil)
        #expect(outcome.succeeded)
        #expect(outcome.version == GNUTLS_TLS1_3)
    }

    @Test func systemTrustStoreRejectsSelfSigned() throws {
        let outcome = try TLSHandshakeHarness.run(
            certificate: Self.localhost, serverName: "localhost", verification: .systemTrustStore)
        #expect(outcome.failure == .unknownIssuer)
        #expect(!outcome.succeeded)
        #expect(outcome.clientResult == GNUTLS_E_CERTIFICATE_ERROR)
    }

    @Test(arguments: ["example.com", "10.1.2.3", "::2"])
    func wrongServerNameIsNameMismatch(_ serverName: String) throws {
        let outcome = try handshake(serverName: serverName)
        #expect(outcome.failure == .nameMismatch(expected: serverName))
        #expect(!outcome.succeeded)
    }

    @Test func certificateForAnotherNameIsNameMismatch() throws {
        let outcome = try handshake(try TestCertificates.wrongName())
        #expect(outcome.failure == .nameMismatch(expected: "localhost"))
    }

    @Test func expiredCertificateIsExpired() throws {
        let outcome = try handshake(try TestCertificates.expired())
        #expect(outcome.failure == .expired)
        #expect(!outcome.succeeded)
    }

    @Test func futureCertificateIsNotYetValid() throws {
        let outcome = try handshake(try TestCertificates.notYetValid())
        #expect(outcome.failure == .notYetValid)
    }

    @Test func untrustedCAFileIsUnknownIssuer() throws {
        let unrelated = try SelfSignedCertificate.generate(commonName: "Unrelated Test CA")
        let outcome = try handshake(caFileFor: unrelated)
        #expect(outcome.failure == .unknownIssuer)
    }

    /// A trusted certificate with the leaf's subject DN but another key is taken by GnuTLS as the
    /// issuer and fails the signature check, which is not "signer not found": GnuTLS's text is kept.
    @Test func sameSubjectDifferentKeyIsReportedByGnuTLS() throws {
        let outcome = try handshake(caFileFor: try SelfSignedCertificate.generate())
        guard case .other(let text) = outcome.failure else {
            Issue.record("expected .other, got \(String(describing: outcome.failure))")
            return
        }
        #expect(text.contains("signature"))
        #expect(!outcome.succeeded)
    }

    @Test func correctPinSucceedsWithoutChainOrName() throws {
        let outcome = try TLSHandshakeHarness.run(
            certificate: Self.localhost, serverName: "not-in-the-cert.example",
            verification: .pinnedSHA256(Self.localhost.sha256Fingerprint))
        #expect(outcome.verifyCallbackRan)
        #expect(outcome.failure == nil)
        #expect(outcome.succeeded)
    }

    @Test func wrongPinIsPinMismatch() throws {
        let other = try SelfSignedCertificate.generate()
        let outcome = try TLSHandshakeHarness.run(
            certificate: Self.localhost, serverName: "localhost", verification: .pinnedSHA256(other.sha256Fingerprint))
        #expect(outcome.failure == .pinMismatch(expected: other.sha256FingerprintHex,
                                                actual: Self.localhost.sha256FingerprintHex))
        #expect(!outcome.succeeded)
    }

    @Test func insecureAcceptsAnything() throws {
        let outcome = try TLSHandshakeHarness.run(
            certificate: try TestCertificates.expired(), serverName: "example.com", verification: .insecure)
        #expect(outcome.verifyCallbackRan)
        #expect(outcome.failure == nil)
        #expect(outcome.succeeded)
    }

    /// GnuTLS itself appends to `SSLKEYLOGFILE` (checked by hand: `SSLKEYLOGFILE=/tmp/k swift test`);
    /// `KeyLog.path` only reports whether that is happening.
    @Test func keyLogPathReflectsEnvironment() {
        let value = ProcessInfo.processInfo.environment[KeyLog.environmentVariable]
        #expect(KeyLog.path == (value?.isEmpty == false ? value : nil))
    }

    @Test func failureDescriptionsAreActionable() {
        let error = TLSError.verificationFailed(.unknownIssuer)
        #expect(error.description == "certificate verification failed: unknown issuer: the server's certificate "
            + "is not signed by a trusted CA")
        #expect(error.verificationFailure == .unknownIssuer)
        #expect(TLSVerificationFailure.nameMismatch(expected: "example.com").description.contains("\"example.com\""))
    }
}
