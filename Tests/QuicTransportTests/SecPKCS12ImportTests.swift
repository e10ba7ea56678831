import Foundation
import QuicTestSupport
import QuicTransport
import Testing

/// `SecPKCS12Import` and the identity calls around it, on PKCS #12 files that openssl and
/// GnuTLS's certtool write.
@Suite("SecPKCS12Import and SecIdentity")
struct SecPKCS12ImportTests {
    /// Imports `file` as an app does and returns the status and the first item.
    static func importItems(_ data: Data, passphrase: Any?) -> (OSStatus, [String: Any]?) {
        var options: [String: Any] = [:]
        if let passphrase { options[kSecImportExportPassphrase as String] = passphrase }
        var items: CFArray?
        let status = SecPKCS12Import(data as CFData, options as CFDictionary, &items)
        return (status, (items as? [[String: Any]])?.first)
    }

    @Test(arguments: PKCS12File.Tool.allCases)
    func theIdentitysCertificateIsTheOneExported(tool: PKCS12File.Tool) throws {
        let file = try PKCS12File.make(passphrase: "s3cret pass", label: "server identity", tool: tool)
        let (status, item) = Self.importItems(file.data, passphrase: "s3cret pass")
        #expect(status == errSecSuccess)
        let dict = try #require(item)
        let identity = try #require(dict[kSecImportItemIdentity as String] as? SecIdentity)
        var certificate: SecCertificate?
        #expect(SecIdentityCopyCertificate(identity, &certificate) == errSecSuccess)
        let leaf = try #require(certificate)
        #expect(SecCertificateCopyData(leaf) as Data == (try file.certificateDER))
        #expect(SecCertificateCopySubjectSummary(leaf) == "localhost")

        let chain = try #require(dict[kSecImportItemCertChain as String] as? [SecCertificate])
        #expect(chain.map { SecCertificateCopyData($0) as Data } == [try file.certificateDER])
        #expect(dict[kSecImportItemLabel as String] as? String == "server identity")
        #expect((dict[kSecImportItemKeyID as String] as? Data)?.count == 20, "a SHA-1 key identifier")
        let trust = try #require(dict[kSecImportItemTrust as String] as? SecTrust)
        #expect((SecTrustCopyCertificateChain(trust) as? [SecCertificate])?.count == 1)
        #expect(sec_identity_create(identity) != nil)
    }

    @Test(arguments: PKCS12File.Tool.allCases)
    func aWrongPassphraseIsAuthFailed(tool: PKCS12File.Tool) throws {
        let file = try PKCS12File.make(passphrase: "right", tool: tool)
        let (status, item) = Self.importItems(file.data, passphrase: "wrong")
        #expect(status == errSecAuthFailed)
        #expect(item == nil)
        #expect(Self.importItems(file.data, passphrase: nil).0 == errSecAuthFailed, "no passphrase given")
    }

    @Test func garbageIsDecodeAndAPassphraseOfAnotherTypeIsParam() throws {
        #expect(Self.importItems(Data("not a PKCS #12 file".utf8), passphrase: "pw").0 == errSecDecode)
        #expect(Self.importItems(Data(), passphrase: "pw").0 == errSecDecode)
        let file = try PKCS12File.make(passphrase: "pw")
        #expect(Self.importItems(file.data.prefix(file.data.count / 2), passphrase: "pw").0 == errSecDecode, "a truncated file")
        #expect(Self.importItems(file.data, passphrase: 42).0 == errSecParam)
        #expect(SecCopyErrorMessageString(errSecAuthFailed, nil) != nil)
    }

    @Test func certificatesFromDERAreCheckedAsX509() throws {
        let file = try PKCS12File.make(passphrase: "pw")
        let der = try file.certificateDER
        let certificate = try #require(SecCertificateCreateWithData(nil, der as CFData))
        #expect(SecCertificateCopyData(certificate) as Data == der)
        #expect(SecCertificateCreateWithData(kCFAllocatorDefault, Data(der.dropLast(10)) as CFData) == nil)
        #expect(SecCertificateCreateWithData(nil, Data("garbage".utf8) as CFData) == nil)
    }

    @Test func aPEMIdentityCarriesItsChain() throws {
        let file = try PKCS12File.make(passphrase: "pw")
        let identity = try #require(sec_identity_create(certificateChainPEMFile: file.certificateFile, privateKeyPEMFile: file.keyFile))
        var certificate: SecCertificate?
        #expect(SecIdentityCopyCertificate(sec_identity_copy_ref(identity).takeRetainedValue(), &certificate) == errSecSuccess)
        #expect(certificate.map { SecCertificateCopyData($0) as Data } == (try file.certificateDER))
    }
}
