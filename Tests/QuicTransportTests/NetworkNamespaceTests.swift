import Foundation
import QuicTestSupport
import QuicTransport
import Testing

/// The `Network` enum lets `Network.NWConnection` compile without a module named `Network`; it
/// must name every Apple-named public type, so a new one cannot be forgotten.
@Suite struct NetworkNamespaceTests {
    /// The public top-level types of QuicTransport that Network.framework does not have: Security's
    /// C API, and our own additions. A new public type goes either here or into `Network`.
    static let notNetworkFramework: Set<String> = [
        // Security.framework's C API and types.
        "SecCertificate", "SecTrust", "sec_identity_t", "sec_protocol_metadata_t", "sec_protocol_options_t",
        "sec_protocol_verify_complete_t", "sec_protocol_verify_t", "sec_trust_t", "tls_protocol_version_t",
        "SecIdentity",
        // Core Foundation's and Dispatch's C names, spelled over Swift's types for Security's calls.
        "CFData", "CFArray", "CFDictionary", "CFString", "CFAllocator", "OSStatus", "dispatch_data_t", "__DispatchData",
        // Ours.
        "CertificateVerification", "CertificateVerifier", "QUICCipherSuite", "QUICCongestionControl",
        "QUICDataTransferReport", "QUICError", "QUICEstablishmentReport", "QUICKeyUpdateError",
        "QUICLoadBalancerConfiguration", "QUICLoadBalancerConfigurationError", "QUICMigrationError",
        "QUICPathStatistics", "QUICRememberedTransportParameters", "QUICServerWorkerStatistics",
        "QUICSessionTicketStore", "QUICStreamTable", "SelfSignedCertificate", "TLSError", "TLSVerificationFailure",
        "URIHost", "Network",
    ]

    /// Names declared `public` at the top level of the module's sources.
    static func publicTopLevelTypes() throws -> Set<String> {
        let sources = TestEnvironment.repositoryRoot.appendingPathComponent("Sources/QuicTransport")
        let files = try #require(FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil))
        let declaration = try Regex(#"^public (?:final )?(?:class|struct|enum|protocol|typealias|actor) ([A-Za-z_0-9]+)"#)
            .anchorsMatchLineEndings()
        var names: Set<String> = []
        for case let file as URL in files where file.pathExtension == "swift" {
            let text = try String(contentsOf: file, encoding: .utf8)
            for match in text.matches(of: declaration) {
                if let name = match.output[1].substring { names.insert(String(name)) }
            }
        }
        return names
    }

    /// The typealiases inside `enum Network`.
    static func namespaceMembers() throws -> Set<String> {
        let file = TestEnvironment.repositoryRoot.appendingPathComponent("Sources/QuicTransport/API/Network.swift")
        let text = try String(contentsOf: file, encoding: .utf8)
        let alias = try Regex(#"^    public typealias ([A-Za-z_0-9]+) = QuicTransport\.([A-Za-z_0-9]+)$"#).anchorsMatchLineEndings()
        var names: Set<String> = []
        for match in text.matches(of: alias) {
            let (name, target) = (String(match.output[1].substring ?? ""), String(match.output[2].substring ?? ""))
            #expect(name == target, "Network.\(name) names this module's \(name)")
            names.insert(name)
        }
        return names
    }

    @Test func everyAppleNamedTypeIsInTheNamespaceAndNothingElse() throws {
        let types = try Self.publicTopLevelTypes()
        let members = try Self.namespaceMembers()
        #expect(types.contains("NWConnection") && types.count > 40, "the scan found the module's types")
        let unclassified = types.subtracting(members).subtracting(Self.notNetworkFramework)
        #expect(unclassified.isEmpty, "add these to enum Network (Apple's names) or to notNetworkFramework: \(unclassified.sorted())")
        #expect(members.isSubset(of: types), "Network names types that do not exist: \(members.subtracting(types).sorted())")
        let nwNamed = types.filter { $0.hasPrefix("NW") }
        #expect(nwNamed.isSubset(of: members), "every NW type is Network.framework's: \(nwNamed.subtracting(members).sorted())")
        #expect(members.isDisjoint(with: Self.notNetworkFramework))
    }

    /// Qualified names resolve to the same types as the plain ones.
    @Test func qualifiedNamesAreTheSameTypes() {
        #expect(Network.NWConnection.self == NWConnection.self)
        #expect(Network.NWEndpoint.Port.self == NWEndpoint.Port.self)
        #expect(Network.NWProtocolQUIC.Options.self == NWProtocolQUIC.Options.self)
        #expect(Network.NetworkConnection<Network.QUIC>.self == NetworkConnection<QUIC>.self)
        let port: Network.NWEndpoint.Port = 4433
        #expect(port.rawValue == 4433)
    }

    /// Network.framework's free function is reachable qualified too, and returns what its body
    /// returns (the body does not wait for the tunnel, so nothing needs to listen).
    @Test func qualifiedWithNetworkConnectionRunsItsBody() async throws {
        let endpoint = Network.NWEndpoint.hostPort(host: "127.0.0.1", port: 9)
        let result = try await Network.withNetworkConnection(to: endpoint, using: { Network.QUIC(alpn: ["x"]) }) { connection in
            connection.state == .setup ? 42 : 0
        }
        #expect(result == 42)
    }
}
