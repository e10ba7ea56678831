import H3
import HTTPTypes
import Hummingbird

/// Adds `Alt-Svc` (RFC 7838 §3) to every response, so that a client that came over TCP,
/// a browser above all, learns that the same origin answers over HTTP/3 and moves there.
///
/// Add it to the router the TCP server uses; responses over HTTP/3 then carry it too, which
/// is harmless (a client already on `h3` keeps it).
public struct AltSvcMiddleware<Context: RequestContext>: RouterMiddleware {
    /// The field value, as sent: for example `h3=":4433"; ma=86400`.
    public let fieldValue: String

    /// Advertises HTTP/3 on `http3Port` of the same host, for `maxAge` seconds.
    public init(http3Port: UInt16, maxAge: UInt64 = AltService.defaultMaxAge) {
        self.init(alternatives: [AltService(protocolID: HTTP3.alpn, port: http3Port, maxAge: maxAge)])
    }

    /// Advertises these alternatives, in order of preference.
    public init(alternatives: [AltService]) {
        self.fieldValue = alternatives.map(\.description).joined(separator: ", ")
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            var response = try await next(request, context)
            response.headers[.altSvc] = fieldValue
            return response
        } catch {
            // An error becomes its response further out; it carries the field there.
            throw ErrorWithAltSvc(original: error, fieldValue: fieldValue)
        }
    }
}

/// An error thrown through `AltSvcMiddleware`, whose response gains `Alt-Svc`: a client that
/// met a 404 over TCP still learns of HTTP/3.
struct ErrorWithAltSvc: HTTPResponseError {
    let original: any Error
    let fieldValue: String

    var status: HTTPResponse.Status { (original as? any HTTPResponseError)?.status ?? .internalServerError }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        var response = try (original as? any HTTPResponseError)?.response(from: request, context: context)
            ?? Response(status: .internalServerError)
        response.headers[.altSvc] = fieldValue
        return response
    }
}
