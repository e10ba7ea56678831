import ArgumentParser

/// The server tools' flags for where to listen, which certificate to present, when to validate
/// client addresses and how much one client may hold: h3serve's and `quic-echo serve`'s.
public struct ServerListenOptions: ParsableArguments, Sendable {
    @Option(help: "Address or name to listen on: localhost (the default) is ::1 and 127.0.0.1, :: every address of both IP versions (one dual-stack socket), 0.0.0.0 every IPv4 address.")
    public var host = "localhost"

    @Option(help: "Port to listen on (0 picks a free one).")
    public var port: UInt16 = 4433

    @Option(help: "PEM certificate chain; without it a self-signed certificate is generated.")
    public var cert: String?

    @Option(help: "PEM private key for --cert.")
    public var key: String?

    @Flag(help: "Validate client addresses with a Retry round trip before creating state (RFC 9000 §8.1.2).")
    public var retry = false

    @Option(name: .customLong("retry-threshold"), help: "Above this many handshakes in progress per worker, require Retry of new clients until the count falls (default 128).")
    public var retryThreshold = 128

    @Flag(name: .customLong("early-data"), help: "Accept 0-RTT data from resuming clients. It can be replayed (RFC 8446 §8): use it where repeating a request is harmless.")
    public var earlyData = false

    @Option(name: .customLong("max-connections-per-address"), help: "Most QUIC connections one client (an IPv4 address or an IPv6 /64) may hold at once; past it, CONNECTION_REFUSED (default: no limit).")
    public var maxConnectionsPerAddress: Int?

    public init() {}

    public func validate() throws {
        if (cert == nil) != (key == nil) { throw ValidationError("--cert and --key go together") }
        if retryThreshold < 0 { throw ValidationError("--retry-threshold must be 0 or more (0: Retry for every client)") }
        if let maxConnectionsPerAddress, maxConnectionsPerAddress < 1 {
            throw ValidationError("--max-connections-per-address must be at least 1")
        }
    }
}
