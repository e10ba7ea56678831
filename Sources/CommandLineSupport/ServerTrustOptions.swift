#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import ArgumentParser
import QuicTransport

/// The client tools' flags for whom to trust, with curl's names: `--cacert`, `--pin-sha256`
/// and `-k`. Without any of them, the system trust store.
public struct CertificateTrustOptions: ParsableArguments, Sendable {
    @Option(help: "Trust this CA certificate (PEM) instead of the system store.")
    public var cacert: String?

    @Option(name: .customLong("pin-sha256"), help: "Accept only a server certificate with this SHA-256 fingerprint (hex).")
    public var pinSHA256: String?

    @Flag(name: [.customShort("k"), .customLong("insecure")], help: "Do not verify the server certificate.")
    public var insecure = false

    public init() {}

    public func validate() throws {
        if [cacert != nil, pinSHA256 != nil, insecure].filter({ $0 }).count > 1 {
            throw ValidationError("use only one of --cacert, --pin-sha256 and -k")
        }
    }

    /// The verification the flags ask for; the system trust store when none is given.
    public func certificateVerification() throws(ServerTrustError) -> CertificateVerification {
        if let cacert {
            guard FileManager.default.isReadableFile(atPath: cacert) else { throw ServerTrustError("cannot read CA file \(cacert)") }
            return .caFile(cacert)
        }
        if let pinSHA256 {
            do { return try .pinnedSHA256(hex: pinSHA256) } catch { throw ServerTrustError("\(error)") }
        }
        return insecure ? .insecure : .systemTrustStore
    }
}

/// The HTTP/3 clients' flags for whom to trust and where to connect, with curl's names:
/// `--cacert`, `--pin-sha256`, `-k`, `--resolve` and `--connect-to`.
public struct ServerTrustOptions: ParsableArguments, Sendable {
    @OptionGroup public var certificate: CertificateTrustOptions

    @Option(help: "HOST:PORT:ADDRESS — connect to ADDRESS for HOST:PORT (curl's --resolve).")
    public var resolve: String?

    @Option(name: .customLong("connect-to"), help: "HOST1:PORT1:HOST2:PORT2 — connect to HOST2:PORT2 for requests to HOST1:PORT1, keeping HOST1 for TLS (curl's --connect-to).")
    public var connectTo: String?

    public init() {}

    public func validate() throws {
        if let resolve, resolve.split(separator: ":").count < 3 { throw ValidationError("--resolve takes HOST:PORT:ADDRESS") }
        if let connectTo {
            let parts = connectTo.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 4, UInt16(parts[3]) != nil else { throw ValidationError("--connect-to takes HOST1:PORT1:HOST2:PORT2") }
        }
    }

    /// Where to send packets instead of the URL's host and port (`--connect-to` wins over `--resolve`).
    public var connectTarget: (host: String, port: UInt16)? {
        if let connectTo {
            let parts = connectTo.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
            return (parts[2], UInt16(parts[3])!)
        }
        if let resolve {
            let parts = resolve.split(separator: ":", maxSplits: 2).map(String.init)
            return (String(parts[2].trimming { $0 == "[" || $0 == "]" }), UInt16(parts[1]) ?? 443)
        }
        return nil
    }
}

/// Why the trust flags cannot be used: an unreadable CA file or a malformed pin.
public struct ServerTrustError: Error, CustomStringConvertible, Sendable {
    public let description: String

    init(_ description: String) { self.description = description }
}
