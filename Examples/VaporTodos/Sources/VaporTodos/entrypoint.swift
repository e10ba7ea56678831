import Dispatch
import NIOConcurrencyHelpers
import Vapor
import VaporTodosApp

/// `swift run`: HTTP/1.1 on 127.0.0.1:8080 (Vapor's `serve` options apply) and HTTP/3 on UDP
/// 8080. `TLS_CERT` and `TLS_KEY` name PEM files; without them a self-signed certificate is
/// generated and written next to the working directory for clients to trust.
@main
enum Entrypoint {
    /// Runs the application on a blocked main thread, not in an `async` main, which parks the
    /// main thread in `dispatch_main`: Valgrind 3.19 crashes in dispatch's `sigsuspend` there,
    /// and `scripts/bench-frameworks` counts this server's instructions under it.
    static func main() throws {
        let finished = DispatchSemaphore(value: 0)
        let failure = NIOLockedValueBox<(any Error)?>(nil)
        // Detached: a task made here would inherit the main actor, whose thread waits below.
        Task.detached {
            do {
                try await run()
            } catch {
                failure.withLockedValue { $0 = error }
            }
            finished.signal()
        }
        finished.wait()
        if let error = failure.withLockedValue({ $0 }) { throw error }
    }

    static func run() async throws {
        var env = try Environment.detect()
        try LoggingSystem.bootstrap(from: &env)
        let app = try await Application.make(env)
        do {
            try await configure(app)
            try await app.execute()
        } catch {
            app.logger.report(error: error)
            try? await app.asyncShutdown()
            throw error
        }
        try await app.asyncShutdown()
    }
}
