import ExampleTesting
import Testing

/// Headless Chromium loads the Vapor application's page over HTTP/3.
@Suite("VaporTodos over HTTP/3 in Chromium", .serialized, .timeLimit(.minutes(3)))
struct BrowserTests {
    /// The page writes the protocol its own navigation came over into the DOM, which Chromium
    /// prints once the page has loaded.
    @Test func chromiumLoadsThePageOverHTTP3() async throws {
        let todos = try await RunningTodos.start(host: "localhost")
        let dom: String = try await todos.stopping {
            try await Chromium.dumpDOM(port: todos.http3Port, certificatePEM: todos.identity.certificatePEM)
        }
        #expect(dom.contains(#"<strong id="protocol">h3</strong>"#), "chromium's DOM: \(dom.suffix(800))")
    }
}
