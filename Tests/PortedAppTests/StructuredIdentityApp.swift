// A client written with Network.framework's 2025 API (iOS and macOS 26), as apps write it: a
// PKCS #12 identity handed to `.tls.localIdentity`, and `.tls.certificateValidator` pinning the
// server's certificate. Only the import differs.
#if canImport(Network)
import Network
#else
import QuicTransport
#endif
import Foundation

/// What one echo over the 2025 API saw.
struct StructuredEchoResult: Sendable {
    var echoed: Data
    var negotiatedALPN: String?
    var remoteIdleTimeout: Int
    var validatorSawLeaf: Bool
}

enum StructuredIdentityApp {
    enum AppError: Error {
        case importFailed(OSStatus)
    }

    /// The identity in a PKCS #12 file, as a `sec_identity_t`.
    static func identity(pkcs12: Data, passphrase: String) throws -> sec_identity_t {
        var items: CFArray?
        let status = SecPKCS12Import(pkcs12 as CFData, [kSecImportExportPassphrase as String: passphrase] as CFDictionary, &items)
        guard status == errSecSuccess else { throw AppError.importFailed(status) }
        let dict = (items as! [[String: Any]])[0]
        let identity = dict[kSecImportItemIdentity as String] as! SecIdentity
        return sec_identity_create(identity)!
    }

    /// Connects to `host`:`port` trusting only `pinned` (DER), echoes `message` on one stream,
    /// and closes the connection with application error 0.
    static func echo(
        host: String, port: UInt16, pinned: Data, identity: sec_identity_t, message: Data
    ) async throws -> StructuredEchoResult {
        let sawLeaf = LeafFlag()
        let endpoint = NWEndpoint.hostPort(host: NWEndpoint.Host(host), port: NWEndpoint.Port(rawValue: port)!)
        return try await withNetworkConnection(to: endpoint) {
            QUIC(alpn: ["quic-echo"])
                .idleTimeout(20_000)
                .tls.localIdentity(identity)
                .tls.certificateValidator { (metadata: sec_protocol_metadata_t, trust: sec_trust_t) async -> Bool in
                    let secTrust = sec_trust_copy_ref(trust).takeRetainedValue()
                    guard let chain = SecTrustCopyCertificateChain(secTrust) as? [SecCertificate], let leaf = chain.first else {
                        return false
                    }
                    sawLeaf.set()
                    return SecCertificateCopyData(leaf) as Data == pinned
                }
        } _: { connection in
            let stream = try await connection.openStream()
            try await stream.send(message, endOfStream: true)
            var echoed = Data()
            while true {
                let (content, metadata) = try await stream.receive(atMost: 65_536)
                echoed.append(content)
                if metadata.endOfStream { break }
            }
            connection.applicationError = NWProtocolQUIC.ApplicationError(code: 0)
            return StructuredEchoResult(
                echoed: echoed, negotiatedALPN: connection.negotiatedALPN, remoteIdleTimeout: connection.remoteIdleTimeout,
                validatorSawLeaf: sawLeaf.value)
        }
    }
}

/// Whether the validator ran, set from its task and read after the connection is ready.
final class LeafFlag: @unchecked Sendable {
    // @unchecked Sendable: `flag` is only touched under `lock`.
    private let lock = NSLock()
    private var flag = false
    func set() { lock.withLock { flag = true } }
    var value: Bool { lock.withLock { flag } }
}
