import H3
import Hummingbird
import HummingbirdHTTP3
import HummingbirdTLS
import Logging
import NIOCore
import NIOSSL
import QuicTransport

/// The example application: one router served over HTTPS (HTTP/1.1 on TCP, by Hummingbird's
/// own server) and over HTTP/3 (QUIC on UDP), with one certificate for both.
public enum TodosServer {
    public struct Configuration: Sendable {
        /// Where both servers listen.
        public var host = "localhost"
        public var tcpPort = 8080
        public var http3Port: UInt16 = 4433
        /// PEM files; without them, a self-signed certificate for `localhost` is made at start.
        public var certificateChainFile: String?
        public var privateKeyFile: String?
        /// Where each HTTP/3 connection writes its qlog trace; none when nil.
        public var qlogDirectory: String?
        public var gracePeriod: Duration = .seconds(10)

        public init() {}
    }

    /// What a running application tells once it listens.
    public struct Listening: Sendable {
        public var tcpPort: Int
        public var http3Port: UInt16
    }

    /// The certificate and key, as PEM text: from the files, or made for `localhost`.
    public static func identity(_ configuration: Configuration) throws -> (chainPEM: String, keyPEM: String, generated: SelfSignedCertificate?) {
        if let chain = configuration.certificateChainFile, let key = configuration.privateKeyFile {
            return (try String(contentsOfFile: chain, encoding: .utf8), try String(contentsOfFile: key, encoding: .utf8), nil)
        }
        let generated = try SelfSignedCertificate.generate()
        return (generated.certificatePEM, generated.privateKeyPEM, generated)
    }

    /// The application, ready to `runService()`: Hummingbird's TCP server with TLS, and
    /// HTTP/3 added as one more service.
    public static func makeApplication(
        _ configuration: Configuration,
        identity: (chainPEM: String, keyPEM: String, generated: SelfSignedCertificate?),
        logger: Logger = Logger(label: "HummingbirdTodos"),
        onListening: @escaping @Sendable (Listening) async -> Void = { _ in }
    ) throws -> some ApplicationProtocol {
        let router = try TodosRouter.make(http3Port: configuration.http3Port)
        var http3 = HTTP3Server.Configuration()
        http3.host = configuration.host
        http3.port = configuration.http3Port
        http3.qlogDirectory = configuration.qlogDirectory
        if let chain = configuration.certificateChainFile, let key = configuration.privateKeyFile {
            http3.certificateChainFile = chain
            http3.privateKeyFile = key
        } else {
            http3.identity = identity.generated
        }
        let tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMBytes(Array(identity.chainPEM.utf8)).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(identity.keyPEM.utf8), format: .pem))
        )
        let ports = PortsListening(onListening: onListening)
        var app = Application(
            router: router,
            server: try .tls(.http1(), tlsConfiguration: tls),
            configuration: .init(address: .hostname(configuration.host, port: configuration.tcpPort), serverName: "HummingbirdTodos"),
            onServerRunning: { channel in await ports.tcp(channel.localAddress?.port ?? 0) },
            logger: logger
        )
        app.addServices(
            HTTP3Service(router: router, configuration: http3, gracePeriod: configuration.gracePeriod, logger: logger) { port in
                await ports.http3(port)
            }
        )
        return app
    }
}

/// Tells `onListening` once both servers have reported their ports.
private actor PortsListening {
    private let onListening: @Sendable (TodosServer.Listening) async -> Void
    private var tcpPort: Int?
    private var http3Port: UInt16?

    init(onListening: @escaping @Sendable (TodosServer.Listening) async -> Void) { self.onListening = onListening }

    func tcp(_ port: Int) async {
        tcpPort = port
        await reportIfBoth()
    }

    func http3(_ port: UInt16) async {
        http3Port = port
        await reportIfBoth()
    }

    private func reportIfBoth() async {
        guard let tcpPort, let http3Port else { return }
        await onListening(TodosServer.Listening(tcpPort: tcpPort, http3Port: http3Port))
    }
}
