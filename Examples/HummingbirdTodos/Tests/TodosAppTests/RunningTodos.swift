import ExampleTesting
import Foundation
import H3
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import QuicTransport
import ServiceLifecycle
import TodosApp
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The example application, running for real on loopback: HTTPS on a TCP port and HTTP/3 on
/// a UDP port, with a certificate generated for the run.
final class RunningTodos: RunningApplication {
    let tcpPort: Int
    let http3Port: UInt16
    let identity: SelfSignedCertificate
    let group: ServiceGroup
    let running: Task<Void, any Error>
    /// The certificate as a PEM file, for peers that read one (curl, aioquic).
    let certificateFile: String

    private init(tcpPort: Int, http3Port: UInt16, identity: SelfSignedCertificate, group: ServiceGroup, running: Task<Void, any Error>, certificateFile: String) {
        self.tcpPort = tcpPort
        self.http3Port = http3Port
        self.identity = identity
        self.group = group
        self.running = running
        self.certificateFile = certificateFile
    }

    static func start(host: String = "127.0.0.1", gracePeriod: Duration = .seconds(10)) async throws -> RunningTodos {
        var configuration = TodosServer.Configuration()
        configuration.host = host
        configuration.tcpPort = 0
        configuration.http3Port = try freeUDPPort()
        configuration.gracePeriod = gracePeriod
        let identity = try TodosServer.identity(configuration)
        let generated = try #require(identity.generated)
        let (listening, report) = AsyncStream<TodosServer.Listening>.makeStream()
        var logger = Logger(label: "TodosAppTests")
        logger.logLevel = .warning
        let app = try TodosServer.makeApplication(configuration, identity: identity, logger: logger) { report.yield($0) }
        let group = ServiceGroup(configuration: .init(services: [app], gracefulShutdownSignals: [], logger: logger))
        let running = Task { try await group.run() }
        var ports: TodosServer.Listening?
        for await reported in listening {
            ports = reported
            break
        }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("todos-\(UUID()).pem").path
        try generated.certificatePEM.write(toFile: file, atomically: true, encoding: .utf8)
        let bound = try #require(ports, "the application stopped before it listened")
        return RunningTodos(
            tcpPort: bound.tcpPort, http3Port: bound.http3Port, identity: generated, group: group, running: running, certificateFile: file
        )
    }

    func stop() async {
        await group.triggerGracefulShutdown()
        _ = try? await running.value
        try? FileManager.default.removeItem(atPath: certificateFile)
    }

    func http3Client() -> HTTP3Client {
        var configuration = HTTP3Client.Configuration()
        configuration.certificateVerification = .pinnedSHA256(identity.sha256Fingerprint)
        return HTTP3Client(configuration: configuration)
    }

    func request(_ method: HTTPRequest.Method, _ path: String, fields: HTTPFields = [:]) -> HTTPRequest {
        HTTPRequest(method: method, scheme: "https", authority: "localhost:\(http3Port)", path: path, headerFields: fields)
    }

    /// A UDP port nobody holds now, for the HTTP/3 server: `Alt-Svc` names it before it binds.
    static func freeUDPPort() throws -> UInt16 {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(socket, pointer, length) == 0 && getsockname(socket, pointer, &length) == 0
            }
        }
        guard bound else { throw SetupError("no free UDP port: errno \(errno)") }
        return UInt16(bigEndian: address.sin_port)
    }
}
