import Foundation
import QuicTestSupport
import Testing

/// h3serve as browsers and caches use a static server, over every version it speaks: one
/// handler answers HTTP/3 (h3get) and HTTP/2 and HTTP/1.1 (Debian's curl, an independent client).
@Suite("h3serve as a static server", .timeLimit(TestEnvironment.minutes(3)))
struct H3ServeStaticFileTests {
    /// A root with `page.html`, a directory `sub` without an index, and a file outside the root
    /// that a symlink inside points at.
    static func makeRoot() throws -> URL {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("static-\(UUID())")
        let root = base.appendingPathComponent("www")
        try FileManager.default.createDirectory(at: root.appendingPathComponent("sub"), withIntermediateDirectories: true)
        try Data("<p>page</p>".utf8).write(to: root.appendingPathComponent("page.html"))
        try Data("in sub".utf8).write(to: root.appendingPathComponent("sub/a b.txt"))
        try Data("secret".utf8).write(to: base.appendingPathComponent("secret.txt"))
        try FileManager.default.createSymbolicLink(
            at: root.appendingPathComponent("sub/escape.txt"), withDestinationURL: base.appendingPathComponent("secret.txt")
        )
        return root
    }

    static func curl(_ arguments: [String]) async throws -> (status: Int32, output: String, error: String) {
        let run = try ChildProcess(try TestEnvironment.systemTool("curl", package: "curl"), ["-sk"] + arguments)
        let status = try await run.waitForExit()
        return (status, run.standardOutput, run.standardError)
    }

    /// A cache revalidates with the ETag or date it was given and gets 304 without a body, on
    /// HTTP/3, HTTP/2 and HTTP/1.1 alike; the access log records each with its version.
    @Test func conditionalGETsAreAnswered304OnEveryVersion() async throws {
        let root = try Self.makeRoot()
        let log = root.deletingLastPathComponent().appendingPathComponent("access.log")
        let (server, port) = try await startH3serve(root: root, ["--cache-control", "max-age=60", "--access-log", log.path])
        defer { server.stop() }
        let url = "https://127.0.0.1:\(port)/page.html"

        let first = try await runH3get(["-k", "--http3-only", "-o", "/dev/null", "-w", "%{http_code} %header{etag}|%header{last-modified}", url])
        #expect(first.status == 0, "\(first.error)")
        let parts = first.output.dropFirst(4).split(separator: "|").map(String.init)
        #expect(first.output.hasPrefix("200 ") && parts.count == 2, "\(first.output)")
        let (etag, lastModified) = (parts[0], parts[1])
        #expect(etag.hasPrefix("\"") && lastModified.hasSuffix(" GMT"), "\(first.output)")

        let revalidated = try await runH3get(["-k", "--http3-only", "-H", "If-None-Match: \(etag)", "-i", "-w", "%{http_code} %{size_download}", url])
        #expect(revalidated.output.hasPrefix("HTTP/3 304\r\n"), "\(revalidated.output)")
        #expect(revalidated.output.lowercased().contains("cache-control: max-age=60\r\n"), "\(revalidated.output)")
        #expect(revalidated.output.hasSuffix("\r\n\r\n304 0"), "no body: \(revalidated.output)")

        for version in ["--http2", "--http1.1"] {
            let byTag = try await Self.curl([version, "-o", "/dev/null", "-w", "%{http_code} %{size_download}", "-H", "If-None-Match: \(etag)", url])
            #expect(byTag.output == "304 0", "\(version): \(byTag.output) \(byTag.error)")
            let byDate = try await Self.curl([version, "-o", "/dev/null", "-w", "%{http_code}", "-H", "If-Modified-Since: \(lastModified)", url])
            #expect(byDate.output == "304", "\(version): \(byDate.output)")
            let changed = try await Self.curl([version, "-w", " %{http_code}", "-H", "If-None-Match: \"other\"", url])
            #expect(changed.output == "<p>page</p> 200", "\(version): \(changed.output)")
        }

        let logged = { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }
        #expect(await eventually { logged().split(separator: "\n").count >= 8 }, "\(logged())")
        let lines = logged().split(separator: "\n")
        for version in ["HTTP/3", "HTTP/2.0", "HTTP/1.1"] {
            #expect(lines.contains { $0.hasPrefix("127.0.0.1 - - [") && $0.contains("\"GET /page.html \(version)\" 304 0 ") }, "\(version): \(logged())")
        }
        let curlLine = try #require(lines.first { $0.contains("HTTP/1.1\" 200") })
        #expect(curlLine.contains("\"-\" \"curl/"), "user agent: \(curlLine)")
        #expect(curlLine.contains(" rt=0.") && curlLine.hasSuffix(" priority=-"), "\(curlLine)")
        #expect(!server.standardError.contains("GET /page.html"), "the log went to the file, not stderr")
    }

