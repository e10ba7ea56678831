@preconcurrency import RoutingKit
import Vapor

/// Which of the application's routes take their HTTP/3 request body streamed
/// (``Route/streamsHTTP3RequestBody()``), found as Vapor's router finds a request's route:
/// by method and path, HEAD falling back to GET.
struct HTTP3StreamedBodyRoutes: Sendable {
    private let router: TrieRouter<Bool>?

    /// The routes as they are now; like Vapor's responder, it does not see routes added later.
    init(routes: Routes) {
        let marked = routes.all.filter(\.streamsHTTP3Body)
        guard !marked.isEmpty else {
            router = nil
            return
        }
        let router = TrieRouter(Bool.self, options: routes.caseInsensitive ? [.caseInsensitive] : [])
        for route in routes.all {
            let path = route.path.filter { if case .constant("") = $0 { return false } else { return true } }
            router.register(route.streamsHTTP3Body, at: [.constant(route.method.rawValue)] + path)
        }
        self.router = router
    }

    /// Whether the route for `method` and `path` streams its body.
    func streamsBody(method: HTTPMethod, path: String) -> Bool {
        guard let router else { return false }
        let components = path.split(separator: "/").map { String($0).removingPercentEncoding ?? String($0) }
        var parameters = Parameters()
        let method = method == .HEAD ? .GET : method
        return router.route(path: [method.rawValue] + components, parameters: &parameters) ?? false
    }
}
