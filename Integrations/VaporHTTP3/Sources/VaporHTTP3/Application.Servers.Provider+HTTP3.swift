import H3
import Vapor

extension Application.Servers.Provider {
    /// Serves the application over HTTP/3 as well as over Vapor's HTTP/1.1 and HTTP/2 server:
    /// `app.servers.use(.http3())`.
    ///
    /// It is a server provider, like `.http`, rather than a second thing to start, because
    /// Vapor's lifecycle already knows how to run one: the `serve` command starts
    /// `app.server`, a signal or `app.asyncShutdown()` stops it. The server chosen here
    /// (``VaporHTTP3Server``) starts Vapor's own HTTP server and the HTTP/3 server together and
    /// stops both, so nothing else in the application changes: every route, middleware and
    /// error handler serves both protocols.
    ///
    /// It also puts ``HTTP3AltSvcMiddleware`` first in `app.middleware`, so every TCP response,
    /// errors included, tells browsers where HTTP/3 is (RFC 7838); set
    /// `advertisesAlternativeService` to false to leave it silent.
    ///
    /// - Parameter configuration: replaces `app.http3.configuration` when given.
    public static func http3(_ configuration: Application.HTTP3.Configuration? = nil) -> Self {
        .init { application in
            if let configuration { application.http3.configuration = configuration }
            application.middleware.use(HTTP3AltSvcMiddleware(application: application), at: .beginning)
            application.servers.use { $0.http3.server }
        }
    }
}
