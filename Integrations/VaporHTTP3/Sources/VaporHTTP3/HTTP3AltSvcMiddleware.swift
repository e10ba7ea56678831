import H3
import HTTPTypes
import Vapor

/// Adds `Alt-Svc: h3=":PORT"; ma=…` (RFC 7838 §3, RFC 9114 §3.1.1) to every response that went
/// over TCP while the application's HTTP/3 server runs, so a browser that first came over TCP
/// tries HTTP/3 next. `.http3()` puts it first in `app.middleware`, outside `ErrorMiddleware`,
/// so error responses carry it too. Responses over HTTP/3 go without: the client is there.
///
/// A `Middleware` on futures, not an `AsyncMiddleware`: Vapor runs an async one in tasks of its
/// own, two task hops for every request over either transport.
public struct HTTP3AltSvcMiddleware: Middleware {
    public init() {}

    public func respond(to request: Request, chainingTo next: any Responder) -> EventLoopFuture<Response> {
        guard request.http3 == nil else { return next.respond(to: request) }
        return next.respond(to: request).map { response in
            let http3 = request.application.http3
            let configuration = http3.configuration
            guard configuration.advertisesAlternativeService, let port = http3.port,
                  !response.headers.contains(name: HTTPField.Name.altSvc.canonicalName)
            else { return response }
            let service = AltService(protocolID: HTTP3.alpn, port: port, maxAge: configuration.alternativeServiceMaxAge)
            response.headers.add(name: HTTPField.Name.altSvc.canonicalName, value: service.description)
            return response
        }
    }
}
