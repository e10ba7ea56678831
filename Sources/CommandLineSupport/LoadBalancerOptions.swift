import ArgumentParser
import QuicTransport

/// The servers' flags for connection IDs that a QUIC-LB load balancer routes
/// (draft-ietf-quic-load-balancers-21): `--server-id`, `--quic-lb-key` and `--quic-lb-config`.
public struct LoadBalancerOptions: ParsableArguments, Sendable {
    @Option(
        name: .customLong("server-id"),
        help: ArgumentHelp(
            "Issue QUIC-LB connection IDs carrying this server ID (1 to 10 bytes; 1 to 12 with --quic-lb-key), which a load balancer routes by.",
            valueName: "hex"
        )
    )
    public var serverID: String?

    @Option(
        name: .customLong("quic-lb-key"),
        help: ArgumentHelp(
            "Encrypt the server ID with this 16-byte AES-128 key (32 hex digits): QUIC-LB's single-pass encrypted mode.",
            valueName: "hex"
        )
    )
    public var key: String?

    @Option(
        name: .customLong("quic-lb-config"),
        help: ArgumentHelp("The QUIC-LB config rotation codepoint, 0 through 6 (default 0).", valueName: "n")
    )
    public var configRotation: Int?

    @Flag(
        name: .customLong("disable-active-migration"),
        help: "Tell clients not to move to another address (RFC 9000 §18.2): for a server behind a balancer that routes by the 4-tuple only."
    )
    public var disablesActiveMigration = false

    public init() {}

    public func validate() throws {
        _ = try configuration()
    }

    /// The configuration the flags ask for; nil without `--server-id`.
    public func configuration() throws(ValidationError) -> QUICLoadBalancerConfiguration? {
        guard let serverID else {
            if key != nil || configRotation != nil {
                throw ValidationError("--quic-lb-key and --quic-lb-config need --server-id")
            }
            return nil
        }
        let idBytes = try Self.hex(serverID, flag: "--server-id")
        let keyBytes = try key.map { key throws(ValidationError) in try Self.hex(key, flag: "--quic-lb-key") }
        // The configuration checks the codepoint; this only keeps it in a byte.
        guard let rotation = UInt8(exactly: configRotation ?? 0) else {
            throw ValidationError("--quic-lb-config takes 0 through 6 (7 is reserved for unroutable connection IDs)")
        }
        do {
            return try QUICLoadBalancerConfiguration(configRotation: rotation, serverID: idBytes, key: keyBytes)
        } catch {
            throw ValidationError("--server-id \(serverID)\(key == nil ? "" : " with --quic-lb-key"): \(error)")
        }
    }

    /// Hex digits, optionally after `0x`, as bytes.
    private static func hex(_ text: String, flag: String) throws(ValidationError) -> [UInt8] {
        let digits = text.hasPrefix("0x") || text.hasPrefix("0X") ? text.dropFirst(2) : Substring(text)
        guard !digits.isEmpty, let bytes = Hex.decode(digits) else {
            throw ValidationError("\(flag) takes hex digits, two per byte, e.g. 0a01; got '\(text)'")
        }
        return bytes
    }
}

/// Checks a server's `--workers` value: 1 to the most workers one address can have.
public func validateWorkerCount(_ workers: Int) throws {
    let maximum = QUICServerWorkerGroup.maximumWorkerCount
    if !(1...maximum).contains(workers) { throw ValidationError("--workers is 1 to \(maximum)") }
}
