@preconcurrency import RoutingKit
import Vapor

/// Which of the application's routes take their HTTP/3 request body streamed
/// (``Route/streamsHTTP3RequestBody()``), found as Vapor's router finds a request's route:
/// by method and path, HEAD falling back to GET.
struct HTTP3StreamedBodyRoutes: Sendable {
    private let router: TrieRouter<Bool>?
    /// The methods of the marked routes (HEAD as GET): a request with another one takes its
    /// body collected without asking the router, which is most of them.
    private let markedMethods: Set<String>
    /// The logger a routing `Parameters` needs, made once: `Parameters()` makes one per call.
    private static let routingLogger = Logger(label: "codes.vapor.routingkit")

    /// The routes as they are now; like Vapor's responder, it does not see routes added later.
    init(routes: Routes) {
        let marked = routes.all.filter(\.streamsHTTP3Body)
        markedMethods = Set(marked.map { ($0.method == .HEAD ? .GET : $0.method).rawValue })
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

    /// Whether the route for `method` and `path` streams its body. `path` is read only when a
    /// marked route has that method.
    func streamsBody(method: HTTPMethod, path: @autoclosure () -> String) -> Bool {
        let method = method == .HEAD ? .GET : method
        guard let router, markedMethods.contains(method.rawValue) else { return false }
        let components = path().split(separator: "/").map { String($0).removingPercentEncoding ?? String($0) }
        var parameters = Parameters(Self.routingLogger)
        return router.route(path: [method.rawValue] + components, parameters: &parameters) ?? false
    }
}
