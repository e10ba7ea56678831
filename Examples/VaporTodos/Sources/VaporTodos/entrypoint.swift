import Vapor
import VaporTodosApp

/// `swift run`: HTTP/1.1 on 127.0.0.1:8080 (Vapor's `serve` options apply) and HTTP/3 on UDP
/// 8080. `TLS_CERT` and `TLS_KEY` name PEM files; without them a self-signed certificate is
/// generated and written next to the working directory for clients to trust.
@main
enum Entrypoint {
    static func main() async throws {
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
