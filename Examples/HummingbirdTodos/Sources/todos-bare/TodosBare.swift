import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import H3
import HTTPTypes
import QuicTransport
import Hummingbird
import HummingbirdHTTP3
import Logging
import NIOCore
import ServiceLifecycle
import TodosApp

/// The benchmark's baseline (`scripts/bench-frameworks`): the Hummingbird application's `/kib`
/// answer, 1 KiB, from a bare `HTTP3Server` handler, so that the difference is what the
/// framework and its adapter cost per request.
///
///     todos-bare PORT [--through-adapter | --framework-fields]
///     todos-bare --hummingbird-only COUNT
///
/// `--framework-fields` answers with the header fields Hummingbird's response carries, not
/// only `content-type`: `content-length` and `date` (made once a second), so that what the
/// extra fields cost to encode and send is not counted as the adapter's.
@main
struct TodosBare {
    /// Runs on a blocked main thread, not one parked in `dispatch_main`, where Valgrind 3.19
    /// crashes in dispatch's `sigsuspend`.
    static func main() {
        let finished = DispatchSemaphore(value: 0)
        // Detached: a task made here would inherit the main actor, whose thread waits below.
        Task.detached {
            do {
                try await serve()
            } catch {
                print("todos-bare: \(error)")
                exit(1)
            }
            finished.signal()
        }
        finished.wait()
    }

    static func serve() async throws {
        let arguments = CommandLine.arguments
        if arguments.count == 3, arguments[1] == "--hummingbird-only", let count = Int(arguments[2]) {
            return try await HummingbirdOnly.run(count: count)
        }
        guard (2...3).contains(arguments.count), let port = UInt16(arguments[1]),
            arguments.count == 2 || ["--through-adapter", "--framework-fields"].contains(arguments[2])
        else {
            print("usage: todos-bare PORT [--through-adapter | --framework-fields] | --hummingbird-only COUNT")
            exit(2)
        }
        var configuration = HTTP3Server.Configuration()
        configuration.host = "127.0.0.1"
        configuration.port = port
        let identity = try SelfSignedCertificate.generate()
        configuration.identity = identity
        let announce: @Sendable (UInt16) async -> Void = { bound in
            print("HTTP/3 https://127.0.0.1:\(bound)/kib  SHA-256 \(identity.sha256FingerprintHex)")
            fflush(nil)  // also into a pipe, where stdout is fully buffered
        }
        if arguments.count == 3, arguments[2] == "--through-adapter" {
            // The same answer through HTTP3Service with a responder of one closure: what the
            // adapter costs without Hummingbird's router and middleware.
            let kib = ByteBuffer(bytes: TodosKiB.body)
            let responder = CallbackResponder<BasicRequestContext> { _, _ in
                Response(status: .ok, headers: [.contentType: "application/octet-stream"], body: .init(byteBuffer: kib))
            }
            let service = HTTP3Service(responder: responder, configuration: configuration, onServerRunning: announce)
            try await ServiceGroup(services: [service], gracefulShutdownSignals: [], logger: Logger(label: "todos-bare")).run()
            return
        }
        let body = TodosKiB.body
        let server: HTTP3Server
        if arguments.count == 3 {
            // The date made once a second, as the adapter makes it (`HTTPDateField`).
            let dates = HTTPDateField()
            let contentLength = String(body.count)
            server = try HTTP3Server(configuration: configuration) { _ in
                var fields: HTTPFields = [.contentType: "application/octet-stream", .contentLength: contentLength]
                fields.append(dates.current)
                return HTTP3ServerResponse(status: .ok, headerFields: fields, body: body)
            }
        } else {
            server = try HTTP3Server(configuration: configuration) { _ in
                HTTP3ServerResponse(status: .ok, headerFields: [.contentType: "application/octet-stream"], body: body)
            }
        }
        await announce(try await server.start())
        while true { try await Task.sleep(for: .seconds(3600)) }
    }
}