    /// `--browse` lists a directory, redirects it without its slash so relative links work, and
    /// shows nothing outside the root.
    @Test func browsingListsDirectoriesAndRedirectsToTheirSlash() async throws {
        let root = try Self.makeRoot()
        let (server, port) = try await startH3serve(root: root, ["--browse", "-q"])
        defer { server.stop() }
        let base = "https://127.0.0.1:\(port)"
        let redirect = try await Self.curl(["--http1.1", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", "\(base)/sub?x=1"])
        #expect(redirect.output == "301 \(base)/sub/?x=1", "\(redirect.output)")
        let page = try await Self.curl(["--http2", "-L", "\(base)/sub"])
        #expect(page.output.contains("<a href=\"./a%20b.txt\">a b.txt</a>"), "\(page.output)")
        #expect(page.output.contains("<a href=\"../\">../</a>"))
        #expect(!page.output.contains("escape.txt"), "a symlink out of the root is not listed")
        let json = try await runH3get(["-k", "--http3-only", "-H", "Accept: application/json", "\(base)/sub/"])
        let entries = try #require(try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [[String: Any]], "\(json.output)")
        #expect(entries.map { $0["name"] as? String } == ["a b.txt"])
        // HEAD of a redirect or a miss over HTTP/3: a head without content, or nghttp3 refuses it.
        for (path, status) in [("/sub", "301"), ("/missing", "404")] {
            let head = try await runH3get(["-k", "--http3-only", "-I", base + path])
            #expect(head.status == 0 && head.output.hasPrefix("HTTP/3 \(status)\r\n"), "\(path): \(head.output) \(head.error)")
        }
        let file = try await Self.curl(["--http1.1", "\(base)/sub/a%20b.txt"])
        #expect(file.output == "in sub")

        // Without --browse, a directory without index.html is not found, and not redirected.
        let (plain, plainPort) = try await startH3serve(root: root, ["-q"])
        defer { plain.stop() }
        let missing = try await Self.curl(["--http1.1", "-o", "/dev/null", "-w", "%{http_code}", "https://127.0.0.1:\(plainPort)/sub"])
        #expect(missing.output == "404")
    }

    @Test func precompressedFilesReachClientsThatAcceptThem() async throws {
        let root = try Self.makeRoot()
        let original = String(repeating: "compress me ", count: 100)
        try Data(original.utf8).write(to: root.appendingPathComponent("big.txt"))
        let gzip = try ChildProcess(URL(fileURLWithPath: "/bin/gzip"), ["-k", root.appendingPathComponent("big.txt").path])
        #expect(try await gzip.waitForExit() == 0, "\(gzip.standardError)")
        let (server, port) = try await startH3serve(root: root, ["--precompressed", "-q"])
        defer { server.stop() }
        let url = "https://127.0.0.1:\(port)/big.txt"
        // curl --compressed asks for gzip (and br where built with it) and decodes what comes.
        let decoded = try await Self.curl(["--http2", "--compressed", "-D", "-", url])
        #expect(decoded.output.lowercased().contains("content-encoding: gzip"), "\(decoded.output)")
        #expect(decoded.output.lowercased().contains("vary: accept-encoding"))
        #expect(decoded.output.hasSuffix(original))
        let identity = try await Self.curl(["--http1.1", "-D", "-", url])
        #expect(!identity.output.lowercased().contains("content-encoding"), "\(identity.output)")
        #expect(identity.output.lowercased().contains("vary: accept-encoding"), "\(identity.output)")
        #expect(identity.output.hasSuffix(original))
    }

    @Test func badOptionsFailAtStartAndSayWhy() async throws {
        let root = try Self.makeRoot()
        let badCache = try ChildProcess(try TestEnvironment.executable("h3serve"), ["--port", "0", "--root", root.path, "--cache-control", "max age"])
        #expect(try await badCache.waitForExit() != 0)
        #expect(badCache.standardError.contains("--cache-control 'max age' is not a Cache-Control value"), "\(badCache.standardError)")
        let unwritable = "/nonexistent-\(UUID())/access.log"
        let badLog = try ChildProcess(try TestEnvironment.executable("h3serve"), ["--port", "0", "--root", root.path, "--access-log", unwritable])
        #expect(try await badLog.waitForExit() == 1)
        #expect(badLog.standardError.contains("--access-log: cannot write \(unwritable): No such file or directory"), "\(badLog.standardError)")
    }
}
