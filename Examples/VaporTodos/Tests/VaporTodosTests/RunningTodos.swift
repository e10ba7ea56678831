import ExampleTesting
import Foundation
import H3
import HTTPTypes
import QuicTransport
import Vapor
import VaporHTTP3
import VaporTodosApp

/// The example application as `configure(_:)` sets it up, running for real on loopback:
/// Vapor's HTTP/1.1 server on a TCP port and HTTP/3 on a UDP port, both chosen by the system,
/// with a certificate generated for the run.
struct RunningTodos: RunningApplication {
    let app: Application
    let identity: SelfSignedCertificate
    /// The certificate as a PEM file, for peers that read one (curl, aioquic).
    let certificateFile: String

    var tcpPort: Int { app.http.server.shared.localAddress!.port! }
    var http3Port: UInt16 { app.http3.port! }

    /// The package's folder, whose `Public/` holds the page.
    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path + "/"

    static func start(host: String = "127.0.0.1", gracePeriod: Duration = .seconds(10)) async throws -> RunningTodos {
        let app = try await Application.make(.testing)
        app.directory = DirectoryConfiguration(workingDirectory: packageRoot)
        do {
            try await configure(app)
            app.http.server.configuration.hostname = host
            app.http.server.configuration.port = 0
            app.http3.configuration.port = 0
            app.http3.configuration.shutdownGracePeriod = gracePeriod
            let identity = try SelfSignedCertificate.generate()
            app.http3.configuration.server.identity = identity
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("vapor-todos-\(UUID()).pem").path
            try identity.certificatePEM.write(toFile: file, atomically: true, encoding: .utf8)
            try await app.server.start(address: nil)
            return RunningTodos(app: app, identity: identity, certificateFile: file)
        } catch {
            try? await app.asyncShutdown()
            throw error
        }
    }

    /// Vapor's shutdown: both servers stop, HTTP/3 with GOAWAY and a grace period.
    func stop() async {
        await app.server.shutdown()
        await stopped()
    }

    /// What is left once the servers have stopped: the application, and the certificate's file.
    func stopped() async {
        try? await app.asyncShutdown()
        try? FileManager.default.removeItem(atPath: certificateFile)
    }

    /// An HTTP/3 client that trusts only this run's certificate.
    func http3Client() -> HTTP3Client {
        var configuration = HTTP3Client.Configuration()
        configuration.certificateVerification = .pinnedSHA256(identity.sha256Fingerprint)
        return HTTP3Client(configuration: configuration)
    }

    func request(_ method: HTTPRequest.Method, _ path: String, fields: HTTPFields = [:]) -> HTTPRequest {
        HTTPRequest(method: method, scheme: "https", authority: "localhost:\(http3Port)", path: path, headerFields: fields)
    }
}
