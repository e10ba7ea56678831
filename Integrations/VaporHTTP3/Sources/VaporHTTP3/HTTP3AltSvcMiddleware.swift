import H3
import HTTPTypes
import Vapor

/// Adds `Alt-Svc: h3=":PORT"; ma=…` (RFC 7838 §3, RFC 9114 §3.1.1) to every response that went
/// over TCP while the application's HTTP/3 server runs, so a browser that first came over TCP
/// tries HTTP/3 next. `.http3()` puts it first in `app.middleware`, outside `ErrorMiddleware`,
/// so error responses carry it too. Responses over HTTP/3 go without: the client is there.
///
/// The field's value is rendered once, when the server starts (``VaporHTTP3Server/altSvc``):
/// looking the port and the settings up in the application's storage cost some 5k
/// instructions on every response.
///
/// A `Middleware` on futures, not an `AsyncMiddleware`: Vapor runs an async one in tasks of its
/// own, two task hops for every request over either transport.
public struct HTTP3AltSvcMiddleware: Middleware {
    private let server: VaporHTTP3Server

    /// Advertises `application`'s HTTP/3 server while it runs.
    public init(application: Application) {
        self.server = application.http3.server
    }

    public func respond(to request: Request, chainingTo next: any Responder) -> EventLoopFuture<Response> {
        // Over HTTP/3, the version `HTTP3VaporResponder` gives its requests, the client is there.
        guard request.version != HTTP3VaporResponder.version else { return next.respond(to: request) }
        return next.respond(to: request).map { [server] response in
            guard let altSvc = server.altSvc, !response.headers.contains(name: HTTPField.Name.altSvc.canonicalName) else {
                return response
            }
            response.headers.add(name: HTTPField.Name.altSvc.canonicalName, value: altSvc)
            return response
        }
    }
}
