import ArgumentParser
import Dispatch
import Hummingbird
import TodosApp

#if canImport(Glibc)
import Glibc
#endif

/// The entry point: the command on a blocked main thread instead of one parked in
/// `dispatch_main`, where Valgrind 3.19 (Debian 12's) crashes in dispatch's `sigsuspend`; so
/// `scripts/bench-frameworks` can count the application's instructions under callgrind.
@main
enum HummingbirdTodosMain {
    static func main() {
        let finished = DispatchSemaphore(value: 0)
        // Detached: a task made here would inherit the main actor, whose thread waits below.
        Task.detached {
            await HummingbirdTodos.main()
            finished.signal()
        }
        finished.wait()
    }
}

/// `swift run HummingbirdTodos`: the todo application over HTTPS and HTTP/3 on localhost.
struct HummingbirdTodos: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "A Hummingbird application served over HTTP/1.1 (TLS) and HTTP/3 at once."
    )

    @Option(help: "Address both servers listen on.") var host = "localhost"
    @Option(help: "TCP port of the HTTPS server.") var port = 8080
    @Option(name: .customLong("http3-port"), help: "UDP port of the HTTP/3 server (advertised in Alt-Svc).") var http3Port: UInt16 = 4433
    @Option(help: "Certificate chain (PEM); a self-signed one for localhost is made without it.") var cert: String?
    @Option(help: "Private key (PEM) of --cert.") var key: String?
    @Option(name: .customLong("qlog-dir"), help: "Write a qlog trace of each HTTP/3 connection here.") var qlogDirectory: String?

    func validate() throws {
        if (cert == nil) != (key == nil) { throw ValidationError("--cert and --key go together") }
    }

    func run() async throws {
        var configuration = TodosServer.Configuration()
        configuration.host = host
        configuration.tcpPort = port
        configuration.http3Port = http3Port
        configuration.certificateChainFile = cert
        configuration.privateKeyFile = key
        configuration.qlogDirectory = qlogDirectory
        let identity = try TodosServer.identity(configuration)
        let host = host
        let app = try TodosServer.makeApplication(configuration, identity: identity) { listening in
            print("HTTPS  https://\(host):\(listening.tcpPort)/")
            print("HTTP/3 https://\(host):\(listening.http3Port)/  (advertised in Alt-Svc)")
            if let generated = identity.generated {
                print("self-signed certificate, SHA-256 \(generated.sha256FingerprintHex): h3get --pin-sha256 \(generated.sha256FingerprintHex) https://localhost:\(listening.http3Port)/todos")
            }
            fflush(nil)  // also into a pipe, where stdout is fully buffered
        }
        try await app.runService()
    }
}
