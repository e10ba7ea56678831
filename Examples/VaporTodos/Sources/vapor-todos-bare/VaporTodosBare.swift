import Dispatch
import H3
import HTTPTypes
import QuicTransport
import VaporTodosApp

#if canImport(Glibc)
import Glibc
#endif

/// The benchmark's baseline (`scripts/bench-frameworks`): the Vapor application's `/kib`
/// answer, 1 KiB, from a bare `HTTP3Server` handler, so that the difference is what Vapor and
/// its adapter cost per request. Hummingbird's `todos-bare` is the same handler; each example
/// has its own so that its benchmark builds from its own package.
///
///     vapor-todos-bare PORT
@main
struct VaporTodosBare {
    /// Runs on a blocked main thread, not one parked in `dispatch_main`, where Valgrind 3.19
    /// crashes in dispatch's `sigsuspend`.
    static func main() {
        let finished = DispatchSemaphore(value: 0)
        // Detached: a task made here would inherit the main actor, whose thread waits below.
        Task.detached {
            do {
                try await serve()
            } catch {
                print("vapor-todos-bare: \(error)")
                exit(1)
            }
            finished.signal()
        }
        finished.wait()
    }

    static func serve() async throws {
        let arguments = CommandLine.arguments
        guard arguments.count == 2, let port = UInt16(arguments[1]) else {
            print("usage: vapor-todos-bare PORT")
            exit(2)
        }
        var configuration = HTTP3Server.Configuration()
        configuration.host = "127.0.0.1"
        configuration.port = port
        let identity = try SelfSignedCertificate.generate()
        configuration.identity = identity
        let body = TodosKiB.body
        let server = try HTTP3Server(configuration: configuration) { _ in
            HTTP3ServerResponse(status: .ok, headerFields: [.contentType: "application/octet-stream"], body: body)
        }
        let bound = try await server.start()
        print("HTTP/3 https://127.0.0.1:\(bound)/kib  SHA-256 \(identity.sha256FingerprintHex)")
        fflush(nil)  // also into a pipe, where stdout is fully buffered
        while true { try await Task.sleep(for: .seconds(3600)) }
    }
}
