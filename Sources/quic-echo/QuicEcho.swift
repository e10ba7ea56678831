import ArgumentParser
import CommandLineSupport
import Logging
import QuicTransport

/// The entry point: glibc's malloc cache sized for a QUIC loop's batches (`runWithMallocTunables`),
/// then the command, on a blocked main thread (`runWithBlockedMainThread` says why).
@main
enum QuicEchoMain {
    static func main() {
        runWithMallocTunables()
        runWithBlockedMainThread { await QuicEcho.main() }
    }
}

/// `quic-echo`: serves and connects with the echo protocol documented in QuicTransport's
/// Command-line tools article (`Sources/QuicTransport/QuicTransport.docc/CommandLineTools.md`).
struct QuicEcho: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "quic-echo",
        abstract: "A QUIC echo server and client on ngtcp2, with the Network.framework-style QuicTransport API.",
        subcommands: [Serve.self, Connect.self]
    )

    /// `--stats` alone means `--stats=text`.
    static func main() async { await mainAcceptingBareStats() }
}


/// Options both subcommands share.
struct CommonOptions: ParsableArguments {
    @Option(help: "ALPN protocol ID.")
    var alpn = "quic-echo"

    @Option(name: .customLong("qlog-dir"), help: "Write one qlog trace per connection here (default: $QLOGDIR).")
    var qlogDirectory: String?

    @Option(name: [.customLong("cipher"), .customLong("ciphers")], help: "Cipher suites to offer: aes128gcm, aes256gcm, chacha20 (comma-separated).")
    var ciphers: String?

    @Option(help: "Congestion control: cubic (default), reno, bbr or bbr2.")
    var cc: QUICCongestionControl = .cubic

    @Flag(name: .shortAndLong, help: "Verbose logging (-vv for ngtcp2's own log).")
    var verbose: Int

    func bootstrapLogging() {
        logToStandardError(level: verbose >= 2 ? .trace : verbose == 1 ? .debug : .notice)
    }

    func makeOptions() throws -> NWProtocolQUIC.Options {
        let options = NWProtocolQUIC.Options(alpn: [alpn])
        if let qlogDirectory { options.qlogDirectory = qlogDirectory }
        options.congestionControl = cc
        if let ciphers {
            options.tls.cipherSuites = try ciphers.split(separator: ",").map { name in
                guard let suite = QUICCipherSuite(rawValue: String(name.trimmingASCIIWhitespace())) else {
                    throw ValidationError("unknown cipher '\(name)'; use aes128gcm, aes256gcm or chacha20")
                }
                return suite
            }
        }
        return options
    }
}

extension QUICCongestionControl: ExpressibleByArgument {}

extension NWEndpoint.Port: ExpressibleByArgument {
    public init?(argument: String) { self.init(argument) }
}
